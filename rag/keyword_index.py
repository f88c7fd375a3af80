"""Keyword (BM25) scores of papers for a question, with bm25s (the library under llama-index's BM25
retriever, used directly: a search then imports no llama-index, ~0.7 s of a new process's start).

Covers what the embedding model misses: rare technical terms such as 'grokking', author
names and category words. Scores whole papers (cleaned abstract text, authors and
category, accent-folded, English stemming and stopwords), and gives each question its
ceiling: the score a paper would get that matched every question word as well as the
best-matching paper does, a scale that does not depend on which paper wins. The words a
question uses to ask for papers rather than to say what about ("Which papers study …, and what
do they find?": `ASKING_WORDS`) are not searched: an abstract that happens to say "study" and
"find" often is not closer to the topic. It neither
embeds nor fuses: retrieve.py combines these scores with dense ones. Building the index takes seconds at
tens of thousands of papers, so it can be kept on disk and reused while the papers are
the same.
"""

import hashlib
import json
import logging
import os
import re
import shutil
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from rag.corpus import Paper, fold
from rag.spelling import english

KEYWORD_FORMAT = 3   # bump when searchable_text, the tokenisation or the saved files change
ASKING_WORDS = re.compile(r"\b(?:papers?|stud(?:y|ies|ied)|find(?:s|ings)?|found|articles?|publications?)\b",
                          re.IGNORECASE)   # chosen on the eval's tune parts (eval/README.md)
REQUEST = re.compile(   # a question that opens by saying what to do with the papers: "Compare the grokking papers"
    r"^\W*(?:(?:please|can you|could you)\s+)?(?:compare|summari[sz]e|explain|describe|recommend|suggest|list|"
    r"(?:tell|show|give)(?:\s+(?:me|us))?(?:\s+(?:an?|some))?(?:\s+(?:summary|overview|comparison)\s+of)?"
    r"(?:\s+about)?)\b", re.IGNORECASE)
STOPWORDS = "en"   # bm25s's English list, left out of the papers' words
QUESTION_STOPWORDS = "en_plus"   # its longer list: 'do', 'how', 'my' are rare in abstracts, not rare words of a topic
TOKEN_PATTERN = r"(?u)\b\w\w+\b"   # words of two or more letters or digits
MIN_NAME_LENGTH = 3   # a shorter word is no name of a paper's own ('3D', 'RL')
_COMPLETE = "complete"
_PAPER_IDS = "paper_ids.json"   # the paper of each row of the saved index
_WORDS = "words.json"   # how many papers use each word, as written (lower case), for rag.spelling


