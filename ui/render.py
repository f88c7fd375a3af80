"""HTML for the chat UI: answer messages with citation links, and the sources panel.

Every text that comes from the model, the corpus or the user is HTML-escaped here, and
the chat shows these messages as HTML, not Markdown: model text can make no element (no
image, link or script); the only links are rag's citations and, in the sources panel, a paper's
own page (its URL, DOI or arXiv link, http or https only). A citation [n] of turn t
links to `#rag-src-t-n`, the id of that paper's entry in the sources panel; the page's
script (app.py) opens and highlights it on click. This module only formats records that
the library produced.
"""

from html import escape

from rag.answer_record import CANNOT_ANSWER, Sentence
from rag.conversation import ChatReply
from rag.evidence import HighlightedAbstract, split_sentences
from rag.prompt_safety import screen
from rag.retrieve import Hit
from rag.ui.backend import StreamedAnswer

UNSUPPORTED_TITLE = "The grounding check found no support for this sentence in the papers it cites."
ABSTAIN_REASONS = {
    "retrieval": "No paper in the index is close enough to the question, so the model was not asked.",
    "model": "The model found no answer in the retrieved papers.",
    "unsupported": "The model drafted an answer, but no sentence of it is backed by the papers "
                   "(the draft is shown struck out).",
    "off_question": "The papers found are near the question's topic, but none of them answers it.",
    "not_stated": "The papers found are on the topic, but their abstracts do not state what was asked.",
}
EMPTY_SOURCES = ('<div class="rag-sources-empty">Sources appear here: each cited paper with its '
                 'authors, category, score and abstract, the sentences that back the answer '
                 'highlighted. Click a citation such as [1] to jump to its paper.</div>')


def source_anchor(turn: int, n: int) -> str:
    return f"rag-src-{turn}-{n}"


def citation_links(turn: int, numbers: list[int]) -> str:
    return "".join(f'<a class="rag-cite" href="#{source_anchor(turn, n)}">[{n}]</a>' for n in numbers)


def render_sentence(turn: int, sentence: Sentence) -> str:
    """One checked answer sentence: its text, its citation links, a visible mark when unsupported."""
    text = escape(sentence.text)
    links = citation_links(turn, sentence.citations)
    if sentence.supported:
        return f"{text} {links}".rstrip()
    return (f'<span class="rag-unsupported" title="{UNSUPPORTED_TITLE}">⚠ {text}</span> {links} '
            f'<em class="rag-unsupported-note">(not supported by its sources)</em>')


def render_streaming(turn: int, streamed: StreamedAnswer) -> str:
    """The answer while it streams: checked sentences, then the sentence being written (or the status)."""
    parts = [render_sentence(turn, s) for s in streamed.sentences]
    if streamed.pending.strip():
        parts.append(escape(streamed.pending.strip()))
    if not parts:
        return f"⏳ {escape(streamed.status or 'Reading the papers…')}"
    return " ".join(parts) + " ▌"


def render_reply(turn: int, reply: ChatReply) -> str:
    """The finished answer: what was searched for (after a follow-up), the sentences, or the abstention."""
    answer = reply.answer
    lines = []
    if reply.standalone_question.casefold() != reply.question.casefold():
        lines.append(f'<div class="rag-standalone">Searched for: <em>{escape(reply.standalone_question)}</em></div>')
    if answer.abstained:
        lines.append(f'<strong class="rag-abstained">{escape(CANNOT_ANSWER)}</strong>')
        lines.append(f'<div class="rag-abstain-reason">{escape(ABSTAIN_REASONS.get(answer.abstain_reason, ""))} '
                     'The nearest papers are listed under Sources.</div>')
        if answer.abstain_reason == "not_stated":
            lines.append(" ".join(render_sentence(turn, s) for s in answer.sentences))
        elif answer.abstain_reason in ("unsupported", "off_question") and answer.sentences:
            draft = " ".join(escape(s.text) for s in answer.sentences)
            lines.append(f'<div class="rag-draft"><del>{draft}</del></div>')
    elif answer.lead is not None:
        items = "".join(f"<li>{' '.join(render_sentence(turn, s) for s in item)}</li>" for item in answer.items())
        lines.append(f'{escape(answer.lead)}<ul class="rag-list">{items}</ul>')
    else:
        lines.append(" ".join(render_sentence(turn, s) for s in answer.sentences))
    return "\n".join(lines)


def render_question(text: str) -> str:
    """The user's question as typed, as text (the chat shows messages as HTML)."""
    return escape(text)


