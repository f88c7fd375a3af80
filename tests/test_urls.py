"""Server URLs: user-info hidden wherever a URL is shown or saved; a malformed URL is a one-line usage error."""

import json

import pytest

from rag.cli import main
from rag.errors import UsageError
from rag.settings import settings_snapshot
from rag.settings import Settings
from rag.urls import redact_url


@pytest.mark.parametrize("text, shown", [
    ("http://user:secret@127.0.0.1:9/v1", "http://***@127.0.0.1:9/v1"),
    ("https://:tok@proxy.lan/chroma", "https://***@proxy.lan/chroma"),
    ("http://tok@[::1]:8000", "http://***@[::1]:8000"),
    ("http://u:p@ss:w?rd#x@host:1/v1", "http://***@host:1/v1"),        # unencoded '@', '?', '#' in the password
    ("http://user:secret@[::1", "http://***@[::1"),                     # malformed: still hidden
    ("the backend at http://u:secret@h:1/v1 failed; http://h:2 too", "the backend at http://***@h:1/v1 failed; "
     "http://h:2 too"),
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),          # no user-info: unchanged
    ("a@b.c and http://h/x@y", "a@b.c and http://h/x@y"),               # an @ that is not user-info
    ("embedded", "embedded"),
])
def test_redact_url_hides_user_info_only(text, shown):
    assert redact_url(text) == shown


@pytest.mark.parametrize("variable, value, problem", [
    ("RAG_CHROMA_URL", "http://[::1", "an IPv6 address needs both brackets"),
    ("RAG_BASE_URL", "http://[::1", "an IPv6 address needs both brackets"),
    ("RAG_CHROMA_URL", "127.0.0.1:8000", "it must start with http:// or https://"),
    ("RAG_BASE_URL", "localhost:8080/v1", "it must start with http:// or https://"),
    ("RAG_CHROMA_URL", "http://127.0.0.1:99999", "the port must be a number from 1 to 65535"),
    ("RAG_BASE_URL", "http://127.0.0.1:port/v1", "the port must be a number from 1 to 65535"),
    ("RAG_CHROMA_URL", "http://:8000", "it names no host"),
])
def test_a_malformed_url_is_a_one_line_usage_error(variable, value, problem, monkeypatch, capsys):
    monkeypatch.setenv(variable, value)
    assert main(["papers"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("rag: error: bad ") and problem in err
    assert variable in err and "write it as http://HOST:PORT" in err


@pytest.mark.parametrize("argv", [
    ["papers", "--chroma-url", "http://user:secret@[::1"],
    ["ask", "--backend", "openai-like", "--model", "m", "--base-url", "http://user:secret@127.0.0.1:x/v1", "q"],
])
def test_a_malformed_url_given_as_a_flag_is_refused_before_anything_runs_and_keeps_its_secret(argv, capsys):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "http://***@" in err and "secret" not in err


def test_the_settings_saved_with_a_run_hold_no_key_token_or_url_password():
    settings = Settings.from_env({"RAG_CHROMA_URL": "http://user:pw-1@127.0.0.1:8000", "RAG_CHROMA_TOKEN": "tok-2",
                                  "RAG_BASE_URL": "https://user:pw-3@llm.lan/v1", "RAG_API_KEY": "key-4"})
    snapshot = settings_snapshot(settings)
    saved = json.dumps(snapshot)
    assert not any(secret in saved for secret in ("pw-1", "tok-2", "pw-3", "key-4"))
    assert snapshot["chroma_url"] == "http://***@127.0.0.1:8000" and snapshot["base_url"] == "https://***@llm.lan/v1"
    assert "tok-2" not in repr(settings) and "key-4" not in repr(settings)


def test_a_chroma_token_with_spaces_is_refused_without_showing_it():
    with pytest.raises(UsageError, match="RAG_CHROMA_TOKEN must be ASCII") as refused:
        Settings(chroma_token="two words")
    assert "two words" not in str(refused.value)
