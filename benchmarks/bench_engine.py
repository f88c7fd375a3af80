"""Prompt and generation speed of llama-cpp-python builds, side by side on the bundled model.

    python benchmarks/bench_engine.py                       # the installed build
    python benchmarks/bench_engine.py DIR [DIR ...]         # builds installed with `pip install --target DIR`
    python benchmarks/bench_engine.py --repack on,off       # each build with the weights repacked and as stored

Each build runs in child processes (a build that crashes is reported, not fatal): a child
reads the same ~1,000-token prompt (five abstracts of data/) and writes 64 tokens greedily.
The builds take turns, `--rounds` times, so a noisy machine slows each alike; the table
gives medians and the build's system-info line. Run it with nothing else on the CPU.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GENERATED_TOKENS = 64


def prompt_text() -> str:
    """Five abstracts of the bundled corpus and a question, about 1,000 tokens."""
    from rag.library import load_corpus

    papers = load_corpus([REPO / "data"]).papers[:5]
    sources = "\n\n".join(f"[{n}] {paper.abstract}" for n, paper in enumerate(papers, 1))
    return f"Sources:\n{sources}\n\nQuestion: what do these papers propose?\nAnswer:"


def measure(repack: str) -> dict:
    """In the child: load the model (weights repacked per RAG_REPACK_WEIGHTS's `repack`), time prompt reading
    and generation."""
    import llama_cpp

    from rag.engine import new_llama, repacks_weights
    from rag.llm import local_model_file
    from rag.settings import Settings, available_cores

    settings = Settings.from_env()
    threads = settings.threads or available_cores()
    started = time.perf_counter()
    llama = new_llama(llama_cpp.Llama, str(local_model_file(settings.cache_dir)), n_ctx=2048, n_threads=threads,
                      repack=repacks_weights(repack))
    load_s = time.perf_counter() - started
    prompt = prompt_text()
    started = time.perf_counter()
    first = llama.create_completion(prompt, max_tokens=1, temperature=0.0)
    prompt_s = time.perf_counter() - started
    llama.reset()   # read the prompt again: nothing comes from the prefix cache
    started = time.perf_counter()
    reply = llama.create_completion(prompt, max_tokens=GENERATED_TOKENS + 1, temperature=0.0)
    generate_s = time.perf_counter() - started - prompt_s
    llama.close()
    return {"prompt_tokens": first["usage"]["prompt_tokens"],
            "prompt_tok_s": first["usage"]["prompt_tokens"] / prompt_s,
            "generation_tok_s": (reply["usage"]["completion_tokens"] - 1) / generate_s, "load_s": load_s,
            "system_info": llama_cpp.llama_print_system_info().decode().strip(),
            "reply": reply["choices"][0]["text"]}


def run_build(folder: str | None, repack: str) -> dict:
    env = dict(os.environ)
    if folder:
        env["PYTHONPATH"] = os.pathsep.join([folder, str(REPO)])
    child = subprocess.run([sys.executable, __file__, "--child", repack], env=env, capture_output=True, text=True)
    if child.returncode != 0:
        return {"error": f"exit {child.returncode}: {(child.stderr.strip().splitlines() or [''])[-1][:120]}"}
    return json.loads(child.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("builds", nargs="*", help="folders holding a llama_cpp package (default: the installed one)")
    parser.add_argument("--rounds", type=int, default=3, help="turns each build takes (default 3)")
    parser.add_argument("--repack", default="auto",
                        help="comma-separated weight layouts to run each build with: auto, on, off (RAG_REPACK_WEIGHTS)")
    parser.add_argument("--child", metavar="REPACK", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child)))
        return
    variants = [(folder, repack) for folder in args.builds or [None] for repack in args.repack.split(",")]
    runs: dict = {variant: [] for variant in variants}
    for _ in range(args.rounds):
        for variant in variants:
            runs[variant].append(run_build(*variant))
    print("| build | weights repacked | prompt tokens | prompt tok/s (each turn) | generation tok/s (each turn) | "
          "load s | same reply as the first build | system info |")
    print("|---|---|---|---|---|---|---|---|")
    first_reply = None
    for (folder, repack), rows in runs.items():
        name = f"{Path(folder).name if folder else 'installed'} | {repack}"
        errors = [row["error"] for row in rows if "error" in row]
        if errors:
            print(f"| {name} | {errors[0]} | | | | | |")
            continue
        first_reply = first_reply or rows[0]["reply"]
        median = {key: statistics.median(row[key] for row in rows) for key in ("prompt_tok_s", "generation_tok_s",
                                                                                 "load_s")}
        spread = {key: "/".join(f"{row[key]:.0f}" for row in rows) for key in ("prompt_tok_s", "generation_tok_s")}
        print(f"| {name} | {rows[0]['prompt_tokens']} | {median['prompt_tok_s']:.1f} ({spread['prompt_tok_s']}) | "
              f"{median['generation_tok_s']:.1f} ({spread['generation_tok_s']}) | {median['load_s']:.2f} | "
              f"{rows[0]['reply'] == first_reply} | {rows[0]['system_info']} |")


if __name__ == "__main__":
    main()
