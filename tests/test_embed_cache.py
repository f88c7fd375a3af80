"""The embedding cache: no chunk text is embedded twice, across interrupted, rebuilt and second ingests."""

import hashlib

import numpy as np
import pytest

import rag.embedding
import rag.ingest
from conftest import DATA
from rag.embed_cache import EmbeddingCache, cache_path
from rag.errors import StoreError
from rag.ingest import ingest
from rag.library import load_corpus
from rag.settings import Settings
from rag.store import open_store
from rag.bench.synthetic import write_synthetic_corpus

N_PAPERS = 40
BATCH = rag.ingest.papers_per_batch(N_PAPERS)  # 5 batches


class Interrupted(Exception):
    """Stands for a kill: raised by the fakes to stop an ingest midway."""


class CountingEmbedModel:
    """Deterministic 8-d vectors from a hash of each text; keeps every text it was asked to embed.

    With `fail_on_call`, that call raises Interrupted instead of embedding."""

    def __init__(self, fail_on_call: int | None = None):
        self.texts: list[str] = []
        self.calls = 0
        self.fail_on_call = fail_on_call

    def get_text_embedding_batch(self, texts):
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise Interrupted(f"embed call {self.calls}")
        self.texts += texts
        return [fake_vector(t) for t in texts]


def fake_vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [b / 255 - 0.5 for b in digest[:8]]


@pytest.fixture
def settings(tmp_path, isolated_home) -> Settings:
    corpus = tmp_path / "corpus"
    write_synthetic_corpus(list(load_corpus([DATA]).papers), N_PAPERS, corpus)
    return Settings(home=isolated_home, derived_cache_dir=tmp_path / "cache", corpus=corpus, paper_model="none")


@pytest.fixture
def use_model(monkeypatch):
    """Make ingest embed with the given fake model; returns the setter."""
    def use(model):
        monkeypatch.setattr(rag.embedding, "load_embed_model", lambda name, batch_size: model)
        return model
    return use


def stored_vectors(settings) -> dict[str, list[float]]:
    with open_store(settings) as store:
        got = store.collection(create=False).get(include=["embeddings"])
    return dict(zip(got["ids"], got["embeddings"]))


def same_vectors(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[i], b[i]) for i in a)


def test_vectors_round_trip_as_float32_and_stay_on_disk(tmp_path):
    path = cache_path(tmp_path, "all-MiniLM-L6-v2")
    vectors = [[0.1, -0.2, 0.3], [1e-8, 2.5, -3.75]]
    with EmbeddingCache(path) as cache:
        assert cache.get_many(["a", "b"]) == [None, None]
        cache.put_many(["a", "b"], vectors)
    with EmbeddingCache(path) as cache:  # reopened: the vectors were committed
        got = cache.get_many(["b", "unknown", "a", "b"])
    assert got[1] is None
    assert got[0] == got[3] == np.float32(vectors[1]).tolist()
    assert got[2] == np.float32(vectors[0]).tolist()
    assert cache_path(tmp_path, "/models/other") != path


def test_an_interrupted_ingest_resumes_without_embedding_a_text_twice(settings, use_model):
    first = use_model(CountingEmbedModel(fail_on_call=3))
    with pytest.raises(Interrupted):
        ingest(settings, progress=False)
    assert first.calls == 3 and first.texts  # two batches embedded and written, the third never embedded
    second = use_model(CountingEmbedModel())
    report = ingest(settings, progress=False)
    assert report.added == N_PAPERS - 2 * BATCH and report.unchanged == 2 * BATCH
    assert report.embedded == len(second.texts) and report.cached == 0
    assert not set(first.texts) & set(second.texts)
    assert report.chunks == len(first.texts) + len(second.texts) == len(stored_vectors(settings))


def test_texts_cached_but_never_stored_are_not_embedded_again(settings, use_model, monkeypatch):
    """Killed between caching a batch's vectors and writing it to the store: the cache has them."""
    put_many = EmbeddingCache.put_many
    puts = []

    def put_then_die_on_the_third(cache, texts, vectors):
        put_many(cache, texts, vectors)
        puts.append(texts)
        if len(puts) == 3:
            raise Interrupted("after caching batch 3")
    monkeypatch.setattr(EmbeddingCache, "put_many", put_then_die_on_the_third)
    first = use_model(CountingEmbedModel())
    with pytest.raises(Interrupted):
        ingest(settings, progress=False)
    monkeypatch.setattr(EmbeddingCache, "put_many", put_many)
    second = use_model(CountingEmbedModel())
    report = ingest(settings, progress=False)
    assert report.unchanged == 2 * BATCH and report.cached == len(puts[2])
    assert not set(first.texts) & set(second.texts)
    assert report.embedded == len(second.texts) == report.chunks - len(first.texts)