class KeywordIndex:
    """A BM25 index over the given papers, built in memory or read from `folder`."""

    def __init__(self, papers: list[Paper], folder: Path | None = None):
        logging.getLogger("bm25s").setLevel(logging.ERROR)
        self._bm25 = None
        self._ids: list[str] = []
        self._papers_per_word: dict[str, int] = {}
        self._papers = {p.paper_id: p for p in papers}
        self._term_best = None
        if not papers:
            return
        import Stemmer

        self._stemmer = Stemmer.Stemmer("english")
        saved = Path(folder) / papers_key(papers) if folder is not None else None
        if saved is not None and (saved / _COMPLETE).is_file():
            try:
                self._bm25, self._ids, self._papers_per_word = _load(saved)
                return
            except (OSError, ValueError, KeyError):
                pass   # unreadable: build it again below
        self._bm25, self._ids, self._papers_per_word = _build(papers, self._stemmer)
        if saved is not None:
            _save(self._bm25, self._ids, self._papers_per_word, saved)

    def scores(self, question: str, top_n: int) -> dict[str, float]:
        """paper_id -> BM25 score for the best `top_n` papers with a score above zero, best first."""
        ids = self._word_ids(question)
        if not ids:
            return {}
        import numpy

        scores = self._bm25.get_scores_from_ids(ids)
        top_n = min(top_n, len(scores))
        best = numpy.argpartition(-scores, top_n - 1)[:top_n]
        best = best[numpy.argsort(-scores[best], kind="stable")]
        return {self._ids[i]: float(scores[i]) for i in best if scores[i] > 0}

    def ceiling(self, question: str) -> float:
        """The sum, over the question's indexed words, of the best BM25 score one paper has for that word."""
        return float(sum(self._best_per_term()[i] for i in self._word_ids(question)))

    def holding_rare_words(self, question: str, max_share: float) -> set[str]:
        """The papers that hold every one of the question's rare words: searched words (stemmed, not in
        QUESTION_STOPWORDS) that at most `max_share` of the papers use. A word no paper uses is the
        rarest of all, so no paper holds them all ("car traffic in cities": not the paper that says
        "city"). Empty when the question has no rare word."""
        if self._bm25 is None:
            return set()
        rare = [self._holders(word) for word in self.rare_words(question, max_share)]
        return {self._ids[i] for i in set.intersection(*rare)} if rare else set()

    def rare_words(self, question: str, max_share: float) -> set[str]:
        """The question's rare words (`holding_rare_words`), stemmed: a word no paper uses among them."""
        if self._bm25 is None:
            return set()
        return {word for word in set(self._words(question, QUESTION_STOPWORDS))
                if len(self._holders(word)) <= max_share * len(self._ids)}

    def stems(self, text: str) -> set[str]:
        """A text's words as `rare_words` reads them: stemmed, without the longer stopword list."""
        return set(self._words(text, QUESTION_STOPWORDS)) if self._bm25 is not None else set()

    def holding_names(self, names: Iterable[str], max_share: float) -> set[str]:
        """The papers that use a word of one of these names (as a question writes them: claims.names_given),
        in any case: a word of MIN_NAME_LENGTH or more letters that is no English word (pyspellchecker's
        list: 'SeRL', 'ODESteer', 'NetHack', 'rStar' of 'rStar-Math'; not 'Transformers' or 'Arena-Hard')
        and that at least one and at most `max_share` of the papers use. Such a word says which paper is
        meant however little else the question shares with it ("who's behind ElasticMM?"). Empty when there
        is none."""
        if self._bm25 is None:
            return set()
        words = {word for name in names for word in re.findall(TOKEN_PATTERN, fold(name).lower())
                 if len(word) >= MIN_NAME_LENGTH and not word.isdigit() and word not in english()}
        held = set()
        for word in words:
            if self.papers_using(word) <= max_share * len(self._ids):   # counted as written: no text read
                held |= self._users(word)
        return {self._ids[i] for i in held}

    def _users(self, word: str) -> set[int]:
        """The rows of the papers that use a word as written (any case, accents optional): of the papers that
        use its stem, those that write it ('AIME' is two papers' benchmark; its stem 'aim' is in a dozen)."""
        if not self.papers_using(word):
            return set()
        written = re.compile(rf"\b{re.escape(fold(word).lower())}\b")
        return {row for row in set().union(*(self._holders(stem) for stem in self._words(word, STOPWORDS)))
                if written.search(searchable_text(self._papers[self._ids[row]]).lower())}

    def _holders(self, word: str) -> set[int]:
        """The rows of the papers that use a stemmed word (BM25's word-by-paper matrix: the papers that use
        word i are indices[indptr[i]:indptr[i + 1]])."""
        i = self._bm25.vocab_dict.get(word)
        if i is None:
            return set()
        starts = self._bm25.scores["indptr"]
        return set(self._bm25.scores["indices"][starts[i]:starts[i + 1]].tolist())

    def papers_using(self, word: str) -> int:
        """How many papers use the word as written (any case, accents optional), in text, authors or category."""
        return self._papers_per_word.get(fold(word).lower(), 0)

    def _word_ids(self, question: str) -> list[int]:
        """The index's ids of the question's searched words, stemmed (words the papers never use are left out)."""
        if self._bm25 is None:
            return []
        return self._bm25.get_tokens_ids(self._words(question, STOPWORDS))

    def _words(self, question: str, stopwords: str) -> list[str]:
        """The question's searched words, stemmed, without `stopwords` (a bm25s list name)."""
        import bm25s

        return bm25s.tokenize(searched_words(question), stemmer=self._stemmer, return_ids=False,
                              token_pattern=TOKEN_PATTERN, stopwords=stopwords, show_progress=False)[0]

    def _best_per_term(self):
        """Per vocabulary id, the highest score any paper has for that word (BM25's word-by-paper matrix)."""
        if self._term_best is None:
            import numpy

            matrix = self._bm25.scores
            starts, data = matrix["indptr"], matrix["data"]
            self._term_best = numpy.array([data[a:b].max() if b > a else 0.0
                                           for a, b in zip(starts[:-1], starts[1:])])
        return self._term_best


