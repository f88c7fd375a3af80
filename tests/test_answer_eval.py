"""Answer evaluation: the metrics on hand-made answers, and whole `rag eval` runs on a quoting fake LLM."""

import json

import pytest

from fakes import QuotingModel, opener
from rag.eval.answers import alce_scores, contains_all, percentile, score_answer, share, summarise
from rag.cli import main
from rag.eval.questions import Question
from rag.claims import split_label
from rag.eval.judge import parse_verdict


def test_alce_recall_and_precision():
    backs = {("s1", ("a",)), ("s1", ("a", "b")), ("s2", ("a", "b")), ("s2", ("b",))}

    def supports(text, papers):
        return (text, tuple(papers)) in backs

    # s1: supported by a and b together, but b alone adds nothing -> b is irrelevant.
    # s2: b alone supports it, a does not but removing a breaks nothing -> a is irrelevant.
    # s3: cited, supported by nothing; s4: uncited.
    scores = alce_scores([("s1", ["a", "b"]), ("s2", ["a", "b"]), ("s3", ["a"]), ("s4", [])], supports)
    assert scores == {"recall": 0.5, "precision": 2 / 5}
    assert alce_scores([], supports) == {"recall": None, "precision": None}


@pytest.mark.parametrize("answer, expected, found", [
    ("It is 4.2x faster on 5731 statements.", ["4.2×", "5,731"], True),
    ("Scores reach 28.9\\% on average.", ["28.9%"], True),
    ("A 72-95 % reduction.", ["72–95%"], True),
    ("It is 4.2 times faster.", ["4.2×"], False),
    ("用户满意度提高了17.6%，共有201名评审。", ["201", "17.6%"], True),
    ("数据集包含5,731条声明。", ["5,731"], True),   # a thousands separator before a CJK character
    ("It lists 5,7310 items.", ["5,731"], False),
    ("They trained on 747,000 math problems.", ["747k"], True),   # a bare number is found as its value
    ("Models of 3 billion and 8B parameters.", ["3B", "8B"], True),
    ("They trained on 747 math problems.", ["747k"], False),
    ("Five families of 10 models.", ["5 families"], False),   # words around a number are matched as written
])
def test_expected_strings_are_matched_after_normalising(answer, expected, found):
    assert contains_all(answer, expected) is found


def record(answer="A [1].", sentences=(("A", [1]),), cited=("p1",), sources=("p1", "p2"), abstained=False):
    return {"question": "q", "answer": answer, "abstained": abstained,
            "abstain_reason": "model" if abstained else None,
            "citations": [{"n": n, "paper_id": p} for n, p in enumerate(cited, start=1)],
            "sentences": [{"text": t, "citations": c, "supported": True} for t, c in sentences],
            "sources": [{"paper_id": p} for p in sources], "invalid_citations": [],
            "timings": {"first_token_s": 1.0, "total_s": 2.0}}


class Always:
    name = "grounding"

    def supports(self, text, papers):
        return True


def score(question, rec):
    return score_answer(question, rec, [Always()])


def test_scoring_one_answer():
    q = Question("q1", "multi", "?", ("p1", "p3"), True)
    row = score(q, record("A [1]. B [2].", (("A", [1]), ("B", [2])), cited=("p1", "p2")))
    outcome = row["outcome"]
    assert outcome["gold_precision"] == 0.5 and outcome["gold_recall"] == 0.5 and outcome["correct"]
    assert outcome["valid_citations"] == outcome["citations"] == 2 and outcome["alce_recall_grounding"] == 1.0


def test_a_translated_answer_is_judged_by_its_english_sentences():
    class English:
        name = "grounding"

        def supports(self, text, papers):
            return text.isascii()

    rec = record("GFPO réduit la longueur [1].", (("GFPO réduit la longueur", [1]),))
    rec["sentences"][0]["english"] = "GFPO cuts the length"
    assert score_answer(Question("q1", "paraphrase", "?", ("p1",), True), rec, [English()]) \
        ["outcome"]["alce_recall_grounding"] == 1.0


def test_a_citation_that_maps_to_no_given_source_is_invalid():
    q = Question("q1", "paraphrase", "?", ("p1",), True)
    outcome = score(q, record("A [1]. B [2].", (("A", [1]), ("B", [2])), cited=("p1", "p9")))["outcome"]
    assert (outcome["valid_citations"], outcome["citations"]) == (1, 2)


