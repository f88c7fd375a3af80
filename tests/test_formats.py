"""Reading lists in BibTeX, RIS, arXiv metadata JSONL and CSV become the same Paper records as the
bundled format: fields, LaTeX, skipped records, malformed files, duplicates, BibTeX out."""

import json
import shutil
from pathlib import Path

import pytest

from conftest import DATA, SMALL_PAPERS, write_corpus
from fakes import opener
from rag.cli import main
from rag.errors import CorpusError, UsageError
from rag.formats import detect_format, person_name, read_papers, split_authors, to_bibtex, to_text
from rag.ingest import ingest
from rag.library import load_corpus
from rag.settings import Settings
from rag.store import chunk_metadata, fingerprint, open_store, paper_from_metadata

FORMATS = Path(__file__).parent / "formats"


def papers_of(name: str, format: str | None = None):
    return read_papers(FORMATS / name, format)


@pytest.mark.parametrize("name, expected", [
    ("library.bib", [
        {"authors": ("Ada Lovelace", "Charles Babbage"), "authors_truncated": False, "label": "Lovelace and Babbage",
         "title": "Grokking in Small Transformers on Modular Arithmetic", "year": 2024,
         "venue": "Journal of Analytical Engines", "doi": "10.1234/JAE.2024.001", "arxiv_id": None,
         "link": "https://doi.org/10.1234/JAE.2024.001", "line": 4},
        {"authors": ("Jörg Müller", "Jan van der Berg"), "authors_truncated": True, "label": "Müller et al.",
         "title": "Sparse α-Entmax Attention for Long Documents", "year": 2023, "venue": "Proceedings of ICML",
         "doi": None, "arxiv_id": "2301.01234", "link": "https://arxiv.org/abs/2301.01234", "line": 14}]),
    ("library.ris", [
        {"authors": ("Grace Hopper", "Claude E. Shannon"), "authors_truncated": False, "label": "Hopper and Shannon",
         "title": "Learning to Route Questions to Experts", "year": 2021, "venue": "Transactions on Routing",
         "doi": "10.5555/route.2021", "arxiv_id": None, "link": "https://example.org/routing", "line": 1}]),
    ("arxiv.jsonl", [
        {"authors": ("Cédric Colas", "Alan Turing", "Claude Shannon"), "authors_truncated": False,
         "label": "Colas et al.", "title": "Language Guidance for Faster Exploration", "year": 2025, "venue": None,
         "doi": None, "arxiv_id": "2501.01234", "link": "https://arxiv.org/abs/2501.01234", "line": 1,
         "category": "cs.LG"},
        {"authors": ("Grisha Perelman",), "label": "Perelman", "year": 2002, "arxiv_id": "math/0211159",
         "link": "https://arxiv.org/abs/math/0211159", "line": 2, "category": "math.DG"},
        {"arxiv_id": "2501.01234", "line": 5}]),
    ("papers.csv", [
        {"authors": ("Jane Smith", "John Doe"), "label": "Smith and Doe", "title": "Attention Budgets for Retrieval",
         "year": 2022, "venue": "Findings", "doi": "10.9999/budgets", "link": "https://doi.org/10.9999/budgets",
         "line": 2, "category": None}]),
])
def test_each_format_gives_papers_with_what_the_record_has(name, expected):
    papers, _ = papers_of(name)
    assert len(papers) == len(expected)
    for paper, fields in zip(papers, expected):
        assert {field: getattr(paper, field) for field in fields} == fields
        assert paper.source_file == name and paper.text and paper.paper_id


@pytest.mark.parametrize("name, warnings", [
    ("library.bib", ["library.bib:25: entry 'knuth1984texbook' has no abstract; skipped",
                     "library.bib:32: entry 'noauthors2022' has no authors; skipped"]),
    ("library.ris", ["library.ris:13: record has no abstract; skipped"]),
    ("arxiv.jsonl", ["arxiv.jsonl:4: record has no abstract; skipped"]),
    ("papers.csv", ["papers.csv:3: row has no abstract; skipped"]),
])
def test_a_record_without_abstract_or_authors_is_skipped_with_a_warning_naming_file_and_line(name, warnings):
    _, found = papers_of(name)
    assert found == [f"{FORMATS}/{warning}" for warning in warnings]


