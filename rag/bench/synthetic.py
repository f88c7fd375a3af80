"""Write a synthetic corpus of any size from real papers, for benchmarks at 10k–50k papers.

Each pseudo-paper recombines pieces of the real ones: 4–9 sentences drawn from all real
abstract sentences, 1–8 authors whose first names and surnames come from real authors,
and the category of a randomly drawn real paper (so the share without a category matches
the source). Output is deterministic for a seed (same inputs, byte-identical files) and
in exactly the format rag.corpus parses. The text is plausible, not meaningful: use it to
measure speed and size, never retrieval quality. This module writes files only.
"""

import random
import re
from pathlib import Path

from rag.corpus import CORPUS_SUFFIX, HEADER, Paper, surname, unglue
from rag.errors import UsageError

MIN_SENTENCES = 4
MAX_SENTENCES = 9
MAX_AUTHORS = 8
FILE_PREFIX = "syn_"
MAX_DRAWS_PER_PAPER = 100

# Where split_sentences breaks a raw abstract (not rag.corpus.split_sentences, which splits clean
# text for prompts and evidence and spares no abbreviation): a sentence ends at . ! or ? followed by
# space and a capital, digit, quote, bracket, LaTeX/markdown opener or a name like 'rStar'; not after
# "et al.", "e.g.", "i.e.", "vs.", "cf.", "Fig.", "Eq.", "Dr." or an initial ("J. Smith"), since a
# piece cut there would be drawn as a sentence of its own. Decimals ("0.5") have no space.
_RAW_SENTENCE_BREAK = re.compile(
    r"(?<=[.!?])(?<!\bal\.)(?<!e\.g\.)(?<!i\.e\.)(?<!\bvs\.)(?<!\bcf\.)(?<!\bFig\.)(?<!\bEq\.)(?<!\bDr\.)"
    r"(?<!\b[A-Z]\.)\s+(?=[A-Z0-9\"“(\[$\\*`]|[a-z]+[A-Z])")
_FINISHED = re.compile(r"[.!?][\"”')\]*]*$")
_NAME_WORD = re.compile(r"[^\W\d_][\w'’-]*")


def write_synthetic_corpus(source_papers: list[Paper], n: int, out_dir: Path, seed: int = 0,
                           papers_per_file: int = 1000) -> list[Path]:
    """Write `n` pseudo-papers into out_dir as syn_00000.txt, syn_00001.txt, ...; returns the files.

    Earlier syn_*.txt files in out_dir are removed, so load_corpus(out_dir) reads exactly
    these papers (as long as nothing else lives there)."""
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
    for stale in out_dir.glob(f"{FILE_PREFIX}*{CORPUS_SUFFIX}"):
        stale.unlink()
    seen: set[str] = set()
    papers = []
    for _ in range(n):
        category = rng.choice(categories)
        authors = ", ".join(_authors(rng, first_names, surnames))
        papers.append(([category] if category is not None else []) + [authors, _new_abstract(rng, sentences, seen)])
    return _write_files(papers, out_dir, papers_per_file)


def _write_files(papers: list[list[str]], out_dir: Path, papers_per_file: int) -> list[Path]:
    files = []
    for number, start in enumerate(range(0, len(papers), papers_per_file)):
        path = out_dir / f"{FILE_PREFIX}{number:05d}{CORPUS_SUFFIX}"
        body = [HEADER] + [paragraph for paper in papers[start:start + papers_per_file] for paragraph in paper]
        path.write_text("\n\n".join(body) + "\n", encoding="utf-8")
        files.append(path)
    return files


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
