"""Write a synthetic corpus of any size from real papers, for benchmarks at 10k–50k papers.

Each pseudo-paper recombines pieces of the real ones: 4–9 sentences drawn from all real
abstract sentences, 1–8 authors whose first names and surnames come from real authors,
and the category of a randomly drawn real paper (so the share without a category matches
the source). Output is deterministic for a seed (same inputs, byte-identical files), in
the bundled format rag.corpus parses or as arXiv metadata JSONL (SYNTHETIC_FORMATS), where each
paper also gets an arXiv id and a title made of its first sentence's words. The text is plausible, not meaningful: use it to
measure speed and size, never retrieval quality. This module writes files only.
"""

import itertools
import json
import random
import re
from pathlib import Path

from rag.corpus import CORPUS_SUFFIX, HEADER, NO_BREAK_AFTER, Paper, surname, unglue
from rag.errors import UsageError

MIN_SENTENCES = 4
MAX_SENTENCES = 9
MAX_AUTHORS = 8
FILE_PREFIX = "syn_"
SYNTHETIC_FORMATS = {"corpus": CORPUS_SUFFIX, "arxiv": ".jsonl"}
TITLE_WORDS = 10
MAX_DRAWS_PER_PAPER = 100

# Where split_sentences breaks a raw abstract (not rag.corpus.split_sentences, which splits clean
# text for prompts and evidence): a sentence ends at . ! or ? followed by space and a capital, digit,
# quote, bracket, LaTeX/markdown opener or a name like 'rStar'; not after an abbreviation or initial
# (rag.corpus.NO_BREAK_AFTER), since a piece cut there would be drawn as a sentence of its own.
# Decimals ("0.5") have no space.
_RAW_SENTENCE_BREAK = re.compile(r"(?<=[.!?])" + NO_BREAK_AFTER + r"\s+(?=[A-Z0-9\"“(\[$\\*`]|[a-z]+[A-Z])")
_FINISHED = re.compile(r"[.!?][\"”')\]*]*$")
_NAME_WORD = re.compile(r"[^\W\d_][\w'’-]*")


def write_synthetic_corpus(source_papers: list[Paper], n: int, out_dir: Path, seed: int = 0,
                           papers_per_file: int = 1000, format: str = "corpus") -> list[Path]:
    """Write `n` pseudo-papers into out_dir as syn_00000.txt, syn_00001.txt, ... (format 'arxiv':
    syn_00000.jsonl, ...); returns the files.

    Earlier syn_* files in out_dir are removed, so load_corpus(out_dir) reads exactly
    these papers (as long as nothing else lives there)."""
    if format not in SYNTHETIC_FORMATS:
        raise UsageError(f"unknown synthetic corpus format {format!r}: use {' or '.join(SYNTHETIC_FORMATS)}")
    if n < 1 or papers_per_file < 1:
        raise UsageError(f"need at least one paper and one paper per file, got n={n}, "
                         f"papers_per_file={papers_per_file}")
    rng = random.Random(seed)
    sentences = sentence_pool(source_papers)
    first_names, surnames = name_pools(source_papers)
    categories = [p.category for p in source_papers]
    if len(sentences) < MIN_SENTENCES or not first_names or not surnames:
        raise UsageError(f"the {len(source_papers)} source papers give {len(sentences)} sentences and "
                         f"{len(surnames)} surnames: pass papers with longer abstracts and real author names")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for suffix in SYNTHETIC_FORMATS.values():
        for stale in out_dir.glob(f"{FILE_PREFIX}*{suffix}"):
            stale.unlink()
    seen: set[str] = set()
    papers = []
    for _ in range(n):
        category = rng.choice(categories)
        authors = ", ".join(_authors(rng, first_names, surnames))
        papers.append((category, authors, _new_abstract(rng, sentences, seen)))
    write = _corpus_file if format == "corpus" else _arxiv_file
    files = []
    titles: set[str] = set()
    for number, start in enumerate(range(0, len(papers), papers_per_file)):
        path = out_dir / f"{FILE_PREFIX}{number:05d}{SYNTHETIC_FORMATS[format]}"
        path.write_text(write(papers[start:start + papers_per_file], start, titles), encoding="utf-8")
        files.append(path)
    return files


def _corpus_file(papers: list[tuple], first: int, titles: set[str]) -> str:
    body = [HEADER] + [paragraph for category, authors, abstract in papers
                       for paragraph in ([category] if category is not None else []) + [authors, abstract]]
    return "\n\n".join(body) + "\n"


