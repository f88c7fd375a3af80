"""Retrieval metrics of the eval: recall@1/5/10, MRR and nDCG@10 of each retrieval method, per set,
overall and per question type, with the median search time and each question's lexical
overlap with its gold abstracts (overlap.py). Only questions with gold papers are scored.
"""

import math
import statistics
import time

from rag.eval.overlap import lexical_overlap, quartiles
from rag.eval.questions import QUESTION_TYPES, Question
from rag.retrieve import Retriever
from rag.settings import Settings
from rag.translate import translator_for

CUTOFFS = (1, 5, 10)
METRICS = ("recall@1", "recall@5", "recall@10", "mrr", "ndcg@10")


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


def evaluate_method(settings: Settings, method: str, questions: list[Question], progress=None,
                    open_model=None) -> dict:
    """Run one retrieval method over the questions with gold papers; `open_model` opens the LLM that
    translates questions in other scripts (default: the configured one)."""
    rows = []
    settings = settings.with_overrides(retrieval=method)
    with Retriever(settings, translator=translator_for(settings, open_model)) as retriever:
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


def evaluate_set(settings: Settings, methods: list[str], questions: list[Question], abstracts: dict[str, str],
                 progress=None, open_model=None) -> dict:
    """One question set: its size, the lexical overlap of its questions, and every method's metrics
    (none when no question has gold papers: only unanswerable questions without them)."""
    overlap = question_overlaps(questions, abstracts)
    scored = any(q.gold for q in questions)
    return {"questions": len(questions), "overlap": overlap_summary(questions, overlap),
            "question_overlap": overlap,
            "methods": {method: evaluate_method(settings, method, questions, progress, open_model)
                        for method in methods} if scored else {}}


def labelled(progress, set_name: str):
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
