"""Question -> ranked papers: dense search over chunks and whole abstracts, with filters.

A paper's dense score mixes the cosine similarity of its best-matching chunk (chunk model)
with the paper model's score of its whole abstract (paper_model.py: a cosine that must
hold with any one word of the question left out): (chunk + w * paper) / (1 + w),
w = paper_model_weight; with RAG_PAPER_MODEL=none it is the chunk's cosine alone. Its keyword
score is its BM25 score over the question's ceiling (keyword_index.py: what a paper matching
every question word as well as the best paper for that word would score), so a weak match
stays weak however the other papers score. `hybrid` adds the keyword score with a weight
from Settings, and boosts for papers whose authors or category the question names
(mentions.py) and, smaller, for papers that use a name the question writes that few papers use
('LBMKGC'); `rrf` fuses the two rankings by reciprocal rank instead. Candidates come
from a pool of fixed size (the best papers by chunks, by whole abstracts and by keywords,
and the named ones), so the first n results are the same whatever k is.
Each paper appears once, so one paper cannot fill the top k. Filters by category (a full
`Area · Subarea` or just the area) and by author name (any author position, case- and
accent-insensitive) are resolved against the stored papers and applied to both parts.
This module does not generate answers.
"""

import difflib
import time
from dataclasses import dataclass, field

from rag.background import Background
from rag.claims import RARE_WORD_SHARE, names_given
from rag.corpus import CATEGORY_SEPARATOR, Paper, name_tokens
from rag.errors import UsageError
from rag.embedding import search_model_builder
from rag.ingest import ingest, to_stderr
from rag.keyword_index import KeywordIndex
from rag.mentions import MentionIndex
from rag.paper_model import PaperScores, PaperVectors, paper_model_builder, paper_model_enabled
from rag.settings import Settings
from rag.spelling import SpellingFixer, english_builder
from rag.store import embedded_path, open_store, paper_id_of_chunk, stored_papers
from rag.translate import question_language, safe_to_english, translator_for

CANDIDATES = 30   # papers taken from each part into the pool that is ranked, whatever k is
RRF_K = 60        # reciprocal-rank fusion: 1 / (RRF_K + rank)


@dataclass(frozen=True)
class Filters:
    """Restrictions on which papers a search may return."""

    category: str | None = None
    author: str | None = None

    def as_dict(self) -> dict:
        return {name: value for name, value in vars(self).items() if value}


@dataclass(frozen=True)
class Hit:
    """One retrieved paper with its score and the chunk that matched best."""

    rank: int
    paper: Paper
    score: float
    best_chunk: str
    dense_score: float = 0.0   # cosine of the question and the best chunk
    keyword_score: float = 0.0
    named: bool = False        # the question names one of its authors or its category
    paper_score: float | None = None   # the paper model's score of the whole abstract (paper_model.py)

    def to_json(self) -> dict:
        p = self.paper
        return {"rank": self.rank, "paper_id": p.paper_id, "label": p.label, "authors": list(p.authors),
                "category": p.category, "source": p.source, "score": round(self.score, 4),
                "abstract": p.abstract, "best_chunk": self.best_chunk,
                "dense_score": round(self.dense_score, 4), "keyword_score": round(self.keyword_score, 4),
                "paper_score": None if self.paper_score is None else round(self.paper_score, 4),
                "named": self.named} | p.bibliography()


@dataclass(frozen=True)
class SearchResult:
    """The answer to one search, shaped like `rag search --json`."""

    question: str
    k: int
    filters: Filters
    index: str
    hits: list[Hit]
    timings: dict = field(default_factory=dict)
    query_embedding: list[float] = field(default_factory=list, repr=False)
    query: str = ""                  # what was searched: the question, or its English translation
    names_held: frozenset[str] = frozenset()   # ids of the papers that use a name the query writes (papers_holding_names)

    def to_json(self) -> dict:
        return {"question": self.question, "query": self.query, "k": self.k, "filters": self.filters.as_dict(),
                "index": self.index, "results": [h.to_json() for h in self.hits],
                "timings": {k: round(v, 4) for k, v in self.timings.items()}}


