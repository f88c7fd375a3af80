"""Question -> Answer: retrieve, build the prompt, generate, then check every citation.

The model is never trusted. Its reply (JSON items, each one claim about one source
number; or plain text with [n] markers from a backend that ignores the schema) is parsed
claim by claim as it streams; each citation must name a source that was given (others
are dropped and listed in `invalid_citations`), runaway citation loops are cut, each
claim is checked against the sources it cites (grounding.py) and for the names and
relevance rules of claims.py, an uncited sentence gets a citation only when that check
finds a supporting source, and citations are renumbered in order of first appearance.
A claim that restates the question, or misses it, gives way to its source's sentence
closest to the question, quoted; a number its source does not state becomes "the
abstract does not state this". The answer abstains with CANNOT_ANSWER when retrieval is
too weak (a score gate that spares papers the question names, or no paper given is on the
question, so no claim could be shown: the model is not asked), when the model doubts that
its sources answer (its odds for `"answerable": true`, read from the local model before it writes:
claims.MIN_SURE_ODDS) and no paper is close to the question as a whole (it is not asked to write),
when the model refuses, or when no checked claim answers the question.
Sources reach the prompt through prompt_safety.py: whatever reads as a tag is defused, and sentences
that address the model are left out (counted per source in the JSON as `instructions_removed`).
"""

import json
import re
import time
from dataclasses import dataclass, field

from rag.claims import (FIRM_ODDS, MIN_DOUBT_SOURCE_RELEVANCE, MIN_FIRST_PAPER_ODDS, MIN_PAPER_RELEVANCE,
                        MIN_QUOTE_PAPER_SCORE, MIN_SEVERAL_ODDS, MIN_SOURCE_RELEVANCE, MIN_SURE_ODDS,
                        ONE_PAPER_FOR_ONE_QUESTION, RARE_WORD_SHARE,
                        asked_metric, asked_value, asks_for_authors, asks_for_link, asks_for_name, asks_for_number,
                        asks_for_several, authors_claim, counted_terms, finished_claim, in_third_person, label_out,
                        method_names, name_the_paper, named_terms, names_given, near_the_best, not_stated_claim,
                        points_to_link, question_parts, quote_order, quoted_claim, whole_sentence,
                        with_bounds, words_after_numbers, written_labels, written_names)
from rag.corpus import Paper, name_tokens, paper_names
from rag.embed_cache import EmbeddingCache, cache_path
from rag.embedding import embed_texts
from rag.errors import BackendError
from rag.grounding import GroundingChecker, cosine, numbers, quantities, stated_numbers
from rag.mentions import MentionIndex
from rag.prompt_safety import Screened, defuse, remove_instructions, screen
from rag.prompts import load_prompt
from rag.retrieve import Filters, Hit, Retriever
from rag.settings import Settings, token_encoding
from rag.translate import Translator, question_language

CANNOT_ANSWER = "The provided papers do not answer this question."
LIST_LEAD = "{count} of the papers answer this:"
STREAMED_LIST_LEAD = "Papers that answer this:"   # `rag ask` prints a list as it is checked: no count yet
MAX_CITATIONS_PER_SENTENCE = 3
_STRAIGHT_QUOTED = re.compile(r'"([^"\n]*)"')
MAX_SENTENCE_CHARS = 280   # one claim per sentence, so each is checked on its own
CUT_SLACK = 16             # a claim this close to the limit that does not end a sentence was cut
ANSWER_SCHEMA_VERSION = 1
REPLY_START = '{"answerable":'   # where the schema's reply says whether the sources answer
YES, NO = (" true", "true"), (" false", "false")
MAX_CACHED_SENTENCES = 20_000


def answer_schema(max_items: int, source_numbers: list[int] | None = None) -> dict:
    """The JSON shape asked of the model: a refusal flag, then items of one claim about one source.

    `source` is a choice among the numbers given, so every claim is about one paper that is there."""
    source = {"type": "integer"} | ({"enum": list(source_numbers)} if source_numbers else {})
    item = {"type": "object", "additionalProperties": False, "required": ["source", "claim"],
            "properties": {"source": source, "claim": {"type": "string", "maxLength": MAX_SENTENCE_CHARS}}}
    return {"type": "object", "additionalProperties": False, "required": ["answerable", "items"],
            "properties": {"answerable": {"type": "boolean"},
                           "items": {"type": "array", "items": item, "maxItems": max_items}}}


@dataclass
class Source:
    """A retrieved paper as shown to the model: its number, its hit and the chunks given."""

    n: int
    hit: Hit
    chunks: list[str]
    embeddings: list[list[float]]

    @property
    def text(self) -> str:
        return " … ".join(self.chunks)


@dataclass(frozen=True)
class Citation:
    n: int
    paper: Paper
    score: float

    def to_json(self) -> dict:
        p = self.paper
        return {"n": self.n, "paper_id": p.paper_id, "label": p.label, "authors": list(p.authors),
                "category": p.category, "source": p.source, "score": round(self.score, 4)} | p.bibliography()


@dataclass
class Sentence:
    """One checked sentence. kind: the model's `claim`; a `quote` of the cited abstract standing in
    for a claim that restated the question; `not_stated` (the abstract does not state what was
    asked); `authors` (who wrote the cited paper, from its record, for a question that asks who);
    `off_question` (no answer: true of its source but off the question, or the question restated; never
    shown as one)."""

    text: str
    citations: list[int]
    supported: bool
    english: str | None = None     # the checked English sentence, when `text` is its translation
    kind: str = "claim"
    quote: str | None = None       # for a quote: the abstract's sentence, verbatim

    def render(self) -> str:
        return self.text + ("" if not self.citations else " " + "".join(f"[{n}]" for n in self.citations))

    def to_json(self) -> dict:
        return ({"text": self.text, "citations": self.citations, "supported": self.supported, "kind": self.kind}
                | ({"english": self.english} if self.english else {}) | ({"quote": self.quote} if self.quote else {}))


