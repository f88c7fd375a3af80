"""The chat UI's library side and its `ask` API: condensing follow-ups, evidence, rendering, auth, queueing.

The app runs in-process on a free loopback port with the scripted fake LLM and the real
index of data/; gradio_client calls its named endpoint like any remote user would, and
httpx sends the raw requests a hostile page or client could (forged Host and Origin
headers, uploads, wrong passwords). The
`rag ui` command itself runs as a subprocess against an unreachable or a slow fake
OpenAI-compatible backend, to check that it serves and that SIGINT and SIGTERM stop it.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import pytest

from fakes import ScriptedModel, opener, reply
from rag.answer_record import Sentence
from rag.conversation import Turn, condense_question, format_history, parse_condensed
from rag.errors import UsageError
from servers import free_port, slow_chat_server

EXAMPLE = "what methods reduce reasoning length?"
GFPO_SENTENCE = ("GFPO samples larger groups and trains on responses filtered by length and token efficiency.", [1])
CONDENSED = "Which methods that reduce reasoning length use reinforcement learning?"


@pytest.fixture
def fake_model():
    """The scripted fake that answers in the app (build_app(settings, opener(fake_model)))."""
    return ScriptedModel()


@pytest.fixture
def ui_url(real_settings, fake_model, monkeypatch):
    """The app on a free loopback port, closed afterwards."""
    from rag.ui.app import build_app

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    app = build_app(real_settings, opener(fake_model))
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
    ('{"english": "Which GFPO variants exist?"}', None),
    ('```json\n{"question": "Which GFPO variants exist?"}\n```', "Which GFPO variants exist?"),
    ('Standalone question: {"question": "Which GFPO variants exist?"}', "Which GFPO variants exist?"),
    ('What does {"a": 1} mean?', 'What does {"a": 1} mean?'),   # plain text that holds other JSON
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

    rfm_sentence = ("Grokking also happens with Recursive Feature Machines, and the transition is determined by "
                    "feature learning.", [1])
    settings = real_settings.with_overrides(several_sentences=0)   # whole chunks, where the scripted claim is
    with Retriever(settings) as retriever:   # two grokking papers, close in score: Mallinar et al., Haris et al.
        answerer = Answerer(settings, retriever, ScriptedModel(reply(rfm_sentence, ("It costs 9000 GPUs.", [1]),
                                                                          ("It runs on 512 TPUs.", [2]))))
        answer = answerer.ask("what methods explain grokking?")
        evidence = highlight_evidence(answer, answerer.grounding)
    assert [s.kind for s in answer.sentences] == ["claim", "claim", "quote"]
    assert not answer.sentences[1].supported   # the first paper has its claim already: this one stays unsupported
    rfm = answer.citations[0].paper
    marked = evidence[rfm.paper_id].supporting_sentences()
    assert len(marked) == 1 and "Recursive Feature Machines (RFM)" in marked[0]   # nothing from 9000 GPUs
    quoted = answer.citations[1].paper.paper_id   # the second paper's invented claim gave way to its own sentence
    assert "grokking" in answer.sentences[2].quote
    assert evidence[quoted].supporting_sentences() == [answer.sentences[2].quote]


def test_split_sentences_keeps_decimals_and_abbreviations_whole():
    from rag.evidence import split_sentences

    assert split_sentences("It cuts 85.3% of tokens, e.g. on AIME. GFPO wins. 中文句子。") == [
        "It cuts 85.3% of tokens, e.g. on AIME.", "GFPO wins.", "中文句子。"]
    assert split_sentences("We find that GFPO also outperforms Dr. GRPO. The agent of Guez et al. (2019) plans, "
                           "as in Fig. 2 and the work of J. Smith. Done.") == [
        "We find that GFPO also outperforms Dr. GRPO.",
        "The agent of Guez et al. (2019) plans, as in Fig. 2 and the work of J. Smith.", "Done."]


def test_rendered_sentence_links_citations_and_marks_unsupported_ones():
    from rag.ui.render import render_sentence

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
    assert err.count("\n") == 1 and "--auth-file FILE" in err and "RAG_UI_AUTH=USER:PASSWORD" in err


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_loopback_needs_no_auth(host):
    from rag.ui.app import check_bind

    assert check_bind(host, None) is None


def test_auth_from_flag_file_or_environment(monkeypatch, tmp_path):
    from rag.ui.app import check_bind

    assert check_bind("0.0.0.0", "ada:s3cret:x") == ("ada", "s3cret:x")
    assert check_bind("0.0.0.0", "  ada :lovelace") == ("ada", "lovelace")   # gradio strips the user at login
    monkeypatch.setenv("RAG_UI_AUTH", "grace:hopper-1906")
    assert check_bind("0.0.0.0", None) == ("grace", "hopper-1906")
    login = tmp_path / "login"
    login.write_text("alan:enigma-1912\n")
    login.chmod(0o600)
    assert check_bind("0.0.0.0", None, login) == ("alan", "enigma-1912")   # the file before the environment


@pytest.mark.parametrize("value, problem", [
    ("nocolon", "--auth takes USER:PASSWORD, with a colon between the user and the password"),
    (":lovelace1", "--auth: the user name is empty or blank; write USER:PASSWORD"),
    # accepted before, yet gradio strips the user at login, so no login could match it:
    ("   :lovelace1", "--auth: the user name is empty or blank; write USER:PASSWORD"),
    ("ada:", "--auth: the password has 0 characters; use at least 8"),
    ("ada:short", "--auth: the password has 5 characters; use at least 8"),
])
def test_bad_logins_are_refused_saying_what_is_wrong(value, problem):
    from rag.ui.app import check_bind

    with pytest.raises(UsageError) as refused:
        check_bind("127.0.0.1", value)
    assert str(refused.value) == problem


@pytest.mark.parametrize("mode, content, problem", [
    (0o644, "ada:lovelace1\n", "is open to other users (mode 644): run chmod 600"),
    (0o660, "ada:lovelace1\n", "is open to other users (mode 660): run chmod 600"),
    (0o600, "", "is empty: write one line USER:PASSWORD"),
    (0o600, "ada:short\n", "the password has 5 characters; use at least 8"),
    (0o000, "ada:lovelace1\n", "cannot read it (Permission denied)"),
])
def test_auth_file_must_be_private_and_hold_a_good_login(tmp_path, mode, content, problem):
    from rag.ui.app import check_bind

    login = tmp_path / "login"
    login.write_text(content)
    login.chmod(mode)
    if mode == 0o000 and os.access(login, os.R_OK):
        pytest.skip("running as root: every file is readable")
    with pytest.raises(UsageError, match=re.escape(problem)):
        check_bind("127.0.0.1", None, login)
    with pytest.raises(UsageError, match="give --auth or --auth-file, not both"):
        check_bind("127.0.0.1", "ada:lovelace1", login)


def test_rag_ui_auth_on_the_command_line_warns_that_ps_shows_it(capsys):
    from rag.cli import main

    assert main(["ui", "--auth", "ada:short"]) == 2
    warning, error = capsys.readouterr().err.splitlines()
    assert warning.startswith("rag ui: warning: --auth shows the password to every user of this machine (ps")
    assert "RAG_UI_AUTH" in warning and "--auth-file" in warning
    assert error == "rag: error: --auth: the password has 5 characters; use at least 8"
    assert main(["ui", "--ssl-certfile", "cert.pem"]) == 2
    assert capsys.readouterr().err.endswith("https needs both --ssl-keyfile and --ssl-certfile\n")


def test_rag_ui_help_prefers_the_environment_or_a_file_for_the_login(capsys):
    from rag.cli import main

    with pytest.raises(SystemExit) as done:
        main(["ui", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "RAG_UI_AUTH=USER:PASSWORD or --auth-file FILE: --auth puts the password where `ps` shows it" in text
    assert "--ssl-certfile FILE" in text and "--ssl-keyfile FILE" in text and "--allowed-host NAME" in text


def test_served_page_with_auth_refuses_anonymous_clients(real_settings, fake_model, monkeypatch):
    from gradio_client import Client

    from rag.ui.app import build_app

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    app = build_app(real_settings, opener(fake_model))
    url = app.launch(port=free_port(), auth="ada:lovelace")
    try:
        with pytest.raises(Exception):
            Client(url, verbose=False)
        fake_model.enqueue(reply(GFPO_SENTENCE))
        answer = Client(url, auth=("ada", "lovelace"), verbose=False).predict(EXAMPLE, api_name="/ask")
        assert answer["citations"][0]["label"] == "Shrivastava et al."
    finally:
        app.close()


class FakeClock:
    """time.monotonic for a LoginThrottle, moved on by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_login_throttle_locks_an_address_out_doubling_and_recovers():
    from rag.ui.guard import FORGET_S, LoginThrottle

    clock = FakeClock()
    throttle = LoginThrottle(max_failures=3, lockout_s=10, max_lockout_s=25, clock=clock)
    for _ in range(2):
        throttle.attempt("10.0.0.1")
    assert throttle.retry_after("10.0.0.1") == 0
    throttle.attempt("10.0.0.1")
    assert throttle.retry_after("10.0.0.1") == 10 and throttle.retry_after("10.0.0.2") == 0   # per address
    clock.now += 10
    assert throttle.retry_after("10.0.0.1") == 0   # the lockout ends
    throttle.attempt("10.0.0.1")
    assert throttle.retry_after("10.0.0.1") == 20   # each further failure doubles it...
    clock.now += 20
    throttle.attempt("10.0.0.1")
    assert throttle.retry_after("10.0.0.1") == 25   # ...up to the cap
    clock.now += 25
    throttle.attempt("10.0.0.1")
    throttle.succeeded("10.0.0.1")   # the right password: the count starts again
    assert throttle.retry_after("10.0.0.1") == 0
    throttle.attempt("10.0.0.1")
    throttle.forgive("10.0.0.1")   # neither right nor wrong (a malformed form): not counted
    throttle.attempt("10.0.0.2")
    clock.now += FORGET_S + 1
    assert throttle.retry_after("10.0.0.2") == 0 and throttle._failures == {}   # idle addresses are forgotten


