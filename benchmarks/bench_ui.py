"""Chat UI benchmark on the real local model: first token in the UI against `rag ask`, and 5 simultaneous users.

Run it alone on an idle machine (it loads the 1.5B model; ~3 minutes on 2 cores):
    .venv/bin/python benchmarks/bench_ui.py [--users 5] [--question "..."]
The UI is measured through its `ask` endpoint with gradio_client (the first streamed update
that carries answer text) and in headless chromium (the first answer text on the page);
the CLI through `rag ask` in a subprocess (its first printed answer character). The model
is warmed by one question first, so every number is a warm one. Prints numbers; asserts nothing.
"""

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))   # the test helpers: servers.py, fakes.py
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from servers import free_port  # noqa: E402

EXAMPLE = "what methods reduce reasoning length?"
FIVE_QUESTIONS = [EXAMPLE, "Which papers study grokking?", "How can agents learn from language guidance?",
                  "Which papers evaluate speech models?", "What is noise stability?"]


def api_first_token(url: str, question: str) -> tuple[float, float, float]:
    """Seconds to the first streamed answer text, to the final record, and the record's own first_token_s."""
    from gradio_client import Client

    client = Client(url, verbose=False)
    started = time.perf_counter()
    first = None
    job = client.submit(question, api_name="/ask")
    for update in job:
        if first is None and update.get("answer"):
            first = time.perf_counter() - started
    final = job.result()
    return first, time.perf_counter() - started, final["timings"]["first_token_s"]


def browser_first_token(url: str, question: str) -> tuple[float, float]:
    """Seconds from pressing Enter to the first answer text, and to the first citation link, in chromium."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(url, wait_until="load")
        box = page.locator("#rag-question textarea")
        box.wait_for()
        box.fill(question)
        started = time.perf_counter()
        box.press("Enter")
        page.wait_for_function("() => { const bot = document.querySelectorAll('#rag-chat [data-testid=bot]');"
                               " const last = bot[bot.length - 1]; return last && !last.innerText.includes('⏳')"
                               " && last.innerText.trim().length > 0; }", timeout=300_000, polling=50)
        first = time.perf_counter() - started
        page.locator("#rag-chat a.rag-cite").first.wait_for(timeout=300_000)
        cited = time.perf_counter() - started
        browser.close()
    return first, cited


def cli_first_token(question: str) -> tuple[float, float]:
    """Seconds to the first answer character printed by `rag ask` (model load included) and to its exit."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "rag", "ask", question],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    first = None
    while proc.stdout.read(1):
        if first is None:
            first = time.perf_counter() - started
    proc.wait()
    return first, time.perf_counter() - started


def cli_model_first_token(question: str) -> float:
    """`rag ask --json`'s own timings.first_token_s: from the question to the model's first token."""
    import json

    done = subprocess.run([sys.executable, "-m", "rag", "ask", "--json", question], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)["timings"]["first_token_s"]


def follow_up(url: str, question: str) -> None:
    """One follow-up on the real model: what it was condensed into, how long it took, what it cites."""
    from gradio_client import Client

    client = Client(url, verbose=False)
    first = client.predict(question, api_name="/ask")
    started = time.perf_counter()
    second = client.predict("which of those use reinforcement learning?", "", "", 0,
                            [[question, first["answer"]]], api_name="/ask")
    cited = ", ".join(c["label"] for c in second["citations"]) or f"abstained ({second['abstain_reason']})"
    print(f"follow-up 'which of those use reinforcement learning?' -> {second['standalone_question']!r}: "
          f"{time.perf_counter() - started:.1f} s (first token {second['timings']['first_token_s']:.1f} s "
          f"after condensing), cites {cited}")


def simultaneous_users(url: str, questions: list[str]) -> tuple[float, list[float]]:
    """Wall time for len(questions) users asking at once, and each user's own wait."""
    from gradio_client import Client

    clients = [Client(url, verbose=False) for _ in questions]
    barrier = threading.Barrier(len(questions))

    def one(pair):
        client, question = pair
        barrier.wait()
        started = time.perf_counter()
        answer = client.predict(question, api_name="/ask")
        return time.perf_counter() - started, answer

    started = time.perf_counter()
    with ThreadPoolExecutor(len(questions)) as pool:
        results = list(pool.map(one, zip(clients, questions)))
    wall = time.perf_counter() - started
    for (seconds, answer), question in zip(results, questions):
        cited = ", ".join(c["label"] for c in answer["citations"]) or f"abstained ({answer['abstain_reason']})"
        print(f"    {seconds:6.1f} s  {question!r}: {cited}")
    return wall, [seconds for seconds, _ in results]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--question", default=EXAMPLE)
    parser.add_argument("--users", type=int, default=5)
    args = parser.parse_args()

    from rag.settings import Settings
    from rag.ui.app import build_app

    app = build_app(Settings.from_env())
    url = app.launch(port=free_port())
    try:
        # llama.cpp reuses the evaluated prompt of the previous request: asking the same question twice in a
        # row would time a cached prompt. Each timed question therefore follows a different one.
        other = next(q for q in FIVE_QUESTIONS if q != args.question)
        started = time.perf_counter()
        api_first_token(url, other)
        print(f"warm-up (index, embedding model, local LLM, one answer): {time.perf_counter() - started:.1f} s")
        first, total, model_first = api_first_token(url, args.question)
        print(f"UI ask endpoint (gradio_client): first answer text {first:.1f} s, done {total:.1f} s "
              f"(its timings.first_token_s {model_first:.1f} s)")
        api_first_token(url, other)
        first, cited = browser_first_token(url, args.question)
        print(f"UI page (chromium): first answer text {first:.1f} s, first citation link {cited:.1f} s")
        follow_up(url, args.question)
        print(f"{args.users} simultaneous users on the ask endpoint:")
        questions = (FIVE_QUESTIONS * args.users)[:args.users]
        wall, waits = simultaneous_users(url, questions)
        print(f"  wall time {wall:.1f} s; waits {min(waits):.1f}-{max(waits):.1f} s")
    finally:
        app.close()
    first, total = cli_first_token(args.question)
    print(f"CLI `rag ask` (new process, loads the model): first answer character {first:.1f} s, exit {total:.1f} s")
    print(f"CLI `rag ask --json` timings.first_token_s (question to first model token): "
          f"{cli_model_first_token(args.question):.1f} s")


if __name__ == "__main__":
    main()
