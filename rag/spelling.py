"""Typing slips in a question, fixed before it is searched: "reinforcment learnng" -> "reinforcement learning".

A misspelt word matches no paper by keyword and pulls its embedding off the topic, so a question
with two slips can miss a paper it names plainly. A word is fixed only when neither the papers
(their text, authors, categories and titles) nor an English word list (pyspellchecker's) knows
it, it is at least MIN_LENGTH letters long, written in lower case (or capitalised only as a
sentence starts) and not part of a contraction or possessive, and one edit (a letter left out,
added, changed, or two swapped) turns it into a word of the papers, the most frequent one there
('behaviour' -> 'behavior', 'resoning' -> 'reasoning'). Only the papers' words are targets: a word they do not use
cannot help the search, and English has a near neighbour for every rare term ('lidar' -> 'liar',
'backprop' -> 'backdrop'). Anything else is left as typed: names, acronyms, and questions in another
language (rag.translate.question_language).
"""

import re
from collections import Counter

from rag.corpus import Paper, fold
from rag.translate import question_language

MIN_LENGTH = 5   # shorter words have too many neighbours one edit away to guess from
MAX_UNKNOWN_SHARE = 0.5   # a question more than half of whose words are unknown is not English: left alone
_WORD = re.compile(r"(?<![A-Za-z'’])[A-Za-z]+(?![A-Za-z'’])")   # not "shouldn't" or "autoencoder's"
_FIXABLE = re.compile(r"[A-Z]?[a-z]+")   # 'reinforcment', 'Reinforcment'; not 'GRPO' or 'McMahan'


class SpellingFixer:
    """Fixes one-edit slips in questions against the words of `papers` and of English."""

    def __init__(self, papers: list[Paper]):
        from spellchecker import SpellChecker

        self._english = SpellChecker(language="en", distance=1)
        self._papers = Counter(word.lower() for p in papers for word in _WORD.findall(fold(" ".join(
            [p.text, " ".join(p.authors), p.category or "", p.title or ""]))))

    def fix(self, question: str) -> str:
        """The question with each slip fixed; the question itself when it has none."""
        words = _WORD.findall(question)
        unknown = [w for w in words if not self._known(w.lower())]
        if not unknown or len(unknown) > MAX_UNKNOWN_SHARE * len(words) or question_language(question) is not None:
            return question
        return _WORD.sub(lambda m: self._fixed(m.group()), question)

    def _known(self, word: str) -> bool:
        return word in self._papers or word in self._english

    def _fixed(self, word: str) -> str:
        lower = word.lower()
        if len(word) < MIN_LENGTH or not _FIXABLE.fullmatch(word) or self._known(lower):
            return word
        best = max((w for w in self._english.edit_distance_1(lower) if w in self._papers),
                   key=lambda w: (self._papers[w], w), default=None)
        if best is None:
            return word
        return best.capitalize() if word[0].isupper() else best
