"""Offline switches: keep every library from reaching for the network.

Sets environment defaults (a user's own values win) before tiktoken, transformers,
chromadb or gradio are imported. Imported first by the `rag` package.
"""

import importlib.util
import os
from pathlib import Path

OFFLINE_DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "ANONYMIZED_TELEMETRY": "False",
    "GRADIO_ANALYTICS_ENABLED": "False",
    "TRANSFORMERS_VERBOSITY": "error",
}


def bundled_tiktoken_cache() -> Path | None:
    """llama-index ships the cl100k_base and o200k_base BPE files; find them without importing it."""
    try:
        spec = importlib.util.find_spec("llama_index.core")
    except ModuleNotFoundError:
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "_static" / "tiktoken_cache"


def apply() -> None:
    """Set the offline environment defaults; idempotent."""
    for name, value in OFFLINE_DEFAULTS.items():
        os.environ.setdefault(name, value)
    cache = bundled_tiktoken_cache()
    if cache is not None:
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(cache))
