"""Chunk papers, embed the chunks and keep the Chroma collection in step with the corpus.

`ingest` makes the collection hold exactly the given corpus: new papers are added,
edited ones replaced, removed ones deleted, unchanged ones left alone (not re-embedded).
A paper's id is a hash of its text, so an edited abstract is a removal plus an addition.
A paper whose text is unchanged but whose metadata moved (category, position) keeps its
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

import dataclasses
import hashlib
import json
import sys
import time
from dataclasses import dataclass

from rag.corpus import Corpus, Paper, clean_text, load_corpus, name_tokens
from rag.embed_cache import EmbeddingCache, cache_path
from rag.embedding import load_embed_model
from rag.paper_model import embed_papers, paper_model_enabled
from rag.prompt_safety import instruction_warnings
from rag.settings import TOKENIZER, Settings
from rag.store import Store, embedded_path, open_store

# Papers written per Chroma call: about 1/40 of an ingest, 8 to 256. Each embedded upsert
# costs ~33 ms besides its chunks (measured at 10k papers: batches of 8 took 80 s, of 256
# 41 s); small ingests keep fine progress and lose little when killed.
MIN_PAPERS_PER_BATCH = 8
MAX_PAPERS_PER_BATCH = 256
BATCHES_PER_INGEST = 40
READ_PAGE = 5000


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
    duplicates: tuple[str, ...]
    seconds: float
    skipped: tuple[str, ...] = ()   # warnings: folder entries that are not corpus files
    instructions: tuple[str, ...] = ()   # warnings: papers with sentences addressed to a model (prompt_safety)

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.skipped + self.instructions + self.duplicates


@dataclass(frozen=True)
class _StoredPaper:
    fingerprint: str
    n_chunks: int
    found_chunks: int


def ingest(settings: Settings, paths=None, progress: bool = True, rebuild: bool = False,
           notify=None) -> IngestReport:
    """Parse `paths` (default: settings.corpus) and make the index hold exactly those papers.

    `notify(message)` hears that another ingest of the index is running and this one waits
    (default: stderr when `progress` is on, else nothing)."""
    from rag.ingest_lock import ingest_lock   # here, so a search that needs no ingest never imports it

    started = time.perf_counter()
    corpus = load_corpus(paths or [settings.corpus])
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
    whole = {pid for pid, s in stored.items() if pid in wanted and s.found_chunks == s.n_chunks}
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
                chunks = splitter.split_text(paper.text)
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


def papers_per_batch(n_papers: int) -> int:
    """How many papers to embed and write per call when adding `n_papers`."""
    return max(MIN_PAPERS_PER_BATCH, min(MAX_PAPERS_PER_BATCH, n_papers // BATCHES_PER_INGEST))


def embed_texts(texts: list[str], cache: EmbeddingCache, settings: Settings) -> tuple[list[list[float]], int]:
    """A vector per text: from the cache where it has one, else embedded now and cached.

    Returns the vectors and how many of them the cache lacked (a text repeated in `texts`
    is embedded once). Missing texts go to the model shortest first, so each of its
    batches pads little. The model is loaded only when something is missing, so an
    ingest served wholly from the cache never loads it."""
    vectors = cache.get_many(texts)
    missing = [t for t, v in zip(texts, vectors) if v is None]
    if not missing:
        return vectors, 0
    unique = sorted(dict.fromkeys(missing), key=len)
    embed_model = load_embed_model(settings.embed_model, settings.embed_batch_size)
    fresh = dict(zip(unique, embed_model.get_text_embedding_batch(unique)))
    cache.put_many(unique, [fresh[t] for t in unique])
    return [v if v is not None else fresh[t] for t, v in zip(texts, vectors)], len(missing)


def token_encoding():
    """tiktoken's TOKENIZER encoding: the unit of chunk sizes here and of prompt budgets (answer.count_tokens)."""
    import tiktoken

    return tiktoken.get_encoding(TOKENIZER)


def make_splitter(settings: Settings):
    """llama-index's sentence-aware splitter, counting tokens with token_encoding()."""
    from llama_index.core.node_parser import SentenceSplitter

    return SentenceSplitter(chunk_size=settings.chunk_size, chunk_overlap=settings.chunk_overlap,
                            tokenizer=token_encoding().encode)


def fingerprint(paper: Paper) -> str:
    """Hash of everything stored about a paper: any change means its chunks are rewritten."""
    record = json.dumps(dataclasses.asdict(paper), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(record.encode()).hexdigest()[:16]


def chunk_metadata(paper: Paper, number: int, n_chunks: int) -> dict:
    """The paper's metadata as carried by each of its chunks (Chroma takes no None values)."""
    meta = {
        "paper_id": paper.paper_id, "chunk": number, "n_chunks": n_chunks,
        "fingerprint": fingerprint(paper), "label": paper.label,
        "authors": list(paper.authors), "authors_truncated": paper.authors_truncated,
        "author_tokens": sorted({t for a in paper.authors for t in name_tokens(a)}),
        "abstract": paper.abstract,
        "source_file": paper.source_file, "position": paper.position, "line": paper.line,
        "source": paper.source,
    }
    if paper.category is not None:
        meta["category"] = paper.category
    if paper.urls:
        meta["urls"] = list(paper.urls)
    return meta


def paper_from_metadata(meta: dict) -> Paper:
    """Rebuild the Paper a chunk belongs to from its metadata."""
    return Paper(
        paper_id=meta["paper_id"], authors=tuple(meta["authors"]),
        authors_truncated=bool(meta["authors_truncated"]), category=meta.get("category"),
        abstract=meta["abstract"], text=clean_text(meta["abstract"]), source_file=meta["source_file"],
        position=int(meta["position"]), line=int(meta["line"]), label=meta["label"],
        urls=tuple(meta.get("urls") or ()),
    )


def stored_papers(collection) -> list[Paper]:
    """Every paper in the collection, in corpus order."""
    papers = [paper_from_metadata(m) for m in _read_all(collection, where={"chunk": 0})]
    return sorted(papers, key=lambda p: (p.source_file, p.position))


def _stored_papers(collection) -> dict[str, _StoredPaper]:
    found: dict[str, list] = {}
    for meta in _read_all(collection):
        entry = found.setdefault(meta["paper_id"], [meta["fingerprint"], meta["n_chunks"], 0])
        if entry[0] != meta["fingerprint"]:
            entry[0] = "mixed"
        entry[2] += 1
    return {pid: _StoredPaper(*entry) for pid, entry in found.items()}


def _read_all(collection, where=None):
    """Yield every chunk's metadata, a page at a time."""
    offset = 0
    while True:
        page = collection.get(where=where, include=["metadatas"], limit=READ_PAGE, offset=offset)
        yield from page["metadatas"]
        if len(page["ids"]) < READ_PAGE:
            return
        offset += READ_PAGE


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
                          "category": p.category, "source": p.source} for p in self.papers]}


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


def paper_id_of_chunk(chunk_id: str) -> str:
    """'3c004e0ee1985776-2' -> '3c004e0ee1985776': chunk ids are `{paper_id}-{number}`."""
    return chunk_id.rsplit("-", 1)[0]
