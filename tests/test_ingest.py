"""Ingest keeps the Chroma collection in step with the corpus: idempotent, edits, removals, crashes."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import DATA, SMALL_PAPERS, write_corpus
from file_access import as_ordinary_user
from rag.cli import main
from rag.errors import CorpusError, StoreError
from rag.ingest import _stored_papers, ingest
from rag.settings import Settings, token_encoding
from rag.store import collection_name, index_shape, open_store


def settings_for(corpus, **overrides) -> Settings:
    return Settings.from_env(corpus=corpus, **overrides)


def chunk_metadatas(settings):
    with open_store(settings) as store:
        return store.collection(create=False).get(include=["metadatas"])["metadatas"]


def test_reingest_is_idempotent(small_corpus):
    settings = settings_for(small_corpus)
    first = ingest(settings, progress=False)
    second = ingest(settings, progress=False)
    assert (first.added, first.unchanged) == (3, 0)
    assert (second.added, second.updated, second.removed, second.unchanged) == (0, 0, 0, 3)
    assert second.chunks == first.chunks == len(chunk_metadatas(settings))


def test_every_chunk_carries_its_papers_metadata(small_corpus):
    settings = settings_for(small_corpus)
    ingest(settings, progress=False)
    metadatas = chunk_metadatas(settings)
    for meta in metadatas:
        assert {"paper_id", "label", "authors", "authors_truncated", "abstract", "source", "n_chunks"} <= set(meta)
    categories = {m["label"]: m.get("category") for m in metadatas}
    assert categories == {"Lovelace and Babbage": "Deep Learning · Theory", "Hopper": None,
                          "Colas et al.": "Reinforcement Learning · Deep RL"}


def test_edited_abstract_replaces_its_chunks(tmp_path, small_corpus):
    settings = settings_for(small_corpus)
    ingest(settings, progress=False)
    old_ids = {m["paper_id"] for m in chunk_metadatas(settings)}
    edited = list(SMALL_PAPERS)
    edited[1] = (None, "Grace Hopper", "We present a linker for COBOL programs. It halves build times.")
    write_corpus(small_corpus, edited)
    report = ingest(settings, progress=False)
    assert (report.added, report.removed, report.unchanged) == (1, 1, 2)
    metadatas = chunk_metadatas(settings)
    assert len({m["paper_id"] for m in metadatas}) == 3 and {m["paper_id"] for m in metadatas} != old_ids
    hopper = [m for m in metadatas if m["label"] == "Hopper"]
    assert hopper and all("COBOL" in m["abstract"] for m in hopper)


def test_changed_category_updates_in_place(small_corpus):
    settings = settings_for(small_corpus)
    ingest(settings, progress=False)
    recategorised = list(SMALL_PAPERS)
    recategorised[1] = ("Theory · Learning Theory",) + SMALL_PAPERS[1][1:]
    write_corpus(small_corpus, recategorised)
    report = ingest(settings, progress=False)
    # Hopper's category changed; Colas's line number moved with it. Neither is re-embedded.
    assert (report.added, report.updated, report.unchanged) == (0, 2, 1)
    assert {m.get("category") for m in chunk_metadatas(settings) if m["label"] == "Hopper"} == \
        {"Theory · Learning Theory"}


def test_removed_paper_is_removed(small_corpus):
    settings = settings_for(small_corpus)
    ingest(settings, progress=False)
    write_corpus(small_corpus, SMALL_PAPERS[:2])
    report = ingest(settings, progress=False)
    assert (report.removed, report.papers) == (1, 2)
    assert {m["label"] for m in chunk_metadatas(settings)} == {"Lovelace and Babbage", "Hopper"}


def test_bad_file_writes_nothing(tmp_path, small_corpus):
    settings = settings_for(small_corpus)
    before = ingest(settings, progress=False)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(CorpusError, match="bad.txt:1: not UTF-8"):
        ingest(settings, paths=[small_corpus, bad], progress=False)
    assert len(chunk_metadatas(settings)) == before.chunks


def test_bad_file_on_first_ingest_creates_no_index(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("no header here\n", encoding="utf-8")
    settings = settings_for(bad)
    with pytest.raises(CorpusError):
        ingest(settings, progress=False)
    assert not open_store(settings).exists()


def test_more_paths_are_merged(tmp_path, small_corpus):
    (tmp_path / "extra").mkdir()
    write_corpus(tmp_path / "extra" / "more.txt", [(None, "Edsger Dijkstra",
                 "Shortest paths in graphs with non-negative weights. A greedy method suffices.")])
    report = ingest(settings_for(small_corpus), paths=[small_corpus, tmp_path / "extra"], progress=False)
    assert report.papers == 4


def test_index_name_follows_the_settings_that_shape_it(tmp_path):
    base = Settings(home=tmp_path)
    assert collection_name(base) == collection_name(Settings(home=tmp_path / "x", top_k=9))
    assert collection_name(base) != collection_name(Settings(home=tmp_path, chunk_size=128))
    assert collection_name(base) != collection_name(Settings(home=tmp_path, chunk_overlap=0))
    assert re.fullmatch(r"[a-zA-Z0-9._-]{3,512}", collection_name(base))


def test_the_index_records_the_tokenizer_its_chunks_are_counted_in(tmp_path):
    # existing indexes are named after this value: it must stay "cl100k_base"
    assert index_shape(Settings(home=tmp_path))["tokenizer"] == "cl100k_base" == token_encoding().name


def test_an_index_of_another_format_is_refused(small_corpus):
    settings = settings_for(small_corpus)
    ingest(settings, progress=False)
    collection = open_store(settings).collection(create=False)
    collection.modify(metadata={**collection.metadata, "rag_format": 999})
    with pytest.raises(StoreError, match="--rebuild"):
        ingest(settings, progress=False)
    assert ingest(settings, progress=False, rebuild=True).added == 3


def test_sigkill_halfway_is_repaired_by_the_next_ingest(tmp_path, isolated_home):
    """Kill an ingest of the real corpus mid-way: papers are whole or absent, the next run repairs."""
    # an empty embedding cache of its own: with the session's cache warm, the ingest would end before the kill
    env = {**os.environ, "RAG_HOME": str(isolated_home), "RAG_CORPUS": str(DATA),
           "RAG_DERIVED_CACHE_DIR": str(tmp_path / "cold-cache"), "RAG_PAPER_MODEL": "none"}
    proc = subprocess.Popen([sys.executable, "-m", "rag", "ingest"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        seen = b""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            seen += os.read(proc.stderr.fileno(), 4096)
            done = [int(n) for n in re.findall(rb"Embedding:\s+\d+%\|[^|]*\|\s*(\d+)/80", seen)]
            if done and 16 <= max(done) < 72:
                break
            assert proc.poll() is None, seen.decode(errors="replace")[-500:]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    settings = Settings.from_env(corpus=DATA)
    collection = open_store(settings).collection(create=False)
    stored = _stored_papers(collection)
    assert 0 < len(stored) < 80
    assert all(s.found_chunks == s.n_chunks for s in stored.values())  # never half a paper
    report = ingest(settings, progress=False)
    assert report.added == 80 - len(stored) and report.unchanged == len(stored)
    ids = collection.get()["ids"]
    assert len(ids) == len(set(ids)) == report.chunks
    assert all(s.found_chunks == s.n_chunks for s in _stored_papers(collection).values())


def test_an_unreadable_subfolder_stops_the_ingest_before_anything_is_removed(tmp_path, capsys):
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    write_corpus(folder / "a.txt", SMALL_PAPERS[:1])
    write_corpus(folder / "sub" / "b.txt", SMALL_PAPERS[1:])
    settings = settings_for(folder)
    assert ingest(settings, progress=False).papers == 3
    locked_file = write_corpus(tmp_path / "locked.txt", SMALL_PAPERS[:1])
    locked_file.chmod(0)
    (folder / "sub").chmod(0)
    try:
        with as_ordinary_user():
            codes = main(["ingest", "--quiet", str(folder)]), main(["ingest", "--quiet", str(locked_file)])
    finally:
        (folder / "sub").chmod(0o755)
    assert {m["label"] for m in chunk_metadatas(settings)} == {"Lovelace and Babbage", "Hopper", "Colas et al."}
    assert codes == (2, 2)
    assert capsys.readouterr().err.splitlines() == [
        f"rag: error: {folder / 'sub'}: cannot read this folder (permission denied): fix its permissions or "
        "move it out of the corpus paths",
        f"rag: error: {locked_file}: cannot read this file (permission denied): fix its permissions or "
        "move it out of the corpus paths"]


def test_a_fifo_in_a_corpus_folder_is_skipped_with_a_warning(tmp_path, capsys):
    folder = tmp_path / "corpus"
    folder.mkdir()
    write_corpus(folder / "a.txt", SMALL_PAPERS)
    os.mkfifo(folder / "pipe.txt")
    assert main(["ingest", "--quiet", str(folder)]) == 0
    out, err = capsys.readouterr()
    assert "Indexed 3 papers" in out
    assert err.splitlines() == [f"rag: warning: {folder / 'pipe.txt'}: a named pipe (FIFO), not a corpus file; "
                                "skipped"]
