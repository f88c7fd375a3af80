"""Benchmark: does retrieval find papers better when the corpus carries titles?

Run: .venv/bin/python benchmarks/bench_titles.py [--split tune|test|all] [--workdir DIR]
     [--titles FILE] [--methods hybrid,dense,bm25]   (workdir default: ./bench-titles)
The bundled corpus has no titles, so each paper is given one: the bundled model writes it from
the abstract alone (it never sees a question), one line per paper appended to
benchmarks/model_titles.jsonl, which is kept so a rerun measures the same titles without the
model. The same papers are then ingested three ways, each into its own index under the workdir
(vectors from the embedding cache where the text was embedded before):
  bundled      data/ as it is (rag.corpus parses it);
  jsonl        the same papers as JSONL records without titles (rag.formats parses them);
  jsonl+title  the same records with the model's title, which ingest puts before the abstract in
               what is chunked, embedded and keyword-indexed.
`jsonl` against `jsonl+title` is the titles' effect (same parser, same text otherwise); `bundled`
shows that the JSONL path finds what the bundled format finds. For each, `rag eval
--retrieval-only` figures of the chosen split: recall@5 and MRR per question set and per type.
"""

import argparse
import json
import os
import sys
from pathlib import Path

from rag.corpus import ET_AL_MARK, Paper
from rag.eval.questions import default_question_sets
from rag.eval.run import evaluate
from rag.ingest import ingest
from rag.library import load_corpus
from rag.llm import open_model
from rag.settings import Settings

TITLES = Path(__file__).with_name("model_titles.jsonl")
TITLE_PROMPT = ("Write the title its authors would give the research paper with this abstract. "
                "Reply with the title only, on one line.\n\nAbstract:\n{abstract}")
TITLE_TOKENS = 40


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="test", choices=("test", "tune", "all"))
    parser.add_argument("--workdir", type=Path, default=Path("bench-titles"))
    parser.add_argument("--titles", type=Path, default=TITLES)
    parser.add_argument("--methods", default="hybrid,dense,bm25")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    papers = list(load_corpus([settings.corpus]).papers)
    titles = model_titles(settings, papers, args.titles)
    args.workdir.mkdir(parents=True, exist_ok=True)
    corpora = {"bundled": settings.corpus,
               "jsonl": write_jsonl(papers, {}, args.workdir / "jsonl.jsonl"),
               "jsonl+title": write_jsonl(papers, titles, args.workdir / "titled.jsonl")}
    methods = args.methods.split(",")
    figures = {}
    for name, corpus in corpora.items():
        home = args.workdir / name.replace("+", "_")
        variant = settings.with_overrides(home=home, corpus=corpus)
        ingest(variant, paths=[corpus], progress=False)
        question_sets = questions_for(papers, load_corpus([corpus]).papers, home / "questions")
        figures[name] = evaluate(variant, methods, question_sets, split=args.split)["sets"]
    print(json.dumps({name: summary(sets) for name, sets in figures.items()}, indent=1), file=sys.stderr)
    print(table(figures, methods, args.split))
    return 0


def model_titles(settings: Settings, papers: list[Paper], path: Path) -> dict[str, str]:
    """paper id -> title, from `path`; papers without one get it from the model, appended as it comes."""
    titles = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                titles[record["paper_id"]] = record["title"]
    missing = [p for p in papers if p.paper_id not in titles]
    if missing:
        model = open_model(settings)
        with path.open("a", encoding="utf-8") as out:
            for number, paper in enumerate(missing, start=1):
                titles[paper.paper_id] = write_title(model, paper)
                out.write(json.dumps({"paper_id": paper.paper_id, "title": titles[paper.paper_id]},
                                     ensure_ascii=False) + "\n")
                out.flush()
                print(f"title {number}/{len(missing)}: {titles[paper.paper_id]}", file=sys.stderr)
    return titles


def write_title(model, paper: Paper) -> str:
    """The model's title for the paper's abstract: its first line, without quotes or a 'Title:' prefix."""
    messages = [{"role": "user", "content": TITLE_PROMPT.format(abstract=paper.text)}]
    reply = "".join(model.stream(messages, None, TITLE_TOKENS)).strip()
    line = reply.splitlines()[0] if reply else ""
    return line.removeprefix("Title:").strip().strip('"*“”').strip()


def write_jsonl(papers: list[Paper], titles: dict[str, str], path: Path) -> Path:
    """The papers as JSONL records (title when given), ids the same as the bundled corpus gives them."""
    lines = []
    for paper in papers:
        record = {"authors": list(paper.authors) + ([ET_AL_MARK] if paper.authors_truncated else []),
                  "abstract": paper.abstract, "category": paper.category}
        if paper.paper_id in titles:
            record["title"] = titles[paper.paper_id]
        lines.append(json.dumps(record, ensure_ascii=False))
    return write_whole(path, "\n".join(lines) + "\n")


def questions_for(papers: list[Paper], variant: list[Paper], folder: Path) -> dict[str, Path]:
    """Every eval set with its gold ids as the variant's papers have them. A paper's id hashes its authors
    line as written: a cut list reads 'A, B 等' in the bundled files and 'A, B等' when rebuilt from a
    record's names, so those ids differ; papers are matched by their abstract."""
    new_id = {paper.abstract: paper.paper_id for paper in variant}
    renamed = {paper.paper_id: new_id[paper.abstract] for paper in papers}
    folder.mkdir(parents=True, exist_ok=True)
    sets = {}
    for name, path in default_question_sets().items():
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        for row in rows:
            row["gold"] = [renamed[paper_id] for paper_id in row["gold"]]
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        sets[name] = write_whole(folder / path.name, text)
    return sets


def write_whole(path: Path, text: str) -> Path:
    """Write `text` to a temporary file beside `path`, then rename it there: a crash leaves no half file."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
    return path


def summary(sets: dict) -> dict:
    return {name: {method: {"overall": result["overall"], "by_type": result["by_type"]}
                   for method, result in data["methods"].items()} for name, data in sets.items()}


def table(figures: dict, methods: list[str], split: str) -> str:
    """recall@5 / MRR of every corpus variant, per set and method, then per type for the first method."""
    lines = [f"Retrieval, {split} part: recall@5 / MRR", "",
             "| corpus | " + " | ".join(f"{s} {m}" for s in next(iter(figures.values())) for m in methods) + " |",
             "|---|" + "---|" * (len(methods) * len(next(iter(figures.values()))))]
    for name, sets in figures.items():
        cells = [_cell(data["methods"][m]["overall"]) for data in sets.values() for m in methods]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    types = sorted({t for sets in figures.values() for data in sets.values()
                    for t in data["methods"][methods[0]]["by_type"]})
    lines += ["", f"By type ({methods[0]}, both sets together where a type is in both):", "",
              "| corpus | " + " | ".join(types) + " |", "|---|" + "---|" * len(types)]
    for name, sets in figures.items():
        cells = []
        for kind in types:
            parts = [data["methods"][methods[0]]["by_type"][kind] for data in sets.values()
                     if kind in data["methods"][methods[0]]["by_type"]]
            n = sum(p["n"] for p in parts)
            cells.append(_cell({m: sum(p[m] * p["n"] for p in parts) / n for m in ("recall@5", "mrr")}) + f" ({n})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(metrics: dict) -> str:
    return f"{metrics['recall@5']:.3f} / {metrics['mrr']:.3f}"


if __name__ == "__main__":
    sys.exit(main())
