"""Search-time embeddings on ONNX Runtime: the same vectors as torch, exported once, and no torch in a search."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import rag.onnx_embedding
from rag.embedding import load_embed_model, load_search_model, model_path
from rag.errors import ModelError, UsageError
from rag.onnx_embedding import exported, onnx_path
from rag.settings import DEFAULT_EMBED_MODEL, Settings

TEXTS = ["what methods reduce reasoning length?", "Grokking.",
         "Test accuracy jumps long after training accuracy saturates, with weight decay. " * 30]   # > 256 pieces


def cosines(a, b) -> np.ndarray:
    return (np.asarray(a) * np.asarray(b)).sum(axis=1)


def test_onnx_vectors_are_the_torch_vectors(derived_cache):
    settings = Settings(derived_cache_dir=derived_cache)
    onnx = load_search_model(settings, DEFAULT_EMBED_MODEL)
    torch = load_embed_model(DEFAULT_EMBED_MODEL)
    assert type(onnx).__name__ == "OnnxEmbedding"
    assert cosines(onnx.get_text_embedding_batch(TEXTS), torch.get_text_embedding_batch(TEXTS)).min() > 0.9999
    one = [onnx.get_query_embedding(t) for t in TEXTS]   # alone, unpadded, as a search embeds a question
    assert cosines(one, torch.get_text_embedding_batch(TEXTS)).min() > 0.9999
    assert np.allclose(np.linalg.norm(one, axis=1), 1.0, atol=1e-5)


def test_the_torch_runtime_is_a_setting(derived_cache, monkeypatch):
    monkeypatch.setenv("RAG_EMBED_RUNTIME", "torch")
    assert type(load_search_model(Settings.from_env(), DEFAULT_EMBED_MODEL)).__name__ == "HuggingFaceEmbedding"
    monkeypatch.setenv("RAG_EMBED_RUNTIME", "gpu")
    with pytest.raises(UsageError, match="embed runtime must be onnx or torch"):
        Settings.from_env()


def test_the_export_is_made_once_and_again_for_a_changed_model(tmp_path, monkeypatch):
    folder = tmp_path / "minilm"
    shutil.copytree(model_path(DEFAULT_EMBED_MODEL), folder)
    said = []
    first = exported(folder, tmp_path / "derived", "minilm", said.append)
    assert first.is_file() and len(said) == 1 and "to ONNX" in said[0]
    assert [p.name for p in first.parent.iterdir()] == [first.name]   # no partial file left behind

    def no_export(*args):
        raise AssertionError("exported again although the model did not change")

    monkeypatch.setattr(rag.onnx_embedding, "_export", no_export)
    assert exported(folder, tmp_path / "derived", "minilm") == first
    os.utime(folder / "model.safetensors", ns=(1, 1))   # the weights replaced in place
    assert onnx_path(folder, tmp_path / "derived") != first
    with pytest.raises(AssertionError, match="exported again"):
        exported(folder, tmp_path / "derived", "minilm")


def test_a_model_not_pooled_by_the_mean_is_refused_saying_what_to_do(tmp_path):
    folder = tmp_path / "cls-model"
    shutil.copytree(model_path(DEFAULT_EMBED_MODEL), folder)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True,
                                                                 "pooling_mode_mean_tokens": False}))
    with pytest.raises(ModelError, match="RAG_EMBED_RUNTIME=torch"):
        exported(folder, tmp_path / "derived", "cls-model")
    assert not (tmp_path / "derived" / "onnx").exists() or not any((tmp_path / "derived" / "onnx").iterdir())


def test_an_export_that_gives_other_vectors_is_not_kept(tmp_path, monkeypatch):
    folder = tmp_path / "minilm"
    shutil.copytree(model_path(DEFAULT_EMBED_MODEL), folder)
    real_export = rag.onnx_embedding._export

    def export_with_other_reference(folder, name, out):
        return -real_export(folder, name, out)   # as if torch's vectors pointed the other way

    monkeypatch.setattr(rag.onnx_embedding, "_export", export_with_other_reference)
    with pytest.raises(ModelError, match="gives other vectors than torch"):
        exported(folder, tmp_path / "derived", "minilm")
    assert not any((tmp_path / "derived" / "onnx").iterdir())


def test_a_search_in_a_new_process_imports_no_torch_nor_llama_index(real_index_home, derived_cache):
    """Once the exports exist, `rag search` embeds the question without torch, transformers or
    sentence-transformers (their imports were most of a new process's start) and searches keywords
    without llama-index (~0.7 s more)."""
    load_search_model(Settings(derived_cache_dir=derived_cache), DEFAULT_EMBED_MODEL)   # exported before
    from rag.paper_model import load_paper_model
    load_paper_model(Settings(derived_cache_dir=derived_cache))
    script = ("import sys; from rag.cli import main; code = main(['search', 'which papers study grokking?', '--json']); "
              "heavy = [m for m in ('torch', 'transformers', 'sentence_transformers', 'llama_index.core') "
              "if m in sys.modules]; "
              "print('HEAVY', heavy, file=sys.stderr); sys.exit(code)")
    env = {**os.environ, "RAG_HOME": str(real_index_home), "RAG_DERIVED_CACHE_DIR": str(derived_cache)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stderr
    assert json.loads(done.stdout)["results"][0]["label"]
