"""Loopback servers for tests and benchmarks: free ports, a `chroma run` that is stopped afterwards, and a
fake OpenAI-compatible chat server that streams its reply slowly."""

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def chroma_server(data_dir: Path, timeout_s: float = 30):
    """`chroma run` on a free loopback port; yields its URL once it listens, stops it afterwards."""
    port = free_port()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "chroma"), "run", "--path", str(data_dir),
                             "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout_s
        while not listening(port):
            if proc.poll() is not None:
                raise RuntimeError("chroma run exited")
            if time.monotonic() > deadline:
                raise RuntimeError(f"chroma run did not listen within {timeout_s} s")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class SlowChatServer(ThreadingHTTPServer):
    """POST /v1/chat/completions streams `reply` (server-sent events, OpenAI's chunk format) a few
    characters every `interval_s`; `streaming` is set once a reply has started, `stopped` when one
    ended because the client went away."""

    daemon_threads = True

    def __init__(self, reply: str, interval_s: float = 0.5, piece: int = 3):
        super().__init__(("127.0.0.1", 0), _SlowChatHandler)
        self.reply, self.interval_s, self.piece = reply, interval_s, piece
        self.streaming = threading.Event()
        self.stopped = threading.Event()
        self.closing = threading.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _SlowChatHandler(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        server: SlowChatServer = self.server
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            for start in range(0, len(server.reply), server.piece):
                self._event({"role": "assistant", "content": server.reply[start:start + server.piece]})
                server.streaming.set()
                if server.closing.wait(server.interval_s):
                    return
            self.wfile.write(b"data: [DONE]\n\n")
        except OSError:   # the client is gone
            server.stopped.set()

    def _event(self, delta: dict) -> None:
        chunk = {"id": "chatcmpl-slow", "object": "chat.completion.chunk", "created": 0, "model": "slow",
                 "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.flush()

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def slow_chat_server(reply: str, interval_s: float = 0.5):
    """A SlowChatServer serving in a thread; yields it, shuts it down afterwards."""
    server = SlowChatServer(reply, interval_s)
    thread = threading.Thread(target=server.serve_forever, name="slow-chat-server", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.closing.set()
        server.shutdown()
        server.server_close()
        thread.join()
