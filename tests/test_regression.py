"""Regression models (a steering head of one output unit): detection, relevance from the output's
pre-activation, float labels, labels from a CSV beside an image folder, and the regression oracles
(docs/design.md, "Regression models")."""

from pathlib import Path

import keras
import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from idcgen.analysis import RelevanceSettings, analyze
from idcgen.cli import app
from idcgen.data import check_labels, load_inputs
from idcgen.errors import IdcgenError, InputError, ModelError, ParameterError
from idcgen.framework import Network
from idcgen.fuzz.oracle import Execution, make_oracle, needs_labels
from idcgen.relevance import Relevance

runner = CliRunner()
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "udacity"


def steering_model(activation="tanh", seed=0, shape=(8, 8, 1)):
    keras.utils.set_random_seed(seed)
    inp = keras.Input(shape)
    h = keras.layers.Conv2D(4, 3, activation="relu", name="conv")(inp)
    h = keras.layers.Flatten(name="flatten")(h)
    h = keras.layers.Dense(6, activation="relu", name="hidden")(h)
    return keras.Model(inp, keras.layers.Dense(1, activation=activation, name="steer")(h))


def inputs(n=40, shape=(8, 8, 1), seed=1):
    return np.random.default_rng(seed).random((n,) + shape).astype(np.float32)


