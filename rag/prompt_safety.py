"""Make corpus and user text safe to put in a prompt: delimiter tags defused, instructions found.

Two rules live here and nowhere else; every prompt builder (answer.py, eval/judge.py, conversation.py,
translate.py) and the ingest report's warnings (ingest.py) call them:

- `defuse(text)` neutralises every tag-like sequence that could read as one of the prompts'
  delimiters: `<source …>`, `</source>`, `<system>`, `<user>`, `<assistant>` and the like, and
  chat-template tokens such as `<|im_start|>`. Only the angle brackets of such a tag change, to
  ‹ and ›, so `<sources of error> are 3 and x > y` keeps every word. Detection reads a folded copy
  of the text (see `fold`), so `< /source>`, `＜/source＞`, `</ѕource>` (Cyrillic ѕ), `</source>`
  with a zero-width space inside and `&lt;/source&gt;` are all found; the edit is made on the
  original text, at the matched brackets only, so superscripts, ligatures and numbers stay as written.
- `screen(text)` finds the sentences that address a model instead of describing research
  (`is_instruction`; the rule is documented at `_OPENERS`). A paper most of whose sentences are
  instructions is left out whole.

It does not decide where text goes or what the user sees: answer.py keeps flagged sentences out of
the sources it gives and reports them, ingest.py lists them in the ingest report, ui/render.py shows a note.
"""

import bisect
import functools
import itertools
import re
import unicodedata
from dataclasses import dataclass

from rag.corpus import split_sentences

LEFT = "\u2039"    # ‹ : what a tag's '<' becomes
RIGHT = "\u203a"   # › : what a tag's '>' becomes

# Dropped when folding: every Unicode format character (category Cf: zero-width space and joiners,
# bidi controls, soft hyphen, tag characters), variation selectors, invisible fillers, and the
# combining marks of the common blocks (so `≮`, NFKD '<' + U+0338, reads as '<').
_INVISIBLE_RANGES = (
    (0x00AD, 0x00AD), (0x0300, 0x036F), (0x034F, 0x034F), (0x0483, 0x0489), (0x0600, 0x0605), (0x061C, 0x061C),
    (0x06DD, 0x06DD), (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x1AB0, 0x1AFF), (0x1DC0, 0x1DFF), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x2064),
    (0x2066, 0x206F), (0x20D0, 0x20FF), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFE20, 0xFE2F), (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x13438),
    (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001), (0xE0020, 0xE007F), (0xE0100, 0xE01EF))
# Letters that look like Latin ones (Cyrillic, Greek, Latin small capitals and the like), mapped to
# the Latin letter they pass for; NFKC does not do this. The look-alikes of a-z are enough for the
# words looked for here (the `confusables` package has all of Unicode's list).
_LOOK_ALIKES = dict(zip("аеорсухіјѕԁһӏԛԝмткαοριυνκτχϲϳεηᴀʙᴄᴅᴇɢʜɪᴊᴋʟᴍɴᴏᴘʀꜱᴛᴜᴠᴡʏᴢɑɡıȷɩ",
                        "aeopcyxijsdhlqwmtkaopiuvktxcjenabcdeghijklmnoprstuvwyzagiji"))
_FOLD_TABLE = {c: None for low, high in _INVISIBLE_RANGES for c in range(low, high + 1)} | str.maketrans(_LOOK_ALIKES)
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
_ENTITY = re.compile(r"&(?:(lt)|(gt)|#0*(?:(60)|(62))|#x0*(?:(3c)|(3e)));?")
# The characters a '<' can come from (NFKD of ＜ ﹤ ≮, or an entity's '&'): text without any has no tag.
_MAY_HOLD_TAG = re.compile("[<&\ufe64\uff1c\u226e\ufe60\uff06]")


def _fold_chars(text: str) -> str:
    """Compatibility forms (NFKD), case folded, invisibles and combining marks dropped, look-alikes mapped.

    Works a character at a time, so folding a text equals joining its folded characters."""
    if text.isascii():
        return text.lower()
    return _NON_ASCII.sub(_fold_run, unicodedata.normalize("NFKD", text).casefold())


def _fold_run(run: re.Match) -> str:
    return run[0].translate(_FOLD_TABLE)


def _decode(entity: re.Match) -> str:
    return "<" if entity[1] or entity[3] or entity[5] else ">"


def fold(text: str) -> str:
    """What a reader (or a model) may take the text to say: `_fold_chars`, then the HTML entities for
    < and > decoded. Used only to detect; nothing folded is ever put in a prompt. (NFKD with the
    marks dropped finds all that NFKC would, and also '<' under a combining mark.) Not corpus.fold,
    which folds names and search words and keeps look-alike letters and invisible characters."""
    folded = _fold_chars(text)
    return _ENTITY.sub(_decode, folded) if "&" in folded else folded


