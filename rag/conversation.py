"""Multi-turn questions: condense a follow-up and the chat history into one standalone question.

"Which of those use reinforcement learning?" means nothing to the retriever; the LLM
rewrites it with the recent turns (prompts/condense_*.txt, temperature 0 like every
backend call) into a question that names what "those" were. Only the last few turns go
into the prompt, each answer cut short. A reply that is not usable falls back to the
question as typed. `ChatAnswerer` runs one chat turn: condense, then answer (answer.py),
then find the abstract sentences behind each citation (evidence.py). It formats nothing.
"""

import re
from dataclasses import dataclass, field

from rag.answer import Answerer
from rag.answer_record import Answer
from rag.evidence import HighlightedAbstract, highlight_evidence
from rag.prompt_safety import defuse
from rag.prompts import load_prompt, parse_json_reply
from rag.retrieve import Filters, Retriever, check_question
from rag.settings import Settings

MAX_HISTORY_TURNS = 3
MAX_ANSWER_CHARS = 400
MAX_QUESTION_CHARS = 500
CONDENSE_MAX_TOKENS = 96
CONDENSE_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["question"],
                   "properties": {"question": {"type": "string"}}}


@dataclass(frozen=True)
class Turn:
    """One finished exchange of a chat: what was asked and what was answered."""

    question: str
    answer: str


@dataclass
class ChatReply:
    """The result of one chat turn: the question retrieval used, the answer, the highlighted abstracts."""

    question: str
    standalone_question: str
    answer: Answer
    evidence: dict[str, HighlightedAbstract] = field(default_factory=dict)

    def to_json(self) -> dict:
        return self.answer.to_json() | {
            "question": self.question, "standalone_question": self.standalone_question,
            "evidence": {pid: h.supporting_sentences() for pid, h in self.evidence.items()}}


def format_history(history: list[Turn]) -> str:
    """The last MAX_HISTORY_TURNS turns as plain lines, answers without [n] marks and cut short."""
    lines = []
    for turn in history[-MAX_HISTORY_TURNS:]:
        answer = re.sub(r"\s*\[\d+\]", "", turn.answer).strip()
        if len(answer) > MAX_ANSWER_CHARS:
            answer = answer[:MAX_ANSWER_CHARS].rsplit(" ", 1)[0] + " …"
        lines += [f"User: {defuse(turn.question.strip())}", f"Assistant: {defuse(answer)}"]
    return "\n".join(lines)


def condense_question(model, history: list[Turn], question: str) -> str:
    """A standalone version of `question` given the chat `history`; the question itself without history."""
    question = question.strip()
    if not history:
        return question
    messages = [
        {"role": "system", "content": load_prompt("condense_system").render()},
        {"role": "user", "content": load_prompt("condense_question").render(
            history=format_history(history), question=defuse(question))},
    ]
    reply = "".join(model.stream(messages, CONDENSE_SCHEMA, CONDENSE_MAX_TOKENS))
    return parse_condensed(reply) or question


def parse_condensed(reply: str) -> str | None:
    """The question in a {"question": ...} reply (also in a code fence or among prose), or a plain-text
    one; None when there is none: a reply that starts as JSON but gives no question string, an empty
    or overlong one."""
    text = reply.strip()
    value = parse_json_reply(text)
    if text.startswith("{") or (value is not None and "question" in value):
        text = (value or {}).get("question")
        if not isinstance(text, str):
            return None
    text = " ".join(text.split())
    if not text or len(text) > MAX_QUESTION_CHARS:
        return None
    return text


class ChatAnswerer:
    """Answers the turns of a chat over one index with one LLM backend."""

    def __init__(self, settings: Settings, retriever: Retriever, model, translator=None):
        """`translator`: the retriever's, which puts answers back into the question's language (Answerer)."""
        self.model = model
        self.retriever = retriever
        self.answerer = Answerer(settings, retriever, model, translator)

    def reply(self, question: str, history: list[Turn] = (), k: int | None = None,
              filters: Filters = Filters(), on_text=lambda text: None,
              on_sentence=lambda sentence: None, on_sources=lambda hits: None) -> ChatReply:
        """Condense (when there is history), answer with streaming callbacks, then highlight the evidence."""
        question = check_question(question)
        standalone = condense_question(self.model, list(history), question)
        answer = self.answerer.ask(standalone, k=k, filters=filters, on_text=on_text, on_sentence=on_sentence,
                                   on_sources=on_sources)
        evidence = highlight_evidence(answer, self.answerer.grounding)
        return ChatReply(question, standalone, answer, evidence)
