"""`rag doctor`: what this installation will use, and whether each part works.

Each check returns a Check (its name, ok or not, one line of detail, figures for --json):
Python and package versions, the llama.cpp build (its system-info line, from a probe child
that loads the model and decodes a few tokens), the model file (size and sha256), the
embedding model, the index, the configured LLM backend and, when one is set, the Chroma
server. A check that fails says what to do, as the errors of the other commands do.
Printing is cli.py's job.
"""

import importlib.metadata
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rag.errors import RagError
from rag.settings import Settings, available_cores
from rag.urls import redact_url

PACKAGES = ("rag", "llama-cpp-python", "llama-index-core", "chromadb", "sentence-transformers", "torch",
            "gradio", "openai", "tiktoken")


@dataclass
class Check:
    """One part of the installation: ok (True, False, or None when not used here) and what was found."""

    name: str
    ok: bool | None
    detail: str
    facts: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"name": self.name, "ok": self.ok, "detail": self.detail, **self.facts}


@dataclass
class Report:
    checks: list[Check]
    seconds: float

    @property
    def ok(self) -> bool:
        return all(check.ok is not False for check in self.checks)

    @property
    def failed(self) -> list[str]:
        return [check.name for check in self.checks if check.ok is False]

    def to_json(self) -> dict:
        return {"ok": self.ok, "failed": self.failed, "seconds": round(self.seconds, 2),
                "checks": [check.to_json() for check in self.checks]}


def diagnose(settings: Settings, open_model=None) -> Report:
    """Run every check in order; a failing check never stops the ones after it. `open_model(settings)`
    opens a remote backend for its probe (default rag.llm.open_model)."""
    started = time.perf_counter()
    checks = [check_python()]
    model = check_model_file(settings)
    checks += [model, check_engine(settings, model), check_embedding(settings),
               check_embedding(settings, "paper model"), check_index(settings)]
    if settings.chroma_url:
        checks.append(check_chroma(settings))
    checks.append(check_backend(settings, checks, open_model))
    return Report(checks, time.perf_counter() - started)


def check_python() -> Check:
    versions = {name: _version(name) for name in PACKAGES}
    missing = [name for name, version in versions.items() if version is None]
    detail = f"Python {platform.python_version()} ({sys.executable}) · " + " · ".join(
        f"{name} {version or 'MISSING'}" for name, version in versions.items())
    if missing:
        detail += " — install them: the README's set-up command"
    return Check("python", not missing, detail, {"python": platform.python_version(), "packages": versions})


def check_model_file(settings: Settings) -> Check:
    """The joined local model: joined now if it is not yet, then its size and sha256 verified."""
    from rag import llm
    from rag.model_files import file_sha256

    if settings.backend != "local":
        return Check("model", None, f"not used by the {settings.backend} backend")
    try:
        path = llm.local_model_file(settings.cache_dir)
        digest = file_sha256(path)
    except (RagError, OSError) as err:
        return Check("model", False, str(err))
    size = path.stat().st_size
    if size != llm.GGUF_SIZE or digest != llm.GGUF_SHA256:
        return Check("model", False, f"{path} is corrupt (size {size:,}, sha256 {digest[:12]}…): delete it to "
                     "have it joined again from its part packages", {"path": str(path)})
    return Check("model", True, f"{path} · {size:,} bytes · sha256 {digest[:12]}… verified",
                 {"path": str(path), "size": size, "sha256": digest})


def check_engine(settings: Settings, model: Check) -> Check:
    """llama.cpp's build: a probe child loads the model and decodes a few tokens (never cached here)."""
    from rag import engine
    from rag.engine_build import installed_version

    version = installed_version()
    if version is None:
        return Check("engine", False, "llama-cpp-python is not installed: run the README's set-up command")
    if not model.ok:
        return Check("engine", None if model.ok is None else False,
                     f"llama-cpp-python {version}, not probed: {'not used' if model.ok is None else 'no model file'}")
    threads = settings.threads or available_cores()
    repack = engine.repacks_weights(settings.repack_weights)
    try:
        result = engine.run_probe(Path(model.facts["path"]), threads, repack)
    except RagError as err:
        return Check("engine", False, str(err), {"llama_cpp_version": version})
    layout = "weights repacked" if repack else "weights as stored"
    return Check("engine", True, f"llama-cpp-python {version}, {threads} threads, {layout} · {result.system_info}",
                 {"llama_cpp_version": version, "threads": threads, "repack_weights": repack,
                  "system_info": result.system_info,
                  "probe_s": result.seconds, "probe_prompt_tokens": result.prompt_tokens})


