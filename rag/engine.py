"""The local engine's guard: prove llama-cpp-python runs on this CPU before a process relies on it.

llama.cpp built for CPU features a machine lacks, or cannot use (AMX on some kernels), dies
with SIGILL on its first decode and takes the whole process with it, with no message.
`check_engine` runs a probe in a child process (import llama_cpp, load the model, decode a
short prompt with the threads the answer will use) and turns a child that dies into an
EngineError that names the signal and the command that rebuilds the engine. A passing
verdict is cached per build, model file, CPU, thread count and weight layout, so later starts
pay nothing.

`new_llama` is the one place a llama_cpp.Llama is built, so the probe, the answering model
(llm.py) and the benchmarks load the weights alike. This module never imports llama_cpp in the
calling process.
"""

import functools
import importlib.util
import json
import platform
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rag.disk_cache import DiskCache, content_key
from rag.engine_build import first_processor, installed_version, is_x86, read_cpuinfo
from rag.errors import EngineError

PROBE_TIMEOUT_S = 300
PROBE_PROMPT = ("The probe reads a short prompt in one batch, as an answer reads its sources, then writes "
                "two tokens. " * 4)
VERDICTS_FILE = "engine_verdicts.jsonl"
VERDICT_VERSION = 1
_DEFAULT_PARAMS_LOCK = threading.Lock()


@dataclass(frozen=True)
class ProbeResult:
    """What a probe child reported: llama.cpp's system-info line and its timings."""

    system_info: str
    llama_cpp_version: str
    prompt_tokens: int
    seconds: float


def rebuild_command(portable: bool = False) -> str:
    """The command that rebuilds llama-cpp-python here: for this CPU's features, or only the AVX2 set."""
    return f"{sys.executable} -m rag.engine_build {'--portable' if portable else '--force'}"


def repacks_weights(choice: str, machine: str | None = None) -> bool:
    """Whether llama.cpp lays the model's weights out anew at load (its CPU_REPACK buffers) for `choice`
    (RAG_REPACK_WEIGHTS): auto = not on x86, where the weights as stored read prompts faster and load
    in a third of the time (docs/engine-builds.md), llama.cpp's default elsewhere (not measured)."""
    return choice == "on" or (choice == "auto" and not is_x86(machine))


def new_llama(llama_class, model_path: str, n_ctx: int, n_threads: int, repack: bool, **options):
    """`llama_class(...)` (llama_cpp.Llama or a subclass) loading `model_path` with llama.cpp's weight
    repacking on or off. llama-cpp-python 0.3.36's Llama has no option for it (the model parameter
    use_extra_bufts), so the default-parameters function it calls is wrapped while this one loads."""
    import llama_cpp

    def default_params():
        params = plain_defaults()
        params.use_extra_bufts = repack
        return params

    with _DEFAULT_PARAMS_LOCK:
        plain_defaults = llama_cpp.llama_cpp.llama_model_default_params
        llama_cpp.llama_cpp.llama_model_default_params = default_params
        try:
            return llama_class(model_path=model_path, n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads,
                               verbose=False, **options)
        finally:
            llama_cpp.llama_cpp.llama_model_default_params = plain_defaults


