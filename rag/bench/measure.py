"""`rag bench`: ingest, search and answer speed on this machine, beside llama-index's naive pipeline.

Everything runs in a scratch folder (its own index and embedding cache), so the user's
index is never touched: on a Chroma server the bench's index has its own namespace and
is dropped afterwards. Measured in one run, side by side:
- ingest: abstracts/s cold (nothing cached), rebuilt from the embedding cache, unchanged;
- search: median and 95th percentile over a fixed question list, warm;
- answers: time to first token, total time and prompt tokens, medians over the example
  question and a fixed slice of eval/questions.jsonl, and grounding figures of both
  pipelines on that slice, scored the same way (see grounding_summary);
- a new `rag ask` process on the example question, timed line by line as a user sees it:
  the papers found, then the answer's first character (measure_new_process).
With `scale`, the corpus is a synthetic one of that many papers (synthetic.py), written in the
bundled format or, with `scale_format` 'arxiv', as arXiv metadata JSONL (the format users bring),
and only ingest and search are measured; the naive pipeline is not built at that size.
"""

import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from rag.answer import Answerer
from rag.embedding import load_embed_model, load_search_model
from rag.errors import RagError
from rag.eval.answers import contains_all, is_correct, percentile, share
from rag.ingest import describe_index, ingest
from rag.library import load_corpus
from rag.paper_model import paper_model_enabled
from rag.reply import split_plain_reply
from rag.retrieve import Retriever
from rag.settings import EXAMPLE_QUESTION, Settings, available_cores, settings_environment
from rag.sigterm import sigterm_exits
from rag.translate import translator_for
from rag.urls import redact_url

WARM_UP_QUESTION = "how can agents learn from human feedback?"   # loads the model; never timed
SEARCH_QUESTIONS = (
    EXAMPLE_QUESTION, "Which papers study grokking?", "merging fine-tuned models",
    "long-form speech generation", "LLM as a judge", "fairness and equalized odds", "k-means local optimality",
    "planning in model-free reinforcement learning", "causal representation learning", "graph neural networks",
    "image geolocalization", "sparse autoencoders for interpretability", "multi-agent coordination",
    "knowledge graph completion", "robot manipulation with point clouds", "layer pruning of LLMs",
    "activation steering", "visual reasoning in vision-language models", "combinatorial auctions",
    "online learning regret bounds", "self-play reinforcement learning", "neural responses to images",
)
TARGETS = {"first_token_s": 3.0, "total_s": 10.0, "search_p50_ms": 20.0, "search_p50_ms_50k": 100.0,
           "sources_shown_s": 1.0, "cold_first_char_s": 8.0}
RATIO_KEYS = ("ingest_per_s", "search_p50_ms", "search_p95_ms", "first_token_s", "total_s", "prompt_tokens")


