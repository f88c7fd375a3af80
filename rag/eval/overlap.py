"""How much wording a question shares with a paper's abstract: its lexical overlap.

Overlap = the share of the question's content words that occur in the abstract, after
the tokenisation BM25 uses here (bm25s: accent-folded, lower-cased, English Snowball
stems), with bm25s's long English stopword list (NLTK's) taking out function words.
It measures how much keyword matching can help on a question; it does not search.
"""

import functools
import statistics

from rag.corpus import fold

STOPWORDS = "en_plus"


@functools.lru_cache(maxsize=4096)
def content_words(text: str) -> frozenset[str]:
    """The stemmed content words of a text."""
    import bm25s

    tokens = bm25s.tokenize([fold(text)], stopwords=STOPWORDS, stemmer=_stemmer(),
                            return_ids=False, show_progress=False)
    return frozenset(tokens[0])


def lexical_overlap(question: str, abstracts: list[str]) -> float | None:
    """The highest share of the question's content words found in one of the abstracts; None without any."""
    words = content_words(question)
    if not words or not abstracts:
        return None
    return max(len(words & content_words(abstract)) / len(words) for abstract in abstracts)


def quartiles(values: list[float]) -> dict:
    """n, first quartile, median and third quartile (None when there are fewer than two values)."""
    if len(values) < 2:
        return {"n": len(values), "q1": None, "median": None, "q3": None}
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return {"n": len(values), "q1": round(q1, 3), "median": round(median, 3), "q3": round(q3, 3)}


@functools.lru_cache(maxsize=1)
def _stemmer():
    import Stemmer

    return Stemmer.Stemmer("english")
