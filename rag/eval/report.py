"""Eval runs on disk: results.json, report.md and PNG charts; and the diff of two runs."""

import json
from pathlib import Path

from rag.errors import UsageError
from rag.eval.retrieval import METRICS
from rag.eval.run import RESULTS_VERSION

ANSWER_COLUMNS = (("answered", "answered"), ("false_abstention", "false abst."),
                  ("unanswerable_abstained", "unans. abst."), ("accuracy", "accuracy"), ("precision", "precision"),
                  ("citation_validity", "cit. valid"), ("gold_precision", "gold prec."),
                  ("gold_recall", "gold rec."), ("alce_recall_grounding", "ALCE rec."),
                  ("alce_precision_grounding", "ALCE prec."), ("alce_recall_llm", "ALCE rec. (LLM)"),
                  ("alce_precision_llm", "ALCE prec. (LLM)"), ("expected_found", "expected found"))
LATENCY_COLUMNS = ("first_token_p50_s", "first_token_p90_s", "total_p50_s", "total_p90_s")
CHART_METRICS = (("answered", "answered (answerable)"), ("accuracy", "LitQA accuracy"),
                 ("gold_recall", "gold recall"), ("alce_recall_grounding", "ALCE citation recall"))


RETRIEVAL_CHART_METRICS = (("recall@5", "recall@5"), ("mrr", "MRR"))


def retrieval_table(results: dict) -> str:
    """Markdown: one row per question set, retrieval method and question type."""
    lines = ["| set | method | type | n | " + " | ".join(METRICS) + " | search p50 ms |",
             "|---|---|---|---|" + "---|" * len(METRICS) + "---|"]
    for set_name, measured in results["sets"].items():
        for method, result in measured["methods"].items():
            for label, metrics in [("overall", result["overall"])] + list(result["by_type"].items()):
                cells = " | ".join(f"{metrics[m]:.3f}" for m in METRICS)
                latency = f"{result['search_p50_ms']:.1f}" if label == "overall" else ""
                lines.append(f"| {set_name} | {method} | {label} | {metrics['n']} | {cells} | {latency} |")
    return "\n".join(lines)


def overlap_table(results: dict) -> str:
    """Markdown: quartiles of the questions' lexical overlap with their gold abstracts, per set and type."""
    lines = ["| set | type | n | q1 | median | q3 |", "|---|---|---|---|---|---|"]
    for set_name, measured in results["sets"].items():
        overlap = measured["overlap"]
        for label, row in [("overall", overlap["overall"])] + list(overlap["by_type"].items()):
            lines.append(f"| {set_name} | {label} | {row['n']} | " +
                         " | ".join(_cell(row[k], 2) for k in ("q1", "median", "q3")) + " |")
    return "\n".join(lines)