def run_bench(settings: Settings, scale: int | None = None, seed: int = 0, eval_questions: int = 14,
              rounds: int = 2, workdir: Path | None = None, progress: bool = True, say=lambda m: None,
              scale_format: str = "corpus", open_model=None, ask_command: list[str] | None = None) -> dict:
    """Measure; returns the figures `rag bench --json` prints. `open_model(settings)` opens the LLM
    both pipelines answer with (default rag.llm.open_model: the configured backend); `ask_command`
    (the argv of `rag ask`, which opens the configured backend itself) is timed as a new process."""
    with _workdir(workdir) as work:
        # the model files from the user's cache dir; derived caches (vectors) in the bench's own folder
        bench_settings = settings.with_overrides(home=work / "home", derived_cache_dir=work / "cache",
                                                 namespace=f"bench-{os.getpid()}" if settings.chroma_url else None)
        result = {"machine": {"cores": available_cores(), "store": redact_url(settings.chroma_url or "embedded")},
                  "paper_model": settings.paper_model}
        started = time.perf_counter()
        load_embed_model(settings.embed_model, settings.embed_batch_size)   # loaded once, outside every timing
        if paper_model_enabled(settings):
            load_embed_model(settings.paper_model, settings.embed_batch_size, settings.cache_dir)
        result["embed_model_load_s"] = round(time.perf_counter() - started, 2)
        paths = ([_synthetic_corpus(settings, scale, seed, work / "corpus", result, say, scale_format)] if scale
                 else [settings.corpus])
        try:
            say("Ingesting (cold, then rebuilt from the embedding cache, then unchanged)…")
            result |= measure_ingest(bench_settings, paths, progress)
            say("Searching…")
            index_settings = bench_settings.with_overrides(corpus=paths[0])
            translator = translator_for(index_settings, open_model)
            with Retriever(index_settings, translator=translator) as retriever:
                result |= measure_search(retriever.search, rounds)
                result["open_index_s"] = round(retriever.open_s, 2)
            # as a new process opens it: keyword index from disk
            with Retriever(index_settings, translator=translator) as retriever:
                result["reopen_index_s"] = round(retriever.open_s, 2)
                if not scale:
                    result |= compare_with_naive(settings, retriever, eval_questions, rounds, say, open_model)
            if ask_command and not scale:
                say("Asking the example question in a new `rag ask` process…")
                # the bench's index, the user's derived caches (the engine's verdict, the ONNX exports)
                for name in (settings.embed_model,) + ((settings.paper_model,) if paper_model_enabled(settings) else ()):
                    load_search_model(settings, name, say)
                new_process = index_settings.with_overrides(derived_cache_dir=settings.derived_cache_dir)
                result |= measure_new_process(ask_command, settings_environment(new_process), EXAMPLE_QUESTION)
            result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        finally:
            if settings.chroma_url:
                _drop_index(bench_settings)
    result["targets"] = TARGETS
    return result


