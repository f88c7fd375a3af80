"""The Paper record, the bundled corpus format's parser, and the text rules every format shares.

The bundled format (README, "Corpus format"): paragraphs separated by blank lines; a header paragraph
`论文检索`; then per paper an optional category line `Area · Subarea`, an authors line
(comma-separated, a trailing `等` means the list was cut) and one abstract paragraph.
A paper without a category line has no category: it never inherits the one above it.

The other formats (BibTeX, RIS, arXiv metadata, CSV/JSONL) are rag.formats' job; rag.library
finds the files under the paths given and merges the papers that are the same.
This module only reads files; it knows nothing of chunks, embeddings or the store.
Any problem is a CorpusError naming the file and line, raised before anything is
written anywhere.
"""

import hashlib
import os
import re
import stat
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from rag.errors import CorpusError, UsageError

PARSER_VERSION = 1
HEADER = "论文检索"
CATEGORY_SEPARATOR = " · "
ET_AL_MARK = "等"
CORPUS_SUFFIX = ".txt"

_SURNAME_PARTICLES = {"van", "von", "de", "der", "den", "da", "di", "du", "del", "della",
                      "le", "la", "dos", "das", "ter", "ten", "bin", "al", "el"}
_URL = re.compile(r"https?://[^\s\[\]()<>\"']+")
# No sentence ends after "et al.", "e.g.", "i.e.", "vs.", "cf.", "Fig.", "Eq.", "Dr." or an initial ("J. Smith"):
# a piece cut there is a fragment, and as a quote it misleads ('We find that GFPO also outperforms Dr.').
NO_BREAK_AFTER = (r"(?<!\bal\.)(?<!e\.g\.)(?<!i\.e\.)(?<!\bvs\.)(?<!\bcf\.)(?<!\bFig\.)(?<!\bEq\.)(?<!\bDr\.)"
                  r"(?<!\b[A-Z]\.)")
# Where split_sentences breaks clean abstract text: the space after . ! ? (or 。！？) before a capital,
# digit, quote, bracket, $ or backslash, or any non-ASCII character, but not after NO_BREAK_AFTER. See
# split_sentences for the other sentence rules.
_SENTENCE_BREAK = re.compile(r"(?<=[.!?。！？])" + NO_BREAK_AFTER + r"\s+(?=[A-Z0-9\"“(\[$\\]|[^\x00-\x7f])")


@dataclass(frozen=True)
class Paper:
    """One abstract with its metadata, as read from a corpus file."""

    paper_id: str
    authors: tuple[str, ...]
    authors_truncated: bool
    category: str | None
    abstract: str
    text: str
    source_file: str
    position: int
    line: int
    label: str
    urls: tuple[str, ...]
    # what a reference manager or metadata dump may know (rag.formats); the bundled format has none
    title: str | None = None
    year: int | None = None
    venue: str | None = None
    doi: str | None = None
    arxiv_id: str | None = None
    url: str | None = None

    @property
    def source(self) -> str:
        """Where the paper comes from: `file.txt#position` (1-based)."""
        return f"{self.source_file}#{self.position}"

    @property
    def link(self) -> str | None:
        """The paper's own page: its URL, else its DOI, else its arXiv abstract page."""
        if self.url:
            return self.url
        if self.doi:
            return f"https://doi.org/{self.doi}"
        if self.arxiv_id:
            return f"https://arxiv.org/abs/{self.arxiv_id}"
        return None

    def reference(self) -> str:
        """How a citation names the paper: 'Surname et al. 2025 · "Title" · https://…', with what it has."""
        parts = [f"{self.label} {self.year}" if self.year else self.label]
        if self.title:
            parts.append(f'"{self.title}"')
        if self.link:
            parts.append(self.link)
        return " · ".join(parts)

    def bibliography(self) -> dict:
        """The bibliographic fields for JSON (None where unknown), `url` being the paper's link."""
        return {name: getattr(self, name) for name in BIBLIOGRAPHIC_FIELDS} | {"url": self.link,
                                                                              "reference": self.reference()}


