"""Shared fixtures: every test gets its own RAG_HOME, the session's derived caches are a temp dir (the
model files stay in the user's cache dir), and the real corpus is indexed once per session."""

import os
from pathlib import Path

import pytest

from rag import llm
from rag.ingest import ingest
from rag.settings import Settings

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data"
HEADER = "论文检索"


@pytest.fixture(scope="session")
def derived_cache(tmp_path_factory) -> Path:
    """The session's derived caches (embeddings, translations, verdicts): empty at the start, so no test
    reads what the user's runs cached; filled as the session goes (real_index_home embeds data/ once)."""
    return tmp_path_factory.mktemp("derived-cache")


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch, derived_cache):
    """Point rag's user-state directory at a temp dir, its derived caches at the session's, and clear any
    other RAG_* setting."""
    for name in list(os.environ):
        if name.startswith("RAG_"):
            monkeypatch.delenv(name)
    home = tmp_path / "rag-home"
    monkeypatch.setenv("RAG_HOME", str(home))
    monkeypatch.setenv("RAG_DERIVED_CACHE_DIR", str(derived_cache))
    return home


@pytest.fixture(scope="session")
def real_index_home(tmp_path_factory, derived_cache) -> Path:
    """A RAG_HOME holding the index of data/, built once for the session."""
    home = tmp_path_factory.mktemp("real-index")
    ingest(Settings(home=home, corpus=DATA, derived_cache_dir=derived_cache), progress=False)
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


FAKE_LLAMA_CPP = '''
import os, signal
__version__ = "0.0.0-fake"
MODE = os.environ.get("FAKE_ENGINE", "works")


class _ModelParams:
    use_extra_bufts = True


class llama_cpp:   # the low-level module, as far as rag.engine.new_llama uses it
    @staticmethod
    def llama_model_default_params():
        return _ModelParams()


class Llama:
    def __init__(self, **options):
        repacked = " repacked" if llama_cpp.llama_model_default_params().use_extra_bufts else ""
        with open(os.environ["FAKE_ENGINE_LOG"], "a") as log:
            log.write(f"load {options.get('n_threads')}{repacked}\\n")
        if MODE == "sigill":
            os.kill(os.getpid(), signal.SIGILL)
        if MODE == "broken":
            raise OSError("libggml-cpu.so: cannot open shared object file")

    def create_completion(self, prompt, **options):
        return {"usage": {"prompt_tokens": 42}, "choices": [{"text": "ok"}]}

    def close(self):
        pass


def llama_print_system_info():
    return b"CPU : AVX2 = 1 | FAKE = 1 |"
'''


@pytest.fixture
def fake_engine(tmp_path, monkeypatch):
    """Children started from now on import a fake llama_cpp (FAKE_ENGINE=sigill|broken|works); returns
    the file each model load is logged to."""
    package = tmp_path / "fake-engine" / "llama_cpp"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(FAKE_LLAMA_CPP)
    log = tmp_path / "loads.log"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(package.parent), str(REPO)]))
    monkeypatch.setenv("FAKE_ENGINE_LOG", str(log))
    return log


@pytest.fixture
def model_file(tmp_path) -> Path:
    """A sparse file of the bundled model's size, recorded as checked: local_model_file() takes it as
    already joined (until it is changed)."""
    from rag.model_files import record_verified

    target = tmp_path / "cache" / "models" / llm.GGUF_NAME
    target.parent.mkdir(parents=True)
    with open(target, "wb") as out:
        out.truncate(llm.GGUF_SIZE)
    record_verified(target, llm.GGUF_SHA256)
    return target