@contextlib.contextmanager
def _workdir(workdir: Path | None):
    """The given folder (kept: a rerun resumes its ingest), or a temporary one removed afterwards."""
    if workdir is not None:
        Path(workdir).mkdir(parents=True, exist_ok=True)
        yield Path(workdir)
        return
    folder = Path(tempfile.mkdtemp(prefix="rag-bench-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _synthetic_corpus(settings: Settings, n: int, seed: int, folder: Path, result: dict, say,
                      format: str = "corpus") -> Path:
    from rag.bench.synthetic import write_synthetic_corpus

    started = time.perf_counter()
    done = f"{n} {seed}" + ("" if format == "corpus" else f" {format}")   # a marker written before formats existed
    if not (folder / "DONE").is_file() or (folder / "DONE").read_text() != done:
        say(f"Writing a synthetic corpus of {n} papers (seed {seed}, {format} format) to {folder}…")
        shutil.rmtree(folder, ignore_errors=True)
        write_synthetic_corpus(list(load_corpus([settings.corpus]).papers), n, folder, seed, format=format)
        (folder / "DONE").write_text(done)
    result["synthetic"] = {"papers": n, "seed": seed, "format": format,
                           "seconds": round(time.perf_counter() - started, 1)}
    return folder


def measure_ingest(settings: Settings, paths: list[Path], progress: bool) -> dict:
    """Abstracts per second: cold, rebuilt from the embedding cache, and with nothing changed."""
    cold = ingest(settings, paths=paths, progress=progress)
    rebuilt = ingest(settings, paths=paths, progress=progress, rebuild=True)
    unchanged = ingest(settings, paths=paths, progress=False)
    info = describe_index(settings)
    return {"papers": cold.papers, "chunks": cold.chunks,
            "ingest_s": round(cold.seconds, 2), "ingest_per_s": _rate(cold.papers, cold.seconds),
            "ingest_embedded_chunks": cold.embedded, "ingest_cached_chunks": cold.cached,
            "ingest_cached_per_s": _rate(rebuilt.papers, rebuilt.seconds), "ingest_cached_embedded": rebuilt.embedded,
            "ingest_unchanged_per_s": _rate(unchanged.papers, unchanged.seconds),
            "index_mb": round(info.size_bytes / 1e6, 1) if info.size_bytes else None}


def measure_search(search, rounds: int) -> dict:
    """Median and 95th percentile of `search` over SEARCH_QUESTIONS, `rounds` times each, after a warm-up."""
    search("warm-up question")
    latencies = []
    for _ in range(rounds):
        for question in SEARCH_QUESTIONS:
            started = time.perf_counter()
            search(question)
            latencies.append(1000 * (time.perf_counter() - started))
    return {"search_p50_ms": round(statistics.median(latencies), 1),
            "search_p95_ms": round(percentile(latencies, 95), 1), "searches": len(latencies)}


def compare_with_naive(settings: Settings, retriever: Retriever, eval_questions: int, rounds: int, say,
                       open_model=None) -> dict:
    """Ours and the naive pipeline on the same questions, same model: latency, ratios, grounding."""
    from rag import llm
    from rag.bench.naive import NaivePipeline

    questions = eval_slice(retriever, eval_questions)
    model = (open_model or llm.open_model)(settings)   # user's settings: reuses the engine verdict cached there
    answerer = Answerer(retriever.settings, retriever, model, retriever.translator)
    say(f"Answering {1 + len(questions)} questions with rag ({model.backend} {model.model})…")
    answerer.ask(WARM_UP_QUESTION)
    ours = [answerer.ask(q.question if q else EXAMPLE_QUESTION) for q in [None] + questions]
    say("Building the naive llama-index pipeline and answering the same questions…")
    naive = NaivePipeline(settings, retriever.papers, model)
    naive_figures = {"ingest_per_s": _rate(len(retriever.papers), naive.build_s)}
    naive_figures |= measure_search(naive.search, rounds)
    naive.ask(WARM_UP_QUESTION)
    naive_answers = [naive.ask(q.question if q else EXAMPLE_QUESTION) for q in [None] + questions]
    result = {"backend": model.backend, "model": model.model, "questions": 1 + len(questions),
              "example": _timings([ours[0].timings]), **_timings([a.timings for a in ours])}
    naive_figures |= {"example": _timings([naive_answers[0].timings]), **_timings([a.timings for a in naive_answers])}
    result["naive"] = naive_figures
    if questions:
        from rag.eval.judge import GroundingJudge

        judge = GroundingJudge(retriever)
        result["grounding"] = {
            "ours": grounding_summary([_ours_row(q, a, judge) for q, a in zip(questions, ours[1:])]),
            "naive": grounding_summary([_naive_row(q, a, judge) for q, a in zip(questions, naive_answers[1:])]),
            "questions": [q.id for q in questions]}
    return result


def measure_new_process(ask_command: list[str], env: dict[str, str], question: str) -> dict:
    """A new `rag ask` process as a user sees it: seconds from its start to the "Found N papers" line
    (cold_sources_shown_s), to the first character of the answer after it (cold_first_char_s) and to
    its end (cold_total_s)."""
    lines, seconds = timed_lines([*ask_command, question], {**os.environ, **env, "PYTHONUNBUFFERED": "1"})
    found = next((n for n, (_, text) in enumerate(lines) if text.startswith("Found ")), None)
    answer = [t for t, text in lines[found + 1:] if text.strip()] if found is not None else []
    return {"cold_sources_shown_s": None if found is None else round(lines[found][0], 2),
            "cold_first_char_s": round(answer[0], 2) if answer else None, "cold_total_s": round(seconds, 2)}


def timed_lines(argv: list[str], env: dict[str, str]) -> tuple[list[tuple[float, str]], float]:
    """Each line a command prints (stdout and stderr) with the seconds since it started, and its run time;
    a command that fails is a RagError with its last lines. Stopped by SIGINT or SIGTERM, this process
    stops the command too before it exits."""
    started = time.perf_counter()
    lines, pending = [], b""
    with sigterm_exits(), \
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env) as process:
        try:
            while chunk := process.stdout.read1(4096):
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    lines.append((time.perf_counter() - started, line.decode(errors="replace")))
        except BaseException:
            process.terminate()
            raise
    if process.returncode != 0:
        raise RagError(f"{' '.join(argv[:3])} … exited {process.returncode}: "
                       + " / ".join(text for _, text in lines[-3:]))
    return lines, time.perf_counter() - started


