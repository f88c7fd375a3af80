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
import time
from pathlib import Path

from rag.background import Background
from rag.errors import BackendError, RagError, UsageError
from rag.formats import FORMATS
from rag.settings import Settings


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
                        "(env RAG_CHROMA_URL; its token, if it needs one: env RAG_CHROMA_TOKEN); "
                        "default: the embedded store under --home")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    ingest = sub.add_parser("ingest", parents=[common], help="parse, chunk, embed and store the corpus",
                            description="Make the index hold exactly the papers in PATH... (default: the "
                            "bundled corpus, env RAG_CORPUS): new papers are added, edited ones replaced, "
                            "removed ones deleted; unchanged ones are not re-embedded. A path that cannot be "
                            "read stops it before the index changes. One ingest of an index runs at a time: a "
                            "second one waits for the first to finish (up to 15 min), then ingests its own PATHs.")
    ingest.add_argument("paths", nargs="*", metavar="PATH", help="corpus files (the bundled .txt format, BibTeX "
                        ".bib, RIS .ris, arXiv metadata or other .jsonl, .csv) or folders of them")
    ingest.add_argument("--format", choices=FORMATS, help="read every file in this format, those in named folders "
                        "too (default: each file's name and content say which)")
    ingest.add_argument("--rebuild", action="store_true", help="drop the index and build it anew")
    ingest.add_argument("--quiet", action="store_true", help="no progress bar")
    ingest.add_argument("--json", action="store_true", help="print the ingest report as JSON")
    ingest.set_defaults(handler=run_ingest)

    question = argparse.ArgumentParser(add_help=False)
    question.add_argument("question", metavar="QUESTION", help="the question, or - for one per stdin line")
    question.add_argument("-k", "--top-k", dest="k", type=int,
                          help="how many papers to retrieve (default 5, env RAG_TOP_K)")
    question.add_argument("--category", help="only papers in this category ('Area · Subarea' or just 'Area')")
    question.add_argument("--author", help="only papers with this author (any position; accents optional)")
    question.add_argument("--json", action="store_true", help="one JSON object per question")

    search = sub.add_parser("search", parents=[common, question], help="find the papers that match a question",
                            description="Top papers for a question, with scores. QUESTION '-' reads one "
                            "question per line from stdin (batch).")
    search.set_defaults(handler=run_search)

    llm = argparse.ArgumentParser(add_help=False)
    llm.add_argument("--backend", choices=["local", "openai", "openai-like"],
                     help="LLM backend (env RAG_BACKEND; default local, the bundled model)")
    llm.add_argument("--model", help="model name for openai / openai-like (env RAG_MODEL)")
    llm.add_argument("--base-url", help="OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1 (env RAG_BASE_URL)")
    llm.add_argument("--timeout", type=float, help="seconds to wait for a remote backend per try (env RAG_TIMEOUT)")
    ask = sub.add_parser("ask", parents=[common, question, llm], help="answer a question, citing the papers",
                         description="Answer from the retrieved papers with numbered citations, each checked "
                         "against its paper; says so when the papers do not answer. QUESTION '-' reads one "
                         "question per line from stdin (batch).")
    ask.add_argument("--cite", choices=["bibtex"], help="also give the cited papers as BibTeX entries (after the "
                     "answer; with --json, in its 'bibtex' field)")
    ask.set_defaults(handler=run_ask)

    evaluate = sub.add_parser("eval", parents=[common, llm], help="measure retrieval and answers on the eval set",
                              description="Answer the test part of each question set in eval/ "
                              "(questions.jsonl, worded like the abstracts; paraphrase.jsonl, worded away from "
                              "them) and score retrieval "
                              "(recall@1/5/10, MRR, nDCG@10), citations, grounding, correctness, abstention "
                              "and latency per question type; writes results.json, report.md and charts.")
    evaluate.add_argument("--retrieval-only", action="store_true", help="retrieval metrics only (fast, no LLM)")
    evaluate.add_argument("--compare", help="comma-separated retrieval methods: hybrid, rrf, dense, bm25 "
                          "(default: the one answers use, env RAG_RETRIEVAL)")
    evaluate.add_argument("--questions", type=Path, help="one questions file instead of every set in eval/ "
                          "(questions.jsonl and paraphrase.jsonl)")
    evaluate.add_argument("--split", choices=["test", "tune", "all"], default="test",
                          help="which part of each set to measure (default test; knobs are chosen on tune)")
    evaluate.add_argument("--types", help="only these question types, comma-separated (e.g. detail,author)")
    evaluate.add_argument("--judge", choices=["llm"],
                          help="also judge citations with the LLM (`--judge llm`, cached); the "
                          "deterministic grounding judge always runs")
    evaluate.add_argument("--out", type=Path, help="run folder (default eval-results/<timestamp> in the current "
                          "directory)")
    evaluate.add_argument("--resume", action="store_true", help="continue an interrupted run in --out DIR: "
                          "answers it saved (answers.jsonl) with the same settings are not asked again")
    evaluate.add_argument("--replay", type=Path, metavar="RUN",
                          help="answer with the model replies saved in an earlier full run's folder instead of "
                          "asking the model: measures a change to the answer checks in minutes (use that run's "
                          "--split and --types)")
    evaluate.add_argument("--thresholds", type=Path, help="fail (exit 1) below the floors in this JSON file")
    evaluate.add_argument("--diff", nargs=2, type=Path, metavar=("RUN_A", "RUN_B"),
                          help="print metric deltas between two run folders and exit")
    evaluate.set_defaults(handler=run_eval)

    ui = sub.add_parser("ui", parents=[common, llm], help="serve the chat UI in the browser",
                        description="A chat page with streamed cited answers, a sources panel and follow-up "
                        "questions, on http://127.0.0.1:7860 by default. Ctrl+C (exit 130) or SIGTERM (exit 0) "
                        "stops it within a few seconds; a second signal exits at once. A login is set with "
                        "RAG_UI_AUTH=USER:PASSWORD or --auth-file FILE: --auth puts the password where `ps` "
                        "shows it to every user of the machine.")
    ui.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; any "
                    "other address needs a login: RAG_UI_AUTH or --auth-file)")
    ui.add_argument("--port", type=int, default=7860, help="port to listen on (default 7860)")
    ui.add_argument("--auth-file", type=Path, metavar="FILE", help="a file whose first line is USER:PASSWORD "
                    "(password of 8 characters or more), readable only by you (chmod 600); preferred, with env "
                    "RAG_UI_AUTH, over --auth")
    ui.add_argument("--auth", metavar="USER:PASSWORD", help="the login on the command line, where `ps` shows it "
                    "to other users: prefer env RAG_UI_AUTH or --auth-file")
    ui.add_argument("--ssl-certfile", type=Path, metavar="FILE", help="serve https with this certificate (PEM); "
                    "needs --ssl-keyfile")
    ui.add_argument("--ssl-keyfile", type=Path, metavar="FILE", help="the certificate's private key (PEM)")
    ui.add_argument("--allowed-host", action="append", default=[], metavar="NAME", help="a host name clients use "
                    "to reach the page, e.g. its DNS name (repeatable); requests for other names are refused, "
                    "which stops DNS rebinding. Always allowed: localhost, loopback addresses and --host")
    ui.set_defaults(handler=run_ui)

    bench = sub.add_parser("bench", parents=[llm], help="measure ingest, search and answer speed here",
                           description="Ingest, search and answer speed on this machine, beside llama-index's "
                           "naive pipeline (VectorStoreIndex over whole abstracts, top 5) on the same corpus and "
                           "models, with ratios and grounding figures for both. Runs in a scratch folder: your "
                           "index is not touched. About 10 minutes on 2 cores with the local model.")
    bench.add_argument("--chroma-url", help="measure on this Chroma server (in an index of its own, dropped "
                       "afterwards); default: an embedded store in the scratch folder")
    bench.add_argument("--scale", type=int, metavar="N", help="build a synthetic corpus of N papers and measure "
                       "ingest and search on it (e.g. 10000, 50000)")
    bench.add_argument("--seed", type=int, default=0, help="seed of the synthetic corpus (default 0)")
    bench.add_argument("--scale-format", choices=["corpus", "arxiv"], default="corpus",
                       help="how --scale writes its corpus: corpus (the bundled .txt format, default) or arxiv "
                       "(arXiv metadata JSONL with ids and titles, ingested as users' files are)")
    bench.add_argument("--eval", type=int, default=14, dest="eval_questions", metavar="N",
                       help="eval questions answered by both pipelines for latency and grounding (default 14; 0: "
                       "only the example question)")
    bench.add_argument("--rounds", type=int, default=2, help="times each search question is timed (default 2)")
    bench.add_argument("--workdir", type=Path, help="keep the scratch folder here; a rerun resumes its ingest")
    bench.add_argument("--json", action="store_true", help="print the figures as JSON instead of tables")
    bench.set_defaults(handler=run_bench)

    doctor = sub.add_parser("doctor", parents=[common, llm], help="check each part this installation uses",
                            description="What this installation will use and whether each part works: Python "
                            "and packages, the llama.cpp build (its CPU features, from a test run in a child "
                            "process), the model file (size and sha256), the embedding model, the index, the "
                            "LLM backend and the Chroma server when one is set. Exit 0 when all work, 1 when "
                            "one does not.")
    doctor.add_argument("--json", action="store_true", help="the same as one JSON object")
    doctor.set_defaults(handler=run_doctor)

    config = sub.add_parser("config", help="every setting: its variable, the value in use and where it came from",
                            description="Every setting rag reads, from its RAG_ variable or its default: the value "
                            "in use (secrets only as set or not, URLs without their user-info), where it came from "
                            "and what it does.")
    config.add_argument("--json", action="store_true", help="the same as a JSON list")
    config.set_defaults(handler=run_config)

    papers = sub.add_parser("papers", parents=[common], help="what is indexed: count, categories, location")
    papers.add_argument("--json", action="store_true", help="the same as JSON, with every paper listed")
    papers.set_defaults(handler=run_papers)
    return parser