# Paper's optional bibliographic fields, in order: absent (None) ones are left out of what is stored
BIBLIOGRAPHIC_FIELDS = ("title", "year", "venue", "doi", "arxiv_id", "url")


@dataclass(frozen=True)
class _Paragraph:
    line: int
    text: str


def file_kind(mode: int) -> str:
    """What a path that is no regular file is, in words."""
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def unreadable_error(path: Path, what: str, err: OSError) -> UsageError:
    """The one-line error for a file or folder the OS would not let us read."""
    reason = (err.strerror or type(err).__name__).lower()
    return UsageError(f"{path}: cannot read this {what} ({reason}): fix its permissions or move it out of "
                      "the corpus paths")


def parse_file(path, text: str | None = None) -> list[Paper]:
    """Parse one corpus file (its `text` when already read) into papers."""
    path = Path(path)
    paragraphs = _paragraphs(read_text(path) if text is None else text)
    if not paragraphs:
        raise CorpusError(path, 1, f"file is empty; a corpus file starts with the header line '{HEADER}'")
    if paragraphs[0].text != HEADER:
        raise CorpusError(path, paragraphs[0].line,
                          f"expected the header line '{HEADER}', found {_preview(paragraphs[0].text)}")
    papers, i = [], 1
    while i < len(paragraphs):
        paper, i = _parse_paper(path, paragraphs, i, position=len(papers) + 1)
        papers.append(paper)
    if not papers:
        raise CorpusError(path, paragraphs[0].line, "the header is not followed by any paper")
    return papers


def read_text(path: Path) -> str:
    """A corpus file's text (UTF-8, NFC, no BOM); a binary or non-UTF-8 file is a CorpusError."""
    try:
        # O_NONBLOCK: a FIFO that replaced the file since it was listed cannot block the open
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise unreadable_error(path, "file", err) from None
    with open(fd, "rb") as file:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UsageError(f"{path}: {file_kind(mode)}, not a corpus file: name a corpus file or a folder of them")
        try:
            data = file.read()
        except OSError as err:
            raise unreadable_error(path, "file", err) from None
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        raise CorpusError(path, line, "binary file (NUL byte); corpus files are UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise CorpusError(path, line, f"not UTF-8 text (byte 0x{data[err.start]:02x}); "
                                      "re-save the file as UTF-8") from None
    return unicodedata.normalize("NFC", text.removeprefix("\ufeff"))


def _paragraphs(text: str) -> list[_Paragraph]:
    """Group non-blank lines into paragraphs, remembering each one's first line."""
    paragraphs, lines, start = [], [], 0
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            if not lines:
                start = number
            lines.append(line.strip())
        elif lines:
            paragraphs.append(_Paragraph(start, " ".join(lines)))
            lines = []
    if lines:
        paragraphs.append(_Paragraph(start, " ".join(lines)))
    return paragraphs


def _parse_paper(path: Path, paragraphs: list[_Paragraph], i: int, position: int):
    category = None
    if _is_category(paragraphs[i].text):
        category = paragraphs[i].text
        i += 1
        if i == len(paragraphs):
            raise CorpusError(path, paragraphs[i - 1].line,
                              "category line with no authors line and abstract after it")
    authors_par = paragraphs[i]
    if not _is_authors(authors_par.text):
        raise CorpusError(path, authors_par.line,
                          f"expected an authors line (comma-separated names), found {_preview(authors_par.text)}")
    i += 1
    if i == len(paragraphs) or not _is_abstract(paragraphs[i].text):
        raise CorpusError(path, authors_par.line, "authors line with no abstract paragraph after it")
    authors, truncated = parse_authors(authors_par.text)
    abstract = paragraphs[i].text
    paper = Paper(
        paper_id=paper_id(authors_par.text, abstract),
        authors=authors,
        authors_truncated=truncated,
        category=category,
        abstract=abstract,
        text=clean_text(abstract),
        source_file=path.name,
        position=position,
        line=authors_par.line,
        label=citation_label(authors, truncated),
        urls=extract_urls(abstract),
    )
    return paper, i + 1


