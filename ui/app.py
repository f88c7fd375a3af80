"""The Gradio chat UI: a page that asks the rag library and presents its answers.

A chat with streamed answers whose [n] citations link to a sources panel (authors,
category, score, the abstract with the sentences that back the answer highlighted),
follow-up questions, filters by category and author, and how many papers to retrieve.
The local LLM answers one request at a time (one queue shared by the page and the `ask`
API endpoint); waiting users see that they are queued. Loopback by default; any other
address needs a user and password (see check_bind). The page renders answers as HTML
built by render.py, not as Markdown, so model text cannot add images or links; it takes
no uploads and serves no files; ui/guard.py refuses foreign hosts and origins and
throttles failed logins. `rag ui` stops on SIGINT or SIGTERM within a few seconds, even
mid-answer (see serve). Retrieval, prompts and checks live in rag/.
"""

import gc
import ipaddress
import os
import signal
import ssl
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import gradio as gr
from starlette.middleware import Middleware

from rag.conversation import Turn
from rag.errors import UsageError
from rag.retrieve import Filters
from rag.settings import Settings
from rag.ui import render
from rag.ui.backend import Backend, StreamedAnswer
from rag.ui.guard import MAX_FAILED_LOGINS, Guard, HostPolicy, LoginThrottle

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7860
AUTH_ENV = "RAG_UI_AUTH"
MIN_PASSWORD_CHARS = 8
MAX_QUESTION_CHARS = 2000        # the chat box and the `ask` endpoint refuse longer questions
MAX_K = 50                       # papers to retrieve, at most (the page's slider stops at 10)
NO_UPLOADS = 0                   # launch(max_file_size=): the page has no file input, so no upload may hold a byte
FILESYSTEM_ROOT = str(Path(os.sep).resolve())   # launch(blocked_paths=): serve no file, whatever GRADIO_ALLOWED_PATHS says
SHUTDOWN_GRACE_S = 3.0           # how long a stop waits for a model load or an answer's prompt to end
SHUTDOWN_DEADLINE_S = 8.0        # a signalled process has exited by then, whatever still runs
EXIT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 0}   # SIGTERM is how services are stopped: not a failure
SIGNAL_POLL_S = 0.1
CONNECTION_GRACE_S = 1.0         # open streams (a page's heartbeat, an answer) get this long when the server closes
DEFAULT_CONCURRENCY = 8          # events that need no LLM (adding a question, clearing)
LLM_QUEUE = "llm"                # the page's answers and the API share this one-at-a-time queue
EXAMPLES = [
    "what methods reduce reasoning length?",
    "Which papers study grokking?",
    "How can agents learn from language guidance?",
]
QUEUED = ("Queued: the local model answers one question at a time and is busy with another "
          "one; yours is answered next in line.")
SEARCHING = "Searching the papers…"
LOGIN_NOTE = (f"After {MAX_FAILED_LOGINS} failed logins from one address, its logins are refused for a while "
              "(longer after each further failure).")
INTRO = ("### Ask the papers\nAnswers come only from the indexed research-paper abstracts; every [n] is "
         "checked against its paper. Ask a follow-up and it is read in the context of the conversation.")

CSS = """
.rag-cite { text-decoration: none; font-weight: 600; cursor: pointer; }
.rag-unsupported { text-decoration: underline wavy #d97706; }
.rag-unsupported-note { color: #b45309; font-size: 0.85em; }
.rag-standalone, .rag-abstain-reason { color: #6b7280; font-size: 0.85em; }
.rag-error { color: #b91c1c; }
.rag-source { border: 1px solid #e5e7eb; border-radius: 8px; padding: 8px 10px; margin: 6px 0; }
.rag-source.rag-focus { outline: 3px solid #2563eb; }
.rag-meta, .rag-score { color: #6b7280; font-size: 0.85em; }
.rag-abstract { font-size: 0.9em; margin: 4px 0 0 0; }
mark.rag-evidence { background: #fef08a; }
.rag-heading { font-weight: 600; margin-top: 6px; }
.rag-turn > summary { font-weight: 600; cursor: pointer; }
"""

HEAD = """
<script>
document.addEventListener("click", function (event) {
  const link = event.target.closest && event.target.closest('a[href^="#rag-src-"]');
  if (!link) return;
  event.preventDefault();
  event.stopPropagation();
  const target = document.getElementById(link.getAttribute("href").slice(1));
  if (!target) return;
  for (let box = target.closest("details"); box; box = box.parentElement.closest("details")) box.open = true;
  document.querySelectorAll(".rag-source.rag-focus").forEach(function (e) { e.classList.remove("rag-focus"); });
  target.classList.add("rag-focus");
  target.scrollIntoView({behavior: "smooth", block: "center"});
}, true);
</script>
"""


