"""Start-up of a new `rag search` / `rag ask` process as a user sees it, per value of one setting.

Runs each command as a new process, in turns with each value of the setting compared (by default
RAG_EMBED_RUNTIME=onnx and torch; `--compare RAG_REPACK_WEIGHTS=on,off` for another), on the index
and caches the environment names (build them first with one `rag ask`), and times each line of
output from the start of the process (rag.bench.measure.timed_lines): the search results, the
"Found N papers" line, the answer's first character. Prints one JSON object of medians on stdout;
progress on stderr.

    .venv/bin/python benchmarks/bench_startup.py [--rounds 3] [--question "..."] [--compare VARIABLE=A,B]

Run it with nothing else on the CPU: the answer's timings are llama.cpp's.
"""

import argparse
import json
import os
import statistics
import sys

from rag.bench.measure import measure_new_process, timed_lines

DEFAULT_COMPARISON = "RAG_EMBED_RUNTIME=onnx,torch"


def first(lines, test) -> float | None:
    return next((round(t, 2) for t, text in lines if test(text)), None)


def one_round(rag: str, question: str, variable: str, value: str) -> dict:
    env = {**os.environ, variable: value, "PYTHONUNBUFFERED": "1"}
    search, search_exit = timed_lines([rag, "search", question], env)
    return {"search_results_s": first(search, lambda text: text.startswith("Top ")),
            "search_exit_s": round(search_exit, 2), **measure_new_process([rag, "ask"], env, question)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--question", default="what methods reduce reasoning length?")
    parser.add_argument("--rag", default=os.path.join(os.path.dirname(sys.executable), "rag"))
    parser.add_argument("--compare", default=DEFAULT_COMPARISON, help="VARIABLE=VALUE,VALUE: the setting whose "
                        f"values take turns (default {DEFAULT_COMPARISON})")
    args = parser.parse_args()
    variable, _, values = args.compare.partition("=")
    if not variable or not values:
        parser.error(f"--compare takes VARIABLE=VALUE,VALUE, got {args.compare!r}")
    rows = {value: [] for value in values.split(",")}
    for n in range(args.rounds):
        for value in rows:
            rows[value].append(one_round(args.rag, args.question, variable, value))
            print(f"round {n + 1} {variable}={value}: {rows[value][-1]}", file=sys.stderr, flush=True)
    medians = {value: {key: statistics.median(measured) if measured else None
                       for key in runs[0] for measured in [[r[key] for r in runs if r[key] is not None]]}
               for value, runs in rows.items()}
    print(json.dumps({"question": args.question, "rounds": args.rounds, "variable": variable, "median": medians},
                     indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
