"""Retrieval evaluation: metrics, the CI gate against eval/thresholds.json, bad question files."""

import json

import pytest

from rag.cli import main
from rag.evaluation import EvalError, check_thresholds, default_thresholds, evaluate, load_questions, score_ranking


@pytest.fixture(scope="module")
def compared(real_index_home):
    from rag.settings import Settings

    return evaluate(Settings(home=real_index_home), ["dense", "bm25", "hybrid"])


def test_retrieval_meets_the_ci_thresholds(compared):
    thresholds = json.loads(default_thresholds().read_text(encoding="utf-8"))
    assert check_thresholds(compared, thresholds) == []


def test_hybrid_beats_each_of_its_parts(compared):
    overall = {m: compared["methods"][m]["overall"] for m in ("dense", "bm25", "hybrid")}
    for metric in ("recall@5", "mrr"):
        assert overall["hybrid"][metric] > max(overall["dense"][metric], overall["bm25"][metric])


def test_no_question_type_falls_below_dense_only(compared):
    dense, hybrid = (compared["methods"][m]["by_type"] for m in ("dense", "hybrid"))
    for question_type, metrics in dense.items():
        assert hybrid[question_type]["recall@5"] >= metrics["recall@5"], question_type


def test_results_carry_version_manifest_and_types(compared):
    assert compared["version"] == 2 and compared["kind"] == "retrieval"
    assert compared["manifest"]["index"].startswith("rag-papers-") and compared["manifest"]["questions_sha256"]
    hybrid = compared["methods"]["hybrid"]
    assert {"paraphrase", "detail", "multi", "author", "category", "chinese"} <= set(hybrid["by_type"])
    assert hybrid["overall"]["n"] == len(hybrid["rows"]) >= 120


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


def test_cli_eval_writes_a_run_and_gates(real_index_home, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("RAG_HOME", str(real_index_home))
    strict = tmp_path / "strict.json"
    strict.write_text(json.dumps({"hybrid": {"overall": {"recall@10": 1.01}}}), encoding="utf-8")
    code = main(["eval", "--retrieval-only", "--out", str(tmp_path / "run"), "--thresholds", str(strict)])
    out, err = capsys.readouterr()
    assert code == 1 and "| hybrid | overall |" in out and "below threshold: hybrid overall recall@10" in err
    assert json.loads((tmp_path / "run" / "results.json").read_text())["methods"]["hybrid"]
    assert "# Retrieval evaluation" in (tmp_path / "run" / "report.md").read_text()


@pytest.mark.parametrize("argv, message", [
    (["eval", "--retrieval-only", "--types", "trivia"], "unknown question type 'trivia'"),
    (["eval", "--resume"], "--resume needs --out DIR"),
    (["eval", "--retrieval-only", "--compare", "dense,magic"], "unknown retrieval method 'magic'"),
])
def test_cli_eval_usage_errors(argv, message, capsys):
    assert main(argv) == 2 and message in capsys.readouterr().err
