"""Failures named for what they are, in one line (the faults of issue 50): a model whose outputs are NaN, arrays
of text, an empty ONNX file, a full disk, a recipe without its data; beside them the wrong results and unclear
messages found with them (16-bit images, analyze --force, a note cut short)."""

import re

import numpy as np
import pytest
from typer.testing import CliRunner

from idcgen.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def _digit_folders(digits, tmp_path):
    """The same 20 digits as 8-bit PNGs, 16-bit PNGs, 16-bit TIFFs and 8-bit greyscale+alpha PNGs."""
    from PIL import Image

    x = (digits[2][:20, ..., 0] * 255).round().astype(np.uint8)
    folders = {kind: tmp_path / kind for kind in ("png8", "png16", "tif16", "la")}
    for folder in folders.values():
        folder.mkdir()
    for i, image in enumerate(x):
        Image.fromarray(image, "L").save(folders["png8"] / f"{i:02d}.png")
        Image.fromarray(image.astype(np.uint16) * 257).save(folders["png16"] / f"{i:02d}.png")
        Image.fromarray(image.astype(np.uint16) * 257).save(folders["tif16"] / f"{i:02d}.tif")
        Image.fromarray(np.stack([image, np.full_like(image, 255)], -1), "LA").save(folders["la"] / f"{i:02d}.png")
    return folders


@pytest.mark.parametrize("value_range", [(0.0, 1.0), (0.0, 255.0)])
def test_16_bit_images_are_read_at_their_depth(digits, tmp_path, value_range):
    """P16a/P16b: a 16-bit PNG was read with every non-zero pixel as 1.0, silently."""
    from idcgen.data import load_inputs

    folders = _digit_folders(digits, tmp_path)
    eight = load_inputs(folders["png8"], value_range=value_range)
    for kind in ("png16", "tif16", "la"):
        other = load_inputs(folders[kind], value_range=value_range)
        np.testing.assert_array_equal(other.x, eight.x, err_msg=kind)
    sixteen = load_inputs(folders["png16"], value_range=value_range)
    assert "65535" in sixteen.scaling, sixteen.scaling
    # resized and cropped at their depth as well
    a = load_inputs(folders["png16"], resize=(14, 14), crop=(1, 1, 1, 1)).x
    b = load_inputs(folders["png8"], resize=(14, 14), crop=(1, 1, 1, 1)).x
    assert np.abs(a - b).max() < 1 / 255


def test_an_npz_of_0x0_images_is_refused_in_one_line(tmp_path):
    """Z01: zero-size array to reduction operation minimum."""
    from idcgen.data import load_inputs
    from idcgen.errors import InputError

    np.savez(tmp_path / "z.npz", x=np.zeros((3, 0, 0), np.uint8), y=np.arange(3))
    with pytest.raises(InputError, match=r"have shape \(3, 0, 0\): each input is empty"):
        load_inputs(tmp_path / "z.npz")


@pytest.mark.parametrize("name", ["arrays.npz", "arrays.npy"])
def test_arrays_of_text_are_named_as_such(tmp_path, name):
    """A08: numpy's "Object arrays cannot be loaded when allow_pickle=False" is advice a user cannot take."""
    from idcgen.data import load_inputs
    from idcgen.errors import InputError

    text = np.array(["a cat", "a dog"], dtype=object)
    np.savez(tmp_path / name, x=text) if name.endswith(".npz") else np.save(tmp_path / name, text)
    with pytest.raises(InputError) as caught:
        load_inputs(tmp_path / name)
    assert "allow_pickle" not in str(caught.value) and "not numbers" in str(caught.value), caught.value


