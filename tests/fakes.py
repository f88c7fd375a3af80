"""Fake LLMs: ScriptedModel replays queued replies; QuotingModel quotes its first source."""

import json
import re


class ScriptedModel:
    """Streams queued replies a few characters at a time, like a real backend."""

    backend = "fake"
    model = "scripted"

    def __init__(self, *replies):
        self.replies = list(replies)
        self.history: list[list[dict]] = []
        self.streamed = 0

    def enqueue(self, reply) -> None:
        self.replies.append(reply)

    def stream(self, messages, schema, max_tokens):
        self.history.append(messages)
        reply = self.replies.pop(0)
        text = reply if isinstance(reply, str) else json.dumps(reply)
        for start in range(0, len(text), 5):
            self.streamed += 1
            yield text[start:start + 5]


def reply(*sentences, answerable=True) -> dict:
    """A reply of sentences that list their sources (a shape the parser also reads): reply(("text", [1]), ...)."""
    return {"answerable": answerable, "sentences": [{"text": t, "sources": s} for t, s in sentences]}


def items(*claims, answerable=True) -> dict:
    """A reply in the JSON shape the prompt asks for: items(("claim", 1), ...), one source per claim."""
    return {"answerable": answerable, "items": [{"source": n, "claim": t} for t, n in claims]}


class DoubtingModel(ScriptedModel):
    """A ScriptedModel that, like the local backend, tells its odds that the sources answer."""

    def __init__(self, *replies, odds: float):
        super().__init__(*replies)
        self.given_odds = odds

    def odds(self, messages, reply_start, yes, no):
        return self.given_odds


class QuotingModel:
    """Answers by quoting the first sentence of source 1, cited [1]; as a judge, says 'supported'.

    Given llama-index's stock prompt instead, it quotes the first sentence of the context's last paper.

    Deterministic and relevant, so an eval over it has outcomes a test can predict."""

    backend = "fake"
    model = "quoting"

    def __init__(self):
        self.calls = {"answer": 0, "judge": 0}

    def odds(self, messages, reply_start, yes, no):
        """Sure that its sources answer, as the local model says it is of most answerable questions."""
        return 4.0

    def stream(self, messages, schema, max_tokens):
        if schema and "supported" in schema["properties"]:
            self.calls["judge"] += 1
            yield json.dumps({"supported": True})
            return
        self.calls["answer"] += 1
        prompt = messages[-1]["content"]
        source = re.search(r'<source id="1">\nPaper: [^\n]*\n(.*?)\n</source>', prompt, re.S)
        if source is None:  # llama-index's stock prompt (the naive pipeline of rag bench): plain text
            context = re.search(r"-{5,}\n(.*?)\n-{5,}", prompt, re.S)[1]
            yield _first_sentence(context.split("\n\n")[-1])
            return
        yield json.dumps(items((_first_sentence(source[1]), 1)))


def _first_sentence(text: str) -> str:
    return re.split(r"(?<=[.!?])\s", text.strip(), maxsplit=1)[0]


def opener(model):
    """An `open_model` that gives this fake model: what main(), the UI backend, eval and bench take."""
    return lambda settings: model