# --- detection -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ["linear", "tanh", "sigmoid"])
def test_one_output_unit_is_regression(activation):
    network = Network(steering_model(activation))
    assert network.task == "regression" and network.n_classes == 1 and network.logits_layer == "steer"
    x = inputs(5)
    _, (hidden,) = network.forward(x, ("hidden",))
    w, b = network.model.get_layer("steer").get_weights()
    pre = hidden @ w[:, 0] + b[0]
    assert np.allclose(network.logits(x).numpy()[:, 0], pre, atol=1e-5)  # the pre-activation, not tanh(...)
    squash = {"linear": lambda v: v, "tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v))}[activation]
    assert np.allclose(network.predict(x), squash(pre), atol=1e-5)  # the output value, not an argmax
    assert network.predict(x).dtype.kind == "f"


def test_classifiers_stay_classifiers_and_task_overrides():
    inp = keras.Input((4,))
    softmax = keras.Model(inp, keras.layers.Dense(3, activation="softmax")(inp))
    assert Network(softmax).task == "classification" and Network(softmax).n_classes == 3
    linear_one = Network(steering_model("linear"), task="classification")
    assert linear_one.task == "classification" and linear_one.n_classes == 1
    with pytest.raises(ModelError, match=r"--task regression needs a model whose last layer is one output unit"):
        Network(softmax, task="regression")
    with pytest.raises(ModelError, match="the task must be one of classification, regression"):
        Network(softmax, task="steering")


# --- relevance and analysis ----------------------------------------------------------------------------


def test_relevance_starts_from_the_pre_activation_whatever_its_sign():
    network = Network(steering_model("tanh"))
    x = inputs(30)
    rel, act, z = Relevance(network, layer="hidden", eps=1e-9)(x)
    w, b = network.model.get_layer("steer").get_weights()
    pre = act @ w[:, 0] + b[0]
    assert (pre < 0).any() and (pre > 0).any()  # both signs explained, no class picked
    assert np.allclose(z[:, 0], pre, atol=1e-5)
    # LRP-epsilon over the head: R_i = a_i w_i z / (z + eps) = a_i w_i for eps -> 0
    assert np.allclose(rel, act * w[:, 0], atol=1e-4)


def test_analysis_of_a_regression_model_end_to_end():
    network = Network(steering_model("tanh"))
    x = inputs(60)
    y = np.linspace(-0.5, 0.5, len(x))  # steering angles, not whole numbers
    found = analyze(network, x, y, m=3, progress=False)
    assert found.config["task"] == "regression" and found.data["accuracy"] is None
    mse = float(np.mean((network.predict(x).astype(np.float64) - y) ** 2))
    assert found.data["mse"] == pytest.approx(mse, rel=1e-6)
    rel, _, _ = Relevance(network, layer="hidden")(x)
    assert set(found.neurons.tolist()) == set(np.argsort(-rel.sum(0))[:3].tolist())
    assert found.total == np.prod([c.k for c in found.clusters]) and 0 < found.coverage(x).score <= 1
    with pytest.raises(InputError, match="relevance_of='label', correct_only and only_class are for classifiers"):
        analyze(network, x, y, m=3, relevance=RelevanceSettings(correct_only=True), progress=False)


def test_float_labels_regression_yes_classifier_one_line():
    assert check_labels(np.zeros((3, 1)), [0.25, -1.5, 2], task="regression").tolist() == [0.25, -1.5, 2.0]
    with pytest.raises(InputError, match=r"labels must be whole numbers; got 0.25 at index 0 .*regression models"):
        check_labels(np.zeros((3, 1)), [0.25, -1.5, 2])
    with pytest.raises(InputError, match="regression labels must be finite numbers; got nan at index 1"):
        check_labels(np.zeros((2, 1)), [0.1, np.nan], task="regression")


# --- labels from a CSV beside an image folder ----------------------------------------------------------


def frames(folder: Path, n=4, size=(12, 10)):
    """n grey frames whose row r holds the value 10 * r + i (so crops are checkable), named like Udacity's."""
    folder.mkdir()
    ids = [str(1479425441182877835 + 50_000_000 * i) for i in range(n)]
    for i, name in enumerate(ids):
        rows = (10 * np.arange(size[0])[:, None] + i + np.zeros(size)).astype(np.uint8)
        Image.fromarray(rows, "L").save(folder / f"{name}.png")
    return ids


def test_csv_labels_matched_by_file_name_and_crop(tmp_path):
    ids = frames(tmp_path / "frames")
    angles = [-0.37, -0.065, 0.0, 0.125]
    csv = tmp_path / "final_example.csv"
    csv.write_text(
        "frame_id,steering_angle\n"
        + "".join(f"{i},{a}\n" for i, a in zip(reversed(ids), reversed(angles)))
        + "999,0.5\n"
    )  # an id for a frame not in the folder: noted, not used
    ds = load_inputs(tmp_path / "frames", labels=csv, crop="3,2,1,0")
    assert ds.y.dtype == np.float64 and ds.y.tolist() == angles  # in file-name order, whatever the CSV's order
    assert ds.x.shape == (4, 12 - 5, 10 - 1)
    want = np.array([(10 * r + 2) / 255 for r in range(3, 10)])  # rows 3..9 of frame 2, every column
    assert np.allclose(ds.x[2, :, 0], want) and np.allclose(ds.x[2, :, 5], want)
    assert any("1 ids of the file match no image" in note for note in ds.notes)
    named = tmp_path / "named.csv"
    named.write_text("angle_deg,frame,speed\n" + "".join(f"{a * 57},{i}.png,3\n" for i, a in zip(ids, angles)))
    ds = load_inputs(tmp_path / "frames", labels=f"{named}:frame,angle_deg", task="regression")
    assert np.allclose(ds.y, np.array(angles) * 57)


@pytest.mark.parametrize(
    "csv_text, spec_tail, message",
    [
        ("when,speed\n1,2\n", "", r"has no id column that idcgen recognises \(columns: when, speed"),
        ("frame_id,steering_angle\n1,0.1\n", ":frame_id,angle", r"has no target column 'angle'"),
        ("frame_id,steering_angle\n1,0.1\n2,0.2\n", "", r"no id of .* matches an image file name"),
        ("frame_id,steering_angle\n{0},0.1\n", "", r"3 of 4 images have no label in .* \(first: "),
        ("frame_id,steering_angle\n{0},left\n{1},0\n{2},0\n{3},0\n", "", r"holds 'left', not a number"),
    ],
    ids=["no columns", "no named target", "ids match no file", "files without label", "not a number"],
)
def test_bad_label_files_get_one_line(tmp_path, csv_text, spec_tail, message):
    ids = frames(tmp_path / "frames")
    csv = tmp_path / "labels.csv"
    csv.write_text(csv_text.format(*ids))
    with pytest.raises(IdcgenError, match=message):
        load_inputs(tmp_path / "frames", labels=f"{csv}{spec_tail}")


def test_crop_and_labels_refused_where_they_do_not_apply(tmp_path):
    frames(tmp_path / "frames")
    with pytest.raises(ParameterError, match="crop must be TOP,BOTTOM,LEFT,RIGHT"):
        load_inputs(tmp_path / "frames", crop="3,2")
    with pytest.raises(InputError, match="leaves nothing of"):
        load_inputs(tmp_path / "frames", crop="6,6,0,0")
    np.save(tmp_path / "x.npy", np.zeros((2, 4, 4), np.uint8))
    with pytest.raises(InputError, match="--crop applies to folders of images"):
        load_inputs(tmp_path / "x.npy", crop="1,1,1,1")


def test_cli_regression_with_csv_labels(tmp_path):
    ids = frames(tmp_path / "frames", n=24, size=(14, 12))
    csv = tmp_path / "steer.csv"
    csv.write_text("frame_id,steering_angle\n" + "".join(f"{i},{(k - 12) / 30}\n" for k, i in enumerate(ids)))
    model = tmp_path / "steer.keras"
    steering_model("tanh").save(model)
    result = runner.invoke(app, ["layers", "--model", str(model)])
    assert result.exit_code == 0 and "task: regression (one output unit, tanh;" in result.output
    result = runner.invoke(
        app,
        [
            "analyze",
            "--model",
            str(model),
            "--train",
            str(tmp_path / "frames"),
            "--labels",
            str(csv),
            "--crop",
            "3,1,2,0",
            "--resize",
            "8x8",
            "--m",
            "2",
            "--out",
            str(tmp_path / "analysis"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "task: regression" in result.output and "MSE on the labels" in result.output
    assert "labels: column 'steering_angle'" in result.output
    # the same frames and labels given to a classifier: one clear line, exit 1
    inp = keras.Input((8, 8, 1))
    classifier = keras.Model(inp, keras.layers.Dense(3, activation="softmax")(keras.layers.Flatten()(inp)))
    classifier.save(tmp_path / "classifier.keras")
    result = runner.invoke(
        app,
        [
            "analyze",
            "--model",
            str(tmp_path / "classifier.keras"),
            "--train",
            str(tmp_path / "frames"),
            "--labels",
            str(csv),
            "--resize",
            "8x8",
        ],
    )
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert (
        lines[-1].startswith("error: labels must be whole numbers; got -0.4 at index 0") and "regression" in lines[-1]
    )


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared (Udacity frames) not present")
def test_udacity_frames_with_their_steering_csv():
    ds = load_inputs(
        SHARED / "center", labels=SHARED / "final_example.csv", crop="200,0,0,0", resize="66x200", limit=20
    )
    table = dict(line.split(",") for line in (SHARED / "final_example.csv").read_text().splitlines()[1:])
    names = sorted(p.stem for p in (SHARED / "center").glob("*.jpg"))[:20]
    assert ds.x.shape == (20, 66, 200, 3) and ds.y.tolist() == [float(table[n]) for n in names]


# --- regression oracles --------------------------------------------------------------------------------


def run(pred, root_pred, labels=None):
    pred, root_pred = np.asarray(pred, np.float64), np.asarray(root_pred, np.float64)
    labels = np.full(len(pred), np.nan) if labels is None else np.asarray(labels, np.float64)
    return Execution(np.zeros((len(pred), 8, 8, 1), np.float32), pred[:, None], pred, labels, root_pred)


def test_deviation_and_error_oracles():
    execution = run([0.0, 0.25, -0.5, 0.1], [0.0, 0.0, -0.1, 0.35])
    assert make_oracle("deviation")(execution).tolist() == [False, True, True, True]
    assert make_oracle("deviation(threshold=0.3)")(execution).tolist() == [False, False, True, False]
    assert str(make_oracle("deviation(0.3)")) == "deviation(threshold=0.3)"
    labelled = run([0.0, 0.5, -0.5, 0.1], [0.05, 0.1, 0.5, 0.0], labels=[0.0, 0.0, 0.0, 0.0])
    # |pred - label| > 0.2, counted only where the seed itself is within 0.2 of its label
    assert make_oracle("error")(labelled).tolist() == [False, True, False, False]
    assert make_oracle("error(threshold=0.05)")(labelled).tolist() == [False, False, False, True]
    assert needs_labels(make_oracle("error")) and not needs_labels(make_oracle("deviation"))
    with pytest.raises(InputError, match="the error oracle needs labelled seeds"):
        make_oracle("error")(execution)
    combined = make_oracle("deviation(0.1) & ~error(0.2)")
    assert combined(labelled).tolist() == [False, False, True, False]
    classifier = Execution(np.zeros((2, 1)), np.eye(2), np.array([0, 1]), np.array([0, 1]), np.array([0, 0]))
    with pytest.raises(InputError, match="the deviation oracle compares output values and is for regression"):
        make_oracle("deviation")(classifier)
    with pytest.raises(InputError, match="prediction-change oracle never fires on a regression"):
        make_oracle("prediction-change")(execution)
    # a steering output is no probability: "uncertain" flagged every output below 0.5 rad
    with pytest.raises(InputError, match="the uncertain oracle reads class probabilities and is for classifiers"):
        make_oracle("deviation | uncertain(0.9)")(execution)
    with pytest.raises(ParameterError, match="the deviation oracle takes one number"):
        make_oracle("deviation(limit=3)")
    with pytest.raises(ParameterError, match="must be a number >= 0"):
        make_oracle("deviation(-1)")


def test_disagreement_between_regression_models():
    other = Network(steering_model("tanh", seed=5))
    x = inputs(12)
    theirs = other.predict(x).astype(np.float64)
    ours = theirs + np.array([0.0, 0.05, -0.3, 0.5] * 3)
    execution = Execution(x, ours[:, None], ours, np.full(12, np.nan), ours)
    assert make_oracle("disagreement", others=[other])(execution).tolist() == [False, False, True, True] * 3
    assert (
        make_oracle("disagreement(threshold=0.4)", others=[other])(execution).tolist()
        == [False, False, False, True] * 3
    )


# --- the fuzz loop on a regression model ---------------------------------------------------------------


def test_fuzzing_a_steering_model_with_deviation_and_error(tmp_path):
    from idcgen.fuzz.campaign import Campaign
    from idcgen.fuzz.fuzzer import Fuzzer

    network = Network(steering_model("tanh"))
    x = np.round(inputs(40) * 255) / 255
    y = network.predict(x).astype(np.float64) + np.linspace(-0.1, 0.1, len(x))  # every seed within 0.2
    found = analyze(network, x, y, m=3, progress=False)
    fuzzer = Fuzzer(
        found,
        mutators=["gauss(std=0.3)", "brightness(limit=0.5)"],
        oracle="deviation(threshold=0.05)",
        batch_size=40,
        random_state=0,
    )
    campaign = fuzzer.run(x, y, budget=400, out=tmp_path / "camp", progress=False)
    assert campaign.corpus.label.dtype == np.float64 and np.allclose(campaign.corpus.label[:40], y)
    findings = campaign.findings()
    assert len(findings["id"]) > 0
    again = network.predict(findings["x"]).astype(np.float64)  # the model on the finding, run again
    assert np.allclose(findings["prediction"], again, atol=1e-5)
    assert np.allclose(findings["root_prediction"], network.predict(x[findings["root"]]), atol=1e-5)
    assert (np.abs(again - findings["root_prediction"]) > 0.05).all()
    # a finding per (combination, root seed): no two alike
    assert len(set(zip(findings["combination"].tolist(), findings["root"].tolist()))) == len(findings["id"])
    loaded = Campaign.load(tmp_path / "camp", network)
    assert loaded.corpus.prediction.dtype == np.float64 and np.allclose(loaded.corpus.label[:40], y)
    assert loaded.n_findings == campaign.n_findings and loaded.finding_keys == campaign.finding_keys
    # error: against the labels; a classifier's oracle refused before the first step, in one line
    errors = (
        Fuzzer(found, mutators=["gauss(std=0.3)"], oracle="error(threshold=0.15)", batch_size=40, random_state=0)
        .run(x, y, budget=80, progress=False)
        .findings()
    )
    if len(errors.get("id", ())):
        assert (np.abs(network.predict(errors["x"]) - errors["label"]) > 0.15).all()
    with pytest.raises(InputError, match="the misclassification oracle is for classifiers"):
        Fuzzer(found, mutators=["gauss"], oracle="misclassification").run(x, y, budget=40, progress=False)
    with pytest.raises(InputError, match=r"the seeds have no labels, which the error\(threshold=0.2\) oracle needs"):
        Fuzzer(found, mutators=["gauss"], oracle="error").run(x, None, budget=40, progress=False)


def test_fuzz_command_on_steering_frames(tmp_path):
    import json

    ids = frames(tmp_path / "frames", n=20, size=(14, 12))
    csv = tmp_path / "steer.csv"
    csv.write_text("frame_id,steering_angle\n" + "".join(f"{i},{(k - 10) / 30}\n" for k, i in enumerate(ids)))
    steering_model("tanh").save(tmp_path / "steer.keras")
    common = [
        "fuzz",
        "--model",
        str(tmp_path / "steer.keras"),
        "--seeds",
        str(tmp_path / "frames"),
        "--labels",
        str(csv),
        "--crop",
        "4,2,2,2",
        "--resize",
        "8x8",
        "--m",
        "3",
        "--budget",
        "120",
        "--batch-size",
        "40",
        "--mutators",
        "gauss(std=0.3),brightness(limit=0.5)",
    ]
    result = runner.invoke(app, common + ["--out", str(tmp_path / "camp")])
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "camp" / "campaign.json").read_text())["config"]
    assert config["oracle"] == "deviation(threshold=0.2)" and config["task"] == "regression"
    manifest = [json.loads(line) for line in (tmp_path / "camp" / "manifest.jsonl").read_text().splitlines()]
    assert isinstance(manifest[0]["label"], float) and manifest[0]["label"] == pytest.approx(-10 / 30)
    report = (tmp_path / "camp" / "report.md").read_text()
    assert "unique (combination, root seed) pairs" in report
    # the findings per mutator add up to the campaign's, and each finding is drawn beside its seed
    from idcgen.framework import load_model
    from idcgen.fuzz.campaign import Campaign
    from idcgen.report import findings_by_mutator

    result = runner.invoke(app, common + ["--oracle", "deviation(threshold=0.01)", "--out", str(tmp_path / "small")])
    assert result.exit_code == 0, result.output
    report = (tmp_path / "small" / "report.md").read_text()
    c = Campaign.load(tmp_path / "small", Network(load_model(tmp_path / "steer.keras")))
    rows = findings_by_mutator(c)
    assert c.n_findings > 0 and sum(r["findings"] for r in rows) == c.n_findings
    assert all(r["findings"] == c.mutator_stats[r["mutator"]].findings for r in rows)
    moved = np.abs(c.findings()["prediction"] - c.findings()["root_prediction"])
    assert max(r["max_output_change"] for r in rows) == pytest.approx(moved.max())
    assert "## Findings by mutator" in report and (tmp_path / "small" / "findings.png").exists()
    assert len(list((tmp_path / "small" / "exports" / "findings").glob("finding-*.png"))) == c.n_findings
    result = runner.invoke(app, common + ["--oracle", "misclassification", "--out", str(tmp_path / "other")])
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1].startswith("error: the misclassification oracle is for classifiers")


def test_a_lambda_head_is_explained_from_the_layer_below():
    import tensorflow as tf

    inp = keras.Input((6,))
    h = keras.layers.Dense(5, activation="relu", name="hidden")(inp)
    d = keras.layers.Dense(1, name="before_prediction")(h)
    model = keras.Model(inp, keras.layers.Lambda(lambda v: tf.atan(v) * 2, name="prediction")(d))  # DeepXplore's
    network = Network(model)
    assert network.task == "regression" and network.logits_layer == "before_prediction"
    assert "Lambda 'prediction'" in network.head_note and "'before_prediction', the layer below it" in network.head_note
    x = inputs(7, shape=(6,))
    w, b = model.get_layer("before_prediction").get_weights()
    _, (hidden,) = network.forward(x, ("hidden",))
    pre = hidden @ w[:, 0] + b[0]
    assert np.allclose(network.predict(x), np.arctan(pre) * 2, atol=1e-5)  # the model's own output
    rel, _, z = Relevance(network, layer="hidden", eps=1e-9)(x)
    assert np.allclose(z[:, 0], pre, atol=1e-5) and np.allclose(rel, hidden * w[:, 0], atol=1e-4)
    found = analyze(network, x, m=2, clusters=(2,), progress=False)
    assert network.head_note in found.notes


def test_deviation_with_deepTests_lambda_times_mse():
    oracle = make_oracle("deviation(lam=4, mse=0.01)")  # (pred - root)^2 > 0.04: |difference| > 0.2
    assert oracle.threshold == pytest.approx(0.2) and str(oracle) == "deviation(lam=4, mse=0.01)"
    assert str(make_oracle(str(oracle))) == str(oracle)  # the campaign's record reads back
    execution = run([0.0, 0.19, -0.25, 0.5], [0.0, 0.0, 0.0, 0.45])
    assert oracle(execution).tolist() == [False, False, True, False]
    with pytest.raises(ParameterError, match="takes lam=L, mse=M"):
        make_oracle("deviation(lam=4)")


def test_disagreement_of_two_steering_models_without_labels_and_resume(tmp_path):
    import json

    frames(tmp_path / "frames", n=20, size=(14, 12))
    steering_model("tanh").save(tmp_path / "a.keras")
    steering_model("tanh", seed=3).save(tmp_path / "b.keras")
    result = runner.invoke(
        app,
        [
            "fuzz",
            "--model",
            str(tmp_path / "a.keras"),
            "--model",
            str(tmp_path / "b.keras"),
            "--seeds",
            str(tmp_path / "frames"),
            "--crop",
            "4,2,2,2",
            "--resize",
            "8x8",
            "--m",
            "3",
            "--budget",
            "120",
            "--batch-size",
            "40",
            "--mutators",
            "gauss(std=0.3),rotate",
            "--oracle",
            "disagreement(threshold=0.02)",
            "--out",
            str(tmp_path / "camp"),
        ],
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["fuzz", "--resume", str(tmp_path / "camp"), "--budget", "160"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(
        app,
        [
            "harden",
            "--model",
            str(tmp_path / "a.keras"),
            "--train",
            str(tmp_path / "frames"),
            "--campaign",
            str(tmp_path / "camp"),
            "--test",
            str(tmp_path / "frames"),
        ],
    )
    assert result.exit_code == 1 and result.output.strip().splitlines()[-1].startswith("error: harden measures")
    a, b = (
        Network(keras.models.load_model(tmp_path / "a.keras")),
        Network(keras.models.load_model(tmp_path / "b.keras")),
    )
    rows = [json.loads(line) for line in (tmp_path / "camp" / "findings.jsonl").read_text().splitlines()]
    assert rows and all(r["label"] is None for r in rows)  # no labels: null, not NaN
    from idcgen.fuzz.campaign import Campaign

    found = Campaign.load(tmp_path / "camp", a).findings()
    assert (np.abs(a.predict(found["x"]) - b.predict(found["x"])) > 0.02).all()


# --- attacks on a regression model (issue 12, item 4) -------------------------------------------------


def linear_steering(w, b=0.0):
    """f(x) = w . flatten(x) + b: an L-inf step of eps along sign(d * w) moves f by exactly d * eps * |w|_1."""
    inp = keras.Input(w.shape)
    out = keras.layers.Dense(1, name="steer")(keras.layers.Flatten()(inp))
    model = keras.Model(inp, out)
    model.get_layer("steer").set_weights([w.reshape(-1, 1).astype(np.float32), np.array([b], np.float32)])
    return model


def test_fgsm_moves_a_linear_steering_output_by_eps_times_the_l1_norm():
    from idcgen.fuzz.mutators import make_mutator
    from idcgen.fuzz.mutators.base import MutationContext

    w = np.random.default_rng(3).normal(size=(6, 6, 1))
    network = Network(linear_steering(w, b=0.01))
    x = 0.3 + 0.4 * inputs(4, (6, 6, 1))  # inside [0.3, 0.7]: eps 0.1 never clips
    f = network.predict(x)
    # labels: unknown (away from 0, i.e. the sign of f), one above f (push down), one below f (push up)
    labels = np.array([np.nan, np.nan, f[2] + 1.0, f[3] - 1.0])
    direction = np.where(np.isnan(labels), np.sign(f), np.sign(f - labels))
    adv = make_mutator("fgsm(eps=0.1)").mutate(x, np.random.default_rng(0), MutationContext(network, labels))
    assert np.allclose(network.predict(adv) - f, direction * 0.1 * np.abs(w).sum(), atol=1e-4)
    assert np.allclose(np.abs(adv - x), 0.1, atol=1e-6)  # one full L-inf step on every pixel


@pytest.mark.parametrize(
    "spec", ["fgsm(eps=0.05)", "bim(eps=0.05, eps_iter=0.01, nb_iter=5)", "pgd(eps=0.05, eps_iter=0.01, nb_iter=5)"]
)
def test_attacks_move_a_steering_output_more_than_sign_noise(spec):
    from idcgen.fuzz.mutators import make_mutator
    from idcgen.fuzz.mutators.base import MutationContext

    network = Network(steering_model("tanh"))
    x = inputs(32)
    f = network.predict(x)
    ctx = MutationContext(network, np.full(len(x), np.nan))
    adv = make_mutator(spec).mutate(x, np.random.default_rng(0), ctx)
    assert np.abs(adv - x).max() <= 0.05 + 1e-6
    moved = network.predict(adv) - f
    noise = np.clip(x + 0.05 * np.random.default_rng(1).choice([-1.0, 1.0], size=x.shape), 0, 1)
    by_noise = np.abs(network.predict(noise.astype(np.float32)) - f)
    assert np.abs(moved).mean() > 2 * by_noise.mean()
    assert (np.sign(moved) == np.where(f >= 0, 1, -1)).mean() > 0.9  # away from 0 without labels


def test_margin_attacks_refuse_a_regression_model_in_one_line():
    from idcgen.fuzz.mutators import make_mutator
    from idcgen.fuzz.mutators.base import MutationContext

    ctx = MutationContext(Network(steering_model("tanh")), np.full(2, np.nan))
    for name in ("cw", "jsma"):
        with pytest.raises(InputError, match=f"{name} works on classifiers only.*use fgsm, bim or pgd"):
            make_mutator(name).mutate(inputs(2), np.random.default_rng(0), ctx)


def test_a_campaign_of_margin_attacks_on_a_regression_model_is_refused_before_it_starts(tmp_path):
    """fuzz --mutators cw on a steering model started, then ended with "50 steps in a row made no mutant"."""
    from idcgen.fuzz.fuzzer import Fuzzer

    network = Network(steering_model("tanh"))
    x = np.round(inputs(40) * 255) / 255
    found = analyze(network, x, None, m=3, progress=False)
    with pytest.raises(
        ParameterError,
        match=r"^cw cannot run on a regression model \(it works on classification models only\); "
        r"for a regression model use fgsm, bim or pgd",
    ):
        Fuzzer(found, mutators=["gauss", "cw"], oracle="deviation", random_state=0)
    keras.saving.save_model(network.model, tmp_path / "steer.keras")
    np.savez(tmp_path / "x.npz", x=(x * 255).round().astype(np.uint8))
    result = runner.invoke(
        app,
        [
            "fuzz",
            "--model",
            str(tmp_path / "steer.keras"),
            "--seeds",
            str(tmp_path / "x.npz"),
            "--budget",
            "80",
            "--mutators",
            "jsma",
            "--out",
            str(tmp_path / "c"),
        ],
    )
    assert result.exit_code == 1 and result.output.strip().splitlines()[-1].startswith(
        "error: jsma cannot run on a regression model"
    ), result.output
    assert "analysis:" not in result.output  # refused before the analysis and the campaign


def test_fgsm_campaign_with_the_deviation_oracle_finds_steering_errors():
    from idcgen.fuzz.fuzzer import Fuzzer

    network = Network(steering_model("tanh"))
    x = np.round(inputs(40) * 255) / 255
    found = analyze(network, x, None, m=3, progress=False)
    campaign = Fuzzer(
        found, mutators=["fgsm(eps=0.1)"], oracle="deviation(threshold=0.05)", batch_size=40, random_state=0
    ).run(x, None, budget=80, progress=False)
    findings = campaign.findings()
    assert len(findings["id"]) > 0
    assert (np.abs(network.predict(findings["x"]) - findings["root_prediction"]) > 0.05).all()


# --- the zoo's Dave-2 (issue 12, item 7) ----------------------------------------------------------------


def test_dave2_has_nvidias_shapes_and_trains_on_synthetic_frames():
    from idcgen.framework.keras_zoo import DRIVING_MODELS, dave2

    model = dave2()
    shapes = {
        name: tuple(model.get_layer(name).output.shape[1:])
        for name in ("conv1", "conv2", "conv3", "conv4", "conv5", "flatten", "fc1", "fc2", "fc3", "fc4", "steering")
    }
    # valid convolutions on 66x200: (66 - 5) // 2 + 1 = 31, (200 - 5) // 2 + 1 = 98, ...
    assert shapes == {
        "conv1": (31, 98, 24),
        "conv2": (14, 47, 36),
        "conv3": (5, 22, 48),
        "conv4": (3, 20, 64),
        "conv5": (1, 18, 64),
        "flatten": (1152,),
        "fc1": (1164,),
        "fc2": (100,),
        "fc3": (50,),
        "fc4": (10,),
        "steering": (1,),
    }
    by_hand = (
        5 * 5 * 3 * 24
        + 24
        + 5 * 5 * 24 * 36
        + 36
        + 5 * 5 * 36 * 48
        + 48
        + 3 * 3 * 48 * 64
        + 64
        + 3 * 3 * 64 * 64
        + 64
        + 1152 * 1164
        + 1164
        + 1164 * 100
        + 100
        + 100 * 50
        + 50
        + 50 * 10
        + 10
        + 11
    )
    assert model.count_params() == by_hand == 1_595_511
    normalise = keras.Model(model.input, model.get_layer("normalise").output)
    assert np.allclose(normalise(np.array([[[[0.0, 0.5, 1.0]] * 200] * 66], np.float32)).numpy()[0, 0, 0], [-1, 0, 1])
    network = Network(model)
    assert network.task == "regression" and network.logits_layer == "steering"
    x = inputs(8, (66, 200, 3))
    y = np.linspace(-0.5, 0.5, 8).astype(np.float32)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    before = model.evaluate(x, y, verbose=0)
    for _ in range(5):
        model.train_on_batch(x, y)
    assert model.evaluate(x, y, verbose=0) < before
    assert any(isinstance(layer, keras.layers.Dropout) for layer in DRIVING_MODELS["dave2_dropout"]().layers)
    kernel = DRIVING_MODELS["dave2_norminit"]().get_layer("fc1").get_weights()[0]
    # N(0, 0.1^2) cut at two standard deviations: std 0.1 * 0.880 (He-normal would be sqrt(2 / 1152) = 0.042)
    assert abs(kernel.std() - 0.088) < 0.002 and np.abs(kernel).max() <= 0.2
    with pytest.raises(ValueError, match="variant must be orig, norminit or dropout"):
        dave2(variant="wide")


def test_criteria_fit_on_a_steering_model_with_float_labels():
    from idcgen.criteria import make_criterion
    from idcgen.errors import ParameterError

    network = Network(steering_model("tanh"))
    x = inputs(40)
    y = np.linspace(-0.4, 0.4, 40)  # angles: not whole numbers
    nc = make_criterion("nc").fit(network, x, y)
    plain = make_criterion("nc").fit(network, x)  # labels do not change what NC counts
    assert nc.coverage(network, x).score == plain.coverage(network, x).score > 0
    lsc = make_criterion("lsc").fit(network, x, y)  # one group: the regression output has no classes
    assert len(lsc.classes_) == 1 and lsc.coverage(network, x).total == 1000
    with pytest.raises(ParameterError, match="a regression model has none"):
        make_criterion("lsc:group=label").fit(network, x, y)
    # DSC's distance is to the nearest input of another class: said as such, not "got only class 0"
    with pytest.raises(InputError, match="DSC needs training inputs of at least two classes, and a regression model"):
        make_criterion("dsc").fit(network, x, y)


def test_frames_of_another_size_are_resized_to_the_models_input(tmp_path):
    from PIL import Image as PILImage

    from idcgen.data import load_for_model

    frames(tmp_path / "frames", n=3, size=(12, 10))  # 10 wide, 12 high
    ds, x = load_for_model(tmp_path / "frames", (8, 8, 1))
    assert x.shape == (3, 8, 8, 1)
    assert any(n.startswith("3 of 3 images resized to 8x8 (HxW, PIL bilinear)") for n in ds.notes), ds.notes
    first = sorted((tmp_path / "frames").iterdir())[0]
    by_hand = np.asarray(PILImage.open(first).convert("L").resize((8, 8), PILImage.Resampling.BILINEAR)) / 255
    assert np.allclose(x[0, ..., 0], by_hand, atol=1e-6)
    ds, x = load_for_model(tmp_path / "frames", (12, 10, 1))  # already the model's size: nothing said
    assert x.shape == (3, 12, 10, 1) and not any("resized" in n for n in ds.notes) and "resized" not in ds.source


def test_coverage_reports_the_criteria_it_can_and_says_why_one_is_missing(tmp_path):
    # DSC needs two classes, which a steering model has not: the other criteria are still measured and
    # printed, and the missing one is named with its reason (the whole command once failed)
    import json

    steering_model("tanh").save(tmp_path / "steer.keras")
    np.savez(tmp_path / "train.npz", x=inputs(60, seed=3), y=np.linspace(-0.4, 0.4, 60))
    np.save(tmp_path / "test.npy", inputs(30, seed=4))
    base = [
        "coverage",
        "--model",
        str(tmp_path / "steer.keras"),
        "--inputs",
        str(tmp_path / "test.npy"),
        "--train",
        str(tmp_path / "train.npz"),
        "--criteria",
        "nc,dsc,kmnc",
    ]
    result = runner.invoke(app, base)
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert any(line.startswith("NC ") for line in lines) and any(line.startswith("KMNC ") for line in lines)
    assert any(line.startswith("note: DSC not computed: ") and "two classes" in line for line in lines)
    payload = json.loads(runner.invoke(app, base + ["--json"]).output.strip().splitlines()[-1])
    assert set(payload["criteria"]) == {"nc", "kmnc"} and "two classes" in payload["missing"]["dsc"]
    # every criterion missing: one error line, non-zero exit
    result = runner.invoke(app, base[:-1] + ["dsc"])
    assert result.exit_code == 1 and result.output.strip().splitlines()[-1].startswith(
        "error: dsc could not be computed"
    )
    # --train where no criterion reads it is refused, not ignored
    result = runner.invoke(app, base[:-1] + ["nc"])
    assert result.exit_code == 1 and "do not use it: drop --train" in result.output
