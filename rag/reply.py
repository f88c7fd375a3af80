"""The model's reply: the JSON shape asked of it (answer_schema: a refusal flag, then items of one claim
about one source), and ReplyParser, which reads the reply claim by claim as it streams (or, from a backend
that ignores the schema, as plain text with [n] markers)."""

import json
import re

MAX_SENTENCE_CHARS = 280   # one claim per sentence, so each is checked on its own
CUT_SLACK = 16             # a claim this close to the limit that does not end a sentence was cut
REPLY_START = '{"answerable":'   # where the schema's reply says whether the sources answer
YES, NO = (" true", "true"), (" false", "false")


def answer_schema(max_items: int, source_numbers: list[int] | None = None) -> dict:
    """The JSON shape asked of the model: a refusal flag, then items of one claim about one source.

    `source` is a choice among the numbers given, so every claim is about one paper that is there."""
    source = {"type": "integer"} | ({"enum": list(source_numbers)} if source_numbers else {})
    item = {"type": "object", "additionalProperties": False, "required": ["source", "claim"],
            "properties": {"source": source, "claim": {"type": "string", "maxLength": MAX_SENTENCE_CHARS}}}
    return {"type": "object", "additionalProperties": False, "required": ["answerable", "items"],
            "properties": {"answerable": {"type": "boolean"},
                           "items": {"type": "array", "items": item, "maxItems": max_items}}}


_INLINE = re.compile(r"\s*\[(\d+(?:\s*[,;]\s*\d+)*)\]")


def split_inline_citations(text: str) -> tuple[str, list[int]]:
    """'GFPO cuts length [1][2].' -> ('GFPO cuts length.', [1, 2])."""
    found = [int(n) for group in _INLINE.findall(text) for n in re.split(r"[,;]", group)]
    clean = _INLINE.sub("", text).strip()
    return re.sub(r"\s+([.,;:])", r"\1", clean), found


class ReplyParser:
    """Turns the streamed reply into sentence text as it arrives and whole sentences as they close.

    Expects the JSON of answer_schema (items: source, then claim); the shape of sentences that
    list their sources after the text is read too. A reply that is not JSON is read as plain
    text with [n] markers once it is complete.
    """

    _ITEM = re.compile(r'\{\s*"source"\s*:\s*(-?\d+)\s*,\s*"claim"\s*:\s*"((?:[^"\\]|\\.)*)("?)')
    _SENTENCE = re.compile(r'\{\s*"text"\s*:\s*"((?:[^"\\]|\\.)*)("?)(?:\s*,\s*"sources"\s*:\s*\[([^\]]*)(\]?))?')
    _REFUSAL = re.compile(r'"answerable"\s*:\s*false')

    def __init__(self):
        self.buffer = ""
        self.refused = False
        self._shown: list[int] = []      # characters of each sentence's text already emitted
        self._closed = 0                 # sentences already emitted whole

    def feed(self, delta: str) -> list[tuple]:
        """Events for this delta: ('text', new characters) and ('sentence', text, [source numbers])."""
        self.buffer += delta
        if not self.buffer.lstrip().startswith("{"):
            return []
        self.refused = self.refused or bool(self._REFUSAL.search(self.buffer))
        events = []
        for index, (raw, closed_text, sources, closed_sources) in enumerate(self._claims()):
            text = _decode_partial(raw)
            visible = trim_cut_text(text) if closed_text else text[:_last_sentence_end(text)]
            if index == len(self._shown):
                self._shown.append(0)
            if len(visible) > self._shown[index]:
                events.append(("text", visible[self._shown[index]:]))
                self._shown[index] = len(visible)
            text = visible
            if closed_sources and index == self._closed:
                events.append(("sentence", text, _integers(sources)))
                self._closed += 1
        return events

    def _claims(self) -> list[tuple[str, str, str, bool]]:
        """(raw text, closing quote or '', source numbers, whether the claim is complete) of each claim so far."""
        items = [(m[2], m[3], m[1], bool(m[3])) for m in self._ITEM.finditer(self.buffer)]
        if items:
            return items
        return [(m[1], m[2], m[3] or "", bool(m[4])) for m in self._SENTENCE.finditer(self.buffer)]

    def finish(self) -> list[tuple[str, list[int]]]:
        """Sentences left once the stream ends: an unclosed JSON one, or a plain-text reply."""
        if self.buffer.lstrip().startswith("{"):
            return [(trim_cut_text(_decode_partial(raw)), _integers(sources))
                    for raw, closed_text, sources, _ in self._claims()[self._closed:] if closed_text]
        return split_plain_reply(self.buffer)