def login(url: str, user: str, password: str):
    import httpx

    return httpx.post(f"{url}login", data={"username": user, "password": password}, timeout=30)


def test_failed_logins_are_throttled_then_recover(real_settings, fake_model, monkeypatch):
    """Before: 30 wrong logins in 0.06 s were each answered 'Incorrect credentials', and the 31st could be right."""
    from gradio_client import Client

    from rag.ui.app import build_app
    from rag.ui.guard import LOCKOUT_S, MAX_FAILED_LOGINS

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    app = build_app(real_settings, opener(fake_model))
    clock = FakeClock()
    app.throttle.clock = clock
    url = app.launch(port=free_port(), auth="ada:lovelace")
    try:
        with ThreadPoolExecutor(10) as pool:   # 30 at once: none may slip past the count
            codes = list(pool.map(lambda _: login(url, "ada", "wrong-guess").status_code, range(30)))
        assert codes.count(400) == MAX_FAILED_LOGINS and codes.count(429) == 30 - MAX_FAILED_LOGINS
        refused = login(url, "ada", "lovelace")   # the right password, within the lockout
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) == LOCKOUT_S
        assert "too many failed logins from 127.0.0.1" in refused.json()["detail"]
        with pytest.raises(Exception, match="login"):
            Client(url, auth=("ada", "lovelace"), verbose=False)
        clock.now += LOCKOUT_S
        assert login(url, "ada", "lovelace").status_code == 200
        assert login(url, "ada", "wrong-guess").status_code == 400   # the success cleared the count
        fake_model.enqueue(reply(GFPO_SENTENCE))
        answer = Client(url, auth=("ada", "lovelace"), verbose=False).predict(EXAMPLE, api_name="/ask")
        assert answer["citations"][0]["label"] == "Shrivastava et al."
    finally:
        app.close()


