"""The real torchvision and timm models, as their users build them (random weights, no download), through
analysis, coverage, a fuzz campaign and `convert`; on the GPU where torch sees one (the `gpu` test checks the
analysis there against the CPU's). tests/test_torch_models.py covers the same styles written in plain PyTorch;
this file is the check against the libraries themselves. Skipped where torchvision or timm does not import:
PyPI's torchvision does not import beside torch's CPU build, so CI skips it; a matching torch/torchvision pair
runs it (docs/models.md, "Hugging Face and timm models")."""

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
try:  # a torchvision built for another torch fails with a RuntimeError ("operator torchvision::nms does not exist")
    import timm
    import torchvision  # noqa: F401
except Exception as exc:
    pytest.skip(f"torchvision and timm do not import here ({type(exc).__name__}: {exc})", allow_module_level=True)

import torchvision.models as tvm  # noqa: E402
from torchvision.models.swin_transformer import SwinTransformer  # noqa: E402
from torchvision.models.vision_transformer import VisionTransformer  # noqa: E402

from idcgen.analysis import analyze  # noqa: E402
from idcgen.framework import as_network, load_network  # noqa: E402

CUDA = torch.cuda.is_available()

#: 32x32x3 images and 10 classes; the transformers small (a few blocks of width 16-32) so that a test is seconds
MODELS = {
    "torchvision.resnet18": lambda: tvm.resnet18(num_classes=10),
    "torchvision.mobilenet_v3_small": lambda: tvm.mobilenet_v3_small(num_classes=10),
    "torchvision.efficientnet_b0": lambda: tvm.efficientnet_b0(num_classes=10),
    "torchvision.vit": lambda: VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10
    ),
    "torchvision.swin": lambda: SwinTransformer(
        patch_size=[4, 4], embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=[4, 4], num_classes=10
    ),
    "timm.resnet18": lambda: timm.create_model("resnet18", pretrained=False, num_classes=10),
    "timm.convnext_atto": lambda: timm.create_model("convnext_atto", pretrained=False, num_classes=10),
    "timm.mobilenetv3_small_050": lambda: timm.create_model("mobilenetv3_small_050", pretrained=False, num_classes=10),
    "timm.vit": lambda: timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, num_classes=10, img_size=32, patch_size=8, depth=2
    ),
    "timm.swin": lambda: timm.create_model(
        "swin_tiny_patch4_window7_224",
        pretrained=False,
        num_classes=10,
        img_size=32,
        window_size=4,
        embed_dim=16,
        depths=(1, 1),
        num_heads=(2, 2),
    ),
}

#: initialised with a head of zeros (torchvision's ViT): before training no relevance reaches its penultimate
#: layer, and the analysis says so
ZERO_HEAD = {"torchvision.vit"}


def build(name: str):
    torch.manual_seed(0)
    model = MODELS[name]()
    model.input_shape = (32, 32, 3)  # (H, W, C): idcgen moves the channels first itself
    return model.eval()


def images(n: int, seed: int) -> np.ndarray:
    """Smooth random images (a coarse grid upsampled), so that random models tell them apart."""
    coarse = np.random.default_rng(seed).random((n, 4, 4, 3), dtype=np.float32)
    return np.repeat(np.repeat(coarse, 8, axis=1), 8, axis=2)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_zoo_model_is_analysed_and_measured_alike_twice(name):
    """Every hidden layer a layer, most of them subject layers; the default layer analysed (or the zero head
    said); the same test inputs measured twice reach the same combinations."""
    network = as_network(build(name))
    hidden = [layer for layer in network.layer_names() if network.is_hidden(layer)]
    subject = network.subject_layers()
    assert hidden and len(subject) >= len(hidden) / 3, (len(subject), len(hidden))
    found = analyze(network, images(64, 0), m=4, clusters=[2, 3], progress=False)
    said = [w for w in found.warnings if "no relevance reached" in w]
    assert bool(said) == (name in ZERO_HEAD), found.warnings
    assert len(set(found.neurons.tolist())) == 4 and all(c.k in (1, 2, 3) for c in found.clusters)
    test = images(32, 1)
    first, second = found.coverage(test), found.coverage(test)
    assert first.covered == second.covered and 0 < first.covered <= first.total


@pytest.mark.parametrize("name", ["torchvision.resnet18", "timm.convnext_atto", "timm.vit"])
def test_the_default_fuzz_runs_on_a_zoo_model(name, tmp_path):
    """The default mutators (those that cannot run on the model left out, as `idcgen fuzz` does)."""
    from idcgen.fuzz.fuzzer import Fuzzer
    from idcgen.fuzz.mutators import default_mutators

    network = as_network(build(name))
    found = analyze(network, images(64, 0), m=4, clusters=[2, 3], progress=False)
    mutators, _ = default_mutators(network)
    fuzzer = Fuzzer(found, mutators=mutators, batch_size=20, random_state=0, oracle="prediction-change")
    campaign = fuzzer.run(images(20, 2), None, budget=60, progress=False)
    assert campaign.execs == 60 and campaign.tracker.score >= campaign.stats_rows()[0]["idc"]


@pytest.mark.parametrize("name", ["torchvision.resnet18", "timm.vit"])
def test_convert_of_a_zoo_model_keeps_its_layers_and_weights(name, tmp_path, monkeypatch):
    """`idcgen convert` of a factory file, as a user writes one: the program has the module's layers and
    weights, so an analysis made on the factory is used on the .pt2."""
    from idcgen.framework.torch_load import convert

    (tmp_path / "zoo.py").write_text(
        f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        f"from test_zoo_models import build\n\n\ndef make_model():\n    return build({name!r})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "zoo", raising=False)  # the factory of this test's model, not an earlier one
    convert("zoo:make_model", tmp_path / "model.pt2")
    program, network = load_network(tmp_path / "model.pt2"), as_network(build(name))
    assert program.layer_names() == network.layer_names() and program.fingerprint() == network.fingerprint()
    x = images(8, 3)
    np.testing.assert_allclose(program.forward(x)[0], network.forward(x)[0], atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="torch sees no CUDA GPU here")
@pytest.mark.parametrize("name", sorted(set(MODELS) - ZERO_HEAD))
def test_gpu_a_zoo_model_is_analysed_on_the_gpu_as_on_the_cpu(name):
    """The same important neurons and k on the GPU as on the CPU, centroids within 1e-3 (fp32 is IEEE fp32
    there: idcgen turns TF32 off)."""
    x = images(64, 0)
    on_gpu = analyze(as_network(build(name), device="cuda"), x, m=4, clusters=[2, 3], progress=False)
    on_cpu = analyze(as_network(build(name), device="cpu"), x, m=4, clusters=[2, 3], progress=False)
    assert on_gpu.device["device"].startswith("cuda")
    assert on_gpu.neurons.tolist() == on_cpu.neurons.tolist()
    for a, b in zip(on_gpu.clusters, on_cpu.clusters):
        assert a.k == b.k
        np.testing.assert_allclose(a.centroids, b.centroids, atol=1e-3)
