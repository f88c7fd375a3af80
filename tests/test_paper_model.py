"""The paper model: its weights joined from part packages, its vectors cached, its score mixed into ranking."""

import hashlib
import io
import zipfile

import numpy as np
import pytest

import rag.embedding
import rag.paper_model
from conftest import SMALL_PAPERS
from rag.cli import main
from rag.embed_cache import EmbeddingCache, cache_path
from rag.errors import ModelError, UsageError
from rag.ingest import ingest
from rag.retrieve import Retriever
from rag.settings import Settings

FAKE_MODEL = "fake-paper-model"


class FavouringModel:
    """8-d vectors: a text mentioning `word` points one way, every other text and the question another."""

    def __init__(self, word: str):
        self.word = word
        self.texts: list[str] = []

    def _vector(self, text: str) -> list[float]:
        return [1.0] + [0.0] * 7 if self.word in text.lower() else [0.0, 1.0] + [0.0] * 6

    def get_text_embedding_batch(self, texts):
        self.texts += texts
        return [self._vector(t) for t in texts]

    def get_query_embedding(self, text):
        return [1.0] + [0.0] * 7


@pytest.fixture
def favouring(monkeypatch):
    """The paper model favours the compiler paper, whatever the question says."""
    model = FavouringModel("compiler")
    monkeypatch.setattr(rag.paper_model, "load_embed_model", lambda name, batch_size, cache_dir: model)
    return model


def settings_with(small_corpus, tmp_path, **overrides) -> Settings:
    """Settings whose paper model is the fake the test put in place of the torch loader (so questions are
    embedded on torch too)."""
    return Settings.from_env(corpus=small_corpus, derived_cache_dir=tmp_path / "cache", embed_runtime="torch",
                             **overrides)


def test_the_paper_score_is_mixed_into_the_dense_score(small_corpus, tmp_path, favouring):
    question = "Which paper studies grokking and weight decay?"
    with Retriever(settings_with(small_corpus, tmp_path, paper_model="none")) as chunks_only:
        alone = chunks_only.search(question, k=3)
    assert alone.hits[0].paper.authors[0] == "Ada Lovelace" and alone.hits[0].paper_score is None
    settings = settings_with(small_corpus, tmp_path, paper_model=FAKE_MODEL, paper_model_weight=2.0,
                             word_drop_weight=0, retrieval="dense")
    with Retriever(settings) as mixed:
        hits = mixed.search(question, k=3).hits
    assert hits[0].paper.authors[0] == "Grace Hopper", "the paper model outweighs the chunk model 2:1"
    for hit in hits:
        assert hit.score == pytest.approx((hit.dense_score + 2.0 * hit.paper_score) / 3, abs=1e-6)
    assert [h.paper_score for h in hits] == [1.0, 0.0, 0.0] and hits[0].to_json()["paper_score"] == 1.0


def test_paper_vectors_are_embedded_at_ingest_once_and_read_from_the_cache(small_corpus, tmp_path, favouring):
    settings = settings_with(small_corpus, tmp_path, paper_model=FAKE_MODEL)
    ingest(settings, progress=False)
    assert len(favouring.texts) == len(SMALL_PAPERS)
    ingest(settings, progress=False, rebuild=True)
    with Retriever(settings) as retriever:
        retriever.search("compilers", k=2)
    assert len(favouring.texts) == len(SMALL_PAPERS), "a rebuild and a new process read the cached vectors"
    with EmbeddingCache(cache_path(settings.derived_cache_dir, FAKE_MODEL)) as cache:
        assert len(cache) == len(SMALL_PAPERS)


def test_a_search_over_papers_the_cache_lacks_embeds_them_first(small_corpus, tmp_path, favouring):
    ingest(settings_with(small_corpus, tmp_path, paper_model="none"), progress=False)
    said = []
    with Retriever(settings_with(small_corpus, tmp_path, paper_model=FAKE_MODEL), notify=said.append) as retriever:
        assert retriever.search("compilers", k=1).hits[0].paper_score == 1.0
    assert len(favouring.texts) == len(SMALL_PAPERS) and "Embedding 3 abstracts" in said[0]


def test_ranking_with_the_paper_model_does_not_depend_on_k(small_corpus, tmp_path, favouring):
    with Retriever(settings_with(small_corpus, tmp_path, paper_model=FAKE_MODEL)) as retriever:
        for question in ("agents that learn from advice", "machine code", "grokking"):
            one = retriever.search(question, k=1).hits
            assert [h.paper.paper_id for h in retriever.search(question, k=3).hits][:1] == [one[0].paper.paper_id]


