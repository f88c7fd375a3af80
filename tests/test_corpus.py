"""The corpus parser on the real files and on malformed snippets."""

import os

import pytest

from conftest import DATA, HEADER, SMALL_PAPERS, write_corpus
from file_access import as_ordinary_user
from rag.corpus import citation_label, clean_text, extract_urls, paper_id, parse_file, surname, unglue
from rag.errors import CorpusError, UsageError
from rag.library import load_corpus


@pytest.fixture(scope="module")
def corpus():
    return load_corpus([DATA])


def by_first_author(corpus, name):
    return next(p for p in corpus.papers if p.authors[0] == name)


def test_real_corpus_has_80_papers_16_without_category(corpus):
    assert len(corpus.papers) == 80
    assert [f.name for f in corpus.files] == sorted(f.name for f in DATA.glob("*.txt"))
    assert sum(p.category is None for p in corpus.papers) == 16
    assert sum(p.category is None for p in corpus.papers if p.source_file.startswith("002_")) == 11
    assert corpus.duplicates == ()


def test_ids_are_unique_and_derived_from_content(corpus):
    assert len({p.paper_id for p in corpus.papers}) == 80
    haris = by_first_author(corpus, "Themistoklis Haris")
    # A reference value: the same text must give this id on any machine, in any run.
    assert haris.paper_id == "53d51302dfa310d3"
    assert haris.paper_id == paper_id("Themistoklis Haris, Zihan Zhang, Yuichi Yoshida", haris.abstract)


def test_first_paper_fields(corpus):
    haris = corpus.papers[0]
    assert haris.authors == ("Themistoklis Haris", "Zihan Zhang", "Yuichi Yoshida")
    assert haris.authors_truncated is False
    assert haris.category == "Deep Learning · Theory"
    assert haris.label == "Haris et al."
    assert haris.source == "000_2538aeaf5a86fbb2.txt#1"
    assert haris.line == 5
    assert "$35$\\%" in haris.abstract and "approximately 35% and 75% respectively" in haris.text
    assert "*noise stability*" in haris.abstract and "*" not in haris.text


def test_category_is_never_inherited(corpus):
    # In 002, the grokking paper has a category and the paper right after it has none.
    mallinar = by_first_author(corpus, "Neil Mallinar")
    after = corpus.papers[corpus.papers.index(mallinar) + 1]
    assert mallinar.category == "Deep Learning · Theory"
    assert after.authors[0] == "Loek van Rossem" and after.category is None


def test_truncated_author_lists(corpus):
    truncated = [p for p in corpus.papers if p.authors_truncated]
    assert len(truncated) == 9
    assert all(not a.endswith("等") for p in truncated for a in p.authors)
    assert all(p.label.endswith("et al.") for p in truncated)


def test_urls_without_trailing_punctuation(corpus):
    lu = next(p for p in corpus.papers if "yaolu-zjut" in p.abstract)
    assert lu.urls == ("https://github.com/yaolu-zjut/Navigation_LLM_layer_pruning",)
    embodied = next(p for p in corpus.papers if "embodiedbench" in p.abstract)
    assert embodied.urls == ("https://embodiedbench.github.io",)
    assert sum(bool(p.urls) for p in corpus.papers) == 20


def test_cleaned_text_has_no_latex_or_markdown_noise(corpus):
    for paper in corpus.papers:
        assert "$" not in paper.text and "\\" not in paper.text, paper.source
        assert "**" not in paper.text and "{" not in paper.text, paper.source


@pytest.mark.parametrize("raw, cleaned", [
    ("by $35$\\% and $75$\\%", "by 35% and 75%"),
    ("a *noise stability* regularizer", "a noise stability regularizer"),
    ("**In this paper, we argue.** Then", "In this paper, we argue. Then"),
    ("We propose $\\textbf{FAME}$ (Formal)", "We propose FAME (Formal)"),
    ("$VERI{\\large X}+$ and $\\approx 90$", "VERIX+ and ≈ 90"),
    ("rate $28.9\\\\%$ here", "rate 28.9% here"),
    ("a **L**arge **M**odel", "a Large Model"),
    ("na\\\"ive \\textit{(i)} step", "naïve (i) step"),
    ("see [https://x.io](https://x.io).", "see https://x.io."),
    ("models.Recently, at github.com/A.Bc", "models. Recently, at github.com/A.Bc"),
    ("the Retro*-190 benchmark", "the Retro*-190 benchmark"),
    ("``deep thinking''", "\u201cdeep thinking\u201d"),
])
def test_clean_text(raw, cleaned):
    assert clean_text(raw) == cleaned


