"""Chunk papers, embed the chunks and keep the Chroma collection in step with the corpus.

`ingest` makes the collection hold exactly the given corpus: new papers are added,
edited ones replaced, removed ones deleted, unchanged ones left alone (not re-embedded).
A paper's id is a hash of its text, so an edited abstract is a removal plus an addition.
A paper whose text and title are unchanged but whose metadata moved (category, position) keeps its
vectors and gets new metadata. Each paper's chunks are written in one call, after any
old chunks are deleted, and every chunk records how many chunks its paper has: an ingest killed halfway leaves papers
that are either whole or missing or detectably short, and the next ingest repairs them.
Parsing happens before anything is written, so a bad corpus file changes nothing.
One ingest of an index runs at a time (rag.ingest_lock): a second waits for the first, then
makes the index hold exactly its own papers.
Vectors come from the embedding cache (rag.embed_cache) for any chunk text the same model
embedded before, in this store or another, so a resumed, rebuilt or second ingest embeds
only what it never embedded. The paper model's vectors (rag.paper_model) are filled last,
into that cache only.
"""

import json
import sys
import time
from dataclasses import dataclass

from rag.corpus import Paper
from rag.embed_cache import EmbeddingCache, cache_path
from rag.embedding import embed_texts
from rag.library import Corpus, load_corpus
from rag.paper_model import embed_papers, paper_model_enabled
from rag.prompt_safety import instruction_warnings
from rag.settings import Settings, token_encoding
from rag.store import Store, chunk_metadata, embedded_path, fingerprint, open_store, read_all, stored_papers

# Papers written per Chroma call: about 1/40 of an ingest, 8 to 256. Each embedded upsert
# costs ~33 ms besides its chunks (measured at 10k papers: batches of 8 took 80 s, of 256
# 41 s); small ingests keep fine progress and lose little when killed.
MIN_PAPERS_PER_BATCH = 8
MAX_PAPERS_PER_BATCH = 256
BATCHES_PER_INGEST = 40


@dataclass(frozen=True)
class IngestReport:
    """What an ingest did, for the CLI and benchmarks."""

    index: str
    location: str
    papers: int
    chunks: int
    added: int
    updated: int
    removed: int
    unchanged: int
    embedded: int   # chunks embedded by the model in this ingest
    cached: int     # chunks whose vectors came from the embedding cache
    duplicates: tuple[str, ...]   # warnings: records merged into an earlier one (the same paper)
    seconds: float
    skipped: tuple[str, ...] = ()   # warnings: folder entries that are not corpus files, records skipped
    instructions: tuple[str, ...] = ()   # warnings: papers with sentences addressed to a model (prompt_safety)

    @property
    def merged(self) -> int:
        """How many records were the same paper as an earlier one, and merged into it."""
        return len(self.duplicates)

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.skipped + self.instructions + self.duplicates


@dataclass(frozen=True)
class _StoredPaper:
    fingerprint: str
    n_chunks: int
    found_chunks: int
    title: str | None = None   # part of what was chunked and embedded (indexed_text)


