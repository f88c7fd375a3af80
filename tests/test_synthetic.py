"""The synthetic corpus: deterministic, parseable, n distinct papers made of real pieces."""

import re

import pytest

from conftest import DATA
from rag.bench.synthetic import name_pools, sentence_pool, split_sentences, write_synthetic_corpus
from rag.library import load_corpus

NAME = re.compile(r"[^\W\d_][\w'’-]*( [^\W\d_][\w'’-]*)+")


@pytest.fixture(scope="module")
def source():
    return list(load_corpus([DATA]).papers)


def test_same_seed_gives_byte_identical_files(tmp_path, source):
    first = write_synthetic_corpus(source, 300, tmp_path / "a", seed=7, papers_per_file=100)
    second = write_synthetic_corpus(source, 300, tmp_path / "b", seed=7, papers_per_file=100)
    other = write_synthetic_corpus(source, 300, tmp_path / "c", seed=8, papers_per_file=100)
    assert [p.name for p in first] == [p.name for p in second] == ["syn_00000.txt", "syn_00001.txt", "syn_00002.txt"]
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]
    assert [p.read_bytes() for p in first] != [p.read_bytes() for p in other]


def test_the_parser_reads_exactly_n_distinct_papers(tmp_path, source):
    files = write_synthetic_corpus(source, 1234, tmp_path, papers_per_file=500)
    corpus = load_corpus([tmp_path])
    assert len(files) == 3 and len(corpus.files) == 3
    assert len(corpus.papers) == 1234 and corpus.duplicates == ()
    assert len({p.abstract for p in corpus.papers}) == 1234
    assert [sum(p.source_file == f.name for p in corpus.papers) for f in files] == [500, 500, 234]


def test_abstracts_recombine_4_to_9_real_sentences(tmp_path, source):
    write_synthetic_corpus(source, 300, tmp_path)
    pool = set(sentence_pool(source))
    for paper in load_corpus([tmp_path]).papers:
        sentences = split_sentences(paper.abstract)
        assert 4 <= len(sentences) <= 9
        assert set(sentences) <= pool


def test_authors_are_real_first_names_and_surnames_recombined(tmp_path, source):
    write_synthetic_corpus(source, 500, tmp_path)
    first_names, surnames = map(set, name_pools(source))
    counts = set()
    for paper in load_corpus([tmp_path]).papers:
        assert 1 <= len(paper.authors) <= 8 and len(set(paper.authors)) == len(paper.authors)
        counts.add(len(paper.authors))
        for name in paper.authors:
            assert NAME.fullmatch(name), name
            first, family = name.split(" ", 1)
            assert first in first_names and family in surnames
    assert counts == set(range(1, 9))


def test_categories_come_from_the_source_and_some_papers_have_none(tmp_path, source):
    write_synthetic_corpus(source, 2000, tmp_path)
    papers = load_corpus([tmp_path]).papers
    real = {p.category for p in source}
    assert {p.category for p in papers} <= real
    assert len({p.category for p in papers}) == len(real)
    source_share = sum(p.category is None for p in source) / len(source)
    share = sum(p.category is None for p in papers) / len(papers)
    assert abs(share - source_share) < 0.05


def test_a_rerun_with_fewer_papers_leaves_no_stale_files(tmp_path, source):
    write_synthetic_corpus(source, 250, tmp_path, papers_per_file=100)
    write_synthetic_corpus(source, 50, tmp_path, papers_per_file=100)
    assert len(load_corpus([tmp_path]).papers) == 50


@pytest.mark.parametrize("abstract, sentences", [
    ("We train a model. It works.", ["We train a model.", "It works."]),
    ("As shown by Guez et al. (2019), agents plan. We agree.", ["As shown by Guez et al. (2019), agents plan.", "We agree."]),
    ("Accuracy rises by 0.5 points. Loss falls to 1.25.", ["Accuracy rises by 0.5 points.", "Loss falls to 1.25."]),
    ("Some tasks (e.g. Sokoban) need plans. GFPO beats Dr. GRPO here.",
     ["Some tasks (e.g. Sokoban) need plans.", "GFPO beats Dr. GRPO here."]),
    ("We fix the gap.EmbodiedBench has tasks. See https://x.org/A.Bc now", ["We fix the gap.", "EmbodiedBench has tasks.",
                                                                           "See https://x.org/A.Bc now."]),
    ("It is fast. rStar-Math is small.", ["It is fast.", "rStar-Math is small."]),
])
def test_sentence_splitting(abstract, sentences):
    assert split_sentences(abstract) == sentences


def test_arxiv_format_holds_the_same_papers_with_ids_and_titles(tmp_path, source):
    write_synthetic_corpus(source, 300, tmp_path / "txt", seed=3, papers_per_file=100)
    files = write_synthetic_corpus(source, 300, tmp_path / "arxiv", seed=3, papers_per_file=100, format="arxiv")
    assert [f.name for f in files] == ["syn_00000.jsonl", "syn_00001.jsonl", "syn_00002.jsonl"]
    bundled, arxiv = load_corpus([tmp_path / "txt"]), load_corpus([tmp_path / "arxiv"])
    assert arxiv.duplicates == () and arxiv.skipped == () and len(arxiv.papers) == 300
    assert [(p.authors, p.abstract, p.category) for p in arxiv.papers] == \
        [(p.authors, p.abstract, p.category) for p in bundled.papers]
    assert len({p.arxiv_id for p in arxiv.papers}) == len({p.title for p in arxiv.papers}) == 300
    assert all(p.year == 2025 and p.link == f"https://arxiv.org/abs/{p.arxiv_id}" for p in arxiv.papers)