@dataclass
class Answer:
    """The one record that `rag ask --json`, the UI and the eval use."""

    question: str
    answer: str
    abstained: bool
    citations: list[Citation]
    sentences: list[Sentence]
    sources: list[Hit]
    invalid_citations: list[str]
    backend: str
    model: str
    index: str
    timings: dict = field(default_factory=dict)
    abstain_reason: str | None = None
    query: str = ""                  # what was searched and answered: the question or its English translation
    language: str | None = None      # the question's language when it is not English
    draft: list[dict] = field(default_factory=list)   # the model's claims as it wrote them, before the checks
    screened: dict[str, Screened] = field(default_factory=dict)   # paper id -> its instruction sentences
    answerable_odds: float | None = None   # the model's log-odds that the sources answer (backends that tell)

    @property
    def lead(self) -> str | None:
        """For an answer about several papers, the line before its list of claims; else None. It counts
        the papers that supported claims are about: one marked unsupported answers nothing."""
        papers = {n for s in self.sentences if s.supported and s.kind != "not_stated" for n in s.citations}
        if self.abstained or len(papers) < 2 or len(self.sentences) < 2:
            return None
        return "" if self.language else LIST_LEAD.format(count=len(papers))

    def items(self) -> list[list[Sentence]]:
        """The list of an answer about several papers: one item per paper (per set of citations), its
        sentences in the order shown, the papers in the order they are first told."""
        grouped: dict[tuple[int, ...], list[Sentence]] = {}
        for sentence in self.sentences:
            grouped.setdefault(tuple(sentence.citations), []).append(sentence)
        return list(grouped.values())

    def _instructions_json(self, hit: Hit) -> dict:
        """How many of the paper's sentences read as instructions to the model and were kept out of the
        prompt; `instructions_only`: most did, so none of the paper was given."""
        screened = self.screened.get(hit.paper.paper_id)
        return {"instructions_removed": screened.removed if screened else 0,
                "instructions_only": bool(screened and screened.left_out)}

    def to_json(self) -> dict:
        return {"question": self.question, "answer": self.answer, "abstained": self.abstained,
                "abstain_reason": self.abstain_reason, "query": self.query, "language": self.language,
                "citations": [c.to_json() for c in self.citations],
                "sentences": [s.to_json() for s in self.sentences],
                "sources": [h.to_json() | self._instructions_json(h) for h in self.sources],
                "invalid_citations": self.invalid_citations,
                "draft": self.draft,
                "answerable_odds": None if self.answerable_odds is None else round(self.answerable_odds, 3),
                "backend": self.backend, "model": self.model, "index": self.index,
                "timings": {k: round(v, 4) if isinstance(v, float) else v for k, v in self.timings.items()}}


