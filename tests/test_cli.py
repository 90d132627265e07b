import json

import numpy as np
import pytest
from typer.testing import CliRunner

from idcgen.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def data_files(digits, tmp_path_factory):
    x_train, y_train, x_test, y_test = digits
    folder = tmp_path_factory.mktemp("data")
    np.savez(folder / "train.npz", x=(x_train[:1500, ..., 0] * 255).round().astype(np.uint8), y=y_train[:1500])
    np.savez(folder / "test.npz", x=(x_test[..., 0] * 255).round().astype(np.uint8), y=y_test)
    return folder


def test_layers(trained_lenet):
    _, path = trained_lenet
    result = invoke("layers", "--model", path)
    assert result.exit_code == 0, result.output
    assert "block1_conv1" in result.output and "Conv2D" in result.output and "(None, 28, 28, 4)" in result.output
    assert "default subject layer: block2_pool1" in result.output


def test_analyze_then_coverage(trained_lenet, data_files, tmp_path):
    _, path = trained_lenet
    out = tmp_path / "analysis"
    result = invoke("analyze", "--model", path, "--train", data_files / "train.npz", "--layer", "block2_conv1",
                    "--m", 4, "--clusters", "2-3", "--out", out)
    assert result.exit_code == 0, result.output
    assert "layer block2_conv1" in result.output and (out / "analysis.json").exists()
    meta = json.loads((out / "analysis.json").read_text())
    assert meta["m"] == 4 and meta["config"]["clusters"] == [2, 3] and meta["data"]["n"] == 1500
    result = invoke("coverage", "--analysis", out, "--model", path, "--inputs", data_files / "test.npz", "--json")
    assert result.exit_code == 0, result.output
    got = json.loads(result.output.strip().splitlines()[-1])
    assert 0 < got["idc"] <= 1 and got["total"] == meta["combinations_total"] and got["covered"] >= 1
    from idcgen.analysis import Analysis
    from idcgen.data import fit_to_model, load_inputs
    model, _ = trained_lenet
    expected = Analysis.load(out, model=model).coverage(fit_to_model(load_inputs(data_files / "test.npz"), (28, 28, 1)))
    assert got["covered"] == expected.covered
    text = invoke("coverage", "--analysis", out, "--model", path, "--inputs", data_files / "test.npz")
    assert text.exit_code == 0 and "IDC" in text.output and "%" in text.output


@pytest.mark.parametrize("args, message", [
    (["--m", 9999], "'m' parameter must be an int in the range"),
    (["--layer", "nope"], "unknown layer 'nope'; valid layers:"),
    (["--clusters", "5-2"], "cluster range"),
])
def test_analyze_errors_are_one_line(trained_lenet, data_files, tmp_path, args, message):
    _, path = trained_lenet
    result = invoke("analyze", "--model", path, "--train", data_files / "train.npz", "--out", tmp_path / "a", *args)
    assert result.exit_code == 1
    assert message in result.output
    assert result.output.strip().startswith("error:") and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "a").exists()  # nothing half-written


def test_missing_model_and_bad_inputs(trained_lenet, tmp_path):
    result = invoke("layers", "--model", tmp_path / "missing.h5")
    assert result.exit_code == 1 and "model file not found" in result.output
    _, path = trained_lenet
    empty = tmp_path / "empty"
    empty.mkdir()
    result = invoke("analyze", "--model", path, "--train", empty)
    assert result.exit_code == 1 and "no images" in result.output
    np.save(tmp_path / "rgb.npy", np.zeros((3, 28, 28, 3), np.uint8))
    result = invoke("analyze", "--model", path, "--train", tmp_path / "rgb.npy")
    assert result.exit_code == 1 and "channel" in result.output


def test_coverage_refuses_other_model(trained_lenet, data_files, tmp_path):
    from idcgen.zoo import lenet1
    _, path = trained_lenet
    out = tmp_path / "a"
    assert invoke("analyze", "--model", path, "--train", data_files / "train.npz", "--m", 3, "--out", out).exit_code == 0
    other = tmp_path / "other.keras"
    lenet1().save(other)
    result = invoke("coverage", "--analysis", out, "--model", other, "--inputs", data_files / "test.npz")
    assert result.exit_code == 1 and "made for another model" in result.output


def test_demo_runs_end_to_end(tmp_path):
    result = invoke("demo", "--out", tmp_path / "demo", "--epochs", 2)
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "demo" / "coverage.json").read_text())
    # two epochs of 16 steps reach about 80 %; the bound says training worked (chance is 10 %) without
    # depending on the exact figure, which CPU float rounding moves by a point or two
    assert 0 < summary["coverage"]["idc"] <= 1 and summary["accuracy"] > 0.6
    assert (tmp_path / "demo" / "lenet5.keras").exists() and (tmp_path / "demo" / "analysis" / "analysis.json").exists()


def test_coverage_prints_criterion_notes(trained_lenet, digits, tmp_path):
    # LSC fits one density per class: a class with fewer training inputs than neurons gets none, and the
    # CLI must say so rather than print a bare score.
    _, path = trained_lenet
    x_train, y_train, x_test, _ = digits
    rows = np.concatenate([np.flatnonzero(y_train == 0)[:150], np.flatnonzero(y_train == 1)[:150],
                           np.flatnonzero(y_train == 2)[:3]])
    to_uint8 = lambda a: (a[..., 0] * 255).round().astype(np.uint8)  # noqa: E731
    np.savez(tmp_path / "train.npz", x=to_uint8(x_train[rows]), y=y_train[rows])
    np.savez(tmp_path / "test.npz", x=to_uint8(x_test[:100]))
    result = invoke("coverage", "--model", path, "--inputs", tmp_path / "test.npz", "--train", tmp_path / "train.npz",
                    "--criteria", "lsc")
    assert result.exit_code == 0, result.output
    assert "note: LSC:" in result.output and "class 2" in result.output
