"""Retrieval evaluation: metrics, the tune/test split, lexical overlap, the CI gate, bad question files."""

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from conftest import DATA
from rag.cli import main
from rag.errors import EvalError
from rag.eval.questions import QUESTION_TYPES, default_question_sets, default_thresholds, load_questions, split_part
from rag.eval.retrieval import question_overlaps, score_ranking
from rag.eval.overlap import lexical_overlap
from rag.eval.run import check_thresholds, evaluate
from rag.library import load_corpus

PAPERS = {p.paper_id: p.text for p in load_corpus([DATA]).papers}
TRANSLATIONS = Path(__file__).with_name("eval_translations.json")


class RecordedTranslations:
    """Stands in for the LLM that translates the eval's Chinese questions: it answers with the bundled
    LLM's recorded English of each (TRANSLATIONS), and fails on any other prompt."""

    backend, model = "fake", "recorded-translations"

    def __init__(self):
        self.english = json.loads(TRANSLATIONS.read_text(encoding="utf-8"))["translations"]

    def stream(self, messages, schema, max_tokens):
        prompt = messages[-1]["content"]
        found = [english for question, english in self.english.items() if question in prompt]
        assert found, f"no recorded translation in {TRANSLATIONS.name} for this prompt:\n{prompt}"
        yield json.dumps({"english": found[0]})


@pytest.fixture(scope="module")
def compared(real_index_home, derived_cache):
    """Every method over the test parts; the Chinese questions are searched in the LLM's recorded English,
    so the gate reads no translation the user's runs cached and never loads the LLM."""
    from rag.settings import Settings

    return evaluate(Settings(home=real_index_home, derived_cache_dir=derived_cache),
                    ["dense", "bm25", "rrf", "hybrid"], open_model=lambda settings: RecordedTranslations())


def question_set(name):
    return load_questions(default_question_sets()[name], set(PAPERS))


def test_retrieval_meets_the_ci_thresholds(compared):
    thresholds = json.loads(default_thresholds().read_text(encoding="utf-8"))
    assert set(thresholds["test"]) >= {"lexical", "paraphrase"}
    assert check_thresholds(compared, thresholds) == []


@pytest.mark.parametrize("set_name", ["lexical", "paraphrase"])
def test_hybrid_beats_each_of_its_parts(compared, set_name):
    methods = compared["sets"][set_name]["methods"]
    overall = {m: methods[m]["overall"] for m in ("dense", "bm25", "hybrid")}
    for metric in ("recall@5", "mrr"):
        assert overall["hybrid"][metric] > max(overall["dense"][metric], overall["bm25"][metric])


@pytest.mark.parametrize("set_name, parts", [("lexical", ["dense"]), ("paraphrase", ["dense", "bm25"])])
def test_no_question_type_falls_below_a_part(compared, set_name, parts):
    """Per type, hybrid's recall@5 is not below dense's (and, on the paraphrase set, BM25's).

    On the lexical test part BM25 alone finds more of the multi-paper golds (0.927 vs 0.865)."""
    methods = compared["sets"][set_name]["methods"]
    for part in parts:
        for question_type, metrics in methods[part]["by_type"].items():
            hybrid = methods["hybrid"]["by_type"][question_type]
            assert hybrid["recall@5"] >= metrics["recall@5"], (part, question_type)


def test_results_carry_version_manifest_sets_and_types(compared):
    assert compared["version"] == 3 and compared["kind"] == "retrieval" and compared["split"] == "test"
    manifest = compared["manifest"]
    assert manifest["index"].startswith("rag-papers-")
    assert set(manifest["questions_sha256"]) == {"lexical", "paraphrase"}
    for set_name, measured in compared["sets"].items():
        hybrid = measured["methods"]["hybrid"]
        assert {"paraphrase", "detail", "multi", "author", "category", "chinese"} <= set(hybrid["by_type"]), set_name
        assert hybrid["overall"]["n"] == len(hybrid["rows"]) >= 60
        assert measured["overlap"]["overall"]["n"] >= 50


