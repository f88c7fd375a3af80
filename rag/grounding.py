"""Deterministic support checks: does a source back an answer sentence?

A sentence is supported by a source when every number it states appears in that
source, and its key terms are in the source or it is close in meaning to one of the
source's chunks (cosine similarity of the local embeddings). A sentence that only
restates the question (fewer than MIN_NEW_TERMS key terms or numbers beyond the
question's) answers nothing and is never supported. No LLM is involved, so
the verdict is the same on every run; answer.py and the eval share it.
"""

import re
from dataclasses import dataclass

NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
WORD = re.compile(r"[A-Za-z][A-Za-z0-9-]{2,}")
STOPWORDS = frozenset("""
the and for with that this these those from into onto over under than then there their they them
which while where when what who whom whose why how are was were been being has have had does did
doing not but can could should would may might must will shall its our your his her also such via
using use used based paper papers work works study studies show shows shown propose proposes
proposed present presents approach method methods model models new more most less both each other
about across after before between through during within without among all any some many much very
""".split())
MIN_TERM_OVERLAP = 0.6        # enough key terms present on their own
MIN_SIMILARITY = 0.55         # or close in meaning ...
MIN_TERM_OVERLAP_IF_SIMILAR = 0.5   # ... with half of its key terms present
MIN_NEW_TERMS = 2             # key terms or numbers an answer adds to its question


@dataclass(frozen=True)
class Support:
    """The verdict on one sentence against one source, with its evidence."""

    supported: bool
    similarity: float
    term_overlap: float
    missing_numbers: tuple[str, ...]


def numbers(text: str) -> set[str]:
    """Numbers as written, without thousands separators: '1,024' -> '1024', '4.2' stays."""
    return {n.replace(",", "") if re.fullmatch(r"\d{1,3}(,\d{3})+", n) else n for n in NUMBER.findall(text)}


class GroundingChecker:
    """Checks sentences against sources with the index's embedding model."""

    def __init__(self, embed_model):
        import Stemmer  # PyStemmer, installed with the BM25 retriever

        self.embed_model = embed_model
        self._stem_words = Stemmer.Stemmer("english").stemWords

    def terms(self, text: str) -> set[str]:
        """Stemmed key terms: words of 3+ letters that are not stopwords."""
        return set(self._stem_words([w.lower() for w in WORD.findall(text) if w.lower() not in STOPWORDS]))

    def embed(self, sentence: str) -> list[float]:
        return self.embed_model.get_text_embedding(sentence)

    def adds_to(self, sentence: str, question: str, ignore: set[str] = frozenset()) -> bool:
        """Does the sentence state something beyond the words of the question (and the `ignore` terms,
        such as the papers' labels)?"""
        new_terms = self.terms(sentence) - self.terms(question) - ignore
        return len(new_terms) + len(numbers(sentence) - numbers(question)) >= MIN_NEW_TERMS

    def check(self, sentence: str, source_text: str, chunk_embeddings, sentence_embedding=None) -> Support:
        """Is `sentence` backed by a source with this text and these chunk embeddings?"""
        missing = tuple(sorted(numbers(sentence) - numbers(source_text)))
        terms = self.terms(sentence)
        overlap = len(terms & self.terms(source_text)) / len(terms) if terms else 0.0
        vector = sentence_embedding if sentence_embedding is not None else self.embed(sentence)
        similarity = max((cosine(vector, chunk) for chunk in chunk_embeddings), default=0.0)
        backed = overlap >= MIN_TERM_OVERLAP or (similarity >= MIN_SIMILARITY and
                                                 overlap >= MIN_TERM_OVERLAP_IF_SIMILAR)
        return Support(backed and not missing, similarity, overlap, missing)


def cosine(a, b) -> float:
    """Cosine similarity of two vectors."""
    dot = sum(x * y for x, y in zip(a, b))
    norm = (sum(x * x for x in a) ** 0.5) * (sum(y * y for y in b) ** 0.5)
    return dot / norm if norm else 0.0
