"""Read the formats a reading list comes in, and write the BibTeX of papers.

Formats (FORMATS): the bundled corpus format (rag.corpus), BibTeX (bibtexparser), RIS (rispy),
JSONL (arXiv's metadata records, or any objects with title, authors and abstract) and CSV with
such columns. A file's format is the one asked for (--format), else its name's, else what its
content starts with (detect_format). Every record becomes the same Paper as the bundled format,
with title, year, venue, DOI, arXiv id and URL when it has them; LaTeX in titles, abstracts and
names becomes text through pylatexenc (to_text).
A record without authors or abstract is skipped with a warning naming the file and line (and
entry key); a file without any usable record, or one that breaks its format, is a CorpusError
naming file and line. Merging duplicates is rag.library.load_corpus's job; storing, rag.ingest's.
"""

import csv
import functools
import io
import json
import logging
import re
from pathlib import Path

from rag.corpus import (ET_AL_MARK, HEADER, Paper, citation_label, extract_urls, fold, paper_id, parse_file,
                        read_text, surname)
from rag.errors import CorpusError, UsageError

FORMATS = ("corpus", "bibtex", "ris", "jsonl", "csv")
SUFFIX_FORMATS = {".txt": "corpus", ".bib": "bibtex", ".ris": "ris", ".jsonl": "jsonl", ".ndjson": "jsonl",
                  ".json": "jsonl", ".csv": "csv"}

# The field names a JSONL object or CSV header may use for each Paper field (compared folded, with
# runs of other characters as '_'); the first one present and not empty wins. arXiv's metadata
# records use id, authors_parsed, journal_ref, categories, versions and update_date; Zotero's CSV
# export Author, Abstract Note and Publication Title.
FIELD_NAMES = {
    "authors": ("authors_parsed", "authors", "author", "creators", "creator"),
    "abstract": ("abstract", "abstract_note", "summary"),
    "title": ("title",),
    "year": ("year", "publication_year", "published", "date", "versions"),
    "venue": ("venue", "journal", "journal_ref", "booktitle", "publication_title"),
    "doi": ("doi",),
    "arxiv_id": ("arxiv_id", "arxiv", "eprint", "id"),
    "url": ("url", "link"),
    "category": ("category", "primary_category", "categories"),
}
_NOT_NAMES = {"others", "et al", "et al.", ET_AL_MARK}
_ARXIV_ID = re.compile(r"(?:arxiv:)?(\d{4}\.\d{4,5}(?:v\d+)?|[a-z][a-z.-]*(?:\.[A-Z]{2})?/\d{7}(?:v\d+)?)",
                       re.IGNORECASE)
_ARXIV_URL = re.compile(r"arxiv\.org/(?:abs|pdf)/([^\s?#]+?)(?:\.pdf)?$", re.IGNORECASE)
_ARXIV_CATEGORY = re.compile(r"[a-z-]+(?:\.[A-Za-z-]+)?")
_DOI_PREFIX = re.compile(r"^(?:https?://(?:dx\.)?doi\.org/|doi:\s*)", re.IGNORECASE)
_YEAR = re.compile(r"\b(1[89]\d\d|20\d\d)\b")
_RIS_TAG = re.compile(r"^([A-Z][A-Z0-9])  -(?: (.*))?$")


def read_papers(path: Path, format: str | None = None) -> tuple[list[Paper], list[str]]:
    """The papers of one file and the warnings about records skipped."""
    path = Path(path)
    if format is not None and format not in FORMATS:
        raise UsageError(f"unknown format {format!r}: use one of {', '.join(FORMATS)}")
    text = read_text(path)
    format = format or detect_format(path, text)
    if format == "corpus":
        return parse_file(path, text), []
    papers, warnings = {"bibtex": _bibtex, "ris": _ris, "jsonl": _jsonl, "csv": _csv}[format](path, text)
    if not papers:
        raise CorpusError(path, 1, f"no usable {format} record: each needs authors and an abstract"
                                   + (f" ({len(warnings)} skipped)" if warnings else ""))
    return papers, warnings


