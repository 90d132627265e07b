"""idcgen.affinity and idcgen.deepbase.hypotheses (DeepBase): measures on units built to equal a hypothesis,
its negation or noise; correlations and mutual information against scipy and scikit-learn; early stopping against
the full-data scores; the built-in hypotheses on hand-made images; bad inputs; the command end to end."""

import json
import math

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from idcgen.deepbase import (
    affinity,
    linear_fit,
    mi_half_width,
    mutual_information,
    parse_measures,
    parse_units,
    pearson,
    spearman,
)
from idcgen.deepbase import hypotheses as H
from idcgen.deepbase.hypotheses import Hypothesis, builtin_hypotheses, evaluate, load_hypotheses
from idcgen.errors import InputError, LayerError, ParameterError

N = 2000


@pytest.fixture(scope="module")
def synthetic():
    """A continuous hypothesis h, a 0/1 one b, and units: h, -h, noise, exp(h) (monotone), b, 1 - b."""
    rng = np.random.default_rng(0)
    h = rng.normal(size=N)
    b = (rng.random(N) < 0.3).astype(float)
    noise = rng.normal(size=N)
    units = np.stack([h, -h, noise, np.exp(h), b, 1 - b], axis=1)
    return units, h, b


# ---- measures ------------------------------------------------------------------------------------------


def test_correlations_of_equal_negated_and_noise_units(synthetic):
    units, h, _ = synthetic
    r, w = pearson(units[:, :3], h[:, None])
    assert r[0, 0] == pytest.approx(1.0) and r[1, 0] == pytest.approx(-1.0)
    assert abs(r[2, 0]) < 4 / math.sqrt(N)  # independent noise: sd 1/sqrt(n), 4 sd bound
    z, step = math.atanh(r[2, 0]), 1.959964 / math.sqrt(N - 3)  # the 95 % Fisher-z interval
    assert w[2, 0] == pytest.approx((math.tanh(z + step) - math.tanh(z - step)) / 2, rel=1e-5)
    rs, _ = spearman(units[:, [0, 1, 3]], h[:, None])
    assert rs[:, 0] == pytest.approx([1.0, -1.0, 1.0])  # exp(h) is monotone in h


def test_correlations_equal_scipy():
    rng = np.random.default_rng(1)
    a = np.maximum(rng.normal(size=(300, 4)), 0)  # ReLU-like: many tied zeros
    hs = np.stack([a[:, 0] + rng.normal(size=300), (rng.random(300) < 0.2).astype(float)], axis=1)
    r, _ = pearson(a, hs)
    rs, ws = spearman(a, hs)
    for i in range(4):
        for j in range(2):
            assert r[i, j] == pytest.approx(stats.pearsonr(a[:, i], hs[:, j])[0], abs=1e-12)
            assert rs[i, j] == pytest.approx(stats.spearmanr(a[:, i], hs[:, j])[0], abs=1e-12)
    z = np.arctanh(rs[0, 0])
    step = 1.959964 * math.sqrt(1.06 / 297)
    assert ws[0, 0] == pytest.approx((math.tanh(z + step) - math.tanh(z - step)) / 2, rel=1e-5)


def test_mutual_information_equals_scikit_learn():
    from sklearn.feature_selection import mutual_info_classif, mutual_info_regression

    rng = np.random.default_rng(2)
    a = np.maximum(rng.normal(size=(700, 5)), 0) * 3
    a[:, 1] = 2 * a[:, 0] + rng.normal(size=700)
    continuous = a[:, 2] + rng.normal(size=700)
    binary = (a[:, 0] + rng.normal(size=700) > 1).astype(float)
    ours, _ = mutual_information(a, continuous, random_state=3)
    np.testing.assert_allclose(ours, mutual_info_regression(a, continuous, random_state=3), rtol=1e-12, atol=1e-12)
    ours, _ = mutual_information(a, binary, random_state=3)
    np.testing.assert_allclose(ours, mutual_info_classif(a, binary.astype(int), random_state=3), rtol=1e-12, atol=1e-12)


def test_mutual_information_of_equal_negated_and_noise_units(synthetic):
    units, h, b = synthetic
    mi, w = mutual_information(units[:, :3], h)
    assert mi[0] > 3 and mi[1] > 3  # KSG of a variable with itself: large, sign-blind
    assert mi[2] < 0.03 and np.isfinite(w).all()
    mi_b, _ = mutual_information(units[:, [4, 5, 2]], b)
    # a unit equal to a 0/1 hypothesis (or its complement) carries all of its entropy
    entropy = -(b.mean() * math.log(b.mean()) + (1 - b.mean()) * math.log(1 - b.mean()))
    assert mi_b[0] == pytest.approx(entropy, abs=0.02) and mi_b[1] == pytest.approx(entropy, abs=0.02)
    assert mi_b[2] < 0.03