def check_embedding(settings: Settings, role: str = "embedding") -> Check:
    """The chunk model (role "embedding") or the paper model ("paper model"): found, loaded on the runtime that
    embeds questions (RAG_EMBED_RUNTIME), timed on one question."""
    from rag.embedding import load_search_model, model_path
    from rag.paper_model import paper_model_enabled

    name = settings.embed_model if role == "embedding" else settings.paper_model
    if role != "embedding" and not paper_model_enabled(settings):
        return Check(role, None, "none: papers are ranked by their chunks' vectors only (RAG_PAPER_MODEL=none)")
    try:
        path = model_path(name, settings.cache_dir)
        model = load_search_model(settings, name)
        model.get_query_embedding("warm-up")   # the first call pays one-time set-up
        started = time.perf_counter()
        vector = model.get_query_embedding("what methods reduce reasoning length?")
        query_ms = (time.perf_counter() - started) * 1000
    except RagError as err:
        return Check(role, False, str(err))
    return Check(role, True, f"{name} at {path} · {len(vector)} dimensions · {settings.embed_runtime} · "
                 f"{query_ms:.0f} ms for one question",
                 {"model": name, "path": str(path), "runtime": settings.embed_runtime, "dimensions": len(vector),
                  "query_ms": round(query_ms, 1)})


def check_index(settings: Settings) -> Check:
    from rag.ingest import describe_index

    try:
        info = describe_index(settings)
    except RagError as err:
        return Check("index", False, str(err))
    facts = {"index": info.index, "location": info.location, "papers": len(info.papers), "chunks": info.chunks}
    if not info.papers:
        return Check("index", True, f"{info.location} · empty: the first `rag ask` or `rag ingest` builds it",
                     facts)
    return Check("index", True, f"{info.location} · {len(info.papers)} papers · {info.chunks} chunks · "
                 f"index {info.index}", facts)


def check_chroma(settings: Settings) -> Check:
    from rag.store import open_store

    try:
        started = time.perf_counter()
        with open_store(settings):
            pass
    except RagError as err:
        return Check("chroma", False, str(err))
    url = redact_url(settings.chroma_url)
    return Check("chroma", True, f"server {url} answered in {(time.perf_counter() - started) * 1000:.0f} ms",
                 {"url": url})


def check_backend(settings: Settings, earlier: list[Check], open_model=None) -> Check:
    """The configured LLM: the local one answered the engine's probe; a remote one writes one token."""
    facts = {"backend": settings.backend}
    if settings.backend == "local":
        engine_check = next(check for check in earlier if check.name == "engine")
        if not engine_check.ok:
            return Check("backend", False, "local: the engine did not answer its probe (see engine)", facts)
        return Check("backend", True, f"local · answered a probe in {engine_check.facts['probe_s']:.1f} s "
                     "(model load included)", facts)
    from rag import llm

    try:
        started = time.perf_counter()
        model = (open_model or llm.open_model)(settings)
        reply = "".join(model.stream([{"role": "user", "content": "Reply with OK."}], None, 1))
    except RagError as err:
        return Check("backend", False, f"{settings.backend}: {err}", facts)
    seconds = time.perf_counter() - started
    where = redact_url(settings.base_url or "OpenAI")
    return Check("backend", True, f"{settings.backend} · {model.model} at {where} "
                 f"answered {reply.strip()[:20]!r} in {seconds:.1f} s", facts | {"model": model.model})


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


