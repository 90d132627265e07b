"""Labels of image folders as a model sees them: real MNIST digits written as PNG class folders, read by
a trained LeNet through the library and the CLI (docs/design.md: inputs)."""

import json

import numpy as np
from PIL import Image
from typer.testing import CliRunner

from idcgen.cli import app
from idcgen.data import load_for_model

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def write_digits(folder, digits, names=None, rgb=False, per_class=30):
    """The first `per_class` held-out digits 3 and 7 as PNG files in folder/<name>/; returns their true labels."""
    _, _, x_test, y_test = digits
    names = names or {3: "3", 7: "7"}
    labels = []
    for digit, name in names.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i, row in enumerate(np.flatnonzero(y_test == digit)[:per_class]):
            image = Image.fromarray(np.rint(x_test[row, ..., 0] * 255).astype(np.uint8))
            (image.convert("RGB") if rgb else image).save(folder / name / f"{i:03d}.png")
        labels.append(np.full(per_class, digit))
    return np.concatenate([labels[i] for i in np.argsort(list(names.values()))])  # folders in name order


def test_digit_folders_keep_their_classes(trained_lenet, digits, tmp_path):
    model, _ = trained_lenet
    truth = write_digits(tmp_path, digits)
    ds, x = load_for_model(tmp_path, (28, 28, 1), n_classes=10)
    np.testing.assert_array_equal(ds.y, truth)
    predicted = model.predict(x, verbose=0).argmax(axis=1)
    # the oracle's view: with the folder's labels a trained model gets most of these right (0/1 labels: none)
    assert (predicted == ds.y).mean() > 0.5  # LeNet-1 after 2 epochs: about 0.77 on these


def test_cli_says_labels_and_conversion_once(trained_lenet, digits, tmp_path):
    _, path = trained_lenet
    write_digits(tmp_path / "seeds", digits, rgb=True)
    result = invoke(
        "analyze",
        "--model",
        path,
        "--train",
        tmp_path / "seeds",
        "--layer",
        "block2_conv1",
        "--m",
        2,
        "--clusters",
        "2-2",
        "--out",
        tmp_path / "analysis",
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines.count("labels: 3=3, 7=7 (integer folder names)") == 1
    assert lines.count("note: 60 of 60 images converted from colour to grayscale (1 channel wanted)") == 1
    summary = json.loads((tmp_path / "analysis" / "analysis.json").read_text())["data"]
    assert summary["class_counts"] == {"3": 30, "7": 30}


def test_cli_class_names_and_refusal(trained_lenet, digits, tmp_path):
    _, path = trained_lenet
    write_digits(tmp_path / "named", digits, names={3: "three", 7: "seven"})
    names = tmp_path / "names.txt"
    names.write_text("\n".join("zero one two three four five six seven eight nine".split()) + "\n")
    result = invoke(
        "analyze",
        "--model",
        path,
        "--train",
        tmp_path / "named",
        "--class-names",
        names,
        "--layer",
        "block2_conv1",
        "--m",
        2,
        "--clusters",
        "2-2",
        "--out",
        tmp_path / "analysis",
    )
    assert result.exit_code == 0, result.output
    assert "labels: three=3, seven=7 (class names given)" in result.output.splitlines()
    summary = json.loads((tmp_path / "analysis" / "analysis.json").read_text())["data"]
    assert summary["class_counts"] == {"3": 30, "7": 30}

    write_digits(tmp_path / "ints", digits, names={3: "3", 7: "12"}, per_class=2)
    result = invoke("coverage", "--analysis", tmp_path / "analysis", "--model", path, "--inputs", tmp_path / "ints")
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"error: class subfolder {tmp_path / 'ints' / '12'} has label 12 (integer folder names) but the model has "
        "10 classes (0..9); name folders by class index or give the class names in label order (--class-names)"
    ]


def test_fuzz_seeds_from_named_folders(trained_lenet, digits, tmp_path):
    _, path = trained_lenet
    write_digits(tmp_path / "seeds", digits, names={3: "three", 7: "seven"}, per_class=5)
    result = invoke(
        "fuzz",
        "--model",
        path,
        "--seeds",
        tmp_path / "seeds",
        "--class-names",
        "zero,one,two,three,four,five,six,seven,eight,nine",
        "--budget",
        64,
        "--batch-size",
        32,
        "--mutators",
        "gauss",
        "--out",
        tmp_path / "campaign",
    )
    assert result.exit_code == 0, result.output
    assert result.output.splitlines().count("labels: three=3, seven=7 (class names given)") == 1
    config = json.loads((tmp_path / "campaign" / "campaign.json").read_text())["config"]
    assert config["class_names"][3] == "three"
