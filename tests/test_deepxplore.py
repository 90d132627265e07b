"""DeepXplore's generator as a mutator (idcgen.fuzz.mutators.deepxplore): the three constraints keep their
shape, the objective rises, one model and regression models work."""

import numpy as np
import pytest

from idcgen.errors import ParameterError
from idcgen.fuzz.fuzzer import FuzzContext
from idcgen.fuzz.mutators import make_mutator


def tiny_cnn(seed: int, regression: bool = False):
    import keras

    keras.utils.set_random_seed(seed)
    L = keras.layers
    inputs = keras.Input((12, 12, 1))
    x = L.Conv2D(4, 3, activation="relu", name="conv")(inputs)
    x = L.Flatten(name="flatten")(x)
    x = L.Dense(8, activation="relu", name="fc")(x)
    if regression:
        return keras.Model(inputs, L.Dense(1, name="out")(x))
    return keras.Model(inputs, L.Activation("softmax", name="softmax")(L.Dense(10, name="logits")(x)))


@pytest.fixture(scope="module")
def nets():
    from idcgen.framework import Network

    return [Network(tiny_cnn(s)) for s in (0, 1)]


def images(n=6, value_range=(0.0, 1.0), seed=0):
    lo, hi = value_range
    unit = np.random.default_rng(seed).uniform(0.1, 0.9, (n, 12, 12, 1))  # inside the range: no clipping
    return (lo + unit * (hi - lo)).astype(np.float32)


def ctx(net, n, others=(), value_range=(0.0, 1.0), labels=None):
    labels = np.full(n, -1) if labels is None else labels
    return FuzzContext(network=net, labels=labels, value_range=value_range, others=tuple(others))


@pytest.mark.parametrize("value_range", [(0.0, 1.0), (-1.0, 1.0)])
def test_lighting_moves_every_pixel_alike(value_range, nets):
    x = images(value_range=value_range)
    m = make_mutator("deepxplore(constraint='light', iterations=4, step=0.02, stop=False)")
    d = m.mutate(x, np.random.default_rng(0), ctx(nets[0], len(x), nets[1:], value_range)) - x
    width = value_range[1] - value_range[0]
    for di in d:  # one brightness change per image, a multiple of the step
        np.testing.assert_allclose(di, di.flat[0], atol=1e-5)
        assert abs(di.flat[0]) <= 4 * 0.02 * width + 1e-5
        assert np.isclose(di.flat[0] / (0.02 * width), round(di.flat[0] / (0.02 * width)), atol=1e-3)
    assert (np.abs(d[:, 0, 0, 0]) > 0).any()  # (steps of opposite sign may cancel on some images)


def test_lighting_is_uniform_up_to_clipping(nets):
    x = images()
    x[:, :2] = 1.0  # bright rows: a brightening step clips there
    m = make_mutator("deepxplore(constraint='light', iterations=3, stop=False, coverage='none')")
    out = m.mutate(x, np.random.default_rng(0), ctx(nets[0], len(x), nets[1:]))
    for xi, oi in zip(x, out):
        inside = (oi > 0) & (oi < 1)
        shift = (oi - xi)[inside]
        np.testing.assert_allclose(shift, shift[0], atol=1e-5)


def test_occlusion_changes_one_rectangle(nets):
    x = images(8)
    m = make_mutator("deepxplore(constraint='occl', rect=4, iterations=5, stop=False)")
    out = m.mutate(x, np.random.default_rng(0), ctx(nets[0], len(x), nets[1:]))
    corners = set()
    for xi, oi in zip(x, out):
        rows, cols, _ = np.nonzero(oi != xi)
        assert len(rows) > 0
        assert rows.max() - rows.min() < 4 and cols.max() - cols.min() < 4  # inside one 4 x 4 rectangle
        corners.add((rows.min(), cols.min()))
    assert len(corners) > 1  # at random positions


