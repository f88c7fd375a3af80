"""The wheel carries the eval sets and floors that an installed `rag eval` reads, and rag finds them there."""

import json
import os
import subprocess
import sys
import zipfile

import pytest
from conftest import REPO

EVAL_FILES = ("questions.jsonl", "paraphrase.jsonl", "thresholds.json")   # the default sets and the CI gate
EXTRA_EVAL_FILES = ("nearmiss.jsonl", "languages.jsonl", "holdout.jsonl")   # run with --questions


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """This checkout built as a wheel, offline: the build backend comes from the test extra."""
    pytest.importorskip("hatchling", reason="the build backend is in the test extra: pip install -e '.[test]'")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "-q", "-w", str(out), str(REPO)], check=True, timeout=300)
    [built] = out.glob("rag-*.whl")
    return built


def test_the_wheel_ships_the_eval_sets_and_thresholds(wheel):
    with zipfile.ZipFile(wheel) as archive:
        for name in EVAL_FILES + EXTRA_EVAL_FILES:
            assert archive.read(f"rag/eval/{name}") == (REPO / "eval" / name).read_bytes(), name


def test_the_chat_ui_installs_inside_the_rag_package(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert not [name for name in names if name.split("/")[0] == "ui"], "a top-level ui package collides with others"
    for module in ("__init__", "app", "backend", "guard", "render"):
        assert f"rag/ui/{module}.py" in names


def test_an_installed_rag_finds_its_eval_sets_inside_the_package(wheel, tmp_path):
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp_path / "site")
    show = ("import json; from rag.eval.questions import default_question_sets, default_thresholds; "
            "import rag.ui.app; "   # the chat UI imports from inside the installed package
            "print(json.dumps([str(p) for p in [*default_question_sets().values(), default_thresholds()]]))")
    done = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tmp_path / "site")})
    assert done.returncode == 0, done.stderr[-2000:]
    installed = (tmp_path / "site").resolve() / "rag" / "eval"
    assert json.loads(done.stdout) == [str(installed / name) for name in EVAL_FILES]