def answer_table(answers: dict) -> str:
    """Markdown: answer metrics overall and per question type ('—' where none applies)."""
    columns = [(key, label) for key, label in ANSWER_COLUMNS
               if key in answers["overall"] and (not key.endswith("_llm") or "llm" in answers["judges"])]
    lines = ["| type | n | " + " | ".join(label for _, label in columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    for label, metrics in [("overall", answers["overall"])] + list(answers["by_type"].items()):
        lines.append(f"| {label} | {metrics['n']} | " + " | ".join(_cell(metrics[k]) for k, _ in columns) + " |")
    return "\n".join(lines)


def abstain_table(rows: list[dict]) -> str:
    """Markdown: why answerable questions were not answered, counted per question type."""
    missed = [r for r in rows if r["answerable"] and not r["outcome"]["answered"]]
    reasons = sorted({r["outcome"]["abstain_reason"] or "none" for r in missed})
    if not reasons:
        return "(every answerable question was answered)"
    lines = ["| type | answerable | " + " | ".join(reasons) + " |", "|---|---|" + "---|" * len(reasons)]
    for question_type in dict.fromkeys(r["type"] for r in rows):
        mine = [r for r in rows if r["type"] == question_type and r["answerable"]]
        counts = [sum((r["outcome"]["abstain_reason"] or "none") == reason for r in missed if r["type"] == question_type)
                  for reason in reasons]
        if mine:
            lines.append(f"| {question_type} | {len(mine)} | " + " | ".join(str(c) for c in counts) + " |")
    return "\n".join(lines)


def latency_table(answers: dict) -> str:
    lines = ["| type | first token p50 s | first token p90 s | total p50 s | total p90 s |", "|---|---|---|---|---|"]
    for label, metrics in [("overall", answers["overall"])] + list(answers["by_type"].items()):
        lines.append(f"| {label} | " + " | ".join(_cell(metrics[k], 1) for k in LATENCY_COLUMNS) + " |")
    return "\n".join(lines)


def summary(results: dict) -> str:
    """What `rag eval` prints: the answer table (full runs) and the retrieval table."""
    parts = []
    if "answers" in results:
        answers = results["answers"]
        parts += ["Answers", answer_table(answers), "", "Why answerable questions were not answered",
                  abstain_table(answers["rows"]), "", "Latency", latency_table(answers),
                  f"\nCitations dropped by the repair step: {answers['overall']['dropped_citations']}", ""]
    parts += [f"Retrieval ({results['split']} part of each set)", retrieval_table(results), "",
              "Lexical overlap of questions with their gold abstracts", overlap_table(results)]
    return "\n".join(parts)


def write_run(results: dict, out: Path) -> list[Path]:
    """results.json, report.md and, for full runs, the charts in `out`; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8")
    charts = [write_retrieval_chart(results, out)] + (write_charts(results, out) if "answers" in results else [])
    (out / "report.md").write_text(report(results, charts), encoding="utf-8")
    return [out / "results.json", out / "report.md"] + charts


def report(results: dict, charts: list[Path]) -> str:
    """report.md: the tables, the charts, the questions answered wrongly, the manifest."""
    title = "Evaluation" if "answers" in results else "Retrieval evaluation"
    sizes = ", ".join(f"{name} {measured['questions']}" for name, measured in results["sets"].items())
    parts = [f"# {title}", "", f"The {results['split']} part of each question set ({sizes} questions; those "
             "with gold papers are scored for retrieval). Knobs are chosen on the tune parts only "
             "(eval/README.md).", ""]
    if "answers" in results:
        answers = results["answers"]
        parts += ["## Answers", "", "Metric definitions: eval/README.md.", "", answer_table(answers), "",
                  "## Why answerable questions were not answered", "", abstain_table(answers["rows"]), "",
                  "## Latency (seconds, questions the model was asked)", "", latency_table(answers), ""]
        parts += [f"![{chart.stem}]({chart.name})" for chart in charts[1:]] + [""]
        parts += ["## Questions not answered correctly", "", *wrong_answers(answers["rows"]), ""]
    parts += ["## Retrieval", "", retrieval_table(results), "", f"![{charts[0].stem}]({charts[0].name})", "",
              "## How hard each set is: lexical overlap", "",
              "Share of a question's content words (stemmed) that occur in its gold abstract "
              "(the highest over its gold papers; English questions with gold papers).", "",
              overlap_table(results), "", "## Manifest", ""]
    parts += [f"- {key}: `{json.dumps(value, ensure_ascii=False)}`" for key, value in results["manifest"].items()]
    return "\n".join(parts) + "\n"


def wrong_answers(rows: list[dict]) -> list[str]:
    """One line per question scored not correct: what happened instead."""
    lines = []
    for row in rows:
        outcome = row["outcome"]
        if outcome["correct"]:
            continue
        if not row["answerable"]:
            what = "answered an unanswerable question"
        elif not outcome["answered"]:
            what = f"abstained ({outcome['abstain_reason']})"
        elif outcome["expected_found"] is False:
            what = f"expected {row['expected']} not in the answer"
        else:
            what = "cited no gold paper"
        question = row["answer"]["question"].replace("|", "\\|")
        lines.append(f"- {row['id']} ({row['type']}): {what}. Q: {question}")
    return lines or ["(none)"]


def write_retrieval_chart(results: dict, out: Path) -> Path:
    """retrieval_by_type.png: recall@5 and MRR per question type and method, one panel per set and metric."""
    pyplot = _pyplot()
    sets = list(results["sets"].items())
    figure, axes = pyplot.subplots(len(sets), len(RETRIEVAL_CHART_METRICS), squeeze=False,
                                   figsize=(12, 3.6 * len(sets)))
    for row, (set_name, measured) in enumerate(sets):
        methods = measured["methods"]
        types = list(dict.fromkeys(t for result in methods.values() for t in result["by_type"]))
        width = 0.8 / max(len(methods), 1)
        for column, (key, label) in enumerate(RETRIEVAL_CHART_METRICS):
            panel = axes[row][column]
            for i, (method, result) in enumerate(methods.items()):
                values = [result["by_type"].get(t, {}).get(key, 0.0) for t in types]
                panel.bar([x + i * width for x in range(len(types))], values, width, label=method)
            panel.set_xticks([x + width * (len(methods) - 1) / 2 for x in range(len(types))], types, fontsize=8)
            panel.set_ylim(0, 1.05)
            panel.set_title(f"{set_name} ({results['split']}): {label}")
            panel.legend(loc="lower left", fontsize=7)
    path = out / "retrieval_by_type.png"
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def write_charts(results: dict, out: Path) -> list[Path]:
    """metrics_by_type.png (answer metrics per question type) and latency.png (distributions)."""
    pyplot = _pyplot()
    answers = results["answers"]
    types = list(answers["by_type"])
    figure, axes = pyplot.subplots(figsize=(10, 4.5))
    width = 0.8 / len(CHART_METRICS)
    for i, (key, label) in enumerate(CHART_METRICS):
        values = [answers["by_type"][t][key] or 0.0 for t in types]
        axes.bar([x + i * width for x in range(len(types))], values, width, label=label)
    axes.set_xticks([x + width * (len(CHART_METRICS) - 1) / 2 for x in range(len(types))], types)
    axes.set_ylim(0, 1.05)
    axes.set_title("Answer metrics per question type")
    axes.legend(loc="upper right", fontsize=8)
    by_type = out / "metrics_by_type.png"
    figure.tight_layout()
    figure.savefig(by_type, dpi=100)
    pyplot.close(figure)

    figure, axes = pyplot.subplots(figsize=(8, 4))
    rows = answers["rows"]
    series = [[r["first_token_s"] for r in rows if r["first_token_s"] is not None],
              [r["total_s"] for r in rows if r["first_token_s"] is not None]]
    axes.hist(series, bins=20, label=["time to first token", "total"])
    axes.set_xlabel("seconds")
    axes.set_ylabel("questions")
    axes.set_title("Answer latency")
    axes.legend()
    latency = out / "latency.png"
    figure.tight_layout()
    figure.savefig(latency, dpi=100)
    pyplot.close(figure)
    return [by_type, latency]


def load_run(path: Path) -> dict:
    """A run's results.json, given the file or its folder."""
    path = Path(path)
    file = path / "results.json" if path.is_dir() else path
    try:
        results = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise UsageError(f"cannot read eval run {file} ({err}): give a run folder written by `rag eval`") from None
    if not isinstance(results, dict) or results.get("version") != RESULTS_VERSION:
        raise UsageError(f"{file} is not a version-{RESULTS_VERSION} eval run: rerun `rag eval` to compare it")
    return results


def diff_runs(a: dict, b: dict) -> str:
    """Markdown: settings that differ, then metric deltas B - A, then questions whose outcome changed."""
    parts = ["## What differs between the runs", ""] + (manifest_changes(a["manifest"], b["manifest"]) or
                                                       ["(nothing but the date)"])
    if "answers" in a and "answers" in b:
        parts += ["", "## Answers (B − A)", "", _delta_table(a["answers"], b["answers"],
                                                              [k for k, _ in ANSWER_COLUMNS] + list(LATENCY_COLUMNS))]
        parts += ["", "## Questions whose outcome changed", ""] + outcome_changes(a["answers"], b["answers"])
    if a.get("split") != b.get("split"):
        parts += ["", f"(The runs measured different parts: {a.get('split')} → {b.get('split')}.)"]
    for set_name in [name for name in a["sets"] if name in b["sets"]]:
        methods_a, methods_b = a["sets"][set_name]["methods"], b["sets"][set_name]["methods"]
        for method in [m for m in methods_a if m in methods_b]:
            parts += ["", f"## Retrieval: {set_name}, {method} (B − A)", "",
                      _delta_table(methods_a[method], methods_b[method], list(METRICS))]
    return "\n".join(parts)


def manifest_changes(a: dict, b: dict, prefix: str = "") -> list[str]:
    lines = []
    for key in sorted(set(a) | set(b)):
        if key == "created":
            continue
        left, right = a.get(key), b.get(key)
        if isinstance(left, dict) and isinstance(right, dict):
            lines += manifest_changes(left, right, f"{prefix}{key}.")
        elif left != right:
            lines.append(f"- {prefix}{key}: {json.dumps(left)} → {json.dumps(right)}")
    return lines


def outcome_changes(a: dict, b: dict) -> list[str]:
    before = {r["id"]: r for r in a["rows"]}
    lines = []
    for row in b["rows"]:
        old = before.get(row["id"])
        if old and old["outcome"]["correct"] != row["outcome"]["correct"]:
            change = "now correct" if row["outcome"]["correct"] else "no longer correct"
            lines.append(f"- {row['id']} ({row['type']}): {change}")
    return lines or ["(none)"]


def _delta_table(a: dict, b: dict, metrics: list[str]) -> str:
    scopes = ["overall"] + [t for t in b["by_type"] if t in a["by_type"]]
    lines = ["| metric | " + " | ".join(scopes) + " |", "|---|" + "---|" * len(scopes)]
    for metric in metrics:
        cells = [_delta(_scope(a, s).get(metric), _scope(b, s).get(metric)) for s in scopes]
        if any(cell != "—" for cell in cells):
            lines.append(f"| {metric} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _scope(result: dict, scope: str) -> dict:
    return result["overall"] if scope == "overall" else result["by_type"][scope]


def _delta(old, new) -> str:
    if old is None or new is None:
        return "—"
    return f"{old:.3f} → {new:.3f} ({new - old:+.3f})"


def _cell(value, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"
