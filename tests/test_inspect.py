"""idcgen.inspect (DeepInspect): NAPV and NAPVD on a model whose neurons fire per class by construction, the
cut-offs and the evaluation on hand-made values, the bad inputs, the confusion oracle and the CLI."""

import json
import math

import numpy as np
import pytest

import idcgen
from idcgen.deepinspect import (
    aucec,
    avg_bias,
    avg_confusion_difference,
    confusion_matrix,
    cutoffs,
    napvd,
    precision_recall,
    spearman,
    top_count,
    type1_confusion,
)
from idcgen.errors import InputError, LayerError, ParameterError


def hand_model(dead: bool = False):
    """3 inputs -> Dense(5, relu) `hidden` -> Dense(3) logits -> softmax, weights set so that (x = one-hot class c):

    n0 = x0, n1 = x0 + x1, n2 = x1, n3 = n4 = x2; logit0 = n0 + n1, logit1 = n1 + n2, logit2 = n3 + n4.
    Class 0 fires n0 and n1, class 1 n1 and n2, class 2 n3 and n4; e0 + 0.8 e2 is still class 0 but also
    fires n3 and n4. ``dead`` adds a layer `dead` (kernel and bias 0: constant) that the logits read with weight 0.
    """
    import keras

    L = keras.layers
    inputs = keras.Input((3,))
    h = L.Dense(5, activation="relu", name="hidden")(inputs)
    feed = h
    if dead:
        feed = L.Concatenate(name="both")([h, L.Dense(2, activation="relu", name="dead")(h)])
    z = L.Dense(3, name="logits")(feed)
    model = keras.Model(inputs, L.Activation("softmax", name="softmax")(z))
    w1 = np.array([[1, 1, 0, 0, 0], [0, 1, 1, 0, 0], [0, 0, 0, 1, 1]], np.float32)
    w2 = np.array([[1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [0, 0, 1]], np.float32)
    model.get_layer("hidden").set_weights([w1, np.zeros(5)])
    if dead:
        model.get_layer("dead").set_weights([np.zeros((5, 2)), np.zeros(2)])
        w2 = np.concatenate([w2, np.zeros((2, 3), np.float32)])
    model.get_layer("logits").set_weights([w2, np.zeros(3)])
    return model


def hand_inputs():
    """8 inputs per class: class 0 six e0 and two e0 + 0.8 e2; class 1 eight e1; class 2 eight e2."""
    e = np.eye(3, dtype=np.float32)
    x = np.concatenate(
        [np.repeat(e[:1], 6, 0), np.repeat(e[:1] + 0.8 * e[2:], 2, 0), np.repeat(e[1:2], 8, 0), np.repeat(e[2:], 8, 0)]
    )
    return x, np.repeat([0, 1, 2], 8)


#: P(n active | c) by hand: (neurons, classes)
HAND_NAPV = np.array([[1, 0, 0], [1, 1, 0], [0, 1, 0], [0.25, 0, 1], [0.25, 0, 1]])


@pytest.fixture(scope="module")
def hand():
    return idcgen.Network(hand_model())  # one Network: its traced forward pass is reused


def test_napv_and_napvd_by_construction(hand):
    x, y = hand_inputs()
    result = idcgen.inspect(hand, x)
    assert result.layers == ("hidden",)
    np.testing.assert_allclose(result.napv, HAND_NAPV)
    assert result.per_class.tolist() == [8, 8, 8]
    d = result.napvd
    assert d[0, 1] == pytest.approx(math.sqrt(1 + 0 + 1 + 2 * 0.25**2))
    assert d[0, 2] == pytest.approx(math.sqrt(1 + 1 + 0 + 2 * 0.75**2))
    assert d[1, 2] == pytest.approx(2.0)
    pairs = result.pairs
    assert [(r["a"], r["b"]) for r in pairs] == [(0, 1), (0, 2), (1, 2)]  # smallest NAPVD first
    assert result.labels is None and "confusion" not in result.metrics["all"]
    # above 0.9 the 0.8 of n3 and n4 no longer counts: class 0 fires only n0 and n1
    high = idcgen.inspect(hand, x, threshold=0.9)
    np.testing.assert_allclose(high.napv[3:, 0], [0, 0])
    # per-input scaling of the layer (DeepXplore's): the same here, every row spans [0, 1]
    np.testing.assert_allclose(idcgen.inspect(hand, x, scaling="input").napv, HAND_NAPV)


def test_ground_truth_and_evaluation_on_the_hand_model(hand):
    x, y = hand_inputs()
    y = y.copy()
    y[:2] = 1  # two inputs of true class 1 predicted 0: type1conf(0, 1) = (0 + 2/10) / 2 = 0.1
    result = idcgen.inspect(hand, x, y)
    row = {(r["a"], r["b"]): r for r in result.pairs}
    assert row[0, 1]["type1conf"] == pytest.approx(0.1) and row[0, 2]["type1conf"] == 0 == row[1, 2]["type1conf"]
    assert [k for k, r in row.items() if r["confused"]] == [(0, 1)]  # 0.1 > mean + std of (0.1, 0, 0)
    c = result.metrics["all"]["confusion"]
    assert c["top"] == {"predicted": 1, "hits": 1, "precision": 1.0, "recall": 1.0}  # the top pair is (0, 1)
    assert c["spearman"] == pytest.approx(-math.sqrt(3) / 2)  # scipy with ties: ranks (1,2,3) vs (3,1.5,1.5)
    assert c["aucec"] == pytest.approx((0.5 + 1 + 1) / 3)  # (0,1) inspected first
    assert c["gain"] == pytest.approx(c["aucec"] / 0.5 - 1)


def test_cutoffs_on_hand_made_distributions():
    scores = np.array([0.1] + [1.0] * 9)  # mean 0.91, std 0.27: only 0.1 is below 0.64
    cut = cutoffs(scores, low=True)
    assert cut["std"].tolist() == [True] + [False] * 9 and cut["top"].tolist() == [True] + [False] * 9
    high = cutoffs(-scores, low=False)
    assert high["std"].tolist() == cut["std"].tolist()
    # 200 pairs: the top 1 % is 2 pairs, the lowest two; NaN (undefined pairs) is never chosen
    values = np.arange(200, dtype=float)[::-1].copy()
    values[-1] = np.nan
    top = cutoffs(values, low=True)["top"]
    assert np.flatnonzero(top).tolist() == [197, 198]
    assert top_count(45) == 1 and top_count(4950) == 50 and top_count(0) == 0
    # uniform 1..9: mean 5, std sqrt(20/3) = 2.58: below 2.42 are 1 and 2, above 7.58 are 8 and 9
    uniform = np.arange(1, 10, dtype=float)
    assert np.flatnonzero(cutoffs(uniform, low=True)["std"]).tolist() == [0, 1]
    assert np.flatnonzero(cutoffs(uniform, low=False)["std"]).tolist() == [7, 8]


def test_avg_bias_with_the_triplet_filter_by_hand():
    d = np.zeros((4, 4))
    for (a, b), v in {(0, 1): 1, (0, 2): 4, (0, 3): 4, (1, 2): 4, (1, 3): 2, (2, 3): 4}.items():
        d[a, b] = d[b, a] = v
    bias, th = avg_bias(d)
    values = np.array([1, 4, 4, 4, 2, 4.0])
    assert th == pytest.approx(values.mean() - values.std())  # 1.953
    # (0, 3): c = 1 kept (D(1, 0) = 1 <= th): |1 - 2| / 3; c = 2 skipped (4 and 4 both above th)
    assert bias[0, 3] == pytest.approx(1 / 3)
    assert bias[1, 3] == pytest.approx(0.6) and bias[0, 2] == pytest.approx(0.6) and bias[1, 2] == pytest.approx(0.6)
    assert np.isnan(bias[0, 1]) and np.isnan(bias[2, 3])  # every triplet skipped: undefined
    assert napvd(np.array([[0, 1.0], [0, 1.0]]))[0, 1] == pytest.approx(math.sqrt(2))


def test_ground_truth_by_hand():
    y_true = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2, 2])
    y_pred = np.array([0, 0, 1, 2, 1, 1, 1, 0, 2, 2])
    m = confusion_matrix(y_true, y_pred, 3)
    assert m.tolist() == [[2, 1, 1], [1, 3, 0], [0, 0, 2]]
    t = type1_confusion(m)
    assert t[0, 1] == pytest.approx((0.25 + 0.25) / 2) and t[0, 2] == pytest.approx((0.25 + 0) / 2) and t[1, 2] == 0
    cd = avg_confusion_difference(t)
    assert cd[0, 1] == pytest.approx(abs(t[0, 2] - t[1, 2]))  # the one other class, 2
    assert precision_recall(np.array([1, 1, 0, 0], bool), np.array([1, 0, 1, 0], bool)) == (0.5, 0.5, 1)
    p, r, _ = precision_recall(np.zeros(3, bool), np.ones(3, bool))
    assert math.isnan(p) and r == 0


