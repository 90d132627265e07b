"""Every command on PyTorch models, through the CLI: a .pt2 program, a TorchScript file with its shape, and
a factory with a state_dict (--weights); the clear one-line errors for what does not load."""

import re
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from typer.testing import CliRunner  # noqa: E402

from idcgen.cli import app  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A LeNet-5 (idcgen's PyTorch zoo) trained briefly on 2,000 embedded digits, saved three ways."""
    from idcgen.data import load_inputs
    from idcgen.framework.torch_load import save_torchscript
    from idcgen.framework.torch_zoo import LeNet5, export_program, train

    tmp = tmp_path_factory.mktemp("torch_cli")
    digits = load_inputs("embedded-mnist:train", limit=2000)
    torch.manual_seed(0)
    module = LeNet5()
    train(module, digits.x, digits.y, epochs=5, progress=False)
    export_program(module, tmp / "lenet5.pt2")
    save_torchscript(module, tmp / "lenet5.pt", input_shape=(28, 28, 1))
    torch.save(module.state_dict(), tmp / "weights.pt")
    np.savez(tmp / "train.npz", x=(digits.x * 255).astype(np.uint8), y=digits.y)
    test = load_inputs("embedded-mnist:test", limit=200)
    np.savez(tmp / "test.npz", x=(test.x * 255).astype(np.uint8), y=test.y)
    return tmp


def test_layers_of_a_program_and_of_a_factory_with_weights(files):
    done = invoke("layers", "--model", files / "lenet5.pt2")
    assert done.exit_code == 0, done.output
    assert "block1_conv1    conv2d" in done.output and "default subject layer: relu_3" in done.output
    assert "logits: before_softmax" in done.output and "subject layers: all 11 hidden layers" in done.output
    done = invoke("layers", "--model", "idcgen.framework.torch_zoo:LeNet5", "--weights", files / "weights.pt")
    assert done.exit_code == 0, done.output
    assert "fc2             linear" in done.output


def test_one_line_errors_for_what_does_not_load(files):
    cases = [
        (("--model", files / "weights.pt"), "holds PyTorch weights"),
        (("--model", "idcgen.framework.torch_zoo:ResNet18", "--weights", files / "weights.pt"), "do not fit"),
        (("--model", "idcgen.framework.torch_zoo:nothing"), "has no 'nothing'"),
        (("--model", files / "missing.pt2"), "model file not found"),
    ]
    for args, message in cases:
        done = invoke("layers", *args)
        assert done.exit_code != 0 and message in done.output, done.output
        assert "Traceback" not in done.output


@pytest.mark.slow
def test_every_command_on_a_torchscript_file(files, tmp_path):
    model = files / "lenet5.pt"
    done = invoke("analyze", "--model", model, "--train", files / "train.npz", "--out", tmp_path / "an")
    assert done.exit_code == 0, done.output
    assert "layer relu_3: important neurons" in done.output
    done = invoke(
        "coverage",
        "--model",
        model,
        "--analysis",
        tmp_path / "an",
        "--inputs",
        files / "test.npz",
        "--criteria",
        "idc,nc,kmnc,lsc",
        "--train",
        files / "train.npz",
    )
    assert done.exit_code == 0, done.output
    assert "IDC" in done.output and "LSC" in done.output
    done = invoke(
        "fuzz",
        "--model",
        model,
        "--seeds",
        files / "test.npz",
        "--analysis",
        tmp_path / "an",
        "--budget",
        1024,
        "--out",
        tmp_path / "fz",
    )
    assert done.exit_code == 0, done.output
    report = (tmp_path / "fz" / "report.md").read_text()
    found = re.search(r"(\d+) of (\d+) findings reproduce from their uint8 PNG", report)
    assert found and int(found.group(2)) > 0 and found.group(1) == found.group(2), report
    done = invoke(
        "harden",
        "--model",
        model,
        "--campaign",
        tmp_path / "fz",
        "--train",
        files / "train.npz",
        "--test",
        files / "test.npz",
        "--epochs",
        1,
    )
    assert done.exit_code == 0, done.output
    assert "| original |" in done.output and "| IDC-guided |" in done.output
    done = invoke("inspect", "--model", model, "--inputs", files / "test.npz", "--out", tmp_path / "insp")
    assert done.exit_code == 0, done.output
    done = invoke(
        "affinity",
        "--model",
        model,
        "--inputs",
        files / "test.npz",
        "--analysis",
        tmp_path / "an",
        "--out",
        tmp_path / "aff",
    )
    assert done.exit_code == 0, done.output
    assert "important neurons of relu_3" in done.output
    done = invoke(
        "prioritize",
        "--model",
        model,
        "--inputs",
        files / "test.npz",
        "--by",
        "gini",
        "--out",
        tmp_path / "rank.csv",
        "--json",
    )
    assert done.exit_code == 0, done.output
    assert '"apfd"' in done.output


SHAPELESS = """
import torch
from torch import nn


class Shapeless(nn.Module):  # no input_shape attribute: the command line says it, or the images do
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(1, 4, 3)
        self.relu = nn.ReLU()
        self.flat = nn.Flatten()
        self.fc = nn.Linear(4 * 26 * 26, 10)

    def forward(self, x):
        return self.fc(self.flat(self.relu(self.conv(x))))
"""


def test_input_shape_on_every_command_for_a_factory_without_one(files, tmp_path, monkeypatch):
    (tmp_path / "shapeless_net.py").write_text(SHAPELESS)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("shapeless_net", None)
    spec = "shapeless_net:Shapeless"
    refused = invoke("layers", "--model", spec)
    assert refused.exit_code == 1 and "give --input-shape H,W,C on the command line" in refused.output
    done = invoke("layers", "--model", spec, "--input-shape", "28,28,1")
    assert done.exit_code == 0, done.output
    assert "(4, 26, 26)" in done.output and "default subject layer: relu" in done.output
    bad = invoke("layers", "--model", spec, "--input-shape", "28,0")
    assert bad.exit_code == 1 and "(--input-shape)" in bad.output
    # a command given images takes their shape where the model records none
    done = invoke("analyze", "--model", spec, "--train", files / "train.npz", "--m", 2, "--out", tmp_path / "an")
    assert done.exit_code == 0, done.output
    args = ("--analysis", tmp_path / "an", "--inputs", files / "test.npz", "--criteria", "idc,nc")
    done = invoke("coverage", "--model", spec, "--input-shape", "28,28,1", *args)
    assert done.exit_code == 0, done.output
    assert "IDC" in done.output
    keras_model = invoke("layers", "--model", files / "lenet5.pt2", "--input-shape", "28,28,1")
    assert keras_model.exit_code == 0, keras_model.output  # a .pt2 records its shape: a matching one is fine


def test_input_shape_is_refused_for_a_model_that_records_its_own(tmp_path):
    import keras

    model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten(), keras.layers.Dense(3)])
    model.save(tmp_path / "m.keras")
    refused = invoke("layers", "--model", tmp_path / "m.keras", "--input-shape", "4,4,1")
    assert refused.exit_code == 1 and "records its own: drop --input-shape" in refused.output


