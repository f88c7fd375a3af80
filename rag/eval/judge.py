"""Judges of citation support for the eval: does a set of papers back an answer sentence?

Two judges share one interface, `supports(claim, paper_ids) -> bool`:
GroundingJudge reuses the deterministic check that answers are repaired with
(grounding.py), over each cited paper's whole abstract; LLMJudge asks the configured
backend at temperature 0 and keeps every verdict on disk, keyed by a hash of the model,
the judge prompts, the claim and the sources, so a rerun asks nothing it asked before.
"""

import re
from pathlib import Path

from rag.disk_cache import DiskCache, content_key
from rag.claims import split_label
from rag.grounding import GroundingChecker
from rag.prompt_safety import defuse, screen
from rag.prompts import load_prompt, parse_json_reply, prompt_hashes

JUDGE_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["supported"],
                "properties": {"supported": {"type": "boolean"}}}
JUDGE_MAX_TOKENS = 16


class GroundingJudge:
    """The deterministic check of grounding.py, over the cited papers' abstracts and chunk embeddings."""

    name = "grounding"

    def __init__(self, retriever):
        self.grounding = GroundingChecker(retriever.embed_model)
        self.retriever = retriever
        self._chunks: dict[str, list[tuple[str, list[float]]]] = {}

    def supports(self, claim: str, paper_ids: list[str]) -> bool:
        missing = [p for p in paper_ids if p not in self._chunks]
        if missing:
            self._chunks.update(self.retriever.chunks_of(missing))
        chunks = [chunk for p in paper_ids for chunk in self._chunks.get(p, [])]
        papers = [self.retriever.paper(p) for p in paper_ids]
        text = " ".join(paper.text for paper in papers)
        claim = split_label(claim, [paper.label for paper in papers])[1]   # judged without it
        return self.grounding.check(claim, text, [embedding for _, embedding in chunks]).supported


class LLMJudge:
    """The configured LLM as a judge, at temperature 0, its verdicts cached on disk."""

    name = "llm"

    def __init__(self, model, retriever, derived_cache_dir: Path):
        self.model = model
        self.retriever = retriever
        self.system = load_prompt("judge_system")
        self.user = load_prompt("judge_user")
        self.cache = DiskCache(Path(derived_cache_dir) / "judge" / "verdicts.jsonl")
        hashes = prompt_hashes()
        self._identity = [model.backend, model.model, hashes["judge_system"], hashes["judge_user"]]
        self.asked = 0

    def supports(self, claim: str, paper_ids: list[str]) -> bool:
        papers = [self.retriever.paper(p) for p in paper_ids]
        key = content_key(self._identity + [claim] + [p.paper_id + p.text for p in papers])
        verdict = self.cache.get(key)
        if verdict is None:
            verdict = self._ask(claim, papers)
            self.cache.put(key, verdict)
        return verdict

    def _ask(self, claim: str, papers) -> bool:
        sources = "\n\n".join(f'<source id="{n}">\n{defuse(screen(p.text).text)}\n</source>'
                              for n, p in enumerate(papers, start=1))   # instructions to the model left out
        messages = [{"role": "system", "content": self.system.render()},
                    {"role": "user", "content": self.user.render(sources=sources, claim=defuse(claim))}]
        self.asked += 1
        return parse_verdict("".join(self.model.stream(messages, JUDGE_SCHEMA, JUDGE_MAX_TOKENS)))


def parse_verdict(reply: str) -> bool:
    """{"supported": true} -> True; anything that does not say true is False. A reply without a JSON
    object (one cut short, say) is True when it reads 'supported: true'."""
    verdict = parse_json_reply(reply)
    if verdict is not None:
        return verdict.get("supported") is True
    return bool(re.search(r'"?supported"?\s*:\s*true', reply, re.IGNORECASE))
