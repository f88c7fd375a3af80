"""Benchmark: what each latency lever of the local model buys, side by side in one run.

Run: .venv/bin/python benchmarks/bench_levers.py [--questions 5]
For the example question and the next search questions of rag.bench (warm: model loaded,
a warm-up question asked first), prints median time to first token, total time and
prompt tokens under: the defaults; every retrieved paper given to the model, not only those near
the best (`RAG_PROMPT_PAPERS=all`); smaller context budgets, by chunk and by sentence;
llama.cpp's prefix cache defeated (the system prompt evaluated every time); n_ctx 2048;
one thread; the weights repacked at load (llama.cpp's default, RAG_REPACK_WEIGHTS=on); prompt-lookup (n-gram) speculative decoding (llama-cpp-python's
LlamaPromptLookupDecoding, which needs the logits of every position, `logits_all`), with the
share of replies that stay the same as without it; and a new `rag ask` process per question
(the models loaded every time), with the saved system turn (rag.prefix_state), without it, and with
the weights repacked.
`--levers` picks rows of LEVERS or OTHER_LEVERS by name. Quality is not measured here: compare settings with
`rag eval --diff`.
"""

import argparse
import json
import os
import statistics
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rag.answer import Answerer
from rag.bench.measure import SEARCH_QUESTIONS, WARM_UP_QUESTION
from rag.engine import new_llama, repacks_weights
from rag.llm import GGUF_NAME, PREFIX_STATES, LocalModel, check_local_engine, top_k_grammar_llama
from rag.retrieve import Retriever
from rag.settings import Settings, available_cores

LEVERS = {   # name -> settings overrides
    "defaults": {},
    "every retrieved paper in the prompt (prompt_papers all)": {"prompt_papers": "all"},
    "context 600 tokens": {"context_tokens": 600},
    "context 400 tokens": {"context_tokens": 400},
    "context 400 tokens, by sentence": {"context_tokens": 400, "context_unit": "sentence"},
    "context 300 tokens, by sentence": {"context_tokens": 300, "context_unit": "sentence"},
    "n_ctx 2048": {"n_ctx": 2048},
    "1 thread": {"threads": 1},
    "weights repacked at load (llama.cpp's default)": {"repack_weights": "on"},
}


class ForgetfulModel:
    """The local model with llama.cpp's prompt cache emptied before every request."""

    def __init__(self, local: LocalModel):
        self.local, self.backend, self.model = local, local.backend, local.model

    def stream(self, messages, schema, max_tokens):
        self.local._llama.reset()
        yield from self.local.stream_as_held(messages, schema, max_tokens)   # no saved system turn either


class PromptLookupModel(LocalModel):
    """The local model in a Llama of its own that drafts tokens by prompt lookup (n-gram matching)."""

    def __init__(self, settings: Settings, num_pred_tokens: int):
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        self.path, self.model = check_local_engine(settings), GGUF_NAME
        threads = settings.threads or available_cores()
        self._llama = new_llama(top_k_grammar_llama(), str(self.path), n_ctx=settings.n_ctx, n_threads=threads,
                                repack=repacks_weights(settings.repack_weights), logits_all=True,
                                draft_model=LlamaPromptLookupDecoding(num_pred_tokens=num_pred_tokens))


def in_process(settings: Settings, retriever: Retriever, questions: list[str], forget: bool = False,
               model=None) -> list[dict]:
    model = model or (ForgetfulModel(LocalModel(settings)) if forget else LocalModel(settings))
    answerer = Answerer(settings, retriever, model)
    answerer.ask(WARM_UP_QUESTION)
    rows = []
    for question in questions:
        answer = answerer.ask(question)
        rows.append(answer.timings | {"draft": answer.draft})
    return rows