@pytest.mark.parametrize("set_name", ["lexical", "paraphrase"])
def test_the_split_is_fixed_disjoint_and_stratified_by_type(set_name):
    questions = question_set(set_name)
    tune, test = split_part(questions, "tune"), split_part(questions, "test")
    assert {q.id for q in tune} | {q.id for q in test} == {q.id for q in questions}
    assert not {q.id for q in tune} & {q.id for q in test}
    assert [q.id for q in split_part(questions, "tune")] == [q.id for q in tune]    # the same every time
    sizes, tuned = Counter(q.type for q in questions), Counter(q.type for q in tune)
    assert all(tuned[t] == sizes[t] // 2 for t in sizes)
    assert [q.id for q in split_part(questions, "tune", seed=14)] != [q.id for q in tune]


def test_the_paraphrase_set_is_far_from_the_abstracts_wording():
    """Its single-paper questions share at most a fifth of their content words with their abstract (median)."""
    import statistics

    medians = {}
    for name in ("lexical", "paraphrase"):
        single = [q for q in question_set(name) if q.type == "paraphrase"]
        medians[name] = statistics.median(question_overlaps(single, PAPERS).values())
    assert medians["paraphrase"] <= 0.20 < medians["lexical"]


def test_both_sets_cover_every_type_and_paper():
    for name in ("lexical", "paraphrase"):
        questions = question_set(name)
        assert set(QUESTION_TYPES) == {q.type for q in questions} and len(questions) >= 120
    assert {g for q in question_set("paraphrase") for g in q.gold} >= set(PAPERS) - {
        g for q in question_set("lexical") for g in q.gold}


def assert_golds_fit_their_types(questions):
    """Answerable questions have gold papers, multi-paper ones several; an unanswerable one is off the corpus (no
    gold) or next to the one paper that lacks the fact asked."""
    assert all(q.gold for q in questions if q.answerable)
    assert all(len(q.gold) >= 2 for q in questions if q.type == "multi")
    assert all(len(q.gold) <= 1 for q in questions if not q.answerable)


def assert_expected_in_gold_abstracts(questions):
    """Every `expected` string is in its question's gold abstract, verbatim."""
    assert all(e in PAPERS[q.gold[0]] for q in questions if q.expected for e in q.expected)


def test_the_holdout_set_is_worded_away_from_the_abstracts_and_states_their_facts():
    """eval/holdout.jsonl, the questions no knob was chosen on: every type, gold papers that exist, single-paper
    questions as far from the abstracts' wording as the paraphrase set's, `expected` strings in the gold abstract."""
    import statistics

    questions = load_questions(default_question_sets()["lexical"].with_name("holdout.jsonl"), set(PAPERS))
    assert set(QUESTION_TYPES) - {"category"} <= {q.type for q in questions} and len(questions) >= 80
    single = [q for q in questions if q.type == "paraphrase"]
    assert statistics.median(question_overlaps(single, PAPERS).values()) <= 0.20
    assert_expected_in_gold_abstracts(questions)


def test_the_fresh_set_has_every_type_but_categories_and_states_its_facts():
    """eval/fresh.jsonl: gold papers that exist, `expected` strings in the gold abstract, unanswerable ones
    without gold papers."""
    questions = load_questions(default_question_sets()["lexical"].with_name("fresh.jsonl"), set(PAPERS))
    assert {q.type for q in questions} == set(QUESTION_TYPES) - {"category"} and len(questions) >= 72
    assert_expected_in_gold_abstracts(questions)
    assert all(bool(q.gold) == q.answerable for q in questions)


def test_the_short_set_asks_in_a_few_words():
    """eval/short.jsonl: questions of at most 16 words; answerable ones with gold papers that exist, unanswerable
    ones either off the corpus (no gold) or next to one paper whose abstract lacks the fact asked (that paper)."""
    questions = load_questions(default_question_sets()["lexical"].with_name("short.jsonl"), set(PAPERS))
    assert len(questions) >= 50 and {q.type for q in questions} == {"paraphrase", "multi", "unanswerable"}
    assert all(len(q.question.split()) <= 16 for q in questions)
    assert_golds_fit_their_types(questions)


def test_the_request_set_opens_every_question_with_a_request():
    """eval/requests.jsonl: each question opens by saying what to do with the papers ("Compare", "Summarize",
    "Tell me about"), which keyword search leaves out (keyword_index.REQUEST); each has gold papers that exist."""
    from rag.corpus import fold
    from rag.keyword_index import REQUEST

    questions = load_questions(default_question_sets()["lexical"].with_name("requests.jsonl"), set(PAPERS))
    assert len(questions) >= 15 and {q.type for q in questions} == {"paraphrase", "multi"}
    assert all(REQUEST.search(fold(q.question)) and q.gold and q.answerable for q in questions)


def test_the_compare_set_asks_how_two_papers_differ():
    """eval/compare.jsonl: each question asks how two papers differ or compares them; gold: both papers, which exist."""
    questions = load_questions(default_question_sets()["lexical"].with_name("compare.jsonl"), set(PAPERS))
    assert len(questions) >= 24 and {q.type for q in questions} == {"multi"}
    assert all(len(q.gold) == 2 and q.answerable for q in questions)
    assert all(re.search(r"\b(?:differ|difference|compare|contrast|distinguish)|不同|区别", q.question, re.IGNORECASE)
               for q in questions)


def test_the_casual_set_asks_as_users_type():
    """eval/casual.jsonl: questions typed casually; answerable ones with gold papers that exist, several for a
    multi-paper one; unanswerable ones off the corpus (no gold) or next to the one paper that lacks the fact."""
    questions = load_questions(default_question_sets()["lexical"].with_name("casual.jsonl"), set(PAPERS))
    assert len(questions) >= 170 and {q.type for q in questions} == {"paraphrase", "detail", "multi", "author",
                                                                       "unanswerable"}
    assert_golds_fit_their_types(questions)


def test_the_terse_set_asks_in_users_few_words():
    """eval/terse.jsonl: short questions as users type them; answerable ones with gold papers that exist (several
    for a multi-paper one) and `expected` strings in the gold abstract, unanswerable ones off the corpus."""
    questions = load_questions(default_question_sets()["lexical"].with_name("terse.jsonl"), set(PAPERS))
    assert len(questions) >= 20 and all(len(q.question.split()) <= 20 for q in questions)
    assert {q.type for q in questions} == {"paraphrase", "detail", "multi", "author", "unanswerable"}
    assert all(bool(q.gold) == q.answerable for q in questions)
    assert all(len(q.gold) >= 2 for q in questions if q.type == "multi")
    assert_expected_in_gold_abstracts(questions)


def test_the_everyday_set_asks_as_users_do():
    """eval/everyday.jsonl: questions in users' words, every type but category; answerable ones with gold papers
    that exist (several for a multi-paper one) and `expected` strings in the gold abstract; unanswerable ones off
    the corpus or next to the one paper that lacks the fact."""
    questions = load_questions(default_question_sets()["lexical"].with_name("everyday.jsonl"), set(PAPERS))
    assert len(questions) >= 20 and {q.type for q in questions} == {"paraphrase", "detail", "multi", "author",
                                                                       "unanswerable", "chinese"}
    assert_golds_fit_their_types(questions)
    assert_expected_in_gold_abstracts(questions)


def test_a_set_without_gold_papers_is_measured_for_answers_only():
    """A questions file of unanswerable questions alone (eval/nearmiss.jsonl) has nothing to rank: no retrieval
    rows, and no error."""
    from rag.eval.retrieval import evaluate_set
    from rag.settings import Settings

    questions = load_questions(default_question_sets()["lexical"].with_name("nearmiss.jsonl"), set(PAPERS))
    assert len(questions) >= 20 and {q.type for q in questions} == {"unanswerable"}
    assert not any(q.gold or q.answerable for q in questions)
    measured = evaluate_set(Settings(), ["hybrid"], questions, PAPERS)
    assert measured["methods"] == {} and measured["questions"] == len(questions)


@pytest.mark.parametrize("question, abstracts, expected", [
    ("Which papers study grokking?", ["This paper studies grokking."], 1.0),          # paper, studi, grokk
    ("Which papers study grokking?", ["Grokking appears late.", "Nothing here."], 1 / 3),
    ("squeeze and restore networks", ["Autoencoders are networks."], 1 / 3),
    ("the of and", ["anything"], None),                                               # no content words
])
def test_lexical_overlap(question, abstracts, expected):
    found = lexical_overlap(question, abstracts)
    assert found == expected if expected is None else round(found, 3) == round(expected, 3)


@pytest.mark.parametrize("ranked, gold, expected", [
    (["a", "b", "c"], {"a"}, {"recall@1": 1.0, "recall@5": 1.0, "mrr": 1.0, "ndcg@10": 1.0}),
    (["x", "a", "b"], {"a", "b"}, {"recall@1": 0.0, "recall@5": 1.0, "mrr": 0.5}),
    (["x", "y"], {"a"}, {"recall@10": 0.0, "mrr": 0.0, "ndcg@10": 0.0}),
    ([str(i) for i in range(10)] + ["a"], {"a"}, {"recall@10": 0.0, "mrr": 1 / 11}),
])
def test_score_ranking(ranked, gold, expected):
    scores = score_ranking(ranked, gold)
    assert {k: round(scores[k], 4) for k in expected} == {k: round(v, 4) for k, v in expected.items()}


def test_ndcg_rewards_gold_near_the_top():
    assert score_ranking(["a", "x", "b"], {"a", "b"})["ndcg@10"] > score_ranking(["x", "a", "b"], {"a", "b"})["ndcg@10"]


GOOD = {"id": "q1", "type": "detail", "question": "How much?", "gold": ["p1"], "answerable": True}


@pytest.mark.parametrize("lines, problem", [
    (["{not json"], ":1: not valid JSON"),
    ([json.dumps(GOOD), json.dumps({**GOOD, "gold": ["nope"]})], ":2: gold paper 'nope' is not in the index"),
    ([json.dumps({**GOOD, "type": "trivia"})], ":1: unknown type 'trivia'"),
    ([json.dumps({k: v for k, v in GOOD.items() if k != "question"})], ":1: field 'question' must be a str"),
    (["", json.dumps(GOOD), json.dumps(GOOD)], ":3: question id 'q1' is used twice"),
    ([""], "no questions in this file"),
])
def test_bad_questions_files(tmp_path, lines, problem):
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(EvalError) as caught:
        load_questions(path, {"p1"})
    assert problem in str(caught.value) and "\n" not in str(caught.value)


def test_cli_eval_writes_a_run_with_a_chart_and_gates(real_index_home, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("RAG_HOME", str(real_index_home))
    strict = tmp_path / "strict.json"
    strict.write_text(json.dumps({"tune": {"paraphrase": {"hybrid": {"overall": {"recall@10": 1.01}}}}}),
                      encoding="utf-8")
    code = main(["eval", "--retrieval-only", "--split", "tune", "--types", "detail,author", "--out",
                 str(tmp_path / "run"), "--thresholds", str(strict)])
    out, err = capsys.readouterr()
    assert code == 1 and "| paraphrase | hybrid | overall |" in out and "| lexical | hybrid | author |" in out
    assert "below threshold: paraphrase hybrid overall recall@10" in err
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["split"] == "tune" and results["sets"]["lexical"]["methods"]["hybrid"]
    report = (tmp_path / "run" / "report.md").read_text()
    assert "# Retrieval evaluation" in report and "lexical overlap" in report
    assert "![retrieval_by_type](retrieval_by_type.png)" in report
    assert (tmp_path / "run" / "retrieval_by_type.png").read_bytes().startswith(b"\x89PNG")


def test_cli_eval_measures_the_retrieval_method_answers_use(real_index_home, monkeypatch, tmp_path):
    monkeypatch.setenv("RAG_HOME", str(real_index_home))
    monkeypatch.setenv("RAG_RETRIEVAL", "dense")
    assert main(["eval", "--retrieval-only", "--types", "author", "--out", str(tmp_path / "run")]) == 0
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert list(results["sets"]["lexical"]["methods"]) == ["dense"]


def test_cli_eval_writes_its_run_under_the_current_directory(real_index_home, monkeypatch, capsys, tmp_path):
    """Not into eval/ beside the package, which is the installed tree when rag is installed."""
    monkeypatch.setenv("RAG_HOME", str(real_index_home))
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--retrieval-only", "--types", "author"]) == 0
    [run] = (tmp_path / "eval-results").iterdir()
    assert (run / "results.json").is_file() and f"to {run.relative_to(tmp_path)} in" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["eval", "--retrieval-only", "--types", "trivia"], "unknown question type 'trivia'"),
    (["eval", "--resume"], "--resume needs --out DIR"),
    (["eval", "--retrieval-only", "--compare", "dense,magic"], "unknown retrieval method 'magic'"),
])
def test_cli_eval_usage_errors(argv, message, capsys):
    assert main(argv) == 2 and message in capsys.readouterr().err


def test_cli_eval_has_no_judge_option_that_does_nothing(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["eval", "--judge", "grounding"])
    assert exited.value.code == 2 and "invalid choice: 'grounding'" in capsys.readouterr().err


def test_cli_eval_rejects_an_unknown_split(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["eval", "--retrieval-only", "--split", "half"])
    assert exited.value.code == 2 and "invalid choice: 'half'" in capsys.readouterr().err


def test_a_malformed_questions_file_exits_as_a_malformed_corpus_file_does(real_index_home, monkeypatch, tmp_path,
                                                                         capsys):
    monkeypatch.setenv("RAG_HOME", str(real_index_home))
    broken = tmp_path / "questions.jsonl"
    broken.write_text('{"id": "q1", "type": "detail"\n', encoding="utf-8")
    assert main(["eval", "--retrieval-only", "--questions", str(broken)]) == 1 == EvalError.exit_code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{broken}:1: not valid JSON" in err
