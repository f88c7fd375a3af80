"""Benchmark answers on the local model: latency, citations and abstention on a slice of eval/.

Run: .venv/bin/python tests/bench_answer.py [--formats json,text] [--every 6] [--out FILE]
Takes the example question, every Nth answerable English question and every unanswerable
one from eval/questions.jsonl; prints, per answer format, one summary measured in one run.
Nothing else CPU-heavy should run meanwhile (llama.cpp slows by an order of magnitude).
"""

import argparse
import json
import statistics
from pathlib import Path

from rag.answer import Answerer
from rag.llm import open_model
from rag.retrieve import Retriever
from rag.settings import Settings

EVAL = Path(__file__).resolve().parent.parent / "eval" / "questions.jsonl"
EXAMPLE = {"id": "example", "type": "example", "question": "what methods reduce reasoning length?",
           "gold": ["3c004e0ee1985776"], "expected": [], "answerable": True, "lang": "en"}


def select(every: int) -> list[dict]:
    questions = [json.loads(line) for line in EVAL.read_text(encoding="utf-8").splitlines() if line.strip()]
    answerable = [q for q in questions if q["answerable"] and q["lang"] == "en"][::every]
    return [EXAMPLE] + answerable + [q for q in questions if not q["answerable"]]


def run(answerer: Answerer, questions: list[dict], out) -> list[dict]:
    rows = []
    for q in questions:
        data = answerer.ask(q["question"]).to_json()
        row = {"id": q["id"], "type": q["type"], "answerable": q["answerable"], "gold": q["gold"],
               "expected": q["expected"], "abstained": data["abstained"], "reason": data["abstain_reason"],
               "cited": [c["paper_id"] for c in data["citations"]], "invalid": data["invalid_citations"],
               "supported": [s["supported"] for s in data["sentences"]], "answer": data["answer"],
               "timings": data["timings"]}
        rows.append(row)
        if out:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
        print(f"  {q['id']:>8} {q['type']:<12} abstained={row['abstained']!s:<5} {row['reason'] or '':<11} "
              f"{row['timings']['total_s']:.1f} s", flush=True)
    return rows


def summarise(rows: list[dict]) -> dict:
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]
    answered = [r for r in answerable if not r["abstained"]]
    asked = [r for r in rows if r["timings"]["first_token_s"] is not None]
    latency = [r for r in asked if r["answerable"]][:11]  # the example + 10 questions
    return {
        "answerable answered": f"{len(answered)}/{len(answerable)}",
        "false abstention": f"{1 - len(answered) / len(answerable):.0%}",
        "answers citing a gold paper": f"{sum(bool(set(r['cited']) & set(r['gold'])) for r in answered)}/{len(answered)}",
        "unanswerable abstained": f"{sum(r['abstained'] for r in unanswerable)}/{len(unanswerable)}",
        "invalid citations (dropped)": sum(len(r["invalid"]) for r in rows),
        "first token p50 s": round(statistics.median(r["timings"]["first_token_s"] for r in latency), 1),
        "total p50 s": round(statistics.median(r["timings"]["total_s"] for r in latency), 1),
        "prompt tokens p50": statistics.median(r["timings"]["prompt_tokens"] for r in latency),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--formats", default="json", help="comma-separated answer formats to compare")
    parser.add_argument("--every", type=int, default=6, help="take every Nth answerable question")
    parser.add_argument("--out", type=Path, help="also write one JSON row per answer here")
    args = parser.parse_args()
    base = Settings.from_env()
    questions = select(args.every)
    out = args.out.open("w", encoding="utf-8") if args.out else None
    summaries = {}
    with Retriever(base) as retriever:
        model = open_model(base)
        for answer_format in args.formats.split(","):
            settings = base.with_overrides(answer_format=answer_format)
            print(f"{answer_format}: {len(questions)} questions", flush=True)
            summaries[answer_format] = summarise(run(Answerer(settings, retriever, model), questions, out))
    for name in next(iter(summaries.values())):
        print(f"{name:<30}" + "".join(f"{str(s[name]):>14}" for s in summaries.values()))


if __name__ == "__main__":
    main()