def detect_format(path: Path, text: str) -> str:
    """The format a file's name says; for a .txt or an unknown name, what its content starts with."""
    by_name = SUFFIX_FORMATS.get(path.suffix.lower())
    if by_name not in (None, "corpus"):
        return by_name
    first = next((line.strip() for line in text.splitlines() if line.strip() and not line.startswith("%")), "")
    if first == HEADER:
        return "corpus"
    if first.startswith("@"):
        return "bibtex"
    if _RIS_TAG.match(first):
        return "ris"
    if first.startswith("{"):
        return "jsonl"
    if {_field_key(column) for column in next(csv.reader([first]), [])} & set(FIELD_NAMES["abstract"]):
        return "csv"
    if by_name == "corpus":
        return "corpus"   # its parser says what is wrong with it
    raise CorpusError(path, 1, f"cannot tell this file's format from its name or content: name it "
                               f"{', '.join(s for s in SUFFIX_FORMATS if s != '.ndjson')}, or pass --format")


def to_text(latex: str | None) -> str:
    """LaTeX as readable text: '$35$\\% on \\emph{M{\\"u}ller}' -> '35% on Müller'; whitespace collapsed."""
    if not latex:
        return ""
    if not re.search(r"[\\${}%~`]|--", latex):   # nothing LaTeX would change (most titles and names)
        return " ".join(latex.split())
    escaped = re.sub(r"(?<!\\)%", r"\\%", latex)   # a bare % is a percent sign here, not a LaTeX comment
    return " ".join(_latex_converter().latex_to_text(escaped).split())


@functools.cache
def _latex_converter():
    from pylatexenc.latex2text import LatexNodes2Text

    return LatexNodes2Text()


def person_name(name: str) -> str:
    """A name as 'Given Family': 'van der Berg, Jan' -> 'Jan van der Berg', 'Doe, Jr., J.' -> 'J. Doe Jr.'."""
    parts = [part.strip() for part in to_text(name).split(",")]
    if len(parts) == 2 and all(parts):
        return f"{parts[1]} {parts[0]}"
    if len(parts) == 3 and all(parts):
        return f"{parts[2]} {parts[0]} {parts[1]}"
    return " ".join(", ".join(parts).split())


def split_authors(value) -> tuple[tuple[str, ...], bool]:
    """An author list as written anywhere -> (names as 'Given Family', whether the list was cut).

    A list (arXiv's authors_parsed: [family, given, suffix]; or names); a string of names separated
    by ';', or 'Family, Given and Family, Given' (BibTeX), or by ',' and 'and' (one-word parts in
    pairs: 'Ng, Andrew' is one name). 'others' and 'et al.' mark a cut list."""
    if isinstance(value, list):
        names = [" ".join(p for p in (item[1:2] + item[:1] + item[2:3]) if p) if isinstance(item, list) else str(item)
                 for item in value]
    else:
        value = str(value or "").strip()
        cut = re.search(r",?\s*\bet\s+al\.?$", value)
        value = value[:cut.start()] if cut else value
        parts = re.split(r"\s+and\s+", value)
        by_comma = [name for part in value.split(",") for name in re.split(r"\s+and\s+", part)]
        if ";" in value:
            names = value.split(";")
        elif len(parts) > 1 and all(part.count(",") == 1 for part in parts if part.strip() not in _NOT_NAMES):
            names = parts   # 'Family, Given and Family, Given'
        elif len(by_comma) % 2 == 0 and all(len(name.split()) == 1 for name in by_comma):
            names = [f"{family}, {given}" for family, given in zip(by_comma[::2], by_comma[1::2])]   # 'Ng, Andrew'
        else:
            names = by_comma
        names += ["others"] if cut else []
    truncated = any(name.strip().lower() in _NOT_NAMES for name in names)
    readable = tuple(person_name(name) for name in names if name.strip() and name.strip().lower() not in _NOT_NAMES)
    return tuple(name for name in readable if name), truncated