def test_correctness_needs_gold_and_expected_strings():
    detail = Question("q1", "detail", "?", ("p1",), True, expected=("42%",))
    assert not score(detail, record("Up to 40% [1]."))["outcome"]["correct"]
    assert score(detail, record("Up to 42% [1]."))["outcome"]["correct"]
    assert not score(detail, record("Up to 42% [1].", cited=("p2",)))["outcome"]["correct"]
    unanswerable = Question("q2", "unanswerable", "?", (), False)
    assert not score(unanswerable, record())["outcome"]["correct"]
    assert score(unanswerable, record(abstained=True))["outcome"]["correct"]


def test_litqa_accuracy_precision_and_abstention_rates():
    answerable = Question("a", "paraphrase", "?", ("p1",), True)
    unanswerable = Question("u", "unanswerable", "?", (), False)
    rows = [score(answerable, record()),                       # correct answer
            score(answerable, record(cited=("p2",))),          # wrong answer
            score(answerable, record(abstained=True)),         # false abstention
            score(unanswerable, record(abstained=True)),       # correct abstention
            score(unanswerable, record())]                     # answered the unanswerable
    summary = summarise(rows)
    assert summary["accuracy"] == 2 / 5 and summary["precision"] == round(1 / 3, 4)
    assert summary["false_abstention"] == round(1 / 3, 4) and summary["unanswerable_abstained"] == 0.5
    assert summary["first_token_p50_s"] == 1.0 and summary["total_p90_s"] == 2.0


@pytest.mark.parametrize("reply_text, supported", [
    ('{"supported": true}', True), ('{"supported": false}', False), ('{"supported": "true"}', False),
    ('```json\n{"supported": true}\n```', True), ('The claim holds. {"supported": true}', True),
    ('{"supported": true', True),            # cut short: read for 'supported: true'
    ("[true]", False), ("", False), ("Supported: TRUE", True),
])
def test_llm_judge_verdicts_are_read_from_fences_prose_or_a_cut_reply(reply_text, supported):
    assert parse_verdict(reply_text) is supported


@pytest.mark.parametrize("claim, judged", [
    ("Hopper: The compiler cuts time.", "The compiler cuts time."),
    ('Hopper: "It cuts time."', '"It cuts time."'),
    ("Hopper shows the compiler cuts time.", "Hopper shows the compiler cuts time."),   # a claim about her
    ("Lovelace and Babbage: Grokking is late.", "Lovelace and Babbage: Grokking is late."),   # not a cited label
])
def test_the_grounding_judge_reads_a_claim_without_the_label_that_cites_it(claim, judged):
    assert split_label(claim, ["Hopper"])[1] == judged


def test_share_and_percentile_are_the_evals_and_the_benchs():
    assert share(2, 3) == 0.6667 and share(2, 3, digits=3) == 0.667 and share(0, 0) is None
    values = [float(v) for v in range(1, 22)]            # 1..21: the p-th percentile is 1 + p / 5
    assert percentile(values, 90) == 19.0 and percentile(values, 95) == 20.0 and percentile(values, 50) == 11.0
    assert percentile([3.5], 95) == 3.5
    import statistics   # the same numbers as the quantiles the eval and the bench always took
    latencies = [0.3, 7.1, 2.2, 9.9, 4.4, 1.0, 5.5]
    assert percentile(latencies, 90) == statistics.quantiles(latencies, n=10, method="inclusive")[-1]
    assert percentile(latencies, 95) == statistics.quantiles(latencies, n=20, method="inclusive")[-1]


@pytest.fixture
def quoting(monkeypatch, real_index_home):
    """The quoting fake that answers `rag eval` (rag_eval) over the real index."""
    monkeypatch.setenv("RAG_HOME", str(real_index_home))
    return QuotingModel()


def rag_eval(model, *argv: str) -> int:
    """`rag eval ARGV` answered by `model`."""
    return main(["eval", *argv], open_model=opener(model))


