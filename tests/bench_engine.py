"""Prompt and generation speed of llama-cpp-python builds, side by side on the bundled model.

    python tests/bench_engine.py                       # the installed build
    python tests/bench_engine.py DIR [DIR ...]         # builds installed with `pip install --target DIR`

Each build runs in its own child process (a build that crashes is reported, not fatal):
it reads the same ~1,000-token prompt (five abstracts of data/) and writes 64 tokens
greedily, `--rounds` times with the prefix cache emptied in between; the table gives
medians and the build's system-info line. Run it with nothing else on the CPU.
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
    from rag.corpus import load_corpus

    papers = load_corpus([REPO / "data"]).papers[:5]
    sources = "\n\n".join(f"[{n}] {paper.abstract}" for n, paper in enumerate(papers, 1))
    return f"Sources:\n{sources}\n\nQuestion: what do these papers propose?\nAnswer:"


def measure(rounds: int) -> dict:
    """In the child: load the model, time prompt reading and generation."""
    import llama_cpp

    from rag.llm import local_model_file
    from rag.settings import Settings, available_cores

    settings = Settings.from_env()
    threads = settings.threads or available_cores()
    started = time.perf_counter()
    llama = llama_cpp.Llama(model_path=str(local_model_file(settings.cache_dir)), n_ctx=2048, n_threads=threads,
                            n_threads_batch=threads, verbose=False)
    load_s = time.perf_counter() - started
    prompt = prompt_text()
    prompt_rates, generation_rates = [], []
    for _ in range(rounds):
        llama.reset()
        started = time.perf_counter()
        first = llama.create_completion(prompt, max_tokens=1, temperature=0.0)
        prompt_s = time.perf_counter() - started
        n_prompt = first["usage"]["prompt_tokens"]
        llama.reset()
        started = time.perf_counter()
        reply = llama.create_completion(prompt, max_tokens=GENERATED_TOKENS + 1, temperature=0.0)
        generate_s = time.perf_counter() - started - prompt_s
        prompt_rates.append(n_prompt / prompt_s)
        generation_rates.append((reply["usage"]["completion_tokens"] - 1) / generate_s)
    llama.close()
    return {"prompt_tokens": n_prompt, "prompt_tok_s": round(statistics.median(prompt_rates), 1),
            "generation_tok_s": round(statistics.median(generation_rates), 1), "load_s": round(load_s, 2),
            "system_info": llama_cpp.llama_print_system_info().decode().strip(),
            "reply_start": reply["choices"][0]["text"][:60]}


def run_build(folder: str | None, rounds: int) -> dict:
    env = dict(os.environ)
    if folder:
        env["PYTHONPATH"] = os.pathsep.join([folder, str(REPO)])
    child = subprocess.run([sys.executable, __file__, "--child", "--rounds", str(rounds)], env=env,
                           capture_output=True, text=True)
    if child.returncode != 0:
        return {"error": f"exit {child.returncode}: {(child.stderr.strip().splitlines() or [''])[-1][:120]}"}
    return json.loads(child.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("builds", nargs="*", help="folders holding a llama_cpp package (default: the installed one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.rounds)))
        return
    print("| build | prompt tokens | prompt tok/s | generation tok/s | load s | system info |")
    print("|---|---|---|---|---|---|")
    for folder in args.builds or [None]:
        row = run_build(folder, args.rounds)
        name = Path(folder).name if folder else "installed"
        if "error" in row:
            print(f"| {name} | {row['error']} | | | | |")
        else:
            print(f"| {name} | {row['prompt_tokens']} | {row['prompt_tok_s']} | {row['generation_tok_s']} | "
                  f"{row['load_s']} | {row['system_info']} |", flush=True)


if __name__ == "__main__":
    main()