@pytest.mark.parametrize("value_range", [(0.0, 1.0), (-1.0, 1.0)])
def test_blackout_only_blacks_out_small_patches(value_range, nets):
    x = images(8, value_range)
    m = make_mutator("deepxplore(constraint='blackout', patch=3, patches=2, iterations=4, stop=False)")
    out = m.mutate(x, np.random.default_rng(0), ctx(nets[0], len(x), nets[1:], value_range))
    changed = out != x
    assert changed.any()
    np.testing.assert_array_equal(out[changed], value_range[0])  # set to the low end, nothing else
    assert changed.sum(axis=(1, 2, 3)).max() <= 4 * 2 * 9  # at most iterations x patches x 3 x 3
    for ci in changed[..., 0]:  # each changed pixel in a full 3 x 3
        for r, c in zip(*np.nonzero(ci)):
            assert any(
                ci[t : t + 3, s : s + 3].all()
                for t in range(max(r - 2, 0), min(r, 9) + 1)
                for s in range(max(c - 2, 0), min(c, 9) + 1)
            )


@pytest.mark.parametrize("constraint", ["light", "occl", "blackout"])
def test_same_rng_same_mutants(constraint, nets):
    x = images()
    m = make_mutator(f"deepxplore(constraint={constraint!r}, iterations=3)")
    c = ctx(nets[0], len(x), nets[1:])
    a = m.mutate(x, np.random.default_rng(5), c)
    np.testing.assert_array_equal(a, m.mutate(x, np.random.default_rng(5), c))
    if constraint != "light":
        assert not np.array_equal(a, m.mutate(x, np.random.default_rng(6), c))


def test_rejects_unknown_constraint_and_coverage():
    with pytest.raises(ParameterError, match="'constraint' parameter of deepxplore must be one of 'light', 'occl'"):
        make_mutator("deepxplore(constraint='rain')")
    with pytest.raises(ParameterError, match="'coverage' parameter of deepxplore must be one of 'nc', 'idc'"):
        make_mutator("deepxplore(coverage=3)")
    m = make_mutator("deepxplore(constraint='blackout', coverage='idc')")
    assert make_mutator(repr(m)) == m


def _objective(under, others, x, c):
    """DeepXplore's differential objective with lambda1 = 1: the others' logit of c minus the model's."""
    z = under.logits_model()(x).numpy()[np.arange(len(x)), c]
    return sum(o.logits_model()(x).numpy()[np.arange(len(x)), c] for o in others) - z


@pytest.fixture(scope="module")
def lenets(digits):
    """Two LeNet-1 trained for one epoch on 2,000 embedded digits with different seeds."""
    from idcgen.framework import Network
    from idcgen.framework.keras_zoo import lenet1, train

    x_train, y_train, x_test, y_test = digits
    nets = []
    for seed in (0, 1):
        model = lenet1(random_state=seed)
        train(model, x_train[:2000], y_train[:2000], epochs=1, optimizer="adam", random_state=seed)
        nets.append(Network(model))
    agree = np.flatnonzero(np.all([n.predict(x_test[:100]) == y_test[:100] for n in nets], axis=0))
    return nets, x_test[agree[:16]], y_test[agree[:16]]


def test_the_objective_rises_and_models_come_to_disagree(lenets):
    (under, other), x, y = lenets
    before = _objective(under, [other], x, y)
    values = []
    for iterations in (2, 5, 10):
        m = make_mutator(
            f"deepxplore(constraint='occl', rect=28, iterations={iterations}, step=0.02, lambda2=0, stop=False)"
        )
        values.append(
            _objective(
                under, [other], m.mutate(x, np.random.default_rng(0), ctx(under, len(x), [other], labels=y)), y
            ).mean()
        )
    assert before.mean() < values[0] < values[1] < values[2]
    m = make_mutator("deepxplore(constraint='occl', rect=28, iterations=30, step=0.02)")
    out = m.mutate(x, np.random.default_rng(0), ctx(under, len(x), [other], labels=y))
    assert (under.predict(out) != other.predict(out)).sum() >= 4  # DeepXplore's differences
    assert (under.predict(x) == other.predict(x)).all()


def test_one_model_moves_away_from_the_seed_prediction(lenets):
    (under, _), x, y = lenets
    logit = lambda v: under.logits_model()(v).numpy()[np.arange(len(x)), y]
    m = make_mutator("deepxplore(constraint='light', iterations=10, step=0.02, stop=False)")
    out = m.mutate(x, np.random.default_rng(0), ctx(under, len(x), labels=y))
    assert (logit(out) < logit(x)).mean() >= 0.9  # the seed's class loses score, the others are absent
    m = make_mutator("deepxplore(constraint='occl', rect=28, iterations=30, step=0.02)")
    out = m.mutate(x, np.random.default_rng(0), ctx(under, len(x), labels=y))
    assert (under.predict(out) != y).sum() >= 4


