"""Bad inputs and faults of issue 25 at the command line: each refused in one line with exit 1 (or said
in a note), before anything is lost or a model is loaded for nothing."""

import numpy as np
import pytest
from typer.testing import CliRunner

from idcgen.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def npz(digits, tmp_path_factory):
    x_train, y_train, x_test, y_test = digits
    folder = tmp_path_factory.mktemp("data")
    np.savez(folder / "test.npz", x=(x_test[:200, ..., 0] * 255).round().astype(np.uint8), y=y_test[:200])
    one = y_test == y_test[0]
    np.savez(folder / "one_class.npz", x=(x_test[one][:60, ..., 0] * 255).round().astype(np.uint8), y=y_test[one][:60])
    return folder


def test_a_single_valued_option_given_twice_is_refused(trained_lenet, npz, tmp_path):
    """coverage --model A --model B measured B and ignored A."""
    _, path = trained_lenet
    result = invoke(
        "coverage", "--model", tmp_path / "a.keras", "--model", path, "--inputs", npz / "test.npz", "--criteria", "nc"
    )
    assert result.exit_code == 1, result.output
    assert result.output.strip() == "error: --model given twice (only one is used): give it once"


def test_no_validity_with_validity_bounds_is_refused(trained_lenet, npz, tmp_path):
    _, path = trained_lenet
    result = invoke(
        "fuzz",
        "--model",
        path,
        "--seeds",
        npz / "test.npz",
        "--budget",
        64,
        "--no-validity",
        "--alpha",
        0.5,
        "--out",
        tmp_path / "c",
    )
    assert result.exit_code == 1, result.output
    assert (
        result.output.strip().splitlines()[-1].startswith("error: --alpha sets a validity bound, which --no-validity")
    )


def test_coverage_labels_without_train_is_refused(trained_lenet, npz, tmp_path):
    """--labels names the labels of --train's images; coverage of --inputs ignored it silently."""
    _, path = trained_lenet
    (tmp_path / "labels.csv").write_text("id,label\nnothing.png,3\n")
    result = invoke(
        "coverage",
        "--model",
        path,
        "--inputs",
        npz / "test.npz",
        "--criteria",
        "nc",
        "--labels",
        tmp_path / "labels.csv",
    )
    assert result.exit_code == 1, result.output
    assert "error: --labels" in result.output and "drop --labels" in result.output


def test_inspect_of_one_class_writes_its_report_and_ends_cleanly(trained_lenet, npz, tmp_path):
    """Every input of one class: no NAPVD pair; the command crashed formatting None."""
    _, path = trained_lenet
    result = invoke("inspect", "--model", path, "--inputs", npz / "one_class.npz", "--out", tmp_path / "r")
    assert result.exit_code == 0, result.output
    assert "type-1 confusion n/a" in result.output and (tmp_path / "r" / "report.md").exists()


def test_help_shows_brackets_flags_without_types_and_every_option_explained():
    """Rich markup swallowed [ray]; flags showed <bool>; --random-state and coverage --limit had no help;
    convert's usage read {old} {new}."""
    import re

    analyze = invoke("analyze", "--help").output
    assert 'pip install "idcgen[ray]"' in " ".join(analyze.split())
    assert "<bool>" not in analyze and re.search(r"--random-state \S+\s+Seed", analyze)
    assert re.search(r"--limit \S+\s+Use the first N", invoke("coverage", "--help").output)
    assert "convert [OPTIONS] OLD NEW" in invoke("convert", "--help").output
    for name in ("analyze", "coverage", "fuzz", "harden", "prioritize", "inspect", "affinity", "convert"):
        text = invoke(name, "--help").output
        assert not re.search(r"^\s+--[\w-]+(?: <\w+>)?\s*$", text, re.M), f"{name}: an option without help"


