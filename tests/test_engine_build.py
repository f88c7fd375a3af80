"""rag.engine_build: llama.cpp's switches follow the CPU's advertised features, AMX never."""

import sys
from pathlib import Path

import pytest

from rag import engine_build

REPO = Path(__file__).resolve().parent.parent

AMX_XEON = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8481C\nflags\t\t: fpu sse2 avx avx2 fma f16c "
            "bmi2 avx512f avx512dq avx512cd avx512bw avx512vl avx512vbmi avx512_vnni avx512_bf16 avx_vnni "
            "amx_bf16 amx_tile amx_int8\n\nprocessor\t: 1\nflags\t\t: fpu\n")
AVX2_ONLY = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma f16c bmi2\n"
PARTIAL_AVX512 = "flags\t\t: avx avx2 fma f16c bmi2 avx512f avx512cd avx512vl avx512dq avx512_vnni\n"


@pytest.mark.parametrize("cpuinfo, on", [
    (AMX_XEON, {"AVX", "AVX2", "FMA", "F16C", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"}),
    (AVX2_ONLY, {"AVX", "AVX2", "FMA", "F16C", "BMI2"}),
    (AVX2_ONLY.replace("bmi2", "bmi2 avx_vnni"), {"AVX", "AVX2", "FMA", "F16C", "BMI2", "AVX_VNNI"}),
    (PARTIAL_AVX512, {"AVX", "AVX2", "FMA", "F16C", "BMI2", "AVX512_VNNI"}),   # no avx512bw: no AVX512 kernels
    ("", {"AVX", "AVX2", "FMA", "F16C", "BMI2"}),                             # nothing known: the AVX2 set
])
def test_x86_switches_follow_the_cpus_flags(cpuinfo, on):
    args = engine_build.cmake_args(cpuinfo=cpuinfo, machine="x86_64")
    assert args.startswith("-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF ")
    assert engine_build.wanted_features(args) == on
    assert "AMX" not in args and "-march" not in args
    assert all(f"-DGGML_{name}=OFF" in args for name in set(engine_build.X86_FEATURES) - on)


def test_portable_is_the_avx2_set_whatever_the_cpu_has():
    args = engine_build.cmake_args(portable=True, cpuinfo=AMX_XEON, machine="x86_64")
    assert engine_build.wanted_features(args) == set(engine_build.PORTABLE_FEATURES)


@pytest.mark.parametrize("machine", ["aarch64", "arm64"])
def test_arm_keeps_llama_cpps_own_defaults(machine):
    assert engine_build.cmake_args(cpuinfo=AMX_XEON, machine=machine) == "-DLLAVA_BUILD=OFF"
    assert not engine_build.needs_build("-DLLAVA_BUILD=OFF", "CPU : NEON = 1 | ARM_FMA = 1 |", machine=machine)


def test_an_installed_engine_is_rebuilt_only_when_its_features_differ():
    args = engine_build.cmake_args(cpuinfo=AVX2_ONLY, machine="x86_64")
    matching = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | OPENMP = 1 |"
    native_amx = matching.replace("OPENMP", "AVX512 = 1 | AMX_INT8 = 1 | OPENMP")
    assert not engine_build.needs_build(args, matching, machine="x86_64")
    assert engine_build.needs_build(args, native_amx, machine="x86_64")
    assert engine_build.needs_build(args, None, machine="x86_64")   # absent, or another version


def test_the_build_never_comes_from_pips_wheel_cache():
    fresh = engine_build.pip_command(installed=False)
    replace = engine_build.pip_command(installed=True)
    assert fresh[:4] == [sys.executable, "-m", "pip", "install"] and "--no-cache-dir" in fresh
    assert "--no-deps" not in fresh and {"--no-cache-dir", "--force-reinstall", "--no-deps"} <= set(replace)
    assert fresh[-1] == replace[-1] == f"llama-cpp-python=={engine_build.ENGINE_VERSION}"


def test_the_pinned_engine_version_is_the_one_built():
    pins = [line for line in (REPO / "pyproject.toml").read_text().splitlines() if "llama-cpp-python" in line]
    assert pins == [f'    "llama-cpp-python[server]=={engine_build.ENGINE_VERSION}",']


def test_readme_commands_build_the_engine_first():
    readme = (REPO / "README.md").read_text()
    for marker in ("<!-- main-command -->", "<!-- test-command -->"):
        command = readme.split(marker)[1].split("```")[1].strip()
        assert command.startswith("python3 -m venv .venv && .venv/bin/python -m rag.engine_build && ")


def test_print_flags(capsys):
    assert engine_build.main(["--print-flags", "--portable"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == engine_build.cmake_args(portable=True)