class Answerer:
    """Answers questions from one index with one LLM backend."""

    def __init__(self, settings: Settings, retriever: Retriever, model, translator: Translator | None = None):
        """`translator` puts answers back into the question's language (share the retriever's, which
        translated the question: rag.translate.translator_for); without one they stay in English."""
        self.settings = settings
        self.retriever = retriever
        self.model = model
        self.translator = translator
        self.grounding = GroundingChecker(retriever.embed_model)
        self.system_prompt = load_prompt("answer_system" if settings.answer_format == "json"
                                         else "answer_system_text")
        if translator:
            translator.use_model(model)
        self.user_prompt = load_prompt("answer_user")
        self._vectors: dict[str, list[float]] = {}

    def ask(self, question: str, k: int | None = None, filters: Filters = Filters(),
            on_sentence=lambda sentence: None, on_text=lambda text: None,
            on_sources=lambda hits: None) -> Answer:
        """Answer `question`; on_sources gets the papers found before the model is asked, on_text the
        model's text a finished sentence at a time, as it streams (not yet checked), on_sentence each
        checked sentence."""
        started = time.perf_counter()
        found = self.retriever.search(question, k=k, filters=filters)
        on_sources(found.hits)
        timings = {"retrieve_s": time.perf_counter() - started, "first_token_s": None, "generate_s": None,
                   "prompt_tokens": 0, "completion_tokens": 0}  # stay so when the model is not asked
        record = Answer(question=found.question, answer=CANNOT_ANSWER, abstained=True, citations=[], sentences=[],
                        sources=found.hits, invalid_citations=[], backend=self.model.backend,
                        model=self.model.model, index=found.index, timings=timings, query=found.query,
                        language=question_language(found.question) if found.query != found.question else None,
                        screened={h.paper.paper_id: screen(h.paper.text) for h in found.hits})
        given = [h for h in found.hits if not record.screened[h.paper.paper_id].left_out]
        if not given or not self.retrieval_is_confident(given, found.names_held):
            record.abstain_reason = "retrieval"
            return self._finish(record, started)
        ranked = self._ranked_sentences(found.query, found.query_embedding)   # what is read, and what is quoted
        sources = self.build_sources(self.papers_to_read(given, found.query), found.query_embedding, found.query,
                                     ranked)
        checker = CitationChecker(sources, self.grounding, found.query, ranked, self.retriever.mention_index,
                                  self.retriever.keyword_index, found.names_held)
        if not checker.any_source_on_topic():
            record.abstain_reason = "retrieval"   # no claim about these papers could be shown as an answer
            return self._finish(record, started)
        messages = [
            {"role": "system", "content": self.system_prompt.render(**{
                name: value for name, value in (("cannot_answer", CANNOT_ANSWER),
                                                ("max_sentences", self.settings.max_sentences))
                if name in self.system_prompt.variables})},
            {"role": "user", "content": self.user_prompt.render(
                sources=format_sources(sources, checker.authors_named), question=defuse(found.query))},
        ]
        timings["prompt_tokens"] = sum(count_tokens(m["content"]) for m in messages)
        try:
            record.answerable_odds = self._answerable_odds(messages)
            checker.odds = record.answerable_odds
            if not checker.any_source_on_topic():   # the model doubts, and no paper is close as a whole
                record.abstain_reason = "off_question"
                return self._finish(record, started)
            reply = self._generate(messages, checker, [s.n for s in sources], started, timings,
                                   on_sentence, on_text)
        except BackendError as err:
            err.sources = found.hits  # so the caller can still show what was retrieved
            raise
        record.invalid_citations, record.draft = checker.invalid, checker.draft
        return self._conclude(record, checker, reply, started)

    def _answerable_odds(self, messages: list[dict]) -> float | None:
        """The model's log-odds that its sources answer, read where its JSON reply says so; None for a
        backend that cannot tell (only the local one reads its own next-token odds) or a text reply."""
        if self.settings.answer_format != "json" or not hasattr(self.model, "odds"):
            return None
        return self.model.odds(messages, REPLY_START, YES, NO)

    def papers_to_read(self, hits: list[Hit], question: str) -> list[Hit]:
        """The papers the model is given: with prompt_papers near_best only those a claim can be shown
        about (claims.near_the_best), as a claim about any other would be held back as off the question;
        a shorter prompt is read sooner (the wall before the first token)."""
        return near_the_best(hits, question) if self.settings.prompt_papers == "near_best" else hits

    def retrieval_is_confident(self, hits: list[Hit], names_held: frozenset[str]) -> bool:
        """The score gate: the best paper is close enough in meaning, or the question names a paper's
        author or category, or a name that paper uses ("which paper evaluates on RoboCasa?": its id in
        `names_held`, SearchResult.names_held): a question that is mostly a name has a low cosine by nature."""
        return hits[0].dense_score >= self.settings.min_dense_score or any(h.named for h in hits) \
            or hits[0].paper.paper_id in names_held

    def _generate(self, messages, checker, source_numbers, started, timings, on_sentence, on_text) -> "ReplyParser":
        parser = ReplyParser()
        generate_start = time.perf_counter()
        text = []
        schema = answer_schema(self.settings.max_sentences, source_numbers) \
            if self.settings.answer_format == "json" else None
        for delta in self.model.stream(messages, schema, self.settings.max_tokens):
            if timings["first_token_s"] is None:
                timings["first_token_s"] = time.perf_counter() - started
            text.append(delta)
            for event in parser.feed(delta):
                if event[0] == "text":
                    on_text(event[1])
                else:
                    on_sentence(checker.add(*event[1:]))
            if parser.refused:
                break  # the model said the sources do not answer: no need to generate more
        for sentence_text, cited in parser.finish():
            on_sentence(checker.add(sentence_text, cited))
        if not parser.refused and (fallback := checker.add_fallback_quote()):
            on_sentence(fallback)
        if not parser.refused and (unstated := checker.add_unstated_number()):
            on_sentence(unstated)
        for authors in checker.add_authors() if not parser.refused else []:
            on_sentence(authors)
        timings["generate_s"] = time.perf_counter() - generate_start
        timings["completion_tokens"] = count_tokens("".join(text))
        return parser

    def _conclude(self, record: Answer, checker: "CitationChecker", parser: "ReplyParser", started) -> Answer:
        shown = [s for s in checker.sentences if s.kind != "off_question"]
        answering = [s for s in shown if s.supported and s.kind != "not_stated"]
        if parser.refused or any(CANNOT_ANSWER.rstrip(".") in s.text for s in checker.sentences):
            record.abstain_reason = "model"
        elif not answering and any(s.kind == "not_stated" for s in shown):
            record.abstain_reason = "not_stated"   # the papers hold the topic, not the asked fact
            checker.keep_citations_of(shown := [s for s in shown if s.kind == "not_stated"])
            record.sentences, record.citations = shown, checker.citations()
            self._render(record, prefix=CANNOT_ANSWER)
        elif not answering:
            record.abstain_reason = "off_question" if any(s.kind == "off_question" for s in checker.sentences) \
                else "unsupported"   # keep the draft, visibly unsupported, without citations
            record.sentences = [Sentence(s.text, [], False, kind=s.kind) for s in checker.sentences]
        else:
            record.abstained = False
            record.sentences, record.citations = shown, checker.citations()
            self._render(record)
        return self._finish(record, started)

    def _render(self, record: Answer, prefix: str = "") -> None:
        """The answer text: its sentences; for claims about several papers, a lead line and a list."""
        if record.language and self.translator:
            self._translate_back(record)
        if record.lead is not None:
            body = "\n".join("- " + " ".join(s.render() for s in item) for item in record.items())
            record.answer = f"{record.lead}\n{body}" if record.lead else body
        else:
            record.answer = " ".join(s.render() for s in record.sentences)
        if prefix:
            record.answer = f"{prefix} {record.answer}"

    def _translate_back(self, record: Answer) -> None:
        """Checked English sentences -> the question's language, citations kept on their sentences, and the
        label of the paper a sentence names written first, as it is: it is not translated (claims.label_out);
        nor is a sentence of authors' names."""
        started = time.perf_counter()
        labels = {c.n: c.paper.label for c in record.citations}
        told = [i for i, s in enumerate(record.sentences) if s.kind != "authors"]   # names stay as written
        parts = {i: label_out(record.sentences[i].text, [labels[n] for n in record.sentences[i].citations])
                 for i in told}
        translated = self.translator.from_english([parts[i][1] for i in told], record.language)
        for i, text in zip(told, translated):
            s, label = record.sentences[i], parts[i][0]
            record.sentences[i] = Sentence(label + text, s.citations, s.supported,
                                           s.text if label + text != s.text else None, s.kind, s.quote)
        record.timings["translate_answer_s"] = time.perf_counter() - started

    @staticmethod
    def _finish(record: Answer, started) -> Answer:
        record.timings["total_s"] = time.perf_counter() - started
        return record

    def build_sources(self, hits: list[Hit], query_embedding, question: str = "", ranked=None) -> list[Source]:
        """The retrieved papers' passages within the token budget, in the order of `passage_order`,
        numbered by rank; a paper none of whose passages fit is left out. Sentences that address the model
        (prompt_safety.screen) are never passages, and a paper made mostly of them gives none. For a question
        about several papers (`about_several`), when several papers are read, settings.several_sentences
        of each paper's sentences, those that rank first as quotes (claims.quote_order), none that points to
        code unless asked; with one paper there is no budget to share, and its chunks are read. For a question
        about one paper, when several are read, the best paper's whole abstract and settings.runner_up_sentences
        of each other paper's best quotes. `ranked`: the question's _ranked_sentences when the caller has it
        already."""
        several = about_several(question, self.retriever.mention_index)
        per_paper = (self.settings.several_sentences if several else self.settings.runner_up_sentences) \
            if len(hits) > 1 else 0
        by_sentence = self.settings.context_unit == "sentence" or per_paper > 0
        passages = self._sentences_of(hits) if by_sentence else self._chunks_of(hits)
        if per_paper:
            ranked = ranked or self._ranked_sentences(question, query_embedding)
            passages = _best_quotes_of_each(hits, passages, ranked, asks_for_link(question), per_paper,
                                            whole=() if several else (0,))
        budget, chosen = self.settings.context_tokens, []
        for rank, number, text, embedding in passage_order(passages, hits, query_embedding):
            cost = count_tokens(text)
            if cost <= budget:
                chosen.append((rank, number, text, embedding))
                budget -= cost
        sources = []
        for rank, hit in enumerate(hits):
            mine = sorted((number, text, embedding) for r, number, text, embedding in chosen if r == rank)
            if mine:
                texts = _join_runs(mine) if by_sentence else _join_overlaps(hit.paper.text, [t for _, t, _ in mine])
                sources.append(Source(len(sources) + 1, hit, texts, [e for _, _, e in mine]))
        return sources

    def _chunks_of(self, hits: list[Hit]) -> list[tuple]:
        """(rank, chunk number, text, stored embedding) of every chunk of the hits' papers; a chunk that
        holds instructions to the model loses them and is embedded again as given."""
        chunks = self.retriever.chunks_of([h.paper.paper_id for h in hits])
        passages = []
        for rank, hit in enumerate(hits):
            screened = screen(hit.paper.text)
            if screened.left_out:
                continue
            for number, (text, embedding) in enumerate(chunks.get(hit.paper.paper_id, [])):
                if screened.flagged and (kept := remove_instructions(text)) != text:
                    if not kept:
                        continue
                    text, embedding = kept, self._sentence_vectors([kept])[0]
                passages.append((rank, number, text, embedding))
        return passages

    def _ranked_sentences(self, question: str, query_embedding):
        """A function: paper -> its abstract's (sentence, cosine to the question) pairs, best quote first
        (claims.quote_order), computed once per paper."""
        found: dict[str, list[tuple[str, float]]] = {}
        question_terms = self.grounding.terms(question)

        def ranked(paper: Paper) -> list[tuple[str, float]]:
            if paper.paper_id not in found:
                sentences = list(screen(paper.text).kept) or [screen(paper.text).text]
                similarities = [cosine(query_embedding, v) for v in self._sentence_vectors(sentences)]
                order = quote_order(similarities, [self.grounding.terms(s) for s in sentences], question_terms)
                found[paper.paper_id] = [(sentences[i], similarities[i]) for i in order]
            return found[paper.paper_id]
        return ranked

    def _sentences_of(self, hits: list[Hit]) -> list[tuple]:
        """(rank, sentence number, text, embedding) of every sentence of the hits' abstracts."""
        sentences = [(rank, number, text) for rank, hit in enumerate(hits)
                     for number, text in _given_sentences(hit.paper)]
        vectors = self._sentence_vectors([text for _, _, text in sentences])
        return [(rank, number, text, vector) for (rank, number, text), vector in zip(sentences, vectors)]

    def _sentence_vectors(self, texts: list[str]) -> list[list[float]]:
        """Embeddings of abstract sentences: from memory, else the embedding cache on disk, else embedded
        now and cached (so a new process, or the next question about the same papers, embeds nothing)."""
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            if len(self._vectors) > MAX_CACHED_SENTENCES:
                self._vectors.clear()
            with EmbeddingCache(cache_path(self.settings.derived_cache_dir, self.settings.embed_model)) as cache:
                vectors, _ = embed_texts(missing, cache, self.settings, lambda: self.retriever.embed_model)
            self._vectors.update(zip(missing, vectors))
        return [self._vectors[t] for t in texts]