def test_linear_model_of_equal_negated_and_noise_units(synthetic):
    units, h, b = synthetic
    for cols in ([0], [1]):  # h and -h: R^2 1
        score, width, base = linear_fit(units[:, cols], h)
        assert score == pytest.approx(1.0) and base == 0.0 and width < 1e-9
    score, _, _ = linear_fit(units[:, [2]], h)
    assert score < 0.01  # noise: R^2 at most about 0 out of sample
    for cols in ([4], [5]):  # b and 1 - b: accuracy 1
        assert linear_fit(units[:, cols], b)[0] == 1.0
    score, width, base = linear_fit(units[:, [2]], b)
    assert base == pytest.approx(max(b.mean(), 1 - b.mean()))
    assert abs(score - base) < 0.03 and 0 <= width < 0.05  # noise: the majority share


def test_linear_model_equals_scikit_learn_on_the_same_folds():
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.model_selection import cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from idcgen.deepbase.statistics import _folds

    rng = np.random.default_rng(4)
    a = np.maximum(rng.normal(size=(600, 6)), 0) * [3, 1, 1, 2, 1, 1]
    continuous = a[:, 2] - a[:, 3] + rng.normal(size=600)
    binary = (a[:, 0] + rng.normal(size=600) > 2).astype(float)
    for h, model, scoring in ((binary, LogisticRegression(), "accuracy"), (continuous, LinearRegression(), "r2")):
        fold = _folds(h, scoring == "accuracy", 0)
        assert np.bincount(fold).tolist() == [120] * 5
        cv = [(np.flatnonzero(fold != f), np.flatnonzero(fold == f)) for f in range(5)]
        ref = cross_val_score(
            make_pipeline(StandardScaler(), model),
            a,
            h.astype(int) if scoring == "accuracy" else h,
            cv=cv,
            scoring=scoring,
        )
        score, width, _ = linear_fit(a, h)
        assert score == pytest.approx(ref.mean(), abs=1e-9)
        assert width == pytest.approx(2.7764451 * ref.std(ddof=1) / math.sqrt(5), abs=1e-9)
    shares = [binary[_folds(binary, True, 0) == f].mean() for f in range(5)]
    assert max(shares) - min(shares) < 0.02  # stratified: every fold keeps the class share


# ---- the stream: a model whose units are hypotheses by construction ----------------------------------


def _unit_model():
    """Flatten -> Dense(3) 'units': unit 0 = brightness (mean pixel), unit 1 = mean of the left half,
    unit 2 = random weights -> Dense(10) logits -> softmax."""
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((28, 28, 1))
    flat = keras.layers.Flatten(name="flat")(inputs)
    units = keras.layers.Dense(3, name="units")(flat)
    logits = keras.layers.Dense(10, name="logits")(units)
    model = keras.Model(inputs, keras.layers.Activation("softmax", name="softmax")(logits))
    w = np.zeros((784, 3), np.float32)
    w[:, 0] = 1 / 784
    left = np.zeros((28, 28), bool)
    left[:, :14] = True
    w[left.ravel(), 1] = 1 / 392
    w[:, 2] = np.random.default_rng(0).normal(size=784) / 28
    model.get_layer("units").set_weights([w, np.zeros(3, np.float32)])
    return model


@pytest.fixture(scope="module")
def digits_all():
    from idcgen.data import fit_to_model, load_inputs

    ds = load_inputs("embedded-mnist:all")
    return fit_to_model(ds, (28, 28, 1)), ds.y


def test_a_unit_equal_to_brightness_scores_one_through_the_model(digits_all):
    x, y = digits_all
    result = affinity(
        _unit_model(), x[:600], y[:600], units="units", measures="pearson,spearman", tol=0, progress=False
    )
    j = [h.name for h in result.hypotheses].index("brightness")
    assert result.scores["pearson"][0, j] == pytest.approx(1.0, abs=1e-5)
    assert result.scores["spearman"][0, j] == pytest.approx(1.0, abs=1e-3)
    assert result.n_seen == 600 and result.checks == [600]
    assert result.describe()[0] == "neuron 0 of units: brightness, Spearman 1.00"
    rows = result.rows()
    assert len(rows) == 2 * 3 * len(result.hypotheses)
    assert {r["measure"] for r in rows} == {"pearson", "spearman"}


