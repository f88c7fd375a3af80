"""Open the Chroma store: an embedded PersistentClient, or a Chroma server by URL.

Names the collection from a hash of the settings that shape it, so changing the
embedding model or the chunking opens a new index and never a stale one, and checks
the format version written into the collection. Knows nothing of papers or chunks.
"""

import atexit
import functools
import hashlib
import json
import logging
from dataclasses import dataclass
from urllib.parse import urlparse

from rag.corpus import PARSER_VERSION
from rag.errors import StoreError, UsageError
from rag.settings import Settings

INDEX_FORMAT = 1
COLLECTION_PREFIX = "rag-papers-"


def index_shape(settings: Settings) -> dict:
    """The settings that decide what is stored; any change gives a new index."""
    shape = {
        "format": INDEX_FORMAT,
        "parser_version": PARSER_VERSION,
        "embed_model": settings.embed_model,
        "tokenizer": "cl100k_base",
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


def open_store(settings: Settings) -> Store:
    """Connect to the server in settings.chroma_url, or open the embedded store under settings.home."""
    import chromadb

    logging.getLogger("chromadb").setLevel(logging.ERROR)
    name = collection_name(settings)
    if settings.chroma_url:
        host, port, ssl = parse_chroma_url(settings.chroma_url)
        try:
            client = _server_client(host, port, ssl)
            client.heartbeat()
        except Exception as err:
            raise StoreError(f"cannot reach the Chroma server at {settings.chroma_url} ({_first_line(err)}): "
                             "start it with `chroma run --path DIR --port PORT`, or drop --chroma-url") from err
        return Store(client, settings.chroma_url, name)
    path = settings.home / "chroma"
    try:
        path.mkdir(parents=True, exist_ok=True)
        client = chromadb.PersistentClient(path=str(path), settings=chromadb.Settings(anonymized_telemetry=False))
    except Exception as err:
        raise StoreError(f"cannot open the index at {path} ({_first_line(err)}): "
                         "check the folder's permissions or point RAG_HOME elsewhere") from err
    return Store(client, str(path), name)


@functools.cache
def _server_client(host: str, port: int, ssl: bool):
    """One HttpClient per server for the whole process, its connections closed at exit.

    chromadb 1.5 shares one system per server among its clients and never closes the
    underlying httpx session, so a client per call would leak sockets.
    """
    import chromadb

    client = chromadb.HttpClient(host=host, port=port, ssl=ssl,
                                 settings=chromadb.Settings(anonymized_telemetry=False))
    session = getattr(getattr(client, "_server", None), "_session", None)
    if session is not None:
        atexit.register(session.close)
    return client


def parse_chroma_url(url: str) -> tuple[str, int, bool]:
    """'http://127.0.0.1:8000' -> ('127.0.0.1', 8000, False)."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise UsageError(f"bad Chroma URL {url!r}: write it as http://HOST:PORT")
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 8000)
    except ValueError:
        raise UsageError(f"bad port in Chroma URL {url!r}: write it as http://HOST:PORT") from None
    return parsed.hostname, port, parsed.scheme == "https"


def _first_line(err: Exception) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]
