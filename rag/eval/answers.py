"""Answer evaluation: ask every question, then score citations, grounding, correctness, abstention, latency.

Per answer (definitions in eval/README.md):
- citation validity: citations that name a paper among the sources given;
- gold precision / recall: cited papers that are gold / gold papers cited;
- ALCE-style citation recall (sentences their citations support together) and precision
  (citations that help support their sentence), by each judge in judge.py;
- expected strings: all `expected` strings of the question present in the answer;
- correct: an answerable question answered citing a gold paper (and containing its
  expected strings), or an unanswerable one abstained on; LitQA-style accuracy is
  correct / all, precision is correct answers / answers given.
"""

import json
import math
import re
import statistics
import unicodedata

from rag.answer import Answerer
from rag.disk_cache import read_json_lines
from rag.errors import UsageError
from rag.eval.questions import QUESTION_TYPES, Question
from rag.eval.judge import GroundingJudge, LLMJudge
from rag.grounding import NUMBER, numbers
from rag.retrieve import Retriever
from rag.settings import Settings
from rag.translate import translator_for

SUMMARY_METRICS = ("answered", "false_abstention", "unanswerable_abstained", "accuracy", "precision",
                   "citation_validity", "gold_precision", "gold_recall", "alce_recall_grounding",
                   "alce_precision_grounding", "alce_recall_llm", "alce_precision_llm", "expected_found")


def evaluate_answers(settings: Settings, questions: list[Question], model, judges=("grounding",),
                     progress=lambda row, done, total: None, checkpoint: "Checkpoint | None" = None) -> dict:
    """Answer every question with `model` and score each answer; metrics overall and per type.

    With a checkpoint, each scored row is saved as it is made, and rows saved by an
    interrupted run with the same settings are taken instead of asking again."""
    rows = []
    saved = checkpoint.load() if checkpoint else {}
    translator = translator_for(settings, lambda _settings: model)
    with Retriever(settings, translator=translator) as retriever:
        answerer = Answerer(settings, retriever, model, translator)
        active = [GroundingJudge(retriever)]
        if "llm" in judges:
            active.append(LLMJudge(model, retriever, settings.derived_cache_dir))
        for question in questions:
            row = saved.get(question.id)
            if row is None:
                row = score_answer(question, answerer.ask(question.question).to_json(), active)
                if checkpoint:
                    checkpoint.save(row)
            rows.append(row)
            progress(row, len(rows), len(questions))
        asked = {j.name: getattr(j, "asked", 0) for j in active}
    return {"overall": summarise(rows), "by_type": {t: summarise([r for r in rows if r["type"] == t])
                                                    for t in QUESTION_TYPES if any(r["type"] == t for r in rows)},
            "judges": [j.name for j in active], "judge_calls": asked, "rows": rows}


class Checkpoint:
    """Scored rows of one run, one JSON line each, after a first line naming what they depend on."""

    def __init__(self, path, key: str):
        self.path = path
        self.key = key

    def load(self) -> dict[str, dict]:
        """Rows saved by an earlier run with the same key; an error if the key differs."""
        if not self.path.exists():
            return {}
        values, _ = read_json_lines(self.path)   # a line cut by a killed run is skipped, asked again
        if not values or not isinstance(values[0], dict) or values[0].get("key") != self.key:
            raise UsageError(f"{self.path} was written with other settings, code or questions: "
                             "resume into a new --out folder, or delete that file")
        return {row["id"]: row for row in values[1:] if isinstance(row, dict) and "id" in row}

    def start(self) -> None:
        """Begin a new checkpoint file, dropping any older one."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps({"key": self.key}) + "\n", encoding="utf-8")

    def save(self, row: dict) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def score_answer(question: Question, record: dict, judges) -> dict:
    """One question's outcome: what was cited, whether it is valid, grounded and correct."""
    answered = not record["abstained"]
    paper_of = {c["n"]: c["paper_id"] for c in record["citations"]}
    given = {s["paper_id"] for s in record["sources"]}
    marks = [n for s in record["sentences"] for n in s["citations"]] if answered else []
    cited = sorted({paper_of[n] for n in marks if n in paper_of})
    gold = set(question.gold)
    hits = len(gold & set(cited))
    outcome = {
        "answered": answered, "abstain_reason": record["abstain_reason"],
        "citations": len(marks), "valid_citations": sum(paper_of.get(n) in given for n in marks),
        "dropped_citations": len(record["invalid_citations"]), "cited": cited,
        "gold_precision": hits / len(cited) if answered and gold and cited else None,
        "gold_recall": hits / len(gold) if answered and gold and question.answerable else None,
        "expected_found": contains_all(record["answer"], question.expected) if question.expected else None,
    }
    outcome["correct"] = is_correct(question, answered, hits, outcome["expected_found"])
    if answered:
        sentences = [(s.get("english") or s["text"], [paper_of[n] for n in s["citations"] if n in paper_of])
                     for s in record["sentences"] if s.get("kind") not in ("not_stated", "authors")]
        # judged: the sentences that the abstracts back (not what is absent, nor the authors from the record);
        # a translated answer is judged by the English sentences that were checked against the abstracts
        for judge in judges:
            scores = alce_scores(sentences, judge.supports)
            outcome[f"alce_recall_{judge.name}"] = scores["recall"]
            outcome[f"alce_precision_{judge.name}"] = scores["precision"]
    timings = record["timings"]
    return {"id": question.id, "type": question.type, "answerable": question.answerable, "lang": question.lang,
            "gold": list(question.gold), "expected": list(question.expected), "outcome": outcome,
            "first_token_s": timings.get("first_token_s"), "total_s": timings.get("total_s"),
            "answer": record}