def test_early_stopping_reaches_the_full_data_scores_within_tol(digits_all):
    x, y = digits_all
    model = _unit_model()
    tol = 0.05
    full = affinity(model, x, y, units="units", tol=0, progress=False)
    assert full.n_seen == len(x) and full.checks == [len(x)]
    quick = affinity(model, x, y, units="units", measures="pearson,spearman", tol=tol, progress=False)
    assert quick.n_seen < len(x) / 2, quick.checks  # correlations: well before the end
    early = affinity(model, x, y, units="units", tol=tol, progress=False)  # MI and R^2 converge later
    for result in (quick, early):
        for m in result.measures:
            a, b = result.scores[m], full.scores[m]
            assert np.array_equal(np.isnan(a), np.isnan(b)), m
            stopped = result.n_used[m] < len(x)
            assert (result.half_widths[m][stopped] <= tol).all(), m
            diff = np.abs(a - b)[~np.isnan(a)]
            # 95 % intervals: the full-data score lies inside nearly always; allow 1 in 20 outside, none by 2 tol
            assert (diff <= tol).mean() >= 0.95 and (diff <= 2 * tol).all(), (m, np.sort(diff)[-5:])
    assert early.n_used["pearson"].max() < len(x) / 2  # each score stops on its own


def test_mi_early_stopping_bound_by_hand():
    # se 0.02 (half-width 1.96 se); the score moved 0.46 -> 0.50 from 1,000 to 2,000 inputs of 16,000: a drift
    # of 0.04 per doubling, 3 doublings left: 0.0392 sqrt(1 - 2000/16000) + 3 (0.04 + 0.02) = 0.21667
    hw = 0.02 * 1.959963984540054
    width, due = mi_half_width([0.50, 0.50], [hw, hw], [0.46, np.nan], [1000, 0], 2000, 16000, tol=0.05)
    assert width[0] == pytest.approx(hw * math.sqrt(7 / 8) + 3 * 0.06, rel=1e-9)
    assert width[1] == np.inf  # a first computation shows no drift: open
    # due again at the first n' = 2000 * 2^(k/4) >= 4000 where the bound, se shrunk by sqrt(2000/n'), fits in
    # 0.05: with the drift 0.04 at 2000 * 2^2.25 = 9513.7 (0.0483; 0.0639 at 8000); without one (a first
    # computation) at 2000 * 2^1.25 = 4756.8 (0.0440; 0.0523 at 4000)
    assert due.tolist() == [9514, 4757]
    width, due = mi_half_width([0.50], [hw], [0.46], [1000], 16000, 16000, tol=0.05)
    assert width[0] == hw and due[0] == 16000  # on every input: its own interval
    width, _ = mi_half_width([0.50], [hw], [0.46], [1000], 2000, 16000, final=True)
    assert width[0] == hw  # the stream's end: taken as it is


def _identity_units(n_units: int):
    """Input (1 + n_units,) -> Dense 'units' copying inputs 1.. -> Dense(2) -> softmax: unit i = input i + 1."""
    import keras

    inputs = keras.Input((n_units + 1,))
    units = keras.layers.Dense(n_units, name="units")(inputs)
    model = keras.Model(inputs, keras.layers.Activation("softmax")(keras.layers.Dense(2, name="logits")(units)))
    w = np.zeros((n_units + 1, n_units), np.float32)
    w[1:] = np.eye(n_units)
    model.get_layer("units").set_weights([w, np.zeros(n_units, np.float32)])
    return model


