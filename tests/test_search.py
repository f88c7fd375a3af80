"""Paper-level search on the real corpus: ranking, filters, the JSON contract, first-run ingest."""

import pytest

from conftest import DATA, SMALL_PAPERS, write_corpus
from rag.corpus import clean_text
from rag.errors import UsageError
from rag.retrieve import Filters, Retriever, author_matches
from rag.settings import Settings


@pytest.fixture
def retriever(real_settings):
    with Retriever(real_settings) as opened:
        yield opened


def first_authors(result):
    return [hit.paper.authors[0] for hit in result.hits]


def test_reasoning_length_finds_shrivastava_in_top_3(retriever):
    result = retriever.search("what methods reduce reasoning length?")
    assert "Vaishnavi Shrivastava" in first_authors(result)[:3]


@pytest.mark.parametrize("question", ["Which papers study grokking?",
                                      "Which papers study grokking, and what do they find?"])
def test_grokking_finds_both_grokking_papers_in_top_5(retriever, question):
    result = retriever.search(question)
    assert {"Neil Mallinar", "Themistoklis Haris"} <= set(first_authors(result)[:5])


def test_a_name_few_papers_use_puts_its_paper_first(retriever, real_settings):
    """'ODESteer' is one paper's method; asked about with 'TruthfulQA', which another paper uses too, that
    paper came second without the boost for a name the question writes."""
    question = "What improvement does ODESteer report on TruthfulQA?"
    assert "ODESteer" in retriever.search(question).hits[0].paper.text
    with Retriever(real_settings.with_overrides(name_weight=0.0)) as plain:
        assert "ODESteer" not in plain.search(question).hits[0].paper.text


def test_the_words_that_ask_for_papers_are_not_searched_by_keyword(retriever):
    from rag.keyword_index import searched_words

    assert searched_words("Which Papers study grokking, and what do they find?").split() == \
        ["which", "grokking,", "and", "what", "do", "they", "?"]
    index = retriever.keyword_index
    assert index.scores("Which papers study grokking?", 80) == index.scores("Which grokking?", 80)
    assert index.ceiling("papers studies findings") == 0.0 and index.scores("papers", 5) == {}


@pytest.mark.parametrize("question, searched", [
    ("Compare the grokking papers", "the grokking"),
    ("Please summarise the work that uses NetHack", "the work that uses nethack"),
    ("Give me a summary of the multi-agent debate paper", "the multi-agent debate"),
    ("tell me about auctions", "auctions"),
    ("Can you explain how GFPO works?", "how gfpo works?"),
    ("Which papers compare grokking across models?", "which compare grokking across models?"),   # not an opening request
    ("listing every causal graph", "listing every causal graph"),
])
def test_an_opening_request_is_not_searched_by_keyword(question, searched):
    from rag.keyword_index import searched_words

    assert " ".join(searched_words(question).split()) == searched


def test_an_opening_request_does_not_outweigh_a_rare_topic_word(retriever):
    """'compare' is used by as few abstracts as 'grokking': searched, it made a paper that says
    'compared' rank between the two grokking papers."""
    index = retriever.keyword_index
    assert index.scores("Compare the grokking papers", 80) == index.scores("grokking", 80)


def test_results_are_distinct_papers_in_score_order(retriever):
    result = retriever.search("large language model agents", k=10)
    ids = [hit.paper.paper_id for hit in result.hits]
    scores = [hit.score for hit in result.hits]
    assert len(ids) == len(set(ids)) == 10
    assert scores == sorted(scores, reverse=True)
    assert [hit.rank for hit in result.hits] == list(range(1, 11))


def test_k_beyond_the_corpus_returns_every_paper_once(retriever):
    assert len(retriever.search("neural networks", k=500).hits) == 80


def test_json_contract(retriever):
    data = retriever.search("speech generation", k=3, filters=Filters(category="Applications")).to_json()
    assert set(data) >= {"question", "k", "filters", "index", "results", "timings"}
    assert data["filters"] == {"category": "Applications"} and data["k"] == 3
    assert data["index"].startswith("rag-papers-")
    assert set(data["timings"]) >= {"embed_s", "search_s"}
    for row in data["results"]:
        assert set(row) >= {"rank", "paper_id", "label", "authors", "category", "source", "score",
                            "abstract", "best_chunk"}
        assert isinstance(row["authors"], list) and isinstance(row["score"], float)
        assert row["best_chunk"][:60] in clean_text(row["abstract"])  # chunks come from the cleaned text
        assert row["category"].startswith("Applications · ")


