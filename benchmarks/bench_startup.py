"""Start-up of a new `rag search` / `rag ask` process as a user sees it, per embedding runtime.

Runs each command as a new process, in turns with RAG_EMBED_RUNTIME=onnx and torch, on the index
and caches the environment names (build them first with one `rag ask`), and times each line of
output from the start of the process (rag.bench.measure.timed_lines): the search results, the
"Found N papers" line, the answer's first character. Prints one JSON object of medians on stdout;
progress on stderr.

    .venv/bin/python benchmarks/bench_startup.py [--rounds 3] [--question "..."]

Run it with nothing else on the CPU: the answer's timings are llama.cpp's.
"""

import argparse
import json
import os
import statistics
import sys

from rag.bench.measure import measure_new_process, timed_lines

RUNTIMES = ("onnx", "torch")


def first(lines, test) -> float | None:
    return next((round(t, 2) for t, text in lines if test(text)), None)


def one_round(rag: str, question: str, runtime: str) -> dict:
    env = {**os.environ, "RAG_EMBED_RUNTIME": runtime, "PYTHONUNBUFFERED": "1"}
    search, search_exit = timed_lines([rag, "search", question], env)
    return {"search_results_s": first(search, lambda text: text.startswith("Top ")),
            "search_exit_s": round(search_exit, 2), **measure_new_process([rag, "ask"], env, question)}


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
    medians = {runtime: {key: statistics.median(values) if values else None
                         for key in rows[runtime][0] for values in [[r[key] for r in rows[runtime] if r[key] is not None]]}
               for runtime in RUNTIMES}
    print(json.dumps({"question": args.question, "rounds": args.rounds, "median": medians}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