def test_early_stopped_mutual_information_stays_within_tol_where_the_estimate_drifts():
    """Units whose nearest-neighbour MI estimate keeps rising with n: h + small noise (it grows until the
    neighbours resolve the noise), and units equal to h on a few inputs and h + noise elsewhere (each
    doubling of n adds about 0.02-0.05 nats, for many doublings). The earlier rule, which extrapolated the
    last change as if it shrank as 1/sqrt(n), stopped four of these at 1,536 to 4,096 of 16,000 inputs, two
    of them 0.090 and 0.134 from the full-data estimate (checked); the drift-per-doubling bound keeps every
    score within tol."""
    n, tol = 16000, 0.05
    rng = np.random.default_rng(4)
    h = rng.normal(size=n)
    units = [h + 0.01 * rng.normal(size=n)]
    units += [np.where(rng.random(n) < p, h, h + rng.normal(size=n)) for p in (0.02, 0.04, 0.06, 0.08)]
    units += [rng.normal(size=n)]  # independent: MI about 0
    x = np.column_stack([h] + units).astype(np.float32)
    model = _identity_units(len(units))
    hyp = {"h": lambda x, y: x[:, 0]}
    full = affinity(model, x, None, units="units", hypotheses=hyp, measures="mi", tol=0, progress=False)
    early = affinity(model, x, None, units="units", hypotheses=hyp, measures="mi", tol=tol, progress=False)
    diff = np.abs(early.scores["mi"] - full.scores["mi"])[:, 0]
    assert (diff <= tol).all(), (diff, early.n_used["mi"][:, 0])
    used = early.n_used["mi"][:, 0]
    assert (used < n).sum() >= 4 and used[-1] <= n / 2, used  # not vacuous: most stop before the end
    # the drift is real: the near-copy's estimate on the first 2,000 inputs is far below the full-data one
    assert full.scores["mi"][0, 0] - mutual_information(x[:2000, 1:2], x[:2000, 0])[0][0] > tol


def test_a_silent_unit_keeps_its_scores_undefined(digits_all):
    import keras

    x, y = digits_all
    model = _unit_model()
    w, _ = model.get_layer("units").get_weights()
    w[:, 2] = 0  # unit 2 is constant 0
    model.get_layer("units").set_weights([w, np.zeros(3, np.float32)])
    result = affinity(model, x[::12], y[::12], units="units:0,2", measures="pearson,mi", tol=0, progress=False)
    assert np.isnan(result.scores["pearson"][1]).all() and not np.isnan(result.scores["pearson"][0]).any()
    assert (result.scores["mi"][1] == 0).all()
    for measure in ("pearson", "mi"):  # said so, not "Pearson nan"
        assert result.describe(measure=measure)[1] == (
            "neuron 2 of units: constant unit (the same activation on every input: no hypothesis can explain it)"
        )
    del keras


def test_a_regression_model_gets_the_label_as_hypothesis(digits_all):
    import keras

    x, _ = digits_all
    keras.utils.set_random_seed(0)
    inputs = keras.Input((28, 28, 1))
    units = keras.layers.Dense(2, name="units")(keras.layers.Flatten()(inputs))
    model = keras.Model(inputs, keras.layers.Dense(1, name="steer")(units))
    model.get_layer("units").set_weights([np.full((784, 2), 1 / 784, np.float32) * [1, -1], np.zeros(2, np.float32)])
    x = x[::10]
    steering = x.mean(axis=(1, 2, 3)).astype(np.float64)  # a target equal to the brightness
    result = affinity(model, x, steering, units="units", measures="pearson,linear", tol=0, progress=False)
    assert result.hypotheses[0].name == "label" and "class_0" not in [h.name for h in result.hypotheses]
    assert result.scores["pearson"][:, 0] == pytest.approx([1.0, -1.0], abs=1e-5)
    assert result.scores["linear"][0, 0] == pytest.approx(1.0, abs=1e-6) and not result.binary[0]  # R^2
    unlabelled = affinity(model, x, None, units="units", measures="pearson", tol=0, progress=False)
    assert unlabelled.y_source == "predictions" and "predictions" in unlabelled.notes[0]


# ---- built-in hypotheses on hand-made images -----------------------------------------------------------


def _images():
    half = np.zeros((4, 4))
    half[:, :2] = 1.0  # left half bright
    flat = np.full((4, 4), 0.3)
    dot = np.zeros((4, 4))
    dot[1, 3] = 1.0  # one bright pixel, row 1, column 3
    return np.stack([half, flat, dot])[..., None]


@pytest.mark.parametrize(
    "func, expected",
    [
        (H.brightness, [0.5, 0.3, 1 / 16]),
        (H.contrast, [0.5, 0.0, math.sqrt(15) / 16]),
        (H.ink, [0.5, 0.0, 1 / 16]),
        (H.centre_x, [1 / 6, 0.5, 1.0]),  # columns 0 and 1 of 0..3: mean 0.5 / 3
        (H.centre_y, [0.5, 0.5, 1 / 3]),
        (H.edge_density, [3 / 9, 0.0, 1 / 9]),  # 3x3 positions; the step between columns 1 and 2 in 3 rows
        (H.symmetry, [0.0, 1.0, 1 - 2 / 16]),  # the mirror of the dot differs at 2 of 16 pixels
    ],
)
def test_builtin_image_hypotheses_by_hand(func, expected):
    x = _images()
    np.testing.assert_allclose(func(x, None), expected, atol=1e-12)
    np.testing.assert_allclose(func(x.reshape(3, 16), None), expected, atol=1e-12)  # flat square images


