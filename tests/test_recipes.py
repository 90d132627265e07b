"""Smoke runs of the recipes on the embedded digits, writing into a temporary folder.

The tests share one outputs folder, so the LeNet-5 trained on the 4,000 embedded digits (a few
seconds) is trained once.
"""

import csv
import importlib
import sys
from pathlib import Path

import pytest

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    return tmp_path_factory.mktemp("outputs")


@pytest.fixture
def recipe(outputs, monkeypatch):
    """Import a recipe module with IDCGEN_OUTPUTS pointing at the temporary folder; forget it afterwards."""
    monkeypatch.setenv("IDCGEN_OUTPUTS", str(outputs))
    monkeypatch.syspath_prepend(str(RECIPES))
    names = ["common", "train_models"]

    def load(name):
        names.append(name)
        for module in ("common", "train_models", name):  # common reads IDCGEN_OUTPUTS at import
            if module in sys.modules:
                importlib.reload(sys.modules[module])
            else:
                importlib.import_module(module)
        assert sys.modules["common"].OUTPUTS == outputs
        return sys.modules[name]

    yield load
    for name in names:  # the next importer reads its own environment
        sys.modules.pop(name, None)


def read_csv(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def mean_of(cell: str) -> float:
    """'0.66 ± 0.02' or '0.66' -> 0.66"""
    return float(cell.split("±")[0])


def run_recipe(module, argv, monkeypatch):
    """``main(argv)`` as if run as ``python recipes/<name>.py argv`` (the tables record the command line)."""
    monkeypatch.setattr(sys, "argv", [module.__file__, *argv])
    return module.main(argv)


def test_rq1_smoke(recipe, outputs, monkeypatch):
    rq1 = recipe("rq1_important_vs_random")
    run_recipe(rq1, ["--dataset", "embedded-mnist", "--models", "lenet5", "--inputs", "200", "--repetitions", "2"], monkeypatch)
    folder = outputs / "rq1_important_vs_random"
    assert (folder / "table2_embedded_mnist.md").is_file() and (folder / "l2_embedded_mnist.png").is_file()
    text = (folder / "table2_embedded_mnist.md").read_text()
    assert "Paper (Table 2" in text and "python recipes/rq1_important_vs_random.py --dataset embedded-mnist" in text

    (row,) = read_csv(folder / "table2_embedded_mnist.csv")
    assert list(row)[:7] == ["model", "layer", "m", "L2 important (relevant pixels)",
                             "L2 random neurons (relevant pixels)", "L2 important (random pixels)", "ratio"]
    assert (row["model"], row["layer"], row["m"], row["inputs"]) == ("lenet5", "fc2", "6", "200")
    assert "±" in row["L2 random neurons (relevant pixels)"]
    values = [mean_of(row[c]) for c in ("L2 important (relevant pixels)", "L2 random neurons (relevant pixels)",
                                        "L2 important (random pixels)")]
    assert all(v >= 0 for v in values) and sum(values) > 0  # the noise moves some activation
    assert float(row["ratio"]) == pytest.approx(values[0] / values[1], rel=0.02)

    runs = read_csv(folder / "runs_embedded_mnist.csv")
    assert [r["repetition"] for r in runs] == ["0", "1"]
    for run in runs:
        assert all(float(run[key]) >= 0 for key in rq1.QUANTITIES)
    # the important neurons and the perturbation positions are the same in both repetitions, only the noise
    # and the random neurons differ: the important-neuron distances must stay close
    imp = [float(r["important_rel"]) for r in runs]
    assert abs(imp[0] - imp[1]) < 0.5 * max(imp)


def test_rq5_smoke(recipe, outputs, monkeypatch):
    rq5 = recipe("rq5_layers")
    run_recipe(rq5, ["--dataset", "embedded-mnist", "--inputs", "200", "--repetitions", "1"], monkeypatch)
    folder = outputs / "rq5_layers"
    assert (folder / "table5_embedded_mnist.md").is_file() and (folder / "idc_by_layer_embedded_mnist.png").is_file()

    rows = read_csv(folder / "table5_embedded_mnist.csv")
    assert [r["layer"] for r in rows] == ["block1_conv1", "block2_conv1", "fc1", "fc2"]
    assert [r["neurons"] for r in rows] == ["6 channels", "16 channels", "120 units", "84 units"]
    for row in rows:
        o, g = mean_of(row["IDC U_O %"]), mean_of(row["IDC U_O+DI %"])
        assert 0 <= o <= g <= 100
        assert mean_of(row["gap (points)"]) == pytest.approx(g - o, abs=0.011)

    runs = read_csv(folder / "runs_embedded_mnist.csv")
    assert len(runs) == 4
    for run in runs:
        o, g = float(run["IDC U_O"]), float(run["IDC U_O+DI"])
        assert 0 <= o <= g <= 1
        assert int(run["covered U_O"]) <= int(run["covered U_O+DI"]) <= int(run["combinations"])
        assert len(run["k"].split("/")) == int(run["m"]) == 6
        assert all(2 <= int(k) <= 5 for k in run["k"].split("/"))


@pytest.mark.parametrize("name, argv", [("rq1_important_vs_random", ["--m", "0"]),
                                        ("rq1_important_vs_random", ["--inputs", "0"]),
                                        ("rq5_layers", ["--repetitions", "0"])], ids=repr)
def test_bad_sizes_are_refused_before_any_work(recipe, name, argv, capsys):
    with pytest.raises(SystemExit) as exc:
        recipe(name).main(argv)
    assert exc.value.code == 2
    assert "must be positive" in capsys.readouterr().err


def test_train_models_smoke(recipe, outputs, monkeypatch):
    module = recipe("train_models")
    run_recipe(module, ["--dataset", "embedded-mnist", "--models", "lenet1", "--epochs", "1"], monkeypatch)
    rows = read_csv(outputs / "train_models" / "accuracy_embedded_mnist.csv")
    assert rows[0]["model"] == "lenet1" and 10 < float(rows[0]["test accuracy %"]) <= 100
    assert (outputs / "models" / "lenet1_embedded_mnist.keras").exists()


def test_rq2_smoke(recipe, outputs, monkeypatch):
    module = recipe("rq2_idc_by_m")
    run_recipe(module, ["--dataset", "embedded-mnist", "--models", "lenet5", "--m", "2", "4", "--repetitions", "1",
                        "--limit", "200", "--criteria", "nc,kmnc"], monkeypatch)
    rows = read_csv(outputs / "rq2_idc_by_m" / "idc.csv")
    assert [int(r["m"]) for r in rows] == [2, 4]
    for r in rows:
        u_o, di = mean_of(r["IDC U_O %"]), mean_of(r["IDC U_O+DI %"])
        assert 0 <= u_o <= di <= 100
    crit = read_csv(outputs / "rq2_idc_by_m" / "criteria.csv")
    assert [r["criterion"] for r in crit] == ["nc", "kmnc"]


def test_rq3_smoke(recipe, outputs, monkeypatch):
    module = recipe("rq3_adversarial")
    run_recipe(module, ["--dataset", "embedded-mnist", "--m", "3", "--attack-inputs", "20", "--sets", "U_O+noise",
                        "U_O+FGSM", "--criteria", "nc"], monkeypatch)
    rows = read_csv(outputs / "rq3_adversarial" / "coverage.csv")
    idc = next(r for r in rows if r["criterion"] == "IDC m=3")
    assert 0 <= float(idc["U_O"]) <= float(idc["U_O+FGSM"]) <= 100
    assert any(r["criterion"] == "NC" for r in rows) and any(r["criterion"] == "attack success" for r in rows)


def test_rq6_smoke(recipe, outputs, monkeypatch):
    module = recipe("rq6_harden")
    run_recipe(module, ["--dataset", "embedded-mnist", "--seeds", "40", "--budget", "256", "--m", "4", "--epochs", "1",
                        "--repeats", "1", "--limit-train", "600"], monkeypatch)
    rows = read_csv(outputs / "rq6_harden" / "harden.csv")
    assert [r["model"] for r in rows] == ["original", "IDC-guided", "random control"]
    assert all(0 <= float(r["clean"]) <= 1 for r in rows)
    assert (outputs / "rq6_harden" / "harden.md").read_text().count("Command:") == 1
