"""CitationChecker: each claim of the model's reply checked against the sources it was given.

Each citation must name a source that was given (others are dropped and listed as invalid; repeats
collapse, and at most MAX_CITATIONS_PER_SENTENCE stay), a claim is checked against the sources it cites
(grounding.py) and for the names and relevance rules of claims.py, an uncited claim gets a citation
only when that check finds a supporting source, and citations are renumbered in order of first
appearance. A claim that restates the question, or misses it, or mixes in another given paper (its terms,
or the question's description of it), gives way to its source's sentence closest to the question,
quoted; a number its source does not state becomes "the abstract does not state this".
"""

import re

from rag.answer_record import CANNOT_ANSWER, Citation, Sentence, Source
from rag.claims import (FIRM_ODDS, MIN_DOUBT_SOURCE_RELEVANCE, MIN_FIRST_PAPER_ODDS, MIN_PAPER_RELEVANCE,
                        MIN_QUOTE_PAPER_SCORE, MIN_SEVERAL_ODDS, MIN_SOURCE_RELEVANCE, MIN_SURE_ODDS,
                        ONE_PAPER_FOR_ONE_QUESTION, RARE_WORD_SHARE, about_several,
                        asked_metric, asked_value, asks_for_authors, asks_for_link, asks_for_name, asks_for_number,
                        authors_claim, contrasted_parts, counted_terms, described_paper, finished_claim,
                        in_third_person, method_names, name_the_paper, named_terms, names_given, near_the_best,
                        not_stated_claim, points_to_link, question_parts, quoted_claim, whole_sentence,
                        with_bounds, words_after_numbers, written_labels, written_names)
from rag.corpus import name_tokens, paper_names
from rag.grounding import GroundingChecker, closeness, numbers, quantities, stated_numbers
from rag.mentions import MentionIndex
from rag.reply import split_inline_citations
from rag.retrieve import Hit

