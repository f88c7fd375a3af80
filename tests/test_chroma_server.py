"""The scale-out path: ingest and search through a real `chroma run` server on loopback, directly and behind
a reverse proxy that asks for a token (as a Chroma server with token auth does)."""

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

import servers
from conftest import SMALL_PAPERS, write_corpus
from rag import doctor
from rag.cli import main
from rag.errors import StoreError, UsageError
from rag.ingest import describe_index, ingest
from rag.library import load_corpus
from rag.retrieve import Retriever
from rag.settings import Settings
from rag.store import open_store, parse_chroma_url

TOKEN = "tok-4f9a2c"      # the proxy's token; must never be printed or saved
PASSWORD = "pw-77e1b0"    # a password in a URL; likewise


@pytest.fixture
def chroma_server(tmp_path):
    """A Chroma server on a free loopback port, stopped after the test."""
    with servers.chroma_server(tmp_path / "server-data") as url:
        yield url


class TokenProxy(ThreadingHTTPServer):
    """Forwards /chroma/... to a Chroma server when the request carries 'Authorization: Bearer TOKEN' (what
    Chroma's token auth reads by default); otherwise answers 403 with the body Chroma's auth error has."""

    daemon_threads = True

    def __init__(self, upstream: str):
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.upstream = urlsplit(upstream)
        self.refused = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/chroma"


class _ProxyHandler(BaseHTTPRequestHandler):
    def _forward(self):
        proxy: TokenProxy = self.server
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}" or not self.path.startswith("/chroma/"):
            proxy.refused += 1
            return self._reply(403, b'{"error": "AuthError", "message": "Forbidden"}', "application/json")
        upstream = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=30)
        try:
            upstream.request(self.command, self.path.removeprefix("/chroma"), body=body or None,
                             headers={"Content-Type": self.headers.get("Content-Type", "application/json")})
            response = upstream.getresponse()
            self._reply(response.status, response.read(), response.getheader("Content-Type", "application/json"))
        finally:
            upstream.close()

    def _reply(self, status: int, body: bytes, content_type: str):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

    def log_message(self, *args):
        pass


@pytest.fixture
def token_proxy(chroma_server):
    """A TokenProxy in front of the test's Chroma server; its URL (with the /chroma path) is proxy.url."""
    proxy = TokenProxy(chroma_server)
    thread = threading.Thread(target=proxy.serve_forever, name="token-proxy", daemon=True)
    thread.start()
    yield proxy
    proxy.shutdown()
    proxy.server_close()
    thread.join()


def test_ingest_and_search_through_a_chroma_server(chroma_server, tmp_path, isolated_home):
    settings = Settings.from_env(corpus=write_corpus(tmp_path / "c.txt", SMALL_PAPERS), chroma_url=chroma_server)
    first = ingest(settings, progress=False)
    again = ingest(settings, progress=False)
    assert (first.added, again.unchanged, again.chunks) == (3, 3, first.chunks)
    assert first.location == chroma_server
    with Retriever(settings) as retriever:
        hits = retriever.search("grokking in transformers", k=1).hits
    assert hits[0].paper.authors[0] == "Ada Lovelace"
    assert describe_index(settings).size_bytes is None and len(describe_index(settings).papers) == 3
    assert not (isolated_home / "chroma").exists()  # nothing went to the embedded store


