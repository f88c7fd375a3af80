"""`rag bench`: figures present and plausible, ours beside the naive pipeline, scale and server paths.

The LLM is a fake (QuotingModel) so these run in CI; the real-model figures are in the
closing notes and the README, measured with `rag bench`.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import DATA
from fakes import QuotingModel, opener
from servers import chroma_server

from rag import cli
from rag.bench import measure
from rag.bench.naive import NaiveAnswer
from rag.settings import Settings
from rag.store import open_store


@pytest.fixture
def quoting_model():
    """The quoting fake that answers for both pipelines (run_bench(..., open_model=opener(quoting_model)))."""
    return QuotingModel()


def test_bench_measures_both_pipelines_side_by_side(quoting_model, tmp_path):
    user = Settings(home=tmp_path / "user-home", cache_dir=tmp_path / "user-cache", corpus=DATA, translate="off",
                    paper_model="none")
    result = measure.run_bench(user, eval_questions=7, rounds=1, progress=False, open_model=opener(quoting_model))
    assert result["papers"] == 80 and result["chunks"] >= 80
    assert result["ingest_embedded_chunks"] == result["chunks"] and result["ingest_cached_chunks"] == 0
    assert result["ingest_cached_embedded"] == 0        # the rebuild took every vector from the cache
    for key in ("ingest_per_s", "ingest_cached_per_s", "ingest_unchanged_per_s", "search_p50_ms", "search_p95_ms",
                "first_token_s", "total_s", "prompt_tokens"):
        assert result[key] > 0, key
        assert key in result["naive"] or key.startswith("ingest_") and key != "ingest_per_s", key
    assert result["search_p95_ms"] >= result["search_p50_ms"]
    assert result["questions"] == 8 and result["naive"]["example"]["first_token_s"] is not None
    assert quoting_model.calls["answer"] >= 8
    assert result["grounding"]["ours"]["n"] == 7 == len(result["grounding"]["questions"])
    ratio = measure.ratios(result)
    assert ratio["first_token_s"] == round(result["first_token_s"] / result["naive"]["first_token_s"], 2)
    assert not (tmp_path / "user-home").exists() and not (tmp_path / "user-cache" / "embeddings").exists()
    table = measure.format_table(result)
    assert "| search p50 ms (warm) |" in table and "Grounding on 7 eval questions" in table


def test_grounding_summary_scores_both_pipelines_alike():
    rows = [
        {"answerable": True, "answered": True, "grounded": [True, False], "cited_ok": [True, False],
         "expected": True, "correct": True},
        {"answerable": True, "answered": False, "grounded": [], "cited_ok": [], "expected": False, "correct": False},
        {"answerable": False, "answered": False, "grounded": [], "cited_ok": [], "expected": None, "correct": True},
    ]
    assert measure.grounding_summary(rows) == {"n": 3, "answered": 0.5, "unanswerable_abstained": 1.0,
                                             "grounded_sentences": 0.5, "cited_and_supported": 0.5,
                                             "expected_found": 0.5, "correct": 0.667}


@pytest.mark.parametrize("text, abstained", [
    ("GFPO filters responses by length.", False),
    ("The context does not provide information about lidar.", True),
    ("", True),
])
def test_naive_answers_that_say_they_cannot_answer_count_as_abstentions(text, abstained):
    assert NaiveAnswer("q", text, []).abstained is abstained


def test_bench_at_scale_on_a_chroma_server_leaves_the_servers_other_indexes_alone(quoting_model, tmp_path):
    with chroma_server(tmp_path / "server") as url:
        user = Settings(home=tmp_path / "home", cache_dir=tmp_path / "cache", corpus=DATA, chroma_url=url,
                        paper_model="none")
        with open_store(user) as store:
            store.collection(create=True).add(ids=["keep"], embeddings=[[0.1] * 384], documents=["mine"])
        result = measure.run_bench(user, scale=120, rounds=1, progress=False, workdir=tmp_path / "work")
        assert result["papers"] == 120 and result["synthetic"]["papers"] == 120
        assert result["search_p50_ms"] > 0 and "naive" not in result and quoting_model.calls["answer"] == 0
        with open_store(user) as store:
            names = [c.name for c in store.client.list_collections()]
            assert names == [store.name] and store.collection(create=False).count() == 1
    # the work folder stays: a second run resumes from the embedding cache instead of embedding again
    again = measure.run_bench(Settings(home=tmp_path / "home", cache_dir=tmp_path / "cache", corpus=DATA,
                                     paper_model="none"),
                            scale=120, rounds=1, progress=False, workdir=tmp_path / "work")
    assert again["ingest_embedded_chunks"] == 0 and again["ingest_cached_chunks"] == again["chunks"]


def test_rag_bench_json_prints_the_figures(quoting_model, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RAG_PAPER_MODEL", "none")
    assert cli.main(["bench", "--scale", "40", "--rounds", "1", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert {"ingest_per_s", "search_p50_ms", "search_p95_ms", "papers", "peak_rss_mb", "ratios", "open_index_s",
            "reopen_index_s"} <= set(figures)
    assert figures["papers"] == 40


def test_rag_bench_at_scale_can_ingest_arxiv_metadata(quoting_model, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RAG_PAPER_MODEL", "none")
    assert cli.main(["bench", "--scale", "40", "--scale-format", "arxiv", "--rounds", "1", "--json",
                     "--workdir", str(tmp_path / "work")]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["papers"] == 40 and figures["synthetic"]["format"] == "arxiv"
    assert [f.name for f in (tmp_path / "work" / "corpus").glob("syn_*")] == ["syn_00000.jsonl"]


@pytest.mark.parametrize("argv, message", [
    (["bench", "--scale", "0"], "--scale must be at least 1"),
    (["bench", "--rounds", "0"], "--rounds must be at least 1"),
    (["bench", "--scale-format", "arxiv"], "--scale-format needs --scale N"),
])
def test_rag_bench_refuses_bad_numbers_in_one_line(argv, message, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_new_ask_process_is_timed_line_by_line_as_a_user_sees_it():
    script = ("import sys, time; print('Loading…', file=sys.stderr, flush=True); time.sleep(0.3); "
              "print('Found 2 papers: A; B. Answering…', flush=True); print(flush=True); time.sleep(0.4); "
              "print('A claim. [1]', flush=True); print(sys.argv[1], flush=True)")
    result = measure.measure_new_process([sys.executable, "-c", script], {}, "the question")
    assert 0.3 <= result["cold_sources_shown_s"] < result["cold_first_char_s"] <= result["cold_total_s"]
    assert result["cold_first_char_s"] - result["cold_sources_shown_s"] > 0.35   # the blank line is not the answer
    lines, _ = measure.timed_lines([sys.executable, "-c", script, "the question"], {})
    assert [text for _, text in lines][-1] == "the question"


def test_a_new_ask_process_that_fails_is_one_error_with_its_last_lines():
    from rag.errors import RagError

    script = "import sys; print('rag: error: no index here'); sys.exit(2)"
    with pytest.raises(RagError, match="exited 2: rag: error: no index here"):
        measure.measure_new_process([sys.executable, "-c", script], {}, "q")


def test_the_settings_reach_a_child_process_through_its_environment(tmp_path):
    from rag.settings import settings_environment

    settings = Settings(home=tmp_path / "h", corpus=DATA, top_k=7, translate="off", debug=True,
                        base_url="http://u:secret@127.0.0.1:8080/v1", embed_runtime="torch")
    assert Settings.from_env(settings_environment(settings)) == settings


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_bench_stops_the_process_it_times(tmp_path, signum):
    """SIGINT or SIGTERM to the bench while it times a `rag ask` process: both exit within seconds."""
    pid_file = tmp_path / "child.pid"
    child = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); print('Found', flush=True); time.sleep(120)"
    bench = ("import sys; from rag.bench import measure; "
             f"measure.measure_new_process([sys.executable, '-c', {child!r}], {{}}, 'q')")
    process = subprocess.Popen([sys.executable, "-c", bench], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not pid_file.is_file() or not pid_file.read_text():
            assert time.monotonic() < deadline and process.poll() is None, process.stderr.read()
            time.sleep(0.1)
        time.sleep(0.3)
        process.send_signal(signum)
        assert process.wait(timeout=15) != 0
        child_pid = int(pid_file.read_text())
        deadline = time.monotonic() + 10
        while _alive(child_pid):
            assert time.monotonic() < deadline, "the timed process outlived the bench"
            time.sleep(0.1)
    finally:
        process.kill()
        process.communicate()


def _alive(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)   # not our child: raises; a zombie of ours would be reaped
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.is_file() and status.read_text().split(")")[-1].split()[0] == "Z")