def _arxiv_file(papers: list[tuple], first: int, titles: set[str]) -> str:
    """arXiv metadata records, one per line, with the fields of arXiv's own dump."""
    lines = []
    for number, (category, authors, abstract) in enumerate(papers, start=first):
        month, serial = 1 + number // 99_999 % 12, number % 99_999 + 1
        names = authors.split(", ")
        parsed = [[surname(name), name[:-len(surname(name))].strip(), ""] for name in names]
        record = {"id": f"25{month:02d}.{serial:05d}", "submitter": names[0],
                  "authors": ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1],
                  "title": _title(abstract, titles), "comments": None, "journal-ref": None, "doi": None,
                  "report-no": None, "categories": category, "license": None, "abstract": abstract,
                  "update_date": f"2025-{month:02d}-15", "authors_parsed": parsed}
        lines.append(json.dumps(record, ensure_ascii=False))
    return "\n".join(lines) + "\n"


def _title(abstract: str, titles: set[str]) -> str:
    """The first TITLE_WORDS words of the abstract, more where that title (its words, lower-cased: what
    rag.library.duplicate_keys compares) was given already."""
    words = abstract.rstrip(".").split()
    longer = [" ".join(words[:size]).rstrip(".,;:") for size in range(min(TITLE_WORDS, len(words)), len(words) + 1)]
    for title in itertools.chain(longer, (f"{longer[-1]} {n}" for n in itertools.count(2))):
        key = " ".join(re.findall(r"\w+", title.lower()))
        if key not in titles:
            titles.add(key)
            return title


def split_sentences(abstract: str) -> list[str]:
    """A raw abstract's sentences, each ending in . ! or ? (one is added where missing); glued
    sentences ('agents.EmbodiedBench') are parted as rag.corpus.clean_text parts them."""
    unglued = " ".join(unglue(w) for w in abstract.split(" "))
    sentences = []
    for sentence in _RAW_SENTENCE_BREAK.split(unglued.strip()):
        sentence = sentence.strip()
        if sentence:
            sentences.append(sentence if _FINISHED.search(sentence) else sentence + ".")
    return sentences


def sentence_pool(papers: list[Paper]) -> list[str]:
    """Every distinct sentence of the papers' raw abstracts, in corpus order."""
    return list(dict.fromkeys(s for p in papers for s in split_sentences(p.abstract)))


def name_pools(papers: list[Paper]) -> tuple[list[str], list[str]]:
    """Distinct first names and surnames of the papers' authors, in corpus order.

    Names with initials, digits or brackets give nothing, so every generated name is
    words of letters: 'Hanyang(Jeremy) Chen' -> ('Hanyang', 'Chen'), 'Loek van Rossem' ->
    ('Loek', 'van Rossem')."""
    first_names, surnames = {}, {}
    for paper in papers:
        for name in paper.authors:
            words = re.sub(r"\([^)]*\)", " ", name).split()
            if len(words) < 2:
                continue
            family = surname(" ".join(words))
            if _is_name(words[0]):
                first_names[words[0]] = None
            if all(_is_name(w) for w in family.split()):
                surnames[family] = None
    return list(first_names), list(surnames)


def _is_name(word: str) -> bool:
    return _NAME_WORD.fullmatch(word) is not None


def _authors(rng: random.Random, first_names: list[str], surnames: list[str]) -> list[str]:
    wanted = rng.randint(1, MAX_AUTHORS)
    names: dict[str, None] = {}
    for _ in range(wanted * 4):  # a repeated name is drawn again, a few times at most
        names[f"{rng.choice(first_names)} {rng.choice(surnames)}"] = None
        if len(names) == wanted:
            break
    return list(names)


def _new_abstract(rng: random.Random, sentences: list[str], seen: set[str]) -> str:
    most = min(MAX_SENTENCES, len(sentences))
    for _ in range(MAX_DRAWS_PER_PAPER):
        abstract = " ".join(rng.sample(sentences, rng.randint(MIN_SENTENCES, most)))
        if abstract not in seen:
            seen.add(abstract)
            return abstract
    raise UsageError(f"cannot draw {len(seen) + 1} distinct abstracts from {len(sentences)} sentences: "
                     "ask for fewer papers or pass more source papers")