def passage_order(passages: list[tuple], hits: list[Hit], query_embedding) -> list[tuple]:
    """(rank index, number, text, embedding) passages in the order they claim the budget: the best
    passage of each paper the question names first (the cosine of a question that is mostly a name
    is low by nature, so by similarity alone the paper asked about could be left out), then all by
    similarity to the question (chosen on the eval's tune part)."""
    by_similarity = sorted(passages, key=lambda p: -cosine(query_embedding, p[3]))
    named = {rank for rank, hit in enumerate(hits) if hit.named}
    best = {}
    for passage in by_similarity:
        if passage[0] in named:
            best.setdefault(passage[0], passage)
    return list({id(p): p for p in list(best.values()) + by_similarity}.values())


def _best_quotes_of_each(hits: list[Hit], passages: list[tuple], ranked, links_asked: bool,
                         per_paper: int, whole: tuple[int, ...] = ()) -> list[tuple]:
    """The sentence passages (rank index, number, text, embedding) that are each paper's `per_paper` best
    quotes (`ranked`: paper -> its sentences, best quote first), without those that point to code unless
    `links_asked`; every passage of the papers at the rank indexes in `whole`."""
    chosen = {(p[0], p[2]) for p in passages if p[0] in whole}
    for rank, hit in enumerate(hits):
        if rank in whole:
            continue
        quotes = [text for text, _ in ranked(hit.paper) if links_asked or not points_to_link(text)]
        chosen |= {(rank, text) for text in quotes[:per_paper]}
    return [p for p in passages if (p[0], p[2]) in chosen]


def _given_sentences(paper: Paper) -> list[tuple[int, str]]:
    """(number, sentence) of the abstract's sentences that may be given to the model: not instructions."""
    screened = screen(paper.text)
    return [(number, text) for number, text in enumerate(screened.sentences)
            if number not in screened.flagged and not screened.left_out]


def _join_runs(passages: list[tuple[int, str, list[float]]]) -> list[str]:
    """Sentences in document order, neighbours joined into one piece (a gap becomes ' … ' in Source.text)."""
    pieces, last = [], None
    for number, text, _ in passages:
        if last is not None and number == last + 1 and pieces:
            pieces[-1] += " " + text
        else:
            pieces.append(text)
        last = number
    return pieces


def _join_overlaps(abstract: str, chunks: list[str]) -> list[str]:
    """Chunks of one abstract in order, those that overlap or touch in it joined into one piece: chunks
    share chunk_overlap tokens with their neighbours, so two given as they are would repeat those words.
    A chunk not found as written (instructions removed from it) stays a piece of its own."""
    pieces, span = [], None   # span: where the last piece lies in the abstract
    for chunk in chunks:
        start = abstract.find(chunk, span[0] if span else 0)
        if start < 0:
            pieces.append(chunk)
            span = None
        elif span is not None and start <= span[1] + 1:
            span = (span[0], max(span[1], start + len(chunk)))
            pieces[-1] = abstract[span[0]:span[1]]
        else:
            span = (start, start + len(chunk))
            pieces.append(chunk)
    return pieces


def about_several(question: str, mentions: MentionIndex | None) -> bool:
    """Does the question ask about several papers: in its words (claims.asks_for_several), or by naming an
    author of two or more papers ('what has Manling Li been working on?', 'show me everything from Sharon Li')?"""
    return asks_for_several(question) or (mentions is not None and len(mentions.find(question).authors) >= 2)


def typographic_quotes(text: str) -> str:
    """Straight double quotes as typographic ones. A claim copies the source's words into a JSON string,
    where a straight quote is the string's end to the grammar: 'an example of "emergence"' became the
    claim 'It is often taken as an example of'."""
    return _STRAIGHT_QUOTED.sub(r"“\1”", text).replace('"', "”")


def format_sources(sources: list[Source], authors_named: frozenset[str] = frozenset()) -> str:
    """Numbered, delimited source blocks; in the label and the text, whatever reads as a tag is defused.
    A paper whose author the question names (paper ids in authors_named) shows its authors too: the
    model cannot tell that 'papers by Diyi Yang' are answered by 'Zhu et al.' from the label alone."""
    blocks = []
    for source in sources:
        paper = source.hit.paper
        label, text = defuse(paper.label), typographic_quotes(defuse(source.text))
        authors = f"\nAuthors: {defuse(', '.join(paper.authors))}" if paper.paper_id in authors_named else ""
        blocks.append(f'<source id="{source.n}">\nPaper: {label}{authors}\n{text}\n</source>')
    return "\n\n".join(blocks)