@dataclass
class ChatApp:
    """The Blocks page and the library it calls; launch() serves it, close() stops it."""

    blocks: gr.Blocks
    backend: Backend
    throttle: LoginThrottle = field(default_factory=LoginThrottle)   # failed logins per client address

    def launch(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, auth: str | None = None,
               auth_file: Path | None = None, ssl_keyfile: Path | None = None, ssl_certfile: Path | None = None,
               allowed_hosts: Iterable[str] = ()) -> str:
        """Serve the page in the background; returns its local URL (https:// with a key and certificate).

        auth: USER:PASSWORD, else the first line of auth_file, else $RAG_UI_AUTH. Requests must name
        `host`, localhost or one of `allowed_hosts` (see HostPolicy.for_bind) and come from the page's
        own origin."""
        credentials = check_bind(host, auth, auth_file)
        check_tls(ssl_keyfile, ssl_certfile)
        self.blocks.queue(default_concurrency_limit=DEFAULT_CONCURRENCY)
        guard = Middleware(Guard, hosts=HostPolicy.for_bind(host, allowed_hosts), throttle=self.throttle)
        _app, url, _share = self.blocks.launch(
            server_name=host, server_port=port, share=False, auth=credentials, prevent_thread_lock=True,
            quiet=True, css=CSS, head=HEAD, ssr_mode=False, mcp_server=False, pwa=False,
            auth_message=LOGIN_NOTE if credentials else None, app_kwargs={"middleware": [guard]},
            max_file_size=NO_UPLOADS, blocked_paths=[FILESYSTEM_ROOT],
            num_workers=0,     # not GRADIO_NUM_WORKERS: those file servers would run outside the guard
            ssl_keyfile=_optional_str(ssl_keyfile), ssl_certfile=_optional_str(ssl_certfile),
            ssl_verify=False)  # only for gradio's start-up request to itself: a self-signed certificate is fine
        self.blocks.server.config.timeout_graceful_shutdown = CONNECTION_GRACE_S   # uvicorn's; None: wait for ever
        return url

    def close(self, timeout_s: float | None = None) -> bool:
        """Stop serving and close the backend; False if a load or an answer still ran after timeout_s."""
        self.backend.stop()   # streams end first, so their connections do not hold the server
        self.blocks.close()
        return self.backend.close(timeout_s)


def parse_auth(value: str | None, source: str = "--auth") -> tuple[str, str] | None:
    """'user:password' -> (user, password), the user stripped (gradio strips it at login); None stays None.

    A blank user or a password under MIN_PASSWORD_CHARS is a usage error naming `source`."""
    if value is None or value == "":
        return None
    user, colon, password = value.partition(":")
    user = user.strip()
    if not colon:
        raise UsageError(f"{source} takes USER:PASSWORD, with a colon between the user and the password")
    if not user:
        raise UsageError(f"{source}: the user name is empty or blank; write USER:PASSWORD")
    if len(password) < MIN_PASSWORD_CHARS:
        raise UsageError(f"{source}: the password has {len(password)} characters; use at least "
                         f"{MIN_PASSWORD_CHARS}")
    return user, password


def read_auth_file(path: Path) -> str:
    """The USER:PASSWORD line of an --auth-file, which only its owner may read or change."""
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise UsageError(f"--auth-file {path} is open to other users (mode {stat.S_IMODE(mode):o}): "
                             f"run chmod 600 {path}")
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise UsageError(f"--auth-file {path}: cannot read it ({err.strerror})") from None
    except UnicodeDecodeError:
        raise UsageError(f"--auth-file {path} is not UTF-8 text: write one line USER:PASSWORD") from None
    if not lines or not lines[0]:
        raise UsageError(f"--auth-file {path} is empty: write one line USER:PASSWORD")
    return lines[0]


def resolve_auth(auth: str | None, auth_file: Path | None) -> tuple[str, str] | None:
    """The credentials from --auth, else --auth-file, else $RAG_UI_AUTH; None when none is set."""
    if auth is not None and auth_file is not None:
        raise UsageError("give --auth or --auth-file, not both")
    if auth is not None:
        return parse_auth(auth, "--auth")
    if auth_file is not None:
        return parse_auth(read_auth_file(auth_file), f"--auth-file {auth_file}")
    return parse_auth(Settings.from_env().ui_auth, AUTH_ENV)


