"""Hugging Face (`transformers`) image classifiers as their users have them: built from small configs with
random weights (no downloads), run through idcgen's commands as a user would (a factory file), docs/models.md
("Hugging Face and timm models"). Skipped where transformers is not installed."""

import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="transformers is not installed: pip install transformers")

from typer.testing import CliRunner  # noqa: E402

from idcgen.cli import app  # noqa: E402
from idcgen.framework import as_network  # noqa: E402

FACTORIES = """
import torch
import transformers as T


def _done(model):
    model.input_shape = (32, 32, 3)
    return model.eval()


def _tokens(config, **extra):
    torch.manual_seed(0)
    return config(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=64, num_labels=10, **extra)


def vit():
    return _done(T.ViTForImageClassification(_tokens(T.ViTConfig)))


def deit():
    return _done(T.DeiTForImageClassification(_tokens(T.DeiTConfig)))


def beit():
    return _done(T.BeitForImageClassification(_tokens(T.BeitConfig, use_mean_pooling=True)))
"""


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "hf_models.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("hf_models", None)
    import hf_models

    rng = np.random.default_rng(0)
    np.savez("train.npz", x=rng.integers(0, 256, (40, 32, 32, 3), dtype=np.uint8), y=np.arange(40) % 10)
    np.savez("test.npz", x=rng.integers(0, 256, (20, 32, 32, 3), dtype=np.uint8), y=np.arange(20) % 10)
    return hf_models


def idcgen(*args):
    done = CliRunner().invoke(app, [str(a) for a in args])
    assert done.exit_code == 0, done.output
    return done.output


def test_a_class_token_expanded_to_the_batch_is_no_layer(factories):
    """ViT's class token is expanded to the batch size: its value does not depend on the images (only their
    number), so it is no layer; `inspect`, which refuses constant layers, runs on HF ViT."""
    network = as_network(factories.vit())
    assert not [name for name in network.layer_names() if name.endswith("expand")]
    assert "vit.embeddings.cat" in network.subject_layers()
    out = idcgen("inspect", "--model", "hf_models:vit", "--inputs", "test.npz", "--out", "inspect")
    assert "error" not in out


def test_convert_of_a_hugging_face_classifier_keeps_its_layers_and_its_analysis(factories):
    """`convert` of a classifier returning a ModelOutput writes a program returning its logits with the
    model's own layer and weight names, so an analysis made on the factory is used on the .pt2."""
    idcgen("convert", "hf_models:vit", "vit.pt2")
    from idcgen.framework import load_network

    program, module = load_network("vit.pt2"), as_network(factories.vit())
    assert program.layer_names() == module.layer_names()
    assert program.fingerprint() == module.fingerprint()
    idcgen("analyze", "--model", "hf_models:vit", "--train", "train.npz", "--m", 3, "--out", "an")
    idcgen("coverage", "--model", "vit.pt2", "--analysis", "an", "--inputs", "test.npz")