def is_correct(question: Question, answered: bool, gold_cited: int, expected_found) -> bool:
    if not question.answerable:
        return not answered
    return answered and (not question.gold or gold_cited > 0) and expected_found is not False


def alce_scores(sentences: list[tuple[str, list[str]]], supports) -> dict:
    """ALCE citation recall and precision of one answer; supports(claim, paper_ids) -> bool.

    Recall: share of sentences whose citations, together, support them (an uncited
    sentence counts as unsupported). Precision: share of citations that are needed: in a
    supported sentence, a citation is irrelevant when it supports nothing alone and the
    others still support the sentence without it."""
    if not sentences:
        return {"recall": None, "precision": None}
    supported_sentences = needed = total = 0
    for text, cited in sentences:
        total += len(cited)
        if not cited or not supports(text, cited):
            continue
        supported_sentences += 1
        for paper_id in cited:
            others = [p for p in cited if p != paper_id]
            irrelevant = others and not supports(text, [paper_id]) and supports(text, others)
            needed += not irrelevant
    return {"recall": supported_sentences / len(sentences), "precision": needed / total if total else None}


def contains_all(answer: str, expected) -> bool:
    """Every expected string is in the answer, compared after normalise(); one that is a bare number is
    also found as its value, however written ('747k' in '747,000 problems', as the answer checks read it)."""
    text = normalise(answer)
    return all(normalise(e) in text or (NUMBER.fullmatch(e.strip()) and numbers(e) <= numbers(answer))
               for e in expected)


def normalise(text: str) -> str:
    """Lower case, NFKC, one dash and one times sign, no thousands separators or LaTeX around numbers."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = text.translate(str.maketrans({"×": "x", "–": "-", "—": "-", "−": "-", "$": None, "\\": None}))
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)   # not \b: a CJK character after it is a word character
    return re.sub(r"\s+", " ", re.sub(r"\s+%", "%", text)).strip()


def summarise(rows: list[dict]) -> dict:
    """The answer metrics of a group of scored rows (None where no row applies)."""
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]
    answered = [r for r in rows if r["outcome"]["answered"]]
    marks = sum(r["outcome"]["citations"] for r in answered)
    asked = [r for r in rows if r["first_token_s"] is not None]
    summary = {
        "n": len(rows),
        "answered": share(sum(r["outcome"]["answered"] for r in answerable), len(answerable)),
        "false_abstention": share(sum(not r["outcome"]["answered"] for r in answerable), len(answerable)),
        "unanswerable_abstained": share(sum(not r["outcome"]["answered"] for r in unanswerable), len(unanswerable)),
        "accuracy": share(sum(r["outcome"]["correct"] for r in rows), len(rows)),
        "precision": share(sum(r["outcome"]["correct"] for r in answered), len(answered)),
        "citation_validity": share(sum(r["outcome"]["valid_citations"] for r in answered), marks),
        "dropped_citations": sum(r["outcome"]["dropped_citations"] for r in rows),
    }
    for metric in ("gold_precision", "gold_recall", "alce_recall_grounding", "alce_precision_grounding",
                   "alce_recall_llm", "alce_precision_llm", "expected_found"):
        summary[metric] = _mean([r["outcome"].get(metric) for r in rows])
    summary |= latency_summary("first_token", [r["first_token_s"] for r in asked])
    summary |= latency_summary("total", [r["total_s"] for r in rows if r["total_s"] is not None])
    return summary


def latency_summary(name: str, seconds: list[float]) -> dict:
    """Median and 90th percentile, in seconds."""
    if not seconds:
        return {f"{name}_p50_s": None, f"{name}_p90_s": None}
    return {f"{name}_p50_s": round(statistics.median(seconds), 2), f"{name}_p90_s": round(percentile(seconds, 90), 2)}


def percentile(values: list[float], p: int) -> float:
    """The p-th percentile (1-99) of the values, interpolated (statistics.quantiles, inclusive);
    the value itself when there is one. Also bench/measure.py's search p95."""
    if len(values) == 1:
        return values[0]
    step = math.gcd(p, 100)   # 90 -> the last of 10 quantiles, 95 -> the last of 20
    return statistics.quantiles(values, n=100 // step, method="inclusive")[p // step - 1]


def share(count: int, total: int, digits: int = 4) -> float | None:
    """count / total rounded to `digits` (the eval's 4; bench/measure.py prints 3); None when total is 0."""
    return round(count / total, digits) if total else None


def _mean(values) -> float | None:
    present = [float(v) for v in values if v is not None]
    return round(statistics.fmean(present), 4) if present else None


def describe_model(model) -> dict:
    """What answered: backend, model name and, for the local model, the sha256 of its file."""
    info = {"backend": model.backend, "model": model.model}
    path = getattr(model, "path", None)
    if path is not None:
        info["model_sha256"] = file_sha256(path)
        info["model_bytes"] = path.stat().st_size
    return info


def file_sha256(path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while block := source.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()
