"""Loopback servers for tests and benchmarks: free ports and a `chroma run` that is stopped afterwards."""

import contextlib
import socket
import subprocess
import sys
import time
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