def ingest(settings: Settings, paths=None, progress: bool = True, rebuild: bool = False,
           notify=None, format: str | None = None) -> IngestReport:
    """Parse `paths` (default: settings.corpus; in `format`, else each file's own, rag.formats) and make
    the index hold exactly those papers.

    `notify(message)` hears that another ingest of the index is running and this one waits
    (default: stderr when `progress` is on, else nothing)."""
    from rag.ingest_lock import ingest_lock   # here, so a search that needs no ingest never imports it

    started = time.perf_counter()
    corpus = load_corpus(paths or [settings.corpus], format)
    if notify is None:
        notify = to_stderr if progress else (lambda message: None)
    with ingest_lock(settings, notify), \
            EmbeddingCache(cache_path(settings.derived_cache_dir, settings.embed_model)) as cache, \
            open_store(settings) as store:
        if rebuild:
            store.drop()
        counts = sync(store, corpus, settings, cache, progress)
        if paper_model_enabled(settings):
            embed_papers(settings, corpus.papers, progress=progress)
        collection = store.collection(create=True)
        collection.modify(metadata={**collection.metadata, "sources": json.dumps([str(f) for f in corpus.files]),
                                    "ingested_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        return IngestReport(index=store.name, location=store.location, papers=len(corpus.papers),
                            chunks=collection.count(), duplicates=corpus.duplicates, skipped=corpus.skipped,
                            instructions=tuple(instruction_warnings(corpus.papers)),
                            seconds=time.perf_counter() - started, **counts)


def to_stderr(message: str) -> None:
    """Progress and notices of a library call go to stderr, never stdout (which carries results)."""
    print(message, file=sys.stderr, flush=True)


def sync(store: Store, corpus: Corpus, settings: Settings, cache: EmbeddingCache, progress: bool) -> dict:
    """Delete what is gone or broken, relabel what only moved, add what is missing; returns counts."""
    collection = store.collection(create=True)
    stored = _stored_papers(collection)
    wanted = {p.paper_id: p for p in corpus.papers}
    # a paper whose title changed (one merged in from another file) is chunked and embedded anew: the title is
    # part of its chunks' text (indexed_text)
    whole = {pid for pid, s in stored.items()
             if pid in wanted and s.found_chunks == s.n_chunks and s.title == wanted[pid].title}
    relabel = [wanted[pid] for pid in whole if stored[pid].fingerprint != fingerprint(wanted[pid])]
    broken = [pid for pid in stored if pid not in whole]
    for start in range(0, len(broken), 500):
        collection.delete(where={"paper_id": {"$in": broken[start:start + 500]}})
    for paper in relabel:  # same id means same text and chunks: only the metadata changed
        n_chunks = stored[paper.paper_id].n_chunks
        collection.update(ids=[f"{paper.paper_id}-{i}" for i in range(n_chunks)],
                          metadatas=[chunk_metadata(paper, i, n_chunks) for i in range(n_chunks)])
    todo = [p for p in corpus.papers if p.paper_id not in whole]
    embedded, cached = _add_papers(collection, todo, settings, cache, progress)
    return {"added": len(todo), "updated": len(relabel),
            "removed": sum(pid not in wanted for pid in stored), "unchanged": len(whole) - len(relabel),
            "embedded": embedded, "cached": cached}


def _add_papers(collection, papers: list[Paper], settings: Settings, cache: EmbeddingCache,
                progress: bool) -> tuple[int, int]:
    """Write the papers' chunks, a batch of papers per call; returns (chunks embedded, chunks from the cache)."""
    embedded = cached = 0
    if not papers:
        return embedded, cached
    from tqdm import tqdm

    splitter = make_splitter(settings)
    with tqdm(total=len(papers), unit="paper", desc="Embedding", disable=not progress,
              file=sys.stderr, mininterval=0.2) as bar:
        size = papers_per_batch(len(papers))
        for start in range(0, len(papers), size):
            batch = papers[start:start + size]
            ids, texts, metadatas = [], [], []
            for paper in batch:
                chunks = splitter.split_text(indexed_text(paper))
                for number, text in enumerate(chunks):
                    ids.append(f"{paper.paper_id}-{number}")
                    texts.append(text)
                    metadatas.append(chunk_metadata(paper, number, len(chunks)))
            embeddings, n_embedded = embed_texts(texts, cache, settings)
            collection.upsert(ids=ids, embeddings=embeddings, documents=texts, metadatas=metadatas)
            embedded += n_embedded
            cached += len(texts) - n_embedded
            bar.update(len(batch))
    return embedded, cached


def indexed_text(paper: Paper) -> str:
    """What is chunked, embedded and keyword-indexed: the title (when the paper has one), then its text."""
    return f"{paper.title}\n\n{paper.text}" if paper.title else paper.text


def papers_per_batch(n_papers: int) -> int:
    """How many papers to embed and write per call when adding `n_papers`."""
    return max(MIN_PAPERS_PER_BATCH, min(MAX_PAPERS_PER_BATCH, n_papers // BATCHES_PER_INGEST))


def make_splitter(settings: Settings):
    """llama-index's sentence-aware splitter, counting tokens with token_encoding()."""
    from llama_index.core.node_parser import SentenceSplitter

    return SentenceSplitter(chunk_size=settings.chunk_size, chunk_overlap=settings.chunk_overlap,
                            tokenizer=token_encoding().encode)


def _stored_papers(collection) -> dict[str, _StoredPaper]:
    found: dict[str, list] = {}
    for meta in read_all(collection):
        entry = found.setdefault(meta["paper_id"], [meta["fingerprint"], meta["n_chunks"], 0, meta.get("title")])
        if entry[0] != meta["fingerprint"]:
            entry[0] = "mixed"
        entry[2] += 1
    return {pid: _StoredPaper(*entry) for pid, entry in found.items()}


@dataclass(frozen=True)
class IndexInfo:
    """What is indexed, for `rag papers`."""

    index: str
    location: str
    shape: dict
    papers: list[Paper]
    chunks: int
    sources: list[str]
    ingested_at: str | None
    size_bytes: int | None

    def categories(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for paper in self.papers:
            counts[paper.category or ""] = counts.get(paper.category or "", 0) + 1
        return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))

    def to_json(self) -> dict:
        categories = self.categories()
        return {"index": self.index, "location": self.location, "settings": self.shape,
                "papers": len(self.papers), "chunks": self.chunks,
                "categories": {c: n for c, n in categories.items() if c},
                "uncategorized": categories.get("", 0), "sources": self.sources,
                "ingested_at": self.ingested_at, "size_bytes": self.size_bytes,
                "list": [{"paper_id": p.paper_id, "label": p.label, "authors": list(p.authors),
                          "category": p.category, "source": p.source} | p.bibliography() for p in self.papers]}


def describe_index(settings: Settings) -> IndexInfo:
    """Read what the index holds without changing it (an absent index reads as empty)."""
    from rag.store import index_shape

    with open_store(settings) as store:
        collection = store.collection(create=False)
        meta = (collection.metadata or {}) if collection is not None else {}
        papers = stored_papers(collection) if collection is not None else []
        chunks = collection.count() if collection is not None else 0
    size = None if settings.chroma_url else _folder_size(embedded_path(settings))
    return IndexInfo(index=store.name, location=store.location, shape=index_shape(settings), papers=papers,
                     chunks=chunks, sources=json.loads(meta.get("sources", "[]")),
                     ingested_at=meta.get("ingested_at"), size_bytes=size)


def _folder_size(path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