def main(argv=None, open_model=None) -> int:
    """Run one command; `open_model(settings)` opens the LLM (default rag.llm.open_model: the configured backend)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    args.open_model = open_model or _open_configured_model
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
    except BrokenPipeError:   # the reader of stdout went away (`rag config | head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # nothing left to flush at exit
        return 141
    except Exception as err:  # a bug: one line unless debugging
        if _debug():
            raise
        from rag.urls import redact_url

        _say(f"rag: internal error: {type(err).__name__}: {redact_url(str(err))} "
             "(rerun with RAG_DEBUG=1 for the traceback)")
        return 1


def _open_configured_model(settings: Settings):
    from rag.llm import open_model

    return open_model(settings)


def _settings(args, **overrides) -> Settings:
    return Settings.from_env(home=getattr(args, "home", None), chroma_url=args.chroma_url, **overrides)


def _llm_settings(args) -> Settings:
    """Settings with the LLM backend flags (--backend, --model, --base-url, --timeout) applied."""
    return _settings(args, backend=args.backend, model=args.model, base_url=args.base_url, timeout_s=args.timeout)


def run_ingest(args) -> int:
    from rag.ingest import ingest

    report = ingest(_settings(args), paths=args.paths or None, progress=not args.quiet, rebuild=args.rebuild,
                    notify=_say, format=args.format)
    for warning in report.warnings:
        _say(f"rag: warning: {warning}")
    if args.json:
        print(json.dumps(vars(report) | {"duplicates": list(report.duplicates), "merged": report.merged},
                         ensure_ascii=False))
        return 0
    print(f"Indexed {report.papers} papers ({report.chunks} chunks) in {report.seconds:.1f} s: "
          f"{report.added} added, {report.updated} updated, {report.removed} removed, "
          f"{report.unchanged} unchanged; {report.embedded} chunks embedded, {report.cached} from the "
          f"embedding cache; {report.merged} duplicate record{'' if report.merged == 1 else 's'} merged.")
    print(f"Index {report.index} at {report.location}")
    return 0


def _questions(args) -> tuple:
    """The questions to run and whether they came from stdin (batch mode)."""
    from rag.retrieve import check_question

    if args.k is not None and args.k < 1:
        raise UsageError(f"-k must be at least 1, got {args.k}")
    if args.question == "-":
        return _stdin_lines(), True
    return [check_question(args.question)], False


def _stdin_lines():
    """Questions from stdin, read one at a time as they come: typed into a terminal, each gets a
    prompt and its answer while the models stay loaded (the long-running mode)."""
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            print("question> ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line:
            return
        yield line.rstrip("\r\n")


def _each_question(questions, batch: bool, as_json: bool, handle) -> int:
    """Run handle(question) for each; in batch mode a failing line is reported and the rest go on."""
    failures = 0
    for number, question in enumerate(questions, start=1):
        try:
            handle(question)
        except RagError as err:
            if not batch:
                raise
            failures += 1
            _print_batch_error(as_json, number, question, err)
    return 1 if failures else 0


def run_search(args) -> int:
    from rag.retrieve import Filters, Retriever
    from rag.translate import translator_for

    questions, batch = _questions(args)
    settings = _settings(args)
    filters = Filters(category=args.category, author=args.author)
    with Retriever(settings, notify=_say, translator=translator_for(settings, args.open_model)) as retriever:
        def handle(question):
            result = retriever.search(question, k=args.k, filters=filters)
            print(json.dumps(result.to_json(), ensure_ascii=False) if args.json else format_result(result),
                  flush=True)
        return _each_question(questions, batch, args.json, handle)


def run_ask(args) -> int:
    from rag.answer import Answerer
    from rag.formats import to_bibtex
    from rag.retrieve import Filters, Retriever
    from rag.translate import translator_for

    questions, batch = _questions(args)
    settings = _llm_settings(args)
    filters = Filters(category=args.category, author=args.author)
    model = OpenedInBackground(args.open_model, settings)   # reads its weights while the index opens
    translator = translator_for(settings, model)   # the question's, then the answer's
    with Retriever(settings, notify=_say, translator=translator) as retriever:
        answerer = Answerer(settings, retriever, model(settings), translator)

        def handle(question):
            try:
                if args.json:
                    answer = answerer.ask(question, k=args.k, filters=filters)
                    row = answer.to_json()
                    if args.cite == "bibtex":
                        row["bibtex"] = to_bibtex([c.paper for c in answer.citations])
                    print(json.dumps(row, ensure_ascii=False), flush=True)
                else:
                    answer = print_answer(answerer, question, args.k, filters)
                    if args.cite == "bibtex" and answer.citations:
                        print("\n" + to_bibtex([c.paper for c in answer.citations]).strip(), flush=True)
            except BackendError as err:
                if args.json and not batch:
                    _print_batch_error(True, 1, question, err)
                elif not args.json:
                    print("\n".join(["", "Retrieved papers (no answer, the backend failed):"] +
                                    [_paper_line(h.rank, h.paper, h.score) for h in err.sources]), flush=True)
                raise
        return _each_question(questions, batch, args.json, handle)


class OpenedInBackground(Background):
    """An LLM being opened on a thread of its own from now on; calling this (as an opener) waits for it
    and returns it. Loading the local model's weights overlaps opening the index and embedding the
    question, so the first answer starts sooner."""

    def __init__(self, open_model, settings: Settings):
        super().__init__("open-llm", open_model, settings)

    def __call__(self, settings: Settings | None = None):
        return self.result()


ABSTAIN_NOTES = {"unsupported": " (the draft above is not supported by the papers)",
                 "off_question": " (the papers found are about something else)"}


def print_answer(answerer, question: str, k, filters):
    """Print each claim as soon as it is checked, with its citations, then the references; returns the Answer.

    A claim is shown only once checked, because the check may replace it (by the source's
    own sentence, quoted) or hold it back (true of a paper, but not an answer). The claims of a
    question about several papers are a list under a lead line, one line each."""
    from rag.answer_record import CANNOT_ANSWER, STREAMED_LIST_LEAD
    from rag.claims import about_several

    bullet = "- " if about_several(question, answerer.retriever.mention_index) else ""
    led = []

    def on_sentence(sentence):
        if sentence is None or sentence.kind == "off_question":
            return
        if bullet and sentence.supported and not led:   # the lead tops the first claim the papers back
            led.append(sentence)
            print(STREAMED_LIST_LEAD, flush=True)
        flag = "" if sentence.supported else " (not supported by its sources)"
        print(f"{bullet}{sentence.render()}{flag}", flush=True)

    answer = answerer.ask(question, k=k, filters=filters, on_sentence=on_sentence, on_sources=print_found)
    lines = [""] if answer.abstained else []   # each block below starts with its own blank line
    if answer.abstained:
        if answer.abstain_reason != "model":
            lines.append(CANNOT_ANSWER + ABSTAIN_NOTES.get(answer.abstain_reason, ""))
        lines += ["", "Nearest papers:"] + [_paper_line(h.rank, h.paper, h.score) for h in answer.sources]
    else:
        if answer.language:
            lines += ["", f"In {answer.language}:", answer.answer]
        lines += ["", "References:"] + [_paper_line(c.n, c.paper, c.score) for c in answer.citations]
    t = answer.timings
    first = f"first token {t['first_token_s']:.1f} s, " if t["first_token_s"] is not None else ""
    tokens = f"{t['prompt_tokens']} prompt tokens, " if t["prompt_tokens"] else ""
    lines.append(f"\n({t['total_s']:.1f} s: {first}{tokens}{answer.backend} {answer.model})")
    print("\n".join(lines), flush=True)
    return answer


def print_found(hits) -> None:
    """The papers found, on one line, before the model is asked (it takes seconds to answer)."""
    if hits:
        labels = "; ".join(h.paper.label for h in hits).removesuffix(".")
        print(f"Found {len(hits)} papers: {labels}. Answering…\n", flush=True)


def _paper_line(n: int, paper, score: float) -> str:
    return (f"[{n}] {paper.reference()} · {paper.category or 'no category'} · score {score:.3f} · "
            f"{paper.paper_id} · {paper.source}")


def _print_batch_error(as_json: bool, number: int, question: str, err: RagError) -> None:
    if as_json:
        row = {"question": question, "line": number, "error": str(err), "exit_code": err.exit_code}
        if getattr(err, "sources", None):
            row["sources"] = [h.to_json() for h in err.sources]
        print(json.dumps(row, ensure_ascii=False), flush=True)
    else:
        _say(f"rag: error: stdin line {number}: {err}")


def format_result(result) -> str:
    """A search result as a readable table, best chunk under each paper."""
    width = min(shutil.get_terminal_size((100, 24)).columns, 120)
    filters = "".join(f", {name} {value!r}" for name, value in result.filters.as_dict().items())
    searched = f' (searched as "{result.query}")' if result.query != result.question else ""
    lines = [f'Top {len(result.hits)} papers for "{result.question}"{searched}{filters}  '
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


def _model_opener(args):
    """How `rag eval` opens its model: the replies saved in --replay RUN, else the configured LLM."""
    if args.replay is None:
        return args.open_model
    from rag.eval.replay import ReplayModel

    replay = ReplayModel(args.replay)
    return lambda settings: replay


def run_eval(args) -> int:
    from rag.eval import report, run
    from rag.settings import RETRIEVAL_METHODS

    if args.diff:
        print(report.diff_runs(*(report.load_run(path) for path in args.diff)))
        return 0
    if args.resume and not args.out:
        raise UsageError("--resume needs --out DIR: the folder of the run to continue")
    if args.replay and args.retrieval_only:
        raise UsageError("--replay scores answers: drop --retrieval-only")
    settings = _llm_settings(args)
    methods = _list_option(args.compare) if args.compare is not None else [settings.retrieval]
    unknown = [m for m in methods if m not in RETRIEVAL_METHODS]
    if unknown or not methods:
        raise UsageError(f"unknown retrieval method {unknown[0] if unknown else args.compare!r}: "
                         f"use {', '.join(RETRIEVAL_METHODS)}")
    stamp = time.strftime("%Y%m%d-%H%M%S") + ("-retrieval" if args.retrieval_only else "")
    out = args.out or Path("eval-results") / stamp
    progress = EvalProgress()
    started = time.perf_counter()
    try:
        question_sets = {args.questions.stem: args.questions} if args.questions else None
        results = run.evaluate(settings, methods, question_sets, types=_list_option(args.types),
                               split=args.split, answers=not args.retrieval_only,
                               judges=["grounding"] + ([args.judge] if args.judge else []),
                               progress=progress.retrieval, answer_progress=progress.answer,
                               out=out, resume=args.resume, open_model=_model_opener(args))
    finally:
        progress.close()
    written = report.write_run(results, out)
    print(report.summary(results))
    print(f"\nWrote {', '.join(path.name for path in written)} to {out} in {time.perf_counter() - started:.0f} s")
    if args.thresholds:
        failures = run.check_thresholds(results, json.loads(args.thresholds.read_text(encoding="utf-8")))
        for failure in failures:
            _say(f"rag: below threshold: {failure}")
        return 1 if failures else 0
    return 0


class EvalProgress:
    """Progress bars on stderr: one per retrieval method, one for answers with a running tally."""

    def __init__(self):
        self.bars = {}
        self.tally = {"answered": 0, "abstained": 0, "correct": 0}

    def retrieval(self, method: str, done: int, total: int) -> None:
        self._bar(method, total).update(1)

    def answer(self, row: dict, done: int, total: int) -> None:
        outcome = row["outcome"]
        self.tally["answered" if outcome["answered"] else "abstained"] += 1
        self.tally["correct"] += outcome["correct"]
        if "answers" not in self.bars:
            self.close()  # retrieval is done: its bars stop counting time
        bar = self._bar("answers", total)
        bar.set_postfix(self.tally | {"last": f"{row['total_s']:.1f}s"}, refresh=False)
        bar.update(1)

    def _bar(self, name: str, total: int):
        from tqdm import tqdm

        if name not in self.bars:
            self.bars[name] = tqdm(desc=name, total=total, unit="q", file=sys.stderr, mininterval=0.5,
                                   dynamic_ncols=True)
        return self.bars[name]

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


def _list_option(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def run_ui(args) -> int:
    from rag.ui.app import check_bind, check_tls, is_loopback, serve

    if args.auth is not None:
        _say("rag ui: warning: --auth shows the password to every user of this machine (ps, /proc): "
             "set RAG_UI_AUTH or use --auth-file FILE instead")
    # refuse a bad login, TLS files or a non-loopback address without a login before loading anything
    credentials = check_bind(args.host, args.auth, args.auth_file)
    check_tls(args.ssl_keyfile, args.ssl_certfile)
    if credentials is not None and not is_loopback(args.host) and args.ssl_certfile is None:
        _say(f"rag ui: warning: without --ssl-certfile and --ssl-keyfile the password crosses the network "
             f"to {args.host} unencrypted")
    settings = _llm_settings(args)
    if settings.backend == "local":   # an engine that cannot run is one line and exit 1, not a page that fails
        from rag.llm import check_local_engine

        check_local_engine(settings)
    serve(settings, host=args.host, port=args.port, auth=args.auth, announce=lambda line: print(line, flush=True),
          auth_file=args.auth_file, ssl_keyfile=args.ssl_keyfile, ssl_certfile=args.ssl_certfile,
          allowed_hosts=args.allowed_host, open_model=args.open_model)
    return 0


def run_bench(args) -> int:
    from rag.bench.measure import format_table, run_bench as bench, to_json

    if args.scale is not None and args.scale < 1:
        raise UsageError(f"--scale must be at least 1 paper, got {args.scale}")
    if args.scale is None and args.scale_format != "corpus":
        raise UsageError("--scale-format needs --scale N: it is the format of the synthetic corpus")
    if args.rounds < 1 or args.eval_questions < 0:
        raise UsageError("--rounds must be at least 1 and --eval 0 or more")
    # a new `rag ask` process opens the configured backend itself: timed only when the bench answers with it too
    ask_command = [sys.executable, "-m", "rag", "ask"] if args.open_model is _open_configured_model else None
    result = bench(_llm_settings(args), scale=args.scale, seed=args.seed, eval_questions=args.eval_questions,
                   rounds=args.rounds, workdir=args.workdir, say=_say, scale_format=args.scale_format,
                   open_model=args.open_model, ask_command=ask_command)
    print(to_json(result) if args.json else format_table(result))
    return 0


def run_doctor(args) -> int:
    from rag.doctor import diagnose

    report = diagnose(_llm_settings(args), args.open_model)
    if args.json:
        print(json.dumps(report.to_json(), ensure_ascii=False, indent=2))
    else:
        for check in report.checks:
            mark = {True: "ok", False: "FAIL", None: "-"}[check.ok]
            print(f"{mark:<5} {check.name:<12} {check.detail}")
    verdict = "every part works" if report.ok else f"FAILED: {', '.join(report.failed)}"
    _say(f"rag doctor: {verdict} ({report.seconds:.1f} s)")
    return 0 if report.ok else 1


def run_config(args) -> int:
    from rag.settings import describe_settings

    rows = describe_settings(Settings.from_env())
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=1))
        return 0
    width = max(len(row["variable"]) for row in rows)
    for row in rows:
        value = "unset" if row["value"] in (None, "") else row["value"]
        print(f"{row['variable']:<{width}}  {value}  ({row['from']})")
        print(textwrap.fill(row["help"], width=100, initial_indent=" " * (width + 2),
                            subsequent_indent=" " * (width + 2)))
    return 0


def run_papers(args) -> int:
    from rag.ingest import describe_index

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
    """RAG_DEBUG, through Settings; False when the settings themselves are wrong (that error is one line)."""
    try:
        return Settings.from_env().debug
    except RagError:
        return False


def _version() -> str:
    from rag import __version__

    return __version__