def test_batch_size_sets_the_forward_and_relevance_batches_and_changes_no_result(files, tmp_path):
    from idcgen.session import load_networks

    net = load_networks([files / "lenet5.pt2"], batch_size=7)[0]
    assert net.batch_size == 7 and net.relevance_batch_size() == 7
    default = load_networks([files / "lenet5.pt2"])[0]
    assert default.batch_size != 7 and default.relevance_batch_size() != 7
    runs = {}
    for name, extra in (("sized", ()), ("seven", ("--batch-size", 7))):
        args = ("analyze", "--model", files / "lenet5.pt2", "--train", files / "train.npz", "--m", 3)
        done = invoke(*args, "--out", tmp_path / name, *extra)
        assert done.exit_code == 0, done.output
        runs[name] = [line.strip() for line in done.output.splitlines() if "important neurons" in line]
    assert len(runs["sized"]) == 1 and runs["sized"] == runs["seven"]
    bad = invoke("layers", "--model", files / "lenet5.pt2", "--batch-size", 0)
    assert bad.exit_code == 1 and "--batch-size" in bad.output


def test_batch_size_of_a_keras_model_is_its_relevance_batch_too(tmp_path):
    import keras

    from idcgen.session import load_networks

    model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten(), keras.layers.Dense(3)])
    model.save(tmp_path / "m.keras")
    net = load_networks([tmp_path / "m.keras"], batch_size=5)[0]
    assert net.batch_size == 5 and net.relevance_batch_size() == 5
    assert load_networks([tmp_path / "m.keras"])[0].relevance_batch_size() != 5
