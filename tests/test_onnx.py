"""ONNX Runtime as a forward-only backend (idcgen/framework/onnx_network.py): a PyTorch model exported to ONNX
(fp32 and dynamically quantised) runs as its source does, takes its source's analysis by layer, and the
disagreement oracle finds where an export decides otherwise (docs/models.md, "Deployed ONNX exports")."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="the onnx extra (onnxruntime, onnx) is not installed")
torch = pytest.importorskip("torch", reason="the torch extra is not installed: the exports are made from PyTorch")

from typer.testing import CliRunner  # noqa: E402

from idcgen.cli import app  # noqa: E402
from idcgen.errors import AnalysisMismatchError  # noqa: E402
from idcgen.framework import as_network, load_network  # noqa: E402

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


class Small(torch.nn.Module):
    """conv -> relu -> pool -> flatten -> fc1 -> fc_relu -> fc2, named as a user would."""

    input_shape = (28, 28, 1)

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 4, 3)
        self.relu = torch.nn.ReLU()
        self.pool = torch.nn.MaxPool2d(2)
        self.fc1 = torch.nn.Linear(4 * 13 * 13, 16)
        self.fc_relu = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        return self.fc2(self.fc_relu(self.fc1(torch.flatten(x, 1))))


def _export(module, path):
    """The TorchScript-based exporter (needs onnx only), with a batch axis of any size."""
    torch.onnx.export(
        module, (torch.zeros(2, 1, 28, 28),), str(path), dynamo=False, input_names=["x"], dynamic_axes={"x": {0: "n"}}
    )
    return path


@pytest.fixture(scope="module")
def files(digits, tmp_path_factory):
    """(source .pt2, its fp32 .onnx, its int8 .onnx, a .onnx of a copy with one bias changed, x_test)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from idcgen.framework.torch_zoo import export_program, train

    x_train, y_train, x_test, _ = digits
    folder = tmp_path_factory.mktemp("onnx")
    torch.manual_seed(0)
    module = Small()
    train(module, x_train[:2000], y_train[:2000], epochs=1, lr=3e-3)
    module.eval()
    export_program(module, folder / "m.pt2")
    _export(module, folder / "m.onnx")
    quantize_dynamic(str(folder / "m.onnx"), str(folder / "m_int8.onnx"), weight_type=QuantType.QInt8)
    with torch.no_grad():
        module.fc2.bias[3] += 4.0  # the planted difference: class 3 wins where it was a close second
    _export(module, folder / "planted.onnx")
    return folder / "m.pt2", folder / "m.onnx", folder / "m_int8.onnx", folder / "planted.onnx", x_test[:300]


def test_forward_taps_and_neurons_equal_the_source(files):
    pt2, onnx_file, *_, x = files
    source, export = load_network(pt2), load_network(onnx_file)
    assert export.capabilities == frozenset({"forward"})
    assert export.input_shape == source.input_shape == (28, 28, 1)
    assert export.default_layer() == source.default_layer() == "fc_relu"
    shared = [name for name in source.layer_names() if name in export.layer_names()]
    assert shared == ["conv1", "relu", "pool", "flatten", "fc1", "fc_relu", "fc2"]
    out_s, taps_s = source.forward(x, tuple(shared))
    out_e, taps_e = export.forward(x, tuple(shared))
    np.testing.assert_allclose(out_e, out_s, atol=1e-5)
    for name, a, b in zip(shared, taps_s, taps_e):
        assert export.neuron_count(name) == source.neuron_count(name), name
        np.testing.assert_allclose(b, a, atol=1e-5, err_msg=name)
    assert export.neuron_layers() == source.neuron_layers() == ["relu", "fc_relu"]
    # an fp32 export keeps every weight under its state_dict name: the source's fingerprint
    assert export.fingerprint() == source.fingerprint()


def test_a_convolution_with_its_batch_norm_folded_in_is_not_named_as_the_source_conv(tmp_path):
    torch.manual_seed(0)
    net = torch.nn.Sequential()
    net.conv = torch.nn.Conv2d(1, 4, 3)
    net.bn = torch.nn.BatchNorm2d(4)
    net.relu = torch.nn.ReLU()
    net.flatten = torch.nn.Flatten()
    net.fc = torch.nn.Linear(4 * 26 * 26, 10)
    net.bn.running_mean.uniform_(-1, 1)  # statistics a trained model has: the norm is no identity
    net.bn.running_var.uniform_(0.5, 2)
    net.eval()
    source = as_network(net, input_shape=(28, 28, 1))
    export = load_network(_export(net, tmp_path / "bn.onnx"))
    assert "conv" not in export.layer_names() and "conv.folded" in export.layer_names()
    x = np.random.default_rng(0).random((4, 28, 28, 1)).astype(np.float32)
    np.testing.assert_allclose(export.forward(x, ("conv.folded",))[1][0], source.forward(x, ("bn",))[1][0], atol=1e-5)


