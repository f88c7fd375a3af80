"""Open the Chroma store: an embedded PersistentClient, or a Chroma server by URL (its path and token kept).

Names the collection from a hash of the settings that shape it, so changing the
embedding model or the chunking opens a new index and never a stale one, and checks
the format version written into the collection. Also the chunk record: the metadata each
stored chunk carries for its paper, the Paper rebuilt from it, and the papers a collection
holds; what goes into a collection and when is rag.ingest's job.
"""

import atexit
import dataclasses
import functools
import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from rag.corpus import BIBLIOGRAPHIC_FIELDS, PARSER_VERSION, Paper, clean_text, name_tokens
from rag.errors import StoreError
from rag.settings import TOKENIZER, Settings
from rag.urls import CHROMA_URL, check_token, check_url, redact_url

INDEX_FORMAT = 1
COLLECTION_PREFIX = "rag-papers-"
READ_PAGE = 5000   # chunks read per Chroma call


def index_shape(settings: Settings) -> dict:
    """The settings that decide what is stored; any change gives a new index."""
    shape = {
        "format": INDEX_FORMAT,
        "parser_version": PARSER_VERSION,
        "embed_model": settings.embed_model,
        "tokenizer": TOKENIZER,   # "cl100k_base": existing indexes record it
        "chunk_size": settings.chunk_size,
        "chunk_overlap": settings.chunk_overlap,
    }
    if settings.namespace:   # only when set, so the default index keeps its name
        shape["namespace"] = settings.namespace
    return shape


def collection_name(settings: Settings) -> str:
    shape = json.dumps(index_shape(settings), sort_keys=True)
    return COLLECTION_PREFIX + hashlib.sha256(shape.encode()).hexdigest()[:12]


@dataclass
class Store:
    """An open Chroma client and where it points."""

    client: object
    location: str
    name: str

    def collection(self, create: bool):
        """The index's collection; None when it does not exist and `create` is False."""
        if not create and not self.exists():
            return None
        collection = self.client.get_or_create_collection(
            self.name, embedding_function=None,
            configuration={"hnsw": {"space": "cosine"}},
            metadata={"rag_format": INDEX_FORMAT})
        found = (collection.metadata or {}).get("rag_format")
        if found != INDEX_FORMAT:
            raise StoreError(f"index {self.name} at {self.location} has format {found}, this rag reads "
                             f"{INDEX_FORMAT}: delete it with `rag ingest --rebuild`")
        return collection

    def exists(self) -> bool:
        return self.name in {c.name for c in self.client.list_collections()}

    def drop(self) -> None:
        if self.exists():
            self.client.delete_collection(self.name)

    def close(self) -> None:
        """Release an embedded client (Chroma shares one system per path, refcounted).

        Server clients stay open for the process: see _server_client."""
        if not self.location.startswith("http"):
            self.client.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def embedded_path(settings: Settings) -> Path:
    """The folder of the embedded store (settings.home/chroma)."""
    return settings.home / "chroma"


def open_store(settings: Settings) -> Store:
    """Connect to the server in settings.chroma_url, or open the embedded store under settings.home."""
    import chromadb

    logging.getLogger("chromadb").setLevel(logging.ERROR)
    name = collection_name(settings)
    if settings.chroma_url:
        address, port, ssl, url_token = parse_chroma_url(settings.chroma_url)
        token = settings.chroma_token or url_token
        where = redact_url(settings.chroma_url)
        try:
            client = _server_client(address, port, ssl, token)
            client.heartbeat()
        except Exception as err:
            raise _server_error(err, where, token) from err
        return Store(client, where, name)
    path = embedded_path(settings)
    try:
        path.mkdir(parents=True, exist_ok=True)
        client = chromadb.PersistentClient(path=str(path), settings=chromadb.Settings(anonymized_telemetry=False))
    except Exception as err:
        raise StoreError(f"cannot open the index at {path} ({_first_line(err)}): "
                         "check the folder's permissions or point RAG_HOME elsewhere") from err
    return Store(client, str(path), name)


@functools.cache
def _server_client(address: str, port: int, ssl: bool, token: str | None):
    """One HttpClient per server (and token) for the whole process, its connections closed at exit.

    chromadb 1.5 never closes a client's httpx session, so a client per call would leak
    sockets. Given a full URL as host, HttpClient keeps its path (a server behind a reverse
    proxy). The token goes in both headers Chroma's token auth reads, whichever the server
    is configured for.
    """
    import chromadb

    headers = {"Authorization": f"Bearer {token}", "X-Chroma-Token": token} if token else None
    client = chromadb.HttpClient(host=address, port=port, ssl=ssl, headers=headers,
                                 settings=chromadb.Settings(anonymized_telemetry=False))
    session = getattr(getattr(client, "_server", None), "_session", None)
    if session is not None:
        atexit.register(session.close)
    return client