def check_tls(keyfile: Path | None, certfile: Path | None) -> None:
    """Both TLS files or neither: a PEM certificate and its unencrypted private key.

    (gradio would report a file it cannot load as "Cannot find empty port".)"""
    if (keyfile is None) != (certfile is None):
        raise UsageError("https needs both --ssl-keyfile and --ssl-certfile")
    if certfile is None:
        return
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile, keyfile, password=lambda: "")
    except ssl.SSLError as err:
        raise UsageError(f"--ssl-certfile {certfile} and --ssl-keyfile {keyfile} are not a PEM certificate and "
                         f"its unencrypted private key ({err.reason or err})") from None
    except OSError as err:
        raise UsageError(f"--ssl-certfile {certfile} or --ssl-keyfile {keyfile}: cannot read it "
                         f"({err.strerror or err})") from None


def _optional_str(path: Path | None) -> str | None:
    return None if path is None else str(path)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may be reachable from elsewhere
        return False


def check_bind(host: str, auth: str | None = None, auth_file: Path | None = None) -> tuple[str, str] | None:
    """The credentials to require (see resolve_auth); refuses a non-loopback address without them."""
    credentials = resolve_auth(auth, auth_file)
    if credentials is None and not is_loopback(host):
        raise UsageError(f"--host {host} makes the UI reachable from other machines: set {AUTH_ENV}=USER:PASSWORD "
                         "or add --auth-file FILE (or --auth USER:PASSWORD), or serve on 127.0.0.1")
    return credentials


def check_request(question, k) -> str | None:
    """What is wrong with a question and its `k` (0: the default), in one line; None when nothing is."""
    if not isinstance(question, str):
        return "the question must be text"
    if len(question) > MAX_QUESTION_CHARS:
        return (f"the question is {len(question):,} characters long: ask it in at most "
                f"{MAX_QUESTION_CHARS:,}")
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= MAX_K:
        return f"k (papers to retrieve) must be a whole number from 1 to {MAX_K}, or 0 for the default; got {k!r}"
    return None


def category_choices(settings: Settings) -> list[tuple[str, str]]:
    """Dropdown choices: every area and every full category of the index (or of the corpus it will hold)."""
    from rag.corpus import CATEGORY_SEPARATOR
    from rag.library import load_corpus
    from rag.ingest import describe_index

    papers = describe_index(settings).papers
    if not papers and settings.corpus.exists():
        papers = load_corpus([settings.corpus]).papers
    categories = sorted({p.category for p in papers if p.category})
    areas = sorted({c.split(CATEGORY_SEPARATOR)[0] for c in categories})
    return [("All categories", "")] + [(f"{a} (all)", a) for a in areas] + [(c, c) for c in categories]


def user_message(text: str) -> dict:
    return {"role": "user", "content": render.render_question(text)}


def assistant_message(html: str) -> dict:
    return {"role": "assistant", "content": html}