def _recipe(tmp_path, *argv):
    """``python recipes/NAME.py argv`` with MNIST nowhere (IDCGEN_MNIST names a missing folder, as when the
    workspace's data beside the repository is not there): (exit code, stdout, stderr without log lines)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "IDCGEN_MNIST": str(tmp_path / "no-mnist"), "IDCGEN_OUTPUTS": str(tmp_path / "outputs")}
    env["PYTHONPATH"] = str(root)
    done = subprocess.run(
        [sys.executable, *map(str, argv)], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )
    noise = ("WARNING: All log", "I0000", "W0000", "E0000")
    err = "\n".join(line for line in done.stderr.splitlines() if not line.startswith(noise))
    return done.returncode, done.stdout, err


def test_subjects_only_missing_without_the_data(tmp_path):
    """RC06: `subjects.py --only-missing` read MNIST before finding every model there; without it, a
    21-line traceback that never named where the recipes read MNIST."""
    code, out, err = _recipe(tmp_path, "recipes/subjects.py", "--dataset", "mnist", "--only-missing")
    assert code == 0 and err == "" and out.count("there already") == 6, (out, err)
    code, out, err = _recipe(tmp_path, "recipes/subjects.py", "--dataset", "mnist", "--copies", 6, "--only-missing")
    assert code == 1 and len(err.splitlines()) == 1, err
    assert err.startswith("error: ") and "Traceback" not in err
    assert re.search(r"read mnist from \S+/data/mnist \(the workspace's data beside the repository\)", err), err
    assert "set IDCGEN_MNIST" in err


def test_guidance_v3_without_the_data_or_onto_a_file(tmp_path):
    """RC15, RC16: a traceback even with --summary-only, which runs nothing; RC19: --out onto a file ended
    in NotADirectoryError."""
    code, _, err = _recipe(tmp_path, "recipes/superseded/guidance_v3.py", "--summary-only")
    assert code == 1 and err == f"error: no runs in {tmp_path / 'outputs' / 'guidance_v3' / 'mnist' / 'runs'}", err
    argv = ("--copies", 1, "--states", 1, "--arms", "idc", "--out", tmp_path / "g")
    code, _, err = _recipe(tmp_path, "recipes/superseded/guidance_v3.py", *argv)
    assert code == 1 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert re.search(r"read mnist from \S+/data/mnist \(the workspace", err), err
    (tmp_path / "file").write_text("")
    code, _, err = _recipe(tmp_path, "recipes/superseded/guidance_v3.py", "--out", tmp_path / "file")
    assert code == 2 and f"error: --out {tmp_path / 'file'} is a file; give a folder" in err.splitlines()[-1], err


def test_an_empty_onnx_file_is_named_empty(tmp_path):
    """OX08: an empty .onnx parsed as an empty model that "takes 0 inputs"."""
    pytest.importorskip("onnx")
    from idcgen.errors import ModelError
    from idcgen.framework.onnx_network import load_model

    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(ModelError, match=r"empty\.onnx is empty$"):
        load_model(tmp_path / "empty.onnx")
    import onnx

    onnx.save(onnx.ModelProto(ir_version=8), str(tmp_path / "blank.onnx"))  # a valid proto, no graph
    with pytest.raises(ModelError, match=r"blank\.onnx holds no graph"):
        load_model(tmp_path / "blank.onnx")


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_a_forward_only_model_gets_no_advice_for_the_other_task(task):
    """OX13: an ONNX classifier's note said "for a regression model use fgsm, bim or pgd"."""
    from types import SimpleNamespace

    from idcgen.fuzz.mutators import default_mutators

    _, notes = default_mutators(SimpleNamespace(task=task, capabilities=("forward",)))
    assert notes and not any("for a regression model" in note for note in notes), notes


@pytest.fixture(scope="module")
def nan_lenet(trained_lenet, tmp_path_factory):
    """The trained LeNet-1 with every weight NaN (a training run that diverged)."""
    import keras

    model, _ = trained_lenet
    broken = keras.models.clone_model(model)
    broken.set_weights([np.full_like(w, np.nan) for w in model.get_weights()])
    path = tmp_path_factory.mktemp("nan") / "nan.keras"
    broken.save(path)
    return path


@pytest.fixture(scope="module")
def digits_npz(digits, tmp_path_factory):
    x_train, y_train, x_test, y_test = digits
    path = tmp_path_factory.mktemp("nan_data") / "test.npz"
    np.savez(path, x=(x_test[:120, ..., 0] * 255).round().astype(np.uint8), y=y_test[:120])
    return path


