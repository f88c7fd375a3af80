"""One ingest at a time per index: a second one waits for the first to finish, up to WAIT_S.

Two ingests of the same index at once would each mirror their own paths into it, and the
index would end with the union of both. So `ingest` holds this lock from before it opens
the store until its report is written; `rag ask` and `rag search` take it too, through
`ingest`, when they fill an empty index.

- Embedded store: an flock on RAG_HOME/locks/<index>.lock. The kernel drops it when its
  process ends, however it ends. The holder's pid is noted beside it in <index>.owner
  (written whole, by rename), for the waiting message only.
- Chroma server: a collection named <index>-ingest-lock, created by the holder (creating a
  collection that exists fails, so only one ingest can) and deleted when it is done. Its
  metadata names the holder (pid, host) and carries a counter the holder bumps every
  HEARTBEAT_S. A waiter that sees the counter stand still for STALE_S (its own clock, so
  the machines' clocks need not agree) takes the lock over: the holder was killed. Taking
  over renames that collection by its id and then creates the lock anew, so of two waiters
  that find it stale at once only one wins. SIGTERM releases the lock on the way out; only
  a crash or SIGKILL leaves one to go stale.

Searches never take the lock and never wait: one that runs during an ingest sees the index
part-way, as before. Ingests of different indexes do not wait for each other.
"""

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

from rag import sigterm
from rag.errors import StoreError
from rag.settings import Settings

LOCK_VERSION = 1
WAIT_S = 900.0      # how long a second ingest waits for the first before it gives up
POLL_S = 0.2        # how often a waiting ingest tries the lock again
HEARTBEAT_S = 10.0  # how often a server lock's holder shows it is alive
STALE_S = 120.0     # a server lock whose heartbeat stood still this long is taken over
SERVER_LOCK_SUFFIX = "-ingest-lock"


@contextlib.contextmanager
def ingest_lock(settings: Settings, notify=lambda message: None):
    """Hold the index's ingest lock for the `with` block, waiting for another holder up to WAIT_S."""
    from rag.store import collection_name, open_store

    name = collection_name(settings)
    if settings.chroma_url:
        lock = ServerLock(open_store(settings).client, name)
    else:
        lock = FileLock(settings.home / "locks" / f"{name}.lock")
    _acquire(lock, name, notify)
    try:
        yield lock
    finally:
        lock.release()


def _acquire(lock, name: str, notify) -> None:
    if lock.try_acquire():
        return
    notify(f"Another ingest of this index is running ({lock.holder()}); waiting for it to finish "
           f"(up to {_duration(WAIT_S)})…")
    deadline = time.monotonic() + WAIT_S
    while not lock.try_acquire():
        if time.monotonic() >= deadline:
            raise StoreError(f"another ingest of index {name} is still running ({lock.holder()}) after "
                             f"{_duration(WAIT_S)}: let it finish or stop it, then run this again")
        time.sleep(POLL_S)


def _duration(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def _holder_text(owner: dict) -> str:
    if not owner.get("pid"):
        return "pid unknown"
    host = owner.get("host")
    return f"pid {owner['pid']}" + (f" on {host}" if host and host != socket.gethostname() else "")


def _owner_record(**extra) -> dict:
    return {"version": LOCK_VERSION, "pid": os.getpid(), "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **extra}


class FileLock:
    """An exclusive flock on `path`; the holder's pid goes to the .owner file beside it."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.owner_path = self.path.with_suffix(".owner")
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as err:
            raise StoreError(f"cannot create the ingest lock {self.path} ({err.strerror or err}): check the "
                             "folder's permissions or point RAG_HOME elsewhere") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        self._write_owner()
        return True

    def _write_owner(self) -> None:
        """Best effort: the pid is only for the message a waiting ingest prints."""
        temp = self.owner_path.with_name(f"{self.owner_path.name}.{os.getpid()}.tmp")
        try:
            temp.write_text(json.dumps(_owner_record()), encoding="utf-8")
            os.replace(temp, self.owner_path)
        except OSError:
            temp.unlink(missing_ok=True)

    def holder(self) -> str:
        try:
            return _holder_text(json.loads(self.owner_path.read_text(encoding="utf-8")))
        except (OSError, ValueError, AttributeError):
            return "pid unknown"

    def release(self) -> None:
        if self._fd is None:
            return
        self.owner_path.unlink(missing_ok=True)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None


class ServerLock:
    """A lock collection on a Chroma server (see the module docstring)."""

    def __init__(self, client, index_name: str):
        self.client = client
        self.name = index_name + SERVER_LOCK_SUFFIX
        self.owner = uuid.uuid4().hex
        self._collection = None
        self._seen: tuple | None = None      # (holder's metadata, when it was first seen unchanged)
        self._stop = threading.Event()
        self._beating: threading.Thread | None = None
        self._previous_sigterm = None

    def try_acquire(self) -> bool:
        try:
            self._collection = self.client.create_collection(
                self.name, embedding_function=None, metadata=_owner_record(owner=self.owner, beat=0))
        except Exception:
            if self._current() is None:   # not there, so creating failed for another reason
                raise
            self._take_over_if_stale()
            return False
        self._stop.clear()
        self._beating = threading.Thread(target=self._heartbeat, name="ingest-lock-heartbeat", daemon=True)
        self._beating.start()
        self._release_on_sigterm()
        return True

    def _current(self):
        try:
            return self.client.get_collection(self.name)
        except Exception:
            return None

    def _take_over_if_stale(self) -> None:
        current = self._current()
        if current is None:
            return
        key = json.dumps(current.metadata or {}, sort_keys=True)
        now = time.monotonic()
        if self._seen is None or self._seen[0] != key:
            self._seen = (key, now)
        elif now - self._seen[1] >= STALE_S:
            # Renamed by its id, so a lock another waiter has just taken (a new collection) is never hit.
            self._discard(current)
            self._seen = None

    def _discard(self, collection) -> None:
        tombstone = f"{self.name}-gone-{uuid.uuid4().hex[:12]}"
        try:
            collection.modify(name=tombstone)
            self.client.delete_collection(tombstone)
        except Exception:
            pass   # already renamed or deleted by someone else

    def _heartbeat(self) -> None:
        beat = 0
        while not self._stop.wait(HEARTBEAT_S):
            beat += 1
            try:
                self._collection.modify(metadata={**(self._collection.metadata or {}), "beat": beat})
            except Exception:
                pass   # the server is unreachable: the ingest itself will say so

    def holder(self) -> str:
        current = self._current()
        return _holder_text(current.metadata or {}) if current is not None else "pid unknown"

    def _release_on_sigterm(self) -> None:
        """SIGTERM leaves through `finally`, so the lock is deleted instead of left to go stale."""
        self._previous_sigterm = sigterm.raise_on_sigterm()

    def release(self) -> None:
        if self._collection is None:
            return
        self._stop.set()
        if self._beating is not None:
            self._beating.join(timeout=HEARTBEAT_S)
        self._discard(self._collection)
        self._collection = None
        sigterm.restore(self._previous_sigterm)
        self._previous_sigterm = None
