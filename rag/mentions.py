"""Authors and categories that a question names, matched against the stored papers.

Abstracts carry no author names, so neither the embedding nor BM25 over abstracts can
find "the paper by Cédric Colas". An author counts as named when the question holds
their first and last name in order (a middle name or initial may stand between or be
left out), or their surname followed by "et al.", compared accent- and case-insensitively;
or their surname alone, capitalised, where only a name can stand: after "by" or "from",
before "'s", or beside a co-author's surname as a reference label has it ("Lai and Guan");
or anywhere, written as a name ("Saxe", not "SAXE"), when the surname is no word of English
(pyspellchecker's list) nor of the papers other than in their authors' names: "what did Saxe
work on?", "Owhadi paper". "Park" or "Chen" alone stays a word (pyspellchecker knows many
common surnames), as does a name that is also a term of the papers ("Sinkhorn").
A category counts as named when the question holds its full `Area · Subarea` label as
`rag papers` prints it (the separator may be written as "·", ":", "/" or "-").
"""

import re
from collections import Counter
from dataclasses import dataclass

from rag.corpus import CATEGORY_SEPARATOR, Paper, fold, name_tokens, paper_names
from rag.spelling import english

MAX_TOKENS_BETWEEN_NAMES = 1   # "Stuart J Russell" is named by "Stuart Russell" and "Stuart J. Russell"


@dataclass(frozen=True)
class Mentions:
    """Papers whose author or category the question names, and what matched."""

    authors: dict[str, list[str]]      # paper_id -> the author names found
    categories: dict[str, str]         # paper_id -> the category found

    def __bool__(self) -> bool:
        return bool(self.authors or self.categories)


class MentionIndex:
    """Author names and category labels of a set of papers, ready to be found in questions."""

    def __init__(self, papers: list[Paper], papers_using=None):
        """papers_using(word): how many papers use a word anywhere, authors included (KeywordIndex's);
        without it, a surname counts alone only where only a name can stand."""
        self._names: dict[tuple[str, ...], set[tuple[str, str]]] = {}
        self._papers_named = Counter()   # name word -> how many papers' authors hold it
        for paper in papers:
            self._papers_named.update(paper_names(paper.authors))
            for author in paper.authors:
                tokens = tuple(name_tokens(author))
                if len(tokens) >= 2:
                    self._names.setdefault(tokens, set()).add((paper.paper_id, author))
        self._papers_using = papers_using
        self.name_words = frozenset(self._papers_named)   # every word of every author name: what may be a name
        self._names_by_last: dict[str, list[tuple[str, ...]]] = {}   # so a question looks up its own words only
        for name in self._names:
            self._names_by_last.setdefault(name[-1], []).append(name)
        self._pairs: dict[str, list[tuple[str, str, list[str]]]] = {}   # first surname -> (second, paper, authors)
        for paper in (p for p in papers if len(p.authors) >= 2):
            first, second = name_tokens(paper.authors[0]), name_tokens(paper.authors[1])
            if first and second:
                self._pairs.setdefault(first[-1], []).append((second[-1], paper.paper_id, list(paper.authors[:2])))
        self._categories: dict[str, list[tuple[str, str]]] = {}
        for paper in papers:
            if paper.category:
                key = category_key(paper.category)
                self._categories.setdefault(key, []).append((paper.paper_id, paper.category))

    def find(self, question: str) -> Mentions:
        tokens = name_tokens(question)
        authors: dict[str, list[str]] = {}
        candidates = {name for token in set(tokens) for name in self._names_by_last.get(token, ())}
        cased = re.findall(r"\w+|&", unaccent(question))
        full = {name for name in candidates if names_author(tokens, name)}
        alone = {name for name in candidates - full   # 'Zhi-Hua Zhou's group' names him, not every Zhou
                 if name[-1] not in {n[-1] for n in full}
                 and (surname_alone(cased, name[-1])
                      or (written_as_name(cased, name[-1]) and self._only_a_name(name[-1])))}
        for name in sorted(full | alone):
            for paper_id, author in self._names[name]:
                authors.setdefault(paper_id, []).append(author)
        for first, second in surname_pairs(cased):
            for paper_second, paper_id, pair in self._pairs.get(first, ()):
                if paper_second == second:
                    authors[paper_id] = sorted(set(authors.get(paper_id, [])) | set(pair))
        padded = f" {category_key(question)} "
        categories = {paper_id: category for key, owners in self._categories.items() if f" {key} " in padded
                      for paper_id, category in owners}
        return Mentions(authors, categories)

    def _only_a_name(self, word: str) -> bool:
        """Is this name word no English word (spelling.english: a Retriever loads the list as it opens), and
        used by no more papers than hold it in their authors' names?"""
        if self._papers_using is None or self._papers_using(word) > self._papers_named[word]:
            return False
        return word not in english()


def names_author(question_tokens: list[str], name: tuple[str, ...]) -> bool:
    """Does the question name this author: first ... last, or 'last et al'?"""
    first, last = name[0], name[-1]
    for i, token in enumerate(question_tokens):
        if token != last:
            continue
        before = question_tokens[max(0, i - 1 - MAX_TOKENS_BETWEEN_NAMES):i]
        if first in before or question_tokens[i + 1:i + 3] == ["et", "al"]:
            return True
    return False


SURNAME_BEFORE = frozenset({"by", "from"})   # "the paper by Fel", "work from Ying"


def surname_alone(cased_words: list[str], last: str) -> bool:
    """Is the surname written alone where only a name can stand: capitalised, after 'by' or 'from' or
    before "'s" ("Fel's paper")? Lower case ('trained by long rollouts') is not a name."""
    for i, word in enumerate(cased_words):
        if word[:1].isupper() and fold(word) == last:
            if (i and cased_words[i - 1].lower() in SURNAME_BEFORE) or cased_words[i + 1:i + 2] == ["s"]:
                return True
    return False


def written_as_name(cased_words: list[str], last: str) -> bool:
    """Is the surname written as a name: a capital, then lower case ('Saxe'; not 'SAXE' or 'saxe')?"""
    return any(word[:1].isupper() and word[1:].islower() and fold(word) == last for word in cased_words)


def surname_pairs(cased_words: list[str]) -> list[tuple[str, str]]:
    """Capitalised words joined by 'and' or '&', folded, as a reference label of a two-author paper
    reads ('Lai and Guan' -> ('lai', 'guan'))."""
    return [(fold(first), fold(second)) for first, joint, second in zip(cased_words, cased_words[1:], cased_words[2:])
            if first[:1].isupper() and joint.lower() in ("and", "&") and second[:1].isupper()]


def unaccent(text: str) -> str:
    """The text folded as `fold` does, but with its capitals kept: 'Bergsträßer' -> 'Bergstrasser'."""
    return "".join(fold(c).upper() if c.isupper() else fold(c) for c in text)


def category_key(text: str) -> str:
    """'Deep Learning · Theory' -> 'deep learning theory': folded words, separators and '&' unified."""
    text = fold(text).replace(fold(CATEGORY_SEPARATOR), " ").replace("&", " and ")
    return " ".join(re.findall(r"\w+", text))