def make_paper(path: Path, position: int, line: int, record: dict) -> Paper:
    """A Paper from a record of FIELD_NAMES keys (raw values; authors already split)."""
    authors, truncated = record["authors"]
    abstract = str(record["abstract"]).strip()
    arxiv_id = record.get("arxiv_id")
    return Paper(
        paper_id=paper_id(", ".join(authors) + (ET_AL_MARK if truncated else ""), abstract),
        authors=authors, authors_truncated=truncated, category=record.get("category"),
        abstract=abstract, text=to_text(abstract), source_file=path.name, position=position, line=line,
        label=citation_label(authors, truncated), urls=extract_urls(abstract),
        title=to_text(record.get("title")) or None, year=record.get("year"),
        venue=to_text(record.get("venue")) or None, doi=record.get("doi"), arxiv_id=arxiv_id,
        url=record.get("url"),
    )


def _usable(path: Path, line: int, where: str, record: dict, warnings: list[str]) -> bool:
    """Whether a record has authors and an abstract; if not, a warning says which it lacks."""
    lacks = [what for what, ok in (("authors", record["authors"][0]),
                                   ("abstract", str(record.get("abstract") or "").strip())) if not ok]
    if lacks:
        warnings.append(f"{path}:{line}: {where}has no {' and no '.join(lacks)}; skipped")
    return not lacks


def _url(value) -> str | None:
    """A web address (http or https), else None."""
    url = str(value or "").strip()
    return url if re.match(r"https?://\S+$", url, re.IGNORECASE) else None


def _doi(value) -> str | None:
    doi = _DOI_PREFIX.sub("", str(value or "").strip())
    return doi if doi.startswith("10.") else None


def _arxiv_id(value) -> str | None:
    """'arXiv:2501.01234v2' -> '2501.01234' (a version is left out: the abstract page shows the latest)."""
    match = _ARXIV_ID.fullmatch(str(value or "").strip())
    return re.sub(r"v\d+$", "", match[1]) if match else None


def _year(value) -> int | None:
    if isinstance(value, list):   # arXiv's versions: [{"version": "v1", "created": "Mon, 2 Apr 2007 ..."}]
        value = value[0].get("created") if value and isinstance(value[0], dict) else None
    match = _YEAR.search(str(value or ""))
    return int(match[1]) if match else None


def _arxiv_year(arxiv_id: str | None) -> int | None:
    """2501.01234 -> 2025, math/0211159 -> 2002: an arXiv id starts with its year and month of submission."""
    match = re.match(r"(?:.*/)?(\d\d)(\d\d)(?:\.|\d{3}$)", arxiv_id or "")
    if not match:
        return None
    year = int(match[1])
    return (1900 if year >= 91 else 2000) + year


def _category(value) -> str | None:
    """As given; arXiv's 'cs.LG stat.ML' -> its primary category, 'cs.LG'."""
    value = " ".join(str(value or "").split())
    words = value.split(" ")
    if len(words) > 1 and all(_ARXIV_CATEGORY.fullmatch(word) for word in words):
        return words[0]
    return value or None


def _field_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", fold(str(name))).strip("_")


def _from_fields(fields: dict) -> dict:
    """A JSONL object or CSV row -> a record of Paper fields (FIELD_NAMES)."""
    by_key = {_field_key(name): value for name, value in fields.items() if name is not None}

    def first(field):
        for name in FIELD_NAMES[field]:
            value = by_key.get(name)
            if value not in (None, "", []):
                if field == "arxiv_id" and not _arxiv_id(value):
                    continue
                return value
        return None

    url = _url(first("url"))
    arxiv_id = _arxiv_id(first("arxiv_id"))
    if arxiv_id is None and url and _ARXIV_URL.search(url):
        arxiv_id = _arxiv_id(_ARXIV_URL.search(url)[1])
    title = first("title")
    return {"authors": split_authors(first("authors")), "abstract": first("abstract") or "",
            "title": str(title) if title is not None else None,
            "year": _year(first("year")) or _arxiv_year(arxiv_id) or _year(by_key.get("update_date")),
            "venue": str(first("venue") or "") or None, "doi": _doi(first("doi")), "arxiv_id": arxiv_id,
            "url": url, "category": _category(first("category"))}