def test_full_eval_run_writes_report_results_and_charts(quoting, tmp_path, capsys):
    out = tmp_path / "run"
    assert rag_eval(quoting, "--types", "detail,unanswerable", "--out", str(out)) == 0
    printed = capsys.readouterr().out
    assert "| overall |" in printed and "Latency" in printed and "| hybrid | overall |" in printed
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["kind"] == "full" and results["manifest"]["llm"] == {"backend": "fake", "model": "quoting"}
    rows = results["answers"]["rows"]
    assert len(rows) == results["questions"] == sum(s["questions"] for s in results["sets"].values()) == 40
    assert quoting.calls["answer"] > 0
    for row in rows:
        record, outcome = row["answer"], row["outcome"]
        if outcome["answered"]:   # the quoted sentence of source 1 is cited, valid and grounded
            assert outcome["cited"] == [record["citations"][0]["paper_id"]]
            assert outcome["valid_citations"] == outcome["citations"] == 1
            assert outcome["alce_recall_grounding"] == 1.0
            assert outcome["gold_recall"] == (float(outcome["cited"][0] in row["gold"]) if row["answerable"] else None)
    assert results["answers"]["overall"]["citation_validity"] == 1.0
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## Answers" in report and "![metrics_by_type](metrics_by_type.png)" in report
    for chart in ("metrics_by_type.png", "latency.png"):
        assert (out / chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_replayed_run_gives_the_same_answers_without_the_model(quoting, tmp_path, capsys):
    first, replayed = tmp_path / "run", tmp_path / "replayed"
    assert rag_eval(quoting, "--types", "detail,unanswerable", "--out", str(first)) == 0
    asked = quoting.calls["answer"]
    assert rag_eval(quoting, "--types", "detail,unanswerable", "--replay", str(first), "--out", str(replayed)) == 0
    assert quoting.calls["answer"] == asked   # the model was not asked again
    runs = [json.loads((run / "results.json").read_text(encoding="utf-8")) for run in (first, replayed)]
    assert runs[1]["manifest"]["llm"]["backend"] == "replay"
    assert [r["answer"]["answer"] for r in runs[0]["answers"]["rows"]] == \
        [r["answer"]["answer"] for r in runs[1]["answers"]["rows"]]
    asked_odds = [r["answer"]["answerable_odds"] for r in runs[0]["answers"]["rows"]]
    assert 4.0 in asked_odds and asked_odds == [r["answer"]["answerable_odds"] for r in runs[1]["answers"]["rows"]]
    assert rag_eval(quoting, "--types", "detail,paraphrase", "--replay", str(first), "--out", str(tmp_path / "x")) == 1
    assert "not in the replayed run" in capsys.readouterr().err


def test_llm_judge_verdicts_are_cached_and_runs_diff(quoting, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RAG_DERIVED_CACHE_DIR", str(tmp_path / "cache"))   # a fresh verdict cache
    first, second = tmp_path / "a", tmp_path / "b"
    assert rag_eval(quoting, "--types", "detail", "--judge", "llm", "--out", str(first)) == 0
    asked = quoting.calls["judge"]
    assert asked > 0
    assert rag_eval(quoting, "--types", "detail", "--judge", "llm", "--compare", "hybrid,dense",
                    "--out", str(second)) == 0
    assert quoting.calls["judge"] == asked, "a rerun must take every verdict from the cache"
    results = json.loads((second / "results.json").read_text(encoding="utf-8"))
    assert results["answers"]["overall"]["alce_recall_llm"] == 1.0
    assert results["answers"]["judge_calls"] == {"grounding": 0, "llm": 0}
    capsys.readouterr()
    assert main(["eval", "--diff", str(first), str(second)]) == 0
    diff = capsys.readouterr().out
    assert "## Answers (B − A)" in diff and "(+0.000)" in diff and "## Questions whose outcome changed" in diff


def test_diff_of_a_folder_that_is_no_run_is_one_line(tmp_path, capsys):
    assert main(["eval", "--diff", str(tmp_path), str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "cannot read eval run" in err and err.count("\n") == 1


def test_resuming_a_checkpoint_written_with_other_settings_is_refused(tmp_path):
    from rag.eval.answers import Checkpoint
    from rag.errors import UsageError

    old = Checkpoint(tmp_path / "answers.jsonl", "key-a")
    old.start()
    old.save({"id": "q1", "outcome": {}})
    assert list(Checkpoint(tmp_path / "answers.jsonl", "key-a").load()) == ["q1"]
    with pytest.raises(UsageError) as caught:
        Checkpoint(tmp_path / "answers.jsonl", "key-b").load()
    assert "written with other settings" in str(caught.value) and "\n" not in str(caught.value)


def test_a_checkpoint_line_cut_inside_a_character_is_asked_again(tmp_path):
    from rag.eval.answers import Checkpoint

    checkpoint = Checkpoint(tmp_path / "answers.jsonl", "key-a")
    checkpoint.start()
    checkpoint.save({"id": "q1", "outcome": {}})
    with checkpoint.path.open("ab") as out:   # a run killed while writing a Chinese answer
        out.write(json.dumps({"id": "q2", "answer": "模型合并"}, ensure_ascii=False).encode("utf-8")[:-5])
    assert list(checkpoint.load()) == ["q1"]
