"""Question -> Answer: retrieve, choose what the model reads, generate, check every claim, conclude.

The model is never trusted. Its reply (reply.py) is read claim by claim as it streams, and each claim
is checked as it closes (citation_check.py) against the sources it was given. The answer abstains with
CANNOT_ANSWER when retrieval is too weak (a score gate that spares papers the question names, or no
paper given is on the question, so no claim could be shown: the model is not asked), when the model
doubts that its sources answer (its odds for `"answerable": true`, read from the local model before it
writes: claims.MIN_SURE_ODDS) and no paper is close to the question as a whole (it is not asked to
write), when the model refuses, or when no checked claim answers the question.
Sources reach the prompt through prompt_safety.py: whatever reads as a tag is defused, and sentences
that address the model are left out (counted per source in the JSON as `instructions_removed`).
"""

import re
import time

from rag.answer_record import CANNOT_ANSWER, Answer, Sentence, Source
from rag.citation_check import CitationChecker
from rag.claims import about_several, asks_for_link, label_out, near_the_best, points_to_link, quote_order
from rag.corpus import Paper
from rag.embed_cache import EmbeddingCache, cache_path
from rag.embedding import embed_texts
from rag.errors import BackendError
from rag.grounding import GroundingChecker, cosine
from rag.prompt_safety import defuse, remove_instructions, screen
from rag.prompts import load_prompt
from rag.reply import NO, REPLY_START, YES, ReplyParser, answer_schema
from rag.retrieve import Filters, Hit, Retriever
from rag.settings import Settings, token_encoding
from rag.translate import Translator, question_language

_STRAIGHT_QUOTED = re.compile(r'"([^"\n]*)"')
MAX_CACHED_SENTENCES = 20_000


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
                    for sentence in checker.add(*event[1:]):
                        on_sentence(sentence)
            if parser.refused:
                break  # the model said the sources do not answer: no need to generate more
        for sentence_text, cited in parser.finish():
            for sentence in checker.add(sentence_text, cited):
                on_sentence(sentence)
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


def count_tokens(text: str) -> int:
    """Tokens of settings.token_encoding(), the unit chunks are cut in (the budget's unit)."""
    return len(token_encoding().encode(text))
