"""Keyword (BM25) scores of papers for a question, with llama-index's BM25 retriever.

Covers what the embedding model misses: rare technical terms such as 'grokking', author
names and category words. Scores whole papers (cleaned abstract text, authors and
category, accent-folded, English stemming and stopwords), and gives each question its
ceiling: the score a paper would get that matched every question word as well as the
best-matching paper does, a scale that does not depend on which paper wins. The words a
question uses to ask for papers rather than to say what about ("Which papers study …, and what
do they find?": `ASKING_WORDS`) are not searched: an abstract that happens to say "study" and
"find" often is not closer to the topic. It neither
embeds nor fuses: retrieve.py combines these scores with dense ones. Building the index takes seconds at
tens of thousands of papers, so it can be kept on disk and reused while the papers are
the same.
"""

import hashlib
import logging
import os
import re
import shutil
from pathlib import Path

from rag.corpus import Paper, fold

KEYWORD_FORMAT = 1   # bump when searchable_text or the tokenisation changes
ASKING_WORDS = re.compile(r"\b(?:papers?|stud(?:y|ies|ied)|find(?:s|ings)?|found|articles?|publications?)\b",
                          re.IGNORECASE)   # chosen on the eval's tune parts (eval/README.md)
_COMPLETE = "complete"


class KeywordIndex:
    """A BM25 index over the given papers, built in memory or read from `folder`."""

    def __init__(self, papers: list[Paper], folder: Path | None = None):
        from llama_index.retrievers.bm25 import BM25Retriever

        logging.getLogger("bm25s").setLevel(logging.ERROR)
        self._retriever = None
        self._term_best = None
        if not papers:
            return
        saved = Path(folder) / papers_key(papers) if folder is not None else None
        if saved is not None and (saved / _COMPLETE).is_file():
            try:
                self._retriever = BM25Retriever.from_persist_dir(str(saved), show_progress=False)
                return
            except (OSError, ValueError, KeyError):
                pass   # unreadable: build it again below
        self._retriever = _build(papers)
        if saved is not None:
            _save(self._retriever, saved)

    def scores(self, question: str, top_n: int) -> dict[str, float]:
        """paper_id -> BM25 score for the best `top_n` papers with a score above zero."""
        if self._retriever is None:
            return {}
        self._retriever.similarity_top_k = min(top_n, len(self._retriever.corpus))
        found = self._retriever.retrieve(searched_words(question))
        return {hit.node.node_id: hit.score for hit in found if hit.score > 0}


    def ceiling(self, question: str) -> float:
        """The sum, over the question's indexed words, of the best BM25 score one paper has for that word."""
        if self._retriever is None:
            return 0.0
        import bm25s

        tokens = bm25s.tokenize(searched_words(question), stemmer=self._retriever.stemmer, return_ids=False,
                                token_pattern=self._retriever.token_pattern, show_progress=False)[0]
        ids = self._retriever.bm25.get_tokens_ids(tokens)
        return float(sum(self._best_per_term()[i] for i in ids))

    def _best_per_term(self):
        """Per vocabulary id, the highest score any paper has for that word (BM25's word-by-paper matrix)."""
        if self._term_best is None:
            import numpy

            matrix = self._retriever.bm25.scores
            starts, data = matrix["indptr"], matrix["data"]
            self._term_best = numpy.array([data[a:b].max() if b > a else 0.0
                                           for a, b in zip(starts[:-1], starts[1:])])
        return self._term_best


def searched_words(question: str) -> str:
    """The question as BM25 searches it: accent-folded, without the words that ask for papers (ASKING_WORDS)."""
    return ASKING_WORDS.sub(" ", fold(question))


def searchable_text(paper: Paper) -> str:
    """What BM25 indexes of a paper: title (when it has one), abstract, authors and category, accent-folded."""
    return fold("\n".join(([paper.title] if paper.title else []) +
                          [paper.text, ", ".join(paper.authors), paper.category or ""]))


def papers_key(papers: list[Paper]) -> str:
    """Names the saved index of exactly these papers (their ids cover text and authors; the category and
    title too, a title only when there is one)."""
    digest = hashlib.sha256(f"keyword-format-{KEYWORD_FORMAT}".encode())
    for paper_id, category, title in sorted((p.paper_id, p.category or "", p.title or "") for p in papers):
        digest.update((f"\n{paper_id}\t{category}" + (f"\t{title}" if title else "")).encode())
    return digest.hexdigest()[:16]


def _build(papers: list[Paper]):
    from llama_index.core.schema import TextNode
    from llama_index.retrievers.bm25 import BM25Retriever

    nodes = [TextNode(id_=p.paper_id, text=searchable_text(p)) for p in papers]
    return BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=len(nodes), language="en")


def _save(retriever, target: Path) -> None:
    """Write the index next to its final place, then move it there; older saved indexes are removed."""
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    try:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        retriever.persist(str(partial), show_progress=False)
        (partial / _COMPLETE).touch()
        for old in target.parent.iterdir():
            if old != partial:
                shutil.rmtree(old, ignore_errors=True)
        partial.rename(target)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)   # keeping it is only a speed-up