# The names a tag may carry to pass for a delimiter of our prompts or of a chat template.
_NAMES = r"(?:source|system|user|assistant|human|developer|tool|inst|sys|im_start|im_end|im_sep|endoftext)s?"
TAG = re.compile(rf"""
    <\s*\|[^<>|\n]{{0,40}}\|\s*>                       # a chat-template token: <|im_start|>, <|endoftext|>
  | <\s*/?\s*{_NAMES}\b[^<>\n]{{0,200}}>              # a whole tag: <source id="2">, < /source>, <system>
  | <(?:\s*/\s*|/?){_NAMES}\b                          # a tag's start left open: <source id="2"  or  </ source
""", re.VERBOSE)


def find_tags(text: str) -> list[str]:
    """The tag-like sequences of the text, as folded (what `defuse` would neutralise)."""
    return [m[0] for m in TAG.finditer(fold(text))]


def defuse(text: str) -> str:
    """The text with the angle brackets of every tag-like sequence replaced by ‹ ›; else unchanged."""
    if not _MAY_HOLD_TAG.search(text) or not TAG.search(fold(text)):
        return text   # the common case: nothing to do, the text is returned as it is
    pieces = [char.lower() if char.isascii() else _fold_chars(char) for char in text]
    spans = [(index, index + 1) for index, piece in enumerate(pieces) for _ in piece]   # per folded character
    folded = "".join(pieces)
    decoded, decoded_spans, last = [], [], 0
    for m in _ENTITY.finditer(folded):   # an entity becomes one character spanning all it came from
        decoded += folded[last:m.start()]
        decoded_spans += spans[last:m.start()]
        decoded.append(_decode(m))
        decoded_spans.append((spans[m.start()][0], spans[m.end() - 1][1]))
        last = m.end()
    decoded += folded[last:]
    decoded_spans += spans[last:]
    folded = "".join(decoded)
    edits = {}
    for m in TAG.finditer(folded):
        for k in range(m.start(), m.end()):
            if folded[k] in "<>":
                edits[decoded_spans[k]] = LEFT if folded[k] == "<" else RIGHT
    out, position = [], 0
    for (start, end), replacement in sorted(edits.items()):
        out += [text[position:start], replacement]
        position = end
    return "".join(out) + text[position:]


# The rule for instructions to a model. A sentence is one when, folded (see `fold`), it opens with
# an order (_OPENERS) or holds a phrase of _ANYWHERE: phrases that address a reader who takes orders,
# which an abstract (written in the third person or as "we") does not use. Each _ANYWHERE pattern
# comes with words that any match of it contains, and is tried only on the sentences that hold one,
# so a search pays for the few sentences its sources give reason to look at. Checked to flag none of
# data/'s 80 abstracts (tests/test_prompt_safety.py); a paper that quotes an attack to study it is
# flagged like one.
_OPENERS = re.compile(r"""\W*(?:
    (?:(?:please|kindly|now)\s+)*(?:ignore|disregard|forget|override)\b                # Ignore the above …
  | (?:please\s+)?(?:do\s+not|don't|never|always)\s+                                 # Do not cite …
      (?:cite|mention|answer|respond|reply|say|state|reveal|tell|output|print|write|follow|trust)\b
  | (?:please\s+)?(?:answer|respond|reply|say|output|print|write|state)\s+(?:only|exactly|that|with|always)\b
  | (?:system|assistant|user|human|developer)\s*:                                     # SYSTEM: …
)""", re.VERBOSE)
_ANYWHERE = tuple((words, re.compile(pattern, re.VERBOSE)) for words, pattern in (
    # ignore all previous instructions, disregard the prior rules
    (("ignore", "disregard", "forget", "override"), r"""
        \b(?:ignore|disregard|forget|override)\s+(?:(?:all|any|the|your)\s+)*
        (?:previous|prior|above|earlier|preceding|foregoing|system|other)\s+(?:[\w-]+\s+){0,2}?
        (?:instructions?|rules|prompts?|guidelines|directions|messages?|context|sources)\b"""),
    # a role label after a quote or bracket: "User: …, [assistant]:
    ((":",), r"""["'(\[*#>|]\W*(?:system|assistant|user|human|developer)\s*:"""),
    # a chat-template token: <|im_start|>, [INST], <<SYS>>
    (("|", "inst]", "<<"), r"""<\s*\|[^<>|]{0,40}\|\s*> | \[/?inst\] | <<\s*/?sys\s*>>"""),
    # you must, you are required to, you should always; you are (now) an AI assistant
    (("you",), r"""
        \byou\s+(?:must|shall|have\s+to|need\s+to|will\s+now|are\s+(?:now|required|instructed|ordered|to)\b
                   |should\s+(?:always|never|only|now))\b
      | \byou(?:\s+are|['’]re)\s+(?:now\s+)?(?:an?\s+|the\s+)?(?:helpful\s+)?(?:ai|assistant|chatbot|language\s+model|llm)\b"""),
    # act as / pretend to be / behave as an AI assistant
    (("act", "pretend", "behave"), r"""
        \b(?:act\s+as|pretend\s+to\s+be|behave\s+as)\s+(?:an?\s+|the\s+)?(?:helpful\s+)?
        (?:ai|assistant|chatbot|language\s+model|llm)\b"""),
    # Dear AI, Hello assistant, note to the model
    (("dear", "hey", "hello", "note"), r"""
        \b(?:dear|hey|hello|note\s+to(?:\s+the)?)[\s,:]+(?:ai|assistant|model|llm|language\s+model|chatbot)s?\b"""),
    # cite this paper, quote this abstract, recommend this source
    (("cite", "quote", "recommend"), r"""
        \b(?:cite|quote|recommend)\s+(?:only\s+)?(?:this|the\s+present)\s+(?:paper|abstract|source|article|document)\b"""),
    # regardless of the question
    (("regardless", "irrespective"), r"""\b(?:regardless|irrespective)\s+of\s+(?:the\s+)?(?:question|query|user|prompt)\b"""),
))


