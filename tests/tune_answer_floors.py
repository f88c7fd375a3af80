"""Choose the knobs of the answer checks on the eval's tune part, without asking the LLM again.

A full `rag eval --split tune` run keeps, for every answer, the model's draft (its claims
with their source numbers, before any check). This replays those drafts through the
answer checks under each combination of a grid of knobs: the score gate (`min_dense_score`)
and the floors and margins of rag/claims.py, given as
GRID='min_dense_score=0.1,0.15;MIN_SOURCE_RELEVANCE=0.3,0.35' (knobs split by ';', values by ',';
default: the values in use), scores the answers as `rag eval` does, and prints the figures per
combination, then the best by accuracy:

    GRID='...' .venv/bin/python tests/tune_answer_floors.py eval-results/<the tune run>

Questions the model refused, or that the score gate kept from the model, keep their
outcome. Answers in other languages are scored on their checked English sentences
(translating back would ask the LLM). `rag eval --replay RUN` scores one setting the way a
full run does. Not a test: pytest does not collect it.
"""

import functools
import itertools
import json
import os
import sys
from pathlib import Path

import rag.citation_check
import rag.claims
from rag.answer import Answerer
from rag.eval.answers import score_answer, summarise
from rag.eval.questions import Question
from rag.eval.judge import GroundingJudge
from rag.eval.replay import reply_of
from rag.retrieve import Filters, Retriever
from rag.settings import Settings

SETTING_KNOBS = ("min_dense_score",)   # the rest are constants of rag.citation_check (imported from rag.claims)
METRICS = ("accuracy", "answered", "unanswerable_abstained", "gold_precision", "gold_recall", "expected_found")


class DraftModel:
    """Streams one recorded answer's draft back (replay.reply_of)."""

    backend, model = "replay", "draft"

    def __init__(self):
        self.answer: dict = {}

    def stream(self, messages, schema, max_tokens):
        yield reply_of(self.answer)


def question_of(row: dict) -> Question:
    return Question(row["id"], row["type"], row["answer"]["question"], tuple(row["gold"]), row["answerable"],
                    tuple(row["expected"]), row["lang"])


def replay(rows: list[dict], answerer: Answerer, model: DraftModel, judges) -> list[dict]:
    scored = []
    for row in rows:
        if row["answer"]["abstain_reason"] in ("model", "retrieval"):
            scored.append(row)
            continue
        found = answerer.retriever.search(row["answer"]["question"])
        if not answerer.retrieval_is_confident(found.hits, found.names_held):
            scored.append(row | {"outcome": row["outcome"] | {"answered": False, "abstain_reason": "retrieval",
                                                              "correct": not row["answerable"]}})
            continue
        model.answer = row["answer"]
        scored.append(score_answer(question_of(row), answerer.ask(row["answer"]["question"]).to_json(), judges))
    return scored


def changed(rows: list[dict], replayed: list[dict], now_correct: bool) -> list[str]:
    """Ids of the questions whose outcome the replay turned right (or wrong) against the run."""
    return [new["id"] for old, new in zip(rows, replayed)
            if new["outcome"]["correct"] == now_correct != old["outcome"]["correct"]]


def grid(spec: str, settings: Settings) -> list[dict]:
    """Every combination of the knob values in `spec` ('A=1,2;B=3'); the values in use without one."""
    values = {}
    for part in filter(None, spec.split(";")):
        name, _, listed = part.partition("=")
        name = name.strip()
        if name not in SETTING_KNOBS and not hasattr(rag.citation_check, name) and not hasattr(rag.claims, name):
            raise SystemExit(f"unknown knob {name}: a setting ({', '.join(SETTING_KNOBS)}) or a constant of "
                             "rag.citation_check or rag.claims")
        values[name] = [float(v) for v in listed.split(",")]
    if not values:
        values = {"min_dense_score": [settings.min_dense_score]}
    return [dict(zip(values, combination)) for combination in itertools.product(*values.values())]


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
        answerer.build_sources = lambda hits, query, question="": sources.setdefault(
            (tuple(h.paper.paper_id for h in hits), question), build_sources(hits, query, question))
        embed = functools.lru_cache(maxsize=None)(answerer.grounding.embed)
        answerer.grounding.embed = embed
        judges = [GroundingJudge(retriever)]
        figures = []
        for knobs in grid(os.environ.get("GRID", ""), settings):
            answerer.settings = settings.with_overrides(**{k: v for k, v in knobs.items() if k in SETTING_KNOBS})
            for name, value in knobs.items():
                for module in (rag.citation_check, rag.claims):   # the margins are read in rag.claims
                    if name not in SETTING_KNOBS and hasattr(module, name):
                        setattr(module, name, value)
            replayed = replay(rows, answerer, model, judges)
            summary = summarise(replayed)
            figures.append((" ".join(f"{name} {value:g}" for name, value in knobs.items()), summary))
            print(f"{figures[-1][0]}: " + " ".join(f"{m} {summary[m] or 0:.3f}" for m in METRICS), flush=True)
            print("  now right: " + " ".join(changed(rows, replayed, True)) + " | now wrong: "
                  + " ".join(changed(rows, replayed, False)), flush=True)
    print("\nbest accuracy first:")
    for knobs, summary in sorted(figures, key=lambda f: -(f[1]["accuracy"] or 0))[:15]:
        print(f"{knobs}: " + " ".join(f"{m} {summary[m] or 0:.3f}" for m in METRICS))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