def _jsonl(path: Path, text: str) -> tuple[list[Paper], list[str]]:
    papers, warnings = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            fields = json.loads(line)
        except json.JSONDecodeError as err:
            raise CorpusError(path, number, f"not a JSON object ({err.msg}, column {err.colno}): "
                                            "a JSONL file has one object per line") from None
        if not isinstance(fields, dict):
            raise CorpusError(path, number, f"a JSON {type(fields).__name__}, not an object: a JSONL file has "
                                            "one object with title, authors and abstract per line")
        record = _from_fields(fields)
        if _usable(path, number, "record ", record, warnings):
            papers.append(make_paper(path, len(papers) + 1, number, record))
    return papers, warnings


def _csv(path: Path, text: str) -> tuple[list[Paper], list[str]]:
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    papers, warnings = [], []
    try:
        header = next(reader, None)
        if not header:
            raise CorpusError(path, 1, "empty file: a CSV file starts with a header row naming its columns")
        keys = {_field_key(column) for column in header}
        for field in ("abstract", "authors"):
            if not keys & set(FIELD_NAMES[field]):
                raise CorpusError(path, 1, f"no {field} column in the header ({', '.join(header)}): name one "
                                           f"'{field}'")
        start = reader.line_num + 1
        for row in reader:
            number, start = start, reader.line_num + 1
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise CorpusError(path, number, f"{len(row)} fields where the header has {len(header)}: "
                                                "quote fields that contain commas")
            record = _from_fields(dict(zip(header, row)))
            if _usable(path, number, "row ", record, warnings):
                papers.append(make_paper(path, len(papers) + 1, number, record))
    except csv.Error as err:
        raise CorpusError(path, reader.line_num, f"not valid CSV ({err})") from None
    return papers, warnings


def _bibtex(path: Path, text: str) -> tuple[list[Paper], list[str]]:
    import bibtexparser
    from bibtexparser.middlewares.names import split_multiple_persons_names
    from bibtexparser.model import DuplicateBlockKeyBlock

    log = logging.getLogger("bibtexparser")
    level = log.level
    log.setLevel(logging.CRITICAL)   # each failed block is reported below, once
    try:
        library = bibtexparser.parse_string(text)
    finally:
        log.setLevel(level)
    warnings = []
    for block in library.failed_blocks:
        line = block.start_line + 1
        if not isinstance(block, DuplicateBlockKeyBlock):
            key = re.match(r"@\w+\s*[{(]\s*([^,\s]+)", block.raw or "")
            reason = " ".join(str(getattr(block.error, "abort_reason", "") or block.error).split())
            raise CorpusError(path, line, f"malformed BibTeX entry{f' {key[1]!r}' if key else ''}"
                                          f"{f' ({reason})' if reason else ''}: check its braces and quotes")
        warnings.append(f"{path}:{line}: entry '{block.key}' repeats an earlier key; skipped")
    papers = []
    for entry in library.entries:
        fields = {name.lower(): field.value for name, field in entry.fields_dict.items()}
        line = entry.start_line + 1
        archive = (fields.get("archiveprefix") or fields.get("eprinttype") or "").lower()
        arxiv_id = _arxiv_id(fields.get("eprint")) if archive in ("arxiv", "") else None
        url = _url(fields.get("url"))
        if arxiv_id is None and url and _ARXIV_URL.search(url):
            arxiv_id = _arxiv_id(_ARXIV_URL.search(url)[1])
        record = {
            "authors": split_authors(split_multiple_persons_names(fields.get("author", ""))),
            "abstract": fields.get("abstract", ""), "title": fields.get("title"),
            "year": _year(fields.get("year") or fields.get("date")) or _arxiv_year(arxiv_id),
            "venue": fields.get("journal") or fields.get("booktitle"), "doi": _doi(fields.get("doi")),
            "arxiv_id": arxiv_id, "url": url, "category": None,
        }
        if _usable(path, line, f"entry '{entry.key}' ", record, warnings):
            papers.append(make_paper(path, len(papers) + 1, line, record))
    return papers, warnings