@pytest.mark.parametrize("word, parted", [
    ("agents.EmbodiedBench", "agents. EmbodiedBench"),
    ("(GRPO).Recently", "(GRPO). Recently"),
    ("github.com/A.Bc", "github.com/A.Bc"),      # a URL or file name stays whole
    ("Fig.A", "Fig.A"), ("x.AI", "x.AI"),       # needs a lower-case letter before and a word after
])
def test_unglue_parts_glued_sentences_for_clean_text_and_the_synthetic_corpus(word, parted):
    from rag.bench.synthetic import split_sentences as raw_sentences

    assert unglue(word) == parted
    assert " ".join(raw_sentences(f"We try {word} now.")) == f"We try {parted} now."


@pytest.mark.parametrize("authors, truncated, label", [
    (("Themistoklis Haris", "Zihan Zhang", "Yuichi Yoshida"), False, "Haris et al."),
    (("Loek van Rossem", "Andrew Saxe"), False, "van Rossem and Saxe"),
    (("Lexing Ying",), False, "Ying"),
    (("Lexing Ying",), True, "Ying et al."),
    (("Hanyang(Jeremy) Chen", "A B"), True, "Chen et al."),
])
def test_citation_label(authors, truncated, label):
    assert citation_label(authors, truncated) == label


def test_surname_keeps_particles():
    assert surname("Loek van Rossem") == "van Rossem"
    assert surname("Cédric Colas") == "Colas"


def test_extract_urls_dedupes():
    assert extract_urls("code at https://a.io/x, and https://a.io/x.") == ("https://a.io/x",)