def check_question(question: str) -> str:
    """The question stripped; an empty one is a usage error."""
    if not question or not question.strip():
        raise UsageError("the question is empty: write what you want to find, e.g. "
                         "\"what methods reduce reasoning length?\"")
    return question.strip()


def _open_or_create_store(settings: Settings):
    """The store; a brand-new embedded one is created under the ingest lock (rag.ingest_lock), so a
    search started beside the first ingest waits for it instead of creating the store at the same time."""
    if settings.chroma_url or embedded_path(settings).exists():
        return open_store(settings)
    from rag.ingest_lock import ingest_lock

    with ingest_lock(settings, notify=to_stderr):
        return open_store(settings)


class Retriever:
    """Searches one index; opens it (ingesting the corpus if it is empty) when created."""

    def __init__(self, settings: Settings, notify=lambda message: None, translator=None):
        self.settings = settings
        self.notify = notify
        self.translator = translator or translator_for(settings)
        if self.translator is not None and self.translator.cache.skipped:
            notify(f"Skipped {self.translator.cache.skipped} unreadable line(s) of {self.translator.cache.path} "
                   "(cut by an interrupted write); those translations are made again.")
        started = time.perf_counter()
        paper_model = Background("load-paper-model", paper_model_builder(settings, notify)) \
            if paper_model_enabled(settings) else None   # first: a missing paper model is the only message
        embed_model = Background("load-embed-model", search_model_builder(settings, settings.embed_model, notify))
        Background("load-english-words", english_builder())   # the first question's spelling check needs them
        self.store = _open_or_create_store(settings)
        self.collection = self.store.collection(create=False)
        if self.collection is None or self.collection.count() == 0:
            notify(f"The index is empty: ingesting {settings.corpus} first (once).")
            for warning in ingest(settings, progress=True).warnings:
                notify(f"Warning: {warning}")
            self.collection = self.store.collection(create=False)
        self.paper_vectors = PaperVectors(settings) if paper_model is not None else None
        self._load_papers()
        self.embed_model = embed_model.result()
        if self.paper_vectors is not None:
            self.paper_vectors.query_model = paper_model.result()
        self.open_s = time.perf_counter() - started   # reading the papers and building the keyword index

    def _load_papers(self) -> None:
        """Read the stored papers and build the keyword and mention indexes over them."""
        self.papers = stored_papers(self.collection)
        self._papers_by_id = {p.paper_id: p for p in self.papers}
        self.keyword_index = KeywordIndex(self.papers, self.settings.home / "keyword" / self.store.name)
        self.mention_index = MentionIndex(self.papers, self.keyword_index.papers_using)
        self.spelling = SpellingFixer(self.keyword_index)
        if self.paper_vectors is not None:
            self.paper_vectors.load(self.papers, self.notify)

    def close(self) -> None:
        self.store.close()

    def paper(self, paper_id: str) -> Paper:
        """A stored paper by id (KeyError if the index does not hold it)."""
        return self._papers_by_id[paper_id]

    def __enter__(self) -> "Retriever":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def search(self, question: str, k: int | None = None, filters: Filters = Filters()) -> SearchResult:
        """The top-k papers for `question` that pass `filters`."""
        question = check_question(question)
        k = k or self.settings.top_k
        if k < 1:
            raise UsageError(f"k must be at least 1, got {k}")
        allowed = self._allowed_papers(filters)
        started = time.perf_counter()
        english = self.english(question)
        translated = time.perf_counter()
        text = self.spelling.fix(english)
        query = self.embed_model.get_query_embedding(text)
        paper_query = self.paper_vectors.query_vector(text) if self.paper_vectors is not None else None
        embedded = time.perf_counter()
        held = frozenset(papers_holding_names(self.keyword_index, text))
        hits = self._rank(text, query, paper_query, k, allowed, held) if allowed != set() else []
        timings = {"embed_s": embedded - translated, "search_s": time.perf_counter() - embedded}
        if english != question:
            timings["translate_s"] = translated - started
        return SearchResult(question, k, filters, self.store.name, hits, timings, query, text, held)

    def english(self, question: str) -> str:
        """What to search for, before typing slips are fixed (spelling.py): the question, translated into
        English when it is in another script."""
        if self.translator is None or question_language(question) is None:
            return question
        return safe_to_english(self.translator, question, self.notify)

    def _rank(self, question: str, query: list[float], paper_query, k: int, allowed: set[str] | None,
              names_held: frozenset[str] = frozenset()) -> list[Hit]:
        """The top k of the fixed candidate pool; when k is larger, the next papers ranked after them."""
        where = None if allowed is None else {"paper_id": {"$in": sorted(allowed)}}
        paper = self._paper_scores(paper_query, allowed)
        pool = lambda size: self._scored_pool(question, query, paper, size, where, allowed, names_held)
        scores, dense, keyword, named = pool(CANDIDATES)
        ranked = sorted(scores, key=lambda pid: -scores[pid])
        if k > len(ranked):
            more, more_dense, more_keyword, _ = pool(k)
            ranked += sorted((pid for pid in more if pid not in scores), key=lambda pid: -more[pid])
            scores, dense, keyword = more | scores, more_dense | dense, more_keyword | keyword
        ranked = [pid for pid in ranked if pid in self._papers_by_id][:k]
        return [Hit(rank, self._papers_by_id[pid], scores[pid], dense[pid][1], dense[pid][0],
                    keyword.get(pid, 0.0), pid in named, paper.get(pid))
                for rank, pid in enumerate(ranked, start=1)]

    def _paper_scores(self, paper_query, allowed: set[str] | None) -> PaperScores:
        """The paper model's score of every paper that passes the filters; none when it is off."""
        return PaperScores() if paper_query is None else self.paper_vectors.scores(paper_query, allowed)

    def _scored_pool(self, question: str, query: list[float], paper: PaperScores, size: int, where: dict | None,
                     allowed: set[str] | None, names_held: frozenset[str]) -> tuple[dict, dict, dict, dict]:
        """Fused scores of the best `size` papers of each part and the named papers, with the parts."""
        method = self.settings.retrieval
        dense = self._dense(query, size, where) if method != "bm25" else {}
        keyword = self._keyword(question, size, allowed) if method != "dense" else {}
        mentioned = self._mentioned(question, allowed) if method in ("hybrid", "rrf") else {}
        held = self._name_boosts(names_held, allowed) if method in ("hybrid", "rrf") else {}
        by_paper = paper.top(size) if method != "bm25" else []
        missing = [pid for pid in dict.fromkeys(by_paper + list(keyword) + list(mentioned) + list(held))
                   if pid not in dense]
        if missing:
            dense.update(self._dense_of(query, missing))
        if any(pid not in self._papers_by_id for pid in dense):
            self._load_papers()   # another process ingested since this index was opened
        boosts = {pid: mentioned.get(pid, 0.0) + held.get(pid, 0.0) for pid in {**mentioned, **held}}
        return self._fuse(method, self._mixed(dense, paper), keyword, boosts), dense, keyword, mentioned

    def _mixed(self, dense: dict[str, tuple[float, str]], paper: PaperScores) -> dict[str, float]:
        """paper_id -> dense score: the best chunk's cosine, mixed with the paper model's score of the whole abstract when known."""
        weight = self.settings.paper_model_weight
        mixed = {}
        for pid, (chunk, _) in dense.items():
            abstract = paper.get(pid)
            mixed[pid] = chunk if abstract is None else (chunk + weight * abstract) / (1 + weight)
        return mixed

    def _fuse(self, method: str, dense: dict[str, float], keyword: dict[str, float],
              boosts: dict[str, float]) -> dict:
        """paper_id -> fused score.

        hybrid: dense score + keyword_weight * keyword score (bm25 / ceiling) + boost (authors, category
        or a name the question writes); rrf: 1/(RRF_K + dense rank) + rrf_keyword_weight/(RRF_K + keyword
        rank) + the boost in units of "first in both lists"; dense, bm25: that score alone. Ranks are
        ranks within the pool, which is a prefix of each part's full ranking."""
        if method == "dense":
            return dict(dense)
        if method == "bm25":
            return {pid: s for pid, s in keyword.items() if pid in dense}
        if method == "hybrid":
            weight = self.settings.keyword_weight
            return {pid: score + weight * keyword.get(pid, 0.0) + boosts.get(pid, 0.0)
                    for pid, score in dense.items()}
        weight = self.settings.rrf_keyword_weight
        dense_rank = _ranks(dense)
        keyword_rank = _ranks(keyword)
        unit = (1 + weight) / (RRF_K + 1)
        return {pid: 1 / (RRF_K + dense_rank[pid]) + unit * boosts.get(pid, 0.0)
                + (weight / (RRF_K + keyword_rank[pid]) if pid in keyword_rank else 0.0) for pid in dense}

    def _mentioned(self, question: str, allowed: set[str] | None) -> dict[str, float]:
        """Boosts of the papers whose authors or category the question names."""
        mentions = self.mention_index.find(question)
        boosts: dict[str, float] = {}
        for pid in mentions.authors:
            boosts[pid] = self.settings.author_weight
        for pid in mentions.categories:
            boosts[pid] = boosts.get(pid, 0.0) + self.settings.category_weight
        return {pid: b for pid, b in boosts.items() if b > 0 and (allowed is None or pid in allowed)}

    def _name_boosts(self, names_held: frozenset[str], allowed: set[str] | None) -> dict[str, float]:
        """Boosts of the papers that use a name the question writes ('LBMKGC', 'RoboCasa': `names_held`): a name
        few papers use says which paper is meant, however far the rest of the question is from its abstract."""
        if not self.settings.name_weight:
            return {}
        return {pid: self.settings.name_weight for pid in names_held if allowed is None or pid in allowed}

    def _dense(self, query: list[float], k: int, where: dict | None) -> dict[str, tuple[float, str]]:
        """paper_id -> (cosine, text) of its best chunk, for at least k papers (fewer if the index has fewer).

        Asks for chunk texts and distances only: the paper comes from the ids, which name it."""
        total = self.collection.count()
        n = min(total, 4 * k)
        while True:
            found = self.collection.query(query_embeddings=[query], n_results=n, where=where,
                                          include=["documents", "distances"])
            best = _best_chunk_per_paper(found["ids"][0], found["documents"][0],
                                         [1.0 - d for d in found["distances"][0]])
            if len(best) >= k or n >= total:
                return best
            n = min(total, n * 4)

    def _dense_of(self, query: list[float], paper_ids: list[str]) -> dict[str, tuple[float, str]]:
        """The same as _dense for the named papers, scored here from their stored chunk vectors."""
        import numpy

        found = self.collection.get(where={"paper_id": {"$in": paper_ids}}, include=["documents", "embeddings"])
        if not found["ids"]:
            return {}
        cosines = numpy.asarray(found["embeddings"], dtype=numpy.float32) @ numpy.asarray(query, dtype=numpy.float32)
        return _best_chunk_per_paper(found["ids"], found["documents"], cosines.tolist())

    def _keyword(self, question: str, size: int, allowed: set[str] | None) -> dict[str, float]:
        """Keyword scores (BM25 / the question's ceiling, 0 to 1) of the best `size` papers that pass the filters."""
        top_n = len(self.papers) if allowed is not None else size
        scores = self.keyword_index.scores(question, top_n)
        if allowed is not None:
            scores = {pid: s for pid, s in scores.items() if pid in allowed}
        ceiling = self.keyword_index.ceiling(question)
        best = sorted(scores.items(), key=lambda item: -item[1])[:size]
        return {pid: s / ceiling for pid, s in best} if ceiling > 0 else {}

    def chunks_of(self, paper_ids: list[str]) -> dict[str, list[tuple[str, list[float]]]]:
        """Each paper's chunks in document order, with their stored embeddings."""
        if not paper_ids:
            return {}
        found = self.collection.get(where={"paper_id": {"$in": list(paper_ids)}},
                                    include=["documents", "metadatas", "embeddings"])
        rows = sorted(zip(found["metadatas"], found["documents"], found["embeddings"]),
                      key=lambda row: (row[0]["paper_id"], row[0]["chunk"]))
        chunks: dict[str, list[tuple[str, list[float]]]] = {}
        for meta, text, embedding in rows:
            chunks.setdefault(meta["paper_id"], []).append((text, list(embedding)))
        return chunks

    def _allowed_papers(self, filters: Filters) -> set[str] | None:
        """The ids of papers that pass the filters; None when nothing is filtered."""
        if not filters.category and not filters.author:
            return None
        papers = self.papers
        if filters.category:
            categories = set(self.resolve_category(filters.category))
            papers = [p for p in papers if p.category in categories]
        if filters.author:
            if not any(author_matches(filters.author, p.authors) for p in self.papers):
                raise UsageError(f"no indexed paper has an author matching {filters.author!r}: "
                                 "check the spelling, or list authors with `rag papers --json`")
            papers = [p for p in papers if author_matches(filters.author, p.authors)]
        return {p.paper_id for p in papers}

    def resolve_category(self, wanted: str) -> list[str]:
        """The stored categories a --category value names: a full category, or an area."""
        known = sorted({p.category for p in self.papers if p.category})
        folded = wanted.strip().casefold()
        exact = [c for c in known if c.casefold() == folded]
        matches = exact or [c for c in known if c.split(CATEGORY_SEPARATOR)[0].casefold() == folded]
        if matches:
            return matches
        areas = sorted({c.split(CATEGORY_SEPARATOR)[0] for c in known})
        close = difflib.get_close_matches(wanted.strip(), areas + known, n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}?" if close else \
            "list the categories with `rag papers`"
        raise UsageError(f"unknown category {wanted!r}: {hint}")