def build_app(settings: Settings | None = None, open_model=None) -> ChatApp:
    """The chat page over the index and model that `settings` name; `open_model` opens the model (Backend)."""
    settings = settings or Settings.from_env()
    backend = Backend(settings, open_model)
    with gr.Blocks(title="rag · ask the papers", analytics_enabled=False) as blocks:
        blocks.vibe_mode = False    # GRADIO_VIBE_MODE would let anyone who opens the page rewrite its code
        turns = gr.State([])        # list[Turn]: what follow-ups are condensed with
        sections = gr.State([])     # list[(turn, question, sources HTML)]: the sources panel
        asked = gr.State("")        # the question waiting for its answer
        gr.Markdown(INTRO)
        with gr.Row():
            with gr.Column(scale=3):
                # messages are HTML with every model and corpus text escaped (render.py); Markdown would turn
                # model text such as ![](https://…) into an image the browser fetches, or into a link
                chatbot = gr.Chatbot(label="Answers", elem_id="rag-chat", height=520, buttons=["copy"],
                                     examples=[{"text": q} for q in EXAMPLES], feedback_options=None,
                                     render_markdown=False, latex_delimiters=[], sanitize_html=True,
                                     placeholder="Ask a question about the papers, or pick an example.")
                with gr.Row():
                    question = gr.Textbox(show_label=False, scale=5, elem_id="rag-question", autofocus=True,
                                          max_length=MAX_QUESTION_CHARS,
                                          placeholder="Ask a question about the papers…")
                    ask_button = gr.Button("Ask", variant="primary", scale=1, elem_id="rag-ask")
                with gr.Row():
                    category = gr.Dropdown(category_choices(settings), value="", label="Category",
                                           elem_id="rag-category")
                    author = gr.Textbox(label="Author", placeholder="any author, e.g. C. Colas",
                                        elem_id="rag-author")
                    k = gr.Slider(1, 10, value=settings.top_k, step=1, label="Papers to retrieve",
                                  elem_id="rag-k")
                new_chat = gr.Button("New conversation", variant="secondary", size="sm")
            with gr.Column(scale=2):
                gr.Markdown("### Sources")
                sources = gr.HTML(render.EMPTY_SOURCES, elem_id="rag-sources", js_on_load=None)

        def take(text: str, chat: list):
            return take_question(text, chat, backend.busy)

        def take_example(chat: list, selected: gr.SelectData):
            return take(selected.value["text"], chat)

        def answer(text, chat, history, done_sections, category_value, author_value, k_value):
            if not text:
                yield gr.skip(), gr.skip(), gr.skip(), gr.skip()
                return
            turn = len(done_sections) + 1
            filters = Filters(category=category_value or None, author=(author_value or "").strip() or None)
            streamed = StreamedAnswer()
            for event in backend.stream(text, history, int(k_value), filters):
                if event[0] == "done":
                    reply = event[1]
                    chat[-1] = assistant_message(render.render_reply(turn, reply))
                    done_sections = done_sections + [(turn, text, render.render_turn_sources(turn, reply))]
                    history = history + [Turn(reply.standalone_question, reply.answer.answer)]
                elif event[0] == "error":
                    chat[-1] = assistant_message(render.render_error(event[1]))
                    if event[2]:  # the backend failed after retrieval: show what was found
                        found = render.render_turn_sources(turn, hits=event[2])
                        done_sections = done_sections + [(turn, text, found)]
                elif event[0] == "sources":   # shown while the model is still reading them
                    found = render.render_turn_sources(turn, hits=event[1], answering=True)
                    yield chat, render.render_panel(done_sections + [(turn, text, found)]), gr.skip(), gr.skip()
                    continue
                else:
                    streamed.feed(event)
                    chat[-1] = assistant_message(render.render_streaming(turn, streamed))
                    yield chat, gr.skip(), gr.skip(), gr.skip()
                    continue
                yield chat, render.render_panel(done_sections), history, done_sections

        def start_over():
            return [], [], [], render.EMPTY_SOURCES, ""

        answer_inputs = [asked, chatbot, turns, sections, category, author, k]
        answer_outputs = [chatbot, sources, turns, sections]
        answer_options = dict(concurrency_limit=1, concurrency_id=LLM_QUEUE, api_visibility="private")
        for trigger in (question.submit, ask_button.click):
            trigger(take, [question, chatbot], [question, chatbot, asked], queue=False,
                    api_visibility="private").then(answer, answer_inputs, answer_outputs, **answer_options)
        chatbot.example_select(take_example, [chatbot], [question, chatbot, asked], queue=False,
                               api_visibility="private").then(answer, answer_inputs, answer_outputs,
                                                              **answer_options)
        new_chat.click(start_over, None, [chatbot, turns, sections, sources, asked], queue=False,
                       api_visibility="private")
        chatbot.clear(start_over, None, [chatbot, turns, sections, sources, asked], queue=False,
                      api_visibility="private")

        def ask(question: str, category: str = "", author: str = "", k: int = 0,
                history: list[list[str]] | None = None) -> Iterator[dict]:
            """Answer `question` from the papers. Streams {"answer": text so far, "done": false}, then the
            full answer record with "done": true. history: earlier [question, answer] pairs, oldest first.
            At most MAX_QUESTION_CHARS characters; k from 1 to MAX_K (0: the default)."""
            problem = check_request(question, k)
            if problem is not None:
                raise gr.Error(problem)
            earlier = [Turn(q, a) for q, a in history or []]
            filters = Filters(category=category or None, author=(author or "").strip() or None)
            streamed = StreamedAnswer()
            for event in backend.stream(question, earlier, k or None, filters):
                if event[0] == "done":
                    yield event[1].to_json() | {"done": True}
                elif event[0] == "error":
                    raise gr.Error(event[1])
                else:
                    streamed.feed(event)
                    if event[0] in ("text", "sentence"):
                        yield {"question": question, "answer": streamed.text(), "done": False}

        gr.api(ask, api_name="ask", concurrency_limit=1, concurrency_id=LLM_QUEUE)
    return ChatApp(blocks, backend)