def test_builtin_library_classes_colour_and_label():
    lib = builtin_hypotheses(n_classes=4, channels=3)
    assert [h.name for h in lib] == [
        "class_0",
        "class_1",
        "class_2",
        "class_3",
        "brightness",
        "contrast",
        "ink",
        "centre_x",
        "centre_y",
        "edges",
        "symmetry",
        "red_dominant",
        "green_dominant",
        "blue_dominant",
    ]
    by = {h.name: h for h in lib}
    assert by["class_3"].words == "class 3 one-vs-rest"
    np.testing.assert_array_equal(evaluate(by["class_3"], np.zeros((3, 2, 2, 3)), np.array([0, 3, 3])), [0, 1, 1])
    x = np.zeros((2, 2, 2, 3))
    x[0, ..., 0] = 0.9  # red image
    x[1, ..., 2] = 0.4  # blue image
    x[1, 0, 0, 1] = 0.2
    assert evaluate(by["red_dominant"], x, None).tolist() == [1, 0]
    assert evaluate(by["blue_dominant"], x, None).tolist() == [0, 1]
    assert evaluate(by["brightness"], x, None) == pytest.approx([0.3, (0.4 * 4 + 0.2) / 12])  # grey = channel mean
    grey_lib = [h.name for h in builtin_hypotheses(n_classes=2, channels=1)]
    assert "red_dominant" not in grey_lib
    steer = builtin_hypotheses(task="regression", channels=3)
    assert steer[0].name == "label" and evaluate(steer[0], np.zeros((2, 2, 2, 3)), np.array([0.1, -0.2])).tolist() == [
        0.1,
        -0.2,
    ]


# ---- bad inputs ------------------------------------------------------------------------------------------


def _raises(x, y):
    raise ValueError("boom")


@pytest.mark.parametrize(
    "func, message",
    [
        (_raises, r"hypothesis 'bad' raised ValueError: boom on a batch of 3 inputs"),
        (
            lambda x, y: np.zeros((len(x), 2)),
            r"hypothesis 'bad' returned shape \(3, 2\) for a batch of 3 inputs; "
            r"expected \(3,\)",
        ),
        (lambda x, y: np.full(len(x), np.nan), r"hypothesis 'bad' returned NaN or inf for 3 of 3 inputs"),
        (lambda x, y: "text", r"hypothesis 'bad' returned str, not numbers"),
    ],
)
def test_a_bad_hypothesis_is_named_in_one_line(func, message):
    with pytest.raises(InputError, match=message) as info:
        evaluate(Hypothesis("bad", func), np.zeros((3, 4, 4, 1)), np.zeros(3))
    assert "\n" not in str(info.value)


def test_hypotheses_file(tmp_path):
    table = tmp_path / "table.py"
    table.write_text(
        "import numpy as np\n\ndef helper(x, y):\n    return x.mean(axis=(1, 2, 3))\n\n"
        "HYPOTHESES = {'dark': lambda x, y: 1 - helper(x, y)}\n"
    )
    assert [h.name for h in load_hypotheses(table)] == ["dark"]
    plain = tmp_path / "plain.py"
    plain.write_text(
        "from numpy import mean\n\ndef top_half(x, y):\n    '''Ink in the top half.'''\n"
        "    return x[:, : x.shape[1] // 2].mean(axis=(1, 2, 3))\n\ndef _private(x, y):\n    return 0\n"
    )
    found = load_hypotheses(plain)
    assert [(h.name, h.words) for h in found] == [("top_half", "Ink in the top half")]  # imported `mean` left out
    broken = tmp_path / "broken.py"
    broken.write_text("def f(x, y:\n")
    with pytest.raises(ParameterError, match="could not run hypotheses file .*broken.py: SyntaxError"):
        load_hypotheses(broken)
    empty = tmp_path / "empty.py"
    empty.write_text("X = 1\n")
    with pytest.raises(ParameterError, match="defines no hypotheses"):
        load_hypotheses(empty)
    with pytest.raises(ParameterError, match="hypotheses file not found"):
        load_hypotheses(tmp_path / "missing.py")


