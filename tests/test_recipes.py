"""Smoke runs of the recipes on the embedded digits, writing into a temporary folder.

The tests share one outputs folder, so the LeNet-5 trained on the 4,000 embedded digits (a few
seconds) is trained once.
"""

import csv
import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    return tmp_path_factory.mktemp("outputs")


SCRIPTS = {p.stem for p in RECIPES.glob("*.py")}


def forget_recipes():
    """Drop the recipe scripts (those of recipes/superseded/ too) and their kit from sys.modules: the next import
    reads its own environment."""
    for name in list(sys.modules):
        if name in SCRIPTS or name.split(".")[0] in ("kit", "superseded"):
            del sys.modules[name]


@pytest.fixture
def recipe(outputs, monkeypatch):
    """Import a recipe module with IDCGEN_OUTPUTS pointing at the temporary folder; forget it afterwards."""
    monkeypatch.setenv("IDCGEN_OUTPUTS", str(outputs))
    monkeypatch.syspath_prepend(str(RECIPES))
    forget_recipes()

    def load(name):
        module = importlib.import_module(name)
        assert importlib.import_module("kit").OUTPUTS == outputs  # kit.paths reads IDCGEN_OUTPUTS at import
        return module

    yield load
    forget_recipes()


@pytest.fixture
def trained(recipe, outputs):
    """``trained(name, ...)``: the recipe models on the embedded digits, trained once per module by
    recipes/train_models.py with its settings (no recipe trains a model it does not find)."""

    def train(*names, dataset="embedded-mnist"):
        train_models = recipe("train_models")
        for name in names:
            if not train_models.model_path(name, dataset).exists():
                train_models.train_one(name, dataset=dataset)

    return train


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


def test_rq1_smoke(recipe, outputs, monkeypatch, trained):
    trained("lenet5")
    rq1 = recipe("rq1_important_vs_random")
    run_recipe(
        rq1, ["--dataset", "embedded-mnist", "--models", "lenet5", "--inputs", "200", "--repetitions", "2"], monkeypatch
    )
    folder = outputs / "rq1_important_vs_random"
    assert (folder / "table2_embedded_mnist.md").is_file() and (folder / "l2_embedded_mnist.png").is_file()
    text = (folder / "table2_embedded_mnist.md").read_text()
    assert "Paper (Table 2" in text and "python recipes/rq1_important_vs_random.py --dataset embedded-mnist" in text

    (row,) = read_csv(folder / "table2_embedded_mnist.csv")
    assert list(row)[:7] == [
        "model",
        "layer",
        "m",
        "L2 important (relevant pixels)",
        "L2 random neurons (relevant pixels)",
        "L2 important (random pixels)",
        "ratio",
    ]
    assert (row["model"], row["layer"], row["m"], row["inputs"]) == ("lenet5", "fc2", "6", "200")
    assert "±" in row["L2 random neurons (relevant pixels)"]
    values = [
        mean_of(row[c])
        for c in (
            "L2 important (relevant pixels)",
            "L2 random neurons (relevant pixels)",
            "L2 important (random pixels)",
        )
    ]
    assert all(v >= 0 for v in values) and sum(values) > 0  # the noise moves some activation
    assert float(row["ratio"]) == pytest.approx(values[0] / values[1], rel=0.02)

    runs = read_csv(folder / "runs_embedded_mnist.csv")
    assert [r["repetition"] for r in runs] == ["0", "1"]
    for run in runs:
        assert all(float(run[key]) >= 0 for key in recipe("kit.probes").QUANTITIES)
    # the important neurons and the perturbation positions are the same in both repetitions, only the noise
    # and the random neurons differ: the important-neuron distances must stay close
    imp = [float(r["important_rel"]) for r in runs]
    assert abs(imp[0] - imp[1]) < 0.5 * max(imp)


def test_rq5_smoke(recipe, outputs, monkeypatch, trained):
    trained("lenet5")
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


@pytest.mark.parametrize(
    "name, argv",
    [
        ("rq1_important_vs_random", ["--m", "0"]),
        ("rq1_important_vs_random", ["--inputs", "0"]),
        ("rq5_layers", ["--repetitions", "0"]),
    ],
    ids=repr,
)
def test_bad_sizes_are_refused_before_any_work(recipe, name, argv, capsys):
    with pytest.raises(SystemExit) as exc:
        recipe(name).main(argv)
    assert exc.value.code == 2
    assert "must be positive" in capsys.readouterr().err


