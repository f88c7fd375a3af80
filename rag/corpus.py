"""Parse abstract files into Paper records.

The format (see DESIGN.md): paragraphs separated by blank lines; a header paragraph
`论文检索`; then per paper an optional category line `Area · Subarea`, an authors line
(comma-separated, a trailing `等` means the list was cut) and one abstract paragraph.
A paper without a category line has no category: it never inherits the one above it.

This module only reads files; it knows nothing of chunks, embeddings or the store.
Any problem is a CorpusError naming the file and line, raised before anything is
written anywhere.
"""

import hashlib
import re
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
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+(?=[A-Z0-9\"“(\[$\\]|[^\x00-\x7f])")


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

    @property
    def source(self) -> str:
        """Where the paper comes from: `file.txt#position` (1-based)."""
        return f"{self.source_file}#{self.position}"


@dataclass(frozen=True)
class Corpus:
    """The papers read from a set of files, in file order, without duplicates."""

    papers: tuple[Paper, ...]
    files: tuple[Path, ...]
    duplicates: tuple[str, ...]


@dataclass(frozen=True)
class _Paragraph:
    line: int
    text: str


def load_corpus(paths) -> Corpus:
    """Parse every corpus file under `paths` (files or folders of .txt files)."""
    files = corpus_files(paths)
    papers, seen, duplicates = [], {}, []
    for path in files:
        for paper in parse_file(path):
            if paper.paper_id in seen:
                duplicates.append(f"{paper.source} repeats {seen[paper.paper_id]}; kept the first")
                continue
            seen[paper.paper_id] = paper.source
            papers.append(paper)
    return Corpus(tuple(papers), tuple(files), tuple(duplicates))


def corpus_files(paths) -> list[Path]:
    """Expand files and folders into a sorted, de-duplicated list of .txt files."""
    found: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            inside = sorted(p for p in path.rglob(f"*{CORPUS_SUFFIX}") if p.is_file())
            if not inside:
                raise UsageError(f"{path}: no {CORPUS_SUFFIX} corpus files in this folder")
            found.update(dict.fromkeys(p.resolve() for p in inside))
        elif path.is_file():
            found[path.resolve()] = None
        else:
            raise UsageError(f"{path}: no such file or folder")
    return list(found)


def parse_file(path) -> list[Paper]:
    """Parse one corpus file into papers."""
    path = Path(path)
    paragraphs = _paragraphs(_read_text(path))
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


def _read_text(path: Path) -> str:
    data = path.read_bytes()
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
_GLUED_SENTENCE = re.compile(r"(?<=[a-z)])\.(?=[A-Z][a-z])")


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
    text = " ".join(_unglue(word) for word in text.split())
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


def _unglue(word: str) -> str:
    """'model.Recently' -> 'model. Recently', leaving URLs and file names alone."""
    return word if "/" in word else _GLUED_SENTENCE.sub(". ", word)


def fold(text: str) -> str:
    """Lower-case, accent-free form for matching names: 'Cédric Colas' -> 'cedric colas'."""
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
    """Abstract text -> sentences (a period followed by a capital, digit or non-ASCII start)."""
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]
