"""The eval sets and retrieval evaluation: recall@1/5/10, MRR, nDCG@10, and the run manifest.

Reads the question sets (eval/questions.jsonl, worded close to the abstracts, and
eval/paraphrase.jsonl, worded away from them; format in eval/README.md), splits each
into a tune part and a test part (fixed seed, stratified by type), runs each retrieval
method over the questions of the chosen part that have gold papers, and reports the
metrics per set, overall and per question type, with the median search time and each
question's lexical overlap with its gold abstracts (overlap.py). A full run also
answers the same questions and scores the answers (answer_eval.py); eval_report.py
writes and compares runs.
"""

import hashlib
import json
import math
import random
import statistics
import subprocess
import time
from dataclasses import dataclass, fields
from pathlib import Path

from rag.errors import RagError, UsageError
from rag.overlap import lexical_overlap, quartiles
from rag.prompts import prompt_hashes
from rag.retrieve import Retriever
from rag.settings import PACKAGE_DIR, SECRET_SETTINGS, URL_SETTINGS, Settings, bundled_dir
from rag.store import index_shape
from rag.urls import redact_url

RESULTS_VERSION = 3
QUESTION_SETS = {"lexical": "questions.jsonl", "paraphrase": "paraphrase.jsonl"}
SPLITS = ("test", "tune", "all")
SPLIT_SEED = 13            # fixed: the same questions are tune questions in every run
TUNE_SHARE = 0.5           # of each type, rounded down; the test part gets the rest
CUTOFFS = (1, 5, 10)
METRICS = ("recall@1", "recall@5", "recall@10", "mrr", "ndcg@10")
QUESTION_TYPES = ("paraphrase", "detail", "multi", "author", "category", "unanswerable", "chinese")
REQUIRED_FIELDS = {"id": str, "type": str, "question": str, "gold": list, "answerable": bool}


class EvalError(RagError):
    """A questions file breaks the format, or names papers the index does not hold."""

    exit_code = 2


@dataclass(frozen=True)
class Question:
    id: str
    type: str
    question: str
    gold: tuple[str, ...]
    answerable: bool
    expected: tuple[str, ...] = ()
    lang: str = "en"


def default_questions() -> Path:
    return bundled_dir("eval") / QUESTION_SETS["lexical"]


def default_question_sets() -> dict[str, Path]:
    """Set name -> questions file, for every set in eval/ (rag/eval in an installed wheel)."""
    return {name: bundled_dir("eval") / file for name, file in QUESTION_SETS.items()}


def split_part(questions: list[Question], part: str, seed: int = SPLIT_SEED) -> list[Question]:
    """The questions of one part: 'tune', 'test' or 'all'.

    Per type, the questions are shuffled with a generator seeded by `seed` and the type;
    the first TUNE_SHARE of them (rounded down) are the tune part. File order is kept."""
    if part not in SPLITS:
        raise UsageError(f"unknown split {part!r}: use {', '.join(SPLITS)}")
    if part == "all":
        return list(questions)
    tune = set()
    for question_type in sorted({q.type for q in questions}):
        ids = sorted(q.id for q in questions if q.type == question_type)
        random.Random(f"{seed}:{question_type}").shuffle(ids)
        tune.update(ids[:int(len(ids) * TUNE_SHARE)])
    return [q for q in questions if (q.id in tune) == (part == "tune")]


def default_thresholds() -> Path:
    return bundled_dir("eval") / "thresholds.json"


