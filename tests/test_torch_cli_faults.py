"""Faults at the command line on PyTorch models (.pt2 programs, TorchScript files, factories and their
weights), the cases of issue 35, one test each, named by the case's id: each is refused in one clear line
with a non-zero exit and no traceback, and nothing is overwritten (or, where the case was a missing
feature, it works); and the CPUs a loaded torch model uses. Real models throughout: the PyTorch and Keras
twins of tests/torch_twins.py."""

import json
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

FACTORIES = '''
import torch
from torch import nn


class NaNNet(nn.Module):
    """A classifier whose outputs are all NaN (a broken model)."""
    input_shape = (8, 8, 3)

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(192, 16), nn.Linear(16, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x.flatten(1))) * float("nan"))


class NeedsArgs(nn.Module):
    def __init__(self, width):
        super().__init__()


def raises():
    raise RuntimeError("the factory broke")
'''


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def error_line(result) -> str:
    """The error as its own line (progress bars end their lines with carriage returns) and nothing after it."""
    lines = [line for line in re.split(r"[\r\n]", result.output) if line.strip()]
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output, result.output
    assert lines and lines[-1].startswith("error: "), result.output
    return lines[-1]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The twins (a .pt2 program, a TorchScript file, a state_dict, a .keras file), 120 labelled 8x8 RGB
    images, a TinyViT program, and a module of broken factories (importable as broken_factories)."""
    from idcgen.framework.torch_load import save_torchscript
    from idcgen.framework.torch_zoo import export_program
    from torch_twins import TinyViT, images, twins

    tmp = tmp_path_factory.mktemp("twins")
    module, model = twins()
    export_program(module, tmp / "res.pt2")
    save_torchscript(module, tmp / "res.pt", input_shape=(8, 8, 3))
    torch.save(module.state_dict(), tmp / "weights.pt")
    model.save(tmp / "res.keras")
    x = images(120)
    y = model.predict(x, verbose=0).argmax(axis=1)
    np.savez(tmp / "data.npz", x=(x * 255).round().astype(np.uint8), y=y)
    torch.manual_seed(0)
    export_program(TinyViT(need_weights=True).eval(), tmp / "vit.pt2")
    (tmp / "broken_factories.py").write_text(FACTORIES)
    return tmp


@pytest.fixture
def factories(files, monkeypatch):
    monkeypatch.syspath_prepend(str(files))
    sys.modules.pop("broken_factories", None)
    return "broken_factories"


# ---- data loss ---------------------------------------------------------------------------------------------


def test_PR08_prioritize_out_on_a_model_file_does_not_overwrite_it(files, tmp_path):
    victim = tmp_path / "model.keras"
    victim.write_bytes((files / "res.keras").read_bytes())
    before = victim.read_bytes()
    result = invoke(
        "prioritize", "--model", files / "res.pt2", "--inputs", files / "data.npz", "--by", "gini", "--out", victim
    )
    assert "is not a ranking CSV" in error_line(result)
    assert victim.read_bytes() == before
    ranking = tmp_path / "ranking.csv"  # a ranking written before is replaced, as asked
    assert (
        invoke(
            "prioritize", "--model", files / "res.pt2", "--inputs", files / "data.npz", "--by", "gini", "--out", ranking
        ).exit_code
        == 0
    )
    assert (
        invoke(
            "prioritize",
            "--model",
            files / "res.pt2",
            "--inputs",
            files / "data.npz",
            "--by",
            "margin",
            "--out",
            ranking,
        ).exit_code
        == 0
    )


def test_PR09_prioritize_out_on_a_folder_is_refused_and_leaves_no_temporary(files, tmp_path):
    folder = tmp_path / "rankings"
    folder.mkdir()
    result = invoke(
        "prioritize", "--model", files / "res.pt2", "--inputs", files / "data.npz", "--by", "gini", "--out", folder
    )
    assert "is a folder" in error_line(result) and "Is a directory" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rankings"] and not any(folder.iterdir())


# ---- wrong results -----------------------------------------------------------------------------------------


def test_X16_a_layer_inside_multihead_attention_has_no_row_per_input(files, tmp_path):
    listing = invoke("layers", "--model", files / "vit.pt2")
    assert "blocks.0.attn.linear_1" in listing.output, listing.output  # the out-projection, on (tokens x batch, d)
    result = invoke(
        "analyze",
        "--model",
        files / "vit.pt2",
        "--train",
        files / "data.npz",
        "--limit",
        10,
        "--layer",
        "blocks.0.attn.linear_1",
        "--m",
        2,
        "--out",
        tmp_path / "an",
    )
    assert "has no row per input" in error_line(result)
    assert not (tmp_path / "an").exists()
    subject = re.search(r"subject layers: .*", listing.output).group(0)
    assert "attn.linear_1" not in subject
    done = invoke(
        "analyze",
        "--model",
        files / "vit.pt2",
        "--train",
        files / "data.npz",
        "--limit",
        30,
        "--layer",
        "blocks.0.add_1",
        "--m",
        2,
        "--out",
        tmp_path / "ok",
    )  # the block's output: fine
    assert done.exit_code == 0, done.output
    assert re.search(r"reach IDC .* \((\d+) of", done.output)


def test_T39b_prioritize_refuses_a_model_giving_nan(files, factories, tmp_path):
    result = invoke(
        "prioritize",
        "--model",
        f"{factories}:NaNNet",
        "--inputs",
        files / "data.npz",
        "--by",
        "gini",
        "--out",
        tmp_path / "r.csv",
    )
    # since issue 50 a model NaN on every input is stopped at its first forward pass, saying so
    assert "the model's outputs are NaN for every one of these 120 inputs" in error_line(result)
    assert "APFD" not in result.output and not (tmp_path / "r.csv").exists()


def test_T39_analyze_of_a_model_giving_nan_says_so_on_its_own_line(files, factories, tmp_path):
    result = invoke("analyze", "--model", f"{factories}:NaNNet", "--train", files / "data.npz", "--out", tmp_path / "a")
    line = error_line(result)
    assert "the model's outputs are NaN for every one of these" in line and "values must be finite" not in line


def test_AE3_an_analysis_with_its_digest_line_deleted_and_a_centroid_edited_is_refused(files, tmp_path):
    done = invoke(
        "analyze", "--model", files / "res.keras", "--train", files / "data.npz", "--m", 3, "--out", tmp_path / "an"
    )
    assert done.exit_code == 0, done.output
    path = tmp_path / "an" / "analysis.json"
    meta = json.loads(path.read_text())
    del meta["digest"]
    meta["clusters"][0]["centroids"][0] -= 0.01  # still increasing: a plausible edit
    path.write_text(json.dumps(meta, indent=2))
    result = invoke(
        "coverage", "--model", files / "res.keras", "--analysis", tmp_path / "an", "--inputs", files / "data.npz"
    )
    assert "edited or damaged since it was saved" in error_line(result) and "IDC" not in result.output


def test_OT05_architecture_then_weights_is_refused(files):
    result = invoke(
        "layers",
        "--model",
        "torch_twins:Residual",
        "--architecture",
        files / "a.json",
        "--weights",
        files / "weights.pt",
    )
    assert error_line(result) == (
        "error: --architecture and --weights are two names of one option (only one value is used): give one"
    )


def test_OT06_weights_then_architecture_is_refused(files):
    result = invoke(
        "layers",
        "--model",
        "torch_twins:Residual",
        "--weights",
        files / "weights.pt",
        "--architecture",
        files / "a.json",
    )
    assert error_line(result).startswith("error: --weights and --architecture are two names of one option")


def test_T11b_convert_input_shape_on_a_keras_file_is_refused(files, tmp_path):
    result = invoke("convert", files / "res.keras", tmp_path / "new.keras", "--input-shape", "8,8,3")
    assert "drop --input-shape" in error_line(result)
    assert not (tmp_path / "new.keras").exists()


def test_X17_fuzz_takes_weights_for_a_factory(files, tmp_path):
    result = invoke(
        "fuzz",
        "--model",
        "torch_twins:Residual",
        "--weights",
        files / "weights.pt",
        "--seeds",
        files / "data.npz",
        "--budget",
        64,
        "--batch-size",
        32,
        "--mutators",
        "gauss",
        "--out",
        tmp_path / "c",
    )
    assert result.exit_code == 0, result.output
    assert "64 execs" in result.output and (tmp_path / "c" / "report.md").exists()


# ---- tracebacks --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["T13", "T15", "T16"])
def test_T13_T15_T16_an_empty_truncated_or_text_pt2_is_one_line(files, tmp_path, capfd, case):
    path = tmp_path / f"{case}.pt2"
    path.write_bytes({"T13": b"", "T15": (files / "res.pt2").read_bytes()[:10000], "T16": b"hello\n"}[case])
    result = invoke("layers", "--model", path)
    assert "is not a torch.export program (.pt2), or is damaged" in error_line(result)
    assert result.output.strip().count("\n") == 0, result.output
    assert "Traceback" not in capfd.readouterr().err  # torch logs to the process' own stderr


def test_T27_a_factory_that_raises_is_one_line(factories):
    result = invoke("layers", "--model", f"{factories}:raises")
    assert error_line(result) == f"error: the model factory {factories}:raises raised RuntimeError: the factory broke"


def test_T29_a_factory_that_needs_arguments_is_one_line(factories):
    result = invoke("layers", "--model", f"{factories}:NeedsArgs")
    assert "needs arguments (width); idcgen calls it with none" in error_line(result)


# ---- unclear messages --------------------------------------------------------------------------------------


def test_T19_a_damaged_onnx_file_is_one_line(tmp_path):
    pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
    (tmp_path / "m.onnx").write_bytes(b"not a model")
    line = error_line(invoke("layers", "--model", tmp_path / "m.onnx"))
    assert line.startswith("error: cannot read ONNX file") and "m.onnx" in line


def test_T21_a_factory_module_in_the_current_folder_is_found(files, tmp_path, monkeypatch):
    (tmp_path / "r5_here.py").write_text(
        FACTORIES.replace("class NaNNet", "class Unused") + "\nfrom torch_twins import Residual\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    sys.modules.pop("r5_here", None)
    done = invoke("layers", "--model", "r5_here:Residual")
    assert done.exit_code == 0, done.output
    line = error_line(invoke("layers", "--model", "r5_elsewhere:Residual"))
    assert "No module named 'r5_elsewhere'" in line and "PYTHONPATH" in line and "current folder" in line


@pytest.mark.parametrize("case", ["T22", "T23"])
def test_T22_T23_weights_that_do_not_fit_say_which(files, case):
    factory = "idcgen.framework.torch_zoo:LeNet5" if case == "T22" else "torch_twins:Branches"
    line = error_line(invoke("layers", "--model", factory, "--weights", files / "weights.pt"))
    assert line.startswith(f"error: the weights in {files / 'weights.pt'} do not fit the model of {factory}: ")
    assert "missing (" in line and "unexpected (stem.weight" in line and not line.endswith(":")


def test_T24_a_missing_weights_file_is_called_a_weights_file():
    line = error_line(invoke("layers", "--model", "torch_twins:Residual", "--weights", "nowhere/w.pt"))
    assert line == "error: weights file not found: nowhere/w.pt"


def test_T25_a_torchscript_file_given_as_weights(files):
    line = error_line(invoke("layers", "--model", "torch_twins:Residual", "--weights", files / "res.pt"))
    assert "is a TorchScript model, not a state_dict" in line and "weights_only" not in line


def test_T06_convert_input_shape_that_does_not_fit_names_the_option(files, tmp_path):
    line = error_line(invoke("convert", files / "res.pt", tmp_path / "new.pt2", "--input-shape", "5,5,2"))
    assert "--input-shape" in line and "expected input[2, 2, 5, 5] to have 3 channels" in line
    assert not re.search(r"\bs\d+\b", line) and not (tmp_path / "new.pt2").exists()


def test_I08_an_image_shape_of_16_channels_is_refused_as_the_option(files, tmp_path):
    import keras

    inputs = keras.Input((192,))
    out = keras.layers.Dense(10, name="logits")(keras.layers.Dense(16, activation="relu", name="fc")(inputs))
    keras.Model(inputs, keras.layers.Activation("softmax")(out)).save(tmp_path / "flat.keras")
    result = invoke(
        "fuzz",
        "--model",
        tmp_path / "flat.keras",
        "--seeds",
        files / "data.npz",
        "--budget",
        32,
        "--image-shape",
        "4,4,12",
        "--out",
        tmp_path / "c",
    )
    assert "C = 1 (grey) or 3 (RGB)" in error_line(result)
    assert not (tmp_path / "c").exists()


def test_O39_affinity_tol_range_includes_zero(files):
    line = error_line(invoke("affinity", "--model", files / "res.keras", "--inputs", files / "data.npz", "--tol", -1))
    assert "[0.0, inf)" in line


def test_O43_a_hypothesis_shape_error_is_on_its_own_line(files, tmp_path):
    (tmp_path / "hyp.py").write_text("import numpy as np\n\ndef bad(x, y):\n    return np.zeros(3)\n")
    result = invoke(
        "affinity",
        "--model",
        files / "res.keras",
        "--inputs",
        files / "data.npz",
        "--hypotheses",
        tmp_path / "hyp.py",
        "--out",
        tmp_path / "aff",
    )
    assert error_line(result).startswith("error: hypothesis 'bad' returned shape (3,)")


def test_O49_harden_limit_test_zero_is_named_as_itself(files, tmp_path):
    line = error_line(
        invoke(
            "harden",
            "--model",
            files / "res.keras",
            "--train",
            files / "data.npz",
            "--campaign",
            tmp_path / "none",
            "--test",
            files / "data.npz",
            "--limit-test",
            0,
        )
    )
    assert line == "error: --limit-test must be an int >= 1. Got 0 instead."


def test_AE5_an_analysis_in_a_newer_format_says_so(files, tmp_path):
    done = invoke(
        "analyze", "--model", files / "res.keras", "--train", files / "data.npz", "--m", 3, "--out", tmp_path / "an"
    )
    assert done.exit_code == 0, done.output
    path = tmp_path / "an" / "analysis.json"
    path.write_text(path.read_text().replace('"format_version": 1', '"format_version": 2'))
    line = error_line(
        invoke(
            "coverage", "--model", files / "res.keras", "--analysis", tmp_path / "an", "--inputs", files / "data.npz"
        )
    )
    assert "saved by a newer idcgen (format version 2" in line and "corrupt" not in line


def test_D13b_correct_only_on_word_named_class_folders_mentions_the_label_mapping(files, tmp_path):
    from PIL import Image

    data = np.load(files / "data.npz")
    for name, label in (("apple", 0), ("banana", 1)):  # folder i holds images the model does not call i
        (tmp_path / "imgs" / name).mkdir(parents=True)
        for i in np.flatnonzero(data["y"] != label)[:6]:
            Image.fromarray(data["x"][i]).save(tmp_path / "imgs" / name / f"{i}.png")
    line = error_line(
        invoke(
            "analyze",
            "--model",
            files / "res.keras",
            "--train",
            tmp_path / "imgs",
            "--correct-only",
            "--out",
            tmp_path / "an",
        )
    )
    assert "--correct-only keeps none" in line and "0 = 'apple', 1 = 'banana'" in line and "--class-names" in line


# ---- under load --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cpu_max, expected", [("max 100000", 2), ("150000 100000", 2), ("50000 100000", 1)])
def test_usable_cpus_reads_the_affinity_and_the_cgroup_quota(tmp_path, monkeypatch, cpu_max, expected):
    """torch counted the machine's cores, not those a container's quota or an affinity mask gives idcgen."""
    import os

    from idcgen.framework.common import usable_cpus

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    (tmp_path / "cpu.max").write_text(cpu_max + "\n")
    assert usable_cpus(tmp_path) == expected
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")  # cgroup v1: one CPU
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert usable_cpus(tmp_path) == 1


def test_a_loaded_torch_model_uses_the_cpus_idcgen_may_use(files):
    """Under an affinity mask of one CPU, torch's threads follow it (and a lower count set before stays)."""
    import subprocess

    code = (
        "import os, torch; torch.set_num_threads(4); os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]});"
        "import idcgen; idcgen.Network(idcgen.load_model(%r)); print(torch.get_num_threads(), "
        "os.environ.get('OMP_WAIT_POLICY'))" % str(files / "res.pt2")
    )
    # the child's own environment: this process imported idcgen before torch, so it holds the policy idcgen set
    env = {k: v for k, v in __import__("os").environ.items() if k != "OMP_WAIT_POLICY"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(env, PYTHONPATH=str(Path(__file__).parents[1])),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "None"]  # torch imported first: the wait policy is the caller's