@pytest.mark.parametrize("command", ["analyze", "coverage", "inspect", "affinity", "fuzz"])
def test_a_bad_worker_count_is_refused_before_anything_is_loaded(command, tmp_path):
    """--workers 0 or -1 printed "starting -1 Ray worker(s)" after loading the model, then failed."""
    data = {"analyze": ["--train", "x.npz"], "fuzz": ["--seeds", "x.npz", "--budget", 10]}.get(
        command, ["--inputs", "x.npz"]
    )
    for count in (0, -1):
        result = invoke(command, "--model", tmp_path / "missing.keras", *data, "--workers", count)
        assert result.exit_code == 1, result.output
        assert result.output.strip() == f"error: --workers must be an int >= 1. Got {count} instead.", result.output


@pytest.mark.parametrize(
    "command, args",
    [
        ("analyze", ["--train", "nope.npz"]),
        ("coverage", ["--inputs", "nope.npz", "--criteria", "nc"]),
        ("prioritize", ["--inputs", "nope.npz", "--by", "gini", "--out", "o.csv"]),
        ("inspect", ["--inputs", "embedded-mnist:nope"]),
        ("affinity", ["--inputs", "nope"]),
        ("fuzz", ["--seeds", "nope.npz", "--budget", 10]),
    ],
)
def test_inputs_are_checked_before_the_model_is_loaded(command, args, trained_lenet, monkeypatch):
    """Every command spent 13-25 s importing TensorFlow and loading the model before it looked at its inputs."""
    import idcgen.session as session

    _, path = trained_lenet

    def loaded(*a, **k):
        raise AssertionError("the model was loaded before the inputs were checked")

    monkeypatch.setattr(session, "load_networks", loaded)
    monkeypatch.setattr(session, "open_model", loaded)
    result = invoke(command, "--model", path, *args)
    assert result.exit_code == 1, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith(("error: no such file, folder or dataset: nope", "error: unknown split 'nope'")), line


def test_harden_of_a_folder_that_is_no_campaign_says_so(trained_lenet, tmp_path, npz):
    from idcgen.analysis import analyze

    model, path = trained_lenet
    analyze(model, np.load(npz / "test.npz")["x"][..., None] / 255.0, m=2, progress=False).save(tmp_path / "analysis")
    for folder in (tmp_path / "missing", tmp_path / "analysis"):
        result = invoke(
            "harden", "--model", path, "--train", npz / "test.npz", "--test", npz / "test.npz", "--campaign", folder
        )
        assert (
            result.exit_code == 1
            and result.output.strip() == f"error: not a campaign folder (no campaign.json): {folder}"
        )


