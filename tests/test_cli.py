"""The `rag` command: output, exit codes, one-line errors and batch mode."""

import io
import json
import os
import subprocess
import sys

import pytest

from conftest import SMALL_PAPERS, write_corpus
from rag import cli
from rag.cli import main


def run(argv, capsys, stdin=None, monkeypatch=None, model=None):
    """main(argv) with `model` as the LLM (a fake; None: the configured one): exit code, stdout, stderr."""
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(argv, open_model=(lambda settings: model) if model is not None else None)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv", [["--help"], ["ingest", "--help"], ["search", "--help"], ["papers", "--help"]])
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0 and "usage: rag" in capsys.readouterr().out


@pytest.mark.parametrize("argv, code, message", [
    (["search", ""], 2, "the question is empty"),
    (["search", "   "], 2, "the question is empty"),
    (["search", "-k", "0", "x"], 2, "-k must be at least 1"),
    (["search", "--top-k", "0", "x"], 2, "-k must be at least 1"),
    (["ingest", "/no/such/file.txt"], 2, "no such file or folder"),
    (["search", "--chroma-url", "ftp://x", "q"], 2, "bad Chroma URL"),
])
def test_usage_errors_are_one_line_with_exit_2(argv, code, message, capsys):
    exit_code, out, err = run(argv, capsys)
    assert exit_code == code and out == ""
    assert err.count("\n") == 1 and err.startswith("rag: error: ") and message in err


@pytest.mark.parametrize("argv", [["bogus"], ["search"], ["search", "-k", "two", "q"]])
def test_argparse_errors_are_one_line_with_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and "see `rag" in err


def test_bad_corpus_file_is_one_line_with_exit_1(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("论文检索\n\nAda Lovelace\n", encoding="utf-8")
    code, out, err = run(["ingest", str(bad)], capsys)
    assert code == 1 and err == f"rag: error: {bad}:3: authors line with no abstract paragraph after it\n"


def test_ingest_then_papers(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "c.txt", SMALL_PAPERS)
    code, out, _ = run(["ingest", "--quiet", str(corpus)], capsys)
    assert code == 0 and "Indexed 3 papers" in out and "3 added" in out
    code, out, _ = run(["ingest", "--quiet", "--json", str(corpus)], capsys)
    assert code == 0 and json.loads(out)["unchanged"] == 3
    code, out, _ = run(["papers"], capsys)
    assert code == 0 and "3 papers" in out and "(no category)" in out
    info = json.loads(run(["papers", "--json"], capsys)[1])
    assert info["papers"] == 3 and info["uncategorized"] == 1 and info["sources"] == [str(corpus)]
    assert info["size_bytes"] > 0 and info["index"].startswith("rag-papers-")


def test_papers_on_an_empty_index_says_how_to_fill_it(capsys):
    code, out, _ = run(["papers"], capsys)
    assert code == 0 and "The index is empty: run `rag ingest`" in out


def test_search_table(real_index_home, monkeypatch, capsys):
    monkeypatch.setenv("RAG_HOME", str(real_index_home))
    code, out, _ = run(["search", "what methods reduce reasoning length?"], capsys)
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith('Top 5 papers for "what methods reduce reasoning length?"')
    assert "score" in lines[2] and "source" in lines[2]
    assert any("Shrivastava et al." in line for line in lines[3:12])


def test_search_json_with_filters(real_index_home, monkeypatch, capsys):
    monkeypatch.setenv("RAG_HOME", str(real_index_home))
    code, out, _ = run(["search", "--json", "-k", "10", "--category", "Deep Learning · Theory", "grokking"], capsys)
    data = json.loads(out)
    assert code == 0 and data["k"] == 10 and len(data["results"]) == 3
    assert {r["category"] for r in data["results"]} == {"Deep Learning · Theory"}


def test_batch_search_reports_bad_lines_and_goes_on(real_index_home, monkeypatch, capsys):
    monkeypatch.setenv("RAG_HOME", str(real_index_home))
    stdin = "Which papers study grokking?\n   \nspeech over minutes\n"
    code, out, err = run(["search", "--json", "-k", "2", "-"], capsys, stdin=stdin, monkeypatch=monkeypatch)
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 3 and code == 1
    assert len(rows[0]["results"]) == 2 and len(rows[2]["results"]) == 2
    assert rows[1]["line"] == 2 and "question is empty" in rows[1]["error"] and rows[1]["exit_code"] == 2


def console(args, env_extra=None, stdin=None):
    env = {**os.environ, **(env_extra or {})}
    rag = os.path.join(os.path.dirname(sys.executable), "rag")
    return subprocess.run([rag, *args], env=env, input=stdin, capture_output=True, text=True, timeout=300)


def test_console_script_end_to_end(tmp_path):
    """The installed `rag` command: first search ingests, batch from stdin, one-line errors."""
    corpus = write_corpus(tmp_path / "c.txt", SMALL_PAPERS)
    env = {"RAG_HOME": str(tmp_path / "home"), "RAG_CORPUS": str(corpus)}
    done = console(["search", "--json", "-", "-k", "1"], env, stdin="compiler for business\nagents\n")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["results"][0]["label"] for r in rows] == ["Hopper", "Colas et al."]
    assert "ingesting" in done.stderr
    empty = console(["search", " "], env)
    assert empty.returncode == 2 and empty.stderr.count("\n") == 1 and "Traceback" not in empty.stderr