def test_bad_units_and_measures():
    from idcgen.framework import Network

    network = Network(_unit_model())
    assert parse_units("units:2,0;units", network)[0].neurons == (2, 0)
    with pytest.raises(LayerError, match="unknown layer 'nope'"):
        parse_units("nope:1", network)
    with pytest.raises(ParameterError, match=r"layer units has neurons 0..2; got 3"):
        parse_units("units:1,3", network)
    with pytest.raises(ParameterError, match="expected LAYER or LAYER:i,j,k"):
        parse_units("units:a", network)
    with pytest.raises(ParameterError, match="unknown measure 'kendall'; choose among pearson, spearman, mi, linear"):
        parse_measures("pearson,kendall")
    with pytest.raises(ParameterError, match="The 'tol' parameter must be a finite float"):
        affinity(network, np.zeros((20, 28, 28, 1)), tol=-1, progress=False)
    with pytest.raises(InputError, match="at least 10 inputs"):
        affinity(network, np.zeros((5, 28, 28, 1)), progress=False)


# ---- the command -----------------------------------------------------------------------------------------


def test_command_end_to_end(tmp_path):
    from idcgen.cli import app

    model_path = tmp_path / "units.keras"
    _unit_model().save(model_path)
    runner = CliRunner()
    out = tmp_path / "analysis"
    done = runner.invoke(
        app,
        [
            "analyze",
            "--model",
            str(model_path),
            "--train",
            "embedded-mnist:train",
            "--layer",
            "units",
            "--m",
            "2",
            "--limit",
            "500",
            "--out",
            str(out),
        ],
    )
    assert done.exit_code == 0, done.output
    extra = tmp_path / "mine.py"
    extra.write_text(
        "def left_ink(x, y):\n    '''Ink in the left half.'''\n    return x[:, :, :14].mean(axis=(1, 2, 3))\n"
    )
    report = tmp_path / "report"
    done = runner.invoke(
        app,
        [
            "affinity",
            "--model",
            str(model_path),
            "--inputs",
            "embedded-mnist:test",
            "--analysis",
            str(out),
            "--hypotheses",
            str(extra),
            "--out",
            str(report),
        ],
    )
    assert done.exit_code == 0, done.output
    assert "Spearman" in done.output and "left_ink" in done.output
    analysed = json.loads((out / "analysis.json").read_text())["important_neurons"]
    assert f"neuron {analysed[0]} of units: " in done.output
    assert "important neurons of units (2 units): " in done.output
    for name in (
        "report.md",
        "report.html",
        "affinity.csv",
        "affinity.json",
        "heatmap_spearman.png",
        "heatmap_linear.png",
    ):
        assert (report / name).is_file(), name
    assert "data:image/png;base64," in (report / "report.html").read_text()
    done = runner.invoke(
        app,
        [
            "affinity",
            "--model",
            str(model_path),
            "--inputs",
            "embedded-mnist:test",
            "--units",
            "units:0",
            "--measures",
            "pearson",
            "--tol",
            "0",
            "--json",
            "--out",
            str(report),
        ],
    )
    assert done.exit_code == 0, done.output
    got = json.loads(done.output.strip().splitlines()[-1])
    assert got["units"] == ["neuron 0 of units"] and got["measures"] == ["pearson"] and got["inputs_seen"] == 1000
    j = [h["name"] for h in got["hypotheses"]].index("brightness")
    assert got["scores"]["pearson"][0][j] == pytest.approx(1.0, abs=1e-5)
    bad = tmp_path / "bad.py"
    bad.write_text("def broken(x, y):\n    return x[:, 0]\n")  # (n, 28, 1): wrong shape
    done = runner.invoke(
        app,
        [
            "affinity",
            "--model",
            str(model_path),
            "--inputs",
            "embedded-mnist:test",
            "--units",
            "units",
            "--hypotheses",
            str(bad),
            "--no-builtin",
            "--out",
            str(report),
        ],
    )
    assert done.exit_code == 1
    assert done.output.endswith(
        "error: hypothesis 'broken' returned shape (256, 28, 1) for a batch of 256 inputs; "
        "expected (256,): one number per input, or (256, 28, 28): a mask per input\n"
    )
    done = runner.invoke(
        app,
        [
            "affinity",
            "--model",
            str(model_path),
            "--inputs",
            "embedded-mnist:test",
            "--tol",
            "-1",
            "--out",
            str(report),
        ],
    )
    assert done.exit_code == 1 and "error: --tol must be a finite float" in done.output


# ---- per-pixel hypotheses (masks) for spatial units ------------------------------------------------------


