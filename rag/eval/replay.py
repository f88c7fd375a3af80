"""Replay an eval run's model replies through today's checks (`rag eval --replay RUN`).

The checks (citations, grounding, names, relevance, quoting) decide most of an answer's
outcome, and the model's reply does not depend on them. So a change to the checks can be
measured on a run's saved replies in minutes instead of asking the model again for an hour:
ReplayModel answers each question with the claims that run's answer recorded as its draft,
as a JSON reply that gives them.
A change to what the model reads (prompt, passages, retrieval) needs a new run.
"""

import json
from pathlib import Path

from rag.answer_record import CANNOT_ANSWER
from rag.disk_cache import read_json_lines
from rag.errors import EvalError
from rag.prompt_safety import defuse

REPLY_ROLES = ("system", "user")   # an answer's messages; a translation is one user message


class ReplayModel:
    """A ChatModel whose replies are a run's drafts, found by the question in the prompt."""

    backend = "replay"

    def __init__(self, run: Path):
        rows = read_answer_rows(run)
        self.model = f"replay of {run}"
        self._replies = {defuse(row["answer"]["query"]): reply_of(row["answer"]) for row in rows}
        self._odds = {defuse(row["answer"]["query"]): row["answer"].get("answerable_odds") for row in rows}

    def stream(self, messages: list[dict], schema: dict | None, max_tokens: int):
        if tuple(m["role"] for m in messages) != REPLY_ROLES:
            yield "{}"   # a translation not in the translation cache: the English text is kept
            return
        yield self._replies[self._query_in(messages)]

    def odds(self, messages: list[dict], reply_start: str, yes, no) -> float | None:
        """The model's odds that the sources answer, as the run recorded them (None: a run without them)."""
        return self._odds[self._query_in(messages)]

    def _query_in(self, messages: list[dict]) -> str:
        prompt = messages[-1]["content"]
        found = [query for query in self._replies if query in prompt]
        if not found:
            raise EvalError("a question is not in the replayed run: replay with that run's --split and --types")
        return max(found, key=len)


def read_answer_rows(run: Path) -> list[dict]:
    """The scored rows of a run folder's answers.jsonl (its first line is the settings key)."""
    path = Path(run) / "answers.jsonl"
    if not path.is_file():
        raise EvalError(f"{run} holds no answers.jsonl: replay a full `rag eval` run folder")
    values, _ = read_json_lines(path)
    rows = [row for row in values if isinstance(row, dict) and "answer" in row]
    if not rows:
        raise EvalError(f"{path} holds no answers to replay")
    return rows


def reply_of(answer: dict) -> str:
    """A reply that gives this answer's draft, in the sentence shape the reply parser reads (each claim
    with all its source numbers); a refusal when the model refused before any claim."""
    draft = answer.get("draft") or []
    refused = answer.get("abstain_reason") == "model" and not any(CANNOT_ANSWER.rstrip(".") in d["text"]
                                                                  for d in draft)
    return json.dumps({"answerable": not refused, "sentences": [] if refused else draft})