@pytest.mark.parametrize(
    "command, args",
    [
        ("analyze", ["--out", "{tmp}/a", "--train"]),  # OX23: Combinations.assign: activations must be finite
        ("inspect", ["--out", "{tmp}/r", "--limit", 120, "--inputs"]),  # NN03: predicts only class [0]
        ("prioritize", ["--by", "dsa", "--out", "{tmp}/o.csv", "--train"]),  # NN05: DSC needs two classes
    ],
    ids=["OX23", "NN03", "NN05"],
)
def test_a_model_whose_outputs_are_nan_is_named_as_such(command, args, nan_lenet, digits_npz, tmp_path):
    args = [str(a).format(tmp=tmp_path) for a in args]
    extra = [] if command in ("inspect", "analyze") else ["--inputs", digits_npz]
    result = invoke(command, "--model", nan_lenet, *args, digits_npz, *extra)
    assert result.exit_code == 1, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("error: the model's outputs are NaN"), result.output


def test_an_onnx_model_whose_outputs_are_nan_is_named_as_such():
    """OX23 on the ONNX backend itself."""
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    from idcgen.errors import ModelError
    from idcgen.framework.onnx_network import OnnxModel, OnnxNetwork

    w = np.full((4, 3), np.nan, np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="dense"), helper.make_node("Relu", ["h"], ["y"])],
        "nan",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
        [numpy_helper.from_array(w, "w")],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    network = OnnxNetwork(OnnxModel(proto.SerializeToString(), "ONNX file nan.onnx"))
    with pytest.raises(ModelError, match="the model's outputs are NaN"):
        network.forward(np.ones((5, 4), np.float32), ("h",))


def test_a_pickled_whole_module_as_weights_is_named_as_such(tmp_path):
    """PK02: torch.save(model, PATH) given as --weights passed on torch's weights_only advice."""
    torch = pytest.importorskip("torch")
    from idcgen.errors import ModelError
    from idcgen.framework.torch_load import _state_dict

    torch.save(torch.nn.Linear(2, 2), tmp_path / "whole.pt")
    with pytest.raises(ModelError) as caught:
        _state_dict(tmp_path / "whole.pt", "net.py:Net")
    message = str(caught.value)
    assert "weights_only" not in message and "\n" not in message, message
    assert "a whole pickled model" in message and "torch.save(model.state_dict(), PATH)" in message, message


def test_a_criterion_spec_in_a_message_is_left_as_written():
    """A spec was rewritten as if it held flags: nc(scaling=none,--threshold 0.5,...)."""
    from idcgen.cli import app
    from idcgen.commandline import in_cli_words
    from idcgen.errors import Param, ParameterError

    spec = "nc(scaling=none,threshold=0.5,top=2)"
    error = ParameterError(
        f"criterion {spec} and kmnc(k=(2,3),scaling=none) cannot share a tracker; ", Param("batch_size", 0), " given"
    )
    assert str(error) == f"criterion {spec} and kmnc(k=(2,3),scaling=none) cannot share a tracker; batch_size=0 given"
    assert in_cli_words(error, app) == (
        f"criterion {spec} and kmnc(k=(2,3),scaling=none) cannot share a tracker; --batch-size 0 given"
    )


def _full_after(monkeypatch, module, name, calls_before):
    """``module.name`` writing as usual ``calls_before`` times, then as on a full disk: an empty file, then
    ENOSPC."""
    import errno
    from pathlib import Path

    write, calls = getattr(module, name), []

    def full(self_or_path, *args, **kw):
        calls.append(1)
        if len(calls) > calls_before:
            target = args[0] if name == "savefig" else self_or_path
            Path(target).write_bytes(b"")
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(self_or_path, *args, **kw)

    monkeypatch.setattr(module, name, full)


def test_a_full_disk_during_inspect_leaves_no_half_report(trained_lenet, digits_npz, tmp_path, monkeypatch):
    """F15: a half-written report with a 0-byte PNG, and a bare "[Errno 28] No space left on device"."""
    from matplotlib.figure import Figure

    _, path = trained_lenet
    _full_after(monkeypatch, Figure, "savefig", 0)
    out = tmp_path / "r"
    result = invoke("inspect", "--model", path, "--inputs", digits_npz, "--out", out)
    assert result.exit_code == 1, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith(f"error: no space left on the device of {out}") and "run inspect again" in line, line
    assert not [p.name for p in out.iterdir()], "a half-written report was left"