def test_spearman_and_aucec_against_hand_and_scipy():
    from scipy.stats import spearmanr

    # no ties: 1 - 6 sum d^2 / (n (n^2 - 1)) = 1 - 6 * 4 / 120 = 0.8
    assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=40), rng.integers(0, 5, 40).astype(float)
    a[3] = np.nan
    ok = np.isfinite(a)
    assert spearman(a, b) == pytest.approx(spearmanr(a[ok], b[ok]).statistic)
    assert math.isnan(spearman([1, 2, 3], [1, 1, 1]))
    first = aucec(np.array([1, 2, 3, 4.0]), np.array([1, 0, 0, 0], bool), low=True)
    assert first["aucec"] == pytest.approx(0.875) and first["gain"] == pytest.approx(0.75)
    assert first["optimal"] == pytest.approx(0.875)
    last = aucec(np.array([1, 2, 3, 4.0]), np.array([0, 0, 0, 1], bool), low=True)
    assert last["aucec"] == pytest.approx(0.125) and last["gain"] == pytest.approx(-0.75)
    assert aucec(np.array([1, 2, 3, 4.0]), np.array([0, 0, 0, 1], bool), low=False)["aucec"] == pytest.approx(0.875)


def test_bad_inputs(hand):
    x, y = hand_inputs()
    for bad in (1.5, -0.1, "0.5", float("nan")):
        with pytest.raises(ParameterError, match="'threshold' parameter"):
            idcgen.inspect(hand, x, threshold=bad)
    with pytest.raises(ParameterError, match="'scaling'"):
        idcgen.inspect(hand, x, scaling="global")
    with pytest.raises(LayerError, match="unknown layer 'nope'"):
        idcgen.inspect(hand, x, layers=["nope"])
    # a class with no inputs: its pairs are NaN, said in a note, and left out of the cut-offs
    result = idcgen.inspect(hand, x[:16])
    assert result.per_class.tolist() == [8, 8, 0]
    assert any("no input is predicted as class 2" in n for n in result.notes)
    row = {(r["a"], r["b"]): r for r in result.pairs}
    assert row[0, 2]["napvd"] is None and row[1, 2]["napvd"] is None and row[0, 1]["napvd"] is not None
    assert result.metrics["all"]["pairs"] == 1
    with pytest.raises(InputError, match="predicts only class \\[1\\]"):
        idcgen.inspect(hand, x[8:16])
    # a layer whose neurons are all constant: one line naming it
    with pytest.raises(InputError, match="layer 'dead' gives the same activations for every input"):
        idcgen.inspect(hand_model(dead=True), x)
    assert idcgen.inspect(hand_model(dead=True), x, layers=["hidden"]).napv.shape == (5, 3)
    with pytest.raises(InputError, match="labels must be classes 0..2"):
        idcgen.inspect(hand, x, np.full(len(x), 3))


