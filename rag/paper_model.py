"""Paper vectors: each whole abstract embedded by the paper model, scored against the question.

The chunk model (small, fast) finds the passage that matches; the paper model (settings.
paper_model, all-mpnet-base-v2 by default: ~10x slower to embed, much better at questions
worded unlike the abstract) judges the paper as a whole. One vector per paper, kept in the
embedding cache by the paper's text, so it is embedded once per model, whatever store or
index holds the paper; ingest fills it, and a search over papers it lacks embeds them
first. This module embeds and scores; retrieve.py fuses the score with the others.
"""

import sys
from dataclasses import dataclass, field

import numpy as np

from rag.corpus import Paper
from rag.embed_cache import EmbeddingCache, cache_path
from rag.embedding import load_embed_model
from rag.settings import Settings

BATCH = 16   # abstracts per model call (and per progress step)


def paper_model_enabled(settings: Settings) -> bool:
    return settings.paper_model.strip().lower() != "none"


def load_paper_model(settings: Settings):
    """The paper model's llama-index embedding object, loaded once per process."""
    return load_embed_model(settings.paper_model, settings.embed_batch_size, settings.cache_dir)


@dataclass(frozen=True)
class PaperScores:
    """The paper model's cosine of one question and each paper; a paper outside the filters has none."""

    ids: tuple[str, ...] = ()
    rows: dict[str, int] = field(default_factory=dict)   # paper_id -> its row of `values`
    values: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))   # -inf: filtered out

    def get(self, paper_id: str) -> float | None:
        row = self.rows.get(paper_id)
        return None if row is None or self.values[row] == -np.inf else float(self.values[row])

    def top(self, n: int) -> list[str]:
        """The ids of the n papers with the highest cosine, best first."""
        n = min(n, int(np.isfinite(self.values).sum()))
        if n <= 0:
            return []
        best = np.argpartition(-self.values, n - 1)[:n]
        return [self.ids[i] for i in best[np.argsort(-self.values[best], kind="stable")]]


class PaperVectors:
    """The paper model's vectors of a set of papers, as one matrix."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.ids: tuple[str, ...] = ()
        self.rows: dict[str, int] = {}
        self.matrix = np.zeros((0, 0), dtype=np.float32)

    def load(self, papers: list[Paper], notify=lambda message: None) -> None:
        """Hold the vectors of `papers`, embedding (and caching) those the cache lacks."""
        vectors = embed_papers(self.settings, papers, notify=notify)
        self.ids = tuple(p.paper_id for p in papers)
        self.rows = {pid: row for row, pid in enumerate(self.ids)}
        self.matrix = np.asarray(vectors, dtype=np.float32).reshape(len(papers), -1)

    def query_vector(self, text: str) -> np.ndarray:
        return np.asarray(load_paper_model(self.settings).get_query_embedding(text), dtype=np.float32)

    def scores(self, query: np.ndarray, allowed: set[str] | None = None) -> PaperScores:
        """The cosine of the question and every held paper that passes the filters (`allowed` ids)."""
        if not self.ids:
            return PaperScores()
        values = self.matrix @ query
        if allowed is not None:
            kept = [self.rows[pid] for pid in allowed if pid in self.rows]
            values, all_values = np.full(len(self.ids), -np.inf, dtype=np.float32), values
            values[kept] = all_values[kept]
        return PaperScores(self.ids, self.rows, values)


def embed_papers(settings: Settings, papers: list[Paper], progress: bool = False,
                 notify=lambda message: None) -> list[list[float]]:
    """The paper model's vector of each paper's text, from the cache or embedded now (and cached)."""
    texts = [p.text for p in papers]
    with EmbeddingCache(cache_path(settings.cache_dir, settings.paper_model)) as cache:
        vectors = cache.get_many(texts)
        missing = sorted({t for t, v in zip(texts, vectors) if v is None}, key=len)
        if not missing:
            return vectors
        model = load_paper_model(settings)   # first, so a missing model is the only message
        notify(f"Embedding {len(missing)} abstracts with the paper model {settings.paper_model} (once).")
        from tqdm import tqdm

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