def new_process(settings: Settings, questions: list[str], forget_prefix: bool = False,
                environment: dict | None = None) -> list[dict]:
    """`rag ask --json` in a fresh process per question: total is the process's wall time. With
    forget_prefix, the saved system turns (rag.prefix_state) are deleted first, so each process reads
    its system turn again (and saves it); `environment` adds variables to the process's."""
    rows = []
    for question in questions:
        if forget_prefix:
            shutil.rmtree(Path(settings.derived_cache_dir) / PREFIX_STATES, ignore_errors=True)
        started = time.perf_counter()
        out = subprocess.run([str(Path(sys.executable).parent / "rag"), "ask", "--json", question],
                             capture_output=True, text=True, check=True, env={**os.environ, **(environment or {})})
        timings = json.loads(out.stdout)["timings"]
        wall = time.perf_counter() - started
        # first token as the user sees it: start-up (wall minus in-process total) plus the in-process first token
        rows.append({"first_token_s": wall - timings["total_s"] + timings["first_token_s"], "total_s": wall,
                     "prompt_tokens": timings["prompt_tokens"]})
    return rows


def summary(rows: list[dict]) -> dict:
    asked = [r for r in rows if r["first_token_s"] is not None]
    return {"first_token_s": statistics.median(r["first_token_s"] for r in asked),
            "total_s": statistics.median(r["total_s"] for r in rows),
            "prompt_tokens": statistics.median(r["prompt_tokens"] for r in asked),
            "drafts": [r.get("draft") for r in rows]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=5)
    parser.add_argument("--levers", help="only these levers of LEVERS, comma-separated, beside the defaults "
                        "(the other rows are then left out)")
    args = parser.parse_args()
    chosen = {"defaults"} | set(filter(None, (args.levers or "").split(",")))
    if unknown := chosen - set(LEVERS) - set(OTHER_LEVERS):
        parser.error(f"unknown levers {', '.join(sorted(unknown))}: choose from {', '.join([*LEVERS, *OTHER_LEVERS])}")
    questions = list(SEARCH_QUESTIONS[:args.questions])
    base = Settings()
    results = {}
    with Retriever(base) as retriever:
        for name, overrides in LEVERS.items():
            if args.levers and name not in chosen:
                continue
            results[name] = summary(in_process(base.with_overrides(**overrides), retriever, questions))
            print(f"{name}: {results[name]}", file=sys.stderr, flush=True)
        for name, measure in OTHER_LEVERS.items():
            if not args.levers or name in chosen:
                results.update(measure(base, retriever, questions))
    print_table(results, questions, base)


def prompt_lookup(base: Settings, retriever: Retriever, questions: list[str]) -> dict:
    results = {}
    for drafted in (10, 4):
        lookup = PromptLookupModel(base, drafted)
        results[f"prompt lookup, {drafted} tokens drafted"] = summary(in_process(base, retriever, questions, model=lookup))
        lookup._llama.close()
    return results


OTHER_LEVERS = {   # the levers that are not settings: name -> function giving their rows
    "prefix cache emptied before each": lambda base, retriever, questions: {
        "prefix cache emptied before each": summary(in_process(base, retriever, questions, forget=True))},
    "prompt lookup": prompt_lookup,
    "new process per question": lambda base, retriever, questions: {
        "new process per question": summary(new_process(base, questions))},
    "new process per question without the saved system turn": lambda base, retriever, questions: {
        "new process per question without the saved system turn": summary(new_process(base, questions, forget_prefix=True))},
    "new process per question with the weights repacked": lambda base, retriever, questions: {
        "new process per question with the weights repacked": summary(new_process(
            base, questions, environment={"RAG_REPACK_WEIGHTS": "on"}))},
}


def print_table(results: dict, questions: list[str], base: Settings) -> None:
    first = results["defaults"]
    print(f"{len(questions)} questions (the first is the example question), medians, {base.threads or 'all'} threads\n")
    print("| lever | first token s | total s | prompt tokens | first token vs defaults | replies as defaults |")
    print("|---|---|---|---|---|---|")
    for name, row in results.items():
        same = sum(a == b for a, b in zip(row["drafts"], first["drafts"]))
        kept = f"{same}/{len(questions)}" if row["drafts"][0] is not None else "—"
        print(f"| {name} | {row['first_token_s']:.2f} | {row['total_s']:.2f} | {row['prompt_tokens']:.0f} "
              f"| {row['first_token_s'] / first['first_token_s']:.2f} | {kept} |")


if __name__ == "__main__":
    main()