def author_matches(query: str, authors) -> bool:
    """True when one author carries every word of `query`; a one-letter word matches an initial."""
    wanted = name_tokens(query)
    if not wanted:
        return False
    for author in authors:
        have = name_tokens(author)
        if all(any(h == w or (len(w) == 1 and h.startswith(w)) for h in have) for w in wanted):
            return True
    return False


def _ranks(scores: dict[str, float]) -> dict[str, int]:
    return {pid: rank for rank, pid in enumerate(sorted(scores, key=lambda p: -scores[p]), start=1)}


def _best_chunk_per_paper(chunk_ids: list[str], texts: list[str], scores: list[float]) -> dict[str, tuple[float, str]]:
    """paper_id -> (score, text) of its highest-scoring chunk."""
    best: dict[str, tuple[float, str]] = {}
    for chunk_id, text, score in zip(chunk_ids, texts, scores):
        pid = paper_id_of_chunk(chunk_id)
        if pid not in best or score > best[pid][0]:
            best[pid] = (score, text)
    return best


def papers_holding_names(keywords: KeywordIndex, question: str) -> set[str]:
    """The papers that use a name the question writes ('SeRL', 'NetHack'), a name few papers use
    (KeywordIndex.holding_names, claims.RARE_WORD_SHARE)."""
    return keywords.holding_names(names_given(question, ""), RARE_WORD_SHARE)