def _conv_units():
    """Input (8, 8, 2) -> 1x1 Conv2D 'conv' with 3 channels: channel 0 = input channel 0 (the mask image),
    channel 1 = its negation, channel 2 = input channel 1 (noise) -> global mean -> Dense(2) -> softmax."""
    import keras

    inputs = keras.Input((8, 8, 2))
    conv = keras.layers.Conv2D(3, 1, name="conv")(inputs)
    pooled = keras.layers.GlobalAveragePooling2D()(conv)
    model = keras.Model(inputs, keras.layers.Activation("softmax")(keras.layers.Dense(2, name="logits")(pooled)))
    w = np.zeros((1, 1, 2, 3), np.float32)
    w[0, 0, 0, 0], w[0, 0, 0, 1], w[0, 0, 1, 2] = 1, -1, 1
    model.get_layer("conv").set_weights([w, np.zeros(3, np.float32)])
    return model


def test_resize_mask_by_area():
    from idcgen.deepbase.hypotheses import resize_mask

    m = np.zeros((1, 4, 4))
    m[0, :2, :2] = 1
    np.testing.assert_allclose(resize_mask(m, (2, 2))[0], [[1, 0], [0, 0]])
    # 4 -> 3: cell 0 covers rows [0, 4/3): row 0 and a third of row 1; cell 1 two thirds of rows 1 and 2
    np.testing.assert_allclose(resize_mask(m, (3, 3))[0], [[1, 0.5, 0], [0.5, 0.25, 0], [0, 0, 0]])
    np.testing.assert_allclose(resize_mask(m, (4, 4)), m)


def test_a_channel_equal_to_a_mask_scores_one_pixel_by_pixel():
    rng = np.random.default_rng(0)
    n = 400
    blobs = np.zeros((n, 8, 8))
    for i in range(n):  # a random rectangle per input
        r, c = rng.integers(0, 6, size=2)
        blobs[i, r : r + rng.integers(1, 4), c : c + rng.integers(1, 4)] = 1
    x = np.stack([blobs, rng.random((n, 8, 8))], axis=-1).astype(np.float32)
    hyps = {
        "blob": lambda x, y: x[..., 0],
        "left": lambda x, y: np.broadcast_to(np.arange(8) < 4, x.shape[:3]) * 1.0,
        "blob_area": lambda x, y: x[..., 0].mean(axis=(1, 2)),
    }
    result = affinity(_conv_units(), x, None, units="conv", hypotheses=hyps, measures="pearson", tol=0, progress=False)
    assert result.measures == ("pearson", "pixel", "iou")
    pixel, iou = result.scores["pixel"], result.scores["iou"]
    assert pixel[0, 0] == pytest.approx(1.0, abs=1e-6) and pixel[1, 0] == pytest.approx(-1.0, abs=1e-6)
    assert abs(pixel[2, 0]) < 4 / math.sqrt(n * 64)  # noise: about 0 over 25,600 pixels
    # IoU: channel 0's top 0.5 % of values are its 1s (ties at the maximum), exactly the mask; the negation's
    # top values are the mask's 0s (IoU 0); noise's top 0.5 % meet the mask by chance: |A n M| / |A u M| with
    # |A| = 128 pixels, |M| = the blobs' pixels, about 0.005 |M| in common
    region = blobs.sum()
    assert iou[0, 0] == pytest.approx(1.0) and iou[1, 0] == 0.0
    assert iou[2, 0] < 3 * 0.005 * region / (region + 128)
    # the left half: a region the same for every input, which none of the channels follows
    assert np.abs(pixel[:, 1]).max() < 0.05
    # a scalar hypothesis has no pixel score; a mask's area share stands in for it in the unit measures
    assert np.isnan(pixel[:, 2]).all() and np.isnan(iou[:, 2]).all()
    assert result.scores["pearson"][0, 0] == pytest.approx(1.0, abs=1e-6)  # channel mean = the blob's area share
    assert np.isnan(result.scores["pearson"][:, 1]).all()  # a fixed region: constant share
    assert any("scored pixel by pixel" in note for note in result.notes)
    assert {r["measure"] for r in result.rows()} == {"pearson", "pixel", "iou"}


def test_a_sparse_channel_region_is_its_active_pixels_not_every_pixel():
    # channel 0 is 1 at one corner pixel of 20 of 400 inputs (0.08 % of the pixels, under IoU's top 0.5 %), else
    # 0 as a ReLU channel mostly is: its region is those 20 pixels, not all pixels (which would give the centre
    # mask's area share, 0.25, as IoU)
    n = 400
    x = np.zeros((n, 8, 8, 2), np.float32)
    x[:20, 0, 0, 0] = 1
    hyps = {
        "centre": lambda x, y: np.broadcast_to(np.pad(np.ones((4, 4)), 2), x.shape[:3]) * 1.0,
        "corner": lambda x, y: x[..., 0],
    }
    result = affinity(
        _conv_units(), x, None, units="conv:0", hypotheses=hyps, measures="pearson", tol=0, progress=False
    )
    iou = result.scores["iou"]
    assert iou[0, 0] == 0.0 and iou[0, 1] == pytest.approx(1.0)


