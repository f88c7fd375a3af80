"""One `rag eval` run: every retrieval method over the chosen part of each question set
(retrieval.py) and, for a full run, every answer scored (answers.py); the manifest of what the
run depended on; and the check of a run against the floors of eval/thresholds.json.
report.py writes and compares runs.
"""

import hashlib
import json
import subprocess
import time
from pathlib import Path

from rag.errors import UsageError
from rag.eval.questions import SPLIT_SEED, TUNE_SHARE, check_types, default_question_sets, load_questions, split_part
from rag.eval.retrieval import evaluate_set, labelled
from rag.prompts import prompt_hashes
from rag.retrieve import Retriever
from rag.settings import PACKAGE_DIR, Settings, settings_snapshot
from rag.store import index_shape

RESULTS_VERSION = 3


def evaluate(settings: Settings, methods: list[str], question_sets: dict[str, Path] | None = None, types=None,
             split: str = "test", answers: bool = False, judges=("grounding",), progress=None,
             answer_progress=lambda row, done, total: None, out: Path | None = None, resume: bool = False,
             open_model=None) -> dict:
    """Every retrieval method over each set's questions of one split and, with `answers`, every answer scored.

    `question_sets` maps a set name to its file (default: every set in eval/). The result
    carries a manifest of what was measured, so two runs can be compared. With `out`,
    answers are checkpointed to out/answers.jsonl as they are scored; `resume` reuses the
    rows there from an interrupted run with the same settings. `open_model(settings)` opens the model
    that answers and translates questions in other scripts (default rag.llm.open_model, the configured
    LLM; a replay.ReplayModel replays a run), once and only when needed."""
    paths = {name: Path(path) for name, path in (question_sets or default_question_sets()).items()}
    open_model = _open_once(open_model)
    check_types(types or [])
    with Retriever(settings) as retriever:
        abstracts = {p.paper_id: p.text for p in retriever.papers}
        index = retriever.store.name
    chosen = {name: [q for q in split_part(load_questions(path, set(abstracts)), split) if not types or q.type in types]
              for name, path in paths.items()}
    results = {"version": RESULTS_VERSION, "kind": "full" if answers else "retrieval", "split": split,
               "manifest": manifest(settings, index, paths),
               "sets": {name: evaluate_set(settings, methods, questions, abstracts, labelled(progress, name),
                                           open_model)
                        for name, questions in chosen.items()}}
    questions = [q for part in chosen.values() for q in part]
    results["questions"] = len(questions)
    if answers:
        from rag.eval.answers import Checkpoint, describe_model, evaluate_answers

        model = open_model(settings)
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


def _open_once(open_model):
    """`open_model` (default rag.llm.open_model), opening the model at the first call only."""
    from rag.llm import open_model as configured

    opened = []

    def once(settings):
        if not opened:
            opened.append((open_model or configured)(settings))
        return opened[0]
    return once


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
