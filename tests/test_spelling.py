"""Typing slips in questions, fixed against the papers' words before searching (rag/spelling.py)."""

import threading
import time

import pytest

import rag.spelling
from conftest import DATA
from rag.background import Background
from rag.corpus import parse_file
from rag.keyword_index import KeywordIndex
from rag.retrieve import Retriever
from rag.spelling import SpellingFixer


@pytest.fixture(scope="module")
def fixer():
    return SpellingFixer(KeywordIndex([p for path in sorted(DATA.glob("*.txt")) for p in parse_file(path)]))


@pytest.mark.parametrize("typed, fixed", [
    ("reinforcment learnng to cut resoning length", "reinforcement learning to cut reasoning length"),
    ("Reinforcment learning for reasoning?", "Reinforcement learning for reasoning?"),   # keeps the capital
    ("Which papers study the behaviour of agents?", "Which papers study the behavior of agents?"),
    ("Which papers study grokkng?", "Which papers study grokking?"),   # a word of the papers, not of English
])
def test_a_slip_one_edit_from_a_word_of_the_papers_is_fixed(fixer, typed, fixed):
    assert fixer.fix(typed) == fixed


@pytest.mark.parametrize("question", [
    "Which papers use lidar or backprop?",        # one edit from English words (liar, backdrop), none of the papers'
    "Is there a chatbot that rambles less?",      # English words
    "What does GRPO do, and why shouldn't it be used?",   # an acronym; a contraction
    "What did the autoencoder's authors prove?",  # a possessive
    "Qu'ont découvert Jacob Andreas et Joshua Tenenbaum sur l'apprentissage à partir des conseils des autres ?",
    "Waht is grokking?",                          # a slip in a word shorter than five letters is not guessed at
    "What did Bergsträßer and Daumé show?",       # names with letters beyond ASCII
])
def test_words_that_are_no_slip_of_a_papers_word_stay_as_typed(fixer, question):
    assert fixer.fix(question) == question


def test_a_question_with_slips_is_searched_as_fixed(real_settings):
    with Retriever(real_settings) as retriever:
        result = retriever.search("reinforcment learnng to cut resoning length", k=3)
    assert result.query == "reinforcement learning to cut reasoning length"
    assert result.hits[0].paper.label == "Shrivastava et al." and "translate_s" not in result.timings


def test_the_english_words_are_loaded_once_when_a_question_needs_them_while_a_thread_loads_them(monkeypatch):
    """The word list loading on a thread of its own (english_builder's function, as a Retriever starts it
    while it opens): a question asked before that load ends waits for it instead of loading the list again."""
    import spellchecker

    built, release = [], threading.Event()

    def slow_word_list(language, distance):
        built.append(language)
        assert release.wait(10), "the test never let the load end"
        return object()

    monkeypatch.setattr(spellchecker, "SpellChecker", slow_word_list)
    rag.spelling._english.cache_clear()
    try:
        loading = Background("load-english-words", rag.spelling.english_builder())
        deadline = time.monotonic() + 10
        while not built:   # the thread is inside the load
            assert time.monotonic() < deadline, "the load never started"
            time.sleep(0.01)
        asked = Background("question", rag.spelling.english)
        time.sleep(0.1)
        release.set()
        assert asked.result() is loading.result() and built == ["en"]
    finally:
        rag.spelling._english.cache_clear()
