"""Named authors and categories in questions; questions in other scripts translated for search and back."""

import json
import re

import pytest

from conftest import write_corpus
from fakes import ScriptedModel, reply
from rag.library import load_corpus
from rag.mentions import MentionIndex, category_key
from rag.translate import LATIN_LANGUAGES, Translator, question_language


@pytest.fixture
def papers(small_corpus):
    return list(load_corpus([small_corpus]).papers)


def ids_of(papers, index):
    return papers[index].paper_id


@pytest.mark.parametrize("question, expected", [
    ("What did Cedric Colas find about advice?", {2}),          # accents optional
    ("what did cédric colas and colleagues show", {2}),
    ("Which paper by Colas et al. studies exploration?", {2}),   # surname et al.
    ("What did Grace M. Hopper build?", {1}),                    # a middle initial between the names
    ("Is there a paper by Ada Lovelace or Alan Turing?", {0, 2}),
    ("What did Colas say?", set()),                              # a bare surname is not enough
    ("How does colas advice help agents?", set()),
    ("What is the paper by Colas about?", {2}),                  # a capitalised surname after 'by' …
    ("Summarise Hopper's compiler paper", {1}),                  # … or before 's
    ("Is the compiler written by hopper fast?", set()),          # lower case: a word, not a name
    ("What did Lovelace and Babbage find?", {0}),                # a two-author label, as the references print it
    ("Lovelace & Babbage on grokking", {0}),
    ("Babbage and Lovelace on grokking", set()),
])
def test_named_authors(papers, question, expected):
    found = MentionIndex(papers).find(question)
    assert set(found.authors) == {ids_of(papers, i) for i in expected}


NAMED_PAPERS = [
    (None, "Houman Owhadi, Andrew Saxe", "We aggregate the predictions of several models by minimal empirical variance."),
    (None, "Grace Hopper", "We present a compiler that turns English-like statements into machine code."),
    (None, "Ada Vance", "We study the Owhadi kernel and a compiler for kernels."),
]


@pytest.fixture
def named_papers(tmp_path):
    return list(load_corpus([write_corpus(tmp_path / "named.txt", NAMED_PAPERS)]).papers)


@pytest.mark.parametrize("question, expected", [
    ("What did Saxe work on?", {0}),                # no English word, no word of the papers: a name
    ("Saxe aggregation paper", {0}),                # anywhere, the first word too
    ("what did saxe work on?", set()),              # lower case or capitals are not written as a name
    ("What did SAXE work on?", set()),
    ("What did Owhadi find?", set()),               # a word of the papers besides a name (the 'Owhadi kernel')
    ("What is the paper by Owhadi about?", {0}),    # … named where only a name can stand
    ("What did Hopper build?", set()),              # an English word
    ("Is the compiler by Hopper fast?", {1}),
])
def test_a_surname_that_is_only_a_name_names_its_author_anywhere(named_papers, tmp_path, question, expected):
    from rag.keyword_index import KeywordIndex

    found = MentionIndex(named_papers, KeywordIndex(named_papers, tmp_path / "keyword").papers_using).find(question)
    assert set(found.authors) == {ids_of(named_papers, i) for i in expected}
    assert MentionIndex(named_papers).find(question).authors.keys() <= set(found.authors)   # without word counts: fewer


@pytest.mark.parametrize("question, expected", [
    ("Which Deep Learning · Theory papers study grokking?", {0}),
    ("which deep learning: theory papers study grokking?", {0}),
    ("Which Reinforcement Learning / Deep RL papers use advice?", {2}),
    ("Which papers on deep learning study grokking?", set()),
])
def test_named_categories(papers, question, expected):
    found = MentionIndex(papers).find(question)
    assert set(found.categories) == {ids_of(papers, i) for i in expected}


def test_category_key():
    assert category_key("Computer Vision · Vision Models & Multimodal") == "computer vision vision models and multimodal"


