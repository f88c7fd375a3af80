"""The scale-out path: ingest and search through a real `chroma run` server on loopback."""

import pytest

import servers
from conftest import SMALL_PAPERS, write_corpus
from rag.cli import main
from rag.errors import StoreError
from rag.index import describe_index, ingest
from rag.retrieve import Retriever
from rag.settings import Settings
from rag.store import open_store


@pytest.fixture
def chroma_server(tmp_path):
    """A Chroma server on a free loopback port, stopped after the test."""
    with servers.chroma_server(tmp_path / "server-data") as url:
        yield url


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
