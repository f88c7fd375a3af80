"""rag.background: work on a thread of its own, its result or error collected later."""

import threading

import pytest

from rag.background import Background
from rag.retrieve import Retriever


def test_the_work_runs_before_its_result_is_asked_for():
    started = threading.Event()
    work = Background("test-work", lambda n: started.set() or n * 2, 21)
    assert started.wait(timeout=10)   # running already, though nobody waits for it yet
    assert work.result() == 42
    assert work.result() == 42   # asked again: the same result, not the work again


def test_what_the_work_raised_is_raised_by_result():
    def fail():
        raise ValueError("no model here")

    work = Background("test-work", fail)
    with pytest.raises(ValueError, match="no model here"):
        work.result()


def test_the_thread_never_holds_the_exit():
    release = threading.Event()
    Background("test-held", release.wait)
    held = [t for t in threading.enumerate() if t.name == "test-held"]
    assert held and held[0].daemon
    release.set()


def test_the_retriever_builds_its_models_beside_opening_the_index(real_settings, monkeypatch):
    import rag.embedding

    threads = []
    build = rag.embedding._load_onnx_model

    def recorded(*args):
        threads.append(threading.current_thread().name)
        return build(*args)

    monkeypatch.setattr(rag.embedding, "_load_onnx_model", recorded)
    with Retriever(real_settings) as retriever:
        assert retriever.search("what methods reduce reasoning length?", k=1).hits
    assert sorted(threads) == ["load-embed-model", "load-paper-model"]


def test_a_model_asked_for_on_two_threads_at_once_is_built_once(real_settings):
    import rag.embedding

    build = rag.embedding.search_model_builder(real_settings, real_settings.paper_model)
    rag.embedding._built_onnx_model.cache_clear()   # nothing built yet: both threads ask at once
    both = [Background(f"build-{n}", build) for n in range(2)]
    first, second = (work.result() for work in both)
    assert first is second
