"""One Settings object: every knob of rag, its default and its RAG_ environment variable.

Defaults are the offline embedded setup: the bundled corpus, the bundled embedding
model, a Chroma store on local disk. This module reads the environment; it does not
open stores or load models.
"""

import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from rag.errors import UsageError
from rag.urls import BASE_URL, CHROMA_URL, check_token, check_url, redact_url

PACKAGE_DIR = Path(__file__).resolve().parent
DEFAULT_EMBED_MODEL = "all-MiniLM-L6-v2"
DEFAULT_PAPER_MODEL = "all-mpnet-base-v2"
DEFAULT_PAPER_MODEL_WEIGHT = 2.0   # chosen on the tune parts of both eval sets (eval/README.md)
DEFAULT_WORD_DROP_WEIGHT = 0.7     # the same
DEFAULT_CHUNK_SIZE = 192
DEFAULT_CHUNK_OVERLAP = 32
TOKENIZER = "cl100k_base"   # tiktoken encoding that chunk sizes and prompt budgets count in; in the index shape
DEFAULT_TOP_K = 5
DEFAULT_EMBED_BATCH_SIZE = 32
DEFAULT_KEYWORD_WEIGHT = 0.3   # chosen on the tune parts of both eval sets (eval/README.md)
DEFAULT_RRF_KEYWORD_WEIGHT = 0.1   # likewise
RETRIEVAL_METHODS = ("hybrid", "rrf", "dense", "bm25")
DEFAULT_AUTHOR_WEIGHT = 1.0
DEFAULT_CATEGORY_WEIGHT = 0.5
DEFAULT_NAME_WEIGHT = 0.05     # chosen on the tune parts (eval/README.md)
DEFAULT_BACKEND = "local"
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_RETRIES = 2
DEFAULT_N_CTX = 4096
DEFAULT_MAX_TOKENS = 384
DEFAULT_CONTEXT_TOKENS = 800
DEFAULT_RUNNER_UP_SENTENCES = 0   # 2 ties on tune and loses on test: eval/README.md, "Questions about one paper: the runners-up's best sentences"
DEFAULT_SEVERAL_SENTENCES = 3   # chosen on tune: eval/README.md, "Questions about several papers: each paper's best sentences"
DEFAULT_MAX_SENTENCES = 5
DEFAULT_MIN_DENSE_SCORE = 0.10
EXAMPLE_QUESTION = "what methods reduce reasoning length?"   # the README's; benchmarks time it
SECRET_SETTINGS = ("api_key", "chroma_token", "ui_auth")   # never printed, never saved
URL_SETTINGS = ("chroma_url", "base_url")       # shown and saved through urls.redact_url only


def default_home() -> Path:
    """Per-user data directory: $XDG_DATA_HOME/rag, else ~/.local/share/rag."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "rag"


def default_cache() -> Path:
    """Per-user cache for the model files (and, by default, the derived caches): $XDG_CACHE_HOME/rag,
    else ~/.cache/rag."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rag"


def token_encoding():
    """tiktoken's TOKENIZER encoding: the unit of chunk sizes (ingest.make_splitter) and of prompt
    budgets (answer.count_tokens)."""
    import tiktoken

    return tiktoken.get_encoding(TOKENIZER)


def bundled_dir(name: str, holding: str | None = None) -> Path:
    """A folder shipped with rag: rag/name in an installed wheel (pyproject.toml maps it there), name/
    beside the package in a checkout; with `holding`, the one that holds that file (rag/eval is
    also a package of code)."""
    for candidate in (PACKAGE_DIR / name, PACKAGE_DIR.parent / name):
        if candidate.is_dir() and (holding is None or (candidate / holding).is_file()):
            return candidate
    return PACKAGE_DIR.parent / name


def bundled_corpus() -> Path:
    """The corpus shipped with rag: data/ in a checkout, rag/data in an installed wheel."""
    return bundled_dir("data")