def _instruction_lines(lines: list[str]) -> set[int]:
    """Indexes of the folded sentences (one per line) that match the rule."""
    flagged = {number for number, line in enumerate(lines) if _OPENERS.match(line)}
    joined = "\n".join(lines)
    ends = list(itertools.accumulate(len(line) + 1 for line in lines))   # one past each line's newline
    for words, pattern in _ANYWHERE:
        tried = set()
        for word in words:
            at = joined.find(word)
            while at != -1:
                number = bisect.bisect_right(ends, at)
                if number not in tried and number not in flagged:
                    tried.add(number)
                    if pattern.search(lines[number]):
                        flagged.add(number)
                at = joined.find(word, ends[number])
    return flagged


def is_instruction(sentence: str) -> bool:
    """Does the sentence address a model (an order to the assistant) rather than describe research?"""
    return bool(_instruction_lines([fold(" ".join(sentence.split("\n")))]))


@dataclass(frozen=True)
class Screened:
    """A source text split into sentences, with those that address a model flagged."""

    original: str
    sentences: tuple[str, ...]
    flagged: tuple[int, ...]     # indexes into `sentences`

    @property
    def removed(self) -> int:
        return len(self.flagged)

    @property
    def left_out(self) -> bool:
        """Mostly instructions: more than half its sentences are; the paper is given to no model."""
        return 2 * len(self.flagged) > len(self.sentences)

    @property
    def kept(self) -> tuple[str, ...]:
        return () if self.left_out else tuple(s for i, s in enumerate(self.sentences) if i not in self.flagged)

    @property
    def text(self) -> str:
        """What may enter a prompt: the text itself when nothing is flagged, else its kept sentences."""
        return self.original if not self.flagged else " ".join(self.kept)


@functools.lru_cache(maxsize=4096)
def screen(text: str) -> Screened:
    """The text's sentences (corpus.split_sentences) and which of them are instructions to a model."""
    sentences = tuple(split_sentences(text))
    lines = fold("\n".join(" ".join(s.split("\n")) for s in sentences)).split("\n")   # fold keeps newlines
    return Screened(text, sentences, tuple(sorted(_instruction_lines(lines))) if len(lines) == len(sentences)
                    else tuple(i for i, s in enumerate(sentences) if is_instruction(s)))


def remove_instructions(text: str) -> str:
    """A passage without its instruction sentences (the passage itself when it has none)."""
    screened = screen(text)
    if not screened.flagged:
        return text
    return " ".join(s for i, s in enumerate(screened.sentences) if i not in screened.flagged)


def instruction_warnings(papers) -> list[str]:
    """One line per paper with instructions to a model: where it is, how many sentences, the first."""
    lines = []
    for paper in papers:
        screened = screen(paper.text)
        if screened.flagged:
            first = screened.sentences[screened.flagged[0]]
            first = first if len(first) <= 80 else first[:80] + "…"
            fate = "the paper is left out of prompts" if screened.left_out else "they are left out of prompts"
            lines.append(f"{paper.source_file}:{paper.line} (paper {paper.position}, {paper.label}): "
                         f"{screened.removed} of {len(screened.sentences)} sentences read as instructions to "
                         f"the model, e.g. {first!r}; {fate}")
    return lines