def self_signed_certificate(folder) -> tuple:
    """(key file, certificate file) for localhost and 127.0.0.1, made here with `cryptography` or `openssl`."""
    key, cert = folder / "key.pem", folder / "cert.pem"
    try:
        import datetime
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        openssl = shutil.which("openssl")
        if openssl is None:
            pytest.skip("making a test certificate needs the cryptography package or the openssl command")
        subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True, capture_output=True)
        return key, cert
    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    names = x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(private.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now)
                   .not_valid_after(now + datetime.timedelta(days=1)).add_extension(names, critical=False)
                   .sign(private, hashes.SHA256()))
    key.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return key, cert


def test_tls_files_are_checked_before_serving(tmp_path):
    from rag.ui.app import check_tls

    key, cert = self_signed_certificate(tmp_path)
    check_tls(key, cert)
    check_tls(None, None)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    for keyfile, certfile, problem in [(key, None, "https needs both --ssl-keyfile and --ssl-certfile"),
                                       (None, cert, "https needs both"),
                                       (key, tmp_path / "missing.pem", "cannot read it (No such file"),
                                       (garbage, cert, "are not a PEM certificate and its unencrypted private key"),
                                       (key, garbage, "are not a PEM certificate")]:
        with pytest.raises(UsageError, match=re.escape(problem)):
            check_tls(keyfile, certfile)