def available_cores() -> int:
    """Cores this process may run on (not the machine's total)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _setting(default, help: str, env: str | None = None, **kwargs):
    return field(default=default, metadata={"help": help, "env": env}, **kwargs)


@dataclass(frozen=True)
class Settings:
    """Everything that configures rag. Fields that shape the index name it (see store.py)."""

    home: Path = _setting(None, "Where rag keeps its indexes: the embedded store (chroma/), the saved keyword "
                          "indexes (keyword/) and the ingest locks (locks/).", "RAG_HOME")
    cache_dir: Path = _setting(None, "Where rag keeps the model files it joins from their part packages: the "
                               "local LLM and the paper model (models/).", "RAG_CACHE_DIR")
    derived_cache_dir: Path = _setting(None, "Where rag keeps what it can make again: the embedding cache "
                                       "(embeddings/), the embedding models exported for ONNX Runtime (onnx/), "
                                       "cached translations, LLM judge verdicts and the engine's test-run verdicts; "
                                       "unset = the cache dir.", "RAG_DERIVED_CACHE_DIR")
    corpus: Path = _setting(None, "Corpus files or folder that `rag ingest` reads by default.", "RAG_CORPUS")
    chroma_url: str | None = _setting(None, "Chroma server URL (http://HOST:PORT, or https://HOST/PATH behind a "
                                      "reverse proxy); unset = embedded store. Shown with its user-info hidden.",
                                      "RAG_CHROMA_URL")
    chroma_token: str | None = _setting(None, "Token for a Chroma server that requires one (token auth), sent as "
                                        "'Authorization: Bearer TOKEN' and 'X-Chroma-Token: TOKEN'; a token in the "
                                        "URL (http://:TOKEN@HOST:PORT) works too. Never printed or saved.",
                                        "RAG_CHROMA_TOKEN", repr=False)
    namespace: str = _setting("", "Name that keeps this index apart from others on the same store (one "
                              "Chroma server, several corpora); empty = the default index.", "RAG_NAMESPACE")
    embed_model: str = _setting(DEFAULT_EMBED_MODEL, "Embedding model: the bundled name or a local "
                                "sentence-transformers folder.", "RAG_EMBED_MODEL")
    paper_model: str = _setting(DEFAULT_PAPER_MODEL, "Second embedding model, which scores each whole "
                                "abstract against the question: the bundled name, a local sentence-transformers "
                                "folder, or none (chunk vectors only; ingest is ~10x faster).", "RAG_PAPER_MODEL")
    paper_model_weight: float = _setting(DEFAULT_PAPER_MODEL_WEIGHT, "Weight of the paper model's cosine "
                                         "against the best chunk's in a paper's dense score: "
                                         "(chunk + w * paper) / (1 + w).", "RAG_PAPER_MODEL_WEIGHT")
    word_drop_weight: float = _setting(DEFAULT_WORD_DROP_WEIGHT, "Share of the paper model's score that comes "
                                       "from the question with one content word left out, the worst of those "
                                       "(each word in turn), so a paper that matches one word of the question "
                                       "rather than its meaning ranks lower; 0 to 1, 0 = off (a search ~0.3 s "
                                       "faster on 2 cores).", "RAG_WORD_DROP_WEIGHT")
    chunk_size: int = _setting(DEFAULT_CHUNK_SIZE, "Chunk size in tiktoken (cl100k) tokens.", "RAG_CHUNK_SIZE")
    chunk_overlap: int = _setting(DEFAULT_CHUNK_OVERLAP, "Overlap between chunks in tokens.", "RAG_CHUNK_OVERLAP")
    top_k: int = _setting(DEFAULT_TOP_K, "How many papers a search returns.", "RAG_TOP_K")
    retrieval: str = _setting("hybrid", "Retrieval method: hybrid (dense + keyword + named authors and "
                              "categories), rrf (the same fused by reciprocal rank), dense, or bm25.",
                              "RAG_RETRIEVAL")
    keyword_weight: float = _setting(DEFAULT_KEYWORD_WEIGHT, "hybrid: weight of the keyword score (BM25 over "
                                     "the question's ceiling, 0 to 1) added to the dense score; 0 = dense only.",
                                     "RAG_KEYWORD_WEIGHT")
    rrf_keyword_weight: float = _setting(DEFAULT_RRF_KEYWORD_WEIGHT, "rrf: weight of the keyword ranking "
                                         "against the dense one (1.0 = equal).", "RAG_RRF_KEYWORD_WEIGHT")
    author_weight: float = _setting(DEFAULT_AUTHOR_WEIGHT, "Score added to papers by an author the "
                                    "question names (full name, or surname et al.).", "RAG_AUTHOR_WEIGHT")
    category_weight: float = _setting(DEFAULT_CATEGORY_WEIGHT, "Score added to papers in a category the "
                                      "question names ('Area · Subarea').", "RAG_CATEGORY_WEIGHT")
    name_weight: float = _setting(DEFAULT_NAME_WEIGHT, "Score added to papers that use a name the question "
                                  "writes that few papers use ('LBMKGC', 'RoboCasa').", "RAG_NAME_WEIGHT")
    translate: str = _setting("auto", "auto: questions in another language (Chinese, Russian, French, ...) are "
                              "translated into English by the LLM for search, and answers back; off: never.",
                              "RAG_TRANSLATE")
    embed_runtime: str = _setting("onnx", "What runs the embedding models: onnx (ONNX Runtime, exported from the "
                                  "same weights once; a new process starts ~4 s sooner, the paper model embeds "
                                  "~1.3x faster) or torch. The chunk model ingests on torch, faster there.",
                                  "RAG_EMBED_RUNTIME")
    embed_batch_size: int = _setting(DEFAULT_EMBED_BATCH_SIZE, "Texts per embedding batch.",
                                     "RAG_EMBED_BATCH_SIZE")
    backend: str = _setting(DEFAULT_BACKEND, "LLM backend: local (bundled model), openai, openai-like.",
                            "RAG_BACKEND")
    model: str | None = _setting(None, "Model name for the openai and openai-like backends.", "RAG_MODEL")
    base_url: str | None = _setting(None, "Base URL of an OpenAI-compatible server, e.g. "
                                    "http://127.0.0.1:8080/v1. Shown with its user-info hidden.", "RAG_BASE_URL")
    api_key: str | None = _setting(None, "API key for openai-like servers (openai reads OPENAI_API_KEY).",
                                   "RAG_API_KEY", repr=False)
    timeout_s: float = _setting(DEFAULT_TIMEOUT_S, "Seconds to wait for a remote backend per try.", "RAG_TIMEOUT")
    max_retries: int = _setting(DEFAULT_MAX_RETRIES, "Retries of a failed remote request.", "RAG_MAX_RETRIES")
    n_ctx: int = _setting(DEFAULT_N_CTX, "Context window of the local model, in tokens.", "RAG_N_CTX")
    threads: int = _setting(0, "CPU threads for the local model; 0 = every available core.", "RAG_THREADS")
    repack_weights: str = _setting("auto", "Whether llama.cpp lays the local model's weights out anew when it "
                                   "loads them (its CPU_REPACK buffers): on, off, or auto (off on x86, where the "
                                   "stored layout reads prompts faster; on elsewhere).", "RAG_REPACK_WEIGHTS")
    max_tokens: int = _setting(DEFAULT_MAX_TOKENS, "Most tokens an answer may take.", "RAG_MAX_TOKENS")
    context_tokens: int = _setting(DEFAULT_CONTEXT_TOKENS, "Token budget (tiktoken cl100k) for the source "
                                   "chunks in the prompt.", "RAG_CONTEXT_TOKENS")
    prompt_papers: str = _setting("near_best", "Which retrieved papers the model reads: near_best (those the "
                                  "question names, and those scored close enough to the best paper that a claim "
                                  "about them can be shown: claims.near_the_best) or all.", "RAG_PROMPT_PAPERS")
    context_unit: str = _setting("chunk", "What fills the context budget: chunk (stored chunks) or sentence "
                                 "(abstract sentences): the best one of each paper the question names, then the most "
                                 "similar to the question.", "RAG_CONTEXT_UNIT")
    several_sentences: int = _setting(DEFAULT_SEVERAL_SENTENCES, "For a question about several papers "
                                      "('which papers …') when several are read, how many of each paper's abstract "
                                      "sentences the model reads, its best quotes for the question (0: its chunks, "
                                      "as for any question).",
                                      "RAG_SEVERAL_SENTENCES")
    runner_up_sentences: int = _setting(DEFAULT_RUNNER_UP_SENTENCES, "For a question about one paper when "
                                        "several are read, how many of each paper's sentences after the best "
                                        "paper's the model reads, its best quotes for the question; the best paper "
                                        "is read whole (0: every paper's chunks, as for any question).",
                                        "RAG_RUNNER_UP_SENTENCES")
    max_sentences: int = _setting(DEFAULT_MAX_SENTENCES, "Most sentences in an answer.", "RAG_MAX_SENTENCES")
    answer_format: str = _setting("json", "How the model writes: json (schema-constrained items, one source "
                                  "each) or text ([n] markers, few-shot prompt).", "RAG_ANSWER_FORMAT")
    min_dense_score: float = _setting(DEFAULT_MIN_DENSE_SCORE, "Abstain without asking the LLM when the best "
                                      "paper's dense score is below this.", "RAG_MIN_DENSE_SCORE")
    ui_auth: str | None = _setting(None, "USER:PASSWORD the chat UI asks for; required to serve on a non-loopback "
                                   "address (`rag ui --auth-file FILE` keeps it out of the environment too). "
                                   "Never printed or saved.", "RAG_UI_AUTH", repr=False)
    debug: bool = _setting(False, "Show the traceback of an unexpected error (1), not one line (0).", "RAG_DEBUG")

    def __post_init__(self):
        if self.home is None:
            object.__setattr__(self, "home", default_home())
        if self.corpus is None:
            object.__setattr__(self, "corpus", bundled_corpus())
        if self.cache_dir is None:
            object.__setattr__(self, "cache_dir", default_cache())
        object.__setattr__(self, "cache_dir", Path(self.cache_dir).expanduser())
        if self.derived_cache_dir is None:
            object.__setattr__(self, "derived_cache_dir", self.cache_dir)
        object.__setattr__(self, "derived_cache_dir", Path(self.derived_cache_dir).expanduser())
        object.__setattr__(self, "home", Path(self.home).expanduser())
        object.__setattr__(self, "corpus", Path(self.corpus).expanduser())
        if self.chunk_size < 16 or not 0 <= self.chunk_overlap < self.chunk_size:
            raise UsageError(f"chunk size {self.chunk_size} and overlap {self.chunk_overlap} do not fit: "
                             "use a chunk size of at least 16 and an overlap smaller than it")
        if self.retrieval not in RETRIEVAL_METHODS:
            raise UsageError(f"retrieval must be one of {', '.join(RETRIEVAL_METHODS)}, got {self.retrieval!r}")
        if self.translate not in ("auto", "off"):
            raise UsageError(f"translate must be auto or off, got {self.translate!r}")
        if self.repack_weights not in ("auto", "on", "off"):
            raise UsageError(f"repack weights must be auto, on or off, got {self.repack_weights!r}")
        if self.embed_runtime not in ("onnx", "torch"):
            raise UsageError(f"embed runtime must be onnx or torch, got {self.embed_runtime!r}")
        if self.context_unit not in ("chunk", "sentence"):
            raise UsageError(f"context unit must be chunk or sentence, got {self.context_unit!r}")
        if self.several_sentences < 0:
            raise UsageError(f"several sentences must be 0 or more, got {self.several_sentences}")
        if self.runner_up_sentences < 0:
            raise UsageError(f"runner-up sentences must be 0 or more, got {self.runner_up_sentences}")
        if self.prompt_papers not in ("near_best", "all"):
            raise UsageError(f"prompt papers must be near_best or all, got {self.prompt_papers!r}")
        if self.answer_format not in ("json", "text"):
            raise UsageError(f"answer format must be json or text, got {self.answer_format!r}")
        for name in ("keyword_weight", "rrf_keyword_weight", "author_weight", "category_weight", "name_weight",
                     "paper_model_weight"):
            if getattr(self, name) < 0:
                raise UsageError(f"{name.replace('_', ' ')} must be 0 or more, got {getattr(self, name)}")
        if not 0 <= self.word_drop_weight <= 1:
            raise UsageError(f"word drop weight must be between 0 and 1, got {self.word_drop_weight}")
        if self.namespace and not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", self.namespace):
            raise UsageError(f"namespace {self.namespace!r} must be 1-64 letters, digits, '.', '_' or '-'")
        if self.top_k < 1:
            raise UsageError(f"top-k must be at least 1, got {self.top_k}")
        if self.chroma_url:
            check_url(self.chroma_url, *CHROMA_URL)
        if self.base_url:
            check_url(self.base_url, *BASE_URL)
        if self.chroma_token:
            check_token(self.chroma_token, "RAG_CHROMA_TOKEN")

    @classmethod
    def from_env(cls, environ=None, **overrides) -> "Settings":
        """Settings from RAG_* variables, then `overrides` (None values are ignored)."""
        environ = os.environ if environ is None else environ
        values = {}
        for f in fields(cls):
            raw = _from_env(f, environ)
            if raw is not None:
                values[f.name] = _convert(f, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def with_overrides(self, **overrides) -> "Settings":
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


def settings_snapshot(settings: Settings) -> dict:
    """Every setting as plain JSON, without secrets: no key or token, URLs without their user-info."""
    return {f.name: (str(v) if isinstance(v, Path) else redact_url(v) if f.name in URL_SETTINGS and v else v)
            for f in fields(settings) if f.name not in SECRET_SETTINGS for v in [getattr(settings, f.name)]}


def settings_environment(settings: Settings) -> dict[str, str]:
    """The RAG_* variables that give a child process these settings (secrets included: for its
    environment only, never to be shown)."""
    return {f.metadata["env"]: ("1" if value else "0") if isinstance(value, bool) else str(value)
            for f in fields(settings) if f.metadata["env"]
            for value in [getattr(settings, f.name)] if value is not None}


def describe_settings(settings: Settings, environ=None) -> list[dict]:
    """Each setting for `rag config`: its variable, the value in use (a secret only as set or not),
    where that value came from (the environment or the default) and its help."""
    environ = os.environ if environ is None else environ
    shown = settings_snapshot(settings)
    return [{"name": f.name, "variable": f.metadata["env"],
             "value": ("(set)" if getattr(settings, f.name) else None) if f.name in SECRET_SETTINGS else shown[f.name],
             "from": "environment" if _from_env(f, environ) is not None else "default",
             "help": f.metadata["help"]} for f in fields(settings)]


def _from_env(f, environ) -> str | None:
    """The raw value of a setting's variable; None when it is unset or empty (the default applies)."""
    raw = environ.get(f.metadata["env"] or "")
    return raw if raw not in (None, "") else None


def _convert(f, raw: str):
    if f.type is bool:
        return raw.strip().lower() not in ("0", "false", "no", "off")
    if f.type in (int, float):
        try:
            return f.type(raw)
        except ValueError:
            raise UsageError(f"{f.metadata['env']}={raw!r} is not a {f.type.__name__} number") from None
    return raw
