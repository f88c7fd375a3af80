"""Which sentences of a cited abstract back the answer: the evidence the UI highlights.

For every supported answer sentence and each paper it cites, the abstract sentence
closest to it (cosine similarity of the local embeddings, helped by shared key terms)
is taken as its evidence when it is close enough. Unsupported sentences get no
evidence. Deterministic, no LLM; this module renders nothing.
"""

from dataclasses import dataclass

from rag.answer_record import Answer
from rag.corpus import split_sentences  # noqa: F401  (ui/render.py takes it from here)
from rag.grounding import GroundingChecker, cosine

MIN_EVIDENCE_SIMILARITY = 0.4   # cosine of answer sentence and abstract sentence ...
MIN_EVIDENCE_TERMS = 0.6        # ... or this share of the answer sentence's key terms
TERM_WEIGHT = 0.3               # how much shared terms count when choosing the best sentence


@dataclass(frozen=True)
class HighlightedAbstract:
    """A paper's abstract split into sentences, with the indices of those that back the answer."""

    paper_id: str
    sentences: tuple[str, ...]
    supporting: frozenset[int]

    def supporting_sentences(self) -> list[str]:
        return [s for i, s in enumerate(self.sentences) if i in self.supporting]


def highlight_evidence(answer: Answer, grounding: GroundingChecker) -> dict[str, HighlightedAbstract]:
    """For each cited paper (by paper_id), its abstract with the sentences that back the answer marked."""
    papers = {c.n: c.paper for c in answer.citations}
    claims: dict[int, list[str]] = {}
    for sentence in answer.sentences:
        if sentence.supported and sentence.kind != "not_stated":
            for n in sentence.citations:
                if n in papers:   # as checked: a quote is matched by the abstract sentence it quotes
                    claims.setdefault(n, []).append(sentence.quote or sentence.english or sentence.text)
    highlighted = {}
    for n, paper in papers.items():
        sentences = split_sentences(paper.text)
        supporting = _best_matches(claims.get(n, []), sentences, grounding)
        highlighted[paper.paper_id] = HighlightedAbstract(paper.paper_id, tuple(sentences), frozenset(supporting))
    return highlighted


def _best_matches(claims: list[str], sentences: list[str], grounding: GroundingChecker) -> set[int]:
    """Indices of the abstract sentences that best back each claim, when they back it well enough."""
    if not claims or not sentences:
        return set()
    embed = grounding.embed_model.get_text_embedding_batch
    sentence_vectors = embed(sentences)
    sentence_terms = [grounding.terms(s) for s in sentences]
    found = set()
    for claim, claim_vector in zip(claims, embed(claims)):
        terms = grounding.terms(claim)
        scored = []
        for index, (vector, their_terms) in enumerate(zip(sentence_vectors, sentence_terms)):
            similarity = cosine(claim_vector, vector)
            overlap = len(terms & their_terms) / len(terms) if terms else 0.0
            scored.append((similarity + TERM_WEIGHT * overlap, similarity, overlap, index))
        _, similarity, overlap, index = max(scored)
        if similarity >= MIN_EVIDENCE_SIMILARITY or overlap >= MIN_EVIDENCE_TERMS:
            found.add(index)
    return found
