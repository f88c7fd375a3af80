"""Load prompt templates from prompts/ and fill their named variables.

A variable is `{name}` (lower-case letters and underscores); any other brace is literal
text, so a template may show a JSON example. Each template declares no more and no fewer
variables than the code fills: a mismatch is an error when the template is loaded.
Values are inserted in one pass, so text inside a source can never add a variable.

The JSON object a reply to the translate, judge and condense prompts holds is read by
`parse_json_reply`, the one tolerant reader of such replies (the answer prompt's streamed
reply is read as it arrives, by answer.ReplyParser).
"""

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

from rag.errors import PromptError
from rag.settings import PACKAGE_DIR

EXPECTED_VARIABLES = {
    "answer_system": {"max_sentences"},
    "answer_system_text": {"cannot_answer", "max_sentences"},
    "answer_user": {"sources", "question"},
    "judge_system": set(),
    "judge_user": {"sources", "claim"},
    "translate_question": {"question"},
    "translate_answer": {"count", "language", "sentences"},
    "condense_system": set(),
    "condense_question": {"history", "question"},
}
_VARIABLE = re.compile(r"\{([a-z_]+)\}")


@dataclass(frozen=True)
class Prompt:
    name: str
    text: str
    variables: frozenset[str]

    def render(self, **values) -> str:
        if set(values) != self.variables:
            raise PromptError(f"prompt {self.name} takes {sorted(self.variables)}, got {sorted(values)}")
        return _VARIABLE.sub(lambda m: str(values[m[1]]), self.text)


def prompts_dir() -> Path:
    """prompts/ in a checkout, rag/prompt_templates inside an installed wheel."""
    for candidate in (PACKAGE_DIR / "prompt_templates", PACKAGE_DIR.parent / "prompts"):
        if (candidate / "answer_system.txt").is_file():
            return candidate
    raise PromptError(f"no prompt templates found next to {PACKAGE_DIR}: reinstall rag")


@functools.cache
def load_prompt(name: str, folder: Path | None = None) -> Prompt:
    """Read prompts/NAME.txt and check its variables against what the code fills."""
    path = (folder or prompts_dir()) / f"{name}.txt"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise PromptError(f"cannot read prompt {path} ({err.strerror}): reinstall rag") from None
    found = set(_VARIABLE.findall(text))
    expected = EXPECTED_VARIABLES[name]
    if found != expected:
        raise PromptError(f"prompt {path} has variables {sorted(found)}, expected {sorted(expected)}: "
                          "fix the template")
    return Prompt(name, text, frozenset(found))


def prompt_hashes() -> dict[str, str]:
    """sha256 of each prompt file, for run manifests."""
    import hashlib

    return {name: hashlib.sha256((prompts_dir() / f"{name}.txt").read_bytes()).hexdigest()[:16]
            for name in EXPECTED_VARIABLES}


def parse_json_reply(reply: str) -> dict | None:
    """The JSON object in a model's reply: the reply itself, or the first object that parses inside
    it (in a ``` code fence, or with prose before or after); None when it holds none, and when the
    whole reply is JSON but not an object. What to do then is each caller's choice."""
    text = reply.strip()
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        pass
    else:
        return value if isinstance(value, dict) else None
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    return None