def test_category_filter_exact_and_by_area(retriever):
    exact = retriever.search("learning", k=10, filters=Filters(category="deep learning · theory"))
    assert {h.paper.category for h in exact.hits} == {"Deep Learning · Theory"} and len(exact.hits) == 3
    area = retriever.search("learning", k=80, filters=Filters(category="Deep Learning"))
    assert len(area.hits) == 17 and all(h.paper.category.startswith("Deep Learning · ") for h in area.hits)


def test_unknown_category_suggests_close_ones(retriever):
    with pytest.raises(UsageError, match="did you mean 'Deep Learning · Theory'"):
        retriever.search("x", filters=Filters(category="Deep Learning · Theroy"))


@pytest.mark.parametrize("author, first_author", [
    ("Cedric Colas", "Cédric Colas"),       # accents optional
    ("colas", "Cédric Colas"),              # surname only, any case
    ("C. Colas", "Cédric Colas"),           # initials
    ("Tracey Mills", "Cédric Colas"),       # a co-author, not the first
    ("Andrew Saxe", "Loek van Rossem"),     # last position
])
def test_author_filter(retriever, author, first_author):
    result = retriever.search("learning", k=5, filters=Filters(author=author))
    assert first_authors(result) == [first_author]


def test_unknown_author_is_a_usage_error(retriever):
    with pytest.raises(UsageError, match="no indexed paper has an author matching 'Nobody Atall'"):
        retriever.search("x", filters=Filters(author="Nobody Atall"))


def test_filters_combine(retriever):
    result = retriever.search("x", filters=Filters(author="Manling Li", category="Deep Learning"))
    assert [h.paper.category for h in result.hits] == ["Deep Learning · Large Language Models"]


@pytest.mark.parametrize("question", ["", "   ", "\t\n"])
def test_empty_question_is_a_usage_error(retriever, question):
    with pytest.raises(UsageError, match="question is empty"):
        retriever.search(question)


def test_author_matches_needs_one_author_with_every_word():
    assert author_matches("Cedric Colas", ["Cédric Colas", "Tracey Mills"])
    assert not author_matches("Cedric Mills", ["Cédric Colas", "Tracey Mills"])
    assert not author_matches("", ["Cédric Colas"])