def _ris(path: Path, text: str) -> tuple[list[Paper], list[str]]:
    import rispy

    starts = _ris_records(path, text)
    try:
        entries = rispy.loads(text)
    except Exception as err:   # rispy's own parse errors carry no line
        raise CorpusError(path, 1, f"malformed RIS ({err})") from None
    papers, warnings = [], []
    for line, entry in zip(starts, entries):
        url = next((_url(u) for u in entry.get("urls") or [] if _url(u)), None)
        arxiv_id = _arxiv_id(_ARXIV_URL.search(url)[1]) if url and _ARXIV_URL.search(url) else None
        record = {
            "authors": split_authors(entry.get("authors") or entry.get("first_authors") or []),
            "abstract": entry.get("abstract") or entry.get("notes_abstract") or "",
            "title": entry.get("title") or entry.get("primary_title"),
            "year": _year(entry.get("year") or entry.get("publication_year") or entry.get("date")),
            "venue": (entry.get("secondary_title") or entry.get("journal_name") or entry.get("alternate_title3")),
            "doi": _doi(entry.get("doi")), "arxiv_id": arxiv_id, "url": url, "category": None,
        }
        if _usable(path, line, "record ", record, warnings):
            papers.append(make_paper(path, len(papers) + 1, line, record))
    return papers, warnings


def _ris_records(path: Path, text: str) -> list[int]:
    """The line of each record's TY tag; a record left open or a stray line is a CorpusError."""
    starts, open_at = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _RIS_TAG.match(line.rstrip())
        if match is None:
            if open_at is None:
                raise CorpusError(path, number, f"expected a RIS tag line such as 'TY  - JOUR', found "
                                                f"{line.strip()[:60]!r}")
            continue   # a value continued on the next line
        if match[1] == "TY":
            if open_at is not None:
                raise CorpusError(path, open_at, "this RIS record has no 'ER  -' line before the next 'TY  -'")
            open_at = number
            starts.append(number)
        elif open_at is None:
            raise CorpusError(path, number, f"tag {match[1]} outside a record: a RIS record starts with 'TY  -'")
        elif match[1] == "ER":
            open_at = None
    if open_at is not None:
        raise CorpusError(path, open_at, "this RIS record has no 'ER  -' line: the file is cut short")
    return starts


def to_bibtex(papers) -> str:
    """BibTeX entries of the papers (@article with a venue, else @misc), keys like 'haris2025sparse'."""
    from bibtexparser import Library, write_string
    from bibtexparser.model import Entry, Field

    library, keys = Library(), set()
    for paper in papers:
        base = "".join(re.findall(r"[a-z0-9]", fold(surname(paper.authors[0])))) or "paper"
        base += str(paper.year or "")
        base += next(iter(re.findall(r"[a-z0-9]{4,}", fold(paper.title or ""))), "")
        key = base
        suffix = ord("a")
        while key in keys:
            key, suffix = f"{base}{chr(suffix)}", suffix + 1
        keys.add(key)
        values = {"author": " and ".join(paper.authors) + (" and others" if paper.authors_truncated else ""),
                  "title": paper.title, "year": str(paper.year) if paper.year else None,
                  "journal": paper.venue, "doi": paper.doi, "eprint": paper.arxiv_id,
                  "archiveprefix": "arXiv" if paper.arxiv_id else None, "url": paper.url or paper.link}
        fields = [Field(name, value) for name, value in values.items() if value]
        library.add(Entry("article" if paper.venue else "misc", key, fields))
    return write_string(library)
