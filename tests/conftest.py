"""Shared fixtures: every test gets its own RAG_HOME; the real corpus is indexed once per session."""

import os
from pathlib import Path

import pytest

from rag.index import ingest
from rag.settings import Settings

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data"
HEADER = "论文检索"


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    """Point rag's user-state directory at a temp dir and clear any RAG_* setting."""
    for name in list(os.environ):
        if name.startswith("RAG_"):
            monkeypatch.delenv(name)
    home = tmp_path / "rag-home"
    monkeypatch.setenv("RAG_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def real_index_home(tmp_path_factory) -> Path:
    """A RAG_HOME holding the index of data/, built once for the session."""
    home = tmp_path_factory.mktemp("real-index")
    ingest(Settings(home=home, corpus=DATA), progress=False)
    return home


@pytest.fixture
def real_settings(real_index_home, monkeypatch) -> Settings:
    monkeypatch.setenv("RAG_HOME", str(real_index_home))
    return Settings.from_env()


def write_corpus(path: Path, papers, header: str = HEADER) -> Path:
    """Write a corpus file from (category or None, authors line, abstract) triples."""
    parts = [header]
    for category, authors, abstract in papers:
        if category:
            parts.append(category)
        parts += [authors, abstract]
    path.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    return path


SMALL_PAPERS = [
    ("Deep Learning · Theory", "Ada Lovelace, Charles Babbage",
     "We study grokking in small transformers trained on modular arithmetic. Test accuracy jumps long "
     "after training accuracy saturates, and weight decay controls the delay."),
    (None, "Grace Hopper",
     "We present a compiler that turns English-like statements into machine code. It cuts programming "
     "time by $40$\\% on business workloads."),
    ("Reinforcement Learning · Deep RL", "Cédric Colas, Alan Turing 等",
     "Agents that learn from language guidance explore faster. We show that advice from other agents "
     "halves the number of episodes needed to solve sparse-reward tasks."),
]


@pytest.fixture
def small_corpus(tmp_path) -> Path:
    return write_corpus(tmp_path / "small.txt", SMALL_PAPERS)