def searched_words(question: str) -> str:
    """The question as BM25 searches it: accent-folded, without the words that ask for papers (ASKING_WORDS)
    and without an opening request (REQUEST: 'compare', 'summarize', 'tell me about', which say what to do
    with the papers, not what they are about; a word such as 'compare' is as rare in abstracts as 'grokking')."""
    return ASKING_WORDS.sub(" ", REQUEST.sub(" ", fold(question)))


def searchable_text(paper: Paper) -> str:
    """What BM25 indexes of a paper: title (when it has one), abstract, authors and category, accent-folded."""
    return fold("\n".join(([paper.title] if paper.title else []) +
                          [paper.text, ", ".join(paper.authors), paper.category or ""]))


def papers_key(papers: list[Paper]) -> str:
    """Names the saved index of exactly these papers (their ids cover text and authors; the category and
    title too, a title only when there is one)."""
    digest = hashlib.sha256(f"keyword-format-{KEYWORD_FORMAT}".encode())
    for paper_id, category, title in sorted((p.paper_id, p.category or "", p.title or "") for p in papers):
        digest.update((f"\n{paper_id}\t{category}" + (f"\t{title}" if title else "")).encode())
    return digest.hexdigest()[:16]


def _build(papers: list[Paper], stemmer):
    """The BM25 index of the papers' searchable text, the paper id of each of its rows, and how many papers
    use each word as written."""
    import bm25s

    texts = [searchable_text(p) for p in papers]
    tokens = bm25s.tokenize(texts, stopwords=STOPWORDS, stemmer=stemmer, token_pattern=TOKEN_PATTERN,
                            show_progress=False)
    bm25 = bm25s.BM25()
    bm25.index(tokens, show_progress=False)
    words = Counter(word for text in texts for word in set(re.findall(TOKEN_PATTERN, text.lower())))
    return bm25, [p.paper_id for p in papers], dict(words)


def _load(folder: Path):
    import bm25s

    ids = json.loads((folder / _PAPER_IDS).read_text(encoding="utf-8"))
    words = json.loads((folder / _WORDS).read_text(encoding="utf-8"))
    bm25 = bm25s.BM25.load(str(folder))
    if len(ids) != int(bm25.scores["num_docs"]):
        raise ValueError(f"{folder}: {len(ids)} paper ids for {bm25.scores['num_docs']} rows")
    return bm25, ids, words


def _save(bm25, ids: list[str], words: dict[str, int], target: Path) -> None:
    """Write the index next to its final place, then move it there; older saved indexes are removed."""
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    try:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        bm25.save(str(partial))
        (partial / _PAPER_IDS).write_text(json.dumps(ids), encoding="utf-8")
        (partial / _WORDS).write_text(json.dumps(words, ensure_ascii=False), encoding="utf-8")
        (partial / _COMPLETE).touch()
        for old in target.parent.iterdir():
            if old != partial:
                shutil.rmtree(old, ignore_errors=True)
        partial.rename(target)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)   # keeping it is only a speed-up