@pytest.mark.parametrize("text, language", [
    ("哪些论文研究了删除大语言模型中的整层网络？", "Chinese"),
    ("MLHCA 最多把效率损失降低了多少倍？", "Chinese"),
    ("どの論文が GPT-4o を評価していますか", "Japanese"),
    ("Какие статьи изучают гроккинг?", "Russian"),
    ("Which papers study grokking?", None),
    ("What does the 论文 say about GFPO and reasoning length in long answers?", None),
    ("Quels articles étudient la réduction de la longueur du raisonnement des modèles de langage ?", "French"),
    ("Welche Arbeiten untersuchen das Zusammenführen von feinabgestimmten Modellen?", "German"),
    ("Was hat Max Tegmark über das Löschen von Schichten herausgefunden?", "German"),
    ("¿Qué artículos proponen puntos de referencia para agentes?", "Spanish"),
    ("Quali articoli studiano il grokking nei transformer?", "Italian"),
    ("Welke artikelen gaan over het samenvoegen van modellen?", "Dutch"),
    ("Worum geht es in der Arbeit, an der Yejin Choi mitgeschrieben hat?", "German"),   # "in", "an": German too
    ("What did Lilian Weng and Adam Tauman Kalai measure?", None),   # langdetect alone: Indonesian
    ("Lilian Weng Adam Kalai chatbot fairness results?", None),
    ("grokking", None),
    ("give me papers on multimodal medical diagnosis", None),   # langdetect alone: Italian
    ("papers on sparse autoencoders", None),
    ("Studi recenti sul grokking nei transformer", "Italian"),   # no English function word, two Italian stopwords
    ("GFPO length reduction RL", None),
    ("ᚠᚢᚦ ᚨᚱᚲ ᚷᚹᚺ ᛁᛃᛇ", None),   # letters langdetect has no profile for: it raises, the question stays as written
])
def test_question_language(text, language):
    assert question_language(text) == language


def test_no_english_eval_question_is_taken_for_another_language():
    from rag.eval.questions import default_question_sets, eval_dir

    files = list(default_question_sets().values()) + [eval_dir() / name for name in ("nearmiss.jsonl", "holdout.jsonl")]
    rows = [json.loads(line) for path in files for line in path.read_text(encoding="utf-8").splitlines() if line]
    english = [row["question"] for row in rows if row.get("lang", "en") == "en"]
    assert len(english) > 250
    assert [q for q in english if question_language(q)] == []
    assert {question_language(row["question"]) for row in rows if row.get("lang", "en") == "zh"} == {"Chinese"}


def test_english_questions_typed_as_keywords_stay_english():
    """The eval's English questions without their function words, as a user types them into a search box."""
    from rag.eval.questions import default_question_sets, eval_dir
    from rag.translate import ENGLISH_WORDS

    files = list(default_question_sets().values()) + [eval_dir() / name for name in ("nearmiss.jsonl", "holdout.jsonl",
                                                                                      "short.jsonl")]
    rows = [json.loads(line) for path in files for line in path.read_text(encoding="utf-8").splitlines() if line]
    keywords = [" ".join(w for w in re.findall(r"[\w'-]+", row["question"]) if w.lower() not in ENGLISH_WORDS)
                for row in rows if row.get("lang", "en") == "en"]
    assert len(keywords) > 250
    assert [q for q in keywords if question_language(q)] == []


def test_every_question_of_the_languages_set_is_told_from_english():
    from rag.eval.questions import eval_dir

    rows = [json.loads(line) for line in (eval_dir() / "languages.jsonl").read_text(encoding="utf-8").splitlines()]
    found = {row["id"]: question_language(row["question"]) for row in rows}
    assert found == {row["id"]: LATIN_LANGUAGES[row["lang"]] for row in rows}


def test_translation_is_cached_and_falls_back(tmp_path):
    from rag.settings import Settings

    settings = Settings(home=tmp_path, derived_cache_dir=tmp_path / "cache")
    model = ScriptedModel({"english": "Which papers study grokking?"}, {"english": ""})
    translator = Translator(settings, model)
    assert translator.to_english("哪些论文研究顿悟现象？") == "Which papers study grokking?"
    assert Translator(settings, ScriptedModel()).to_english("哪些论文研究顿悟现象？") == \
        "Which papers study grokking?", "a second translator must read the cache, not the model"
    assert translator.to_english("另一个问题？") == "另一个问题？", "an empty translation keeps the question"
    model.enqueue({"sentences": ["一。", "二。"]})
    assert translator.from_english(["One.", "Two."], "Chinese") == ["一。", "二。"]
    model.enqueue({"sentences": ["只有一句。"]})
    assert translator.from_english(["One.", "Three."], "Chinese") == ["One.", "Three."]
    model.enqueue('Sure:\n```json\n{"sentences": ["三。", "四。"]}\n```')
    assert translator.from_english(["Three.", "Four."], "Chinese") == ["三。", "四。"]
    model.enqueue('{"sentences": ["五。", ')   # cut short: the English sentences stay
    assert translator.from_english(["Five.", "Six."], "Chinese") == ["Five.", "Six."]


@pytest.mark.parametrize("english, translated, kept", [
    ("It lifts accuracy from <7% to ≈ 90%.", "它将准确率从<7%提高到约90%。", True),   # '约' says '≈'
    ("It lifts accuracy from <7% to ≈ 90%.", "它将准确率从7%提高到约90%。", False),   # the bound is lost
    ("CogCoM has 17B parameters.", "CogCoM有170亿个参数。", False),   # the same value, written another way
    ("EmbodiedBench has 1,128 tasks.", "EmbodiedBench有1128个任务。", True),
    ("It filters by (1) length and (2) token efficiency.", "它按长度和令牌效率过滤。", True),   # a list's numbers
    ("It took 40 hours.", "花了4小时。", False)])