def take_question(text: str, chat: list, busy: bool):
    """The chat's (question box, messages, question to answer) once a question is asked; a question that
    check_request refuses is answered by its error at once, and left in the box to shorten."""
    text = (text or "").strip()
    if not text:
        return gr.skip(), gr.skip(), ""
    problem = check_request(text, 0)
    if problem is not None:
        return gr.skip(), chat + [assistant_message(render.render_error(problem))], ""
    status = QUEUED if busy else SEARCHING
    return "", chat + [user_message(text), assistant_message(f"⏳ {status}")], text


def serve(settings: Settings, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, auth: str | None = None,
          announce=print, *, auth_file: Path | None = None, ssl_keyfile: Path | None = None,
          ssl_certfile: Path | None = None, allowed_hosts: Iterable[str] = (), open_model=None) -> None:
    """`rag ui`: check the address, start loading the models, serve until SIGINT or SIGTERM.

    Then it closes the server and the backend (an answer in progress stops at its next token)
    and raises KeyboardInterrupt after SIGINT (the CLI exits 130) or returns after SIGTERM
    (exit 0). The process exits at once, with that status, when a second signal comes, when
    a model load or an answer's prompt is still running SHUTDOWN_GRACE_S into the close, or
    when anything holds it SHUTDOWN_DEADLINE_S after the signal. The access options are ChatApp.launch's."""
    check_bind(host, auth, auth_file)
    check_tls(ssl_keyfile, ssl_certfile)
    stop = StopSignals(SHUTDOWN_DEADLINE_S).install()
    app = build_app(settings, open_model)
    try:
        app.backend.warm_up()
        url = app.launch(host, port, auth, auth_file=auth_file, ssl_keyfile=ssl_keyfile, ssl_certfile=ssl_certfile,
                         allowed_hosts=allowed_hosts)
        announce(f"rag ui: serving the chat on {url} (Ctrl+C to stop)")
        signum = stop.wait()
        announce(f"rag ui: stopping ({signal.Signals(signum).name}; another signal exits at once)")
    except BaseException:
        app.close(SHUTDOWN_GRACE_S)
        raise
    if not app.close(SHUTDOWN_GRACE_S):
        exit_now(signum, f"the model was still loading or answering {SHUTDOWN_GRACE_S:g} s into the stop; "
                         "exiting without waiting for it")
    gc.freeze()   # the process ends next: collecting its whole heap at exit took seconds and frees nothing
    if signum == signal.SIGINT:
        raise KeyboardInterrupt


class StopSignals:
    """SIGINT and SIGTERM ask the process to stop: the first is noted, a second exits at once.

    The handler only sets an attribute (it runs between any two bytecodes of the main thread,
    so it must not take a lock that thread may hold). A daemon watchdog exits the process
    `deadline_s` after the first signal if it is still alive then: a close that hangs, or a
    thread that interpreter shutdown waits for."""

    def __init__(self, deadline_s: float):
        self.deadline_s = deadline_s
        self.received: int | None = None

    def install(self) -> "StopSignals":
        for signum in EXIT_STATUS:
            signal.signal(signum, self._on_signal)
        threading.Thread(target=self._watch, name="rag-ui-watchdog", daemon=True).start()
        return self

    def wait(self) -> int:
        """Block until a signal has come; returns its number."""
        while self.received is None:
            time.sleep(SIGNAL_POLL_S)
        return self.received

    def _on_signal(self, signum: int, _frame) -> None:
        if self.received is not None:
            exit_now(self.received, f"{signal.Signals(signum).name} during shutdown: exiting at once")
        self.received = signum

    def _watch(self) -> None:
        signum = self.wait()
        time.sleep(self.deadline_s)
        exit_now(signum, f"still running {self.deadline_s:g} s after {signal.Signals(signum).name}: "
                         "exiting without waiting")


def exit_now(signum: int, reason: str) -> None:
    """End the process at once with the exit status for `signum`, saying why on stderr."""
    try:
        os.write(2, f"rag ui: {reason}\n".encode())
    except OSError:   # no stderr
        pass
    os._exit(EXIT_STATUS[signum])
