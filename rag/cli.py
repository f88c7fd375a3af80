"""The `rag` command: parse arguments, call the library, print text or JSON.

No retrieval logic lives here. A RagError becomes one line on stderr and exit code 2
(usage) or 1 (runtime); any other exception too, with the traceback only under
RAG_DEBUG=1.
"""

import argparse
import json
import os
import shutil
import sys
import textwrap

from rag.errors import RagError, UsageError
from rag.settings import Settings

EXAMPLE_QUESTION = "what methods reduce reasoning length?"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line that points at --help."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rag", description="Ask questions of research-paper abstracts; answers cite "
                     "their papers. Runs offline on the bundled models.")
    parser.add_argument("--version", action="version", version=f"rag {_version()}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--home", help="where rag keeps its index (env RAG_HOME)")
    common.add_argument("--chroma-url", help="use a Chroma server, e.g. http://127.0.0.1:8000 "
                        "(env RAG_CHROMA_URL); default: the embedded store under --home")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    ingest = sub.add_parser("ingest", parents=[common], help="parse, chunk, embed and store the corpus",
                            description="Make the index hold exactly the papers in PATH... (default: the "
                            "bundled corpus, env RAG_CORPUS): new papers are added, edited ones replaced, "
                            "removed ones deleted; unchanged ones are not re-embedded.")
    ingest.add_argument("paths", nargs="*", metavar="PATH", help="corpus files or folders of .txt files")
    ingest.add_argument("--rebuild", action="store_true", help="drop the index and build it anew")
    ingest.add_argument("--quiet", action="store_true", help="no progress bar")
    ingest.add_argument("--json", action="store_true", help="print the ingest report as JSON")
    ingest.set_defaults(handler=run_ingest)

    search = sub.add_parser("search", parents=[common], help="find the papers that match a question",
                            description="Top papers for a question, with scores. QUESTION '-' reads one "
                            "question per line from stdin (batch).")
    search.add_argument("question", metavar="QUESTION", help="the question, or - for one per stdin line")
    search.add_argument("-k", type=int, help="how many papers (default 5, env RAG_TOP_K)")
    search.add_argument("--category", help="only papers in this category ('Area · Subarea' or just 'Area')")
    search.add_argument("--author", help="only papers with this author (any position; accents optional)")
    search.add_argument("--json", action="store_true", help="one JSON object per question")
    search.set_defaults(handler=run_search)

    papers = sub.add_parser("papers", parents=[common], help="what is indexed: count, categories, location")
    papers.add_argument("--json", action="store_true", help="the same as JSON, with every paper listed")
    papers.set_defaults(handler=run_papers)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.handler(args)
    except RagError as err:
        if _debug():
            raise
        _say(f"rag: error: {err}")
        return err.exit_code
    except KeyboardInterrupt:
        _say("rag: interrupted")
        return 130
    except Exception as err:  # a bug: one line unless debugging
        if _debug():
            raise
        _say(f"rag: internal error: {type(err).__name__}: {err} (rerun with RAG_DEBUG=1 for the traceback)")
        return 1


def _settings(args, **overrides) -> Settings:
    return Settings.from_env(home=args.home, chroma_url=args.chroma_url, **overrides)


def run_ingest(args) -> int:
    from rag.index import ingest

    report = ingest(_settings(args), paths=args.paths or None, progress=not args.quiet, rebuild=args.rebuild)
    for duplicate in report.duplicates:
        _say(f"rag: warning: {duplicate}")
    if args.json:
        print(json.dumps(vars(report) | {"duplicates": list(report.duplicates)}, ensure_ascii=False))
        return 0
    print(f"Indexed {report.papers} papers ({report.chunks} chunks) in {report.seconds:.1f} s: "
          f"{report.added} added, {report.updated} updated, {report.removed} removed, "
          f"{report.unchanged} unchanged.")
    print(f"Index {report.index} at {report.location}")
    return 0


def run_search(args) -> int:
    from rag.retrieve import Filters, Retriever, check_question

    if args.k is not None and args.k < 1:
        raise UsageError(f"-k must be at least 1, got {args.k}")
    batch = args.question == "-"
    questions = sys.stdin.read().splitlines() if batch else [check_question(args.question)]
    filters = Filters(category=args.category, author=args.author)
    failures = 0
    with Retriever(_settings(args), notify=_say) as retriever:
        for number, question in enumerate(questions, start=1):
            try:
                result = retriever.search(question, k=args.k, filters=filters)
            except RagError as err:
                if not batch:
                    raise
                failures += 1
                _print_batch_error(args.json, number, question, err)
                continue
            print(json.dumps(result.to_json(), ensure_ascii=False) if args.json else format_result(result),
                  flush=True)
    return 1 if failures else 0


def _print_batch_error(as_json: bool, number: int, question: str, err: RagError) -> None:
    if as_json:
        print(json.dumps({"question": question, "line": number, "error": str(err),
                          "exit_code": err.exit_code}, ensure_ascii=False), flush=True)
    else:
        _say(f"rag: error: stdin line {number}: {err}")


def format_result(result) -> str:
    """A search result as a readable table, best chunk under each paper."""
    width = min(shutil.get_terminal_size((100, 24)).columns, 120)
    filters = "".join(f", {name} {value!r}" for name, value in result.filters.as_dict().items())
    lines = [f'Top {len(result.hits)} papers for "{result.question}"{filters}  '
             f'({1000 * sum(result.timings.values()):.0f} ms)', ""]
    if not result.hits:
        return "\n".join(lines + ["No paper matches."])
    lines.append(f"{'#':>2}  {'score':>5}  {'paper':<24}  {'category':<40}  source")
    for hit in result.hits:
        category = hit.paper.category or "—"
        lines.append(f"{hit.rank:>2}  {hit.score:5.3f}  {_cut(hit.paper.label, 24):<24}  "
                     f"{_cut(category, 40):<40}  {hit.paper.source}")
        snippet = textwrap.shorten(hit.best_chunk, width=2 * (width - 9), placeholder=" …")
        lines.extend(textwrap.wrap(snippet, width=width - 9, initial_indent=" " * 9, subsequent_indent=" " * 9))
    return "\n".join(lines)


def run_papers(args) -> int:
    from rag.index import describe_index

    info = describe_index(_settings(args))
    if args.json:
        print(json.dumps(info.to_json(), ensure_ascii=False))
        return 0
    size = f", {info.size_bytes / 1e6:.1f} MB on disk" if info.size_bytes is not None else ""
    print(f"Index {info.index} at {info.location}{size}")
    if not info.papers:
        print("The index is empty: run `rag ingest` (or just `rag search ...`, which ingests first).")
        return 0
    shape = info.shape
    print(f"{len(info.papers)} papers, {info.chunks} chunks; embedding {shape['embed_model']}, chunks of "
          f"{shape['chunk_size']} tokens with {shape['chunk_overlap']} overlap; last ingest {info.ingested_at}")
    for source in info.sources:
        print(f"  source: {source}")
    print("Categories:")
    for category, count in info.categories().items():
        print(f"  {count:>4}  {category or '(no category)'}")
    return 0


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _debug() -> bool:
    return os.environ.get("RAG_DEBUG", "") not in ("", "0")


def _version() -> str:
    from rag import __version__

    return __version__
