"""Typing slips in a question, fixed before it is searched: "reinforcment learnng" -> "reinforcement learning".

A misspelt word matches no paper by keyword and pulls its embedding off the topic, so a question
with two slips can miss a paper it names plainly. A word is fixed only when neither the papers (the
words of the keyword index: text, authors, categories, titles) nor an English word list
(pyspellchecker's) knows it, it is at least MIN_LENGTH letters long, written in lower case (or
capitalised only as a sentence starts) and not part of a contraction or possessive, and one edit (a
letter left out, added, changed, or two swapped) turns it into a word of the papers, the one most
papers use ('resoning' -> 'reasoning', 'behaviour' -> 'behavior'). Only the papers' words are
targets: a word they do not use cannot help the search, and English has a near neighbour for every
rare term ('lidar' -> 'liar', 'backprop' -> 'backdrop'). Anything else is left as typed: names,
acronyms, and questions in another language (rag.translate.question_language).
"""

import functools
import importlib
import re
import threading

from rag.translate import question_language

MIN_LENGTH = 5   # shorter words have too many neighbours one edit away to guess from
MAX_UNKNOWN_SHARE = 0.5   # a question more than half of whose words are unknown is not English: left alone
_WORD = re.compile(r"(?<![\w'’])[^\W\d_]+(?![\w'’])")   # not "shouldn't", "autoencoder's" or "GPT4o"
_FIXABLE = re.compile(r"[A-Z]?[a-z]+")   # 'reinforcment', 'Reinforcment'; not 'GRPO', 'McMahan' or 'Daumé'


def english():
    """pyspellchecker's English word list (`word in english()`), loaded once (~0.3-0.5 s on 2 cores): when
    first needed, or ahead of the first question by english_builder's function on a thread of its own; a
    caller who needs it while that thread loads it waits for that load."""
    with _LOADING:
        return _english()


_LOADING = threading.Lock()


def english_builder():
    """english in two steps, as embedding.search_model_builder: pyspellchecker is imported now, on the
    caller's thread; the function returned loads the word list (on a thread of the caller's choosing)."""
    importlib.import_module("spellchecker")
    return english


@functools.cache
def _english():
    from spellchecker import SpellChecker

    return SpellChecker(language="en", distance=1)


class SpellingFixer:
    """Fixes one-edit slips in questions against the words of the papers (a KeywordIndex) and of English."""

    def __init__(self, keywords):
        self._keywords = keywords

    def fix(self, question: str) -> str:
        """The question with each slip fixed; the question itself when it has none."""
        words = _WORD.findall(question)
        unknown = [w for w in words if not self._known(w)]
        if not unknown or len(unknown) > MAX_UNKNOWN_SHARE * len(words) or question_language(question) is not None:
            return question
        unknown = set(unknown)
        return _WORD.sub(lambda m: self._fixed(m.group()) if m.group() in unknown else m.group(), question)

    def _known(self, word: str) -> bool:
        return self._keywords.papers_using(word) > 0 or word.lower() in english()

    def _fixed(self, word: str) -> str:
        """An unknown word, or the word of the papers one edit from it that most papers use."""
        if len(word) < MIN_LENGTH or not _FIXABLE.fullmatch(word):
            return word
        best = max(((used, w) for w in english().edit_distance_1(word.lower())
                    if w.isascii() and w.isalpha() and (used := self._keywords.papers_using(w))), default=None)
        if best is None:
            return word
        return best[1].capitalize() if word[0].isupper() else best[1]
