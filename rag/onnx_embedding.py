"""Embeddings on ONNX Runtime: the torch models' vectors without importing torch.

A search embeds one question with each embedding model, and an answer a few claims and
sentences. On torch that first needs torch, transformers and sentence-transformers imported
(~4.5 s of a new process's start on 2 cores); ONNX Runtime and tokenizers (both already
installed with chromadb) import in ~0.1 s and embed a question with the chunk model in about half
the time, and abstracts with the paper model ~1.3x faster. The chunk model's ingest batches stay on
torch, which measured faster there (docs/benchmarks.md).

Each model is exported to ONNX once, by torch.onnx from its own weights (the `onnx` package
writes the file), into derived_cache_dir/onnx/<model key>.onnx, named by the model folder's
files so a replaced model is exported again. The export is checked against the torch model's
vectors on a few texts before it is renamed into place; a model whose pooling is not the mean
of its tokens is refused (set RAG_EMBED_RUNTIME=torch for it). This module makes and runs the
ONNX models; embedding.py chooses which runtime serves a caller.
"""

import contextlib
import json
import os
import warnings
from pathlib import Path

import numpy as np

from rag.embed_cache import model_key
from rag.errors import ModelError

OPSET = 17
CHECK_TEXTS = ("what methods reduce reasoning length?",
               "Large language models often produce long chains of thought; we train them to stop early. " * 12)
MIN_CHECK_COSINE = 0.9999   # the exported model's vectors against torch's, text by text
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def onnx_path(folder: Path, derived_cache_dir: Path) -> Path:
    """Where the ONNX export of the sentence-transformers model in `folder` is kept."""
    return Path(derived_cache_dir) / "onnx" / f"{model_key(str(folder))}.onnx"


def max_length(folder: Path) -> int:
    """The most word pieces the model reads (sentence-transformers' max_seq_length)."""
    config = folder / "sentence_bert_config.json"
    if config.is_file():
        return int(json.loads(config.read_text())["max_seq_length"])
    return int(json.loads((folder / "tokenizer_config.json").read_text()).get("model_max_length", 512))


def check_mean_pooling(folder: Path) -> None:
    """The ONNX path pools by the mean of the tokens, as the bundled models do; refuse any other model."""
    configs = list(folder.glob("*_Pooling/config.json"))
    if configs and not json.loads(configs[0].read_text()).get("pooling_mode_mean_tokens"):
        raise ModelError(f"the embedding model in {folder} does not pool by the mean of its tokens, which the ONNX "
                         "runtime assumes: set RAG_EMBED_RUNTIME=torch")


def exported(folder: Path, derived_cache_dir: Path, name: str, notify=lambda message: None) -> Path:
    """The checked ONNX file of the model `name` in `folder`, exported now if it is not there yet."""
    target = onnx_path(folder, derived_cache_dir)
    if target.is_file():
        return target
    check_mean_pooling(folder)
    notify(f"Exporting the embedding model {name} to ONNX Runtime's format (once).")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.partial.{os.getpid()}")
    try:
        reference = _export(folder, name, partial)
        got = OnnxEmbedding(folder, partial).embed(list(CHECK_TEXTS))
        worst = float(min((got * reference).sum(axis=1)))
        if worst < MIN_CHECK_COSINE:
            raise ModelError(f"the ONNX export of {name} gives other vectors than torch (cosine {worst:.5f}): "
                             "set RAG_EMBED_RUNTIME=torch")
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def _export(folder: Path, name: str, out: Path) -> np.ndarray:
    """Write the model's token vectors as an ONNX graph to `out`; returns torch's sentence vectors of CHECK_TEXTS.

    Attention is exported as plain operations (eager), which ONNX Runtime runs ~1.5x faster on
    batches than the graph traced from torch's fused attention."""
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu", model_kwargs={"attn_implementation": "eager"})
    transformer = model[0].auto_model.eval()
    features = model.preprocess(list(CHECK_TEXTS))
    names = [input_name for input_name in INPUTS if input_name in features]

    class TokenVectors(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = transformer

        def forward(self, *tensors):
            return self.transformer(**dict(zip(names, tensors))).last_hidden_state

    axes = {name: {0: "batch", 1: "tokens"} for name in [*names, "token_vectors"]}
    with warnings.catch_warnings(), torch.no_grad(), contextlib.redirect_stdout(None):
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(TokenVectors(), tuple(features[n] for n in names), str(out), input_names=names,
                              output_names=["token_vectors"], dynamic_axes=axes, opset_version=OPSET, dynamo=False)
        except Exception as err:   # an unexportable architecture, or the onnx package missing
            raise ModelError(f"cannot export {name} to ONNX ({type(err).__name__}: {err}): "
                             "set RAG_EMBED_RUNTIME=torch") from err
    return model.encode(list(CHECK_TEXTS), normalize_embeddings=True)


class OnnxEmbedding:
    """An embedding model run by ONNX Runtime: mean of the token vectors, normalised. It answers the
    calls rag makes of llama-index's embedding models (torch's HuggingFaceEmbedding), so either runtime
    serves the same callers, without being one: a search then imports no llama-index."""

    def __init__(self, folder: Path, onnx_file: Path, threads: int = 0, embed_batch_size: int = 32):
        import onnxruntime
        from tokenizers import Tokenizer

        self.embed_batch_size = embed_batch_size
        options = onnxruntime.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self._session = onnxruntime.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
        self._inputs = [i.name for i in self._session.get_inputs()]
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length(folder))
        self._tokenizer.enable_padding()

    def embed(self, texts: list[str]) -> np.ndarray:
        """One normalised vector per text (a row each)."""
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        tokens = self._session.run(None, {name: feed[name] for name in self._inputs})[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (tokens * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)

    def get_query_embedding(self, query: str) -> list[float]:
        return self.embed([query])[0].tolist()

    def get_text_embedding(self, text: str) -> list[float]:
        return self.embed([text])[0].tolist()

    def get_text_embedding_batch(self, texts: list[str]) -> list[list[float]]:
        """The texts' vectors, embedded embed_batch_size at a time."""
        return [vector for start in range(0, len(texts), self.embed_batch_size)
                for vector in self.embed(texts[start:start + self.embed_batch_size]).tolist()]