def test_debug_shows_the_traceback(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\x00\x01")
    quiet = console(["ingest", str(bad)], {"RAG_HOME": str(tmp_path / "h")})
    loud = console(["ingest", str(bad)], {"RAG_HOME": str(tmp_path / "h"), "RAG_DEBUG": "1"})
    assert quiet.returncode == 1 and "Traceback" not in quiet.stderr and "binary file" in quiet.stderr
    assert "Traceback" in loud.stderr and "CorpusError" in loud.stderr


@pytest.fixture
def fake_llm():
    """The scripted fake model for `rag ask` (run(..., model=fake_llm)) instead of the local one."""
    from fakes import ScriptedModel

    return ScriptedModel()


def test_ask_streams_the_answer_then_references(real_index_home, monkeypatch, capsys, fake_llm):
    from fakes import reply

    monkeypatch.setenv("RAG_HOME", str(real_index_home))
    fake_llm.enqueue(reply(("GFPO samples larger groups and trains on responses filtered by length and "
                            "token efficiency.", [1]), ("It costs 9000 GPUs.", [7])))
    code, out, _ = run(["ask", "what methods reduce reasoning length?"], capsys, model=fake_llm)
    assert code == 0
    assert out.startswith("Found 5 papers: Shrivastava et al.; ") and out.split("\n")[0].endswith("Answering…")
    assert out.index("Found 5 papers") < out.index("token efficiency. [1]")   # the papers first, then the answer
    assert "token efficiency. [1]" in out and "(not supported by its sources)" in out
    assert "References:\n[1] Shrivastava et al." in out and "first token" in out


def test_ask_lists_the_claims_of_a_question_about_several_papers(real_index_home, monkeypatch, capsys, fake_llm):
    from fakes import reply

    monkeypatch.setenv("RAG_HOME", str(real_index_home))
    fake_llm.enqueue(reply(("Neural networks trained on modular arithmetic show grokking.", [1])))
    code, out, _ = run(["ask", "Which papers study grokking?"], capsys, model=fake_llm)
    assert code == 0 and "\nPapers that answer this:\n- Mallinar et al.: Neural networks" in out and "grokking. [1]\n" in out


def test_ask_json_and_abstention(real_index_home, monkeypatch, capsys, fake_llm):
    from fakes import reply
    from rag.answer_record import CANNOT_ANSWER

    monkeypatch.setenv("RAG_HOME", str(real_index_home))
    fake_llm.enqueue(reply((CANNOT_ANSWER, []), answerable=False))
    code, out, _ = run(["ask", "--json", "-k", "3", "what learning rate did GFPO use?"], capsys, model=fake_llm)
    data = json.loads(out)
    assert code == 0 and data["abstained"] and data["answer"] == CANNOT_ANSWER and len(data["sources"]) == 3
    fake_llm.enqueue(reply((CANNOT_ANSWER, []), answerable=False))
    code, out, _ = run(["ask", "what learning rate did GFPO use?"], capsys, model=fake_llm)
    assert "Nearest papers:\n[1] Shrivastava et al." in out


def test_ask_batch_reports_bad_lines(real_index_home, monkeypatch, capsys, fake_llm):
    from fakes import reply

    monkeypatch.setenv("RAG_HOME", str(real_index_home))
    fake_llm.enqueue(reply(("GFPO filters responses by length.", [1])))
    code, out, _ = run(["ask", "--json", "-"], capsys, stdin="what methods reduce reasoning length?\n\n",
                       monkeypatch=monkeypatch, model=fake_llm)
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 1 and len(rows) == 2 and rows[0]["citations"][0]["label"] == "Shrivastava et al."
    assert rows[1]["line"] == 2 and rows[1]["exit_code"] == 2


def test_ask_empty_question_is_a_usage_error_before_any_model_loads(capsys):
    code = main(["ask", "  "], open_model=lambda settings: pytest.fail("model loaded"))
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "question is empty" in err


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_questions_typed_into_a_terminal_are_read_one_at_a_time_with_a_prompt(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", _Terminal("first question\nsecond\n"))
    lines = cli._stdin_lines()
    assert next(lines) == "first question"
    assert sys.stdin.tell() == len("first question\n")    # the second line is not read yet
    assert list(lines) == ["second"]
    assert capsys.readouterr().err == "question> " * 3


def test_piped_questions_get_no_prompt(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("a\r\nb\n"))
    assert list(cli._stdin_lines()) == ["a", "b"] and capsys.readouterr().err == ""


@pytest.mark.parametrize("variable, value, message", [
    ("RAG_NAMESPACE", "my corpus!", "namespace 'my corpus!' must be 1-64 letters, digits"),
    ("RAG_CONTEXT_UNIT", "paragraph", "context unit must be chunk or sentence, got 'paragraph'"),
    ("RAG_PROMPT_PAPERS", "best", "prompt papers must be near_best or all, got 'best'"),
    ("RAG_SEVERAL_SENTENCES", "-1", "several sentences must be 0 or more, got -1"),
    ("RAG_RUNNER_UP_SENTENCES", "-2", "runner-up sentences must be 0 or more, got -2"),
    ("RAG_REPACK_WEIGHTS", "yes", "repack weights must be auto, on or off, got 'yes'"),
    ("RAG_NAME_WEIGHT", "-0.1", "name weight must be 0 or more, got -0.1"),
])
def test_bad_new_settings_are_one_line_usage_errors(variable, value, message, capsys, monkeypatch):
    monkeypatch.setenv(variable, value)
    code, out, err = run(["papers"], capsys)
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1


def test_config_shows_each_setting_its_value_and_where_it_came_from(monkeypatch, capsys):
    monkeypatch.setenv("RAG_TOP_K", "7")
    monkeypatch.setenv("RAG_API_KEY", "sk-secret")
    monkeypatch.setenv("RAG_BASE_URL", "http://user:pw@127.0.0.1:8080/v1")
    assert main(["config", "--json"]) == 0
    rows = {row["variable"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["RAG_TOP_K"]["value"] == 7 and rows["RAG_TOP_K"]["from"] == "environment"
    assert rows["RAG_CHUNK_SIZE"]["from"] == "default" and rows["RAG_CHUNK_SIZE"]["help"]
    assert rows["RAG_API_KEY"]["value"] == "(set)" and rows["RAG_UI_AUTH"]["value"] is None
    assert "pw" not in rows["RAG_BASE_URL"]["value"]
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert "sk-secret" not in out and any(line.split()[:2] == ["RAG_TOP_K", "7"] for line in out.splitlines())


def test_the_readme_settings_table_lists_every_setting_and_only_those():
    """The README's table and Settings (what `rag config` prints) name the same variables."""
    from dataclasses import fields

    from conftest import REPO
    from rag.settings import Settings

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    in_table = set()
    for line in readme.splitlines():
        if line.startswith("| `RAG_"):
            in_table.add(line.split("`")[1])
    assert in_table == {f.metadata["env"] for f in fields(Settings)}


def test_debug_and_ui_auth_are_read_through_settings(monkeypatch):
    from rag.settings import Settings

    assert Settings.from_env({"RAG_DEBUG": "1", "RAG_UI_AUTH": "ann:pw"}).debug
    assert not Settings.from_env({"RAG_DEBUG": "0"}).debug and not Settings().debug
    assert "pw" not in repr(Settings.from_env({"RAG_UI_AUTH": "ann:pw"}))
    monkeypatch.setenv("RAG_DEBUG", "1")
    assert cli._debug()


def test_a_reader_that_stops_reading_ends_the_command_quietly(monkeypatch, capsys):
    read_end, write_end = os.pipe()
    os.close(read_end)   # `rag config | head -1` after head has exited
    with os.fdopen(write_end, "w", buffering=1) as closed_pipe:
        monkeypatch.setattr(sys, "stdout", closed_pipe)
        assert main(["config"]) == 141
        monkeypatch.undo()
    assert capsys.readouterr().err == ""
