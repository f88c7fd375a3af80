"""A scripted fake LLM: replies are queued with enqueue(), calls are kept in history."""

import json


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
    """A reply in the JSON shape the prompt asks for: reply(("text", [1]), ...)."""
    return {"answerable": answerable, "sentences": [{"text": t, "sources": s} for t, s in sentences]}