@pytest.fixture(scope="module")
def source_analysis(files):
    """The analysis of the source .pt2 (its folder)."""
    out = files[0].parent / "A"
    done = invoke("analyze", "--model", files[0], "--train", "embedded-mnist:train", "--m", 4, "--out", out)
    assert done.exit_code == 0, done.output
    return out


def test_the_default_exporter_names_layers_by_module_path_too(files, tmp_path):
    """torch.onnx.export's default (dynamo=True) records module paths as node metadata, not node names."""
    pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")
    pt2, *_, x = files
    source = load_network(pt2)
    program = torch.export.load(str(pt2))
    torch.onnx.export(program, f=str(tmp_path / "d.onnx"), dynamo=True, verbose=False)
    export = load_network(tmp_path / "d.onnx")
    for name in ("conv1", "relu", "pool", "fc1", "fc_relu", "fc2"):
        assert export.neuron_count(name) == source.neuron_count(name), name
    assert export.default_layer() == "fc_relu"
    # a program exported at batch 2 keeps that batch: the export runs in batches of 2, the last one padded
    _, (a,) = source.forward(x[:5], ("fc1",))
    _, (b,) = export.forward(x[:5], ("fc1",))
    np.testing.assert_allclose(b, a, atol=1e-5)


def test_the_source_analysis_measures_the_export(files, source_analysis):
    pt2, onnx_file, int8, *_ = files
    lines = {}
    for model in (pt2, onnx_file, int8):
        done = invoke("coverage", "--model", model, "--analysis", source_analysis, "--inputs", "embedded-mnist:test")
        assert done.exit_code == 0, done.output
        lines[model] = re.search(r"IDC [\d.]+ % \(\d+ of \d+ combinations\)", done.output).group(0)
    assert lines[onnx_file] == lines[pt2]  # the fp32 export: the same combinations
    assert "combinations" in lines[int8]
    assert "used on this export by layer 'fc_relu' and its 16 neurons, not by weights" in done.output


def test_an_analysis_of_another_layer_width_is_refused(files, tmp_path):
    from idcgen import analyze

    pt2, _, int8, *_ = files
    other = torch.nn.Sequential()  # a model with a layer 'fc_relu' of another width is not this model's source
    other.flatten = torch.nn.Flatten()
    other.fc1 = torch.nn.Linear(28 * 28, 12)
    other.fc_relu = torch.nn.ReLU()
    other.fc2 = torch.nn.Linear(12, 10)
    x = np.random.default_rng(0).random((64, 28, 28, 1)).astype(np.float32)
    found = analyze(as_network(other.eval(), input_shape=(28, 28, 1)), x, layer="fc_relu", m=2)
    with pytest.raises(AnalysisMismatchError, match="its layer 'fc_relu' has 12 neurons, this export's 16"):
        found.bind(load_network(int8))


def test_a_quantised_export_loads_and_mostly_agrees(files):
    pt2, _, int8, *_, x = files
    source, export = load_network(pt2), load_network(int8)
    assert export.default_layer() == "fc_relu" and export.neuron_count("fc1") == 16
    agree = (export.predict(x) == source.predict(x)).mean()
    assert agree > 0.9, agree
    # dynamic quantisation scales each call's activations together: an input's outputs must not depend on
    # the inputs batched with it (each runs alone, as deployed)
    alone = np.concatenate([export.forward(x[i : i + 1])[0] for i in range(40)])
    np.testing.assert_array_equal(export.forward(x[:40])[0], alone)