def test_a_missing_model_stops_the_recipe_with_the_command_that_makes_it(recipe, outputs, monkeypatch):
    rq5 = recipe("rq5_layers")
    with pytest.raises(
        SystemExit,
        match=r"lenet4_embedded_mnist.keras not found: train it first with "
        r"`python recipes/train_models.py --dataset embedded-mnist --models lenet4`",
    ):
        run_recipe(rq5, ["--dataset", "embedded-mnist", "--models", "lenet4", "--inputs", "10"], monkeypatch)
    assert not (outputs / "models" / "lenet4_embedded_mnist.keras").exists()  # nothing was trained
    models = recipe("kit.models")
    assert models.training_command("dave2") == "python recipes/train_models.py --dataset udacity --models dave2"
    assert models.training_command("vit_tiny", "cifar10") == "python recipes/train_transformers.py --models vit_tiny"


def test_train_models_smoke(recipe, outputs, monkeypatch):
    module = recipe("train_models")
    run_recipe(module, ["--dataset", "embedded-mnist", "--models", "lenet1", "--epochs", "1"], monkeypatch)
    rows = read_csv(outputs / "train_models" / "accuracy_embedded_mnist.csv")
    assert rows[0]["model"] == "lenet1" and 10 < float(rows[0]["test accuracy %"]) <= 100
    assert (outputs / "models" / "lenet1_embedded_mnist.keras").exists()


def test_rq2_smoke(recipe, outputs, monkeypatch, trained):
    trained("lenet5")
    module = recipe("rq2_idc_by_m")
    run_recipe(
        module,
        [
            "--dataset",
            "embedded-mnist",
            "--models",
            "lenet5",
            "--m",
            "2",
            "4",
            "--repetitions",
            "1",
            "--limit",
            "200",
            "--criteria",
            "nc,kmnc",
        ],
        monkeypatch,
    )
    rows = read_csv(outputs / "rq2_idc_by_m" / "idc_embedded_mnist.csv")
    assert [int(r["m"]) for r in rows] == [2, 4]
    for r in rows:
        u_o, di = mean_of(r["IDC U_O %"]), mean_of(r["IDC U_O+DI %"])
        assert 0 <= u_o <= di <= 100
    crit = read_csv(outputs / "rq2_idc_by_m" / "criteria_embedded_mnist.csv")
    assert [r["criterion"] for r in crit] == ["nc", "kmnc"]


def test_rq3_smoke(recipe, outputs, monkeypatch, trained):
    trained("lenet5")
    module = recipe("rq3_adversarial")
    run_recipe(
        module,
        [
            "--dataset",
            "embedded-mnist",
            "--m",
            "3",
            "--attack-inputs",
            "20",
            "--sets",
            "U_O+noise",
            "U_O+FGSM",
            "--criteria",
            "nc",
        ],
        monkeypatch,
    )
    rows = read_csv(outputs / "rq3_adversarial" / "coverage_embedded_mnist.csv")
    idc = next(r for r in rows if r["criterion"] == "IDC m=3")
    assert 0 <= float(idc["U_O"]) <= float(idc["U_O+FGSM"]) <= 100
    assert any(r["criterion"] == "NC" for r in rows) and any(r["criterion"] == "attack success" for r in rows)


def test_rq6_smoke(recipe, outputs, monkeypatch, trained):
    trained("lenet5")
    module = recipe("rq6_harden")
    run_recipe(
        module,
        [
            "--dataset",
            "embedded-mnist",
            "--seeds",
            "40",
            "--budget",
            "256",
            "--m",
            "4",
            "--epochs",
            "1",
            "--repeats",
            "1",
            "--limit-train",
            "600",
        ],
        monkeypatch,
    )
    rows = read_csv(outputs / "rq6_harden" / "harden.csv")
    assert [r["model"] for r in rows] == ["original", "IDC-guided", "one-step"]
    assert all(0 <= float(r["clean"]) <= 1 for r in rows)
    assert (outputs / "rq6_harden" / "harden.md").read_text().count("Command:") == 1


