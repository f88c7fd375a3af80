"""The OpenAI-compatible path against a real llama.cpp server on loopback, and a backend that is down."""

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from servers import free_port, slow_chat_server

from rag import doctor
from rag.answer import Answerer
from rag.cli import main
from rag.errors import BackendError, UsageError
from rag.llm import local_model_file, open_model
from rag.retrieve import Retriever
from rag.settings import Settings, available_cores


@pytest.fixture(scope="module")
def llama_server():
    """`python -m llama_cpp.server` serving the bundled model on a free loopback port."""
    port = free_port()
    model = local_model_file(Settings().cache_dir)
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(model),
                             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096",
                             "--n_threads", str(available_cores()), "--model_alias", "bundled-qwen",
                             "--verbose", "False"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while True:
        assert proc.poll() is None, "llama_cpp.server exited"
        try:
            with urllib.request.urlopen(f"{base}/models", timeout=2) as response:
                if json.load(response)["data"]:
                    break
        except OSError:
            assert time.monotonic() < deadline, "llama_cpp.server did not start within 180 s"
            time.sleep(0.5)
    yield base
    proc.terminate()
    proc.wait(timeout=30)


@pytest.mark.real_model
def test_openai_like_backend_streams_a_cited_answer(real_settings, llama_server):
    settings = real_settings.with_overrides(backend="openai-like", base_url=llama_server, model="bundled-qwen",
                                            timeout_s=300.0)
    model, deltas, streamed = open_model(settings), [], []
    http_stream = model.stream
    model.stream = lambda *args: (deltas.append(d) or d for d in http_stream(*args))
    with Retriever(settings) as retriever:
        answer = Answerer(settings, retriever, model).ask("what methods reduce reasoning length?",
                                                          on_text=streamed.append)
    assert answer.backend == "openai-like" and answer.model == "bundled-qwen"
    assert not answer.abstained, answer.to_json()
    assert "Vaishnavi Shrivastava" in [c.paper.authors[0] for c in answer.citations]
    assert len(deltas) > 3  # arrived in pieces, over HTTP streaming
    drafted = [d["text"] for d in answer.draft]   # the claims as the model wrote them, before any check
    assert drafted and all(text in "".join(streamed) for text in drafted)   # streamed a finished claim at a time


def test_a_backend_that_is_down_fails_fast_and_still_shows_the_papers(real_index_home, monkeypatch, capsys):
    monkeypatch.setenv("RAG_HOME", str(real_index_home))
    started = time.monotonic()
    code = main(["ask", "--backend", "openai-like", "--base-url", f"http://127.0.0.1:{free_port()}/v1",
                 "--model", "anything", "--timeout", "3", "what methods reduce reasoning length?"])
    out, err = capsys.readouterr()
    assert code == 1 and time.monotonic() - started < 60
    assert "Retrieved papers" in out and "Shrivastava et al." in out
    assert err.count("\n") == 1 and "cannot connect" in err and "is the server running?" in err


def test_a_backend_that_is_down_in_json_mode_reports_the_sources(real_index_home, monkeypatch, capsys):
    monkeypatch.setenv("RAG_HOME", str(real_index_home))
    code = main(["ask", "--json", "--backend", "openai-like", "--base-url", f"http://127.0.0.1:{free_port()}/v1",
                 "--model", "anything", "--timeout", "3", "what methods reduce reasoning length?"])
    row = json.loads(capsys.readouterr().out)
    assert code == 1 and "cannot connect" in row["error"] and row["sources"][0]["label"] == "Shrivastava et al."


def test_openai_backend_needs_a_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(UsageError, match="OPENAI_API_KEY"):
        open_model(Settings(backend="openai", model="gpt-4o-mini"))



PASSWORD = "pw-5c1d93"   # a password in RAG_BASE_URL; never printed or saved


def test_a_backend_error_never_shows_the_password_in_its_url():
    settings = Settings(backend="openai-like", model="m", timeout_s=2, max_retries=0,
                        base_url=f"http://user:{PASSWORD}@127.0.0.1:{free_port()}/v1")
    with pytest.raises(BackendError) as failed:
        "".join(open_model(settings).stream([{"role": "user", "content": "hi"}], None, 1))
    message = str(failed.value)
    assert "the openai-like backend at http://***@127.0.0.1:" in message and "cannot connect" in message
    assert PASSWORD not in message


def test_doctor_shows_the_backend_without_the_password_in_its_url():
    with slow_chat_server("OK", interval_s=0.01) as server:
        base_url = server.base_url.replace("http://", f"http://user:{PASSWORD}@")
        check = doctor.check_backend(Settings(backend="openai-like", model="m", base_url=base_url), [])
    shown = json.dumps(check.to_json())
    assert check.ok and server.base_url.replace("http://", "http://***@") in check.detail
    assert PASSWORD not in shown


def test_a_remote_failure_is_described_by_its_error_type():
    import httpx
    import openai

    from rag.llm import _describe

    request = httpx.Request("POST", "http://127.0.0.1:1/v1/chat/completions")
    assert "raise --timeout" in _describe(openai.APITimeoutError(request))
    assert "is the server running?" in _describe(openai.APIConnectionError(request=request))

    class TimeoutOrConnectionNamed(Exception):
        """Not the client's: its name alone no longer makes it a timeout or a failed connection."""

    assert _describe(TimeoutOrConnectionNamed("bad schema")) == "TimeoutOrConnectionNamed: bad schema"


def test_a_backend_error_carries_its_own_sources():
    failed = BackendError("the backend is down")
    failed.sources.append("a hit of an earlier question")
    assert BackendError("down again").sources == []   # no list shared through the class
    assert BackendError("down", ["hit"]).sources == ["hit"]
