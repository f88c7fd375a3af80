"""Choose the relevance floors of rag/claims.py on the eval's tune part, without asking the LLM again.

A full `rag eval --split tune` run keeps, for every answer, the model's draft (its claims
with their source numbers, before any check). This replays those drafts through the
answer checks under each combination of the score gate (min_dense_score) and the knobs of
claims.py (MIN_SOURCE_RELEVANCE, SCORE_MARGIN, SINGLE_PAPER_MARGIN; grids from the environment
variables GATES, SOURCE_FLOORS, SCORE_MARGINS, SINGLE_MARGINS, comma-separated), scores the answers
as `rag eval` does, and prints the figures per combination, then the best by accuracy:

    .venv/bin/python tests/tune_answer_floors.py eval-results/<the tune run>

Questions the model refused, or that the score gate kept from the model, keep their
outcome. Answers in other languages are scored on their checked English sentences
(translating back would ask the LLM). Not a test: pytest does not collect it.
"""

import functools
import itertools
import json
import os
import sys
from pathlib import Path

import rag.answer
from rag.answer import Answerer
from rag.eval.answers import score_answer, summarise
from rag.eval.questions import Question
from rag.eval.judge import GroundingJudge
from rag.retrieve import Filters, Retriever
from rag.settings import Settings

GATES = tuple(float(g) for g in os.environ.get("GATES", "0.1,0.15,0.2,0.25").split(","))   # min_dense_score
SOURCE_FLOORS = tuple(float(g) for g in os.environ.get("SOURCE_FLOORS", "0.2,0.25,0.3,0.35,0.4,0.45").split(","))
SCORE_MARGINS = tuple(float(g) for g in os.environ.get("SCORE_MARGINS", "1,0.4,0.3,0.25,0.2").split(","))
SINGLE_MARGINS = tuple(float(g) for g in os.environ.get("SINGLE_MARGINS", "0.25").split(","))   # SINGLE_PAPER_MARGIN
METRICS = ("accuracy", "answered", "unanswerable_abstained", "gold_precision", "gold_recall", "expected_found")


class DraftModel:
    """Streams one recorded draft back, in a JSON shape the reply parser reads."""

    backend, model = "replay", "draft"

    def __init__(self):
        self.draft: list[dict] = []

    def stream(self, messages, schema, max_tokens):
        yield json.dumps({"answerable": True, "sentences": self.draft})


def question_of(row: dict) -> Question:
    return Question(row["id"], row["type"], row["answer"]["question"], tuple(row["gold"]), row["answerable"],
                    tuple(row["expected"]), row["lang"])


def replay(rows: list[dict], answerer: Answerer, model: DraftModel, judges) -> list[dict]:
    scored = []
    for row in rows:
        if row["answer"]["abstain_reason"] in ("model", "retrieval"):
            scored.append(row)
            continue
        if not answerer.retrieval_is_confident(answerer.retriever.search(row["answer"]["question"]).hits):
            scored.append(row | {"outcome": row["outcome"] | {"answered": False, "abstain_reason": "retrieval",
                                                              "correct": not row["answerable"]}})
            continue
        model.draft = row["answer"]["draft"]
        scored.append(score_answer(question_of(row), answerer.ask(row["answer"]["question"]).to_json(), judges))
    return scored


def main(run: Path) -> None:
    results = json.loads((run / "results.json").read_text(encoding="utf-8"))
    rows = results["answers"]["rows"]
    settings = Settings.from_env()
    model = DraftModel()
    with Retriever(settings) as retriever:
        answerer = Answerer(settings, retriever, model)
        answerer._translate_back = lambda record: None
        search, build_sources = functools.cache(retriever.search), answerer.build_sources   # the same for every knob
        retriever.search = lambda question, k=None, filters=Filters(): search(question, k, filters)
        sources = {}
        answerer.build_sources = lambda hits, query: sources.setdefault(
            tuple(h.paper.paper_id for h in hits), build_sources(hits, query))
        embed = functools.lru_cache(maxsize=None)(answerer.grounding.embed)
        answerer.grounding.embed = embed
        judges = [GroundingJudge(retriever)]
        figures = []
        for gate, source, margin, single in itertools.product(GATES, SOURCE_FLOORS, SCORE_MARGINS, SINGLE_MARGINS):
            answerer.settings = settings.with_overrides(min_dense_score=gate)
            rag.answer.MIN_SOURCE_RELEVANCE, rag.answer.SCORE_MARGIN = source, margin
            rag.answer.SINGLE_PAPER_MARGIN = single
            summary = summarise(replay(rows, answerer, model, judges))
            figures.append((f"gate {gate:.2f} source {source:.2f} score margin {margin:.2f} single {single:.2f}",
                            summary))
            print(f"{figures[-1][0]}: " + " ".join(f"{m} {summary[m] or 0:.3f}" for m in METRICS), flush=True)
    print("\nbest accuracy first:")
    for knobs, summary in sorted(figures, key=lambda f: -(f[1]["accuracy"] or 0))[:15]:
        print(f"{knobs}: " + " ".join(f"{m} {summary[m] or 0:.3f}" for m in METRICS))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