def test_streaming_matches_a_brute_force_pass_one_and_two_passes(trained_lenet, digits):
    """The whole matrix from every activation at once equals the batched pass, kept in memory or in two passes."""
    model, _ = trained_lenet
    _, _, x_test, y_test = digits
    x, y = x_test[:600], y_test[:600]
    network = idcgen.Network(model, batch_size=128)
    one = idcgen.inspect(network, x, y)
    two = idcgen.inspect(network, x, y, memory_budget=0)
    assert one.passes == 1 and two.passes == 2
    probs, acts = network.forward(x, one.layers)
    a = np.concatenate(acts, axis=1).astype(np.float64)
    lo, hi = a.min(axis=0), a.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1)
    active = ((a - lo) / span > 0.5) & (hi > lo)
    pred = probs.argmax(axis=1)
    expected = np.stack([active[pred == c].mean(axis=0) for c in range(10)], axis=1)
    np.testing.assert_allclose(one.napv, expected, atol=1e-12)
    np.testing.assert_array_equal(one.napv, two.napv)
    assert one.metrics == two.metrics


def test_important_neurons_view(trained_lenet, digits):
    model, _ = trained_lenet
    x_train, y_train, x_test, y_test = digits
    analysis = idcgen.analyze(model, x_train[:400], y_train[:400], layer="block2_conv1", m=4, random_state=0)
    result = idcgen.inspect(model, x_test[:400], y_test[:400], analysis=analysis)
    assert "block2_conv1" in result.layers
    offset = sum(result.widths[: result.layers.index("block2_conv1")])
    assert result.napv_important.shape == (4, 10)
    np.testing.assert_array_equal(result.napv_important, result.napv[offset + analysis.neurons])
    d = napvd(result.napv_important)
    first = result.pairs[0]
    assert first["important_napvd"] == pytest.approx(d[first["a"], first["b"]])
    assert set(result.metrics) == {"all", "important"} and result.metrics["important"]["neurons"] == 4
    assert "confusion" in result.metrics["important"]
    from idcgen.errors import AnalysisMismatchError

    with pytest.raises(AnalysisMismatchError, match="made for another model"):
        idcgen.inspect(hand_model(), np.eye(3, dtype=np.float32), analysis=analysis)


