"""The chat UI's library side and its `ask` API: condensing follow-ups, evidence, rendering, auth, queueing.

The app runs in-process on a free loopback port with the scripted fake LLM and the real
index of data/; gradio_client calls its named endpoint like any remote user would. The
`rag ui` command itself runs as a subprocess against an unreachable or a slow fake
OpenAI-compatible backend, to check that it serves and that SIGINT and SIGTERM stop it.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from fakes import ScriptedModel, reply
from rag.answer import Sentence
from rag.conversation import Turn, condense_question, format_history, parse_condensed
from rag.errors import UsageError
from servers import free_port, slow_chat_server

EXAMPLE = "what methods reduce reasoning length?"
GFPO_SENTENCE = ("GFPO samples larger groups and trains on responses filtered by length and token efficiency.", [1])
CONDENSED = "Which methods that reduce reasoning length use reinforcement learning?"


@pytest.fixture
def fake_model(monkeypatch):
    import rag.llm

    model = ScriptedModel()
    monkeypatch.setattr(rag.llm, "open_model", lambda settings: model)
    return model


@pytest.fixture
def ui_url(real_settings, fake_model, monkeypatch):
    """The app on a free loopback port, closed afterwards."""
    from ui.app import build_app

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    app = build_app(real_settings)
    url = app.launch(port=free_port())
    yield url
    app.close()


def client(url):
    from gradio_client import Client

    return Client(url, verbose=False)


# --- condensing follow-ups ---------------------------------------------------------------------

def test_first_question_is_used_as_typed_without_asking_the_model():
    model = ScriptedModel()
    assert condense_question(model, [], "  which papers study grokking? ") == "which papers study grokking?"
    assert model.history == []


def test_follow_up_is_condensed_with_the_history():
    model = ScriptedModel({"question": CONDENSED})
    history = [Turn(EXAMPLE, "GFPO filters responses by length and token efficiency. [1]")]
    assert condense_question(model, history, "which of those use reinforcement learning?") == CONDENSED
    system, user = model.history[0]
    assert "understood on its own" in system["content"] and '{"question"' in system["content"]
    assert f"User: {EXAMPLE}" in user["content"] and "token efficiency." in user["content"]
    assert "[1]" not in user["content"]
    assert "Last question: which of those use reinforcement learning?" in user["content"]


@pytest.mark.parametrize("reply_text, expected", [
    ('{"question": "Which GFPO variants exist?"}', "Which GFPO variants exist?"),
    ('{"question": "  spaced\\n out  "}', "spaced out"),
    ("Which GFPO variants exist?", "Which GFPO variants exist?"),
    ('{"question": ""}', None),
    ('{"question": 3}', None),
    ('{"question": "unclosed', None),
    ("", None),
    ("x" * 600, None),
])
def test_parse_condensed(reply_text, expected):
    assert parse_condensed(reply_text) == expected


def test_unusable_condensed_reply_falls_back_to_the_question():
    model = ScriptedModel('{"question": ""}')
    assert condense_question(model, [Turn("a?", "b.")], "and c?") == "and c?"


def test_history_keeps_the_last_turns_and_cuts_long_answers():
    turns = [Turn(f"question {i}?", "word " * 200) for i in range(5)]
    text = format_history(turns)
    assert "question 1?" not in text and all(f"question {i}?" in text for i in (2, 3, 4))
    assert all(len(line) < 420 for line in text.splitlines()) and text.count("…") == 3


# --- evidence and rendering --------------------------------------------------------------------

def test_evidence_highlights_the_abstract_sentence_behind_a_citation(real_settings):
    from rag.answer import Answerer
    from rag.evidence import highlight_evidence
    from rag.retrieve import Retriever

    with Retriever(real_settings) as retriever:
        answerer = Answerer(real_settings, retriever, ScriptedModel(reply(GFPO_SENTENCE, ("It costs 9000 GPUs.", [1]),
                                                                          ("It runs on 512 TPUs.", [2]))))
        answer = answerer.ask(EXAMPLE)
        evidence = highlight_evidence(answer, answerer.grounding)
    assert [s.kind for s in answer.sentences] == ["claim", "claim", "quote"]
    assert not answer.sentences[1].supported   # GFPO's paper has its claim already: this one stays unsupported
    gfpo = answer.citations[0].paper
    marked = evidence[gfpo.paper_id].supporting_sentences()
    assert len(marked) == 1 and "GFPO (Group Filtered Policy Optimization)" in marked[0]   # nothing from 9000 GPUs
    quoted = answer.citations[1].paper.paper_id   # the second paper's invented claim gave way to its own sentence
    assert evidence[quoted].supporting_sentences() == [answer.sentences[2].quote]


def test_split_sentences_keeps_decimals_and_abbreviations_whole():
    from rag.evidence import split_sentences

    assert split_sentences("It cuts 85.3% of tokens, e.g. on AIME. GFPO wins. 中文句子。") == [
        "It cuts 85.3% of tokens, e.g. on AIME.", "GFPO wins.", "中文句子。"]


def test_rendered_sentence_links_citations_and_marks_unsupported_ones():
    from ui.render import render_sentence

    good = render_sentence(2, Sentence("GFPO <b>cuts</b> length.", [1, 3], True))
    assert good == ('GFPO &lt;b&gt;cuts&lt;/b&gt; length. <a class="rag-cite" href="#rag-src-2-1">[1]</a>'
                    '<a class="rag-cite" href="#rag-src-2-3">[3]</a>')
    bad = render_sentence(1, Sentence("It costs 9000 GPUs.", [2], False))
    assert 'class="rag-unsupported"' in bad and "⚠ It costs 9000 GPUs." in bad and "not supported" in bad


# --- binding and auth --------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "example.org", "::"])
def test_non_loopback_host_without_auth_is_refused(host, capsys):
    from rag.cli import main

    assert main(["ui", "--host", host]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--auth USER:PASSWORD" in err and "RAG_UI_AUTH" in err


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_loopback_needs_no_auth(host):
    from ui.app import check_bind

    assert check_bind(host, None) is None


def test_auth_from_flag_or_environment(monkeypatch):
    from ui.app import check_bind

    assert check_bind("0.0.0.0", "ada:s3cret:x") == ("ada", "s3cret:x")
    monkeypatch.setenv("RAG_UI_AUTH", "grace:hopper")
    assert check_bind("0.0.0.0", None) == ("grace", "hopper")
    for bad in ("nocolon", ":pw", "user:"):
        with pytest.raises(UsageError, match="USER:PASSWORD"):
            check_bind("127.0.0.1", bad)


def test_served_page_with_auth_refuses_anonymous_clients(real_settings, fake_model, monkeypatch):
    from gradio_client import Client

    from ui.app import build_app

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    app = build_app(real_settings)
    url = app.launch(port=free_port(), auth="ada:lovelace")
    try:
        with pytest.raises(Exception):
            Client(url, verbose=False)
        fake_model.enqueue(reply(GFPO_SENTENCE))
        answer = Client(url, auth=("ada", "lovelace"), verbose=False).predict(EXAMPLE, api_name="/ask")
        assert answer["citations"][0]["label"] == "Shrivastava et al."
    finally:
        app.close()


# --- the ask API endpoint ----------------------------------------------------------------------

def test_ask_endpoint_streams_then_returns_the_cited_answer(ui_url, fake_model):
    fake_model.enqueue(reply(GFPO_SENTENCE))
    job = client(ui_url).submit(EXAMPLE, api_name="/ask")
    updates = list(job)
    final = job.result()
    assert len(updates) > 2 and not updates[0]["done"] and updates[0]["answer"] in final["answer"]
    assert final["done"] and not final["abstained"]
    assert final["answer"] == GFPO_SENTENCE[0] + " [1]"
    assert final["citations"][0]["label"] == "Shrivastava et al." and len(final["sources"]) == 5
    assert "GFPO (Group Filtered Policy Optimization)" in final["evidence"][final["citations"][0]["paper_id"]][0]
    json.dumps(final)  # plain JSON all the way down


def test_ask_endpoint_condenses_a_follow_up_before_retrieval(ui_url, fake_model):
    fake_model.enqueue({"question": CONDENSED})
    fake_model.enqueue(reply(("GFPO trains with reinforcement learning on filtered responses.", [1])))
    history = [[EXAMPLE, GFPO_SENTENCE[0] + " [1]"]]
    final = client(ui_url).predict("which of those use reinforcement learning?", "", "", 3, history,
                                   api_name="/ask")
    assert final["question"] == "which of those use reinforcement learning?"
    assert final["standalone_question"] == CONDENSED and len(final["sources"]) == 3
    condense, answer = fake_model.history
    assert EXAMPLE in condense[1]["content"]
    assert answer[1]["content"].endswith(f"Question: {CONDENSED}\n")   # retrieval and answer got the condensed one


def test_ask_endpoint_filters_and_reports_a_bad_filter(ui_url, fake_model):
    from gradio_client.exceptions import AppError

    fake_model.enqueue(reply(("Grokking shows test accuracy rising long after training accuracy.", [1])))
    final = client(ui_url).predict("which papers study grokking?", "Deep Learning · Theory", "", 10,
                                   api_name="/ask")
    assert {s["category"] for s in final["sources"]} == {"Deep Learning · Theory"}
    with pytest.raises(AppError, match="unknown category 'Deep Lerning'.*did you mean"):
        client(ui_url).predict("grokking", "Deep Lerning", api_name="/ask")


class OneAtATimeModel(ScriptedModel):
    """A fake model that records how many requests it generates for at the same time."""

    def __init__(self):
        super().__init__()
        self.active = 0
        self.most_active = 0
        self._lock = threading.Lock()

    def stream(self, messages, schema, max_tokens):
        with self._lock:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
            self.replies.append(reply(GFPO_SENTENCE))
        try:
            for delta in super().stream(messages, schema, max_tokens):
                time.sleep(0.005)
                yield delta
        finally:
            with self._lock:
                self.active -= 1


def test_five_simultaneous_users_all_get_answers_one_generation_at_a_time(real_settings, monkeypatch):
    import rag.llm
    from ui.app import build_app

    model = OneAtATimeModel()
    monkeypatch.setattr(rag.llm, "open_model", lambda settings: model)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    app = build_app(real_settings)
    url = app.launch(port=free_port())
    try:
        users = [client(url) for _ in range(5)]
        with ThreadPoolExecutor(5) as pool:
            answers = list(pool.map(lambda user: user.predict(EXAMPLE, api_name="/ask"), users))
    finally:
        app.close()
    assert [a["citations"][0]["label"] for a in answers] == ["Shrivastava et al."] * 5
    assert len(model.history) == 5 and model.most_active == 1


# --- what the page shows while it loads, and when it cannot answer ----------------------------

def test_first_question_on_an_empty_index_says_the_index_is_being_built(small_corpus, fake_model):
    from rag.retrieve import Filters
    from rag.settings import Settings
    from ui.backend import BUILDING_INDEX, LOADING, Backend

    fake_model.enqueue(reply(("Weight decay controls the delay before test accuracy jumps.", [1])))
    backend = Backend(Settings.from_env(corpus=small_corpus))
    try:
        events = list(backend.stream("what controls the grokking delay?", [], None, Filters()))
    finally:
        backend.close()
    assert events[:2] == [("status", LOADING), ("status", BUILDING_INDEX)]
    assert events[-1][0] == "done" and events[-1][1].answer.citations[0].paper.label == "Lovelace and Babbage"
    assert events[2][0] == "sources" and events[2][1] == events[-1][1].answer.sources   # before the model answers
    from ui import render
    shown = render.render_turn_sources(1, hits=events[2][1], answering=True)
    assert "Papers found (answering…)" in shown and "Lovelace and Babbage" in shown
    assert [e[0] for e in events[3:-1]] == ["text"] * (len(events) - 5) + ["sentence"]


class EndlessModel:
    """A fake model that streams one character every 10 ms until it is stopped; says when it started and ended."""

    backend = "fake"
    model = "endless"

    def __init__(self):
        self.started = threading.Event()
        self.ended = threading.Event()
        self.streamed = 0

    def stream(self, messages, schema, max_tokens):
        self.started.set()
        try:
            while True:
                self.streamed += 1
                yield "x"
                time.sleep(0.01)
        finally:
            self.ended.set()


def test_closing_the_backend_stops_the_answer_in_progress_at_its_next_token(real_settings, monkeypatch):
    import rag.llm
    from rag.retrieve import Filters
    from ui.backend import LOADING, STOPPED, Backend

    model = EndlessModel()
    monkeypatch.setattr(rag.llm, "open_model", lambda settings: model)
    backend = Backend(real_settings)
    events = backend.stream(EXAMPLE, [], None, Filters())
    assert next(events) == ("status", LOADING)
    assert model.started.wait(60)
    assert backend.close(timeout_s=5)          # it waited for the generation to end
    assert model.ended.is_set() and not backend.busy
    streamed = model.streamed
    rest = list(events)   # the papers found (queued before the model started), then the stop
    assert [e[0] for e in rest] == ["sources", "error"] and rest[-1] == ("error", STOPPED, [])
    assert model.streamed == streamed
    assert list(backend.stream(EXAMPLE, [], None, Filters()))[-1] == ("error", STOPPED, [])   # closed for good


def test_abstention_is_said_plainly_with_its_reason():
    from rag.answer import CANNOT_ANSWER, Answer
    from rag.conversation import ChatReply
    from ui.render import render_reply

    draft = Answer(question="q", answer=CANNOT_ANSWER, abstained=True, citations=[], invalid_citations=[],
                   sentences=[Sentence("The moon is made of cheese.", [], False)], sources=[], backend="fake",
                   model="scripted", index="i", abstain_reason="unsupported")
    html = render_reply(1, ChatReply("q", "q", draft))
    assert CANNOT_ANSWER in html and "no sentence of it is backed by the papers" in html
    assert "<del>The moon is made of cheese.</del>" in html and "Searched for" not in html


# --- `rag ui` as a process: start, serve, stop on a signal ------------------------------------

STOP_LIMIT_S = 10            # how long `rag ui` may take to exit after SIGINT or SIGTERM
EXIT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 0}
SLOW_REPLY = json.dumps(reply(GFPO_SENTENCE))   # streamed 3 characters a second: about a minute


@contextlib.contextmanager
def rag_ui_process(home, base_url: str, log_path, sigint_ignored: bool = False):
    """`rag ui` in a subprocess with the openai-like backend at base_url; yields (process, page URL) once it
    has printed its URL line; killed afterwards if it is still running. stdin is /dev/null, as in CI;
    sigint_ignored: it starts with SIGINT ignored, as a background job of a script does."""
    port = free_port()
    env = {**os.environ, "RAG_HOME": str(home), "RAG_BACKEND": "openai-like", "RAG_MODEL": "m",
           "RAG_BASE_URL": base_url, "HF_HUB_OFFLINE": "1"}
    ignore_sigint = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "rag", "ui", "--port", str(port)], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, text=True,
                                preexec_fn=ignore_sigint)
    try:
        line = proc.stdout.readline()
        assert line == f"rag ui: serving the chat on http://127.0.0.1:{port}/ (Ctrl+C to stop)\n", \
            log_path.read_text()[-2000:]
        yield proc, f"http://127.0.0.1:{port}/"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()


def stop_process(proc, signum, log_path) -> None:
    """Send `signum`; fails unless the process has exited within STOP_LIMIT_S."""
    proc.send_signal(signum)
    try:
        proc.wait(timeout=STOP_LIMIT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"rag ui still running {STOP_LIMIT_S} s after {signal.Signals(signum).name}; its stderr:\n"
                    + log_path.read_text()[-2000:])


def fetch_page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as page:
        assert page.status == 200
        return page.read().decode()


def start_answer(url: str, question: str) -> None:
    """Queue a question on the `ask` endpoint, as the page does, without waiting for its answer."""
    body = json.dumps({"data": [question, "", "", 0, []]}).encode()   # question, category, author, k, history
    request = urllib.request.Request(f"{url}gradio_api/call/ask", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert "event_id" in json.load(response)


def test_rag_ui_prints_its_url_and_serves_the_page(real_index_home, tmp_path):
    """The real command in a subprocess (an unreachable openai-like backend, so no model is loaded)."""
    log = tmp_path / "rag-ui.log"
    with rag_ui_process(real_index_home, f"http://127.0.0.1:{free_port()}/v1", log) as (proc, url):
        assert "rag · ask the papers" in fetch_page(url)
        stop_process(proc, signal.SIGINT, log)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_rag_ui_stops_on_a_signal_while_still_loading(real_index_home, tmp_path, signum):
    """Right after start-up the models are still loading in the background: that must not hold the exit."""
    log = tmp_path / "rag-ui.log"
    with rag_ui_process(real_index_home, f"http://127.0.0.1:{free_port()}/v1", log) as (proc, url):
        fetch_page(url)
        stop_process(proc, signum, log)
    assert proc.returncode == EXIT_STATUS[signum], log.read_text()[-2000:]


def test_rag_ui_stops_on_sigint_even_when_started_with_sigint_ignored(real_index_home, tmp_path):
    """A background job of a non-interactive shell (how CI runners start jobs, stdin /dev/null) inherits
    SIGINT ignored, and Python then keeps ignoring it: `kill -INT` and Ctrl+C must still stop `rag ui`."""
    log = tmp_path / "rag-ui.log"
    with rag_ui_process(real_index_home, f"http://127.0.0.1:{free_port()}/v1", log, sigint_ignored=True) \
            as (proc, url):
        fetch_page(url)
        stop_process(proc, signal.SIGINT, log)
    assert proc.returncode == EXIT_STATUS[signal.SIGINT], log.read_text()[-2000:]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_rag_ui_stops_on_a_signal_while_an_answer_streams(real_index_home, tmp_path, signum):
    """An answer streaming from a slow backend is cut off: the process exits, with the status of the signal."""
    log = tmp_path / "rag-ui.log"
    with slow_chat_server(SLOW_REPLY, interval_s=1.0) as backend, \
            rag_ui_process(real_index_home, backend.base_url, log) as (proc, url):
        start_answer(url, EXAMPLE)
        assert backend.streaming.wait(120), "the answer never started streaming: " + log.read_text()[-2000:]
        stop_process(proc, signum, log)
    assert proc.returncode == EXIT_STATUS[signum], log.read_text()[-2000:]


@pytest.mark.parametrize("second", [None, signal.SIGINT], ids=["one-signal", "then-SIGINT"])
def test_rag_ui_exits_when_an_answer_cannot_be_stopped(real_index_home, tmp_path, second):
    """A backend that stalls mid-reply (as the local model does while it reads a long prompt) cannot be stopped
    between tokens: the process exits anyway, after the grace or at once on a second signal, with the status
    of the first signal."""
    log = tmp_path / "rag-ui.log"
    with slow_chat_server(SLOW_REPLY, interval_s=600) as backend, \
            rag_ui_process(real_index_home, backend.base_url, log) as (proc, url):
        start_answer(url, EXAMPLE)
        assert backend.streaming.wait(120), "the answer never started streaming: " + log.read_text()[-2000:]
        if second is None:
            stop_process(proc, signal.SIGTERM, log)
        else:
            proc.send_signal(signal.SIGTERM)
            assert proc.stdout.readline().startswith("rag ui: stopping (SIGTERM")
            stop_process(proc, second, log)
    assert proc.returncode == EXIT_STATUS[signal.SIGTERM], log.read_text()[-2000:]
    reason = "exiting without waiting" if second is None else "SIGINT during shutdown: exiting at once"
    assert reason in log.read_text()