class CitationChecker:
    """Checks each claim's citations, names and relevance against the given sources, renumbering
    citations as they appear."""

    def __init__(self, sources: list[Source], grounding: GroundingChecker, question: str,
                 ranked_sentences=None, mentions: MentionIndex | None = None, keywords=None,
                 names_held: frozenset[str] = frozenset()):
        self.sources = {s.n: s for s in sources}
        self.grounding = grounding
        self.question = question
        self.ranked_sentences = ranked_sentences   # paper -> [(abstract sentence, cosine to the question)], best quote first
        authors = {n: paper_names(s.hit.paper.authors) for n, s in self.sources.items()}
        methods = {n: method_names(s.text) for n, s in self.sources.items()}
        self.mentions = mentions   # every stored paper's author names, to find those a sentence writes in full
        self.known_names = (mentions.name_words if mentions else frozenset()).union(*authors.values())
        self._author_named = set(mentions.find(question).authors) if mentions else None   # papers of authors it names
        self.authors_named = frozenset(self._author_named or ())
        self._names = {n: authors[n] | methods[n] for n in self.sources}   # what a sentence citing n may name
        self._first_authors = {n: set(name_tokens(s.hit.paper.authors[0])[-1:]) if s.hit.paper.authors else set()
                               for n, s in self.sources.items()}   # whom 'X et al.' citing n may name
        self._asked_methods = method_names(question)
        self._methods = self._asked_methods.union(*methods.values())   # method names that point to a paper
        self._label_terms = {t for s in sources for t in grounding.terms(s.hit.paper.label)}
        self._wants_number = asks_for_number(question)
        self._wants_name = asks_for_name(question) and not self._wants_number   # which datasets, benchmarks …
        others = [part for part in question_parts(question) if not asks_for_number(part)]
        self._other_part = None if not self._wants_number or not others else \
            "name" if all(asks_for_name(part) for part in others) else "plain"   # what else a number question asks
        self._named = named_terms(question, grounding.terms) if self._wants_name else set()   # 'dataset', 'corpus' …
        self._known_words = " ".join([question] + [s.hit.paper.label for s in sources])   # names that give nothing
        self._wants_link = asks_for_link(question)
        self._link_only = all(asks_for_link(part) for part in question_parts(question))   # asks nothing else
        self._counted = counted_terms(question, grounding.terms)   # what 'how many' counts, stemmed
        self._metric = asked_metric(question)   # 'what perplexity …': the metric a number must be of
        self._near_best = {h.paper.paper_id for h in near_the_best([s.hit for s in sources], question)}
        self._names_held: set[str] = set()   # papers that use a name the question writes ('SeRL')
        self._rare_words_held: set[str] = set()   # those, and papers that hold the question's rare words
        self._rare_words: set[str] = set()   # the question's rare words, stemmed ('grokk')
        self._stems = lambda text: set()
        if keywords is not None and RARE_WORD_SHARE:
            self._names_held = set(names_held)
            self._rare_words_held = self._names_held | keywords.holding_rare_words(question, RARE_WORD_SHARE)
            self._rare_words, self._stems = keywords.rare_words(question, RARE_WORD_SHARE), keywords.stems
        self._several = about_several(question, mentions)
        self._one_paper = ONE_PAPER_FOR_ONE_QUESTION and not self._several
        self.odds: float | None = None   # the model's log-odds that its sources answer; None: taken as sure
        self._answer_paper: int | None = None   # with _one_paper: the (old) number of the paper answered about
        self.invalid: list[str] = []
        self.draft: list[dict] = []          # each sentence as the model wrote it, with its source numbers
        self.sentences: list[Sentence] = []
        self._renumbered: dict[int, int] = {}
        self._seen_texts: set[str] = set()

    def add(self, text: str, cited: list[int]) -> Sentence | None:
        """Check one sentence; returns it with final citation numbers (None for a repeat or empty one)."""
        self.draft.append({"text": text, "sources": list(cited)})
        text, inline = split_inline_citations(text)
        key = re.sub(r"\W+", " ", text).strip().lower()
        if not key or key in self._seen_texts:
            return None
        self._seen_texts.add(key)
        valid = []
        for n in dict.fromkeys(list(cited) + inline):   # repeats (citation loops) collapse here
            if n in self.sources:
                valid.append(n)
            else:
                self.invalid.append(f"[{n}]")
        sentence = self._check(text, valid[:MAX_CITATIONS_PER_SENTENCE])
        if sentence is None or any(s.text == sentence.text for s in self.sentences):
            return None
        return self._append(sentence)

    def _append(self, sentence: Sentence) -> Sentence:
        """Keep a checked sentence, its (old) source numbers renumbered as shown; an off-question
        sentence is never shown as part of an answer, so it keeps no citation."""
        if self._one_paper and sentence.supported and sentence.citations:
            self._keep_to_one_paper(sentence)
        sentence.citations = [] if sentence.kind == "off_question" else [self._renumber(n) for n in sentence.citations]
        self.sentences.append(sentence)
        return sentence

    def _keep_to_one_paper(self, sentence: Sentence) -> None:
        """A question about one paper is answered about one: the paper of the first shown sentence.
        A later sentence about another paper is held back as off the question."""
        if self._answer_paper is None:
            self._answer_paper = sentence.citations[0]
        if self._answer_paper in sentence.citations:
            sentence.citations = [self._answer_paper]
        else:
            sentence.kind, sentence.supported = "off_question", False

    def add_fallback_quote(self) -> Sentence | None:
        """When no checked claim answers, the best-ranked source's sentence closest to the question,
        quoted, if that paper is on the question's topic, and its whole abstract close to the question
        (`_close_enough_to_quote`): when every claim was held back as off the
        question (or there was none), or whatever the claims were when the question names that paper's
        author or category. None for a question that asks for a number, or when a claim answers."""
        best = min(self.sources, key=lambda n: self.sources[n].hit.rank, default=None)
        if best is None or self._wants_number or self._answering():
            return None
        if not self.sources[best].hit.named and any(s.kind != "off_question" for s in self.sentences):
            return None
        if not self._close_enough_to_quote(best):
            return None
        sentence = self._quote([best])
        return self._append(sentence) if sentence is not None else None

    def _check(self, text: str, cited: list[int]) -> Sentence | None:
        """The checked sentence, with the (old) numbers of the sources it cites."""
        if CANNOT_ANSWER.rstrip(".") in text:
            return Sentence(text, [], False)
        if points_to_link(text) and not self._wants_link:   # where the code is does not answer the question
            return Sentence(text, cited, False, kind="off_question")
        if self._wants_number and cited and all(numbers(text) - stated_numbers(s.text) for s in self.sources.values()):
            # a number asked for, and one that no source states: the source's sentence that gives a number
            # of what 'how many' counts, if it has one; any other number could be of something else
            return (self._quote(cited) if self._counted else None) or self._not_stated(cited)
        if not self.grounding.adds_to(text, self.question, ignore=self._label_terms) and not self._gives_number(text) \
                and not (self._wants_name and self._gives_name(text)):
            # it restates the question: its paper's quote, or held back (it answers nothing)
            return self._quote(cited) or Sentence(text, cited, False, kind="off_question")
        vector = self.grounding.embed(text)
        names = written_names(text, self.known_names, self.mentions) | (method_names(text) & self._methods)
        labels = written_labels(text)
        verdicts = {n: self.grounding.check(text, s.text, s.embeddings, vector) for n, s in self.sources.items()}
        backing = [n for n in cited if verdicts[n].supported]
        named = sorted((n for n, v in verdicts.items() if v.supported and self._names_belong(names, [n], labels)),
                       key=lambda n: -verdicts[n].similarity)   # the sources that back it, names included
        if backing and not self._names_belong(names, backing, labels):
            if named:
                backing = []
            elif names & self._asked_methods:   # the method asked about is another paper's
                return Sentence(text, cited, False)
            else:   # the right paper under a wrong name: its own sentence, under its own label
                return self._quote(backing) or Sentence(text, cited, False)
        backing = backing or named[:1]   # an uncited or mis-cited claim moves to the source that backs it
        if backing and not self._on_topic(backing):
            return Sentence(text, backing, False, kind="off_question")
        if backing and self._wants_number and not self._states_number(text) and not self._answers_other_part(text):
            # on the topic, not the number asked
            return self._quote(backing) or self._not_stated(backing)   # its sentence that states one, if any
        if backing and self._wants_name and not self._gives_name(text):   # 'evaluated on real-world datasets'
            return self._quote(backing) or self._not_stated(backing)   # its sentence that names them, if any
        if backing and self._link_only and not points_to_link(text):   # 'provides code, to be found in …'
            return self._quote(backing) or Sentence(text, backing, False, kind="off_question")   # where, if it says
        if len(backing) > 1:
            return Sentence(in_third_person(self._restored(text, backing)), backing, True)
        if backing and self._off_its_rare_words(text, backing[0]):
            return self._rare_word_quote(backing[0]) or Sentence(text, backing, False, kind="off_question")
        if backing:
            label = self.sources[backing[0]].hit.paper.label
            told = name_the_paper(self._restored(text, backing), label, first=not self._has_shown(backing[0]))
            return self._whole_sentence_of(text, backing[0]) or Sentence(in_third_person(told), backing, True)
        owners = [n for n in cited if self._names_belong(names, [n], labels)]
        if owners and not self._on_topic(owners):   # unsupported, and about a paper that does not answer
            return Sentence(text, owners, False, kind="off_question")
        return self._quote(owners, claim=text) or Sentence(text, cited, False)

    def _answers_other_part(self, text: str) -> bool:
        """For a question that asks for a number and for something else, does a claim that gives no number answer
        the rest ("What does TikZilla do, and how many GPUs …?"): any such claim, or one that names, for a name?
        A claim with a number of something else is not taken for the other half."""
        if self._other_part is None or quantities(text):
            return False
        return self._other_part == "plain" or self._gives_name(text)

    def add_unstated_number(self) -> Sentence | None:
        """For a question that asks for a number and more, answered without the number: the sentence saying
        that the answered paper's abstract does not state it ("… does not state the number of GPUs.")."""
        answering = self._answering()
        if self._other_part is None or not answering or not answering[0].citations \
                or any(s.kind == "not_stated" for s in self.sentences) \
                or any(self._states_number(s.text) for s in answering):
            return None
        return self._append(self._not_stated([self._source_numbers()[answering[0].citations[0]]]))

    def add_authors(self) -> list[Sentence]:
        """For a question that asks who wrote a paper ("who's behind ElasticMM?"), a sentence naming the authors
        of each paper the answer is about, from the paper's own record (claims.authors_claim: `kind: "authors"`)."""
        if not asks_for_authors(self.question):
            return []
        old = self._source_numbers()
        papers = dict.fromkeys(old[s.citations[0]] for s in self._answering() if s.citations)   # in the order told
        return [self._append(Sentence(authors_claim(paper.label, list(paper.authors)), [n], True, kind="authors"))
                for n in papers if (paper := self.sources[n].hit.paper).authors]

    def _gives_number(self, text: str) -> bool:
        """Does the sentence give the number the question asks for, one the question does not hold
        ('CogCoM has 17B parameters.' answers 'How many parameters does CogCoM have?')?"""
        return self._wants_number and bool(quantities(text) - quantities(self.question)) and self._states_number(text)

    def _gives_name(self, text: str) -> bool:
        """Does the sentence name something the question and the papers' labels do not (IM2GPS3K)?"""
        return bool(names_given(text, self._known_words))

    def _names_what_is_asked(self, text: str) -> bool:
        """Does an abstract sentence name something of the kind asked: a name, and a word for the kind
        ('which datasets' is not answered by "We introduce MCNF, a … method")?"""
        return self._gives_name(text) and (not self._named or bool(self._named & self.grounding.terms(text)))

    def _states_number(self, text: str) -> bool:
        """Does the text give a number in digits, and for 'how many X' a number of X, in digits or in words
        ('16 minutes' is not hours; 'thirty years' are years; a 'two-stage' method gives no size; the digits
        of a name such as IM2GPS3K give no value), and for 'what perplexity' one that names perplexity?"""
        if self._metric is not None and not self._metric.search(text):
            return False
        if not self._counted:
            return bool(quantities(text))
        return bool(self._counted & self.grounding.terms(" ".join(words_after_numbers(text))))

    def _not_stated(self, cited: list[int]) -> Sentence:
        what = asked_value(self.question) if self._other_part else "this"   # among other sentences, say what
        return Sentence(not_stated_claim(self.sources[cited[0]].hit.paper.label, what), cited[:1], True,
                        kind="not_stated")

    def _on_topic(self, cited: list[int]) -> bool:
        """Does the question name one of these papers' authors, or is one of them close enough to the
        question (`_relevant`) and either in a category the question names or ranked not far below the
        best paper found? A category alone does not make a paper answer "which X papers study Y"."""
        if self.ranked_sentences is None or any(self._names_author_of(n) for n in cited):
            return True
        return any(self._relevant(hit) and hit.paper.paper_id in self._near_best
                   for hit in (self.sources[n].hit for n in cited))

    def any_source_on_topic(self) -> bool:
        """Could any claim be shown as an answer? Each needs a source on the question (`_on_topic`),
        so when none is, the model need not be asked: its answer would abstain."""
        return bool(self.sources) and self._on_topic(list(self.sources))

    def _names_author_of(self, n: int) -> bool:
        """Does the question name an author of source n (not only its category)?"""
        hit = self.sources[n].hit
        return hit.named and (self._author_named is None or hit.paper.paper_id in self._author_named)

    def _relevant(self, hit: Hit) -> bool:
        """Is the paper about the question: the paper model puts the whole abstract close to it (a question
        in everyday words is far from every single sentence), or one of its sentences is close to it, which
        is enough only as close as the model's doubt asks (`sentence_floor`)?"""
        return self._relevant_by(hit) is not None

    def _relevant_by(self, hit: Hit) -> str | None:
        """What puts the paper on the question (`_relevant`): 'paper', 'sentence', 'rare_words', 'first' (the
        best paper found, when the model is sure that its sources answer: claims.MIN_FIRST_PAPER_ODDS) or None
        (always, for a question about several papers that the model much doubts they answer: MIN_SEVERAL_ODDS)."""
        if self._several and self.odds is not None and self.odds < MIN_SEVERAL_ODDS:
            return None
        if hit.paper_score is not None and hit.paper_score >= MIN_PAPER_RELEVANCE:
            return "paper"   # known score first: no embedding
        floor = self.sentence_floor() if hit.paper_score is not None else MIN_SOURCE_RELEVANCE
        if floor is None:
            return None
        if max(similarity for _, similarity in self.ranked_sentences(hit.paper)) >= floor:
            return "sentence"
        if hit.paper.paper_id in self._rare_words_held:
            return "rare_words"   # as good as a close sentence: 'grokking' is a word few papers use, 'SeRL' a name
        if hit.rank == 1 and self.odds is not None and self.odds >= MIN_FIRST_PAPER_ODDS:
            return "first"   # the model is sure that its sources answer, and this paper is the likeliest to
        return None

    def _off_its_rare_words(self, text: str, n: int) -> bool:
        """Is source n on the question only by the question's rare words, and the claim about it holds none of
        them? Asked "Which papers study grokking, and what do they find?", a claim on the average sensitivity
        of a paper that mentions grokking once answers nothing; its sentence on grokking does."""
        hit = self.sources[n].hit
        return bool(self._rare_words) and self.ranked_sentences is not None \
            and not self._names_author_of(n) and self._relevant_by(hit) == "rare_words" \
            and not self._stems(text) & self._rare_words

    def _rare_word_quote(self, n: int) -> Sentence | None:
        """Source n's best quote (claims.quote_order) among its sentences that hold a rare word of the question."""
        paper = self.sources[n].hit.paper
        holding = [text for text, _ in self.ranked_sentences(paper) if self._stems(text) & self._rare_words]
        if not holding or self._has_shown(n):
            return None
        return self._quoted(n, holding[0])

    def sentence_floor(self) -> float | None:
        """How close one sentence of a paper must be to the question to put the paper on it: closer as
        the model doubts more that its sources answer (claims.FIRM_ODDS, MIN_SURE_ODDS); None when no
        single sentence is enough."""
        if self.odds is None or self.odds >= FIRM_ODDS:
            return MIN_SOURCE_RELEVANCE
        return MIN_DOUBT_SOURCE_RELEVANCE if self.odds >= MIN_SURE_ODDS else None

    def _names_belong(self, names: set[str], cited: list[int], labels: set[str] = frozenset()) -> bool:
        """Are the author names a sentence writes all names of the papers it cites, and each label it writes
        ('Yang et al.') one of theirs (a co-author named Yang does not make Wang et al.'s paper 'Yang et al.')?"""
        if not cited:
            return not names
        return names <= set().union(*(self._names[n] for n in cited)) \
            and labels <= set().union(*(self._first_authors[n] for n in cited))

    def _quote(self, cited: list[int], claim: str = "") -> Sentence | None:
        """The first cited source's best quote (claims.quote_order; not a sentence that points to code
        unless asked), when the paper is on the question; for a question that asks only where the code is,
        its sentence that says where, or else (asked about one paper) that the abstract does not state it;
        for a question that asks for a number, its best sentence that states every value of the unsupported
        `claim` it stands in for ("tested with 5 families of 10 models" of "… evaluated with 5 families of
        10 models …"), or else its best sentence that states one and is as close as MIN_SOURCE_RELEVANCE;
        without either, that the abstract does not state it."""
        if not cited or self.ranked_sentences is None or not self._on_topic(cited[:1]):
            return None
        if self._asked_methods and not self._asked_methods & self._names[cited[0]]:
            return None   # the question names a method this paper does not mention
        if self._has_shown(cited[0]):
            return None   # the paper already has a checked sentence: quoting it again adds nothing
        paper = self.sources[cited[0]].hit.paper
        ranked = [(text, similarity) for text, similarity in self.ranked_sentences(paper)
                  if self._wants_link or not points_to_link(text)]
        if not ranked:
            return None
        if self._link_only:   # where the code is: a sentence that says so, or that the abstract does not
            links = [text for text, _ in ranked if points_to_link(text)]
            if links:
                return self._quoted(cited[0], links[0])
            return None if self._several else self._not_stated(cited)   # a list names the papers that say where
        if self._wants_number or self._wants_name:
            gives = self._states_number if self._wants_number else self._names_what_is_asked
            values = quantities(claim) if self._wants_number else set()
            backing = [(text, similarity) for text, similarity in ranked
                       if values and values <= stated_numbers(text) and gives(text)]
            ranked = backing or [(text, similarity) for text, similarity in ranked
                                 if similarity >= MIN_SOURCE_RELEVANCE and gives(text)]
            if not ranked:
                return self._not_stated(cited)   # the paper is on the question, the number or name asked is not in it
        return self._quoted(cited[0], ranked[0][0])

    def _quoted(self, n: int, sentence: str) -> Sentence:
        """Source n's abstract sentence as an answer: 'Label: "sentence"' (claims.quoted_claim)."""
        return Sentence(quoted_claim(self.sources[n].hit.paper.label, sentence), [n], True, kind="quote",
                        quote=sentence)

    def _answering(self) -> list[Sentence]:
        """The checked sentences that answer (a claim or a quote its paper backs; not what is not stated)."""
        return [s for s in self.sentences if s.supported and s.kind != "not_stated"]

    def _has_shown(self, n: int) -> bool:
        """Does an answering sentence about source n come before (a checked claim or quote)?"""
        return any(self._renumbered.get(n) in s.citations for s in self._answering())

    def _source_numbers(self) -> dict[int, int]:
        """Shown citation number -> the (old) number of its source."""
        return {new: n for n, new in self._renumbered.items()}

    def _whole_sentence_of(self, text: str, n: int) -> Sentence | None:
        """A claim that is the tail of one of source n's sentences, as that whole sentence quoted (claims.whole_sentence)."""
        if self.ranked_sentences is None:
            return None
        paper = self.sources[n].hit.paper
        sentence = whole_sentence(text, [s for s, _ in self.ranked_sentences(paper)], paper.label)
        return None if sentence is None else self._quoted(n, sentence)

    def _restored(self, text: str, backing: list[int]) -> str:
        """A checked claim as its backing sources say it: finished where the reply's length limit cut it
        (`_finished`), and each number it copied without its bound given with that bound (claims.with_bounds)."""
        text = self._finished(text, backing)
        for n in backing:
            text = with_bounds(text, self.sources[n].hit.paper.text)
        return text

    def _finished(self, text: str, backing: list[int]) -> str:
        """A claim the reply's length limit cut, finished from the backing source's sentence it was copying
        (claims.finished_claim); any other claim as written."""
        if self.ranked_sentences is None:
            return text
        for n in backing:
            sentences = [s for s, _ in self.ranked_sentences(self.sources[n].hit.paper)]
            if (finished := finished_claim(text, sentences)) is not None:
                return finished
        return text

    def _close_enough_to_quote(self, n: int) -> bool:
        """A fallback quote's paper is our choice, not the model's: it must be close to the question as
        a whole (the paper model's score), not through one sentence that shares its words, unless the
        question names its author, or a name only a few papers use, this one among them, and the model is sure
        that its sources answer ("who's behind ElasticMM?")."""
        score = self.sources[n].hit.paper_score
        return score is None or score >= MIN_QUOTE_PAPER_SCORE or self._names_author_of(n) \
            or (self.sources[n].hit.paper.paper_id in self._names_held and self.odds is not None
                and self.odds >= FIRM_ODDS)

    def _renumber(self, n: int) -> int:
        return self._renumbered.setdefault(n, len(self._renumbered) + 1)

    def keep_citations_of(self, sentences: list[Sentence]) -> None:
        """Renumber so that only these sentences' citations remain, 1, 2, … in order of appearance."""
        old = self._source_numbers()
        self._renumbered = {}
        for sentence in sentences:
            sentence.citations = [self._renumber(old[n]) for n in sentence.citations]

    def citations(self) -> list[Citation]:
        return [Citation(new, self.sources[old].hit.paper, self.sources[old].hit.score)
                for old, new in sorted(self._renumbered.items(), key=lambda item: item[1])]


