"""A small append-only cache on disk: JSON values by content-hash key, one JSON line each.

Used for LLM results that must be stable and free on reruns (judge verdicts, query
translations). Files are read line by line: a line cut by an interrupted write (even inside
a multi-byte character) is skipped, counted, and asked again.
"""

import hashlib
import json
from pathlib import Path

from rag.errors import StoreError


def read_json_lines(path: Path) -> tuple[list, int]:
    """The JSON values of a file's lines, and how many lines could not be read (cut or garbled);
    a file that cannot be opened is a one-line error that names it."""
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise StoreError(f"cannot read {path} ({err.strerror or err}): fix its permissions, "
                         "or delete it (what it held is made again)") from err
    values, skipped = [], 0
    for line in raw.splitlines():
        if not line.strip():
            continue
        try:
            values.append(json.loads(line.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError):
            skipped += 1
    return values, skipped


def content_key(parts: list[str]) -> str:
    """sha256 of the parts, in order."""
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode("utf-8")).hexdigest()


class DiskCache:
    """Values by key, loaded once, appended as they are added."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._values: dict[str, object] = {}
        rows, self.skipped = read_json_lines(self.path) if self.path.exists() else ([], 0)   # skipped: unreadable lines
        for row in rows:
            try:
                self._values[row["key"]] = row["value"]
            except (KeyError, TypeError):
                self.skipped += 1

    def get(self, key: str):
        return self._values.get(key)

    def put(self, key: str, value) -> None:
        self._values[key] = value
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as out:
                out.write(json.dumps({"key": key, "value": value}, ensure_ascii=False) + "\n")
        except OSError as err:
            raise StoreError(f"cannot write {self.path} ({err.strerror or err}): fix its permissions or "
                             "free disk space, or delete it (what it held is made again)") from err
