"""Start-up of a new `rag search` / `rag ask` process as a user sees it, per embedding runtime.

Runs each command as a new process, in turns with RAG_EMBED_RUNTIME=onnx and torch, on the index
and caches the environment names (build them first with one `rag ask`), and times each line of
output from the start of the process: the search results, the "Found N papers" line, the first
claim of the answer. Prints one JSON object of medians on stdout; progress on stderr.

    .venv/bin/python benchmarks/bench_startup.py [--rounds 3] [--question "..."]

Run it with nothing else on the CPU: the answer's timings are llama.cpp's.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

RUNTIMES = ("onnx", "torch")


def timed_lines(argv: list[str], env: dict) -> tuple[list[tuple[float, str]], float]:
    """Each line the command prints (stdout and stderr) with the seconds since it started, and its run time."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    lines, pending = [], b""
    while chunk := process.stdout.read1(4096):
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            lines.append((time.perf_counter() - started, line.decode(errors="replace")))
    if process.wait() != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n" + "\n".join(text for _, text in lines[-5:]))
    return lines, time.perf_counter() - started


def first(lines, test) -> float | None:
    return next((round(t, 2) for t, text in lines if test(text)), None)


def one_round(rag: str, question: str, runtime: str) -> dict:
    env = {**os.environ, "RAG_EMBED_RUNTIME": runtime, "PYTHONUNBUFFERED": "1"}
    search, search_exit = timed_lines([rag, "search", question], env)
    ask, ask_exit = timed_lines([rag, "ask", question], env)
    found = next((n for n, (_, text) in enumerate(ask) if text.startswith("Found ")), None)
    answer = ask[found + 1:] if found is not None else []   # the claims come after that line and a blank one
    return {"search_results_s": first(search, lambda text: text.startswith("Top ")),
            "search_exit_s": round(search_exit, 2),
            "sources_shown_s": None if found is None else round(ask[found][0], 2),
            "first_claim_s": first(answer, lambda text: text.strip() != ""), "ask_exit_s": round(ask_exit, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--question", default="what methods reduce reasoning length?")
    parser.add_argument("--rag", default=os.path.join(os.path.dirname(sys.executable), "rag"))
    args = parser.parse_args()
    rows = {runtime: [] for runtime in RUNTIMES}
    for n in range(args.rounds):
        for runtime in RUNTIMES:
            rows[runtime].append(one_round(args.rag, args.question, runtime))
            print(f"round {n + 1} {runtime}: {rows[runtime][-1]}", file=sys.stderr, flush=True)
    medians = {runtime: {key: statistics.median(r[key] for r in rows[runtime] if r[key] is not None)
                         for key in rows[runtime][0]} for runtime in RUNTIMES}
    print(json.dumps({"question": args.question, "rounds": args.rounds, "median": medians}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
