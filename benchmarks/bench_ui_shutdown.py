"""How long `rag ui` takes to exit after SIGINT or SIGTERM: idle with the model loaded, and mid-answer.

    .venv/bin/python benchmarks/bench_ui_shutdown.py [--runs 5] [--backend local]

Starts `rag ui` afresh for every run of every case ({SIGINT, SIGTERM} x {idle, streaming}) on
the index under a scratch RAG_HOME (built once, first), and prints seconds from the signal to
the process's exit (median, max), its exit statuses and how many runs ended by the forced
exit (the deadline or the grace in ui/app.py's serve). "idle": an off-corpus question has
been answered (refused by the retrieval gate, without the LLM), which proves that the
models are loaded. "streaming": the first answer text has reached the `ask` endpoint.

By default the LLM is a fake OpenAI-compatible server that streams slowly
(tests/servers.py); --backend local uses the bundled model (1.1 GB, ~2 GB of memory, a
minute or more per streaming run on 2 cores). Prints numbers; asserts nothing.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))   # the test helpers: servers.py, fakes.py
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from fakes import reply  # noqa: E402
from servers import free_port, slow_chat_server  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
QUESTION = "what methods reduce reasoning length?"
OFF_CORPUS = "zqxj vbnm wrtp"          # nothing in the corpus is like it: refused before the LLM
SLOW_REPLY = json.dumps(reply(("GFPO samples larger groups and trains on responses filtered by length.", [1])))
FORCED = ("exiting without waiting", "exiting at once")
READY_TIMEOUT_S = 600
EXIT_TIMEOUT_S = 60


def start_ui(env: dict, log) -> tuple[subprocess.Popen, str]:
    """`rag ui` on a free port; returns the process and its URL once it has printed its URL line."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "rag", "ui", "--port", str(port)], cwd=REPO, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, text=True)
    line = proc.stdout.readline()
    if "serving the chat" not in line:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"rag ui did not start (see {log.name})")
    return proc, f"http://127.0.0.1:{port}/"


def ask(url: str, question: str):
    """The `ask` endpoint's server-sent event lines for `question` (an open HTTP response)."""
    body = json.dumps({"data": [question, "", "", 0, []]}).encode()
    request = urllib.request.Request(f"{url}gradio_api/call/ask", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        event_id = json.load(response)["event_id"]
    return urllib.request.urlopen(f"{url}gradio_api/call/ask/{event_id}", timeout=READY_TIMEOUT_S)


def wait_until_idle_and_loaded(url: str) -> None:
    """Ask the off-corpus question and read its events to the end: the models are loaded after it."""
    with ask(url, OFF_CORPUS) as events:
        for line in events:
            if line.startswith(b"event: complete") or line.startswith(b"event: error"):
                return


def wait_until_streaming(url: str):
    """Ask the example question; returns its open event stream once answer text has arrived."""
    events = ask(url, QUESTION)
    for line in events:
        if line.startswith(b"data: ") and b'"answer": "' in line and b'"answer": ""' not in line:
            return events
    events.close()
    raise RuntimeError("the answer ended before any text streamed")


def one_run(env: dict, signum: int, case: str, log_path: Path) -> tuple[float | None, int | None, bool]:
    """Seconds from the signal to exit (None: still running after EXIT_TIMEOUT_S), exit status, forced."""
    with open(log_path, "w") as log:
        proc, url = start_ui(env, log)
    events = None
    try:
        if case == "idle":
            wait_until_idle_and_loaded(url)
        else:
            events = wait_until_streaming(url)
        sent = time.perf_counter()
        proc.send_signal(signum)
        try:
            proc.wait(timeout=EXIT_TIMEOUT_S)
            seconds = time.perf_counter() - sent
        except subprocess.TimeoutExpired:
            seconds = None
    finally:
        if events is not None:
            events.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
    forced = any(reason in log_path.read_text() for reason in FORCED)
    return seconds, (proc.returncode if seconds is not None else None), forced


def row(name: str, results: list) -> str:
    times = [s for s, _, _ in results if s is not None]
    hung = len(results) - len(times)
    statuses = ",".join(sorted({str(code) for _, code, _ in results if code is not None})) or "-"
    median = f"{statistics.median(times):.2f}" if times else "-"
    worst = f">{EXIT_TIMEOUT_S}" if hung else (f"{max(times):.2f}" if times else "-")
    forced = sum(1 for _, _, f in results if f)
    return f"| {name:<19} | {len(results):>4} | {median:>8} | {worst:>6} | {statuses:>11} | {forced:>6} |"


def build_index(env: dict) -> None:
    subprocess.run([sys.executable, "-m", "rag", "ingest", "--quiet"], cwd=REPO, env=env, check=True,
                   stdout=subprocess.DEVNULL)


def bench(runs: int, env: dict, workdir: Path) -> list[str]:
    lines = ["| case                | runs | median s |  max s | exit status | forced |",
             "|---------------------|------|----------|--------|-------------|--------|"]
    for case in ("idle", "streaming"):
        for signum in (signal.SIGINT, signal.SIGTERM):
            name = f"{signal.Signals(signum).name}, {case}"
            results = [one_run(env, signum, case, workdir / f"{case}-{signum}-{n}.log") for n in range(runs)]
            lines.append(row(name, results))
            print(lines[-1], file=sys.stderr, flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="starts of `rag ui` per case (default 5)")
    parser.add_argument("--backend", choices=["fake", "local"], default="fake",
                        help="fake: a slow fake OpenAI-compatible server (default); local: the bundled model")
    parser.add_argument("--workdir", type=Path, help="keep the scratch RAG_HOME and the logs here")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-ui-shutdown-"))
    workdir.mkdir(parents=True, exist_ok=True)
    env = {name: value for name, value in os.environ.items() if not name.startswith("RAG_")}
    env["RAG_HOME"] = str(workdir / "home")
    build_index(env)
    if args.backend == "local":
        lines = bench(args.runs, env, workdir)
    else:
        with slow_chat_server(SLOW_REPLY, interval_s=0.5) as server:
            env.update(RAG_BACKEND="openai-like", RAG_MODEL="slow", RAG_BASE_URL=server.base_url)
            lines = bench(args.runs, env, workdir)
    print(f"`rag ui` shutdown, {args.backend} backend, seconds from the signal to exit (logs in {workdir}):")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
