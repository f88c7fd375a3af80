"""The eval's question sets: the Question record, reading and checking a questions file, and the
tune and test parts.

The sets are eval/questions.jsonl (worded close to the abstracts) and eval/paraphrase.jsonl
(worded away from them), format in eval/README.md; an installed rag carries them as rag/eval/.
Each set is split into a tune part and a test part: a fixed seed, stratified by type.
"""

import json
import random
from dataclasses import dataclass
from pathlib import Path

from rag.errors import EvalError, UsageError
from rag.settings import bundled_dir

QUESTION_SETS = {"lexical": "questions.jsonl", "paraphrase": "paraphrase.jsonl"}
SPLITS = ("test", "tune", "all")
SPLIT_SEED = 13            # fixed: the same questions are tune questions in every run
TUNE_SHARE = 0.5           # of each type, rounded down; the test part gets the rest
QUESTION_TYPES = ("paraphrase", "detail", "multi", "author", "category", "unanswerable", "chinese")
REQUIRED_FIELDS = {"id": str, "type": str, "question": str, "gold": list, "answerable": bool}


@dataclass(frozen=True)
class Question:
    id: str
    type: str
    question: str
    gold: tuple[str, ...]
    answerable: bool
    expected: tuple[str, ...] = ()
    lang: str = "en"


def eval_dir() -> Path:
    """The folder of the question sets: eval/ in a checkout, rag/eval (this package) in a wheel."""
    return bundled_dir("eval", holding=QUESTION_SETS["lexical"])


def default_questions() -> Path:
    return eval_dir() / QUESTION_SETS["lexical"]


def default_question_sets() -> dict[str, Path]:
    """Set name -> questions file, for every set in eval/ (rag/eval in an installed wheel)."""
    return {name: eval_dir() / file for name, file in QUESTION_SETS.items()}


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
    return eval_dir() / "thresholds.json"


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


def check_types(types: list[str]) -> None:
    unknown = sorted(set(types) - set(QUESTION_TYPES))
    if unknown:
        raise UsageError(f"unknown question type {unknown[0]!r}: use {', '.join(QUESTION_TYPES)}")