def test_guidance_smoke(recipe, outputs, monkeypatch, trained_lenet, capsys):
    import numpy as np

    module = recipe("superseded.guidance")
    _, path = trained_lenet
    argv = [
        "--dataset",
        "embedded-mnist",
        "--model-file",
        str(path),
        "--guides",
        "idc",
        "none",
        "--seeds",
        "20",
        "--budget",
        "300",
        "--repeats",
        "2",
        "--fit-train",
        "400",
        "--eval",
        "100",
    ]
    run_recipe(module, argv, monkeypatch)
    folder = outputs / "guidance" / "embedded-mnist"
    runs = read_csv(folder / "runs.csv")
    assert [(r["guide"], r["repetition"]) for r in runs] == [("idc", "0"), ("none", "0"), ("idc", "1"), ("none", "1")]
    assert list(runs[0])[:7] == [
        "guide",
        "repetition",
        "execs",
        "findings",
        "findings_per_1k",
        "flagged_per_1k",
        "reproduce_%",
    ]
    criteria = ["idc", "nc", "kmnc", "nbc", "snac", "tknc", "lsc", "dsc"]
    assert [k for k in runs[0] if k.startswith("cov_")] == [f"cov_{c}" for c in criteria]
    assert [k for k in runs[0] if k.startswith("acc ")] == [f"acc {n}" for n in recipe("kit.study").ROBUSTNESS]
    for r in runs:
        assert int(r["execs"]) == 300 and float(r["reproduce_%"]) == 100.0  # rounding: every finding reproduces
        assert float(r["findings_per_1k"]) == pytest.approx(1000 * int(r["findings"]) / 300)
        assert float(r["flagged_per_1k"]) >= float(r["findings_per_1k"])  # findings are flagged mutants made unique
        assert int(r["unique_pairs"]) <= int(r["findings"]) and int(r["seeds_failed"]) <= 20
        assert int(r["unique_pairs"]) <= int(r["distinct_faults"]) <= int(r["findings"])  # faults split pairs
    # unguided keeps every valid mutant, IDC only those reaching a new combination
    kept = {r["guide"]: int(r["kept"]) for r in runs if r["repetition"] == "0"}
    assert kept["idc"] < kept["none"] <= 300
    summary = read_csv(folder / "guidance.csv")
    assert [r["guide"] for r in summary] == ["idc", "none"]
    assert {"p findings_per_1k vs none", "p unique_pairs vs none", "cov_dsc", "acc FGSM (eps 0.3)"} <= set(summary[0])
    assert float(summary[0]["findings"]) == pytest.approx(np.mean([int(r["findings"]) for r in runs[::2]]))
    text = (folder / "guidance.md").read_text()
    assert "python recipes/superseded/guidance.py --dataset embedded-mnist" in text
    assert "| + kept mutants of `none` |" in text
    # resumable: a second call reuses every run's file
    capsys.readouterr()
    run_recipe(module, argv, monkeypatch)
    assert capsys.readouterr().out.count("done before, kept") == 4
    assert read_csv(folder / "runs.csv") == runs


def test_guidance_seeds_balance_the_classes(recipe):
    import numpy as np

    module = recipe("kit.study")
    y = np.array([0] * 10 + [1] * 3 + [2] * 6)
    picked = module.stratified(y, 8, np.random.default_rng(0))
    assert len(set(picked.tolist())) == 8
    assert np.bincount(y[picked], minlength=3).tolist() == [3, 3, 2]  # classes in turn: 0,1,2 0,1,2 0,1
    assert module.stratified(y, 19, np.random.default_rng(0)).tolist() != list(range(19))  # shuffled within classes
    assert sorted(module.stratified(y, 19, np.random.default_rng(0)).tolist()) == list(range(19))


# ---- CIFAR-10: the paper's network, ResNet-20 and the data path ---------------------------------------

SHARED_CIFAR10 = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10"
needs_cifar10 = pytest.mark.skipif(not SHARED_CIFAR10.is_dir(), reason="../shared/data/cifar10 not present")


def test_precision_agreement_of_a_prepared_twin(recipe, tmp_path):
    """recipes/precision.py's measuring step (what runs on a GPU machine) on a folder as its preparing step
    writes it: fp32 agrees with itself, and bf16's figures are those computed here from its own coverage."""
    torch = pytest.importorskip("torch")
    from idcgen.analysis import analyze
    from idcgen.framework.torch_network import TorchNetwork
    from idcgen.framework.torch_zoo import LeNet5

    precision = recipe("precision")
    x, y = recipe("kit").load_data("test", "embedded-mnist", 400)
    torch.manual_seed(0)
    module = LeNet5().eval()
    network = TorchNetwork(module, device="cpu")
    made = analyze(network, x[:200], m=4, clusters=[2], progress=False)
    precision.write_prepared(tmp_path, module, made, np.round(x * 255).astype(np.uint8), y)
    rows = {r["precision"]: r for r in precision.measure(tmp_path, "embedded-mnist", "cpu")}
    assert list(rows) == ["fp32", "bf16", "fp16"] and rows["fp32"]["inputs"] == 400
    same = {k: rows["fp32"][k] for k in ("predictions_equal_pct", "combinations_equal_pct", "only_this", "only_fp32")}
    assert same == {"predictions_equal_pct": 100.0, "combinations_equal_pct": 100.0, "only_this": 0, "only_fp32": 0}
    half = TorchNetwork(network.source, device="cpu", precision="bf16")
    ids32, ids16 = made.bind(network).ids(x), made.bind(half).ids(x)
    bf16 = rows["bf16"]
    assert bf16["combinations_equal_pct"] == round(100 * float((ids16 == ids32).mean()), 2) < 100  # 95.75 here
    assert bf16["covered"] == len(np.unique(ids16)) and bf16["covered_fp32"] == len(np.unique(ids32))
    assert bf16["only_fp32"] == len(set(ids32.tolist()) - set(ids16.tolist()))
    assert 0 < bf16["max_logit_diff"] < 0.5 and bf16["device"] == "cpu"


