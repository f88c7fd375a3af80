"""Benchmark: retrieval of questions with typing slips, with and without fixing them (rag/spelling.py).

Run: .venv/bin/python benchmarks/bench_spelling.py [--split tune|test|all] [--slips 2] [--seed 0]
     [--questions FILE]
Each English question with gold papers of both sets' chosen part (or of FILE's) is asked twice: as written, and
with slips typed into up to --slips of its words of six letters or more (seeded: one letter left
out, doubled, swapped with the next, or replaced by a neighbour on the keyboard). Each is searched
with the fixer on (as rag does) and off; printed: recall@1, recall@5 and MRR per question set, and
how many questions the fixer changed.
"""

import argparse
import random
import re
import statistics
import sys
from pathlib import Path

from rag.eval.questions import default_question_sets, load_questions, split_part
from rag.eval.retrieval import score_ranking
from rag.retrieve import Retriever
from rag.settings import Settings

KEYBOARD = ["qwertyuiop", "asdfghjkl", "zxcvbnm"]
SLIPPABLE = re.compile(r"\b[a-z]{6,}\b")


def neighbours(letter: str) -> str:
    """The letters next to `letter` on a QWERTY keyboard's row."""
    for row in KEYBOARD:
        if letter in row:
            i = row.index(letter)
            return row[max(i - 1, 0):i] + row[i + 1:i + 2]
    return letter


def slip(word: str, rng: random.Random) -> str:
    """The word with one typing slip, never in its first letter."""
    i = rng.randrange(1, len(word) - 1)
    kind = rng.choice(["drop", "double", "swap", "neighbour"])
    if kind == "drop":
        return word[:i] + word[i + 1:]
    if kind == "double":
        return word[:i] + word[i] + word[i:]
    if kind == "swap":
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    return word[:i] + rng.choice(neighbours(word[i])) + word[i + 1:]


def with_slips(question: str, slips: int, rng: random.Random) -> str:
    """The question with slips in up to `slips` of its long lower-case words."""
    words = list(dict.fromkeys(SLIPPABLE.findall(question)))
    for word in rng.sample(words, min(slips, len(words))):
        question = re.sub(rf"\b{word}\b", slip(word, rng), question, count=1)
    return question


def measure(retriever: Retriever, questions: list[tuple[str, set[str]]], fix: bool) -> dict:
    fixer = retriever.spelling.fix
    if not fix:
        retriever.spelling.fix = lambda text: text
    try:
        scores = [score_ranking([h.paper.paper_id for h in retriever.search(q, k=10).hits], gold)
                  for q, gold in questions]
    finally:
        retriever.spelling.fix = fixer
    return {m: round(statistics.fmean(s[m] for s in scores), 3) for m in ("recall@1", "recall@5", "mrr")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="tune", choices=["tune", "test", "all"])
    parser.add_argument("--slips", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--questions", type=Path, help="a questions file instead of both sets")
    args = parser.parse_args(argv)
    sets = {args.questions.stem: args.questions} if args.questions else default_question_sets()
    rng = random.Random(args.seed)
    print("| set | questions | fixed | written: off / on (recall@1, recall@5, MRR) | with slips: off / on |")
    print("|---|---|---|---|---|")
    with Retriever(Settings.from_env()) as retriever:
        for name, path in sets.items():
            known = {p.paper_id for p in retriever.papers}
            asked = [q for q in split_part(load_questions(path, known), args.split) if q.gold and q.lang == "en"]
            written = [(q.question, set(q.gold)) for q in asked]
            slipped = [(with_slips(q.question, args.slips, rng), set(q.gold)) for q in asked]
            changed = sum(retriever.spelling.fix(q) != q for q, _ in slipped)
            row = [measure(retriever, qs, fix) for qs in (written, slipped) for fix in (False, True)]
            cells = [" / ".join(f"{r['recall@1']:.3f}, {r['recall@5']:.3f}, {r['mrr']:.3f}" for r in pair)
                     for pair in (row[:2], row[2:])]
            print(f"| {name} | {len(asked)} | {changed} of the slipped | {cells[0]} | {cells[1]} |")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
