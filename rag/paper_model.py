"""Paper vectors: each whole abstract embedded by the paper model, scored against the question.

The chunk model (small, fast) finds the passage that matches; the paper model (settings.
paper_model, all-mpnet-base-v2 by default: ~10x slower to embed, much better at questions
worded unlike the abstract) judges the paper as a whole. One vector per paper, kept in the
embedding cache by the paper's text, so it is embedded once per model, whatever store or
index holds the paper; ingest fills it, and a search over papers it lacks embeds them
first. This module embeds and scores; retrieve.py fuses the score with the others.

A paper's score is (1 - d) * cos(question) + d * min over content words w of
cos(question without w), d = word_drop_weight: a paper that matches one striking word of
the question ("chatbot") but not the rest loses its score when that word is left out,
while the paper that matches the question's meaning keeps it.
"""

import re
import sys
from dataclasses import dataclass, field

import numpy as np

from rag.corpus import Paper
from rag.embed_cache import EmbeddingCache, cache_path
from rag.embedding import load_embed_model, search_model_builder
from rag.grounding import STOPWORDS, WORD
from rag.settings import Settings

BATCH = 16   # abstracts per model call (and per progress step)
MAX_DROPPED_WORDS = 32   # a longer question leaves out only its first 32 distinct content words, one at a time


def paper_model_enabled(settings: Settings) -> bool:
    return settings.paper_model.strip().lower() != "none"


def load_paper_model(settings: Settings, notify=lambda message: None):
    """The paper model, loaded once per process, on the search runtime (RAG_EMBED_RUNTIME): ONNX Runtime
    embeds both its abstracts and questions faster than torch (docs/benchmarks.md)."""
    return paper_model_builder(settings, notify)()


def paper_model_builder(settings: Settings, notify=lambda message: None):
    """load_paper_model in two steps, as embedding.search_model_builder: imports and a first-use export
    now, the model built by the function returned (on a thread of the caller's choosing)."""
    if settings.embed_runtime == "onnx":
        return search_model_builder(settings, settings.paper_model, notify)
    model = load_embed_model(settings.paper_model, settings.embed_batch_size, settings.cache_dir)
    return lambda: model


@dataclass(frozen=True)
class PaperScores:
    """The paper model's score of each paper for one question; a paper outside the filters has none."""

    ids: tuple[str, ...] = ()
    rows: dict[str, int] = field(default_factory=dict)   # paper_id -> its row of `values`
    values: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))   # -inf: filtered out

    def get(self, paper_id: str) -> float | None:
        row = self.rows.get(paper_id)
        return None if row is None or self.values[row] == -np.inf else float(self.values[row])

    def top(self, n: int) -> list[str]:
        """The ids of the n papers with the highest score, best first."""
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
        self.query_model = None   # the paper model that embeds questions (load_paper_model), loaded on first use if not given

    def load(self, papers: list[Paper], notify=lambda message: None) -> None:
        """Hold the vectors of `papers`, embedding (and caching) those the cache lacks."""
        vectors = embed_papers(self.settings, papers, notify=notify)
        self.ids = tuple(p.paper_id for p in papers)
        self.rows = {pid: row for row, pid in enumerate(self.ids)}
        self.matrix = np.asarray(vectors, dtype=np.float32).reshape(len(papers), -1)

    def query_vector(self, text: str) -> np.ndarray:
        """The question's vector, then (word_drop_weight > 0) one row per question with a word left out."""
        if self.query_model is None:
            self.query_model = load_paper_model(self.settings)
        model = self.query_model
        rows = [model.get_query_embedding(text)]
        variants = word_drop_variants(text) if self.settings.word_drop_weight > 0 else []
        if variants:
            rows += model.get_text_embedding_batch(variants)
        return np.asarray(rows, dtype=np.float32)

    def scores(self, query: np.ndarray, allowed: set[str] | None = None) -> PaperScores:
        """The score of every held paper that passes the filters (`allowed` ids) for the question.

        `query` holds the question's vector, then those of its word-drop variants, if any."""
        if not self.ids:
            return PaperScores()
        cosines = self.matrix @ np.atleast_2d(query).T
        values = cosines[:, 0]
        if cosines.shape[1] > 1:
            drop = self.settings.word_drop_weight
            values = (1 - drop) * values + drop * cosines[:, 1:].min(axis=1)
        if allowed is not None:
            kept = [self.rows[pid] for pid in allowed if pid in self.rows]
            values, all_values = np.full(len(self.ids), -np.inf, dtype=np.float32), values
            values[kept] = all_values[kept]
        return PaperScores(self.ids, self.rows, values)


def word_drop_variants(question: str) -> list[str]:
    """The question with each of its distinct content words (3+ letters, not a stopword) left out in turn;
    none for a question of fewer than two, which would have nothing left."""
    words = list(dict.fromkeys(w.lower() for w in WORD.findall(question) if w.lower() not in STOPWORDS))
    if len(words) < 2:
        return []
    variants = []
    for word in words[:MAX_DROPPED_WORDS]:
        left_out = re.sub(rf"(?<![A-Za-z0-9-]){re.escape(word)}(?![A-Za-z0-9-])", "", question, flags=re.IGNORECASE)
        variants.append(" ".join(left_out.split()))
    return variants


def embed_papers(settings: Settings, papers: list[Paper], progress: bool = False,
                 notify=lambda message: None) -> list[list[float]]:
    """The paper model's vector of each paper's text, from the cache or embedded now (and cached)."""
    texts = [p.text for p in papers]
    with EmbeddingCache(cache_path(settings.derived_cache_dir, settings.paper_model)) as cache:
        vectors = cache.get_many(texts)
        missing = sorted({t for t, v in zip(texts, vectors) if v is None}, key=len)
        if not missing:
            return vectors
        model = load_paper_model(settings, notify)   # first, so a missing model is the only message
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
