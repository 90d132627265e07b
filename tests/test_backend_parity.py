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
    saved.bind(network)  # the scripted file's layers named by module path too: it has fc_relu
    x, _ = images
    assert saved.coverage(x) == analysis.coverage(x, model=_load(files["pt2"]))


def test_other_weights_are_still_refused(analysis, tmp_path):
    other = randomise(Net(), 2)
    with pytest.raises(AnalysisMismatchError, match="made for another model"):
        analysis.bind(_load(_files(other, tmp_path)["traced"]))


def test_the_onnx_export_names_a_blocks_layers_as_the_pt2_does(files):
    """A module's only layer is named by its path only when it is the module's output: ``layer1.0`` is the
    block's output (its last ReLU) on both, never the Add before it; the shared in-place ReLU's two calls are
    ``layer1.0.relu.relu_1`` and ``layer1.0.relu.relu_2`` on both (the exporter scopes the second ``relu_1``)."""
    source, export = _load(files["pt2"]), _load(files["onnx"])
    x = np.random.default_rng(1).random((5, *SHAPE), dtype=np.float32)
    names = ["layer1.0", "layer1.0.add", "layer1.0.relu.relu_1", "layer1.0.relu.relu_2", "layer1.1.add_1", "layer1"]
    _, ours = source.forward(x, tuple(names))
    _, theirs = export.forward(x, tuple(names))
    for name, a, b in zip(names, ours, theirs):
        np.testing.assert_allclose(b, a, atol=1e-5, err_msg=name)
    assert export.check_layer("layer1.0") == "layer1.0.relu.relu_2"
    assert source.check_layer("layer1.0") == "layer1.0.relu.relu_2"


def test_nc_counts_the_same_layers_on_the_pt2_and_its_exports(files, capsys):
    """Neurons are counted in the same layers: a flatten reading the batch size (x.view(x.size(0), -1)) has
    no weights, and the walk from a weighted layer stops at a residual Add on every backend; where the exporter
    folded a batch norm into the convolution counted, a note says why the figures differ."""
    wanted = ["relu", "layer1.0.relu.relu_1", "layer1.0.conv2", "layer1.1.relu.relu_3", "layer1.1.conv2", "fc_relu"]
    for kind in ("pt2", "traced"):
        assert _load(files[kind]).neuron_layers() == wanted, kind
    export = _load(files["onnx"])
    assert export.neuron_layers() == [n + ".folded" if n.endswith("conv2") else n for n in wanted]
    assert "count layer1.0.conv2.folded and 1 more (a batch norm the exporter folded" in capsys.readouterr().err
    assert sum(map(export.neuron_count, export.neuron_layers())) == sum(map(_load(files["pt2"]).neuron_count, wanted))


def test_a_sequential_inside_a_block_keeps_its_module_path_on_the_onnx_export():
    """The TorchScript-based exporter scopes torchvision's ``layer2.0.downsample.0`` as
    /layer2/layer2.0/downsample/downsample.0/Conv: the path is ``layer2.0.downsample.0``, not
    ``layer2.0.downsample.downsample.0``."""
    from idcgen.framework.onnx_network import _joined

    assert _joined(["layer2", "layer2.0", "downsample", "downsample.0"]) == "layer2.0.downsample.0"
    assert _joined(["", "layer1", "0", "conv1"]) == "layer1.0.conv1"  # the torch.export-based exporter's scopes
    assert _joined(["fc1"]) == "fc1"
