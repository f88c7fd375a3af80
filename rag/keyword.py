"""Keyword (BM25) scores of papers for a question, with llama-index's BM25 retriever.

Covers what the embedding model misses: rare technical terms such as 'grokking', author
names and category words. Scores whole papers (cleaned abstract text, authors and
category, accent-folded, English stemming and stopwords); it neither embeds nor fuses:
retrieve.py combines these scores with dense ones.
"""

import logging

from rag.corpus import Paper, fold


class KeywordIndex:
    """An in-memory BM25 index over the given papers."""

    def __init__(self, papers: list[Paper]):
        from llama_index.core.schema import TextNode
        from llama_index.retrievers.bm25 import BM25Retriever

        logging.getLogger("bm25s").setLevel(logging.ERROR)
        nodes = [TextNode(id_=p.paper_id, text=searchable_text(p)) for p in papers]
        self._retriever = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=len(nodes),
                                                      language="en") if nodes else None

    def scores(self, question: str, top_n: int) -> dict[str, float]:
        """paper_id -> BM25 score for the best `top_n` papers with a score above zero."""
        if self._retriever is None:
            return {}
        self._retriever.similarity_top_k = min(top_n, len(self._retriever.corpus))
        found = self._retriever.retrieve(fold(question))
        return {hit.node.node_id: hit.score for hit in found if hit.score > 0}


def searchable_text(paper: Paper) -> str:
    """What BM25 indexes of a paper: abstract, authors and category, accent-folded."""
    return fold("\n".join([paper.text, ", ".join(paper.authors), paper.category or ""]))