def _is_category(text: str) -> bool:
    return CATEGORY_SEPARATOR in text and len(text) <= 120 and not text.endswith(".")


def _is_authors(text: str) -> bool:
    if text == HEADER or _is_category(text) or len(text) > 2000:
        return False
    names = [n.strip() for n in text.removesuffix(ET_AL_MARK).split(",")]
    return all(0 < len(n) <= 80 and len(n.split()) <= 8 and not n.endswith(".") for n in names)


def _is_abstract(text: str) -> bool:
    return text != HEADER and not _is_category(text) and not _is_authors(text)


def _preview(text: str, width: int = 60) -> str:
    return repr(text if len(text) <= width else text[:width] + "…")


def paper_id(authors_line: str, abstract: str) -> str:
    """A content hash: the same authors and abstract give the same id anywhere."""
    digest = hashlib.sha256(f"{authors_line.strip()}\n{abstract.strip()}".encode()).hexdigest()
    return digest[:16]


def parse_authors(line: str) -> tuple[tuple[str, ...], bool]:
    """Split an authors line into names; the flag says a trailing `等` cut the list."""
    line = line.strip()
    truncated = line.endswith(ET_AL_MARK)
    names = tuple(n.strip() for n in line.removesuffix(ET_AL_MARK).split(",") if n.strip())
    return names, truncated


def surname(name: str) -> str:
    """The family name, with particles such as 'van' kept: 'Loek van Rossem' -> 'van Rossem'."""
    words = re.sub(r"\([^)]*\)", " ", name).split()
    if not words:
        return name.strip()
    start = len(words) - 1
    while start > 1 and words[start - 1].lower() in _SURNAME_PARTICLES:
        start -= 1
    return " ".join(words[start:])


def citation_label(authors: tuple[str, ...], truncated: bool) -> str:
    """'Haris et al.', 'Saxe and van Rossem' or 'Saxe', as a reference list shows it."""
    first = surname(authors[0])
    if len(authors) == 1 and not truncated:
        return first
    if len(authors) == 2 and not truncated:
        return f"{first} and {surname(authors[1])}"
    return f"{first} et al."


def extract_urls(abstract: str) -> tuple[str, ...]:
    """The URLs in an abstract, without trailing punctuation, each once, in order."""
    urls = (u.rstrip(".,;:") for u in _URL.findall(abstract))
    return tuple(dict.fromkeys(u for u in urls if u))


_TEXT_COMMANDS = re.compile(r"\\(?:textbf|textit|emph|text|texttt|textsc|mathrm|mathbf|mathit|"
                            r"mathcal|mathbb|mathsf|tilde|hat|bar|overline|underline)\{([^{}]*)\}")
_SIZE_GROUPS = re.compile(r"\{\\(?:tiny|small|normalsize|large|Large|LARGE|huge|Huge)\s+([^{}]*)\}")
_SYMBOLS = {
    "times": "×", "sim": "~", "approx": "≈", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥",
    "pm": "±", "cdot": "·", "infty": "∞", "to": "→", "rightarrow": "→", "ell": "ℓ",
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "eta": "η",
    "theta": "θ", "lambda": "λ", "mu": "μ", "pi": "π", "rho": "ρ", "sigma": "σ", "tau": "τ",
    "phi": "φ", "omega": "ω", "Delta": "Δ", "Omega": "Ω", "log": "log", "sqrt": "√",
}
_SYMBOL = re.compile(r"\\([A-Za-z]+)")
_MD_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_MD_BOLD = re.compile(r"\*\*(?=\S)([^*\n]+?)(?<=\S)\*\*")
_MD_EMPHASIS = re.compile(r"(?<![\w*])(\*|__)(?=\S)([^*\n]+?)(?<=\S)\1(?![\w*])")
_ACCENT = re.compile(r"\\([\"'`^~])\{?([A-Za-z])\}?")
_COMBINING = {'"': "\u0308", "'": "\u0301", "`": "\u0300", "^": "\u0302", "~": "\u0303"}
_MATH = re.compile(r"(?<!\\)\$([^$]+)\$")
_GLUED_SENTENCE = re.compile(r"(?<=[a-z)])\.(?=[A-Z][a-z])")   # 'agents.EmbodiedBench'