def eval_slice(retriever: Retriever, n: int) -> list:
    """The first n questions of the eval set taken in turn from each type (file order); [] when the
    index does not hold the eval's papers (another corpus)."""
    from rag.errors import EvalError
    from rag.eval.questions import QUESTION_TYPES, default_questions, load_questions

    if n <= 0 or not default_questions().is_file():
        return []
    try:
        questions = load_questions(default_questions(), {p.paper_id for p in retriever.papers})
    except EvalError:
        return []
    by_type = [[q for q in questions if q.type == t] for t in QUESTION_TYPES]
    picked = [group[i] for i in range(max(map(len, by_type))) for group in by_type if i < len(group)]
    return picked[:n]


def _timings(timings: list[dict]) -> dict:
    """Medians over the answers that asked the model (an answer gated before the model has no first token)."""
    asked = [t for t in timings if t.get("first_token_s") is not None]
    shown = [t["retrieve_s"] for t in timings if "retrieve_s" in t]   # the naive pipeline shows no papers first
    return {"sources_shown_s": _median(shown, 2),
            "first_token_s": _median([t["first_token_s"] for t in asked], 2),
            "total_s": _median([t["total_s"] for t in timings], 2),
            "prompt_tokens": _median([t["prompt_tokens"] for t in asked], 0), "asked_model": len(asked)}


def _ours_row(question, answer, judge) -> dict:
    cited = {c.n: c.paper.paper_id for c in answer.citations}
    sentences = [(s.english or s.text, [cited[n] for n in s.citations if n in cited]) for s in answer.sentences]
    return _row(question, answer.answer, answer.abstained, sentences, [h.paper.paper_id for h in answer.sources],
                judge, rests_on=sorted(set(cited.values())))


def _naive_row(question, answer, judge) -> dict:
    sentences = [(text, []) for text, _ in split_plain_reply(answer.answer)]
    return _row(question, answer.answer, answer.abstained, sentences, answer.source_ids, judge,
                rests_on=answer.source_ids)


def _row(question, text: str, abstained: bool, sentences, source_ids: list[str], judge, rests_on) -> dict:
    """One answer scored for grounding_summary; `rests_on` are the papers the answer is attributed to,
    correct as the eval has it (eval.answers.is_correct)."""
    answered = not abstained
    expected = contains_all(text, question.expected) if question.expected and answered else (
        False if question.expected else None)
    grounded = [any(judge.supports(s, [pid]) for pid in source_ids) for s, _ in sentences] if answered else []
    cited_ok = [bool(c) and judge.supports(s, c) for s, c in sentences] if answered else []
    correct = is_correct(question, answered, len(set(question.gold) & set(rests_on)), expected)
    return {"answerable": question.answerable, "answered": answered, "grounded": grounded, "cited_ok": cited_ok,
            "expected": expected, "correct": correct}


def grounding_summary(rows: list[dict]) -> dict:
    """Shares over the slice, the same definitions for both pipelines:
    answered (answerable questions answered), unanswerable_abstained, grounded_sentences
    (answer sentences one of the retrieved papers supports, by the eval's grounding judge),
    cited_and_supported (sentences whose own citations support them; 0 without citations),
    expected_found, correct (answered, resting on a gold paper, expected strings present;
    or abstained when unanswerable)."""
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]
    sentences = [g for r in rows for g in r["grounded"]]
    cited = [c for r in rows for c in r["cited_ok"]]
    with_expected = [r["expected"] for r in rows if r["expected"] is not None]
    return {"n": len(rows),
            "answered": _share(sum(r["answered"] for r in answerable), len(answerable)),
            "unanswerable_abstained": _share(sum(not r["answered"] for r in unanswerable), len(unanswerable)),
            "grounded_sentences": _share(sum(sentences), len(sentences)),
            "cited_and_supported": _share(sum(cited), len(cited)),
            "expected_found": _share(sum(with_expected), len(with_expected)),
            "correct": _share(sum(r["correct"] for r in rows), len(rows))}


def ratios(result: dict) -> dict:
    """ours / naive for each figure both have."""
    naive = result.get("naive") or {}
    return {key: round(result[key] / naive[key], 2) for key in RATIO_KEYS
            if result.get(key) is not None and naive.get(key)}


def _drop_index(settings: Settings) -> None:
    from rag.store import open_store

    with open_store(settings) as store:
        store.drop()


