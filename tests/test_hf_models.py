"""Hugging Face (`transformers`) image classifiers as their users have them: built from small configs with
random weights (no downloads), run through idcgen's commands as a user would (a factory file), docs/models.md
("Hugging Face and timm models"). Skipped where transformers is not installed."""

import re
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="transformers is not installed: pip install transformers")

from conftest import measured  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from idcgen import load_inputs  # noqa: E402
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
                  intermediate_size=64, num_labels=10, initializer_range=0.2, **extra)


def vit():
    return _done(T.ViTForImageClassification(_tokens(T.ViTConfig)))


def deit():
    return _done(T.DeiTForImageClassification(_tokens(T.DeiTConfig)))


def beit():
    return _done(T.BeitForImageClassification(_tokens(T.BeitConfig, use_mean_pooling=True)))


def swin():
    torch.manual_seed(0)
    config = T.SwinConfig(image_size=32, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                          window_size=4, num_labels=10, initializer_range=0.2)
    return _done(T.SwinForImageClassification(config))


def convnext():
    torch.manual_seed(0)
    config = T.ConvNextConfig(num_channels=3, num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10)
    return _done(T.ConvNextForImageClassification(config))


def mobilenetv2():
    torch.manual_seed(0)
    config = T.MobileNetV2Config(image_size=32, depth_multiplier=0.35, num_labels=10)
    return _done(T.MobileNetV2ForImageClassification(config))
"""


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "hf_models.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("hf_models", None)
    import hf_models

    for split, n in (("train", 40), ("test", 20)):  # digits as 32x32 RGB: random models tell them apart
        digits = load_inputs(f"embedded-mnist:{split}")
        x = np.pad(np.asarray(digits.x[:n]).reshape(n, 28, 28), ((0, 0), (2, 2), (2, 2)))
        np.savez(f"{split}.npz", x=np.repeat(x[..., None] * 255, 3, -1).round().astype(np.uint8), y=digits.y[:n])
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


@pytest.mark.slow
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


def _images(n, seed):
    return np.random.default_rng(seed).random((n, 32, 32, 3), dtype=np.float32)


def test_every_hidden_layer_of_hf_vit_on_the_relevance_path_is_a_subject_layer_with_its_neurons(factories):
    """Every hidden layer of HF ViT is a subject layer, with a token's width as its neurons, but the query
    and key projections and their head split: CP-LRP holds the attention weights constant, so no
    relevance reaches them (docs/design.md, "PyTorch")."""
    network = as_network(factories.vit())
    hidden = [name for name in network.layer_names() if network.is_hidden(name)]
    subject = network.subject_layers()
    off = {name for name in hidden if name not in subject}
    assert off and all(re.search(r"attention\.(q_proj|k_proj|view(_[134])?|transpose_[1256])$", n) for n in off), off
    widths = {layer.name: layer.neurons for layer in network.graph.layers}
    for block in ("vit.layers.0", "vit.layers.1"):
        assert widths[network.graph.aliases[block]] == 32
        assert widths[f"{block}.mlp.fc1"] == widths[f"{block}.mlp.activation_fn"] == 64
        assert widths[f"{block}.layernorm_before"] == widths[f"{block}.attention.o_proj"] == 32
    line = next(line for line in idcgen("layers", "--model", "hf_models:vit").splitlines() if "subject layers" in line)
    assert f"{len(subject)} of {len(hidden)} hidden layers, the others reached by no relevance" in line, line
    assert "()" not in line and "  " not in line.strip(), line


@pytest.mark.parametrize("model", ["vit", *(pytest.param(m, marks=pytest.mark.slow) for m in ("deit", "beit", "swin"))])
def test_all_eight_criteria_run_on_hf_transformers(factories, model):
    """NC, KMNC, NBC, SNAC, TKNC, LSC and DSC on their default layers, and IDC, on HF ViT, DeiT, BEiT and
    Swin (whose window layers are mapped back to their images)."""
    from idcgen.criteria import CRITERIA, make_criterion

    network = as_network(getattr(factories, model)())
    x, y = _images(40, 1), np.arange(40) % 10
    for name in CRITERIA:
        params = {"group": "label"} if name in ("lsc", "dsc") else {}
        criterion = make_criterion(name, **params).fit(network, x, y)
        assert measured(criterion.coverage(network, _images(10, 2))), name
    idcgen("analyze", "--model", f"hf_models:{model}", "--train", "train.npz", "--m", 3, "--out", "an")
    out = idcgen("coverage", "--model", f"hf_models:{model}", "--analysis", "an", "--inputs", "test.npz")
    assert re.search(r"^IDC ", out, re.M)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["vit", "deit", "beit"])
def test_inspect_runs_on_hf_vit_deit_and_beit(factories, model):
    """`inspect` refuses layers constant over the inputs: ViT's and DeiT's expanded class token was one."""
    assert "error" not in idcgen("inspect", "--model", f"hf_models:{model}", "--inputs", "test.npz", "--out", "in")


@pytest.mark.slow
@pytest.mark.parametrize("model", ["vit", "swin", "convnext", "mobilenetv2"])
def test_the_default_fuzz_runs_on_hf_models(factories, model):
    """The default mutators (those that cannot run on the model left out with a note) on HF models."""
    idcgen("analyze", "--model", f"hf_models:{model}", "--train", "train.npz", "--m", 3, "--out", "an")
    args = ("--seeds", "test.npz", "--analysis", "an", "--budget", 40, "--batch-size", 20, "--out", "fz")
    assert "execs in" in idcgen("fuzz", "--model", f"hf_models:{model}", *args)