def test_a_translation_keeps_the_values_of_its_sentence(english, translated, kept):
    from rag.translate import keeps_values

    assert keeps_values(english, translated) is kept


def test_a_translated_sentence_that_changes_a_value_is_shown_in_english(tmp_path):
    from rag.settings import Settings

    settings = Settings(home=tmp_path, derived_cache_dir=tmp_path / "cache")
    english = ["It lifts accuracy from <7% to ≈ 90%.", "It is a masked diffusion model."]
    model = ScriptedModel({"sentences": ["它将准确率从7%提高到约90%。", "它是一个掩码扩散模型。"]})
    assert Translator(settings, model).from_english(english, "Chinese") == [english[0], "它是一个掩码扩散模型。"]
    assert Translator(settings, ScriptedModel()).from_english(english, "Chinese") == \
        [english[0], "它是一个掩码扩散模型。"], "a cached translation is checked too"


def test_search_translates_and_names_authors(real_settings, tmp_path):
    from rag.retrieve import Retriever

    # fake translations stay out of the session's cache; paper vectors would be embedded again in this one
    real_settings = real_settings.with_overrides(derived_cache_dir=tmp_path, paper_model="none")

    model = ScriptedModel({"english": "Which papers study grokking in transformers?"})
    translator = Translator(real_settings, open_model=lambda settings: model)
    with Retriever(real_settings, translator=translator) as retriever:
        result = retriever.search("哪些论文研究了 Transformer 中的顿悟（grokking）现象？")
        assert result.query == "Which papers study grokking in transformers?" and "translate_s" in result.timings
        assert result.question in model.history[0][0]["content"]
        by_name = retriever.search("What did Cedric Colas and co-authors study?")
    colas = [p for p in retriever.papers if any("Colas" in a for a in p.authors)]
    assert colas and by_name.hits[0].paper.paper_id in {p.paper_id for p in colas}


def test_answer_in_the_question_language(real_settings, tmp_path):
    from rag.answer import Answerer
    from rag.retrieve import Retriever

    real_settings = real_settings.with_overrides(derived_cache_dir=tmp_path, paper_model="none",
                                                 several_sentences=0)   # whole chunks, where the scripted claim is

    sentence = "GFPO curbs length explosion by filtering sampled responses by length and token efficiency."
    model = ScriptedModel({"english": "What methods reduce reasoning length?"}, reply((sentence, [1])),
                          {"sentences": ["GFPO 通过按长度和词元效率筛选采样的回答来抑制长度膨胀。"]})
    translator = Translator(real_settings)   # no model of its own: the Answerer shares its model with it
    with Retriever(real_settings, translator=translator) as retriever:
        answer = Answerer(real_settings, retriever, model, translator).ask("哪些方法可以缩短推理长度？")
    data = answer.to_json()
    assert data["language"] == "Chinese" and data["query"] == "What methods reduce reasoning length?"
    label = data["citations"][0]["label"]   # a name is not translated: only the claim after it is
    assert not data["abstained"] and data["answer"].startswith(f"{label}: GFPO 通过") and data["answer"].endswith("[1]")
    assert data["sentences"][0]["english"] == f"{label}: {sentence}" and data["sentences"][0]["supported"]
    assert sentence in model.history[2][-1]["content"] and label not in model.history[2][-1]["content"]
    assert "What methods reduce reasoning length?" in model.history[1][-1]["content"]


def test_a_torn_line_in_the_translation_cache_is_skipped_and_counted(tmp_path):
    from rag.disk_cache import DiskCache

    path = tmp_path / "translations.jsonl"
    whole = json.dumps({"key": "a", "value": "what is grokking?"}, ensure_ascii=False).encode("utf-8")
    torn = json.dumps({"key": "b", "value": "什么是顿悟"}, ensure_ascii=False).encode("utf-8")[:20]  # cut inside a character
    path.write_bytes(whole + b"\n" + torn + b"\n" + whole.replace(b'"a"', b'"c"') + b"\n")
    cache = DiskCache(path)
    assert cache.get("a") == cache.get("c") == "what is grokking?" and cache.get("b") is None
    assert cache.skipped == 1


def test_an_unreadable_cache_file_is_an_error_that_names_it(tmp_path):
    from rag.disk_cache import DiskCache
    from rag.errors import StoreError

    folder = tmp_path / "translations.jsonl"
    folder.mkdir()   # not a file: reading it fails whoever runs the test
    with pytest.raises(StoreError, match="translations.jsonl"):
        DiskCache(folder)