def test_cifar10_cnn_is_the_keras_example():
    import numpy as np

    from idcgen.framework import Network
    from idcgen.framework.keras_zoo import cifar10_cnn

    model = cifar10_cnn()
    kinds = [type(layer).__name__ for layer in model.layers]
    conv_block = ["Conv2D", "Activation", "Conv2D", "Activation", "MaxPooling2D", "Dropout"]
    assert kinds == [
        "InputLayer",
        *conv_block,
        *conv_block,
        "Flatten",
        "Dense",
        "Activation",
        "Dropout",
        "Dense",
        "Activation",
    ]
    assert model.output_shape == (None, 10) and model.get_layer("fc1_relu").output.shape[1:] == (512,)
    # 3x3 convolutions 3->32 (same), 32->32 (valid: 32 -> 30 -> pool 15), 32->64 (same), 64->64 (valid:
    # 15 -> 13 -> pool 6), dense 6*6*64 -> 512 -> 10, each with biases
    convs = [(3, 32), (32, 32), (32, 64), (64, 64)]
    expected = sum(9 * a * b + b for a, b in convs) + (6 * 6 * 64 * 512 + 512) + (512 * 10 + 10)
    assert model.count_params() == expected == 1_250_858
    assert Network(model).default_layer() == "fc1_relu"  # the paper's penultimate layer, dropout skipped
    again = cifar10_cnn()
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), again.get_weights()))


def test_resnet20_is_the_standard_cifar_resnet():
    import numpy as np

    from idcgen.framework.keras_zoo import resnet20

    model = resnet20()
    kinds = [type(layer).__name__ for layer in model.layers]
    assert kinds.count("Add") == 9  # 3 stages x 3 basic blocks
    assert kinds.count("Conv2D") == 1 + 9 * 2 + 2  # stem, two per block, two projections
    assert kinds.count("BatchNormalization") == kinds.count("Conv2D")
    assert model.output_shape == (None, 10)
    assert [model.get_layer(f"stage{s}_block3_out").output.shape[1:] for s in (1, 2, 3)] == [
        (32, 32, 16),
        (16, 16, 32),
        (8, 8, 64),
    ]
    assert model.get_layer("stage2_block1_proj").kernel.shape == (1, 1, 16, 32)
    # kernels (no biases before BN): stem, stage 1, stage 2 (first block widens), stage 3, projections
    convs = 9 * 3 * 16 + 6 * 9 * 16 * 16 + (9 * 16 * 32 + 5 * 9 * 32 * 32) + (9 * 32 * 64 + 5 * 9 * 64 * 64)
    convs += 16 * 32 + 32 * 64
    bn = 4 * (16 + 6 * 16 + 7 * 32 + 7 * 64)  # gamma, beta, moving mean and variance per channel
    assert model.count_params() == convs + bn + 64 * 10 + 10 == 274_042
    probs = model.predict(np.random.default_rng(0).random((4, 32, 32, 3), dtype=np.float32), verbose=0)
    assert probs.shape == (4, 10) and np.allclose(probs.sum(axis=1), 1, atol=1e-5)


def test_flip_and_shift_moves_each_image_whole(recipe):
    import numpy as np

    training = recipe("kit.training")
    x = np.random.default_rng(1).random((64, 6, 7, 2), dtype=np.float32) + 1  # no zeros of its own
    out = training.flip_and_shift(x, np.random.default_rng(2), shift=2)
    seen = set()
    for image, moved in zip(x, out):
        matches = []
        for flip in (False, True):
            src = image[:, ::-1] if flip else image
            for dy in range(-2, 3):
                for dx in range(-2, 3):
                    want = np.zeros_like(src)
                    want[max(dy, 0) : 6 + min(dy, 0), max(dx, 0) : 7 + min(dx, 0)] = src[
                        max(-dy, 0) : 6 + min(-dy, 0), max(-dx, 0) : 7 + min(-dx, 0)
                    ]
                    if np.array_equal(moved, want):
                        matches.append((flip, dy, dx))
        assert len(matches) == 1
        seen.add(matches[0])
    assert len({m[0] for m in seen}) == 2 and len(seen) > 20  # both flips and many offsets drawn


@needs_cifar10
def test_cifar10_test_split_labels_and_order(recipe):
    import numpy as np

    kit = recipe("kit")
    x, y = kit.cifar10("test")
    assert x.shape == (10000, 32, 32, 3) and x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
    assert np.bincount(y).tolist() == [1000] * 10
    assert len(set(y[:100].tolist())) == 10  # the class-grouped file is put in a mixed order
    # label order: each of the 100 exact test images (ERAN's copy) has as nearest JPEG-decoded image one
    # of the same label, at about the JPEG error
    with np.load(SHARED_CIFAR10 / "eran_cifar10_test_first100.npz") as exact:
        ex, ey = exact["x_test"].reshape(100, -1) / 255.0, exact["y_test"]
    flat = x.reshape(len(x), -1)
    nearest = ((flat**2).sum(1)[None] - 2 * ex @ flat.T).argmin(axis=1)
    assert (y[nearest] == ey).all()
    assert np.abs(flat[nearest] - ex).mean() < 10 / 255