_INLINE = re.compile(r"\s*\[(\d+(?:\s*[,;]\s*\d+)*)\]")


def split_inline_citations(text: str) -> tuple[str, list[int]]:
    """'GFPO cuts length [1][2].' -> ('GFPO cuts length.', [1, 2])."""
    found = [int(n) for group in _INLINE.findall(text) for n in re.split(r"[,;]", group)]
    clean = _INLINE.sub("", text).strip()
    return re.sub(r"\s+([.,;:])", r"\1", clean), found


class ReplyParser:
    """Turns the streamed reply into sentence text as it arrives and whole sentences as they close.

    Expects the JSON of answer_schema (items: source, then claim); the shape of sentences that
    list their sources after the text is read too. A reply that is not JSON is read as plain
    text with [n] markers once it is complete.
    """

    _ITEM = re.compile(r'\{\s*"source"\s*:\s*(-?\d+)\s*,\s*"claim"\s*:\s*"((?:[^"\\]|\\.)*)("?)')
    _SENTENCE = re.compile(r'\{\s*"text"\s*:\s*"((?:[^"\\]|\\.)*)("?)(?:\s*,\s*"sources"\s*:\s*\[([^\]]*)(\]?))?')
    _REFUSAL = re.compile(r'"answerable"\s*:\s*false')

    def __init__(self):
        self.buffer = ""
        self.refused = False
        self._shown: list[int] = []      # characters of each sentence's text already emitted
        self._closed = 0                 # sentences already emitted whole

    def feed(self, delta: str) -> list[tuple]:
        """Events for this delta: ('text', new characters) and ('sentence', text, [source numbers])."""
        self.buffer += delta
        if not self.buffer.lstrip().startswith("{"):
            return []
        self.refused = self.refused or bool(self._REFUSAL.search(self.buffer))
        events = []
        for index, (raw, closed_text, sources, closed_sources) in enumerate(self._claims()):
            text = _decode_partial(raw)
            visible = trim_cut_text(text) if closed_text else text[:_last_sentence_end(text)]
            if index == len(self._shown):
                self._shown.append(0)
            if len(visible) > self._shown[index]:
                events.append(("text", visible[self._shown[index]:]))
                self._shown[index] = len(visible)
            text = visible
            if closed_sources and index == self._closed:
                events.append(("sentence", text, _integers(sources)))
                self._closed += 1
        return events

    def _claims(self) -> list[tuple[str, str, str, bool]]:
        """(raw text, closing quote or '', source numbers, whether the claim is complete) of each claim so far."""
        items = [(m[2], m[3], m[1], bool(m[3])) for m in self._ITEM.finditer(self.buffer)]
        if items:
            return items
        return [(m[1], m[2], m[3] or "", bool(m[4])) for m in self._SENTENCE.finditer(self.buffer)]

    def finish(self) -> list[tuple[str, list[int]]]:
        """Sentences left once the stream ends: an unclosed JSON one, or a plain-text reply."""
        if self.buffer.lstrip().startswith("{"):
            return [(trim_cut_text(_decode_partial(raw)), _integers(sources))
                    for raw, closed_text, sources, _ in self._claims()[self._closed:] if closed_text]
        return split_plain_reply(self.buffer)