MAX_CITATIONS_PER_SENTENCE = 3
MIN_BORROWED_TERMS = 2   # key terms of one given paper's that make a claim about another a mix of the two


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
        self._labels = {s.hit.paper.label for s in sources}
        self._label_terms = {t for s in sources for t in grounding.terms(s.hit.paper.label)}
        self._source_terms = {n: grounding.source_terms(s.text) for n, s in self.sources.items()}
        self._own_terms = grounding.terms(" ".join([question, *(a for s in sources for a in s.hit.paper.authors)])) \
            | self._label_terms   # terms any claim may add: the question's, the papers' labels and authors' names
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
        self._topic_words_of = {s.hit.paper.paper_id: self._rare_words & self._stems(s.hit.paper.text)
                                for s in sources} if self._several and self._rare_words else {}
        self._topic_words = set().union(*self._topic_words_of.values())   # 'grokk': rare words a paper given holds
        self._one_paper = ONE_PAPER_FOR_ONE_QUESTION and not self._several
        self.odds: float | None = None   # the model's log-odds that its sources answer; None: taken as sure
        self._answer_paper: int | None = None   # with _one_paper: the (old) number of the paper answered about
        self.invalid: list[str] = []
        self.draft: list[dict] = []          # each sentence as the model wrote it, with its source numbers
        self.sentences: list[Sentence] = []
        self._renumbered: dict[int, int] = {}
        self._seen_texts: set[str] = set()
        self._descriptions: dict[int, set[frozenset[str]]] = {}   # (old) source number -> the question's descriptions
        # of a paper that its claims opened with, as key terms (`_described_as_another`)

    def add(self, text: str, cited: list[int]) -> list[Sentence]:
        """Check one sentence of the reply; returns what it becomes, with final citation numbers: itself or
        what replaces it, one sentence per paper for a claim that contrasts papers, none for a repeat or an
        empty one."""
        self.draft.append({"text": text, "sources": list(cited)})
        text, inline = split_inline_citations(text)
        key = re.sub(r"\W+", " ", text).strip().lower()
        if not key or key in self._seen_texts:
            return []
        self._seen_texts.add(key)
        valid = []
        for n in dict.fromkeys(list(cited) + inline):   # repeats (citation loops) collapse here
            if n in self.sources:
                valid.append(n)
            else:
                self.invalid.append(f"[{n}]")
        checked = []
        for part in contrasted_parts(text, self._labels, self.question):
            sentence = self._check(part, valid[:MAX_CITATIONS_PER_SENTENCE])
            if sentence is not None and not any(s.text == sentence.text for s in self.sentences):
                checked.append(self._append(sentence))
        return checked

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
        verdicts = {n: self.grounding.check(text, s.text, s.embeddings, vector, self._source_terms[n])
                    for n, s in self.sources.items()}
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
        if len(backing) == 1 and (self._borrows_from_another(text, backing[0]) or
                                  self._described_as_another(text, backing[0])):
            return self._quote(backing) or Sentence(text, backing, False)   # its paper's own sentence, if on the question
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

    def _described_as_another(self, text: str, n: int) -> bool:
        """Does a claim backed by source n open with the question's description of a paper (claims.described_paper)
        that another given source fits better, closer in meaning to its passages ("The LLM-as-a-judge paper proposes
        a framework for agent evaluation …": AutoLibra's finding, under the other paper's description), or that
        differs from the description an earlier claim gave source n (neither's key terms hold the other's: "The
        code model watermarking paper …", then "The Min-K%++ paper …", both of one paper)?"""
        description = described_paper(text, self.question)
        terms = frozenset(self.grounding.terms(description or ""))
        if not terms:
            return False
        described = self._descriptions.setdefault(n, set())
        if any(not (terms <= other or other <= terms) for other in described):
            return True
        if len(self.sources) > 1:
            vector = self.grounding.embed(description)
            fit = {m: closeness(vector, s.embeddings) for m, s in self.sources.items()}
            if max(fit, key=fit.get) != n:
                return True
        described.add(terms)
        return False

    def _borrows_from_another(self, text: str, n: int) -> bool:
        """Does a claim backed by source n mix in another given paper: MIN_BORROWED_TERMS or more of its key terms
        that source n lacks, every one of them held by one other source ("GFPO, a framework for agent evaluation,
        reduces latency by 30%": the clause is AutoLibra's)? The terms of the question, labels and authors are
        not counted."""
        borrowed = self.grounding.terms(text) - self._source_terms[n] - self._own_terms
        return len(borrowed) >= MIN_BORROWED_TERMS and any(
            borrowed <= terms for m, terms in self._source_terms.items() if m != n)

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

    def _on_topic(self, cited: list[int], listed: bool = True) -> bool:
        """Does the question name one of these papers' authors, or is one of them close enough to the
        question (`_relevant`) and either in a category the question names or ranked not far below the
        best paper found? A category alone does not make a paper answer "which X papers study Y".
        `listed`: for a claim or quote to be shown (`_holds_topic_word` applies); else for the gate before the
        model writes, which follows the most lenient rules."""
        if self.ranked_sentences is None or any(self._names_author_of(n) for n in cited):
            return True
        return any(self._relevant(hit, listed) and hit.paper.paper_id in self._near_best
                   for hit in (self.sources[n].hit for n in cited))

    def any_source_on_topic(self) -> bool:
        """Could any claim be shown as an answer? Each needs a source on the question (`_on_topic`),
        so when none is, the model need not be asked: its answer would abstain. A paper lacking the topic words
        (`_holds_topic_word`) may still be on the question once the model is sure (MIN_FIRST_PAPER_ODDS), so
        they do not close this gate."""
        return bool(self.sources) and self._on_topic(list(self.sources), listed=False)

    def _names_author_of(self, n: int) -> bool:
        """Does the question name an author of source n (not only its category)?"""
        hit = self.sources[n].hit
        return hit.named and (self._author_named is None or hit.paper.paper_id in self._author_named)

    def _relevant(self, hit: Hit, listed: bool = True) -> bool:
        """Is the paper about the question: the paper model puts the whole abstract close to it (a question
        in everyday words is far from every single sentence), or one of its sentences is close to it, which
        is enough only as close as the model's doubt asks (`sentence_floor`)?"""
        return self._relevant_by(hit, listed) is not None

    def _relevant_by(self, hit: Hit, listed: bool = True) -> str | None:
        """What puts the paper on the question (`_relevant`): 'paper', 'sentence', 'rare_words', 'first' (the
        best paper found, when the model is sure that its sources answer: claims.MIN_FIRST_PAPER_ODDS) or None
        (always, for a question about several papers that the model much doubts they answer: MIN_SEVERAL_ODDS).
        A close sentence puts a paper on the question only if it also holds a topic word, when `listed`."""
        if self._several and self.odds is not None and self.odds < MIN_SEVERAL_ODDS:
            return None
        if hit.paper_score is not None and hit.paper_score >= MIN_PAPER_RELEVANCE:
            return "paper"   # known score first: no embedding
        floor = self.sentence_floor() if hit.paper_score is not None else MIN_SOURCE_RELEVANCE
        if floor is None:
            return None
        if max(similarity for _, similarity in self.ranked_sentences(hit.paper)) >= floor \
                and (not listed or self._holds_topic_word(hit)):
            return "sentence"
        if hit.paper.paper_id in self._rare_words_held:
            return "rare_words"   # as good as a close sentence: 'grokking' is a word few papers use, 'SeRL' a name
        if hit.rank == 1 and self.odds is not None and self.odds >= MIN_FIRST_PAPER_ODDS:
            return "first"   # the model is sure that its sources answer, and this paper is the likeliest to
        return None

    def _holds_topic_word(self, hit: Hit) -> bool:
        """For a question about several papers, when papers given hold some of its rare words ('Which papers
        study grokking?'), does this paper hold one? One close sentence does not put a paper on such a question
        without: not GFPO's sentence on accuracy and length, nor a paper on agents for "Which Deep Learning ·
        Large Language Models papers deal with multilingual or cross-lingual settings?"."""
        return not self._topic_words or bool(self._topic_words_of[hit.paper.paper_id])

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