@needs_cifar10
def test_cifar10_recipes_smoke(recipe, outputs, monkeypatch):
    """The whole cifar10 path on a few inputs: decode training JPEGs from the zip, train, RQ2, RQ3."""
    import numpy as np

    train_models = recipe("train_models")
    run_recipe(
        train_models,
        ["--dataset", "cifar10", "--models", "cifar10_cnn", "--epochs", "1", "--limit", "512"],
        monkeypatch,
    )
    x, y = sys.modules["kit"].cifar10("train", limit=1000)  # the same first images
    assert x.shape == (1000, 32, 32, 3) and len(np.unique(y)) == 10 and 0 <= x.min() and x.max() <= 1
    (row,) = read_csv(outputs / "train_models" / "accuracy_cifar10.csv")
    assert (row["model"], row["params"], row["train images"]) == ("cifar10_cnn", "1250858", "512")
    assert row["optimizer"] == "adam lr 0.001 cosine-decayed" and 0 <= float(row["test accuracy %"]) <= 100
    assert [r["epoch"] for r in read_csv(outputs / "train_models" / "history_cifar10.csv")] == ["1"]
    assert (outputs / "models" / "cifar10_cnn.keras").is_file()

    rq2 = recipe("rq2_idc_by_m")
    run_recipe(
        rq2,
        [
            "--dataset",
            "cifar10",
            "--m",
            "3",
            "--repetitions",
            "1",
            "--limit",
            "100",
            "--train-limit",
            "300",
            "--criteria",
            "nc",
        ],
        monkeypatch,
    )
    (row,) = read_csv(outputs / "rq2_idc_by_m" / "idc_cifar10.csv")
    assert (row["model"], row["layer"], row["m"]) == ("cifar10_cnn", "fc1_relu", "3")
    assert 0 <= mean_of(row["IDC U_O %"]) <= mean_of(row["IDC U_O+DI %"]) <= 100
    assert "analyses of 300 training inputs" in (outputs / "rq2_idc_by_m" / "idc_cifar10.md").read_text()

    rq3 = recipe("rq3_adversarial")
    run_recipe(
        rq3,
        [
            "--dataset",
            "cifar10",
            "--m",
            "3",
            "--attack-inputs",
            "10",
            "--train-limit",
            "300",
            "--sets",
            "U_O+noise",
            "U_O+FGSM",
            "--criteria",
            "",
        ],
        monkeypatch,
    )
    rows = read_csv(outputs / "rq3_adversarial" / "coverage_cifar10.csv")
    idc = next(r for r in rows if r["criterion"] == "IDC m=3")
    assert idc["model"] == "cifar10_cnn" and 0 <= float(idc["U_O"]) <= float(idc["U_O+FGSM"]) <= 100


@pytest.mark.parametrize("name", ["train_models", "rq2_idc_by_m", "rq3_adversarial"])
def test_models_must_fit_the_dataset(recipe, name, capsys):
    with pytest.raises(SystemExit) as exc:
        recipe(name).main(["--dataset", "cifar10", "--models", "lenet5"])
    assert exc.value.code == 2
    assert "do not fit --dataset cifar10" in capsys.readouterr().err


def test_cifar10_tables_keep_the_other_models_rows(recipe, outputs):
    tables = recipe("kit.tables")
    folder = outputs / "train_models"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "merge_check.csv").write_text("model,accuracy\ncifar10_cnn,70.0\nresnet20,80.0\n")
    rows = tables.merged(folder / "merge_check.csv", [{"model": "resnet20", "accuracy": 85.0}], "resnet20")
    assert rows == [{"model": "cifar10_cnn", "accuracy": "70.0"}, {"model": "resnet20", "accuracy": 85.0}]
    # a table of another layout (older columns) is not mixed in
    rows = tables.merged(folder / "merge_check.csv", [{"model": "resnet20", "top-1": 85.0}], "resnet20")
    assert rows == [{"model": "resnet20", "top-1": 85.0}]


UDACITY = Path(__file__).resolve().parents[2] / "shared" / "data" / "udacity"


