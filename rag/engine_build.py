"""Build llama-cpp-python for this CPU: the features it advertises, never AMX, never -march=native.

    python -m rag.engine_build              # pick the features, build and install (skipped if already so)
    python -m rag.engine_build --portable   # only what every x86-64 CPU with AVX2 has
    python -m rag.engine_build --print-flags

llama.cpp's default build (`GGML_NATIVE=ON`) compiles for whatever the build machine
advertises, AMX included, whose kernels die with SIGILL on some kernels. Here each ggml
switch is turned on only when /proc/cpuinfo lists the feature (AVX-512 with VNNI reads
prompts ~1.8x faster than AVX2 alone), AMX never, and AVX-VNNI only on CPUs without
AVX-512 VNNI (docs/engine-builds.md has the measurements). On ARM and macOS llama.cpp's own
defaults are kept; on x86 without /proc/cpuinfo the portable AVX2 set is used. The build
never comes from pip's wheel cache, which keys wheels by version, not by flags.

Uses the standard library only: it runs before the rest of rag is installed. Whether
the built engine runs is engine.py's check.
"""

import argparse
import importlib.metadata
import os
import platform
import subprocess
import sys

ENGINE_PACKAGE = "llama-cpp-python"
ENGINE_VERSION = "0.3.36"   # pyproject.toml pins the same version (a test checks)
BASE_ARGS = ["-DLLAVA_BUILD=OFF"]
# ggml switch -> the /proc/cpuinfo flag that allows it; llama.cpp's system-info line names them the same way
X86_FEATURES = {
    "AVX": "avx", "AVX2": "avx2", "FMA": "fma", "F16C": "f16c", "BMI2": "bmi2", "AVX_VNNI": "avx_vnni",
    "AVX512": "avx512f avx512cd avx512vl avx512dq avx512bw", "AVX512_VBMI": "avx512vbmi",
    "AVX512_VNNI": "avx512_vnni", "AVX512_BF16": "avx512_bf16",
}
PORTABLE_FEATURES = ("AVX", "AVX2", "FMA", "F16C", "BMI2")


def cmake_args(portable: bool = False, cpuinfo: str | None = None, machine: str | None = None) -> str:
    """CMAKE_ARGS for this machine (or the portable AVX2 set)."""
    if not is_x86(machine):
        return " ".join(BASE_ARGS)
    features = PORTABLE_FEATURES if portable else x86_features(cpuinfo if cpuinfo is not None else read_cpuinfo())
    switches = [f"-DGGML_{name}={'ON' if name in features else 'OFF'}" for name in X86_FEATURES]
    return " ".join(BASE_ARGS + ["-DGGML_NATIVE=OFF"] + switches)


def is_x86(machine: str | None = None) -> bool:
    """True on x86-64 (this machine's, or the `platform.machine()` name given)."""
    return (machine or platform.machine()).lower() in ("x86_64", "amd64")


def x86_features(cpuinfo: str) -> tuple[str, ...]:
    """The ggml switches whose CPU flags all appear in the cpuinfo text; the AVX2 set when it says nothing."""
    flags = set(first_processor(cpuinfo).get("flags", "").split())
    if not flags:
        return PORTABLE_FEATURES
    features = tuple(name for name, needed in X86_FEATURES.items() if set(needed.split()) <= flags)
    if "AVX512_VNNI" in features:   # ggml then takes the 256-bit AVX-VNNI kernels: prompts read 27% slower
        features = tuple(name for name in features if name != "AVX_VNNI")
    return features


def wanted_features(args: str) -> set[str]:
    """The ggml features a CMAKE_ARGS string turns on, as llama.cpp's system-info line names them."""
    return {part[len("-DGGML_"):-len("=ON")] for part in args.split()
            if part.startswith("-DGGML_") and part.endswith("=ON") and part != "-DGGML_NATIVE=ON"}


def built_features(system_info: str) -> set[str]:
    """'CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | OPENMP = 1 |' -> the x86 features set to 1."""
    found = set()
    for part in system_info.replace("CPU :", "|").split("|"):
        name, _, value = (text.strip() for text in part.partition("="))
        if value == "1" and (name in X86_FEATURES or name.startswith("AMX")):
            found.add(name)
    return found


def installed_version() -> str | None:
    """The installed llama-cpp-python version, read without importing it; None if absent."""
    try:
        return importlib.metadata.version(ENGINE_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


def installed_system_info() -> str | None:
    """The installed engine's system-info line, read in a child (an import may crash); None if absent."""
    if installed_version() != ENGINE_VERSION:
        return None
    child = subprocess.run([sys.executable, "-c", "import llama_cpp; print(llama_cpp.llama_print_system_info()"
                            ".decode())"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return child.stdout.strip() if child.returncode == 0 else None


def needs_build(args: str, system_info: str | None, machine: str | None = None) -> bool:
    """True unless the installed engine is this version, built with exactly the wanted x86 features."""
    if system_info is None:
        return True
    if not is_x86(machine):
        return False
    return built_features(system_info) != wanted_features(args)


def pip_command(installed: bool) -> list[str]:
    """pip, never from its wheel cache; an installed engine is replaced, its dependencies kept."""
    replace = ["--force-reinstall", "--no-deps"] if installed else []
    return [sys.executable, "-m", "pip", "install", "--no-cache-dir", *replace, f"{ENGINE_PACKAGE}=={ENGINE_VERSION}"]


def read_cpuinfo() -> str:
    """/proc/cpuinfo's text; empty where there is none (macOS, Windows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            return info.read()
    except OSError:
        return ""


def first_processor(cpuinfo: str) -> dict[str, str]:
    """The fields of the first processor in cpuinfo text ('flags' -> 'fpu sse2 avx ...')."""
    fields = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        name, _, value = line.partition(":")
        fields[name.strip()] = value.strip()
    return fields


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rag.engine_build", description=__doc__.splitlines()[0])
    parser.add_argument("--portable", action="store_true", help="only the features every x86-64 CPU with AVX2 has")
    parser.add_argument("--force", action="store_true", help="build even if the installed engine matches")
    parser.add_argument("--print-flags", action="store_true", help="print the CMAKE_ARGS and stop")
    options = parser.parse_args(argv)
    args = cmake_args(portable=options.portable)
    if options.print_flags:
        print(args)
        return 0
    info = installed_system_info()
    if not options.force and not needs_build(args, info):
        print(f"rag.engine_build: {ENGINE_PACKAGE} {ENGINE_VERSION} is already built with these features "
              f"({info}); --force rebuilds it", flush=True)
        return 0
    print(f'rag.engine_build: building {ENGINE_PACKAGE} {ENGINE_VERSION} from source (~4 min on 2 cores) with '
          f'CMAKE_ARGS="{args}"', flush=True)
    try:
        build = subprocess.run(pip_command(installed_version() is not None), env={**os.environ, "CMAKE_ARGS": args})
        return build.returncode
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