@pytest.mark.parametrize("content, line, problem", [
    (b"", 1, "file is empty"),
    (b"\n\n  \n", 1, "file is empty"),
    ("Deep Learning · Theory\n\nA B\n\nAn abstract. It has sentences.\n".encode(), 1, "expected the header"),
    (f"{HEADER}\n\nAda Lovelace, Charles Babbage\n".encode(), 3, "no abstract"),
    (f"{HEADER}\n\nAda Lovelace\n\nDeep Learning · Theory\n\nAlan Turing\n\nAbstract. Text.\n".encode(),
     3, "no abstract"),
    (f"{HEADER}\n\nAda Lovelace\n\nGrace Hopper\n\nAbstract. Text.\n".encode(), 3, "no abstract"),
    (f"{HEADER}\n\nAda Lovelace\n\nAn abstract. Text.\n\nDeep Learning · Theory\n".encode(), 7,
     "category line with no authors"),
    (f"{HEADER}\n\nA long sentence that is no list of names. It goes on.\n\nAbstract.\n".encode(), 3,
     "expected an authors line"),
    (f"{HEADER}\n\nAda\n\n".encode() + b"Caf\xe9 abstract.\n", 5, "not UTF-8"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", 3, "binary file"),
    (f"{HEADER}\n".encode(), 1, "not followed by any paper"),
])
def test_malformed_files_give_file_and_line(tmp_path, content, line, problem):
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    with pytest.raises(CorpusError) as caught:
        parse_file(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: ") and problem in message
    assert "\n" not in message


def test_crlf_and_bom_are_accepted(tmp_path):
    good = write_corpus(tmp_path / "a.txt", SMALL_PAPERS)
    crlf = tmp_path / "b.txt"
    crlf.write_bytes(b"\xef\xbb\xbf" + good.read_bytes().replace(b"\n", b"\r\n"))
    assert [p.paper_id for p in parse_file(crlf)] == [p.paper_id for p in parse_file(good)]


def test_small_corpus_fields(small_corpus):
    papers = parse_file(small_corpus)
    assert [p.category for p in papers] == ["Deep Learning · Theory", None, "Reinforcement Learning · Deep RL"]
    assert papers[1].text.endswith("by 40% on business workloads.")
    assert papers[2].authors == ("Cédric Colas", "Alan Turing") and papers[2].authors_truncated
    assert [p.line for p in papers] == [5, 9, 15]


def test_folders_and_files_are_expanded_once(tmp_path, small_corpus):
    (tmp_path / "sub").mkdir()
    other = write_corpus(tmp_path / "sub" / "other.txt", SMALL_PAPERS[:1])
    corpus = load_corpus([tmp_path, small_corpus])
    assert len(corpus.files) == 2
    assert len(corpus.papers) == 3
    assert corpus.duplicates and "repeats" in corpus.duplicates[0]
    assert other in corpus.files


@pytest.mark.parametrize("make, problem", [
    (lambda d: d / "missing.txt", "no such file or folder"),
    (lambda d: (d / "empty-dir").mkdir() or d / "empty-dir", "no corpus files \\(.txt, .bib"),
])
def test_bad_paths_are_usage_errors(tmp_path, make, problem):
    with pytest.raises(UsageError, match=problem):
        load_corpus([make(tmp_path)])


def _corpus_folder(tmp_path):
    """corpus/a.txt and corpus/sub/b.txt, one paper each."""
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    write_corpus(folder / "a.txt", SMALL_PAPERS[:1])
    write_corpus(folder / "sub" / "b.txt", SMALL_PAPERS[1:2])
    return folder


def test_an_unreadable_subfolder_is_an_error_naming_it(tmp_path):
    folder = _corpus_folder(tmp_path)
    (folder / "sub").chmod(0)
    try:
        with as_ordinary_user(), pytest.raises(UsageError) as caught:
            load_corpus([folder])
    finally:
        (folder / "sub").chmod(0o755)
    message = str(caught.value)
    assert message.startswith(f"{folder / 'sub'}: cannot read this folder (permission denied)")
    assert "\n" not in message


@pytest.mark.parametrize("inside", [False, True])
def test_an_unreadable_file_is_an_error_naming_it(tmp_path, inside):
    folder = _corpus_folder(tmp_path)
    locked = folder / "sub" / "b.txt"
    locked.chmod(0)
    try:
        with as_ordinary_user(), pytest.raises(UsageError) as caught:
            load_corpus([folder] if inside else [locked])
    finally:
        locked.chmod(0o644)
    assert str(caught.value).startswith(f"{locked}: cannot read this file (permission denied)")


NOT_REGULAR_FILES = [   # (make a path into it, what the message calls it)
    (lambda p: os.mkfifo(p), "a named pipe (FIFO)"),
    (lambda p: p.symlink_to(p.parent / "gone.txt"), "a broken symbolic link"),
    (lambda p: (p.symlink_to(p.parent / "loop-b.txt"), (p.parent / "loop-b.txt").symlink_to(p)),
     "a symbolic link loop"),
]


@pytest.mark.parametrize("make, kind", NOT_REGULAR_FILES)
def test_a_txt_entry_that_is_no_regular_file_is_skipped_with_a_warning(tmp_path, make, kind):
    folder = _corpus_folder(tmp_path)
    odd = folder / "sub" / "odd.txt"
    make(odd)
    corpus = load_corpus([folder])
    assert len(corpus.papers) == 2
    assert any(w.startswith(f"{odd}: {kind}") and w.endswith("skipped") for w in corpus.skipped), corpus.skipped


def test_a_linked_folder_inside_is_not_followed_and_says_so(tmp_path):
    folder = _corpus_folder(tmp_path)
    (folder / "sub" / "back").symlink_to(folder)   # a loop: walking it would never end
    corpus = load_corpus([folder])
    assert len(corpus.papers) == 2 and len(corpus.files) == 2
    assert corpus.skipped == (f"{folder / 'sub' / 'back'}: a symbolic link to a folder, not followed; "
                              "name its target to include it",)


@pytest.mark.parametrize("make, problem", NOT_REGULAR_FILES)
def test_a_path_named_directly_that_is_no_file_says_what_it_is(tmp_path, make, problem):
    odd = tmp_path / "odd.txt"
    make(odd)
    with pytest.raises(UsageError) as caught:
        load_corpus([odd])
    assert str(caught.value).startswith(f"{odd}: {problem}")
    assert "no such file" not in str(caught.value)
