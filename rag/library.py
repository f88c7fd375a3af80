"""The papers of the files and folders a user names: each file read in its format, one Corpus.

Folders are walked for corpus files (CORPUS_SUFFIXES); each file is read by rag.formats (the
bundled format through rag.corpus), and records that are the same paper (duplicate_keys) are
merged into the first. Every file is read before any paper is returned, so a malformed one raises
before anything is written. A path that cannot be read (no permission, a broken link, a FIFO named
directly) is a UsageError naming it: a folder is never read in part, since an ingest would
then delete the papers it could not see. Inside a folder, a corpus entry that is no regular
file (a FIFO, socket, device, broken link) is skipped with a warning in Corpus.skipped, and
linked folders are not followed (so a link loop cannot hang the walk).
"""

import errno
import os
import re
import stat
from dataclasses import dataclass, replace
from pathlib import Path

from rag.corpus import (BIBLIOGRAPHIC_FIELDS, CORPUS_SUFFIX, Paper, file_kind, fold, name_tokens, surname,
                        unreadable_error)
from rag.errors import UsageError
from rag.formats import read_papers

# What a folder is searched for: the bundled format and those of rag.formats
CORPUS_SUFFIXES = (CORPUS_SUFFIX, ".bib", ".ris", ".jsonl", ".csv")


@dataclass(frozen=True)
class Corpus:
    """The papers read from a set of files, in file order, without duplicates."""

    papers: tuple[Paper, ...]
    files: tuple[Path, ...]
    duplicates: tuple[str, ...]     # warnings: one per paper merged into an earlier one
    skipped: tuple[str, ...] = ()   # warnings: folder entries that are not corpus files, records skipped


def load_corpus(paths, format: str | None = None) -> Corpus:
    """Read every corpus file under `paths` (files, or folders of CORPUS_SUFFIXES files).

    `format` (rag.formats.FORMATS) overrides what each file's name and content say. Every file is
    read before any paper is returned, so a malformed one raises before anything is written."""
    skipped: list[str] = []
    files = corpus_files(paths, skipped)
    papers: list[Paper] = []
    seen: dict[str, int] = {}   # duplicate key -> index in papers
    duplicates = []
    for path in files:
        found, warnings = read_papers(path, format)
        skipped.extend(warnings)
        for paper in found:
            keys = duplicate_keys(paper)
            match = next((seen[k] for k in keys if k in seen), None)
            if match is None:
                seen.update(dict.fromkeys(keys, len(papers)))
                papers.append(paper)
                continue
            kept = merge(papers[match], paper)
            papers[match] = kept
            seen.update(dict.fromkeys(duplicate_keys(kept) + keys, match))
            duplicates.append(f"{paper.source} repeats {kept.source}; merged into it")
    return Corpus(tuple(papers), tuple(files), tuple(duplicates), tuple(skipped))


def duplicate_keys(paper: Paper) -> list[str]:
    """What makes two records the same paper: the id (same authors and abstract), DOI, arXiv id,
    normalised title + first author, normalised abstract + first author."""
    first = " ".join(name_tokens(surname(paper.authors[0])))
    keys = [f"id:{paper.paper_id}", f"abstract:{first}:{_normalised(paper.text)}"]
    if paper.doi:
        keys.append(f"doi:{paper.doi.lower()}")
    if paper.arxiv_id:
        keys.append(f"arxiv:{re.sub(r'v[0-9]+$', '', paper.arxiv_id.lower())}")
    if paper.title:
        keys.append(f"title:{first}:{_normalised(paper.title)}")
    return keys


def _normalised(text: str) -> str:
    return " ".join(re.findall(r"\w+", fold(text)))


def merge(kept: Paper, other: Paper) -> Paper:
    """`kept` with the category and bibliographic fields it lacks taken from `other` (its id, text and
    source stay)."""
    missing = {name: getattr(other, name) for name in ("category",) + BIBLIOGRAPHIC_FIELDS
               if getattr(kept, name) is None and getattr(other, name) is not None}
    return replace(kept, **missing) if missing else kept


def corpus_files(paths, skipped: list[str] | None = None) -> list[Path]:
    """Expand files and folders into a sorted, de-duplicated list of corpus files.

    A path that cannot be read is a UsageError; what a folder holds besides corpus files
    is appended to `skipped` as one warning per entry."""
    skipped = [] if skipped is None else skipped
    found: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw).expanduser()
        mode = _stat(path, named=True).st_mode
        if stat.S_ISDIR(mode):
            inside: list[Path] = []
            _walk(path, inside, skipped)
            if not inside:
                raise UsageError(f"{path}: no corpus files ({', '.join(CORPUS_SUFFIXES)}) in this folder")
            found.update(dict.fromkeys(p.resolve() for p in sorted(inside)))
        elif stat.S_ISREG(mode):
            found[path.resolve()] = None
        else:
            raise UsageError(f"{path}: {file_kind(mode)}, not a corpus file: name a corpus file or a folder of them")
    return list(found)


def _walk(folder: Path, found: list[Path], skipped: list[str]) -> None:
    """Add the regular corpus files under `folder` to `found`, every subfolder read or an error."""
    try:
        with os.scandir(folder) as scan:
            entries = list(scan)
    except OSError as err:
        raise unreadable_error(folder, "folder", err) from None
    for entry in entries:
        path = Path(entry.path)
        try:
            is_link, is_dir = entry.is_symlink(), entry.is_dir(follow_symlinks=False)
        except OSError as err:
            raise unreadable_error(path, "path", err) from None
        if is_dir:
            _walk(path, found, skipped)
        elif is_link and not entry.name.endswith(CORPUS_SUFFIXES):
            if path.is_dir():
                skipped.append(f"{path}: a symbolic link to a folder, not followed; name its target to include it")
        elif entry.name.endswith(CORPUS_SUFFIXES):
            try:
                mode = _stat(path, named=False).st_mode
            except _Skip as skip:
                skipped.append(f"{path}: {skip}; skipped")
                continue
            if stat.S_ISREG(mode):
                found.append(path)
            elif stat.S_ISDIR(mode):
                skipped.append(f"{path}: a symbolic link to a folder, not followed; name its target to include it")
            else:
                skipped.append(f"{path}: {file_kind(mode)}, not a corpus file; skipped")


class _Skip(Exception):
    """A link inside a folder that leads nowhere: worth a warning, not an error."""


def _stat(path: Path, named: bool) -> os.stat_result:
    """os.stat, its failures turned into errors that say what the path is."""
    try:
        return os.stat(path)
    except OSError as err:
        if err.errno == errno.ELOOP:
            problem = "a symbolic link loop"
        elif err.errno == errno.ENOENT and os.path.islink(path):
            problem = f"a broken symbolic link (to {os.readlink(path)}, which does not exist)"
        elif err.errno in (errno.ENOENT, errno.ENOTDIR) and named:
            raise UsageError(f"{path}: no such file or folder") from None
        else:
            raise unreadable_error(path, "path", err) from None
        if not named:
            raise _Skip(problem) from None
        raise UsageError(f"{path}: {problem}: fix the link or name the file itself") from None
