"""The rag library behind the chat UI: opened once on first use, one generation at a time.

`Backend` holds the retriever, the LLM and the ChatAnswerer (rag/conversation.py) and
turns one chat turn into a stream of events for the page: ("status", message),
("text", new answer text), ("sentence", checked Sentence), then ("done", ChatReply)
or ("error", one readable line). The library runs in a daemon worker thread; its
callbacks are bridged to the caller through a queue. close() stops the answers in
progress at their next token, so a shutting-down server is not held by a generation.
Nothing here formats HTML.
"""

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator

from rag import llm
from rag.answer_record import Sentence
from rag.conversation import ChatAnswerer, Turn
from rag.errors import RagError
from rag.retrieve import Filters, Retriever
from rag.settings import Settings
from rag.translate import translator_for

log = logging.getLogger(__name__)

LOADING = "Loading the papers and the models (first question only)…"
BUILDING_INDEX = "Building the search index of the papers (first run only, about 15 s)…"
STOPPED = "stopped: the server is shutting down"
EVENT_POLL_S = 0.2   # how often a waiting stream checks whether the backend is closing


class Stopped(RagError):
    """The backend is closing: the answer in progress was cut off."""


class Backend:
    """The retriever, the model and the chat answerer of one UI process."""

    def __init__(self, settings: Settings, open_model=None):
        """`open_model(settings)` opens the LLM when the backend opens (default rag.llm.open_model)."""
        self.settings = settings
        self._open_model = open_model or llm.open_model
        self.generation_lock = threading.Lock()   # the local LLM generates for one request at a time
        self._open_lock = threading.Lock()
        self._closing = threading.Event()         # set by close(): answers stop at their next token
        self._retriever: Retriever | None = None
        self.chat: ChatAnswerer | None = None

    @property
    def ready(self) -> bool:
        return self.chat is not None

    @property
    def busy(self) -> bool:
        """True while a request is generating (a new one will wait its turn)."""
        return self.generation_lock.locked()

    def open(self, notify=lambda message: None) -> ChatAnswerer:
        """Open the index (building it on first run) and the model, once; a closed backend stays closed."""
        with self._open_lock:
            if self._closing.is_set():
                raise Stopped(STOPPED)
            if self.chat is None:
                translator = translator_for(self.settings, self._open_model)
                retriever = Retriever(self.settings, notify=notify, translator=translator)
                try:
                    model = StoppableModel(self._open_model(self.settings), self._closing)
                    self.chat = ChatAnswerer(self.settings, retriever, model, translator)
                except BaseException:
                    retriever.close()
                    raise
                self._retriever = retriever
            return self.chat

    def warm_up(self) -> None:
        """Open everything in the background so the first question does not wait for it."""
        def work():
            try:
                self.open()
            except Exception as err:  # the first question reports it in the chat
                log.warning("rag ui: warm-up failed: %s", err)
        threading.Thread(target=work, name="rag-warm-up", daemon=True).start()

    def stop(self) -> None:
        """Answers in progress end at their next token (their streams at once); new ones are refused."""
        self._closing.set()

    def close(self, timeout_s: float | None = None) -> bool:
        """stop(), then close the retriever, for good.

        Waits for a load or a generation to end, at most timeout_s seconds (None: as long as it
        takes); returns False, leaving things open, when one was still running then."""
        self.stop()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        if not _acquire(self._open_lock, deadline):
            return False
        try:
            if not _acquire(self.generation_lock, deadline):
                return False
            try:
                if self._retriever is not None:
                    self._retriever.close()
                self._retriever, self.chat = None, None
            finally:
                self.generation_lock.release()
        finally:
            self._open_lock.release()
        return True

    def stream(self, question: str, history: list[Turn], k: int | None, filters: Filters) -> Iterator[tuple]:
        """Events of one chat turn, ending with ("done", ChatReply) or ("error", message)."""
        events: queue.Queue = queue.Queue()

        def work():
            try:
                if not self.ready:
                    events.put(("status", LOADING))
                chat = self.open(notify=lambda _message: events.put(("status", BUILDING_INDEX)))
                with self.generation_lock:
                    reply = chat.reply(question, history, k=k, filters=filters,
                                       on_text=lambda text: events.put(("text", text)),
                                       on_sentence=lambda sentence: events.put(("sentence", sentence)),
                                       on_sources=lambda hits: events.put(("sources", hits)))
                events.put(("done", reply))
            except RagError as err:
                events.put(("error", str(err), getattr(err, "sources", None) or []))
            except Exception as err:  # a bug: one line in the chat, the traceback in the server log
                log.exception("rag ui: internal error")
                events.put(("error", f"internal error: {type(err).__name__}: {err}", []))

        threading.Thread(target=work, name="rag-answer", daemon=True).start()
        while True:
            try:
                event = events.get(timeout=EVENT_POLL_S)
            except queue.Empty:
                if self._closing.is_set():   # the worker may be stuck in a load or a prompt: do not wait
                    yield ("error", STOPPED, [])
                    return
                continue
            yield event
            if event[0] in ("done", "error"):
                return


class StoppableModel:
    """A chat model whose replies end at the next token once `stopping` is set, raising Stopped."""

    def __init__(self, model, stopping: threading.Event):
        self._model = model
        self._stopping = stopping

    def __getattr__(self, name):
        return getattr(self._model, name)   # backend, model name and anything else the library reads

    def stream(self, messages, schema, max_tokens):
        deltas = iter(self._model.stream(messages, schema, max_tokens))
        try:
            for delta in deltas:
                if self._stopping.is_set():
                    raise Stopped(STOPPED)
                yield delta
        finally:
            close = getattr(deltas, "close", None)
            if close is not None:
                close()   # a local decode or an HTTP stream ends here, not when garbage-collected


def _acquire(lock: threading.Lock, deadline: float | None) -> bool:
    """Take `lock`, waiting until `deadline` (time.monotonic(); None: for ever)."""
    if deadline is None:
        return lock.acquire()
    return lock.acquire(timeout=max(0.0, deadline - time.monotonic()))


@dataclass
class StreamedAnswer:
    """What has streamed so far of one answer: its checked sentences, the one being written, the last status."""

    sentences: list[Sentence] = field(default_factory=list)
    pending: str = ""
    status: str = ""

    def feed(self, event: tuple) -> None:
        """Take in a ("status" | "text" | "sentence", value) event; others are the caller's."""
        kind, value = event[0], event[1]
        if kind == "status":
            self.status = value
        elif kind == "text":
            self.pending += value
        elif kind == "sentence":
            if value is not None and value.kind != "off_question":  # None: a repeat; off-question: held back
                self.sentences.append(value)
            self.pending = ""

    def text(self) -> str:
        """The answer so far as plain text with [n] marks."""
        return " ".join([s.render() for s in self.sentences] + ([self.pending.strip()] if self.pending.strip() else []))