def clean_text(abstract: str) -> str:
    """Abstract text for embedding and keyword search: LaTeX and markdown noise removed.

    `$35$\\%` -> `35%`, `*noise stability*` -> `noise stability`,
    `$\\textbf{FAME}$` -> `FAME`, `[url](url)` -> `url`.
    """
    text = _MD_LINK.sub(lambda m: m[1] if m[1] == m[2] else f"{m[1]} ({m[2]})", abstract)
    text = re.sub(r"\\+%", "%", text)
    text = text.replace("\\_", "_").replace("\\&", "&").replace("``", "\u201c").replace("''", "\u201d")
    text = _ACCENT.sub(lambda m: unicodedata.normalize("NFC", m[2] + _COMBINING[m[1]]), text)
    text = _MATH.sub(lambda m: _clean_math(m[1]), text)
    text = _strip_commands(text).replace("{", "").replace("}", "")
    text = text.replace("\\$", "$")
    text = _MD_EMPHASIS.sub(r"\2", _MD_BOLD.sub(r"\1", text))
    text = " ".join(unglue(word) for word in text.split())
    return text


def _clean_math(math: str) -> str:
    math = _strip_commands(math)
    return math.replace("{", "").replace("}", "").replace("\\", "").strip()


def _strip_commands(text: str) -> str:
    previous = None
    while previous != text:
        previous = text
        text = _SIZE_GROUPS.sub(r"\1", _TEXT_COMMANDS.sub(r"\1", text))
    return _SYMBOL.sub(lambda m: _SYMBOLS.get(m[1], m[0]), text)


def unglue(word: str) -> str:
    """'model.Recently' -> 'model. Recently', leaving URLs and file names alone (clean_text, and
    synthetic.split_sentences on raw abstracts, so both see the same sentence ends)."""
    return word if "/" in word else _GLUED_SENTENCE.sub(". ", word)


def fold(text: str) -> str:
    """Lower-case, accent-free form for matching names: 'Cédric Colas' -> 'cedric colas'.

    The one accent and case folding of names and search words (mentions, claims, keyword, overlap).
    prompt_safety.fold is another rule for another job (finding disguised prompt tags: look-alike
    letters mapped, invisible characters dropped), as is eval.answers.normalise (expected strings)."""
    decomposed = unicodedata.normalize("NFKD", text)
    bare = "".join(c for c in decomposed if not unicodedata.combining(c))
    return bare.replace("ł", "l").replace("Ł", "L").replace("ß", "ss").casefold()


def name_tokens(text: str) -> list[str]:
    """The words of a name, folded: 'Hanyang(Jeremy) Chen' -> ['hanyang', 'jeremy', 'chen']."""
    return re.findall(r"\w+", fold(text))


def paper_names(authors) -> set[str]:
    """Every folded word of a paper's author names: what a sentence may call its authors."""
    return {token for author in authors for token in name_tokens(author)}


def split_sentences(text: str) -> list[str]:
    """Abstract text -> sentences (a period followed by a capital, digit or non-ASCII start).

    The one splitter of abstracts (Paper.text): prompt_safety.screen, the sentences answer.py gives
    the model and quotes, and evidence.py's highlights all use it. Two other sentence rules exist
    for other texts and differ on purpose:
    - synthetic.split_sentences cuts raw abstracts into pieces recombined as pseudo-papers: it
      breaks before more kinds of words ('rStar', '*'), spares the same abbreviations (NO_BREAK_AFTER)
      and completes a missing final period;
    - answer._last_sentence_end finds where the last finished sentence of a model's claim ends
      while it streams: an end is . ! ? before a space or the end of the text, never after 'et al.',
      whatever follows (the next word has not arrived yet)."""
    return [s.strip() for s in _SENTENCE_BREAK.split(text.strip()) if s.strip()]