def load_questions(path: Path, known_ids: set[str]) -> list[Question]:
    """Parse and check a questions file; errors name the file and line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise EvalError(f"cannot read questions file {path}: {err}") from None
    questions, seen = [], set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        question = _parse_question(path, number, line, known_ids)
        if question.id in seen:
            raise EvalError(f"{path}:{number}: question id {question.id!r} is used twice")
        seen.add(question.id)
        questions.append(question)
    if not questions:
        raise EvalError(f"{path}: no questions in this file")
    return questions


def _parse_question(path: Path, number: int, line: str, known_ids: set[str]) -> Question:
    where = f"{path}:{number}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise EvalError(f"{where}: not valid JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(row, dict):
        raise EvalError(f"{where}: each line must be a JSON object")
    for name, kind in REQUIRED_FIELDS.items():
        if not isinstance(row.get(name), kind):
            raise EvalError(f"{where}: field {name!r} must be a {kind.__name__}")
    if row["type"] not in QUESTION_TYPES:
        raise EvalError(f"{where}: unknown type {row['type']!r}; use one of {', '.join(QUESTION_TYPES)}")
    unknown = [g for g in row["gold"] if g not in known_ids]
    if unknown:
        raise EvalError(f"{where}: gold paper {unknown[0]!r} is not in the index; check the id with "
                        "`rag papers --json`, or ingest the corpus it comes from")
    return Question(row["id"], row["type"], row["question"], tuple(row["gold"]), row["answerable"],
                    tuple(row.get("expected") or ()), row.get("lang", "en"))


def score_ranking(ranked: list[str], gold: set[str]) -> dict[str, float]:
    """The metrics of one ranked list of paper ids against the gold set."""
    scores = {f"recall@{k}": len(gold & set(ranked[:k])) / len(gold) for k in CUTOFFS}
    first = next((rank for rank, pid in enumerate(ranked, start=1) if pid in gold), None)
    scores["mrr"] = 1.0 / first if first else 0.0
    dcg = sum(1.0 / math.log2(rank + 1) for rank, pid in enumerate(ranked[:10], start=1) if pid in gold)
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(gold), 10) + 1))
    scores["ndcg@10"] = dcg / ideal
    return scores


def mean_metrics(rows: list[dict]) -> dict[str, float]:
    return {m: round(statistics.fmean(r["scores"][m] for r in rows), 4) for m in METRICS} | {"n": len(rows)}


def evaluate_method(settings: Settings, method: str, questions: list[Question], progress=None) -> dict:
    """Run one retrieval method over the questions with gold papers."""
    rows = []
    with Retriever(settings.with_overrides(retrieval=method)) as retriever:
        retriever.search("warm-up")
        scored = [q for q in questions if q.gold]
        for question in scored:
            started = time.perf_counter()
            result = retriever.search(question.question, k=max(CUTOFFS))
            elapsed = time.perf_counter() - started
            ranked = [hit.paper.paper_id for hit in result.hits]
            rows.append({"id": question.id, "type": question.type, "ranked": ranked, "search_s": round(elapsed, 4),
                         "scores": score_ranking(ranked, set(question.gold))})
            if progress:
                progress(method, len(rows), len(scored))
    by_type = {t: mean_metrics([r for r in rows if r["type"] == t])
               for t in QUESTION_TYPES if any(r["type"] == t for r in rows)}
    return {"overall": mean_metrics(rows), "by_type": by_type,
            "search_p50_ms": round(1000 * statistics.median(r["search_s"] for r in rows), 2), "rows": rows}


def evaluate(settings: Settings, methods: list[str], question_sets: dict[str, Path] | None = None, types=None,
             split: str = "test", answers: bool = False, judges=("grounding",), progress=None,
             answer_progress=lambda row, done, total: None, out: Path | None = None, resume: bool = False) -> dict:
    """Every retrieval method over each set's questions of one split and, with `answers`, every answer scored.

    `question_sets` maps a set name to its file (default: every set in eval/). The result
    carries a manifest of what was measured, so two runs can be compared. With `out`,
    answers are checkpointed to out/answers.jsonl as they are scored; `resume` reuses the
    rows there from an interrupted run with the same settings."""
    paths = {name: Path(path) for name, path in (question_sets or default_question_sets()).items()}
    check_types(types or [])
    with Retriever(settings) as retriever:
        abstracts = {p.paper_id: p.text for p in retriever.papers}
        index = retriever.store.name
    chosen = {name: [q for q in split_part(load_questions(path, set(abstracts)), split) if not types or q.type in types]
              for name, path in paths.items()}
    results = {"version": RESULTS_VERSION, "kind": "full" if answers else "retrieval", "split": split,
               "manifest": manifest(settings, index, paths),
               "sets": {name: evaluate_set(settings, methods, questions, abstracts, _labelled(progress, name))
                        for name, questions in chosen.items()}}
    questions = [q for part in chosen.values() for q in part]
    results["questions"] = len(questions)
    if answers:
        from rag import llm
        from rag.answer_eval import Checkpoint, describe_model, evaluate_answers

        model = llm.open_model(settings)
        results["manifest"]["llm"] = describe_model(model)
        checkpoint = None
        if out is not None:
            depends_on = {k: v for k, v in results["manifest"].items() if k != "created"} | {"judges": sorted(judges)}
            checkpoint = Checkpoint(Path(out) / "answers.jsonl", hashlib.sha256(
                json.dumps(depends_on, sort_keys=True).encode()).hexdigest())
            if not (resume and checkpoint.path.is_file()):
                checkpoint.start()
        results["answers"] = evaluate_answers(settings, questions, model, judges, answer_progress, checkpoint)
    return results


def evaluate_set(settings: Settings, methods: list[str], questions: list[Question], abstracts: dict[str, str],
                 progress=None) -> dict:
    """One question set: its size, the lexical overlap of its questions, and every method's metrics."""
    overlap = question_overlaps(questions, abstracts)
    return {"questions": len(questions), "overlap": overlap_summary(questions, overlap),
            "question_overlap": overlap,
            "methods": {method: evaluate_method(settings, method, questions, progress) for method in methods}}


