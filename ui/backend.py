"""The rag library behind the chat UI: opened once on first use, one generation at a time.

`Backend` holds the retriever, the LLM and the ChatAnswerer (rag/conversation.py) and
turns one chat turn into a stream of events for the page: ("status", message),
("text", new answer text), ("sentence", checked Sentence), then ("done", ChatReply)
or ("error", one readable line). The library runs in a worker thread; its callbacks
are bridged to the caller through a queue. Nothing here formats HTML.
"""

import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Iterator

from rag import llm
from rag.answer import Sentence
from rag.conversation import ChatAnswerer, Turn
from rag.errors import RagError
from rag.retrieve import Filters, Retriever
from rag.settings import Settings

log = logging.getLogger(__name__)

LOADING = "Loading the papers and the models (first question only)…"
BUILDING_INDEX = "Building the search index of the papers (first run only, about 15 s)…"


class Backend:
    """The retriever, the model and the chat answerer of one UI process."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.generation_lock = threading.Lock()   # the local LLM generates for one request at a time
        self._open_lock = threading.Lock()
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
        """Open the index (building it on first run) and the model, once."""
        with self._open_lock:
            if self.chat is None:
                retriever = Retriever(self.settings, notify=notify)
                try:
                    self.chat = ChatAnswerer(self.settings, retriever, llm.open_model(self.settings))
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

    def close(self) -> None:
        with self._open_lock:
            if self._retriever is not None:
                self._retriever.close()
            self._retriever, self.chat = None, None

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
                                       on_sentence=lambda sentence: events.put(("sentence", sentence)))
                events.put(("done", reply))
            except RagError as err:
                events.put(("error", str(err), getattr(err, "sources", None) or []))
            except Exception as err:  # a bug: one line in the chat, the traceback in the server log
                log.exception("rag ui: internal error")
                events.put(("error", f"internal error: {type(err).__name__}: {err}", []))

        threading.Thread(target=work, name="rag-answer", daemon=True).start()
        while True:
            event = events.get()
            yield event
            if event[0] in ("done", "error"):
                return


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
            if value is not None:  # None: a repeated or empty sentence, dropped
                self.sentences.append(value)
            self.pending = ""

    def text(self) -> str:
        """The answer so far as plain text with [n] marks."""
        return " ".join([s.render() for s in self.sentences] + ([self.pending.strip()] if self.pending.strip() else []))