def test_a_full_disk_during_a_disagreement_fuzz_names_the_campaign(trained_lenet, digits_npz, tmp_path, monkeypatch):
    """F16: the disagreement fuzz gave a bare "[Errno 28]" without the campaign or how to resume."""
    from idcgen.fuzz import store

    model, path = trained_lenet
    other = tmp_path / "other.keras"
    model.save(other)
    _full_after(monkeypatch, store, "atomic_npz", 0)
    out = tmp_path / "c"
    result = invoke(
        "fuzz", "--model", path, "--model", other, "--oracle", "disagreement", "--seeds", digits_npz,
        "--train", digits_npz, "--limit", 60, "--budget", 640, "--batch-size", 64, "--mutators", "gauss", "--out", out,
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith(f"error: no space left on the device of campaign {out}"), line
    assert line.endswith(f"free some space, remove {out}, then start the campaign again"), line


@pytest.mark.parametrize("device", ["auto", "cpu"])
def test_cuinit_at_the_first_device_query_is_dropped(device, monkeypatch, capfd):
    """Case 5: TensorFlow's CUDA build on a machine without a GPU writes "failed call to cuInit" (from C++,
    at ERROR level) when its devices are first listed, after the import the start-up filter covered: every
    CPU-only Keras command printed it. Here the device query writes it as that build does."""
    import os

    import tensorflow as tf

    from idcgen.framework.device import keras_device

    line = b"E0000 00:00:1 cuda_executor.cc:1001] failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: "
    line += b"UNKNOWN ERROR (303)\n"

    def listed(*args, **kw):
        os.write(2, line)
        os.write(2, b"a real problem: libfoo.so not found\n")  # anything else still shows
        return []

    monkeypatch.setattr(tf.config, "list_physical_devices", listed)
    monkeypatch.setattr(tf.config, "set_visible_devices", listed)
    capfd.readouterr()
    assert keras_device(device) == "cpu"
    err = capfd.readouterr().err
    assert "cuInit" not in err and "a real problem: libfoo.so not found" in err, err


def test_the_readmes_pytorch_twin_prints_no_start_up_lines(tmp_path):
    """Case 5: the README's PyTorch snippet (now in docs/usage.md) imported keras itself, before idcgen, so
    TensorFlow's start-up lines the README says are dropped showed."""
    pytest.importorskip("torch")
    import subprocess
    import sys
    from pathlib import Path

    from idcgen.framework.keras_zoo import lenet5
    from idcgen.framework.quiet import NOISE

    root = Path(__file__).resolve().parents[1]
    blocks = re.findall(r"```python\n(.*?)```", (root / "docs" / "usage.md").read_text(), re.S)  # moved there
    (snippet,) = [b for b in blocks if "export_program(twin" in b]
    lenet5().save(tmp_path / "lenet5.keras")
    snippet = snippet.replace("outputs/demo/lenet5.keras", str(tmp_path / "lenet5.keras"))
    snippet = snippet.replace("outputs/lenet5.pt2", str(tmp_path / "lenet5.pt2"))
    env = {k: v for k, v in __import__("os").environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # as a user runs it
    done = subprocess.run([sys.executable, "-c", snippet], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "lenet5.pt2").exists()
    assert not [line for line in done.stderr.splitlines() if NOISE.search(line)], done.stderr


def test_idc_rarity_takes_the_analysis_training_inputs(trained_lenet, digits_npz, tmp_path):
    """Case 6a: `prioritize --by idc-rarity --analysis A` asked for --train, though A was made on the training
    inputs: the analysis records how often they reach each combination."""
    _, path = trained_lenet
    analysed = invoke("analyze", "--model", path, "--train", digits_npz, "--out", tmp_path / "a")
    assert analysed.exit_code == 0, analysed.output
    common = ("prioritize", "--model", path, "--inputs", digits_npz, "--by", "idc-rarity", "--analysis", tmp_path / "a")
    alone = invoke(*common, "--out", tmp_path / "alone.csv")
    assert alone.exit_code == 0, alone.output
    assert "idc-rarity counts the 120 training inputs recorded with the analysis" in alone.output, alone.output
    given = invoke(*common, "--train", digits_npz, "--out", tmp_path / "given.csv")
    assert given.exit_code == 0, given.output
    assert (tmp_path / "alone.csv").read_text() == (tmp_path / "given.csv").read_text()


def test_lscs_note_on_a_class_without_a_kde_gives_the_whole_reason():
    """Case 6b: the note cut scipy's message mid-sentence ("... matrix, which cannot ); its inputs get no LSA")."""
    import keras

    from idcgen.criteria.surprise import LikelihoodSurpriseCoverage
    from idcgen.framework import Network

    inputs = keras.Input((3,))
    h = keras.layers.Dense(3, name="h", activation="relu")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(2, name="out", activation="softmax")(h))
    model.get_layer("h").set_weights([np.eye(3), np.full(3, 10.0)])
    model.get_layer("out").set_weights([np.array([[1, -1], [0, 0], [0, 0]]), np.array([-10.0, 10.0])])
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 3)).astype(np.float32)
    y = (x[:, 0] <= 0).astype(np.int64)
    y[:2] = 5  # a class of two inputs in three dimensions
    lsc = LikelihoodSurpriseCoverage(group="label").fit(Network(model), x, y)
    (note,) = [n for n in lsc.notes_ if n.startswith("class 5")]
    assert note == (
        "class 5: no KDE from 2 inputs x 3 dimensions (fewer inputs than dimensions: their covariance matrix is "
        "singular); its inputs get no LSA"
    ), note
    # a reason idcgen does not word itself is given whole, on one line
    from idcgen.criteria.surprise import kde_failure

    long = "first line of a long reason,\nwhich goes on " + "and on " * 30 + "to its end."
    assert kde_failure(ValueError(long)) == " ".join(long.split())


