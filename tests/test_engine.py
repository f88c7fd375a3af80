"""The local engine's guard: a probe child proves the llama.cpp build runs; a crash becomes one line.

The `fake_engine` fixture (conftest.py) puts a fake `llama_cpp` package first on the
children's PYTHONPATH: a build that dies with SIGILL, fails to load, or works.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rag import engine
from rag.errors import EngineError

REPO = Path(__file__).resolve().parent.parent

def loads(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_a_build_that_dies_with_sigill_is_one_line_naming_the_rebuild(fake_engine, model_file, monkeypatch):
    monkeypatch.setenv("FAKE_ENGINE", "sigill")
    cache = model_file.parent.parent
    with pytest.raises(EngineError) as caught:
        engine.check_engine(cache, model_file, 2, False)
    message = str(caught.value)
    assert "SIGILL (illegal instruction)" in message and "\n" not in message
    assert message.endswith(f"rebuild it: {sys.executable} -m rag.engine_build --portable")
    assert loads(fake_engine) == ["load 2"]
    with pytest.raises(EngineError):   # a failure is not cached: the next start probes again
        engine.check_engine(cache, model_file, 2, False)
    assert len(loads(fake_engine)) == 2


def test_a_build_that_cannot_load_is_one_line(fake_engine, model_file, monkeypatch):
    monkeypatch.setenv("FAKE_ENGINE", "broken")
    with pytest.raises(EngineError, match=r"failed a test run \(OSError: libggml-cpu.so: cannot open"):
        engine.check_engine(model_file.parent.parent, model_file, 2, False)


def test_a_passing_verdict_is_cached_per_build_model_cpu_threads_and_weight_layout(fake_engine, model_file):
    cache = model_file.parent.parent
    engine.check_engine(cache, model_file, 2, False)
    engine.check_engine(cache, model_file, 2, False)
    assert loads(fake_engine) == ["load 2"]          # the second start paid nothing
    engine.check_engine(cache, model_file, 1, False)
    assert loads(fake_engine) == ["load 2", "load 1"]   # other threads, other verdict
    engine.check_engine(cache, model_file, 2, True)
    assert loads(fake_engine)[-1] == "load 2 repacked"   # the probe loads the weights as the answers will
    os.utime(model_file, ns=(1, 1))                   # a replaced model file is probed again
    engine.check_engine(cache, model_file, 2, False)
    assert len(loads(fake_engine)) == 4


@pytest.mark.parametrize("choice, machine, repack", [("auto", "x86_64", False), ("auto", "aarch64", True),
                                                    ("on", "x86_64", True), ("off", "arm64", False)])
def test_weights_are_repacked_by_choice_and_by_default_only_off_x86(choice, machine, repack):
    assert engine.repacks_weights(choice, machine) is repack


def test_a_torn_verdict_line_is_probed_again(fake_engine, model_file):
    cache = model_file.parent.parent
    (cache / engine.VERDICTS_FILE).write_text('{"key": "abc", "val')
    engine.check_engine(cache, model_file, 2, False)
    assert loads(fake_engine) == ["load 2"]


def test_the_probe_reports_the_engines_system_info(fake_engine, model_file):
    result = engine.run_probe(model_file, 2, False)
    assert result.system_info == "CPU : AVX2 = 1 | FAKE = 1 |" and result.prompt_tokens == 42


@pytest.mark.parametrize("command", [["ask", "what methods reduce reasoning length?"], ["ui", "--port", "0"],
                                     ["eval", "--types", "author", "--out", "run"]])
def test_each_command_on_a_crashing_engine_prints_one_line_and_exits_1(command, fake_engine, model_file,
                                                                        real_index_home, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_ENGINE", "sigill")
    env = {**os.environ, "RAG_HOME": str(real_index_home), "RAG_CACHE_DIR": str(model_file.parent.parent)}
    done = subprocess.run([sys.executable, "-m", "rag", *command], env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=600, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("rag: ")]
    assert len(errors) == 1 and "died with SIGILL" in errors[0] and "-m rag.engine_build --portable" in errors[0]
    assert "Traceback" not in done.stderr and "serving the chat" not in done.stdout


def test_signal_names_are_readable():
    assert engine._signal_name(signal.SIGILL) == "SIGILL" and engine._signal_name(200) == "signal 200"