# ---- the README and --help say what the code does ----------------------------------------------------------


def test_help_texts_say_what_the_code_does():
    """README: `--weights` on every command reading a model (fuzz had none, X17); `.onnx` listed by --model
    while the README said "not yet"; fuzz --help said --workers needs --analysis or --train."""
    for name in ("layers", "analyze", "coverage", "prioritize", "fuzz", "harden", "inspect", "affinity", "convert"):
        assert "--weights" in invoke(name, "--help").output, name
    text = " ".join(invoke("layers", "--help").output.split())
    assert "ONNX .onnx (onnxruntime, forward only" in text
    fuzz = " ".join(invoke("fuzz", "--help").output.split())
    assert "Needs --analysis or --train" not in fuzz and "the analysis is found or made first" in fuzz
    # the README's manual part moved to docs/usage.md (issue 49): its "PyTorch models" section says these
    root = Path(__file__).parents[1]
    readme = " ".join((root / "README.md").read_text().split())
    usage = " ".join((root / "docs" / "usage.md").read_text().split())
    assert "Not yet: ONNX" not in readme + usage and "ONNX files (`.onnx`) run on onnxruntime, forward only" in usage
    assert "`--weights` is another name of `--architecture`" in usage and "PYTHONPATH=/path/to/folder" in usage