def _labelled(progress, set_name: str):
    """The progress callback with each method named after its set ("paraphrase hybrid")."""
    if progress is None:
        return None
    return lambda method, done, total: progress(f"{set_name} {method}", done, total)


def question_overlaps(questions: list[Question], abstracts: dict[str, str]) -> dict[str, float]:
    """Question id -> lexical overlap with its gold abstracts, for English questions with gold papers."""
    found = {q.id: lexical_overlap(q.question, [abstracts[g] for g in q.gold])
             for q in questions if q.gold and q.lang == "en"}
    return {qid: round(value, 3) for qid, value in found.items() if value is not None}


def overlap_summary(questions: list[Question], overlap: dict[str, float]) -> dict:
    """Quartiles of the overlap: over all scored English questions, and per type."""
    by_type = {t: quartiles([overlap[q.id] for q in questions if q.type == t and q.id in overlap])
               for t in QUESTION_TYPES}
    return {"overall": quartiles(list(overlap.values())), "by_type": {t: v for t, v in by_type.items() if v["n"]}}


def check_types(types: list[str]) -> None:
    unknown = sorted(set(types) - set(QUESTION_TYPES))
    if unknown:
        raise UsageError(f"unknown question type {unknown[0]!r}: use {', '.join(QUESTION_TYPES)}")


def manifest(settings: Settings, index: str, question_sets: dict[str, Path]) -> dict:
    """What a run depended on, so two runs can be compared honestly."""
    from importlib.metadata import PackageNotFoundError, version

    libraries = {}
    for name in ("chromadb", "llama-index-core", "sentence-transformers", "bm25s", "llama_cpp_python", "openai"):
        try:
            libraries[name] = version(name)
        except PackageNotFoundError:
            libraries[name] = None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": _git("rev-parse", "HEAD"), "git_dirty": None if status is None else bool(status),
            "index": index, "index_shape": index_shape(settings),
            "settings": settings_snapshot(settings),
            "questions_sha256": {name: hashlib.sha256(path.read_bytes()).hexdigest()[:16]
                                 for name, path in question_sets.items()},
            "split": {"seed": SPLIT_SEED, "tune_share": TUNE_SHARE},
            "prompts_sha256": prompt_hashes(), "libraries": libraries,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def settings_snapshot(settings: Settings) -> dict:
    """Every setting as plain JSON, without secrets: no key or token, URLs without their user-info."""
    return {f.name: (str(v) if isinstance(v, Path) else redact_url(v) if f.name in URL_SETTINGS and v else v)
            for f in fields(settings) if f.name not in SECRET_SETTINGS for v in [getattr(settings, f.name)]}


def _git(*args: str) -> str | None:
    """The output of a git command in the checkout (None outside one)."""
    try:
        done = subprocess.run(["git", *args], cwd=PACKAGE_DIR.parent, capture_output=True, text=True, timeout=5)
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def check_thresholds(results: dict, thresholds: dict) -> list[str]:
    """Which metrics fell below the floors in thresholds[split][set][method][scope][metric]."""
    failures = []
    floors_by_set = thresholds.get(results["split"])
    if floors_by_set is None:
        raise UsageError(f"the thresholds file has no floors for the {results['split']!r} split")
    for set_name, methods in floors_by_set.items():
        if set_name.startswith("_"):
            continue  # comments
        if set_name not in results["sets"]:
            raise UsageError(f"thresholds name question set {set_name!r}, which this run did not measure")
        for method, scopes in methods.items():
            result = results["sets"][set_name]["methods"].get(method)
            if result is None:
                raise UsageError(f"thresholds name method {method!r}, which this run did not measure")
            for scope, floors in scopes.items():
                measured = result["overall"] if scope == "overall" else result["by_type"].get(scope, {})
                failures += [f"{set_name} {method} {scope} {metric} {measured.get(metric, 0.0):.3f} < {floor}"
                             for metric, floor in floors.items() if measured.get(metric, 0.0) < floor]
    return failures