def test_first_search_on_an_empty_index_ingests_the_corpus(tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", SMALL_PAPERS)
    said = []
    with Retriever(Settings.from_env(corpus=corpus), notify=said.append) as retriever:
        result = retriever.search("compiler for business programs", k=1)
    assert any("ingesting" in message and str(corpus) in message for message in said)
    assert first_authors(result) == ["Grace Hopper"]


def test_the_keyword_index_is_kept_on_disk_and_rebuilt_when_the_papers_change(tmp_path, monkeypatch):
    from rag import keyword_index
    from rag.library import load_corpus

    papers = list(load_corpus([DATA]).papers)
    built = keyword_index.KeywordIndex(papers, tmp_path)
    saved = list(tmp_path.iterdir())
    assert [p.name for p in saved] == [keyword_index.papers_key(papers)] and (saved[0] / "complete").is_file()
    monkeypatch.setattr(keyword_index, "_build", lambda papers, stemmer: pytest.fail("rebuilt an index that was saved"))
    again = keyword_index.KeywordIndex(papers, tmp_path)
    assert again.scores("Which papers study grokking?", 5) == built.scores("Which papers study grokking?", 5)
    monkeypatch.undo()
    fewer = keyword_index.KeywordIndex(papers[:40], tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [keyword_index.papers_key(papers[:40])]   # the old one is gone
    assert set(fewer.scores("Which papers study grokking?", 80)) <= {p.paper_id for p in papers[:40]}


def test_a_saved_keyword_index_missing_a_file_is_built_again(tmp_path):
    from rag import keyword_index
    from rag.library import load_corpus

    papers = list(load_corpus([DATA]).papers)
    built = keyword_index.KeywordIndex(papers, tmp_path)
    saved = tmp_path / keyword_index.papers_key(papers)
    (saved / "paper_ids.json").unlink()   # marked complete, but a file is gone
    again = keyword_index.KeywordIndex(papers, tmp_path)
    assert again.scores("Which papers study grokking?", 80) == built.scores("Which papers study grokking?", 80)
    assert (saved / "paper_ids.json").is_file() and (saved / "complete").is_file()


def test_the_papers_holding_a_questions_rare_words(tmp_path):
    from rag import keyword_index
    from rag.library import load_corpus

    papers = list(load_corpus([DATA]).papers)
    index, labels = keyword_index.KeywordIndex(papers, tmp_path), {p.paper_id: p.label for p in papers}
    holding = lambda question: sorted(labels[pid] for pid in index.holding_rare_words(question, 0.05))
    assert holding("Which papers study grokking?") == ["Haris et al.", "Mallinar et al."]   # both use the word
    assert holding("hadwiger nelson problem") == ["Mundinger et al."]
    assert holding("What GPU did rStar-Math train on?") == []   # no paper uses both rare words
    assert holding("What do the papers propose?") == []         # no rare word: no paper is picked out
    assert holding("How do the papers here model car traffic in cities?") == []   # no paper says car or traffic
    assert index.rare_words("Which papers study grokking, and what do they find?", 0.05) == {"grokk"}
    assert index.stems("Their regularizer catalyzes grokking.") >= {"grokk"}
    saved = keyword_index.KeywordIndex(papers, tmp_path)        # read back from disk: the same
    assert saved.holding_rare_words("Which papers study grokking?", 0.05) == index.holding_rare_words(
        "Which papers study grokking?", 0.05)


def test_the_papers_using_a_name_the_question_writes(tmp_path):
    from rag import keyword_index
    from rag.claims import names_given
    from rag.library import load_corpus

    papers = list(load_corpus([DATA]).papers)
    index, labels = keyword_index.KeywordIndex(papers, tmp_path), {p.paper_id: p.label for p in papers}
    named = lambda question: sorted(labels[pid] for pid in index.holding_names(names_given(question, ""), 0.10))
    assert named("who's behind ElasticMM?") == ["Liu et al."]   # a name however little else the question says
    assert named("which papers have anything on Sokoban or NetHack?") == ["Bush et al.", "Paglieri et al."]
    assert named("how much does ODESteer gain on TruthfulQA?") == ["Zhao et al."]
    assert named("which papers use gpt-4o somewhere?") == ["Boehmer et al.", "Greisinger and Eger", "Yang et al."]
    assert named("how many problems does rStar-Math solve?") == ["Guan et al."]   # 'rstar'; 'math' is a word
    assert named("which paper reports win-rate gains on Arena-Hard?") == []   # English words, however joined
    assert named("which papers report AIME numbers?") == ["Guan et al.", "Shrivastava et al."]   # not 'aim'
    assert named("how does rStar-Math aim?") == ["Guan et al."]   # 'aim' is a word, not a name
    assert named("how does serl work?") == []   # written as a word, not as a name
    assert named("How do I tell what a chatbot learned from?") == []   # 'I' is too short, 'chatbot' no name
    assert named("Which papers study the Chromatic Number of the plane?") == []   # English words are no names
    assert named("a 3D model of a room from one photo") == []   # too short to be a paper's own name
    assert named("What does FooNet7 do?") == []             # a name no paper uses
    assert index.holding_names(["ElasticMM"], 0.10) == {pid for pid, label in labels.items() if label == "Liu et al."}


def english_eval_questions():
    from rag.eval.questions import default_question_sets, load_questions

    papers = {p.paper_id for p in load_corpus_papers()}
    return [q for path in default_question_sets().values() for q in load_questions(path, papers) if q.lang == "en"]


def load_corpus_papers():
    from rag.library import load_corpus

    return load_corpus([DATA]).papers


class FixedEmbedder:
    """Hands out vectors embedded beforehand in one batch: the test searches each question 8 times."""

    def __init__(self, vectors: dict):
        self.vectors = vectors

    def get_query_embedding(self, text):
        return self.vectors[text]


@pytest.fixture(scope="module")
def question_vectors(real_index_home):
    from rag.embedding import load_embed_model

    from rag.keyword_index import KeywordIndex
    from rag.spelling import SpellingFixer

    fixer = SpellingFixer(KeywordIndex(load_corpus_papers()))   # a search embeds the question as fixed
    texts = sorted({text for q in english_eval_questions() for text in (q.question, fixer.fix(q.question))})
    model = load_embed_model(Settings().embed_model, 64)
    return dict(zip(texts, model.get_text_embedding_batch(texts)))


@pytest.mark.parametrize("filtered", [False, True], ids=["no filter", "category filter"])
def test_the_first_results_do_not_depend_on_k(retriever, filtered, question_vectors, monkeypatch):
    """The first n of `-k m` are the results of `-k n` (n = 1, 5; m = 5, 10, 20), for every English eval question."""
    monkeypatch.setattr(retriever, "embed_model", FixedEmbedder(question_vectors))
    areas = {p.paper_id: p.category.split(" · ")[0] for p in load_corpus_papers() if p.category}
    differ = []
    for question in english_eval_questions():
        area = next((areas[g] for g in question.gold if g in areas), None)
        if filtered and area is None:
            continue
        filters = Filters(category=area) if filtered else Filters()
        ranked = {k: [h.paper.paper_id for h in retriever.search(question.question, k=k, filters=filters).hits]
                  for k in (1, 5, 10, 20)}
        differ += [(question.id, n, m) for n in (1, 5) for m in (5, 10, 20) if m >= n and ranked[m][:n] != ranked[n]]
    assert differ == []