def test_https_with_a_certificate_and_key(real_settings, fake_model, monkeypatch, tmp_path):
    import httpx
    from gradio_client import Client

    from rag.ui.app import build_app

    key, cert = self_signed_certificate(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    app = build_app(real_settings, opener(fake_model))
    port = free_port()
    url = app.launch(port=port, auth="ada:lovelace", ssl_keyfile=key, ssl_certfile=cert)
    try:
        assert url == f"https://127.0.0.1:{port}/"
        trusted = ssl.create_default_context(cafile=str(cert))
        assert httpx.get(url, verify=trusted, timeout=30).status_code == 200   # the login page, over TLS
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/", timeout=30)   # no plain-text HTTP on that port
        fake_model.enqueue(reply(GFPO_SENTENCE))
        client = Client(url, auth=("ada", "lovelace"), ssl_verify=False, verbose=False)
        assert client.predict(EXAMPLE, api_name="/ask")["citations"][0]["label"] == "Shrivastava et al."
    finally:
        app.close()


# --- what the server lets through: hosts, origins, files, uploads ------------------------------

def test_requests_naming_another_host_are_refused(ui_url):
    """DNS rebinding: a page on evil.example re-points its name at 127.0.0.1 and sends Host: evil.example."""
    import httpx

    port = urlsplit(ui_url).port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST"):
        assert httpx.get(ui_url, headers={"Host": host}, timeout=30).status_code == 200, host
    for host in (f"evil.example:{port}", f"127.0.0.1.evil.example:{port}", "evil.example", "", "[nonsense"):
        refused = httpx.get(f"{ui_url}gradio_api/info", headers={"Host": host}, timeout=30)
        assert refused.status_code == 400 and "does not serve the host" in refused.json()["detail"], host


def test_hosts_a_server_answers_to():
    from rag.ui.guard import HostPolicy

    loopback = HostPolicy.for_bind("127.0.0.1")
    assert [loopback.allows(h) for h in ("127.0.0.1", "localhost", "::1", "127.0.0.2", "10.0.0.5", "rag.lan")] == \
        [True, True, True, True, False, False]
    named = HostPolicy.for_bind("192.168.1.20", ["rag.lan"])
    assert [named.allows(h) for h in ("192.168.1.20", "rag.lan", "localhost", "192.168.1.21", "evil.example")] == \
        [True, True, True, False, False]
    everywhere = HostPolicy.for_bind("0.0.0.0")   # any address can reach it; a DNS name still has to be named
    assert [everywhere.allows(h) for h in ("192.168.1.21", "fe80::1", "evil.example", None)] == \
        [True, True, False, False]


def test_cross_origin_requests_are_refused(ui_url, fake_model):
    """Before: a question posted from another site's page (a cross-site form or fetch) was answered."""
    import httpx
    from gradio_client import Client

    question = {"data": [EXAMPLE, "", "", 0, []]}
    for origin in ("http://evil.example", "null", f"http://localhost:{urlsplit(ui_url).port + 1}"):
        refused = httpx.post(f"{ui_url}gradio_api/call/ask", json=question, headers={"Origin": origin}, timeout=30)
        assert refused.status_code == 403 and "cross-origin request" in refused.json()["detail"], origin
    assert httpx.get(f"{ui_url}config", headers={"Origin": "https://evil.example"}, timeout=30).status_code == 403
    with pytest.raises(Exception):
        Client(ui_url, headers={"Origin": "https://evil.example"}, verbose=False)
    assert fake_model.history == []   # nothing reached the model
    same_site = httpx.get(f"{ui_url}config", headers={"Origin": ui_url.rstrip("/")}, timeout=30)
    assert same_site.status_code == 200   # the page's own requests carry its own origin


def test_uploads_are_refused(ui_url):
    """Before: /gradio_api/upload took a 20 MiB file (and any other) and served it back."""
    import httpx

    for size in (20 * 2**20, 1000, 0):
        refused = httpx.post(f"{ui_url}gradio_api/upload", files={"files": ("a.bin", b"x" * size)}, timeout=60)
        assert refused.status_code == 413 and refused.json() == {"detail": "rag ui takes no uploads"}, size


def test_no_file_is_served_whatever_the_gradio_environment_says(real_settings, fake_model, monkeypatch, tmp_path):
    """GRADIO_ALLOWED_PATHS would have gradio serve that folder to anyone; GRADIO_VIBE_MODE would let anyone
    edit the app."""
    import httpx

    from rag.ui.app import build_app

    secret = tmp_path / "secret.txt"
    secret.write_text("the launch codes")
    monkeypatch.setenv("GRADIO_ALLOWED_PATHS", str(tmp_path))
    monkeypatch.setenv("GRADIO_VIBE_MODE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    app = build_app(real_settings, opener(fake_model))
    url = app.launch(port=free_port())
    try:
        for path in (f"gradio_api/file={secret}", f"gradio_api/file/{secret}"):
            refused = httpx.get(url + path, timeout=30)
            assert refused.status_code == 404 and "launch codes" not in refused.text
        assert httpx.get(f"{url}config", timeout=30).json()["vibe_mode"] is False
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
    assert final["answer"] == "Shrivastava et al.: " + GFPO_SENTENCE[0] + " [1]"
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


def test_ask_endpoint_caps_the_question_and_k(ui_url, fake_model):
    from gradio_client.exceptions import AppError

    user = client(ui_url)
    with pytest.raises(AppError, match="the question is 2,001 characters long: ask it in at most 2,000"):
        user.predict("x" * 2001, api_name="/ask")
    for k in (51, -1):
        with pytest.raises(AppError, match=rf"k \(papers to retrieve\) must be a whole number from 1 to 50, "
                                           rf"or 0 for the default; got {k}"):
            user.predict(EXAMPLE, "", "", k, api_name="/ask")
    assert fake_model.history == []


def test_chat_refuses_a_question_over_the_cap(real_settings):
    from rag.ui.app import MAX_QUESTION_CHARS, build_app, take_question

    box, chat, asked = take_question("y" * (MAX_QUESTION_CHARS + 1), [], busy=False)
    assert asked == "" and len(chat) == 1 and chat[0]["role"] == "assistant"   # not asked; the text stays in the box
    assert "the question is 2,001 characters long" in chat[0]["content"] and 'class="rag-error"' in chat[0]["content"]
    box, chat, asked = take_question(" <b>grokking</b>? ", [], busy=False)
    assert (box, asked) == ("", "<b>grokking</b>?") and chat[0]["content"] == "&lt;b&gt;grokking&lt;/b&gt;?"
    config = build_app(real_settings).blocks.get_config_file()
    box = next(c for c in config["components"] if c["props"].get("elem_id") == "rag-question")
    assert box["props"]["max_length"] == MAX_QUESTION_CHARS   # the browser stops typing there


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
    from rag.ui.app import build_app

    model = OneAtATimeModel()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    app = build_app(real_settings, opener(model))
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
    from rag.ui.backend import BUILDING_INDEX, LOADING, Backend

    fake_model.enqueue(reply(("Weight decay controls the delay before test accuracy jumps.", [1])))
    backend = Backend(Settings.from_env(corpus=small_corpus), opener(fake_model))
    try:
        events = list(backend.stream("what controls the grokking delay?", [], None, Filters()))
    finally:
        backend.close()
    assert events[:2] == [("status", LOADING), ("status", BUILDING_INDEX)]
    assert events[-1][0] == "done" and events[-1][1].answer.citations[0].paper.label == "Lovelace and Babbage"
    assert events[2][0] == "sources" and events[2][1] == events[-1][1].answer.sources   # before the model answers
    from rag.ui import render
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


def test_closing_the_backend_stops_the_answer_in_progress_at_its_next_token(real_settings):
    from rag.retrieve import Filters
    from rag.ui.backend import LOADING, STOPPED, Backend

    model = EndlessModel()
    backend = Backend(real_settings, opener(model))
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
    from rag.answer_record import CANNOT_ANSWER, Answer
    from rag.conversation import ChatReply
    from rag.ui.render import render_reply

    draft = Answer(question="q", answer=CANNOT_ANSWER, abstained=True, citations=[], invalid_citations=[],
                   sentences=[Sentence("The moon is made of cheese.", [], False)], sources=[], backend="fake",
                   model="scripted", index="i", abstain_reason="unsupported")
    html = render_reply(1, ChatReply("q", "q", draft))
    assert CANNOT_ANSWER in html and "no sentence of it is backed by the papers" in html
    assert "<del>The moon is made of cheese.</del>" in html and "Searched for" not in html


def test_an_answer_about_several_papers_lists_each_paper_once():
    from rag.answer_record import Answer
    from rag.conversation import ChatReply
    from rag.ui.render import render_reply

    sentences = [Sentence("Lovelace et al. study grokking.", [1], True), Sentence("Hopper builds a compiler.", [2], True),
                 Sentence("Weight decay delays it.", [1], True)]
    answer = Answer(question="q", answer="", abstained=False, citations=[], invalid_citations=[], sentences=sentences,
                    sources=[], backend="fake", model="scripted", index="i")
    html = render_reply(1, ChatReply("q", "q", answer))
    assert "2 of the papers answer this:" in html and html.count("<li>") == 2
    assert html.index("grokking.") < html.index("delays it.") < html.index("compiler.")


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