def test_builtin_masks_by_hand():
    from idcgen.deepbase.hypotheses import builtin_masks, centre_mask, edges_mask, ink_mask, left_mask

    x = _images()  # left half bright, flat, one bright pixel
    np.testing.assert_array_equal(ink_mask(x)[0], np.tile([1, 1, 0, 0], (4, 1)))
    assert ink_mask(x)[1].sum() == 0 and ink_mask(x)[2].sum() == 1 and ink_mask(x)[2, 1, 3] == 1
    edges = edges_mask(x)
    np.testing.assert_array_equal(edges[0], [[0, 1, 0, 0]] * 3 + [[0, 0, 0, 0]])  # the step after column 1
    assert edges.mean(axis=(1, 2)) * 16 / 9 == pytest.approx(H.edge_density(x))  # the same edges as `edges`
    np.testing.assert_array_equal(left_mask(x)[1], np.tile([1, 1, 0, 0], (4, 1)))
    np.testing.assert_array_equal(centre_mask(x)[0], np.pad(np.ones((2, 2)), 1))
    assert [h.name for h in builtin_masks()] == ["ink_mask", "edges_mask", "left_mask", "centre_mask"]
    for shape in ((3, 2), (3, 4, 1)):  # neither a number nor a 4 x 4 mask per input
        with pytest.raises(InputError, match=r"expected \(3,\): one number per input, or \(3, 4, 4\): a mask"):
            evaluate(Hypothesis("bad", lambda x, y: np.zeros(shape)), x, None, masks=True)  # noqa: B023 (run at once)


def test_command_with_masks(tmp_path):
    import keras

    from idcgen.cli import app

    keras.utils.set_random_seed(0)
    inputs = keras.Input((28, 28, 1))
    conv = keras.layers.Conv2D(2, 3, strides=2, name="conv")(inputs)  # 13 x 13 maps
    pooled = keras.layers.GlobalAveragePooling2D()(conv)
    model = keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(pooled))
    w = np.zeros((3, 3, 1, 2), np.float32)
    w[1, 1, 0, 0] = 1  # channel 0: the pixel itself
    w[:, :, 0, 1] = np.random.default_rng(0).normal(size=(3, 3))
    model.get_layer("conv").set_weights([w, np.zeros(2, np.float32)])
    path = tmp_path / "conv.keras"
    model.save(path)
    done = CliRunner().invoke(
        app,
        [
            "affinity",
            "--model",
            str(path),
            "--inputs",
            "embedded-mnist:test",
            "--limit",
            "300",
            "--units",
            "conv",
            "--masks",
            "--measures",
            "pearson",
            "--tol",
            "0",
            "--json",
            "--out",
            str(tmp_path / "report"),
        ],
    )
    assert done.exit_code == 0, done.output
    got = json.loads(done.output.strip().splitlines()[-1])
    names = [h["name"] for h in got["hypotheses"]]
    assert got["measures"] == ["pearson", "pixel", "iou"] and "ink_mask" in names
    ink = names.index("ink_mask")
    assert got["scores"]["pixel"][0][ink] > 0.8  # the channel is the image: it follows the ink
    assert got["scores"]["pixel"][0][names.index("brightness")] is None  # scalar hypotheses: no pixel score
    assert (tmp_path / "report" / "heatmap_iou.png").is_file()


def test_a_report_folder_keeps_no_heatmap_of_an_earlier_run(digits_all, tmp_path):
    # the folder is replaced on each run: the heatmaps of measures an earlier run chose once stayed beside it
    x, y = digits_all
    model = _unit_model()
    affinity(model, x[:200], y[:200], units="units", measures="pearson,spearman", tol=0, progress=False).save(tmp_path)
    assert {p.name for p in tmp_path.glob("heatmap_*.png")} == {"heatmap_pearson.png", "heatmap_spearman.png"}
    affinity(model, x[:200], y[:200], units="units", measures="pearson", tol=0, progress=False).save(tmp_path)
    assert [p.name for p in tmp_path.glob("heatmap_*.png")] == ["heatmap_pearson.png"]
