"""One ingest per index at a time: a second ingest (or a search filling an empty index) waits for the first."""

import os
import select
import signal
import subprocess
import sys
import threading
import time

import chromadb
import pytest

import servers
from conftest import REPO, write_corpus
from rag import ingest_lock as lock_module
from rag.cli import main
from rag.errors import StoreError
from rag.ingest import _stored_papers, ingest
from rag.ingest_lock import FileLock, ServerLock, ingest_lock
from rag.retrieve import Retriever
from rag.settings import Settings
from rag.store import open_store

EXTRA_PAPER = (None, "Edsger Dijkstra", "Shortest paths in graphs with non-negative weights. A greedy method suffices.")


def stored_count(settings) -> int:
    with open_store(settings) as store:
        collection = store.collection(create=False)
        return len(_stored_papers(collection)) if collection is not None else 0


def read_until(proc, stream, pattern: bytes, timeout_s: float = 120) -> bytes:
    """What `stream` printed up to and including `pattern`; fails if the process ends or time runs out first."""
    seen, deadline = b"", time.monotonic() + timeout_s
    while pattern not in seen:
        assert time.monotonic() < deadline, f"no {pattern!r} in time: {seen.decode(errors='replace')[-800:]}"
        ready, _, _ = select.select([stream], [], [], 0.5)
        chunk = os.read(stream.fileno(), 4096) if ready else b""
        if ready and not chunk:
            proc.wait()
            pytest.fail(f"exited ({proc.returncode}) before {pattern!r}: {seen.decode(errors='replace')[-800:]}")
        seen += chunk
    return seen


@pytest.fixture
def indexed(small_corpus, tmp_path):
    """Settings whose index holds the 3 small papers, and a file with a 4th paper."""
    settings = Settings.from_env(corpus=small_corpus, paper_model="none")
    ingest(settings, progress=False)
    return settings, write_corpus(tmp_path / "extra.txt", [EXTRA_PAPER])


def test_a_second_ingest_waits_for_the_first_then_ingests_its_own_paths(indexed, small_corpus):
    settings, extra = indexed
    env = {**os.environ, "RAG_PAPER_MODEL": "none", "PYTHONPATH": str(REPO)}
    with ingest_lock(settings):
        proc = subprocess.Popen([sys.executable, "-m", "rag", "ingest", "--quiet", str(small_corpus), str(extra)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            read_until(proc, proc.stderr, f"Another ingest of this index is running (pid {os.getpid()}); "
                                          "waiting".encode())
            time.sleep(0.5)
            assert proc.poll() is None and stored_count(settings) == 3   # it waits, and has changed nothing
        except BaseException:
            proc.kill()
            raise
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and b"Indexed 4 papers" in out
    assert stored_count(settings) == 4


def test_an_ingest_that_waits_too_long_gives_up_in_one_line(indexed, monkeypatch, capsys):
    settings, extra = indexed
    monkeypatch.setattr(lock_module, "WAIT_S", 0.5)
    monkeypatch.setattr(lock_module, "POLL_S", 0.05)
    with ingest_lock(settings):
        assert main(["ingest", "--quiet", str(extra)]) == 1
    err = capsys.readouterr().err
    assert f"Another ingest of this index is running (pid {os.getpid()}); waiting" in err
    assert err.splitlines()[-1].startswith("rag: error: another ingest of index rag-papers-")
    assert f"is still running (pid {os.getpid()}) after 0.5 s" in err
    assert stored_count(settings) == 3   # the extra-only ingest would have removed the 3 papers


def search_beside_a_held_lock(settings, capsys, while_waiting) -> Retriever:
    """A Retriever opened in a thread while this test holds the ingest lock: once it says it waits,
    `while_waiting()` runs, still under the lock; returns the Retriever once the lock is let go."""
    opened, stderr = [], ""
    with ingest_lock(settings):
        search = threading.Thread(target=lambda: opened.append(Retriever(settings)))
        search.start()
        deadline = time.monotonic() + 60
        while "Another ingest of this index is running" not in stderr:
            assert search.is_alive() and time.monotonic() < deadline, stderr
            time.sleep(0.1)
            stderr += capsys.readouterr().err
        assert search.is_alive()
        while_waiting()
    search.join(timeout=120)
    assert not search.is_alive()
    return opened[0]


def test_a_search_that_fills_an_empty_index_waits_for_a_running_ingest(small_corpus, capsys):
    settings = Settings.from_env(corpus=small_corpus, paper_model="none", translate="off")
    with open_store(settings) as store:
        store.collection(create=True)   # the store and its index exist, empty: the search waits in ingest()

    def nothing_stored():
        assert stored_count(settings) == 0

    with search_beside_a_held_lock(settings, capsys, nothing_stored) as retriever:
        assert len(retriever.papers) == 3


def test_a_search_on_a_new_home_does_not_create_the_store_while_an_ingest_holds_it(small_corpus, capsys):
    settings = Settings.from_env(corpus=small_corpus, paper_model="none", translate="off")

    def no_store_yet():   # the ingest creates it, not the search beside it
        assert not (settings.home / "chroma").exists()

    with search_beside_a_held_lock(settings, capsys, no_store_yet) as retriever:
        assert len(retriever.papers) == 3


def test_a_killed_holder_leaves_no_lock(tmp_path):
    path = tmp_path / "locks" / "index.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from rag.ingest_lock import FileLock\n"
         "lock = FileLock(sys.argv[1]); assert lock.try_acquire(); print('held', flush=True); time.sleep(120)",
         str(path)],
        env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE)
    try:
        read_until(holder, holder.stdout, b"held", timeout_s=30)
        waiter = FileLock(path)
        assert not waiter.try_acquire() and waiter.holder() == f"pid {holder.pid}"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        holder.stdout.close()
    assert waiter.try_acquire()
    waiter.release()