def test_the_disagreement_oracle_finds_the_planted_difference(files, tmp_path):
    pt2, _, _, planted, _ = files
    done = invoke(
        "fuzz", "--model", pt2, "--model", planted, "--seeds", "embedded-mnist:test", "--train",
        "embedded-mnist:train", "--oracle", "disagreement", "--mutators", "gauss,rotate", "--budget", 300,
        "--out", tmp_path / "C",
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    found = int(re.search(r"(\d+) findings?", done.output).group(1))
    assert found > 0, done.output
    from PIL import Image

    pngs = sorted((tmp_path / "C" / "findings" / "png").glob("*.png"))
    x = np.stack([np.asarray(Image.open(p), np.float32)[..., None] / 255.0 for p in pngs])
    source, export = load_network(pt2), load_network(planted)
    assert (source.predict(x) != export.predict(x)).any()  # a finding reproduces from its PNG: they disagree


def test_gradient_mutators_are_dropped_with_a_note_and_refused_when_named(files, source_analysis, tmp_path):
    _, _, int8, *_ = files
    done = invoke("fuzz", "--model", int8, "--seeds", "embedded-mnist:test", "--analysis", source_analysis,
                  "--budget", 100, "--out", tmp_path / "C")  # fmt: skip
    assert done.exit_code == 0, done.output
    assert "note: default mutator fgsm left out: it takes the model's gradients" in done.output
    mutators = re.search(r"mutators: (.*)", done.output).group(1)
    assert "fgsm" not in mutators and "gauss" in mutators
    done = invoke("fuzz", "--model", int8, "--seeds", "embedded-mnist:test", "--analysis", source_analysis,
                  "--budget", 100, "--mutators", "fgsm", "--out", tmp_path / "D")  # fmt: skip
    assert done.exit_code == 1 and "error: mutator fgsm takes the model's gradients" in done.output
    done = invoke("harden", "--model", int8, "--train", "embedded-mnist:train", "--test", "embedded-mnist:test",
                  "--campaign", tmp_path / "C", "--out", tmp_path / "H")  # fmt: skip
    assert done.exit_code == 1 and "error: hardening retrains the model, and this one runs forward only" in done.output


def test_prioritisation_by_output_runs_on_an_export(files, tmp_path):
    _, _, int8, *_ = files
    done = invoke("prioritize", "--model", int8, "--inputs", "embedded-mnist:test", "--by", "gini", "--out",
                  tmp_path / "r.csv")  # fmt: skip
    assert done.exit_code == 0, done.output
    assert len((tmp_path / "r.csv").read_text().splitlines()) == 1001


def test_analyze_on_an_export_says_it_is_forward_only(files, tmp_path):
    _, onnx_file, *_ = files
    done = invoke("analyze", "--model", onnx_file, "--train", "embedded-mnist:train", "--out", tmp_path / "A")
    assert done.exit_code == 1 and "Traceback" not in done.output
    assert done.output.strip().splitlines()[-1] == (
        "error: the analysis takes relevance (LRP), and this model runs forward only (an ONNX export): analyse "
        "its source model (.pt2, .keras) and pass that analysis with --analysis"
    )


def test_a_gpu_asked_for_that_onnxruntime_lacks_is_one_line(files):
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("onnxruntime has a CUDA provider here")
    _, onnx_file, *_ = files
    done = invoke("layers", "--model", onnx_file, "--device", "cuda")
    assert done.exit_code == 1
    assert "has no CUDA provider here" in done.output and "onnxruntime-gpu" in done.output


def test_a_cuda_provider_that_does_not_start_is_not_recorded_as_the_gpu(tmp_path, monkeypatch):
    """onnxruntime-gpu lists its CUDA provider where its CUDA libraries are missing, then runs on the CPU with a
    warning: auto records the CPU (not cuda:0), an explicit cuda is one line (the listing faked here, on
    onnxruntime's CPU build, which falls back the same way)."""
    import onnxruntime

    from idcgen.errors import IdcgenError

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("onnxruntime has a CUDA provider here")
    path = _export(Small().eval(), tmp_path / "m.onnx")
    monkeypatch.setattr(
        onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    x = np.random.default_rng(0).random((3, 28, 28, 1), dtype=np.float32)
    network = load_network(path, device="auto")
    assert network.device_info()["device"] == "cpu"
    assert network.forward(x)[0].shape == (3, 10)
    with pytest.raises(IdcgenError, match="could not start its CUDA provider"):
        load_network(path, device="cuda").forward(x)


def test_a_missing_onnxruntime_is_one_line_naming_the_extra(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"not read: the backend is checked first")
    code = (
        "import sys\nsys.modules['onnxruntime'] = None  # as if not installed\n"
        "from idcgen.cli import main\n"
        f"sys.argv = ['idcgen', 'layers', '--model', {str(tmp_path / 'm.onnx')!r}]\nmain()"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.strip() == 'error: ONNX models need onnxruntime and onnx: pip install "idcgen[onnx]"'