def _rate(count: int, seconds: float) -> float | None:
    return round(count / seconds, 1) if seconds > 0 else None


def _median(values, digits: int):
    return round(statistics.median(values), digits) if values else None


def _share(count: int, total: int) -> float | None:
    """eval.answers.share to 3 decimals, the precision the bench's figures are printed and documented in."""
    return share(count, total, digits=3)


def to_json(result: dict) -> str:
    return json.dumps(result | {"ratios": ratios(result)}, ensure_ascii=False, indent=2)


_ROWS = (   # (label, key, target key or None)
    ("ingest, abstracts/s (cold: nothing cached)", "ingest_per_s", None),
    ("ingest, abstracts/s (rebuilt from the embedding cache)", "ingest_cached_per_s", None),
    ("ingest, abstracts/s (nothing changed)", "ingest_unchanged_per_s", None),
    ("search p50 ms (warm)", "search_p50_ms", "search_p50_ms"),
    ("search p95 ms (warm)", "search_p95_ms", None),
    ("papers shown s (median; warm)", "sources_shown_s", "sources_shown_s"),
    ("first token s (median)", "first_token_s", None),
    ("total s (median)", "total_s", None),
    ("prompt tokens (median)", "prompt_tokens", None),
)


def format_table(result: dict) -> str:
    """The figures as Markdown tables: rag beside the naive pipeline, then grounding."""
    naive, ratio = result.get("naive") or {}, ratios(result)
    scale = result.get("synthetic")
    store = result["machine"]["store"]
    kind = f" (synthetic, {scale.get('format', 'corpus')} format)" if scale else ""
    lines = [f"rag bench: {result['papers']} papers{kind}, {result['chunks']} chunks, "
             f"{result['machine']['cores']} cores, store {store}"
             + (f", {result['backend']} {result['model']}" if "model" in result else ""), "",
             "| figure | rag | naive llama-index | rag / naive | target |", "|---|---|---|---|---|"]
    for label, key, target in _ROWS:
        if key in result:
            goal = TARGETS.get(target + ("_50k" if scale and scale["papers"] > 10_000 else "")) if target else None
            lines.append(f"| {label} | {_cell(result.get(key))} | {_cell(naive.get(key))} | {_cell(ratio.get(key))} "
                         f"| {'≤ ' + _cell(goal) if goal else ''} |")
    if "example" in result:
        for key, label in (("first_token_s", "first token s"), ("total_s", "total s")):
            lines.append(f"| example question, {label} | {_cell(result['example'][key])} | "
                         f"{_cell(naive['example'][key])} | | ≤ {_cell(TARGETS[key])} |")
    lines.append("")
    extra = [("a new `rag ask` process: papers shown / the answer's first character / done, s",
              " / ".join(_cell(result.get(k)) for k in ("cold_sources_shown_s", "cold_first_char_s", "cold_total_s"))
              if "cold_total_s" in result else None),
             ("open the index s (first time / again, keyword index read from disk)",
              f"{_cell(result.get('open_index_s'))} / {_cell(result.get('reopen_index_s'))}"), ("index size MB", result.get("index_mb")),
             ("peak RSS MB (this process)", result.get("peak_rss_mb")),
             ("chunks embedded / from cache (cold ingest)",
              f"{result.get('ingest_embedded_chunks')} / {result.get('ingest_cached_chunks')}"),
             ("synthetic corpus written s", scale["seconds"] if scale else None)]
    lines += [f"- {label}: {_cell(value)}" for label, value in extra if value is not None]
    grounding = result.get("grounding")
    if grounding:
        lines += ["", f"Grounding on {grounding['ours']['n']} eval questions, scored the same way for both "
                  "(rag/bench/measure.py grounding_summary):", "", "| metric | rag | naive llama-index |", "|---|---|---|"]
        lines += [f"| {metric} | {_cell(value)} | {_cell(grounding['naive'][metric])} |"
                  for metric, value in grounding["ours"].items() if metric != "n"]
    if scale:
        lines += ["", "At this scale only ingest and search are measured (no naive pipeline, no answers)."]
    return "\n".join(lines)


def _cell(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3f}" if value <= 1 else f"{value:.1f}"