def check_engine(derived_cache_dir: Path, model_path: Path, n_threads: int, repack: bool) -> None:
    """Raise EngineError unless a probe child ran this build on this CPU; a passing verdict is cached."""
    key = verdict_key(model_path, n_threads, repack)
    verdicts = DiskCache(Path(derived_cache_dir) / VERDICTS_FILE)
    if verdicts.get(key) is not None:
        return
    result = run_probe(model_path, n_threads, repack)
    verdicts.put(key, {"version": VERDICT_VERSION, "system_info": result.system_info,
                       "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})


def run_probe(model_path: Path, n_threads: int, repack: bool) -> ProbeResult:
    """Load the model and decode a few tokens in a child process; EngineError if it fails or dies."""
    command = [sys.executable, "-m", "rag.engine", str(model_path), str(n_threads), "on" if repack else "off"]
    try:
        child = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                               stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise EngineError(f"the local LLM engine did not finish a {len(PROBE_PROMPT.split())}-word test run "
                          f"in {PROBE_TIMEOUT_S} s; check `rag doctor`, or use another backend "
                          "(--backend openai-like)") from None
    if child.returncode < 0:
        raise EngineError(_death_message(-child.returncode, model_path))
    if child.returncode != 0:
        raise EngineError(f"the local LLM engine failed a test run ({_last_line(child.stderr)}); reinstall "
                          f"it: {rebuild_command()}")
    try:
        return ProbeResult(**json.loads(child.stdout.strip().splitlines()[-1]))
    except (ValueError, TypeError, IndexError):
        raise EngineError(f"the local LLM engine's test run printed no result ({_last_line(child.stderr)}); "
                          f"reinstall it: {rebuild_command()}") from None


def _death_message(signum: int, model_path: Path) -> str:
    name = _signal_name(signum)
    if signum == signal.SIGILL:
        return (f"the local LLM engine died with {name} (illegal instruction) in a test run: llama-cpp-python "
                f"was built for CPU features this machine cannot use; rebuild it: {rebuild_command(portable=True)}")
    if signum == signal.SIGKILL:
        return (f"the local LLM engine was killed ({name}) in a test run, most likely for lack of memory: "
                "close other programs or lower RAG_N_CTX, then retry")
    return (f"the local LLM engine crashed with {name} in a test run: the build or the model file "
            f"{model_path} may be corrupt; rebuild it: {rebuild_command()} (or delete the model file to have "
            "it joined again)")


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no message"


def verdict_key(model_path: Path, n_threads: int, repack: bool) -> str:
    """What a verdict depends on: the engine's files, the model file, this CPU, the thread count and
    whether the weights are repacked (other kernels run)."""
    return content_key([str(VERDICT_VERSION), *engine_fingerprint(), *_file_fingerprint(Path(model_path)),
                        cpu_fingerprint(), str(n_threads), *(["repacked"] if repack else [])])


@functools.cache
def engine_fingerprint() -> tuple[str, ...]:
    """Version, location, size and modification time of llama-cpp-python's native libraries."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return ("not installed",)
    package = Path(next(iter(spec.submodule_search_locations)))
    libraries = sorted(p for p in package.rglob("*") if p.suffix in {".so", ".dylib", ".dll"} or ".so." in p.name)
    return (installed_version() or "?", *(part for lib in libraries for part in _file_fingerprint(lib)))


def _file_fingerprint(path: Path) -> tuple[str, str]:
    try:
        stat = path.stat()
    except OSError:
        return (str(path), "missing")
    return (str(path.resolve()), f"{stat.st_size}:{stat.st_mtime_ns}")


@functools.cache
def cpu_fingerprint() -> str:
    """The CPU's model and feature flags (Linux), else what platform knows of it."""
    fields = first_processor(read_cpuinfo())
    if not fields:
        return f"{platform.machine()} {platform.processor()}"
    return " ".join(fields.get(name, "") for name in ("model name", "flags", "Features", "CPU part"))


def _probe(model_path: str, n_threads: int, repack: bool) -> ProbeResult:
    """Run in the child: load the model, read PROBE_PROMPT in one batch, write two tokens."""
    import llama_cpp

    started = time.perf_counter()
    llama = new_llama(llama_cpp.Llama, model_path, n_ctx=512, n_threads=n_threads, repack=repack)
    try:
        reply = llama.create_completion(PROBE_PROMPT, max_tokens=2, temperature=0.0)
    finally:
        llama.close()
    return ProbeResult(system_info=llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(),
                       llama_cpp_version=llama_cpp.__version__, prompt_tokens=reply["usage"]["prompt_tokens"],
                       seconds=round(time.perf_counter() - started, 3))


if __name__ == "__main__":   # the probe child: python -m rag.engine MODEL_PATH N_THREADS on|off
    print(json.dumps(_probe(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "on").__dict__))