@pytest.fixture
def chroma_client(tmp_path):
    """A Chroma client (embedded: the same collection calls as a server's) for the server lock."""
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"),
                                       settings=chromadb.Settings(anonymized_telemetry=False))
    yield client
    client.close()


def test_a_server_lock_admits_one_holder_at_a_time(chroma_client):
    first, second = ServerLock(chroma_client, "rag-papers-abc"), ServerLock(chroma_client, "rag-papers-abc")
    assert first.try_acquire()
    assert not second.try_acquire() and second.holder() == f"pid {os.getpid()}"
    first.release()
    assert second.try_acquire()
    second.release()
    assert chroma_client.list_collections() == []


def test_a_server_lock_is_taken_over_only_once_its_heartbeat_stops(chroma_client, monkeypatch):
    monkeypatch.setattr(lock_module, "HEARTBEAT_S", 0.05)
    monkeypatch.setattr(lock_module, "STALE_S", 0.5)
    live, waiter = ServerLock(chroma_client, "rag-papers-abc"), ServerLock(chroma_client, "rag-papers-abc")
    assert live.try_acquire()
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        assert not waiter.try_acquire()   # its holder beats: never stale
        time.sleep(0.05)
    live.release()
    # what a SIGKILLed holder leaves: the lock, its heartbeat standing still
    chroma_client.create_collection("rag-papers-abc-ingest-lock", embedding_function=None,
                                    metadata={"version": 1, "pid": 99999999, "host": "gone", "beat": 3})
    started = time.monotonic()
    while not waiter.try_acquire():
        assert time.monotonic() - started < 5
        time.sleep(0.05)
    assert time.monotonic() - started >= 0.5
    waiter.release()


def test_a_holder_whose_lock_was_taken_over_does_not_delete_the_new_one(chroma_client, monkeypatch):
    monkeypatch.setattr(lock_module, "HEARTBEAT_S", 60)   # the first holder is paused: no heartbeat
    monkeypatch.setattr(lock_module, "STALE_S", 0.2)
    paused, second = ServerLock(chroma_client, "rag-papers-abc"), ServerLock(chroma_client, "rag-papers-abc")
    assert paused.try_acquire()
    started = time.monotonic()
    while not second.try_acquire():
        assert time.monotonic() - started < 5
        time.sleep(0.05)
    paused.release()
    third = ServerLock(chroma_client, "rag-papers-abc")
    assert not third.try_acquire() and [c.name for c in chroma_client.list_collections()] == \
        ["rag-papers-abc-ingest-lock"]
    second.release()


def test_ingests_through_a_chroma_server_take_turns(tmp_path, small_corpus, monkeypatch):
    with servers.chroma_server(tmp_path / "server") as url:
        settings = Settings.from_env(corpus=small_corpus, chroma_url=url, paper_model="none")
        monkeypatch.setattr(lock_module, "WAIT_S", 0.5)
        with ingest_lock(settings):
            with pytest.raises(StoreError, match=r"another ingest of index .* is still running \(pid"):
                ingest(settings, progress=False)
        assert ingest(settings, progress=False).added == 3
        # SIGTERM stops a holder through its `finally`, so its lock is deleted, not left to go stale
        holder = subprocess.Popen(
            [sys.executable, "-c", "import sys, time; from rag.ingest_lock import ingest_lock\n"
             "from rag.settings import Settings\n"
             "with ingest_lock(Settings.from_env(chroma_url=sys.argv[1])):\n"
             "    print('held', flush=True); time.sleep(120)", url],
            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE)
        try:
            read_until(holder, holder.stdout, b"held", timeout_s=60)
            holder.send_signal(signal.SIGTERM)
            assert holder.wait(timeout=30) == 128 + signal.SIGTERM
        finally:
            holder.kill()
            holder.wait()
            holder.stdout.close()
        with open_store(settings) as store:
            assert [c.name for c in store.client.list_collections()] == [store.name]


def test_the_help_and_readme_give_the_wait(capsys):
    with pytest.raises(SystemExit):
        main(["ingest", "--help"])
    wait = f"(up to {lock_module.WAIT_S / 60:g} min)"
    assert wait in " ".join(capsys.readouterr().out.split())
    assert wait in " ".join((REPO / "README.md").read_text(encoding="utf-8").split())


def test_ctrl_c_stops_a_waiting_ingest_at_once(indexed):
    settings, extra = indexed
    # PYTHONFAULTHANDLER: if it hangs, SIGABRT makes it print every thread's stack, shown in the failure
    env = {**os.environ, "RAG_PAPER_MODEL": "none", "PYTHONPATH": str(REPO), "PYTHONFAULTHANDLER": "1"}
    with ingest_lock(settings):
        proc = subprocess.Popen([sys.executable, "-m", "rag", "ingest", "--quiet", str(extra)],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            read_until(proc, proc.stderr, b"waiting for it to finish")
            proc.send_signal(signal.SIGINT)
            try:
                _, err = proc.communicate(timeout=30)   # seconds, not the 15 min wait; slack for a loaded machine
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGABRT)
                _, err = proc.communicate(timeout=30)
                pytest.fail("the waiting ingest was still running 30 s after SIGINT; where it was:\n"
                            + err.decode(errors="replace")[-6000:])
        finally:
            proc.kill()
            proc.wait()
            proc.stderr.close()   # or a timeout leaves the pipe to be reported unclosed in a later test
    assert proc.returncode == 130 and err.decode().splitlines()[-1] == "rag: interrupted"
    assert "Traceback" not in err.decode()
    assert stored_count(settings) == 3
