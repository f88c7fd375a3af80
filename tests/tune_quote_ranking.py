"""Choose claims.QUOTE_WORD_WEIGHT on the eval's tune part, without the LLM.

A quote is the abstract sentence that claims.quote_order ranks first. For every English
detail question of both sets with `expected` strings, this ranks the gold paper's sentences
under each weight and prints how often the first sentence holding every expected string is
ranked first (top-1) and the mean reciprocal rank of it (MRR); then, for the paraphrased
questions of the part, how many of their gold papers get another first sentence than by
cosine alone (each such change is printed for reading, with --show):

    .venv/bin/python tests/tune_quote_ranking.py [--split tune] [--weights 0,0.3,1] [--show]

It needs the index (`rag ingest`). Not a test: pytest does not collect it.
"""

import argparse
from pathlib import Path

import rag.claims as claims
from rag.answer import Answerer
from rag.eval.answers import contains_all
from rag.eval.questions import default_question_sets, load_questions, split_part
from rag.grounding import cosine
from rag.prompt_safety import screen
from rag.retrieve import Retriever
from rag.settings import Settings


class NoModel:
    backend = model = "none"


def ranked_cases(retriever: Retriever, answerer: Answerer, split: str, types: set[str]) -> list[dict]:
    """(question, sentences, cosines, terms, expected) for the gold papers of the part's questions."""
    papers = {p.paper_id: p for p in retriever.papers}
    cases = []
    for path in (default_question_sets()["lexical"], default_question_sets()["paraphrase"]):
        for q in split_part(load_questions(Path(path), set(papers)), split):
            if q.type not in types or q.lang != "en" or not q.gold:
                continue
            query = retriever.embed_model.get_query_embedding(q.question)
            sentences = list(screen(papers[q.gold[0]].text).kept)
            cases.append({"question": q.question, "type": q.type, "expected": q.expected, "sentences": sentences,
                          "cosines": [cosine(query, v) for v in answerer._sentence_vectors(sentences)],
                          "terms": [answerer.grounding.terms(s) for s in sentences],
                          "question_terms": answerer.grounding.terms(q.question)})
    return cases


def first(case: dict) -> int:
    return claims.quote_order(case["cosines"], case["terms"], case["question_terms"])[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="tune")
    parser.add_argument("--weights", default="0,0.1,0.2,0.3,0.4,0.6,1,1.5")
    parser.add_argument("--show", action="store_true", help="print each paraphrased question's changed quote")
    args = parser.parse_args()
    retriever = Retriever(Settings.from_env())
    answerer = Answerer(retriever.settings, retriever, NoModel())
    details = [c for c in ranked_cases(retriever, answerer, args.split, {"detail"}) if c["expected"]]
    details = [c for c in details if any(contains_all(s, c["expected"]) for s in c["sentences"])]
    paraphrased = ranked_cases(retriever, answerer, args.split, {"paraphrase"})
    for weight in (float(w) for w in args.weights.split(",")):
        claims.QUOTE_WORD_WEIGHT = weight
        ranks = []
        for case in details:
            order = claims.quote_order(case["cosines"], case["terms"], case["question_terms"])
            ranks.append(next(r for r, i in enumerate(order) if contains_all(case["sentences"][i], case["expected"])))
        changed = [c for c in paraphrased if first(c) != max(range(len(c["cosines"])), key=c["cosines"].__getitem__)]
        print(f"weight {weight:g}: detail top-1 {sum(r == 0 for r in ranks)}/{len(ranks)}, "
              f"MRR {sum(1 / (r + 1) for r in ranks) / len(ranks):.3f}; "
              f"paraphrased questions whose quote changes {len(changed)}/{len(paraphrased)}")
        for case in changed if args.show else []:
            print(f"  {case['question']}\n    -> {case['sentences'][first(case)][:160]}")


if __name__ == "__main__":
    main()