# Where split_plain_reply breaks a plain-text reply: the space after . ! ? and the [n] markers that
# follow it (kept with the sentence before), whatever comes next, since a model's sentence may start
# in lower case; unlike corpus.split_sentences, which splits abstracts.
_PLAIN_REPLY_BREAK = re.compile(r"(?<=[.!?。！？])((?:\s*\[\d+(?:\s*[,;]\s*\d+)*\])*)\s+")


def split_plain_reply(text: str) -> list[tuple[str, list[int]]]:
    """Plain text with [n] markers -> (sentence, cited numbers) pairs."""
    text = re.sub(r"(\s*\[\d+\]){4,}", lambda m: "".join(dict.fromkeys(re.findall(r"\[\d+\]", m[0]))), text)
    pieces = _PLAIN_REPLY_BREAK.split(text.strip() + " ")
    sentences = []
    for i in range(0, len(pieces) - 1, 2):
        sentence, trailing = pieces[i], pieces[i + 1] or ""
        body, cited = split_inline_citations(sentence + trailing)
        if body:
            sentences.append((body, cited))
    if len(pieces) % 2 == 1 and pieces[-1].strip():
        body, cited = split_inline_citations(pieces[-1])
        if body:
            sentences.append((body, cited))
    return sentences


# The end of a finished sentence inside a model's claim as it streams (not corpus.split_sentences,
# which splits abstracts and needs the next sentence's first letter): . ! ? before a space or the
# end of what has arrived, not after "et al.", "e.g.", "i.e.", "vs.", "Fig." or "cf.".
_FINISHED = re.compile(r"[.!?。！？][\"'”’)\]]*\s*$")   # a text that ends a sentence
_CLAIM_SENTENCE_END = re.compile(r"(?<! al)(?<!e\.g)(?<!i\.e)(?<! vs)(?<!Fig)(?<! cf)[.!?。！？](?=\s|$)")


def _last_sentence_end(text: str) -> int:
    """Length of the text up to its last finished sentence (0 if none has finished yet)."""
    ends = [m.end() for m in _CLAIM_SENTENCE_END.finditer(text)]
    return ends[-1] if ends else 0


def trim_cut_text(text: str) -> str:
    """A sentence text the schema cut at MAX_SENTENCE_CHARS loses its unfinished last sentence; a single
    sentence that was cut loses its last word too, which may be cut short or glued to the word before
    it (at the limit, the grammar allows " plane" only as "plane": "coloring theplane"). Near the limit
    a token that would not fit is not allowed, so the model may close the text a few characters early,
    unfinished: a text within CUT_SLACK of the limit that does not end a sentence was cut too."""
    if len(text) < MAX_SENTENCE_CHARS - CUT_SLACK or (len(text) < MAX_SENTENCE_CHARS and _FINISHED.search(text)):
        return text
    if end := _last_sentence_end(text):
        return text[:end]
    words = text.split()
    return " ".join(words[:-1] if len(words) > 1 else words).rstrip(",;:") + "…"


def _decode_partial(raw: str) -> str:
    """Decode a JSON string body that may end mid-escape."""
    raw = re.sub(r"\\(u[0-9a-fA-F]{0,3})?$", "", raw)
    try:
        return json.loads(f'"{raw}"')
    except json.JSONDecodeError:
        return raw.replace('\\"', '"').replace("\\n", " ")


def _integers(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"-?\d+", text or "")]
