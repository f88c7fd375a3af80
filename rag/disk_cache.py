"""A small append-only cache on disk: JSON values by content-hash key, one JSON line each.

Used for LLM results that must be stable and free on reruns (judge verdicts, query
translations). A line cut by an interrupted write is skipped and asked again.
"""

import hashlib
import json
from pathlib import Path


def content_key(parts: list[str]) -> str:
    """sha256 of the parts, in order."""
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode("utf-8")).hexdigest()


class DiskCache:
    """Values by key, loaded once, appended as they are added."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._values: dict[str, object] = {}
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                    self._values[row["key"]] = row["value"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue

    def get(self, key: str):
        return self._values.get(key)

    def put(self, key: str, value) -> None:
        self._values[key] = value
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"key": key, "value": value}, ensure_ascii=False) + "\n")