@pytest.mark.skipif(not (UDACITY / "udacity_test_center_160x120.zip").exists(), reason="needs ../shared/data/udacity")
def test_udacity_split_by_time_and_dave2_smoke(recipe, outputs, monkeypatch):
    module = recipe("train_models")
    data = recipe("kit.data")
    train, test = data.udacity_folder("train"), data.udacity_folder("test")
    with open(UDACITY / "CH2_final_evaluation.csv", newline="") as handle:
        rows = sorted(csv.DictReader(handle), key=lambda r: int(r["frame_id"]))  # time order (ids are timestamps)
    ids = [r["frame_id"] for r in rows]
    fit, held = data.blocked_split(len(ids))
    assert len(held) == 1122 and len(fit) == 4412 and len(ids) == 5614
    assert sorted(p.stem for p in train.iterdir()) == [ids[i] for i in fit]
    assert sorted(p.stem for p in test.iterdir()) == [ids[i] for i in held]
    x, y = data.udacity("test", limit=5)
    assert x.shape == (5, 66, 200, 3) and x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
    assert np.allclose(y, [float(rows[i]["steering_angle"]) for i in held[:5]])
    from idcgen.data import load_inputs  # the kit registers the frames as an idcgen dataset

    named = load_inputs("udacity:test", limit=5, task="regression")
    np.testing.assert_array_equal(named.x, x)
    np.testing.assert_array_equal(named.y, y)
    run_recipe(module, ["--dataset", "udacity", "--epochs", "1", "--limit", "32"], monkeypatch)
    row = read_csv(outputs / "train_models" / "mse_udacity.csv")[0]
    assert row["model"] == "dave2" and float(row["test MSE"]) >= 0 and row["train frames"] == "32"
    assert row["calibration"] == "a=0.907, b=-0.0058" and "gain and bias, shifts <= 8 px" in row["input"]
    assert row["epochs"] == "1" and row["loss"] == "huber 0.1"
    assert (outputs / "models" / "dave2_udacity.keras").exists()