@pytest.mark.parametrize("name, line, problem", [
    ("malformed.bib", 7, "malformed BibTeX entry 'broken2021' (Unexpected block start"),
    ("malformed.jsonl", 2, "not a JSON object (Expecting ',' delimiter"),
    ("no_abstract_column.csv", 1, "no abstract column in the header (title, authors, summary_of_work)"),
    ("unterminated.ris", 1, "this RIS record has no 'ER  -' line"),
    ("no_usable.bib", 1, "no usable bibtex record: each needs authors and an abstract (1 skipped)"),
])
def test_a_malformed_file_is_one_error_naming_file_and_line(name, line, problem):
    with pytest.raises(CorpusError) as caught:
        papers_of(name)
    assert str(caught.value).startswith(f"{FORMATS / name}:{line}: {problem}")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("text, problem", [
    ('title,authors,abstract\n"T","A B","unclosed quote\n', "not valid CSV"),
    ("title,authors,abstract\nT,A B,one,too many\n", "2: 4 fields where the header has 3"),
    ("[1, 2]\n", "1: a JSON list, not an object"),
])
def test_more_malformed_files(tmp_path, text, problem):
    path = tmp_path / ("f.jsonl" if text.startswith("[") else "f.csv")
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CorpusError, match=problem):
        read_papers(path)


@pytest.mark.parametrize("name, first_line, format", [
    ("export.txt", "@article{x,", "bibtex"),
    ("export", "TY  - JOUR", "ris"),
    ("dump.json", '{"id": "2501.01234"}', "jsonl"),
    ("list.tsv.txt", "Title,Author,Abstract Note", "csv"),
    ("data.txt", "论文检索", "corpus"),
    ("notes.txt", "some notes", "corpus"),   # the bundled parser then says what is wrong
    ("refs.bib", "garbage", "bibtex"),       # the name decides when it is a known one
])
def test_format_is_recognised_by_name_and_content(name, first_line, format):
    assert detect_format(Path(name), first_line + "\n") == format