# Where split_plain_reply breaks a plain-text reply: the space after . ! ? and the [n] markers that
# follow it (kept with the sentence before), whatever comes next, since a model's sentence may start
# in lower case; unlike corpus.split_sentences, which splits abstracts.
_PLAIN_REPLY_BREAK = re.compile(r"(?<=[.!?。！？])((?:\s*\[\d+(?:\s*[,;]\s*\d+)*\])*)\s+")


def split_plain_reply(text: str) -> list[tuple[str, list[int]]]:
    """Plain text with [n] markers -> (sentence, cited numbers) pairs."""
    text = re.sub(r"(\s*\[\d+\]){4,}", lambda m: "".join(dict.fromkeys(re.findall(r"\[\d+\]", m[0]))), text)
    pieces = _PLAIN_REPLY_BREAK.split(text.strip() + " ")
    sentences = []
    for i in range(0, len(pieces) - 1, 2):
        sentence, trailing = pieces[i], pieces[i + 1] or ""
        body, cited = split_inline_citations(sentence + trailing)
        if body:
            sentences.append((body, cited))
    if len(pieces) % 2 == 1 and pieces[-1].strip():
        body, cited = split_inline_citations(pieces[-1])
        if body:
            sentences.append((body, cited))
    return sentences


# The end of a finished sentence inside a model's claim as it streams (not corpus.split_sentences,
# which splits abstracts and needs the next sentence's first letter): . ! ? before a space or the
# end of what has arrived, not after "et al.", "e.g.", "i.e.", "vs.", "Fig." or "cf.".
_FINISHED = re.compile(r"[.!?。！？][\"'”’)\]]*\s*$")   # a text that ends a sentence
_CLAIM_SENTENCE_END = re.compile(r"(?<! al)(?<!e\.g)(?<!i\.e)(?<! vs)(?<!Fig)(?<! cf)[.!?。！？](?=\s|$)")