def test_udacity_validation_folds_calibration_and_photometric(recipe):
    validate, data, stats = recipe("udacity_validate"), recipe("kit.data"), recipe("kit.stats")
    training = recipe("kit.training")
    fit, test = data.blocked_split(100, gap=2)  # blocks of 10; test blocks 2 and 7, 2 frames left out each side
    assert test.tolist() == list(range(10, 20)) + list(range(60, 70))
    assert fit.tolist() == list(range(0, 8)) + list(range(22, 58)) + list(range(72, 100))
    fold_fit, held = validate.fold_split(100, fit, (1, 6), gap=2)  # blocks 1 and 6 (0-9, 50-59) held out
    assert fit[held].tolist() == list(range(0, 8)) + list(range(50, 58))
    assert fit[fold_fit].tolist() == list(range(22, 48)) + list(range(72, 100))  # 48, 49 are within 2 of block 6
    with pytest.raises(ValueError, match="test block"):
        validate.fold_split(100, fit, (2, 6))
    assert stats.calibration([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx((2.0, 1.0))
    # cov = mean(p*y) - mean(p) mean(y) = 0.5 - 1.5 * 0.5 = -0.25; var(p) = 1.25: a = -0.2, b = 0.5 + 0.2 * 1.5
    assert stats.calibration([0, 1, 2, 3], [1, 0, 1, 0]) == pytest.approx((-0.2, 0.8))
    x = np.array([[[[0.0, 0.5, 1.0]]]], np.float32)
    rng = np.random.default_rng(0)
    assert np.array_equal(training.photometric(x, rng, gain=0.0, bias=0.0), x)
    out = training.photometric(np.repeat(x, 50, 0), rng)
    assert out.min() >= 0 and out.max() <= 1 and out.dtype == np.float32
    assert np.all(np.abs(out[:, ..., 1] - 0.5) <= 0.5 * 0.2 + 0.1 + 1e-6)  # gain in [0.8, 1.2], bias in [-0.1, 0.1]


def test_udacity_shift_moves_frames_and_corrects_the_angle(recipe):
    training = recipe("kit.training")
    x = np.tile(np.arange(6, dtype=np.float32)[None, None, :, None], (40, 2, 1, 1))  # column index as value
    y = np.zeros(40)
    out, ys = training.shift(x, y, np.random.default_rng(0), limit=2, per_px=0.1)
    dx = np.rint(-ys / 0.1).astype(int)  # scenery moved right by dx px -> steer right by 0.1 rad per px
    assert set(dx) <= {-2, -1, 0, 1, 2} and len(set(dx)) > 1
    for frame, d in zip(out, dx):
        assert frame[0, :, 0].tolist() == np.clip(np.arange(6) - d, 0, 5).tolist()  # edge column repeated
    xs, ys = training.augment(x, y + 0.3, np.random.default_rng(0), {})  # flips only
    flipped = xs[:, 0, 0, 0] == 5
    assert np.allclose(ys[flipped], -0.3) and np.allclose(ys[~flipped], 0.3) and 0 < flipped.sum() < 40


def test_udacity_label_check_tells_a_drive_from_noise(recipe):
    check = recipe("kit.stats").label_check
    drive = 0.3 * np.sin(np.linspace(0, 12, 2000))  # a smooth steering trace
    noise = np.random.default_rng(0).uniform(-0.4, 0.4, 2000)  # what final_example.csv holds
    assert check(drive)["lag1_autocorrelation"] > 0.99 and "agree" in check(drive)["verdict"]
    found = check(noise)
    assert abs(found["lag1_autocorrelation"]) < 0.1 and "look like random values" in found["verdict"]
    assert found["excess_kurtosis"] == pytest.approx(-1.2, abs=0.1)  # uniform: -1.2, normal: 0


@pytest.mark.skipif(not (UDACITY / "udacity_test_center_160x120.zip").exists(), reason="needs ../shared/data/udacity")
def test_udacity_rq_smoke(recipe, outputs, monkeypatch):
    if not (outputs / "models" / "dave2_udacity.keras").exists():  # a quick dave2, as the smoke test above trains
        run_recipe(recipe("train_models"), ["--dataset", "udacity", "--epochs", "1", "--limit", "32"], monkeypatch)
    module = recipe("udacity_rq")
    run_recipe(
        module,
        [
            "--limit",
            "40",
            "--repetitions",
            "1",
            "--rq1-inputs",
            "20",
            "--attack-inputs",
            "10",
            "--criteria",
            "nc",
            "--m",
            "3",
        ],
        monkeypatch,
    )
    (rq1,) = read_csv(outputs / "udacity_rq" / "rq1.csv")
    (rq2,) = read_csv(outputs / "udacity_rq" / "rq2.csv")
    rq3 = read_csv(outputs / "udacity_rq" / "rq3.csv")
    assert rq1["model"] == rq2["model"] == "dave2" and rq2["layer"] == "fc3" and rq2["m"] == "3"
    assert 0 < mean_of(rq2["IDC U_O %"]) <= mean_of(rq2["IDC U_O+DI %"]) <= 100  # a superset covers no less
    assert [r["criterion"] for r in rq3] == ["IDC m=3", "NC", "attack effect"]
    assert "200 relevant pixels" in (outputs / "udacity_rq" / "rq1.md").read_text()


@pytest.mark.skipif(
    not (Path(__file__).resolve().parents[2] / "shared" / "models" / "deepxplore").is_dir(),
    reason="needs ../shared (DeepXplore's MNIST weights and MNIST)",
)
def test_deepxplore_recipe_smoke(recipe, outputs, monkeypatch):
    module = recipe("deepxplore")
    (row,) = run_recipe(
        module,
        ["--seeds", "10", "--budget", "64", "--specs", "deepxplore(constraint='blackout', patches=2, iterations=5)"],
        monkeypatch,
    )
    assert row["seeds"] == 10 and 0 <= row["generator_differences"] <= 10 and row["execs"] == 64
    assert 0 < row["nc_seeds"] <= row["nc_seeds_and_mutants"] <= 1 and 0 < row["nc_campaign"] <= 1
    assert (outputs / "deepxplore_mnist" / "results.jsonl").exists()


def test_deepbase_smoke(recipe, outputs, monkeypatch, trained):
    trained("lenet5")
    module = recipe("deepbase")
    rows = run_recipe(
        module,
        ["--dataset", "embedded-mnist", "--m", "3", "--train-limit", "500", "--inputs", "1000", "--tol", "0.2"],
        monkeypatch,
    )
    folder = outputs / "deepbase" / "embedded_mnist"
    assert [r["run"] for r in rows["timing"]] == ["early stopping", "every input"]
    early, full = rows["timing"]
    # mutual information is computed a second time at twice its inputs at the latest, so the stream runs to the
    # end here; the early run still checked its scores before the end
    assert early["inputs streamed"] == full["inputs streamed"] == 1000
    assert len(early["checks"].split()) > 1 and full["checks"] == "1000"
    assert set(full["largest difference to every input"].split()[1::2]) == {"0.000"}  # the full run against itself
    assert len(rows["top"]) == 3 and all(r["neuron"].endswith(" of fc2") for r in rows["top"])
    scores = {}  # unit -> its rounded Spearman scores in the full run's affinity.csv
    for r in read_csv(folder / "full" / "affinity.csv"):
        if r["measure"] == "spearman" and r["score"]:
            scores.setdefault(r["unit"], set()).add(round(float(r["score"]), 3))
    for r in rows["top"]:
        assert abs(r["Spearman 1"]) >= abs(r["Spearman 2"]) >= abs(r["Spearman 3"])  # best first
        assert {r[f"full-data Spearman {k}"] for k in (1, 2, 3)} <= scores[r["neuron"]]
    assert read_csv(folder / "top.csv")[0]["neuron"] == rows["top"][0]["neuron"]
    assert "python recipes/deepbase.py --dataset embedded-mnist" in (folder / "timing.md").read_text()
    assert (folder / "early" / "report.html").is_file() and (folder / "analysis").is_dir()


def test_the_one_epoch_loop_takes_fractions_stops_and_reports(recipe, capsys):
    training = recipe("kit.training")
    fractions, after = [], []

    def one_epoch(fraction):
        fractions.append(fraction)
        return 1.0 / len(fractions)

    history = training.train_epochs("m", 2.5, one_epoch, lambda: {"test": len(fractions)}, after_epoch=after.append)
    assert fractions == [1.0, 1.0, 0.5] and [h["epoch"] for h in history] == [1, 2, 2.5]
    assert [h["train loss"] for h in history] == [1.0, 0.5, 0.3333] and [h["test"] for h in history] == [1, 2, 3]
    assert after == history and "m epoch 2.5/2.5" in capsys.readouterr().out
    fractions.clear()
    stopped = training.train_epochs("m", 5, one_epoch, dict, stop=lambda seconds: len(fractions) == 2)
    assert len(stopped) == 2 and fractions == [1.0, 1.0]  # stops after the epoch that passes the limit


def test_rq3_attacks_noise_matches_each_inputs_distance(recipe):
    """The matched-noise controls of recipes/rq3_attacks.py: after clipping to [0, 1], each noisy input is as far
    from its seed as the target (L2 or L-inf), for Gaussian and uniform noise; a zero target leaves it as is."""
    rq3 = recipe("rq3_attacks")
    rng = np.random.default_rng(0)
    seeds = (rng.random((6, 8, 8, 1)) > 0.7).astype(np.float32)  # mostly 0 and 1: clipping bites
    for norm, target in (("l2", np.array([0.0, 0.5, 1.0, 2.0, 3.0, 4.0])), ("linf", np.linspace(0, 1, 6))):
        for kind in ("gauss", "uniform"):
            x = rq3.matched_noise(seeds, target, kind, norm, np.random.default_rng(1))
            assert x.min() >= 0 and x.max() <= 1
            l2, linf = rq3.distances(x, seeds)
            np.testing.assert_allclose(l2 if norm == "l2" else linf, target, atol=1e-4)
            np.testing.assert_array_equal(x[0], seeds[0])


def test_rq3_attacks_smoke(recipe, outputs, monkeypatch, capsys):
    run_recipe(recipe("subjects"), ["--dataset", "embedded-mnist", "--copies", "2", "--epochs", "2"], monkeypatch)
    rq3 = recipe("rq3_attacks")
    argv = ["--dataset", "embedded-mnist", "--copies", "0", "1", "--states", "0", "1", "--seeds", "20"]
    argv += ["--fit-train", "500"]
    run_recipe(rq3, argv, monkeypatch)
    folder = outputs / "rq3_attacks" / "embedded-mnist"
    runs = read_csv(folder / "runs.csv")
    sets = ["seeds", "natural", "transform"]
    for attack in rq3.ATTACKS:
        sets += [attack] + [f"{n}-{k}@{attack}" for n in rq3.NOISES for k in rq3.NORMS]
    assert [(r["copy"], r["state"], r["set"]) for r in runs] == [
        (str(c), str(s), name) for c in range(2) for s in range(2) for name in sets
    ]
    by = {(r["copy"], r["state"], r["set"]): r for r in runs}
    for r in runs:
        seeds = by[(r["copy"], r["state"], "seeds")]
        for metric in ("idc_m6", "idc_m8", "idc_m10", "nc"):  # adding inputs never lowers coverage
            assert float(r[metric]) >= float(seeds[metric])
        assert float(r["nlc"]) > 0  # NLC (a covariance's size) may fall as inputs are added: only measured
        if r["kind"] == "matched":  # matched input by input: the medians match too, where clipping allows
            attack = by[(r["copy"], r["state"], r["attack"])]
            assert int(r["added"]) == int(attack["added"]) == 20
            key = f"median_{r['norm']}"
            assert float(r[key]) == pytest.approx(float(attack[key]), rel=0.05, abs=1e-3)
    # an interrupted run resumes from its saved pairs and writes the same table
    first = (folder / "runs.csv").read_text()
    (folder / "runs.csv").unlink()
    run_recipe(rq3, argv, monkeypatch)
    assert (folder / "runs.csv").read_text() == first
    run_recipe(rq3, ["--dataset", "embedded-mnist", "--verdicts"], monkeypatch)
    study = (folder / "study.md").read_text()
    assert (folder / "gains.png").stat().st_size > 0
    section = study[study.index("## The declared family") :].split("\n## ")[0]
    family = [line for line in section.splitlines() if line.startswith("| ")][1:]  # the header left out
    assert len(family) == len(rq3.FAMILY) == 12
    assert all(line.split("|")[3].strip() == "4" for line in family)  # pairs
    table = rq3.family_table(runs)
    gains = rq3.gains(runs, "idc_m6")
    x = [gains[("BIM", c, s)] for c in "01" for s in "01"]
    assert table[2]["attack"] == "BIM" and table[2]["attack gain"] == f"{np.mean(x):.2f}"