def test_writers(hand, tmp_path):
    import idcgen.deepinspect as module

    x, y = hand_inputs()
    assert idcgen.inspect is module.inspect and module.inspect(hand, x).napv.shape == (5, 3)
    y = y.copy()
    y[:2] = 1
    result = module.inspect(hand, x, y)
    rows = result.to_frame()
    result.write_csv(tmp_path / "p.csv")
    lines = (tmp_path / "p.csv").read_text().splitlines()
    assert lines[0].split(",")[:3] == ["a", "b", "napvd"] and len(lines) == 1 + len(rows) == 4
    data = json.loads(result.write_json(tmp_path / "p.json").read_text())
    assert data["pairs"] == rows and data["metrics"]["all"]["confusion"]["actual"] == 1
    paths = result.plot(tmp_path / "plots")
    assert paths["heatmap"].is_file() and paths["scatter"].is_file()


def test_confusion_oracle():
    from idcgen.fuzz.oracle import Confusion, Execution, make_oracle

    oracle = make_oracle("confusion(3,5)")
    assert isinstance(oracle, Confusion) and str(oracle) == "confusion(3,5)" and make_oracle(str(oracle)) == oracle
    probs = np.full((6, 10), 0.1)
    run = Execution(
        x=np.zeros((6, 2)),
        probabilities=probs,
        predictions=np.array([5, 3, 5, 4, 5, 3]),
        root_labels=np.array([3, 5, 3, 3, -1, -1]),
        root_predictions=np.array([3, 5, 5, 3, 3, 4]),
    )
    # 3->5 yes; 5->3 yes; seed 3 already predicted 5: no; 3->4 no; unlabelled seed predicted 3 -> 5 yes; 4->3 no
    assert oracle(run).tolist() == [True, True, False, False, True, False]
    assert (~make_oracle("confusion(5, 3)"))(run).tolist() == [False, False, True, True, False, True]
    for bad in ("confusion", "confusion(3)", "confusion(3,3)", "confusion(a,b)", "confusion(-1,2)"):
        with pytest.raises(ParameterError, match="confusion"):
            make_oracle(bad)
    with pytest.raises(ParameterError, match="classes 0..9 only"):
        make_oracle("confusion(3,12)")(run)


