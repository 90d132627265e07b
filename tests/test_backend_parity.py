"""One model, four files (issue 50): a small residual net written as torchvision writes its ResNets
(conv-BN-ReLU(inplace=True) blocks, ``out += identity``) saved as a ``.pt2``, a traced and a scripted TorchScript
file and an fp32 ONNX export takes one analysis, names its layers alike where the graph allows, and counts its
neurons for NC and its kin in the same layers."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

sys.path.insert(0, str(Path(__file__).parent))
import idcgen  # noqa: E402
from idcgen.errors import AnalysisMismatchError  # noqa: E402
from idcgen.framework import load_network  # noqa: E402
from torch_twins import randomise  # noqa: E402

SHAPE = (12, 12, 3)


class Block(nn.Module):
    """torchvision's BasicBlock without a downsample: one shared in-place ReLU, ``out += identity``."""

    def __init__(self, c: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class Net(nn.Module):
    input_shape = SHAPE

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(Block(8), Block(8))
        self.fc1 = nn.Linear(8, 16)
        self.fc_relu = nn.ReLU()
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        x = self.layer1(self.relu(self.bn1(self.conv1(x))))
        return self.fc(self.fc_relu(self.fc1(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))))


def _files(module, folder: Path) -> dict:
    """The module as each file format idcgen reads: name -> path."""
    import warnings

    from idcgen.framework.torch_load import export, save_program

    sample = torch.zeros(1, SHAPE[2], *SHAPE[:2])
    save_program(export(module, SHAPE).program, folder / "m.pt2")
    torch.jit.trace(module, sample).save(str(folder / "traced.pt"))
    torch.jit.script(module).save(str(folder / "scripted.pt"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(  # the TorchScript-based exporter (tests/test_onnx.py), any batch size
            module,
            (sample.repeat(2, 1, 1, 1),),
            str(folder / "m.onnx"),
            dynamo=False,
            input_names=["x"],
            dynamic_axes={"x": {0: "n"}},
        )
    return {
        "pt2": folder / "m.pt2",
        "traced": folder / "traced.pt",
        "scripted": folder / "scripted.pt",
        "onnx": folder / "m.onnx",
    }


def _load(path: Path):
    return load_network(path, input_shape=SHAPE if path.suffix == ".pt" else None)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return _files(randomise(Net(), 1), tmp_path_factory.mktemp("parity"))


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    return rng.random((60, *SHAPE), dtype=np.float32), rng.integers(0, 4, 60)


@pytest.fixture(scope="module")
def analysis(files, images):
    x, y = images
    return idcgen.analyze(_load(files["pt2"]), x, y, m=2, clusters=(2, 3), progress=False)


@pytest.mark.parametrize("kind", ["traced", "scripted"])
def test_a_torchscript_file_of_the_same_weights_takes_the_pt2s_analysis(files, images, analysis, kind, tmp_path):
    """TS02: the TorchScript converter holds the weights in its own order and drops batch norm's step counter,
    so the file's fingerprint differs from the .pt2's; the order-free weights digest recognises the weights,
    in an analysis saved and read back too."""
    network = _load(files[kind])
    assert network.fingerprint() != analysis.fingerprint  # what refused it ("made for another model")
    analysis.save(tmp_path / "A")
    saved = idcgen.Analysis.load(tmp_path / "A")
    assert saved.made_for(network)
    if kind == "scripted":  # named by operation (idcgen/framework/torch_jit.py): no fc_relu to measure
        return
    saved.bind(network)
    x, _ = images
    assert saved.coverage(x) == analysis.coverage(x, model=_load(files["pt2"]))


def test_other_weights_are_still_refused(analysis, tmp_path):
    other = randomise(Net(), 2)
    with pytest.raises(AnalysisMismatchError, match="made for another model"):
        analysis.bind(_load(_files(other, tmp_path)["traced"]))
