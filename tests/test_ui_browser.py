"""The chat page in a real browser: headless Debian chromium driven by Playwright.

Each test serves the app in-process on a free loopback port. Most use the scripted fake
LLM; test_real_model_answers_in_the_browser uses the bundled local model (~20 s).
"""

import re
import shutil
import threading
from urllib.parse import urlsplit

import pytest

from fakes import ScriptedModel, opener, reply
from rag.settings import Settings
from servers import free_port

EXAMPLE = "what methods reduce reasoning length?"
FOLLOW_UP = "which of those use reinforcement learning?"
CONDENSED = "Which methods that reduce reasoning length use reinforcement learning?"
GFPO_SENTENCE = ("GFPO samples larger groups and trains on responses filtered by length and token efficiency.", [1])
ANSWER_TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def browser():
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("the browser tests need Debian's chromium on PATH: apt-get install -y chromium (.ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"], headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    yield context.new_page()
    context.close()


@pytest.fixture
def serve():
    """serve(settings, model=None) -> URL of the app, with `model` as its LLM (None: the configured one)."""
    from rag.ui.app import build_app

    apps = []

    def start(settings: Settings, model=None) -> str:
        app = build_app(settings, opener(model) if model is not None else None)
        apps.append(app)
        return app.launch(port=free_port())

    yield start
    for app in apps:
        app.close()


def ask(page, question: str) -> None:
    box = page.locator("#rag-question textarea")
    box.fill(question)
    box.press("Enter")


def open_page(page, url: str) -> None:
    page.goto(url, wait_until="load")   # gradio keeps a connection open: never wait for networkidle
    page.locator("#rag-question textarea").wait_for()


def test_cited_answer_sources_panel_and_follow_up(page, serve, real_settings, tmp_path):
    from playwright.sync_api import expect

    model = ScriptedModel(reply(GFPO_SENTENCE, ("It costs 9000 GPUs.", [1])), {"question": CONDENSED},
                          reply(("GFPO trains with reinforcement learning on filtered responses.", [1])))
    open_page(page, serve(real_settings, model))
    chat, sources = page.locator("#rag-chat"), page.locator("#rag-sources")
    expect(chat.get_by_role("button", name=EXAMPLE)).to_be_visible()   # example questions on the empty screen

    ask(page, EXAMPLE)
    citation = chat.locator('a[href="#rag-src-1-1"]').first   # both sentences cite [1]
    expect(citation).to_have_text("[1]", timeout=ANSWER_TIMEOUT_MS)
    expect(chat.locator(".rag-unsupported")).to_contain_text("It costs 9000 GPUs.")   # marked, not hidden
    source = sources.locator("#rag-src-1-1")
    expect(source).to_contain_text("Shrivastava et al.")
    expect(source).to_contain_text("Vaishnavi Shrivastava")
    expect(source).to_contain_text("no category")
    expect(source).to_contain_text(re.compile(r"score 0\.\d{3}"))
    expect(source.locator("mark.rag-evidence")).to_contain_text("Group Filtered Policy Optimization")
    citation.click()
    expect(source).to_have_class(re.compile(r"\brag-focus\b"))

    ask(page, FOLLOW_UP)
    expect(chat.locator('a[href="#rag-src-2-1"]')).to_have_text("[1]", timeout=ANSWER_TIMEOUT_MS)
    expect(chat).to_contain_text(f"Searched for: {CONDENSED}")
    expect(sources.locator("#rag-turn-2 > summary")).to_contain_text(FOLLOW_UP)
    assert f"User: {EXAMPLE}" in model.history[1][1]["content"]   # the condenser saw the first turn
    assert model.history[2][1]["content"].endswith(f"Question: {CONDENSED}\n")

    citation.click()   # the first turn's [1] still opens the first turn's paper, now folded below
    expect(sources.locator("#rag-turn-1")).to_have_attribute("open", "")
    expect(source).to_have_class(re.compile(r"\brag-focus\b"))
    shot = tmp_path / "chat.png"
    page.screenshot(path=shot, full_page=True)
    assert shot.stat().st_size > 20_000


def test_clicking_an_example_asks_it(page, serve, real_settings):
    from playwright.sync_api import expect

    model = ScriptedModel(reply(GFPO_SENTENCE))
    open_page(page, serve(real_settings, model))
    page.locator("#rag-chat").get_by_role("button", name=EXAMPLE).click()
    expect(page.locator("#rag-src-1-1")).to_contain_text("Shrivastava et al.", timeout=ANSWER_TIMEOUT_MS)
    assert model.history[0][1]["content"].endswith(f"Question: {EXAMPLE}\n")