def test_an_unknown_file_is_an_error_that_says_how_to_name_it(tmp_path):
    path = tmp_path / "notes.md"
    path.write_text("# my notes\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="notes.md:1: cannot tell this file's format.*or pass --format"):
        read_papers(path)


def test_format_override_reads_a_file_whatever_its_name(tmp_path):
    path = tmp_path / "export.dat"
    shutil.copy(FORMATS / "papers.csv", path)
    assert [p.title for p in read_papers(path, "csv")[0]] == ["Attention Budgets for Retrieval"]
    with pytest.raises(CorpusError, match="no usable jsonl record|not a JSON object"):
        read_papers(path, "jsonl")
    with pytest.raises(UsageError, match="unknown format 'xml'"):
        read_papers(path, "xml")


@pytest.mark.parametrize("latex, text", [
    (r"gains of $35$\% on \emph{M{\"u}ller}'s set", "gains of 35% on Müller's set"),
    ("a bare 35% is a percent sign, not a comment", "a bare 35% is a percent sign, not a comment"),
    (r"$\alpha$-entmax at $\frac{1}{4}$ memory", "α-entmax at 1/4 memory"),
    ("line\n   broken   title", "line broken title"),
])
def test_latex_becomes_readable_text(latex, text):
    assert to_text(latex) == text


@pytest.mark.parametrize("written, names, truncated", [
    ("Lovelace, Ada and Babbage, Charles", ("Ada Lovelace", "Charles Babbage"), False),
    ("Smith, Jane; Doe, John", ("Jane Smith", "John Doe"), False),
    ("Jane Smith, John Doe and Richard Roe", ("Jane Smith", "John Doe", "Richard Roe"), False),
    ("Jane Smith, John Doe et al.", ("Jane Smith", "John Doe"), True),
    ("Ng, Andrew", ("Andrew Ng",), False),
    ("Smith, J., Doe, K.", ("J. Smith", "K. Doe"), False),
    ([["van der Berg", "Jan", ""], ["Doe", "John", "Jr."]], ("Jan van der Berg", "John Doe Jr."), False),
    (["Hopper, Grace", "others"], ("Grace Hopper",), True),
])
def test_author_lists_as_each_format_writes_them(written, names, truncated):
    assert split_authors(written) == (names, truncated)


def test_person_name_keeps_particles_and_suffixes():
    assert person_name("van der Berg, Jan") == "Jan van der Berg"
    assert person_name("Doe, Jr., J.") == "J. Doe Jr."
    assert person_name(r"M{\"u}ller, J{\"o}rg") == "Jörg Müller"


def test_a_paper_in_two_files_is_read_once_and_keeps_the_first_records_id(tmp_path):
    corpus_file = write_corpus(tmp_path / "small.txt", SMALL_PAPERS)
    bib = shutil.copy(FORMATS / "library.bib", tmp_path / "library.bib")
    bundled = {p.label: p for p in load_corpus([corpus_file]).papers}
    corpus = load_corpus([corpus_file, bib])
    assert len(corpus.papers) == 4   # 3 bundled + 2 BibTeX, of which one is the bundled Lovelace paper
    assert corpus.duplicates == ("library.bib#1 repeats small.txt#1; merged into it",)
    lovelace = corpus.papers[0]
    assert lovelace.paper_id == bundled["Lovelace and Babbage"].paper_id
    assert lovelace.category == "Deep Learning · Theory"   # its own, kept
    assert (lovelace.title, lovelace.year, lovelace.doi) == ("Grokking in Small Transformers on Modular Arithmetic",
                                                             2024, "10.1234/JAE.2024.001")   # from the .bib


def test_the_same_arxiv_id_twice_in_one_dump_is_merged():
    corpus = load_corpus([FORMATS / "arxiv.jsonl"])
    assert [p.arxiv_id for p in corpus.papers] == ["2501.01234", "math/0211159"]
    assert corpus.duplicates == ("arxiv.jsonl#3 repeats arxiv.jsonl#1; merged into it",)


def test_a_title_and_first_author_match_without_doi_or_arxiv_id(tmp_path):
    first = tmp_path / "a.csv"
    first.write_text('title,authors,abstract\n"Deep Nets, Revisited","Ng, Andrew","One abstract."\n', encoding="utf-8")
    second = tmp_path / "b.jsonl"
    second.write_text(json.dumps({"title": "Deep nets revisited", "authors": "Andrew Ng",
                                  "abstract": "Another abstract.", "doi": "10.1/x"}) + "\n", encoding="utf-8")
    other = tmp_path / "c.jsonl"
    other.write_text(json.dumps({"title": "Deep nets revisited", "authors": "Yann LeCun",
                                 "abstract": "A third abstract."}) + "\n", encoding="utf-8")
    corpus = load_corpus([first, second, other])
    assert [p.label for p in corpus.papers] == ["Ng", "LeCun"]
    assert corpus.papers[0].doi == "10.1/x"


def test_a_folder_is_read_in_every_format(tmp_path):
    folder = tmp_path / "reading-list"
    (folder / "sub").mkdir(parents=True)
    for name in ("library.bib", "library.ris", "papers.csv"):
        shutil.copy(FORMATS / name, folder / name)
    shutil.copy(FORMATS / "arxiv.jsonl", folder / "sub" / "arxiv.jsonl")
    (folder / "notes.md").write_text("not a corpus file\n", encoding="utf-8")
    corpus = load_corpus([folder])
    assert sorted(f.name for f in corpus.files) == ["arxiv.jsonl", "library.bib", "library.ris", "papers.csv"]
    assert len(corpus.papers) == 6 and len(corpus.skipped) == 5


def test_bundled_papers_are_stored_as_before():
    paper = load_corpus([DATA]).papers[0]
    meta = chunk_metadata(paper, 0, 1)
    assert not {"title", "year", "venue", "doi", "arxiv_id", "url", "text"} & set(meta)
    assert fingerprint(paper) == "87dc78e7035e0c1e"   # the hash an index built before titles existed holds
    assert paper.reference() == "Haris et al."


@pytest.mark.parametrize("name", ["library.bib", "library.ris", "arxiv.jsonl", "papers.csv"])
def test_chunk_metadata_gives_back_the_same_paper(name):
    for paper in papers_of(name)[0]:
        meta = chunk_metadata(paper, 0, 1)
        assert None not in meta.values()
        assert paper_from_metadata(meta) == paper


def test_reference_names_what_the_paper_has():
    papers = {p.label: p for p in load_corpus([FORMATS / "library.bib", FORMATS / "library.ris"]).papers}
    assert papers["Müller et al."].reference() == ('Müller et al. 2023 · "Sparse α-Entmax Attention for Long '
                                                  'Documents" · https://arxiv.org/abs/2301.01234')
    assert papers["Hopper and Shannon"].bibliography()["url"] == "https://example.org/routing"


def test_bibtex_of_papers_reads_back_with_the_same_fields():
    import bibtexparser

    papers = papers_of("library.bib")[0] + list(load_corpus([DATA]).papers[:1])
    library = bibtexparser.parse_string(to_bibtex(papers))
    assert library.failed_blocks == []
    entries = {e.key: {k: f.value for k, f in e.fields_dict.items()} for e in library.entries}
    assert set(entries) == {"lovelace2024grokking", "muller2023sparse", "haris"}
    assert entries["muller2023sparse"]["author"] == "Jörg Müller and Jan van der Berg and others"
    assert entries["muller2023sparse"]["eprint"] == "2301.01234"
    assert entries["lovelace2024grokking"]["doi"] == "10.1234/JAE.2024.001"
    assert "title" not in entries["haris"]


def settings_for(path) -> Settings:
    return Settings.from_env(corpus=path)


def test_ingest_of_a_reading_list_stores_titles_and_reports_merges(tmp_path, capsys):
    corpus_file = write_corpus(tmp_path / "small.txt", SMALL_PAPERS)
    files = [str(corpus_file)] + [str(FORMATS / n) for n in ("library.bib", "library.ris", "arxiv.jsonl", "papers.csv")]
    assert main(["ingest", "--quiet", "--json", *files]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert (report["papers"], report["merged"]) == (8, 2)
    assert "rag: warning: " + f"{FORMATS / 'library.bib'}:25: entry 'knuth1984texbook' has no abstract; skipped" in err
    with open_store(settings_for(corpus_file)) as store:
        found = store.collection(create=False).get(where={"chunk": 0}, include=["metadatas", "documents"])
    by_label = {m["label"]: (m, d) for m, d in zip(found["metadatas"], found["documents"])}
    meta, document = by_label["Colas et al."]
    assert meta["title"] == "Language Guidance for Faster Exploration" and meta["arxiv_id"] == "2501.01234"
    assert document.startswith("Language Guidance for Faster Exploration\n\nAgents that learn")
    meta, document = by_label["Hopper"]   # a bundled paper: no title, nothing new stored
    assert "title" not in meta and document.startswith("We present a compiler")


def test_a_malformed_file_among_good_ones_writes_nothing(tmp_path, capsys):
    corpus_file = write_corpus(tmp_path / "small.txt", SMALL_PAPERS)
    before = ingest(settings_for(corpus_file), progress=False)
    assert main(["ingest", "--quiet", str(corpus_file), str(FORMATS / "library.bib"),
                 str(FORMATS / "malformed.jsonl")]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"rag: error: {FORMATS / 'malformed.jsonl'}:2: not a JSON object (Expecting ',' delimiter, column 76): "
        "a JSONL file has one object per line"]
    with open_store(settings_for(corpus_file)) as store:
        assert store.collection(create=False).count() == before.chunks


@pytest.fixture
def reading_list_index(tmp_path, monkeypatch):
    """An index of the fixture reading lists, and the scripted fake model that answers over it."""
    from fakes import ScriptedModel

    files = [FORMATS / n for n in ("library.bib", "library.ris", "arxiv.jsonl", "papers.csv")]
    ingest(Settings.from_env(), paths=files, progress=False)
    return ScriptedModel()


QUESTION = "how does routing questions to experts change the cost of answering?"
CLAIM = "Routing cuts the cost of answering by half at equal accuracy."


def test_ask_cites_the_title_year_and_link_and_gives_bibtex(reading_list_index, capsys):
    from fakes import reply

    reading_list_index.enqueue(reply((CLAIM, [1])))
    assert main(["ask", "--cite", "bibtex", QUESTION], open_model=opener(reading_list_index)) == 0
    out = capsys.readouterr().out
    assert ('References:\n[1] Hopper and Shannon 2021 · "Learning to Route Questions to Experts" · '
            "https://example.org/routing · no category · score") in out
    bibtex = out[out.index("@article{hopper2021learning,"):]
    assert "title = {Learning to Route Questions to Experts}" in bibtex and "doi = {10.5555/route.2021}" in bibtex


def test_ask_json_citations_carry_the_bibliographic_fields(reading_list_index, capsys):
    from fakes import reply

    reading_list_index.enqueue(reply((CLAIM, [1])))
    assert main(["ask", "--json", "--cite", "bibtex", QUESTION], open_model=opener(reading_list_index)) == 0
    data = json.loads(capsys.readouterr().out)
    citation = data["citations"][0]
    assert {k: citation[k] for k in ("label", "title", "year", "venue", "doi", "arxiv_id", "url")} == {
        "label": "Hopper and Shannon", "title": "Learning to Route Questions to Experts", "year": 2021,
        "venue": "Transactions on Routing", "doi": "10.5555/route.2021", "arxiv_id": None,
        "url": "https://example.org/routing"}
    assert {"paper_id", "authors", "category", "source", "score"} <= set(citation)   # none removed
    assert data["bibtex"].startswith("@article{hopper2021learning,")
    assert data["sources"][0]["title"] == "Learning to Route Questions to Experts"


def test_the_sources_panel_shows_title_year_and_a_safe_link():
    from dataclasses import replace

    from rag.retrieve import Hit
    from rag.ui import render

    hopper = papers_of("library.ris")[0][0]
    bundled = load_corpus([DATA]).papers[0]
    hostile = replace(hopper, title='<b>Bold</b> "title"', url="javascript:alert(1)", doi=None)
    html = render.render_turn_sources(1, hits=[Hit(1, hopper, 0.9, "chunk"), Hit(2, bundled, 0.8, "chunk"),
                                               Hit(3, hostile, 0.7, "chunk")])
    assert ('<strong>Hopper and Shannon 2021</strong> · <span class="rag-title">“Learning to Route Questions to '
            'Experts”</span>') in html
    assert '<a class="rag-link" href="https://example.org/routing" target="_blank"' in html
    assert "<strong>Haris et al.</strong> <span" in html   # the bundled paper as before: no year, title or link
    assert "&lt;b&gt;Bold&lt;/b&gt; &quot;title&quot;" in html and "javascript:" not in html


def test_a_title_merged_in_later_is_embedded_with_the_paper(tmp_path):
    corpus_file = write_corpus(tmp_path / "small.txt", SMALL_PAPERS)
    settings = settings_for(corpus_file)
    ingest(settings, progress=False)
    report = ingest(settings, paths=[corpus_file, FORMATS / "library.bib"], progress=False)
    assert (report.added, report.removed, report.merged) == (2, 0, 1)   # Müller et al., and Lovelace re-chunked
    with open_store(settings) as store:
        found = store.collection(create=False).get(where={"chunk": 0}, include=["metadatas", "documents"])
    lovelace = next(d for m, d in zip(found["metadatas"], found["documents"]) if m["label"] == "Lovelace and Babbage")
    assert lovelace.startswith("Grokking in Small Transformers on Modular Arithmetic\n\nWe study grokking")
    again = ingest(settings, paths=[corpus_file, FORMATS / "library.bib"], progress=False)
    assert (again.added, again.updated, again.unchanged) == (0, 0, 4)