def render_error(message: str) -> str:
    return f'<div class="rag-error">⚠ Could not answer: {escape(message)}</div>'


def render_turn_sources(turn: int, reply: ChatReply | None = None, hits: list[Hit] | None = None,
                        answering: bool = False) -> str:
    """One turn's sources: cited papers first (with evidence marked), then the other retrieved ones;
    `answering`: the papers found, shown while the model still reads them."""
    if reply is not None:
        hits = reply.answer.sources
        cited = {c.paper.paper_id: c.n for c in reply.answer.citations}
        evidence = reply.evidence
    else:
        cited, evidence = {}, {}
    entries = sorted(hits or [], key=lambda h: (h.paper.paper_id not in cited, cited.get(h.paper.paper_id, 0), h.rank))
    cited_html = [_source_entry(turn, h, cited[h.paper.paper_id], evidence.get(h.paper.paper_id))
                  for h in entries if h.paper.paper_id in cited]
    other_html = [_source_entry(turn, h, None, None) for h in entries if h.paper.paper_id not in cited]
    heading = "Cited papers" if cited_html else "Papers found (answering…)" if answering else "Nearest papers (none cited)"
    parts = [f'<div class="rag-heading">{heading}</div>']
    parts += cited_html if cited_html else other_html
    if cited_html and other_html:
        parts.append(f'<details class="rag-others"><summary>Also retrieved, not cited ({len(other_html)})'
                     f'</summary>{"".join(other_html)}</details>')
    return "".join(parts)


def _source_entry(turn: int, hit: Hit, n: int | None, highlighted: HighlightedAbstract | None) -> str:
    paper = hit.paper
    anchor = f' id="{source_anchor(turn, n)}"' if n is not None else ""
    marker = f"[{n}]" if n is not None else f"#{hit.rank}"
    return (f'<div class="rag-source{" rag-cited" if n is not None else ""}"{anchor} data-paper="{paper.paper_id}">'
            f'<div class="rag-source-head"><span class="rag-n">{marker}</span> <strong>{escape(paper.label)}'
            f'{f" {paper.year}" if paper.year else ""}</strong>{_title_html(paper)}'
            f' <span class="rag-score">score {hit.score:.3f}</span></div>'
            f'<div class="rag-meta">{escape(", ".join(paper.authors))}{" et al." if paper.authors_truncated else ""}'
            f' · {escape(paper.category or "no category")} · {escape(paper.source)}{_link_html(paper)}</div>'
            f'{_instructions_note(paper.text)}'
            f'<p class="rag-abstract">{_abstract_html(paper.text, highlighted)}</p></div>')


def _title_html(paper) -> str:
    return f' · <span class="rag-title">“{escape(paper.title)}”</span>' if paper.title else ""


def _link_html(paper) -> str:
    """The paper's own page as a link that opens apart from the chat; '' when it has none (or not http/https)."""
    link = paper.link
    if not link or not link.lower().startswith(("https://", "http://")):
        return ""
    return f' · <a class="rag-link" href="{escape(link)}" target="_blank" rel="noopener noreferrer">{escape(link)}</a>'


def _instructions_note(text: str) -> str:
    """A visible note on a paper whose abstract addresses the model (prompt_safety.screen); else ''."""
    screened = screen(text)
    if not screened.flagged:
        return ""
    if screened.left_out:
        note = (f"This abstract reads as instructions to the model ({screened.removed} of "
                f"{len(screened.sentences)} sentences), so none of it was given to the model.")
    else:
        note = (f"{screened.removed} sentence{'s' if screened.removed > 1 else ''} of this abstract "
                "read as instructions to the model and were not given to it.")
    return f'<div class="rag-instructions">⚠ {escape(note)}</div>'


def _abstract_html(text: str, highlighted: HighlightedAbstract | None) -> str:
    if highlighted is None:
        return " ".join(escape(s) for s in split_sentences(text))
    return " ".join(f'<mark class="rag-evidence">{escape(s)}</mark>' if i in highlighted.supporting else escape(s)
                    for i, s in enumerate(highlighted.sentences))


def render_panel(sections: list[tuple[int, str, str]]) -> str:
    """The sources panel from (turn, question, sources HTML) sections: the newest first and open."""
    if not sections:
        return EMPTY_SOURCES
    parts = []
    for position, (turn, question, body) in enumerate(reversed(sections)):
        state = "open" if position == 0 else ""
        parts.append(f'<details class="rag-turn" id="rag-turn-{turn}" {state}>'
                     f'<summary>Question {turn}: {escape(question)}</summary>{body}</details>')
    return "".join(parts)