def test_damaged_or_foreign_model_files_are_named_as_such(trained_lenet, tmp_path):
    """Empty, cut-short or text .keras files reported "File not found" for a file that exists; .h5 ones
    "file signature not found"."""
    _, path = trained_lenet
    whole = path.read_bytes()
    cases = {
        "empty.keras": b"",
        "text.keras": b"not a model\n",
        "cut.keras": whole[: len(whole) // 2],
        "empty.h5": b"",
        "text.h5": b"hello\n",
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        result = invoke("layers", "--model", tmp_path / name)
        assert result.exit_code == 1, result.output
        line = result.output.strip()
        assert line.startswith(f"error: {tmp_path / name} is not a Keras model file, or is damaged: "), line
        assert ("it is empty" in line) == (content == b""), line


def test_an_unknown_layer_class_is_named(trained_lenet, tmp_path):
    import json
    import zipfile

    _, path = trained_lenet
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp_path / "custom.keras", "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                config["config"]["layers"][1]["class_name"] = "MyFancyLayer"
                config["config"]["layers"][1]["module"] = "my_project.layers"
                data = json.dumps(config).encode()
            dst.writestr(item, data)
    result = invoke("layers", "--model", tmp_path / "custom.keras")
    assert result.exit_code == 1
    assert "unknown layer class 'MyFancyLayer'" in result.output and "custom layer" in result.output, result.output


@pytest.mark.parametrize("delimiter", [";", "\t"])
def test_a_label_file_with_another_delimiter_is_read(delimiter, tmp_path):
    """A ';'-delimited CSV got advice (name the columns) that could not work."""
    from pathlib import Path

    from idcgen.data.labelfile import read_labels

    (tmp_path / "labels.csv").write_text(
        delimiter.join(["frame_id", "steering_angle"]) + "\n" + "".join(f"{i}{delimiter}{i / 10}\n" for i in range(3))
    )
    labels, note = read_labels(str(tmp_path / "labels.csv"), [Path(f"{i}.png") for i in range(3)])
    np.testing.assert_allclose(labels, [0.0, 0.1, 0.2])
    assert "column 'steering_angle'" in note


def test_a_full_disk_during_fuzz_names_the_campaign_and_how_to_resume(trained_lenet, npz, tmp_path, monkeypatch):
    """A full disk printed only "[Errno 28] No space left on device"."""
    import errno

    from idcgen.fuzz import store

    _, path = trained_lenet
    write, calls = store.atomic_npz, []

    def full(*args, **kw):
        calls.append(args[0])
        if len(calls) > 2:  # the seeds committed, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(*args, **kw)

    monkeypatch.setattr(store, "atomic_npz", full)
    out = tmp_path / "c"
    result = invoke(
        "fuzz",
        "--model",
        path,
        "--seeds",
        npz / "test.npz",
        "--limit",
        60,
        "--budget",
        640,
        "--batch-size",
        64,
        "--mutators",
        "gauss",
        "--out",
        out,
    )
    assert result.exit_code == 1, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith(f"error: no space left on the device of campaign {out}") and line.endswith(
        f"continue with: idcgen fuzz --resume {out}"
    ), line


def test_images_converted_between_grayscale_and_rgb_are_said_both_ways(tmp_path):
    """Already said both ways on main when checked (issue 25 reported grayscale -> RGB silent): held here."""
    from PIL import Image

    from idcgen.data import load_for_model

    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (8, 8), dtype=np.uint8), "L").save(tmp_path / "g.png")
    Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8), "RGB").save(tmp_path / "c.png")
    notes = {shape[-1]: load_for_model(tmp_path, shape)[0].notes for shape in ((8, 8, 3), (8, 8, 1))}
    assert "1 of 2 images converted from grayscale to RGB (3 channels wanted)" in notes[3]
    assert "1 of 2 images converted from colour to grayscale (1 channel wanted)" in notes[1]


@pytest.mark.parametrize(
    "option, message",
    [
        (["--scale", "bogus"], "error: --scale must be one of"),
        (["--resize", "12"], "error: "),
        (["--crop", "1,2"], "error: "),
        (["--limit", 0], "error: --limit must be a positive int"),
    ],
)
def test_loading_options_are_checked_before_the_model_is_loaded(option, message, trained_lenet, npz, monkeypatch):
    import idcgen.session as session

    _, path = trained_lenet

    def loaded(*a, **k):
        raise AssertionError("the model was loaded before the options were checked")

    monkeypatch.setattr(session, "open_model", loaded)
    result = invoke("coverage", "--model", path, "--inputs", npz / "test.npz", "--criteria", "nc", *option)
    assert result.exit_code == 1, result.output
    assert result.output.strip().startswith(message) and len(result.output.strip().splitlines()) == 1, result.output


def test_every_model_file_is_checked_before_one_is_loaded(trained_lenet, tmp_path, monkeypatch):
    import idcgen.session as session

    _, path = trained_lenet

    def loaded(*a, **k):
        raise AssertionError("a model was loaded before every model file was checked")

    monkeypatch.setattr(session, "load_model", loaded)
    with pytest.raises(Exception, match=f"model file not found: {tmp_path / 'b.keras'}"):
        session.load_networks([path, tmp_path / "b.keras"])