def parse_chroma_url(url: str) -> tuple[str, int, bool, str | None]:
    """'http://:tok@127.0.0.1:8000/chroma' -> ('http://127.0.0.1:8000/chroma', 8000, False, 'tok').

    The address keeps the URL's path and leaves out its user-info, whose token (the
    password, else the user name) comes back apart; RAG_CHROMA_TOKEN, when set, wins over it.
    The port defaults to 443 for https and to Chroma's 8000 for http."""
    parts = check_url(url, *CHROMA_URL)
    ssl = parts.scheme == "https"
    port = parts.port or (443 if ssl else 8000)
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    secret = parts.password if parts.password is not None else parts.username
    token = unquote(secret) if secret else None
    if token:
        check_token(token, "the token in the Chroma URL")
    return f"{parts.scheme}://{host}:{port}{parts.path.rstrip('/')}", port, ssl, token


def _server_error(err: Exception, where: str, token: str | None) -> StoreError:
    """What went wrong opening a Chroma server, in one line without credentials."""
    from chromadb.errors import ChromaAuthError

    detail = redact_url(_first_line(err))
    if isinstance(err, ChromaAuthError) or re.search(r"\b(401|403|unauthori[sz]ed|forbidden)\b", detail, re.I):
        if token:
            return StoreError(f"the Chroma server at {where} refused rag's token ({detail}): check "
                              "RAG_CHROMA_TOKEN, or the token in the URL")
        return StoreError(f"the Chroma server at {where} refused rag ({detail}): it needs a token; set "
                          "RAG_CHROMA_TOKEN to it")
    return StoreError(f"cannot reach the Chroma server at {where} ({detail}): start it with "
                      "`chroma run --path DIR --port PORT`, or drop --chroma-url")


def _first_line(err: Exception) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]


def fingerprint(paper: Paper) -> str:
    """Hash of everything stored about a paper: any change means its chunks are rewritten.

    Absent bibliographic fields are left out, so a paper without them hashes as it did before they existed."""
    record = {name: value for name, value in dataclasses.asdict(paper).items()
              if not (name in BIBLIOGRAPHIC_FIELDS and value is None)}
    record = json.dumps(record, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(record.encode()).hexdigest()[:16]


def chunk_metadata(paper: Paper, number: int, n_chunks: int) -> dict:
    """The paper's metadata as carried by each of its chunks (Chroma takes no None values)."""
    meta = {
        "paper_id": paper.paper_id, "chunk": number, "n_chunks": n_chunks,
        "fingerprint": fingerprint(paper), "label": paper.label,
        "authors": list(paper.authors), "authors_truncated": paper.authors_truncated,
        "author_tokens": sorted({t for a in paper.authors for t in name_tokens(a)}),
        "abstract": paper.abstract,
        "source_file": paper.source_file, "position": paper.position, "line": paper.line,
        "source": paper.source,
    }
    if paper.category is not None:
        meta["category"] = paper.category
    if paper.urls:
        meta["urls"] = list(paper.urls)
    if paper.text != clean_text(paper.abstract):   # read from a format other than the bundled one (rag.formats)
        meta["text"] = paper.text
    meta.update({name: getattr(paper, name) for name in BIBLIOGRAPHIC_FIELDS if getattr(paper, name) is not None})
    return meta


def paper_from_metadata(meta: dict) -> Paper:
    """Rebuild the Paper a chunk belongs to from its metadata."""
    return Paper(
        paper_id=meta["paper_id"], authors=tuple(meta["authors"]),
        authors_truncated=bool(meta["authors_truncated"]), category=meta.get("category"),
        abstract=meta["abstract"], text=meta.get("text") or clean_text(meta["abstract"]),
        source_file=meta["source_file"], position=int(meta["position"]), line=int(meta["line"]),
        label=meta["label"], urls=tuple(meta.get("urls") or ()),
        **{name: meta[name] for name in BIBLIOGRAPHIC_FIELDS if name in meta},
    )


def stored_papers(collection) -> list[Paper]:
    """Every paper in the collection, in corpus order."""
    papers = [paper_from_metadata(m) for m in read_all(collection, where={"chunk": 0})]
    return sorted(papers, key=lambda p: (p.source_file, p.position))


def read_all(collection, where=None):
    """Yield every chunk's metadata, a page at a time."""
    offset = 0
    while True:
        page = collection.get(where=where, include=["metadatas"], limit=READ_PAGE, offset=offset)
        yield from page["metadatas"]
        if len(page["ids"]) < READ_PAGE:
            return
        offset += READ_PAGE


def paper_id_of_chunk(chunk_id: str) -> str:
    """'3c004e0ee1985776-2' -> '3c004e0ee1985776': chunk ids are `{paper_id}-{number}`."""
    return chunk_id.rsplit("-", 1)[0]