def test_errors_are_chat_messages(page, serve, real_settings):
    """A bad filter and a backend that is down each give one readable line in the chat, no traceback."""
    from playwright.sync_api import expect

    down = real_settings.with_overrides(backend="openai-like", model="qwen", max_retries=0, timeout_s=5.0,
                                        base_url=f"http://127.0.0.1:{free_port()}/v1")
    open_page(page, serve(down))
    chat = page.locator("#rag-chat")
    page.locator("#rag-author input, #rag-author textarea").first.fill("Nobody Atall")
    ask(page, EXAMPLE)
    expect(chat.locator(".rag-error")).to_contain_text("no indexed paper has an author matching 'Nobody Atall'",
                                                        timeout=ANSWER_TIMEOUT_MS)
    page.locator("#rag-author input, #rag-author textarea").first.fill("")
    ask(page, EXAMPLE)
    expect(chat.locator(".rag-error").nth(1)).to_contain_text("cannot connect", timeout=ANSWER_TIMEOUT_MS)
    expect(chat.locator(".rag-error").nth(1)).to_contain_text("the openai-like backend at http://127.0.0.1:")
    expect(page.locator("#rag-sources")).to_contain_text("Shrivastava et al.")   # what was retrieved is shown
    assert "Traceback" not in page.content()


INJECTED = ("It costs 9000 GPUs ![seen](https://tracker.example/pixel.png), see [the details](https://phish.example/"
            "login) or https://bare.example/x <img src=https://raw.example/i.png>.", [1])
ASKED = "![q](https://question.example/q.png) [which](https://question.example/) use reinforcement learning?"
LOCAL_HOSTS = ("127.0.0.1", "localhost")


def test_model_text_cannot_add_images_or_links(page, serve, real_settings):
    """A prompt-injected answer with Markdown or HTML images and links is shown as text: the browser fetches nothing
    from outside (which would tell a third party that the page was opened) and links only to rag's citations."""
    from playwright.sync_api import expect

    outside = []

    def local_only(route):
        if urlsplit(route.request.url).hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", local_only)
    model = ScriptedModel(reply(GFPO_SENTENCE, INJECTED), {"question": CONDENSED}, reply(GFPO_SENTENCE))
    open_page(page, serve(real_settings, model))
    chat = page.locator("#rag-chat")
    ask(page, EXAMPLE)
    expect(chat.locator(".rag-unsupported")).to_contain_text("![seen](https://tracker.example/pixel.png)",
                                                             timeout=ANSWER_TIMEOUT_MS)   # shown as the text it is
    expect(chat).to_contain_text("<img src=https://raw.example/i.png>")
    expect(page.locator("#rag-sources #rag-src-1-1")).to_be_visible(timeout=ANSWER_TIMEOUT_MS)   # the answer is done
    ask(page, ASKED)   # the user's own text is text too
    expect(chat.locator('a[href="#rag-src-2-1"]')).to_have_text("[1]", timeout=ANSWER_TIMEOUT_MS)
    expect(chat).to_contain_text(ASKED)
    page.wait_for_timeout(500)   # time for any image the page made to be requested
    images = page.eval_on_selector_all("img[src]", "nodes => nodes.map(n => n.src)")
    links = page.eval_on_selector_all("a[href]", "nodes => nodes.map(n => n.href)")
    assert outside == []
    assert [src for src in images if urlsplit(src).scheme != "data" and urlsplit(src).hostname not in LOCAL_HOSTS] == []
    chat_links = chat.locator("a[href]").evaluate_all("nodes => nodes.map(n => n.getAttribute('href'))")
    assert chat_links and all(re.fullmatch(r"#rag-src-\d+-\d+", href) for href in chat_links), chat_links
    assert not [href for href in links if "example" in (urlsplit(href).hostname or "")]


class GatedModel(ScriptedModel):
    """A fake model that holds its first reply until `release` is set."""

    def __init__(self, *replies):
        super().__init__(*replies)
        self.release = threading.Event()
        self.generating = threading.Event()

    def stream(self, messages, schema, max_tokens):
        self.generating.set()
        assert self.release.wait(ANSWER_TIMEOUT_MS / 1000)
        yield from super().stream(messages, schema, max_tokens)


def test_a_second_user_sees_that_they_are_queued(browser, serve, real_settings):
    from playwright.sync_api import expect

    model = GatedModel(reply(GFPO_SENTENCE), reply(GFPO_SENTENCE))
    url = serve(real_settings, model)
    first, second = browser.new_context(), browser.new_context()
    try:
        pages = [first.new_page(), second.new_page()]
        for page in pages:
            open_page(page, url)
        ask(pages[0], EXAMPLE)
        assert model.generating.wait(ANSWER_TIMEOUT_MS / 1000)
        ask(pages[1], EXAMPLE)
        expect(pages[1].locator("#rag-chat")).to_contain_text("Queued: the local model answers one question at a time")
        model.release.set()
        for page in pages:
            expect(page.locator('#rag-chat a[href="#rag-src-1-1"]')).to_be_visible(timeout=ANSWER_TIMEOUT_MS)
    finally:
        model.release.set()
        first.close()
        second.close()


@pytest.mark.real_model
def test_real_model_answers_in_the_browser(page, serve, real_settings, tmp_path):
    from playwright.sync_api import expect

    open_page(page, serve(real_settings))
    ask(page, EXAMPLE)
    expect(page.locator("#rag-chat a.rag-cite").first).to_be_visible(timeout=240_000)
    # cited papers are marked once the answer is complete, which takes longer the more claims it has
    expect(page.locator("#rag-sources .rag-cited").first).to_be_visible(timeout=240_000)
    expect(page.locator("#rag-sources")).to_contain_text("Shrivastava et al.")
    page.screenshot(path=tmp_path / "real-model.png", full_page=True)
