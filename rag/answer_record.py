"""The answer record that `rag ask --json`, the UI and the eval read (Answer), with its checked sentences,
its citations and the sources the model was given."""

from dataclasses import dataclass, field

from rag.corpus import Paper
from rag.prompt_safety import Screened
from rag.retrieve import Hit

CANNOT_ANSWER = "The provided papers do not answer this question."
LIST_LEAD = "{count} of the papers answer this:"
STREAMED_LIST_LEAD = "Papers that answer this:"   # `rag ask` prints a list as it is checked: no count yet


@dataclass
class Source:
    """A retrieved paper as shown to the model: its number, its hit and the chunks given."""

    n: int
    hit: Hit
    chunks: list[str]
    embeddings: list[list[float]]

    @property
    def text(self) -> str:
        return " … ".join(self.chunks)


@dataclass(frozen=True)
class Citation:
    n: int
    paper: Paper
    score: float

    def to_json(self) -> dict:
        p = self.paper
        return {"n": self.n, "paper_id": p.paper_id, "label": p.label, "authors": list(p.authors),
                "category": p.category, "source": p.source, "score": round(self.score, 4)} | p.bibliography()


@dataclass
class Sentence:
    """One checked sentence. kind: the model's `claim`; a `quote` of the cited abstract standing in
    for a claim that restated the question; `not_stated` (the abstract does not state what was
    asked); `authors` (who wrote the cited paper, from its record, for a question that asks who);
    `off_question` (no answer: true of its source but off the question, or the question restated; never
    shown as one)."""

    text: str
    citations: list[int]
    supported: bool
    english: str | None = None     # the checked English sentence, when `text` is its translation
    kind: str = "claim"
    quote: str | None = None       # for a quote: the abstract's sentence, verbatim

    def render(self) -> str:
        return self.text + ("" if not self.citations else " " + "".join(f"[{n}]" for n in self.citations))

    def to_json(self) -> dict:
        return ({"text": self.text, "citations": self.citations, "supported": self.supported, "kind": self.kind}
                | ({"english": self.english} if self.english else {}) | ({"quote": self.quote} if self.quote else {}))


@dataclass
class Answer:
    """The one record that `rag ask --json`, the UI and the eval use."""

    question: str
    answer: str
    abstained: bool
    citations: list[Citation]
    sentences: list[Sentence]
    sources: list[Hit]
    invalid_citations: list[str]
    backend: str
    model: str
    index: str
    timings: dict = field(default_factory=dict)
    abstain_reason: str | None = None
    query: str = ""                  # what was searched and answered: the question or its English translation
    language: str | None = None      # the question's language when it is not English
    draft: list[dict] = field(default_factory=list)   # the model's claims as it wrote them, before the checks
    screened: dict[str, Screened] = field(default_factory=dict)   # paper id -> its instruction sentences
    answerable_odds: float | None = None   # the model's log-odds that the sources answer (backends that tell)

    @property
    def lead(self) -> str | None:
        """For an answer about several papers, the line before its list of claims; else None. It counts
        the papers that supported claims are about: one marked unsupported answers nothing."""
        papers = {n for s in self.sentences if s.supported and s.kind != "not_stated" for n in s.citations}
        if self.abstained or len(papers) < 2 or len(self.sentences) < 2:
            return None
        return "" if self.language else LIST_LEAD.format(count=len(papers))

    def items(self) -> list[list[Sentence]]:
        """The list of an answer about several papers: one item per paper (per set of citations), its
        sentences in the order shown, the papers in the order they are first told."""
        grouped: dict[tuple[int, ...], list[Sentence]] = {}
        for sentence in self.sentences:
            grouped.setdefault(tuple(sentence.citations), []).append(sentence)
        return list(grouped.values())

    def _instructions_json(self, hit: Hit) -> dict:
        """How many of the paper's sentences read as instructions to the model and were kept out of the
        prompt; `instructions_only`: most did, so none of the paper was given."""
        screened = self.screened.get(hit.paper.paper_id)
        return {"instructions_removed": screened.removed if screened else 0,
                "instructions_only": bool(screened and screened.left_out)}

    def to_json(self) -> dict:
        return {"question": self.question, "answer": self.answer, "abstained": self.abstained,
                "abstain_reason": self.abstain_reason, "query": self.query, "language": self.language,
                "citations": [c.to_json() for c in self.citations],
                "sentences": [s.to_json() for s in self.sentences],
                "sources": [h.to_json() | self._instructions_json(h) for h in self.sources],
                "invalid_citations": self.invalid_citations,
                "draft": self.draft,
                "answerable_odds": None if self.answerable_odds is None else round(self.answerable_odds, 3),
                "backend": self.backend, "model": self.model, "index": self.index,
                "timings": {k: round(v, 4) if isinstance(v, float) else v for k, v in self.timings.items()}}
