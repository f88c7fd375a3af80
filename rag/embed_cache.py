"""Embeddings on disk by text, so no chunk text is embedded twice by the same model.

One SQLite file per embedding model, derived_cache_dir/embeddings/<model key>.sqlite3: float32
vectors keyed by the sha256 of the text. The model is in the file name, so one model never
reads another's vectors; the store is not, so a rebuilt index or a second store (a Chroma
server) reuses the vectors. Every put_many commits (WAL journal), so an ingest killed
midway keeps what it embedded. This module stores and looks up; it does not embed.
"""

import contextlib
import hashlib
import re
import sqlite3
from pathlib import Path

import numpy as np

from rag.errors import StoreError

CACHE_FORMAT = 1
LOOKUP_CHUNK = 500  # keys per SELECT, well under SQLite's limit on bound parameters


def cache_path(derived_cache_dir: Path, model: str) -> Path:
    """The cache file of embedding model `model` (a bundled name or a model folder)."""
    return Path(derived_cache_dir) / "embeddings" / f"{model_key(model)}.sqlite3"


def model_key(model: str) -> str:
    """A file-name-safe key for a model: its readable tail plus a hash of the whole name and, for a
    model folder, of its files (so a folder whose model is replaced gets a cache of its own).

    'all-MiniLM-L6-v2' -> 'all-MiniLM-L6-v2-07db4e1f'; '/models/my model' -> 'my_model-<hash>'."""
    tail = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(model).name or model).strip("._-")[:60] or "model"
    return f"{tail}-{hashlib.sha256((model + folder_fingerprint(model)).encode()).hexdigest()[:8]}"


def folder_fingerprint(model: str) -> str:
    """For a model folder, the path, size and modification time of each of its files; '' for a
    bundled model's name."""
    folder = Path(model).expanduser()
    if not folder.is_dir():
        return ""
    files = sorted(path for path in folder.rglob("*") if path.is_file())
    return "".join(f"|{path.relative_to(folder)}:{path.stat().st_size}:{path.stat().st_mtime_ns}" for path in files)


def text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


class EmbeddingCache:
    """Vectors by text in one SQLite file; use as a context manager, or call close()."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._db = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30)
            found = self._prepare()
        except (OSError, sqlite3.Error) as err:
            self.close()
            raise self._error(err) from err
        if found != str(CACHE_FORMAT):
            self.close()
            raise StoreError(f"the embedding cache {self.path} has format {found}, this rag reads "
                             f"{CACHE_FORMAT}: delete the file (its vectors are embedded again as needed)")

    def _prepare(self) -> str:
        """Create the tables of a new file; return the file's format."""
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL) WITHOUT ROWID")
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (str(CACHE_FORMAT),))
        self._db.commit()
        return self._db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()[0]

    def get_many(self, texts: list[str]) -> list[list[float] | None]:
        """The cached vector of each text, None where there is none or where its size is not the
        cache's (a garbled entry is a miss, embedded again, never a vector an index cannot use)."""
        keys = [text_key(t) for t in texts]
        found: dict[bytes, list[float]] = {}
        with self._guard():
            size = self._vector_bytes()
            for start in range(0, len(keys), LOOKUP_CHUNK):
                part = keys[start:start + LOOKUP_CHUNK]
                rows = self._db.execute(f"SELECT key, vector FROM vectors WHERE key IN ({','.join('?' * len(part))})",
                                        part)
                found.update((key, np.frombuffer(blob, dtype=np.float32).tolist())
                             for key, blob in rows if len(blob) == size)
        return [found.get(key) for key in keys]

    def put_many(self, texts: list[str], vectors) -> None:
        """Store one vector per text (as float32) and commit; every vector of a cache has one size."""
        if len(texts) != len(vectors):
            raise ValueError(f"{len(texts)} texts but {len(vectors)} vectors")
        rows = [(text_key(t), np.asarray(v, dtype=np.float32).tobytes()) for t, v in zip(texts, vectors)]
        if not rows:
            return
        with self._guard():
            size = self._vector_bytes() or len(rows[0][1])
            if any(len(blob) != size for _, blob in rows):
                raise StoreError(f"the embedding cache {self.path} holds {size // 4}-dimensional vectors, but "
                                 f"the model gave {len(rows[0][1]) // 4}: was the model folder replaced? Delete "
                                 "the file (its vectors are embedded again as needed)")
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('vector_bytes', ?)", (str(size),))
            self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", rows)
            self._db.commit()

    def _vector_bytes(self) -> int | None:
        """The size of this cache's vectors: recorded with the first vectors stored, or (for a file
        written before it was recorded) the size most of its vectors have; None for an empty cache."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'vector_bytes'").fetchone()
        if row is not None:
            return int(row[0])
        row = self._db.execute("SELECT length(vector) AS n FROM vectors GROUP BY n ORDER BY count(*) DESC LIMIT 1"
                               ).fetchone()
        if row is None:
            return None
        with contextlib.suppress(sqlite3.Error):   # recorded once per file, where the file can be written
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('vector_bytes', ?)", (str(row[0]),))
            self._db.commit()
        return row[0]

    def __len__(self) -> int:
        with self._guard():
            return self._db.execute("SELECT count(*) FROM vectors").fetchone()[0]

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> "EmbeddingCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextlib.contextmanager
    def _guard(self):
        """Turn an SQLite error (a file corrupted after it was opened) into the one-line StoreError."""
        try:
            yield
        except sqlite3.Error as err:
            raise self._error(err) from err

    def _error(self, err: Exception) -> StoreError:
        return StoreError(f"cannot use the embedding cache {self.path} ({err}): delete the file "
                          "(its vectors are embedded again as needed) or fix its permissions")