@pytest.mark.parametrize(
    "loadavg, expected",
    [("0.30 0.5 0.4 1/300 99", 2), ("5.24 7.5 8.2 2/500 99", 1), ("0.10 0.1 0.1 3/300 99", 1), ("1.2 1 1 2/300 99", 1)],
)
def test_free_cpus_leaves_out_what_other_processes_keep_busy(tmp_path, monkeypatch, loadavg, expected):
    """On a 2-core machine shared with others, two torch threads ran a small campaign 30x slower than one
    (BENCHMARKS.md): the load average, and the tasks running now (a job just started), count."""
    import os

    from idcgen.framework.common import free_cpus

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    (tmp_path / "loadavg").write_text(loadavg + "\n")
    assert free_cpus(tmp_path / "loadavg") == expected
    assert free_cpus(tmp_path / "missing") == 2


def test_importing_idcgen_before_torch_makes_openmp_wait_passively(files):
    import subprocess

    code = (
        "import idcgen.framework, os, torch; import idcgen; idcgen.Network(idcgen.load_model(%r)); "
        "print(os.environ.get('OMP_WAIT_POLICY'))" % str(files / "res.pt2")
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "OMP_WAIT_POLICY"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(env, PYTHONPATH=str(Path(__file__).parents[1])),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["PASSIVE"]