def _last_sentence_end(text: str) -> int:
    """Length of the text up to its last finished sentence (0 if none has finished yet)."""
    ends = [m.end() for m in _CLAIM_SENTENCE_END.finditer(text)]
    return ends[-1] if ends else 0


def trim_cut_text(text: str) -> str:
    """A sentence text the schema cut at MAX_SENTENCE_CHARS loses its unfinished last sentence; a single
    sentence that was cut loses its last word too, which may be cut short or glued to the word before
    it (at the limit, the grammar allows " plane" only as "plane": "coloring theplane"). Near the limit
    a token that would not fit is not allowed, so the model may close the text a few characters early,
    unfinished: a text within CUT_SLACK of the limit that does not end a sentence was cut too."""
    if len(text) < MAX_SENTENCE_CHARS - CUT_SLACK or (len(text) < MAX_SENTENCE_CHARS and _FINISHED.search(text)):
        return text
    if end := _last_sentence_end(text):
        return text[:end]
    words = text.split()
    return " ".join(words[:-1] if len(words) > 1 else words).rstrip(",;:") + "…"


def _decode_partial(raw: str) -> str:
    """Decode a JSON string body that may end mid-escape."""
    raw = re.sub(r"\\(u[0-9a-fA-F]{0,3})?$", "", raw)
    try:
        return json.loads(f'"{raw}"')
    except json.JSONDecodeError:
        return raw.replace('\\"', '"').replace("\\n", " ")


def _integers(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"-?\d+", text or "")]


def count_tokens(text: str) -> int:
    """Tokens of settings.token_encoding(), the unit chunks are cut in (the budget's unit)."""
    return len(token_encoding().encode(text))