def test_cli_uses_the_server_from_the_environment(chroma_server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAG_CHROMA_URL", chroma_server)
    monkeypatch.setenv("RAG_CORPUS", str(write_corpus(tmp_path / "c.txt", SMALL_PAPERS)))
    assert main(["search", "--json", "-k", "1", "advice from other agents"]) == 0
    out, err = capsys.readouterr()
    assert '"Colas et al."' in out and "ingesting" in err


def test_a_server_that_is_down_is_a_clear_error():
    settings = Settings.from_env(chroma_url=f"http://127.0.0.1:{servers.free_port()}")
    with pytest.raises(StoreError, match="cannot reach the Chroma server at .*chroma run"):
        open_store(settings).close()


def test_a_server_that_needs_a_token_refuses_rag_without_it_in_one_line(token_proxy, capsys):
    assert main(["papers", "--chroma-url", token_proxy.url]) == 1
    err = capsys.readouterr().err
    assert token_proxy.refused and len(err.splitlines()) == 1
    assert f"Chroma server at {token_proxy.url} refused rag (" in err and "set RAG_CHROMA_TOKEN" in err
    with pytest.raises(StoreError, match="refused rag's token .*check RAG_CHROMA_TOKEN"):
        open_store(Settings.from_env(chroma_url=token_proxy.url, chroma_token="wrong-token")).close()


def test_rag_ingests_and_searches_through_a_server_behind_a_path_with_a_token(token_proxy, tmp_path, monkeypatch,
                                                                              capsys):
    monkeypatch.setenv("RAG_CHROMA_URL", token_proxy.url)
    monkeypatch.setenv("RAG_CHROMA_TOKEN", TOKEN)
    monkeypatch.setenv("RAG_CORPUS", str(write_corpus(tmp_path / "c.txt", SMALL_PAPERS)))
    assert main(["search", "--json", "-k", "1", "advice from other agents"]) == 0
    assert main(["papers"]) == 0
    out, err = capsys.readouterr()
    assert '"Colas et al."' in out and f"at {token_proxy.url}" in out and TOKEN not in out + err
    monkeypatch.delenv("RAG_CHROMA_TOKEN")   # the token in the URL's user-info instead
    with_token = token_proxy.url.replace("http://", f"http://:{TOKEN}@")
    with Retriever(Settings.from_env(chroma_url=with_token)) as retriever:
        assert retriever.search("grokking in transformers", k=1).hits[0].paper.authors[0] == "Ada Lovelace"
        assert retriever.store.location == token_proxy.url.replace("http://", "http://***@")


@pytest.mark.parametrize("url, address", [
    ("http://127.0.0.1:8000", ("http://127.0.0.1:8000", 8000, False, None)),
    ("http://chroma.lan", ("http://chroma.lan:8000", 8000, False, None)),
    ("https://u:t%2Fk@proxy.lan/chroma/", ("https://proxy.lan:443/chroma", 443, True, "t/k")),
    ("http://tok@[::1]:9000", ("http://[::1]:9000", 9000, False, "tok")),
])
def test_a_chroma_url_keeps_its_path_and_gives_its_token_apart(url, address):
    assert parse_chroma_url(url) == address


def test_a_url_secret_never_appears_in_store_errors():
    down = f"http://user:{PASSWORD}@127.0.0.1:{servers.free_port()}"
    with pytest.raises(StoreError) as unreachable:
        open_store(Settings.from_env(chroma_url=down)).close()
    assert PASSWORD not in str(unreachable.value) and "http://***@127.0.0.1:" in str(unreachable.value)
    with pytest.raises(UsageError) as malformed:
        Settings(chroma_url=f"http://user:{PASSWORD}@127.0.0.1:port")
    assert PASSWORD not in str(malformed.value)


def test_doctor_shows_the_chroma_server_and_index_without_secrets(chroma_server, monkeypatch):
    monkeypatch.setenv("RAG_CHROMA_TOKEN", TOKEN)
    settings = Settings.from_env(chroma_url=chroma_server.replace("http://", f"http://user:{PASSWORD}@"))
    checks = [doctor.check_chroma(settings), doctor.check_index(settings)]
    assert all(check.ok for check in checks)
    shown = json.dumps([check.to_json() for check in checks])
    assert PASSWORD not in shown and TOKEN not in shown and "http://***@127.0.0.1" in shown


def test_bench_json_shows_the_chroma_server_without_secrets(chroma_server, tmp_path, monkeypatch, capsys):
    with_password = chroma_server.replace("http://", f"http://user:{PASSWORD}@")
    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RAG_PAPER_MODEL", "none")
    monkeypatch.setenv("RAG_CHROMA_TOKEN", TOKEN)
    assert main(["bench", "--scale", "20", "--rounds", "1", "--eval", "0", "--json",
                 "--chroma-url", with_password]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["machine"]["store"] == chroma_server.replace("http://", "http://***@")
    assert PASSWORD not in out + err and TOKEN not in out + err


def test_eval_results_and_report_keep_no_secret(chroma_server, tmp_path, monkeypatch, capsys):
    corpus = write_corpus(tmp_path / "c.txt", SMALL_PAPERS)
    ids = [paper.paper_id for paper in load_corpus([corpus]).papers]
    questions = tmp_path / "few.jsonl"
    questions.write_text("\n".join(json.dumps({"id": f"q{n}", "type": "detail", "question": text, "gold": [gold],
                                               "answerable": True})
                                   for n, (text, gold) in enumerate([("grokking in small transformers", ids[0]),
                                                                     ("advice from other agents", ids[2])])))
    monkeypatch.setenv("RAG_CORPUS", str(corpus))
    monkeypatch.setenv("RAG_PAPER_MODEL", "none")
    monkeypatch.setenv("RAG_CHROMA_URL", chroma_server.replace("http://", f"http://user:{PASSWORD}@"))
    monkeypatch.setenv("RAG_CHROMA_TOKEN", TOKEN)
    monkeypatch.setenv("RAG_BASE_URL", f"http://user:{PASSWORD}@127.0.0.1:9/v1")
    monkeypatch.setenv("RAG_API_KEY", "key-" + TOKEN)
    out_dir = tmp_path / "run"
    assert main(["eval", "--retrieval-only", "--questions", str(questions), "--split", "all",
                 "--out", str(out_dir)]) == 0
    out, err = capsys.readouterr()
    saved = {path.name: path.read_bytes().decode("utf-8", "replace") for path in out_dir.iterdir()}
    assert {"results.json", "report.md"} <= set(saved)
    snapshot = json.loads(saved["results.json"])["manifest"]["settings"]
    assert snapshot["chroma_url"] == chroma_server.replace("http://", "http://***@")
    assert snapshot["base_url"] == "http://***@127.0.0.1:9/v1"
    assert "chroma_token" not in snapshot and "api_key" not in snapshot
    for text in [out, err, *saved.values()]:
        assert PASSWORD not in text and TOKEN not in text