@pytest.fixture
def fake_mpnet_parts(tmp_path, monkeypatch):
    """A zip of a tiny 'all-mpnet-base-v2' folder split in three parts, with the constants to match."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zipped:
        zipped.writestr("all-mpnet-base-v2/config.json", "{}")
        zipped.writestr("all-mpnet-base-v2/model.safetensors", b"w" * 500)
    data = buffer.getvalue()
    third = len(data) // 3 + 1
    parts = []
    for n in range(3):
        parts.append(tmp_path / f"part{n}")
        parts[-1].write_bytes(data[n * third:(n + 1) * third])
    monkeypatch.setattr(rag.embedding, "MPNET_ZIP_SIZE", len(data))
    monkeypatch.setattr(rag.embedding, "MPNET_ZIP_SHA256", hashlib.sha256(data).hexdigest())
    monkeypatch.setattr(rag.embedding, "MPNET_WEIGHTS_SIZE", 500)
    monkeypatch.setattr(rag.embedding, "MPNET_WEIGHTS_SHA256", hashlib.sha256(b"w" * 500).hexdigest())
    monkeypatch.setattr(rag.embedding, "_mpnet_parts", lambda: parts)
    return parts


def test_the_paper_model_is_joined_unpacked_and_reused(tmp_path, fake_mpnet_parts):
    folder = rag.embedding.model_path("all-mpnet-base-v2", tmp_path / "cache")
    assert folder == tmp_path / "cache" / "models" / "all-mpnet-base-v2"
    assert (folder / "model.safetensors").stat().st_size == 500
    assert sorted(p.name for p in folder.parent.iterdir()) == ["all-mpnet-base-v2"], "no zip or temp folder left"
    fake_mpnet_parts[0].write_bytes(b"changed")
    assert rag.embedding.model_path("all-mpnet-base-v2", tmp_path / "cache") == folder, "not joined again"


def test_unpacked_paper_model_weights_changed_in_place_are_unpacked_again(tmp_path, fake_mpnet_parts):
    weights = rag.embedding.model_path("all-mpnet-base-v2", tmp_path / "cache") / "model.safetensors"
    weights.write_bytes(b"x" * 500)   # same size, other bytes
    rag.embedding.model_path("all-mpnet-base-v2", tmp_path / "cache")
    assert weights.read_bytes() == b"w" * 500


def test_a_corrupt_paper_model_part_is_an_error_that_leaves_nothing(tmp_path, fake_mpnet_parts):
    fake_mpnet_parts[1].write_bytes(b"x" * fake_mpnet_parts[1].stat().st_size)
    with pytest.raises(ModelError, match="corrupt.*models.txt"):
        rag.embedding.model_path("all-mpnet-base-v2", tmp_path / "cache")
    assert list((tmp_path / "cache" / "models").iterdir()) == []


def test_a_missing_paper_model_part_says_how_to_install_it_or_turn_it_off(monkeypatch):
    def not_installed(name):
        raise rag.embedding.importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(rag.embedding.importlib.metadata, "distribution", not_installed)
    with pytest.raises(ModelError, match=r"models\.txt.*RAG_PAPER_MODEL=none"):
        rag.embedding._mpnet_parts()


def test_the_bundled_paper_model_scores_a_paraphrase_above_an_unrelated_abstract():
    model = rag.embedding.load_embed_model("all-mpnet-base-v2", 8, Settings().cache_dir)
    question, related, unrelated = (np.asarray(v) for v in (
        model.get_query_embedding("keeping a reasoning model's write-ups from ballooning"),
        model.get_text_embedding("We curb length growth of chain-of-thought traces in RL-trained LLMs."),
        model.get_text_embedding("We study the spectral gap of random regular graphs.")))
    assert question @ related > question @ unrelated + 0.2


def test_paper_scores_rank_only_the_papers_that_pass_the_filters():
    vectors = rag.paper_model.PaperVectors(Settings(paper_model=FAKE_MODEL, embed_runtime="torch"))
    vectors.ids, vectors.rows = ("a", "b", "c"), {"a": 0, "b": 1, "c": 2}
    vectors.matrix = np.array([[0.1, 0.0], [0.9, 0.0], [0.5, 0.0]], dtype=np.float32)
    query = np.array([1.0, 0.0], dtype=np.float32)
    every = vectors.scores(query)
    assert every.top(2) == ["b", "c"] and every.top(10) == ["b", "c", "a"]
    assert every.get("a") == pytest.approx(0.1) and every.get("unknown") is None
    filtered = vectors.scores(query, allowed={"a", "c", "not-held"})
    assert filtered.top(5) == ["c", "a"] and filtered.get("b") is None
    assert rag.paper_model.PaperScores().top(3) == [] and rag.paper_model.PaperScores().get("a") is None


class WeightedWordsModel:
    """Unit bag-of-words vectors over a tiny vocabulary in which "chatbot" weighs twice the other words."""

    VOCABULARY = {"chatbot": 2.0, "grader": 1.0, "answers": 1.0}

    def _vector(self, text: str) -> list[float]:
        words = [w.strip("?,.") for w in text.lower().split()]
        vector = np.array([weight * words.count(word) for word, weight in self.VOCABULARY.items()])
        return list(vector / np.linalg.norm(vector))

    def get_query_embedding(self, text):
        return self._vector(text)

    def get_text_embedding_batch(self, texts):
        return [self._vector(t) for t in texts]


def paper_vectors_of(monkeypatch, abstracts: dict[str, str], word_drop_weight: float):
    model = WeightedWordsModel()
    monkeypatch.setattr(rag.paper_model, "load_embed_model", lambda name, batch_size, cache_dir: model)
    vectors = rag.paper_model.PaperVectors(Settings(paper_model=FAKE_MODEL, embed_runtime="torch", word_drop_weight=word_drop_weight))
    vectors.ids = tuple(abstracts)
    vectors.rows = {pid: row for row, pid in enumerate(vectors.ids)}
    vectors.matrix = np.array([model._vector(text) for text in abstracts.values()], dtype=np.float32)
    return vectors


def test_a_paper_that_matches_one_striking_word_ranks_below_the_one_that_matches_the_question(monkeypatch):
    abstracts = {"chatbot users": "A survey of chatbot users.", "grading": "A small model as grader of answers."}
    question = "Can a small chatbot be the grader of answers?"
    plain = paper_vectors_of(monkeypatch, abstracts, word_drop_weight=0)
    assert plain.query_vector(question).shape[0] == 1
    assert plain.scores(plain.query_vector(question)).top(2) == ["chatbot users", "grading"]
    robust = paper_vectors_of(monkeypatch, abstracts, word_drop_weight=0.7)
    query = robust.query_vector(question)
    assert query.shape[0] == 1 + 4, "the question, then one row per content word left out (chatbot, grader, answers, small)"
    scores = robust.scores(query)
    assert scores.top(2) == ["grading", "chatbot users"]
    assert scores.get("chatbot users") == pytest.approx(0.3 * WeightedWordsModel()._vector(question)[0], abs=1e-6), \
        "without 'chatbot' the question shares nothing with that abstract"


def test_word_drop_variants_leave_out_each_distinct_content_word_everywhere_it_occurs():
    variants = rag.paper_model.word_drop_variants("Could a chatbot's grader beat a huge Chatbot? Any chatbot.")
    assert variants == ["Could a 's grader beat a huge ? Any .", "Could a chatbot's beat a huge Chatbot? Any chatbot.",
                        "Could a chatbot's grader a huge Chatbot? Any chatbot.",
                        "Could a chatbot's grader beat a Chatbot? Any chatbot."]
    assert rag.paper_model.word_drop_variants("How is it done?") == [], "no content word, no variant"
    assert rag.paper_model.word_drop_variants("compilers?") == [], "one content word: nothing would be left"
    many = " ".join(f"word{n:02d}x" for n in range(40))
    assert len(rag.paper_model.word_drop_variants(many)) == rag.paper_model.MAX_DROPPED_WORDS


@pytest.mark.parametrize("weight", [-0.1, 1.5])
def test_a_word_drop_weight_outside_0_to_1_is_a_usage_error(weight):
    with pytest.raises(UsageError, match="word drop weight must be between 0 and 1"):
        Settings(word_drop_weight=weight)


def test_a_negative_paper_model_weight_is_a_usage_error():
    with pytest.raises(UsageError, match="paper model weight must be 0 or more"):
        Settings(paper_model_weight=-1)


def test_a_paper_model_folder_that_holds_no_model_is_a_one_line_error(real_index_home, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("RAG_HOME", str(real_index_home))
    monkeypatch.setenv("RAG_PAPER_MODEL", str(tmp_path / "no-model-here"))
    assert main(["search", "grokking"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no sentence-transformers model in" in err[0] and "RAG_PAPER_MODEL" in err[0]
