"""Two cache folders: model files in RAG_CACHE_DIR, what rag can make again in RAG_DERIVED_CACHE_DIR."""

from pathlib import Path

from fakes import ScriptedModel
from rag import llm
from rag.ingest import ingest
from rag.settings import Settings, default_cache
from rag.translate import Translator


def test_the_derived_caches_live_in_the_cache_dir_unless_set():
    assert Settings().derived_cache_dir == Settings().cache_dir == default_cache()
    assert Settings.from_env({"RAG_CACHE_DIR": "/models"}).derived_cache_dir == Path("/models")
    both = Settings.from_env({"RAG_CACHE_DIR": "/models", "RAG_DERIVED_CACHE_DIR": "~/derived"})
    assert (both.cache_dir, both.derived_cache_dir) == (Path("/models"), Path.home() / "derived")


def test_every_derived_cache_is_written_to_the_derived_cache_dir(model_file, fake_engine, small_corpus, tmp_path):
    models, derived = model_file.parent.parent, tmp_path / "derived"
    settings = Settings(home=tmp_path / "home", corpus=small_corpus, cache_dir=models, derived_cache_dir=derived,
                        paper_model="none")
    ingest(settings, progress=False)
    translator = Translator(settings, ScriptedModel({"english": "Which papers study grokking?"}))
    translator.to_english("哪些论文研究顿悟？")
    assert llm.check_local_engine(settings) == model_file   # the model from the cache dir, its verdict derived
    assert top_names(derived) == {"embeddings", "translations.jsonl", "engine_verdicts.jsonl"}
    assert top_names(models) == {"models"}


def top_names(folder: Path) -> set[str]:
    """The first part of the path of every file under `folder`."""
    return {p.relative_to(folder).parts[0] for p in folder.rglob("*") if p.is_file()}


def test_the_test_session_keeps_its_derived_caches_apart_from_the_users(derived_cache):
    settings = Settings.from_env()
    assert settings.derived_cache_dir == derived_cache != default_cache()
    assert settings.cache_dir == default_cache()   # the model files are the user's: never joined again