def test_rebuild_and_a_second_store_embed_nothing(settings, use_model, tmp_path):
    use_model(CountingEmbedModel())
    built = ingest(settings, progress=False)
    before = stored_vectors(settings)
    idle = use_model(CountingEmbedModel())
    rebuilt = ingest(settings, progress=False, rebuild=True)
    other_store = ingest(settings.with_overrides(home=tmp_path / "other-home"), progress=False)
    assert built.embedded == built.chunks and built.cached == 0
    for report in (rebuilt, other_store):
        assert (report.added, report.embedded, report.cached) == (N_PAPERS, 0, built.chunks)
    assert idle.calls == 0
    assert same_vectors(stored_vectors(settings), before)


def test_another_embedding_model_never_reads_this_ones_vectors(settings, use_model):
    use_model(CountingEmbedModel())
    ingest(settings, progress=False)
    other = use_model(CountingEmbedModel())
    report = ingest(settings.with_overrides(embed_model="/models/another-model"), progress=False)
    assert report.cached == 0 and report.embedded == report.chunks == len(other.texts)
    assert len(list((settings.derived_cache_dir / "embeddings").glob("*.sqlite3"))) == 2


def test_cached_vectors_equal_the_real_models(small_corpus, tmp_path):
    settings = Settings.from_env(corpus=small_corpus, derived_cache_dir=tmp_path / "cache", paper_model="none")
    fresh = ingest(settings, progress=False)
    before = stored_vectors(settings)
    again = ingest(settings, progress=False, rebuild=True)
    assert (fresh.embedded, fresh.cached) == (fresh.chunks, 0)
    assert (again.embedded, again.cached) == (0, fresh.chunks)
    assert same_vectors(stored_vectors(settings), before)


def test_a_corrupt_cache_file_is_a_one_line_error_that_changes_nothing(settings, use_model):
    use_model(CountingEmbedModel())
    built = ingest(settings, progress=False)
    path = cache_path(settings.derived_cache_dir, settings.embed_model)
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    path.write_bytes(b"this is not an SQLite file " * 200)
    with pytest.raises(StoreError) as caught:
        ingest(settings, progress=False, rebuild=True)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and "delete the file" in message
    assert len(stored_vectors(settings)) == built.chunks  # --rebuild did not drop the index


@pytest.mark.parametrize("n_papers, size", [(3, 8), (80, 8), (1_000, 25), (10_000, 250), (50_000, 256)])
def test_big_ingests_write_bigger_batches(n_papers, size):
    assert rag.ingest.papers_per_batch(n_papers) == size


def test_a_cached_vector_of_the_wrong_size_is_a_miss(tmp_path):
    path = tmp_path / "cache.sqlite3"
    with EmbeddingCache(path) as cache:
        cache.put_many(["a", "b"], [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
        cache._db.execute("INSERT OR REPLACE INTO vectors VALUES (?, ?)",   # a garbled or crafted entry
                          (hashlib.sha256(b"b").digest(), np.zeros(2, dtype=np.float32).tobytes()))
        cache._db.commit()
    with EmbeddingCache(path) as cache:
        assert cache.get_many(["a", "b"]) == [[1.0, 2.0, 3.0, 4.0], None]   # b is embedded again, not used
        with pytest.raises(StoreError, match="4-dimensional vectors, but the model gave 2"):
            cache.put_many(["c"], [[1.0, 2.0]])   # another model behind the same folder


def test_a_cache_written_before_vector_sizes_were_recorded_takes_the_size_most_vectors_have(tmp_path):
    path = tmp_path / "cache.sqlite3"
    with EmbeddingCache(path) as cache:
        cache.put_many(["a", "b"], [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
        cache._db.execute("DELETE FROM meta WHERE key = 'vector_bytes'")   # as an older rag wrote it
        cache._db.execute("INSERT INTO vectors VALUES (?, ?)", (hashlib.sha256(b"c").digest(), b"\0" * 8))
        cache._db.commit()
    with EmbeddingCache(path) as cache:
        assert cache.get_many(["a", "c"]) == [[1.0, 2.0, 3.0, 4.0], None]


def test_a_model_folder_whose_model_is_replaced_gets_a_cache_of_its_own(tmp_path):
    folder = tmp_path / "my model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    before = cache_path(tmp_path, str(folder))
    assert cache_path(tmp_path, str(folder)) == before and before.name.startswith("my_model-")
    (folder / "model.safetensors").write_bytes(b"\1" * 32)   # another model in the same folder
    assert cache_path(tmp_path, str(folder)) != before
    assert cache_path(tmp_path, "all-MiniLM-L6-v2").name == "all-MiniLM-L6-v2-07db4e1f.sqlite3"   # names: unchanged