def test_cli_end_to_end(hand, tmp_path):
    from typer.testing import CliRunner

    from idcgen.cli import app

    path = tmp_path / "hand.keras"
    hand.model.save(path)
    x, y = hand_inputs()
    y = y.copy()
    y[:2] = 1
    np.savez(tmp_path / "test.npz", x=x, y=y)
    out = tmp_path / "report"
    runner = CliRunner()
    res = runner.invoke(
        app,
        [
            "inspect",
            "--model",
            str(path),
            "--inputs",
            str(tmp_path / "test.npz"),
            "--json",
            "--out",
            str(out),
            "--scale",
            "none",
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout.strip().splitlines()[-1])
    assert [(p["a"], p["b"]) for p in data["pairs"]] == [[0, 1], [0, 2], [1, 2]] or [
        (p["a"], p["b"]) for p in data["pairs"]
    ] == [(0, 1), (0, 2), (1, 2)]
    assert data["pairs"][0]["napvd"] == pytest.approx(math.sqrt(2.125))
    assert data["metrics"]["all"]["confusion"]["top"]["precision"] == 1.0
    for name in ("report.md", "report.html", "pairs.csv", "inspect.json", "napvd.png", "scatter.png"):
        assert (out / name).is_file(), name
    res = runner.invoke(
        app,
        [
            "inspect",
            "--model",
            str(path),
            "--inputs",
            str(tmp_path / "test.npz"),
            "--top",
            "2",
            "--out",
            str(out),
            "--scale",
            "none",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "0 - 1: NAPVD 1.458**  type-1 confusion 0.1000 (confused)" in res.stdout
    assert "confusion (all neurons, 5): 1 actual pairs" in res.stdout and "1 - 2" not in res.stdout
    res = runner.invoke(
        app,
        [
            "inspect",
            "--model",
            str(path),
            "--inputs",
            str(tmp_path / "test.npz"),
            "--threshold",
            "2",
            "--out",
            str(out),
            "--scale",
            "none",
        ],
    )
    assert res.exit_code == 1 and "error: --threshold must be a finite float in the range [0.0, 1.0)" in res.output


def test_cli_marks_a_pair_in_the_top_cut_only_as_such(hand, tmp_path):
    """Inputs predicted as two classes give one defined pair: the lowest 1 % holds it, yet it is not below
    mean - 1 std (std 0); the CLI once marked it ** ("also top 1 %") as if it were (an untrained Xception did so)."""
    from typer.testing import CliRunner

    from idcgen.cli import app

    path = tmp_path / "hand.keras"
    hand.model.save(path)
    x, y = hand_inputs()
    np.savez(tmp_path / "two.npz", x=x[:16], y=y[:16])  # classes 0 and 1 only
    args = ["inspect", "--model", str(path), "--inputs", str(tmp_path / "two.npz"), "--scale", "none"]
    res = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "report")])
    assert res.exit_code == 0, res.output
    assert "  0 - 1: NAPVD 1.458+  " in res.stdout and "+ top 1 % only" in res.stdout


def test_cli_names_many_layers_in_short(tmp_path):
    """DenseNet121's 120 inspected layers once made a line of 3,000 characters: past 6, the first 5 and the last."""
    import keras
    from typer.testing import CliRunner

    from idcgen.cli import app

    keras.utils.set_random_seed(0)
    layers = [keras.layers.Dense(4, activation="relu", name=f"h{i}") for i in range(7)]
    model = keras.Sequential([keras.Input((3,)), *layers, keras.layers.Dense(3, activation="softmax")])
    model.save(tmp_path / "deep.keras")
    x = np.random.default_rng(0).normal(size=(24, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    args = ["inspect", "--model", str(tmp_path / "deep.keras"), "--inputs", str(tmp_path / "x.npy"), "--scale", "none"]
    res = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "report")])
    assert res.exit_code == 0, res.output
    assert " neurons of 7 layers (h0, h1, h2, h3, h4 ... h6); NAPVD mean " in res.stdout
    assert "h5" in (tmp_path / "report" / "report.md").read_text()  # the report names every layer


def test_thresholds_per_neuron_and_per_layer():
    from idcgen.deepinspect import activation_limits

    low, high = np.array([0.0, 0.0, 2.0, -1.0]), np.array([1.0, 4.0, 2.0, 1.0])
    neuron = activation_limits(low, high, (3, 1), 0.5, "neuron")
    np.testing.assert_array_equal(neuron, [0.5, 2.0, np.inf, 0.0])  # a constant neuron is never active
    layer = activation_limits(low, high, (3, 1), 0.5, "layer")  # the first layer spans [0, 4]
    np.testing.assert_array_equal(layer, [2.0, 2.0, 2.0, 0.0])