def test_regression_outputs_move_apart():
    from idcgen.framework import Network

    nets = [Network(tiny_cnn(s, regression=True)) for s in (0, 1)]
    assert nets[0].task == "regression"
    x = images(8)
    gap = lambda v: np.abs(nets[0].predict(v) - nets[1].predict(v))
    m = make_mutator("deepxplore(constraint='occl', rect=12, iterations=5, step=0.02)")
    out = m.mutate(x, np.random.default_rng(0), ctx(nets[0], len(x), nets[1:], labels=np.full(len(x), np.nan)))
    assert (gap(out) > gap(x)).all()
    # one model: away from the seed's label where known, from its own output where not
    labels = np.where(np.arange(8) % 2 == 0, nets[0].predict(x) + 1.0, np.nan)
    out = m.mutate(x, np.random.default_rng(0), ctx(nets[0], len(x), labels=labels))
    moved = nets[0].predict(out) - nets[0].predict(x)
    assert (moved[::2] < 0).all()  # the label lies above: pushed down
    assert (np.abs(moved[1::2]) > 0).all()


def test_the_others_score_rises_and_the_model_under_test_falls(lenets):
    (under, other), x, y = lenets
    score = lambda net, v: net.logits_model()(v).numpy()[np.arange(len(x)), y]
    m = make_mutator(
        "deepxplore(constraint='occl', rect=28, iterations=10, step=0.02, lambda1=1, lambda2=0, stop=False)"
    )
    out = m.mutate(x, np.random.default_rng(0), ctx(under, len(x), [other], labels=y))
    assert (score(under, out) < score(under, x)).mean() >= 0.9
    assert (score(other, out) > score(other, x)).mean() >= 0.9


def test_an_input_stops_once_the_models_disagree(lenets):
    (under, other), x, y = lenets
    spec = "deepxplore(constraint='occl', rect=28, iterations=30, step=0.02, stop={})"
    c = ctx(under, len(x), [other], labels=y)
    held = make_mutator(spec.format(True)).mutate(x, np.random.default_rng(0), c)
    free = make_mutator(spec.format(False)).mutate(x, np.random.default_rng(0), c)
    differ = under.predict(held) != other.predict(held)
    assert differ.sum() >= 4
    moved = lambda v: np.abs(v - x).sum(axis=(1, 2, 3))
    assert (moved(held)[differ] < moved(free)[differ]).all()  # stopped early, at its first difference


def test_idc_coverage_term_and_a_differential_campaign(lenets, digits):
    from idcgen.analysis import analyze
    from idcgen.fuzz.fuzzer import Fuzzer

    (under, other), x, y = lenets
    analysis = analyze(under.model, digits[0][:300], digits[1][:300], layer="block2_conv1", m=4, progress=False)
    tracker = analysis.tracker(x)
    c = FuzzContext(
        network=analysis.network,
        labels=y,
        analysis=analysis,
        tracker=tracker,
        parent_combinations=analysis.ids(x),
        others=(other,),
    )
    nc, idc, none = (
        make_mutator(f"deepxplore(constraint='light', coverage={k!r}, lambda2=5, iterations=5)")
        for k in ("nc", "idc", "none")
    )
    out = idc.mutate(x, np.random.default_rng(0), c)
    assert not np.array_equal(out, nc.mutate(x, np.random.default_rng(0), c))  # another coverage term
    assert not np.array_equal(out, none.mutate(x, np.random.default_rng(0), c))
    np.testing.assert_array_equal(out, idc.mutate(x, np.random.default_rng(0), c))
    fuzzer = Fuzzer(
        analysis,
        mutators=["deepxplore(iterations=30, constraint='occl', rect=28)"],
        others=[other],
        oracle="disagreement",
        batch_size=16,
        random_state=0,
    )
    campaign = fuzzer.run(x, y, budget=48, progress=False)
    assert campaign.execs == 48 and campaign.n_findings > 0