def test_analyze_force_into_the_same_folder_rewrites_it(trained_lenet, digits_npz, tmp_path):
    """Case 6c: `analyze --force` into a folder holding the same analysis kept the old analysis.json and its
    timings, yet said "analysis saved"."""
    import json

    _, path = trained_lenet
    out = tmp_path / "a"
    args = ("analyze", "--model", path, "--train", digits_npz, "--out", out)
    assert invoke(*args).exit_code == 0
    before = json.loads((out / "analysis.json").read_text())["timings_seconds"]
    written = (out / "analysis.json").stat().st_mtime_ns
    again = invoke(*args, "--force")
    assert again.exit_code == 0 and f"analysis saved to {out} (" in again.output, again.output
    assert (out / "analysis.json").stat().st_mtime_ns != written, "--force left the old analysis.json"
    assert json.loads((out / "analysis.json").read_text())["timings_seconds"] != before


def test_the_readme_test_compares_the_figures_that_matter():
    """Case 7: the README test masked every number, so the ONNX section's figures of an older analysis
    (IDC 33.9 % of 384 combinations, 10 findings) passed beside a run printing 28.4 % of 640 and 5 findings.
    Coverage figures, findings and input counts are compared now; timings and memory still vary."""
    from pathlib import Path

    from test_readme import matches

    printed = (
        "IDC 28.4 % (182 of 640 combinations)  [1000 inputs, layer relu_3, m=8]\n"
        "IDC 28.3% (seeds) -> 45.0% (grown set, 1107 inputs); 5 findings (5 survive uint8 rounding); "
        "2000 execs in 2.7 s\n"
    )
    stale = (
        "IDC 33.9 % (130 of 384 combinations)  [1000 inputs, layer relu_3, m=8]\n"
        "IDC 34.1% (seeds) -> 57.6% (grown set, 1090 inputs); 10 findings (10 survive uint8 rounding); "
        "2000 execs in 2.3 s\n"
    )
    assert not matches(stale, printed)
    assert matches(printed.replace("2.7 s", "9.4 s"), printed)  # another machine's timing
    onnx = "IDC 33.9 % (130 of 384 combinations)"
    root = Path(__file__).resolve().parents[1]
    assert onnx not in (root / "README.md").read_text() + (root / "docs" / "usage.md").read_text()