def test_harden_measures_a_pairs_type1_confusion(hand):
    from idcgen.hardening import EVALUATIONS, _table, check_pair, format_table, robustness

    x, y = hand_inputs()
    y = y.copy()
    y[:2] = 1  # type1conf(0, 1) = 0.1, as in the evaluation test above
    fixed = {name: x for name, spec in EVALUATIONS.items() if spec}  # no perturbation: only the pair is new
    out = robustness(hand, x, y, fixed, pair=(0, 1))
    assert out["confusion 0-1"] == pytest.approx(0.1) and out["clean"] == pytest.approx(22 / 24)
    assert robustness(hand, x, y, fixed, pair=(1, 2))["confusion 1-2"] == 0
    rows = [{"arm": "original", "repeat": 0, **out}]
    text = format_table({"table": _table(rows), "rows": rows})
    assert text.splitlines()[0].endswith("| confusion 0-1 |") and text.splitlines()[2].endswith("| 10.00 |")
    assert check_pair(["4", "9"], 10) == (4, 9)
    for bad in (["4"], ["4", "4"], ["4", "10"], ["a", "b"], [1.5, 2]):
        with pytest.raises(ParameterError, match="'pair' parameter must be two different classes in 0..9"):
            check_pair(bad, 10)


def test_deepinspect_recipe_smoke(tmp_path, monkeypatch, digits):
    """recipes/deepinspect.py on the embedded digits, with a LeNet-5 trained on them for one epoch where the
    recipe looks for its model."""
    import importlib
    import sys
    from pathlib import Path

    from idcgen.framework.keras_zoo import lenet5, train

    x_train, y_train, _, _ = digits
    model = lenet5()
    train(model, x_train, y_train, epochs=1, optimizer="adam")
    (tmp_path / "models").mkdir()
    model.save(tmp_path / "models" / "lenet5_embedded_mnist.keras")
    monkeypatch.setenv("IDCGEN_OUTPUTS", str(tmp_path))
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "recipes"))
    forget = lambda: [
        sys.modules.pop(n) for n in list(sys.modules) if n in ("kit", "deepinspect") or n.startswith("kit.")
    ]
    forget()
    try:
        module = importlib.import_module("deepinspect")
        monkeypatch.setattr(sys, "argv", [module.__file__])
        rows = module.main(
            ["--runs", "embedded-mnist:lenet5", "--test", "500", "--train", "500", "--random-draws", "2"]
        )
    finally:
        forget()
    views = [r["neurons"].split(" ")[0] for r in rows["confusion"]]
    assert views == ["all", "important", "layer", "random"] and len(rows["bias"]) == 4
    assert all(r["inputs"] == 500 for r in rows["confusion"])
    text = (tmp_path / "deepinspect" / "confusion.md").read_text()
    assert "Paper (robust CIFAR-10 models, mean - 1 std): precision 0.40-0.63" in text
    assert (tmp_path / "deepinspect" / "embedded-mnist_lenet5" / "report.html").is_file()


def test_a_report_folder_keeps_no_plot_of_an_earlier_run(hand, tmp_path):
    # the folder is replaced on each run: a scatter from a run with labels once stayed beside a run without
    x, y = hand_inputs()
    idcgen.inspect(hand, x, y).write_report(tmp_path)
    assert (tmp_path / "scatter.png").is_file()
    idcgen.inspect(hand, x).write_report(tmp_path)
    assert not (tmp_path / "scatter.png").exists() and (tmp_path / "napvd.png").is_file()


def test_a_model_returning_logits_orders_its_example_pairs_by_the_runner_up_probability():
    """The hand model without its softmax layer: the same predictions, runner-ups and runner-up probabilities
    (its softmax, not its logit, which ordered the report's example pairs before)."""
    import keras

    with_softmax = hand_model()
    logits = keras.Model(with_softmax.inputs, with_softmax.get_layer("logits").output)
    x, y = hand_inputs()
    x = x + np.linspace(0, 0.3, len(x), dtype=np.float32)[:, None] * np.float32([0, 0.5, 1])  # unequal runner-ups
    a = idcgen.inspect(idcgen.Network(with_softmax), x, y, layers=["hidden"])
    b = idcgen.inspect(idcgen.Network(logits), x, y, layers=["hidden"])
    np.testing.assert_array_equal(a.predictions, b.predictions)
    np.testing.assert_array_equal(a.runner_up, b.runner_up)
    np.testing.assert_allclose(b.runner_up_probability, a.runner_up_probability, atol=1e-6)
    assert 0 < b.runner_up_probability.min() and b.runner_up_probability.max() < 0.5
