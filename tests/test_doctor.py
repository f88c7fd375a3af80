"""`rag doctor`: one line per part, the failing part named, exit 1 when one fails, --json for scripts."""

import json

from servers import free_port

from rag import doctor
from rag.cli import main
from rag.settings import Settings


def test_doctor_names_an_unreachable_backend_and_exits_1(real_index_home, monkeypatch, capsys):
    monkeypatch.setenv("RAG_HOME", str(real_index_home))
    code = main(["doctor", "--json", "--backend", "openai-like", "--model", "m",
                 "--base-url", f"http://127.0.0.1:{free_port()}/v1", "--timeout", "2"])
    out, err = capsys.readouterr()
    report = json.loads(out)
    checks = {check["name"]: check for check in report["checks"]}
    assert code == 1 and report["ok"] is False and report["failed"] == ["backend"]
    assert "cannot connect" in checks["backend"]["detail"]
    assert checks["index"]["ok"] and checks["index"]["papers"] == 80 and checks["index"]["chunks"] > 80
    assert checks["embedding"]["dimensions"] == 384 and checks["paper model"]["dimensions"] == 768
    assert checks["model"]["ok"] is None and checks["engine"]["ok"] is None   # not used by a remote backend
    assert checks["python"]["packages"]["chromadb"] == "1.5.9"
    assert err.strip().splitlines()[-1].startswith("rag doctor: FAILED: backend (")


def test_doctor_reports_a_crashing_engine(fake_engine, model_file, monkeypatch):
    monkeypatch.setenv("FAKE_ENGINE", "sigill")
    model = doctor.Check("model", True, "", {"path": str(model_file)})
    check = doctor.check_engine(Settings(threads=2), model)
    assert check.ok is False and "died with SIGILL" in check.detail and "rag.engine_build --portable" in check.detail


def test_doctor_reports_the_engines_system_info(fake_engine, model_file):
    model = doctor.Check("model", True, "", {"path": str(model_file)})
    check = doctor.check_engine(Settings(threads=2), model)
    assert check.ok and check.facts["system_info"] == "CPU : AVX2 = 1 | FAKE = 1 |" and check.facts["threads"] == 2
    assert doctor.check_backend(Settings(), [check]).ok


def test_doctor_finds_a_corrupt_model_file(model_file, monkeypatch):
    from rag import llm

    with open(model_file, "r+b") as data:
        data.write(b"not a model")   # changed after it was checked: hashed again, then joined again ...
    short_part = model_file.parent / "part.bin"
    short_part.write_bytes(b"\0" * 10)
    monkeypatch.setattr(llm, "_part_path", lambda n: short_part)   # ... from parts that are not the model
    check = doctor.check_model_file(Settings(cache_dir=model_file.parent.parent))
    assert check.ok is False and "is corrupt" in check.detail and "reinstall its parts" in check.detail


def test_text_report_marks_each_part(real_index_home, monkeypatch, capsys):
    monkeypatch.setenv("RAG_HOME", str(real_index_home))
    main(["doctor", "--backend", "openai-like", "--model", "m", "--base-url", f"http://127.0.0.1:{free_port()}/v1",
          "--timeout", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines] == [["ok", "python"], ["-", "model"], ["-", "engine"],
                                                    ["ok", "embedding"], ["ok", "paper"], ["ok", "index"],
                                                    ["FAIL", "backend"]]


def test_doctor_says_when_the_paper_model_is_off():
    check = doctor.check_embedding(Settings(paper_model="none"), "paper model")
    assert check.ok is None and "RAG_PAPER_MODEL=none" in check.detail
