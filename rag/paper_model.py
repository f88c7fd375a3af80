"""Paper vectors: each whole abstract embedded by the paper model, scored against the question.

The chunk model (small, fast) finds the passage that matches; the paper model (settings.
paper_model, all-mpnet-base-v2 by default: ~10x slower to embed, much better at questions
worded unlike the abstract) judges the paper as a whole. One vector per paper, kept in the
embedding cache by the paper's text, so it is embedded once per model, whatever store or
index holds the paper; ingest fills it, and a search over papers it lacks embeds them
first. This module embeds and scores; retrieve.py fuses the score with the others.
"""

import sys

import numpy as np

from rag.corpus import Paper
from rag.embed_cache import EmbeddingCache, cache_path
from rag.embedding import load_embed_model
from rag.settings import Settings

BATCH = 16   # abstracts per model call (and per progress step)


def paper_model_enabled(settings: Settings) -> bool:
    return settings.paper_model.strip().lower() != "none"


class PaperVectors:
    """The paper model's vectors of a set of papers, as one matrix."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.ids: list[str] = []
        self.matrix = np.zeros((0, 0), dtype=np.float32)

    def model(self):
        s = self.settings
        return load_embed_model(s.paper_model, s.embed_batch_size, s.cache_dir)

    def load(self, papers: list[Paper], notify=lambda message: None) -> None:
        """Hold the vectors of `papers`, embedding (and caching) those the cache lacks."""
        vectors = embed_papers(self.settings, papers, notify=notify)
        self.ids = [p.paper_id for p in papers]
        self.matrix = np.asarray(vectors, dtype=np.float32).reshape(len(papers), -1)

    def query_vector(self, text: str) -> np.ndarray:
        return np.asarray(self.model().get_query_embedding(text), dtype=np.float32)

    def scores(self, query: np.ndarray) -> dict[str, float]:
        """paper_id -> cosine of the question and the paper, for every held paper."""
        if not self.ids:
            return {}
        return dict(zip(self.ids, (self.matrix @ query).tolist()))


def embed_papers(settings: Settings, papers: list[Paper], progress: bool = False,
                 notify=lambda message: None) -> list[list[float]]:
    """The paper model's vector of each paper's text, from the cache or embedded now (and cached)."""
    texts = [p.text for p in papers]
    with EmbeddingCache(cache_path(settings.cache_dir, settings.paper_model)) as cache:
        vectors = cache.get_many(texts)
        missing = sorted({t for t, v in zip(texts, vectors) if v is None}, key=len)
        if not missing:
            return vectors
        notify(f"Embedding {len(missing)} abstracts with the paper model {settings.paper_model} (once).")
        from tqdm import tqdm

        model = PaperVectors(settings).model()
        fresh: dict[str, list[float]] = {}
        with tqdm(total=len(missing), unit="paper", desc="Paper vectors", disable=not progress,
                  file=sys.stderr, mininterval=0.2) as bar:
            for start in range(0, len(missing), BATCH):
                batch = missing[start:start + BATCH]
                embedded = model.get_text_embedding_batch(batch)
                cache.put_many(batch, embedded)
                fresh.update(zip(batch, embedded))
                bar.update(len(batch))
    return [v if v is not None else fresh[t] for t, v in zip(texts, vectors)]
