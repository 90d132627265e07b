"""Contract tests for every mutator, and the spec parser (idcgen.fuzz.mutators, idcgen.fuzz.attacks)."""

import re

import numpy as np
import pytest

from idcgen.errors import InputError, ParameterError
from idcgen.fuzz.mutators import (DEFAULT_MUTATORS, REGISTRY, MutationContext, describe_mutators, make_mutator,
                                  parse_mutators, pixel_count)

#: Small settings for the slow attacks; every other mutator runs with its defaults.
SMALL = {"cw": "cw(max_iterations=5, binary_search_steps=1)", "bim": "bim(nb_iter=3)", "pgd": "pgd(nb_iter=3)"}
#: Mutators that need the fuzzer's analysis and coverage (tested with the fuzzer), not a plain context.
NEEDS_FUZZER = {"directed"}
MUTATORS = [make_mutator(SMALL.get(name, name)) for name in REGISTRY if name not in NEEDS_FUZZER]


def tiny_cnn(channels: int):
    """Conv2D(4, 3, relu)-MaxPool-Flatten-Dense(10) logits-softmax on 12x12xC, seeded."""
    import keras
    keras.utils.set_random_seed(0)
    L = keras.layers
    inputs = keras.Input((12, 12, channels))
    x = L.Conv2D(4, 3, activation="relu", name="conv")(inputs)
    x = L.MaxPooling2D(2, name="pool")(x)
    x = L.Flatten(name="flatten")(x)
    x = L.Dense(10, name="logits")(x)
    return keras.Model(inputs, L.Activation("softmax", name="softmax")(x))


@pytest.fixture(scope="module")
def nets():
    from idcgen.models import Network
    return {c: Network(tiny_cnn(c)) for c in (1, 3)}


def batch(n=4, channels=1, value_range=(0.0, 1.0), seed=0, interior=False):
    lo, hi = value_range
    rng = np.random.default_rng(seed)
    unit = rng.uniform(0.1, 0.9, (n, 12, 12, channels)) if interior else rng.uniform(0, 1, (n, 12, 12, channels))
    if not interior:
        unit[:, :3] = 0.0  # some pixels at the bounds, as in real digits
        unit[:, -2:] = 1.0
    return (lo + unit * (hi - lo)).astype(np.float32)


def context(net, n, value_range=(0.0, 1.0)):
    labels = np.arange(n) % net.n_classes
    labels[::2] = -1  # unknown: the attacks fall back on the prediction
    return MutationContext(network=net, labels=labels, value_range=value_range)


def check_contract(mutator, x, ctx):
    original = x.copy()
    out = mutator.mutate(x, np.random.default_rng(7), ctx)
    lo, hi = ctx.value_range
    assert out.shape == x.shape and out.dtype == np.float32
    assert np.isfinite(out).all() and out.min() >= lo and out.max() <= hi
    assert np.array_equal(x, original), "the input was modified"
    assert not np.shares_memory(out, x)
    again = mutator.mutate(x, np.random.default_rng(7), ctx)
    np.testing.assert_array_equal(out, again)                      # same rng state, same mutants
    other = mutator.mutate(x, np.random.default_rng(8), ctx)
    assert np.array_equal(out, other) != mutator.stochastic        # only random mutators use rng
    return out


def n_for(mutator):
    return 2 if mutator.name == "jsma" else 4


# ---- contract -----------------------------------------------------------------------------------
def test_every_registered_mutator_is_tested():
    assert {m.name for m in MUTATORS} | NEEDS_FUZZER >= set(REGISTRY)
    assert {m.kind for m in MUTATORS} == {"noise", "transform", "attack"}


@pytest.mark.parametrize("mutator", MUTATORS, ids=repr)
def test_contract_grey(mutator, nets):
    n = n_for(mutator)
    out = check_contract(mutator, batch(n), context(nets[1], n))
    if mutator.kind != "attack":  # attacks may fail on some inputs and return them unchanged
        assert not np.array_equal(out, batch(n))


@pytest.mark.parametrize("mutator", MUTATORS, ids=repr)
def test_contract_colour(mutator, nets):
    n = n_for(mutator)
    check_contract(mutator, batch(n, channels=3), context(nets[3], n))


@pytest.mark.parametrize("mutator", MUTATORS, ids=repr)
def test_contract_other_value_range(mutator, nets):
    n = n_for(mutator)
    check_contract(mutator, batch(n, value_range=(-1.0, 1.0)), context(nets[1], n, (-1.0, 1.0)))


def test_empty_batch(nets):
    out = make_mutator("gauss").mutate(np.zeros((0, 12, 12, 1), np.float32), np.random.default_rng(0),
                                       context(nets[1], 0))
    assert out.shape == (0, 12, 12, 1)


# ---- noise --------------------------------------------------------------------------------------
def test_pixel_count_matches_paper():
    assert pixel_count(0.02, 28, 28) == 15 and pixel_count(0.02, 32, 32) == 20
    assert pixel_count(0.02, 100, 100) == 200 and pixel_count(0.02, 12, 12) == 2 and pixel_count(1e-6, 2, 2) == 1


def changed_positions(out, x):
    return np.any(out != x, axis=-1).reshape(len(x), -1)          # (b, h*w)


@pytest.mark.parametrize("channels", [1, 3])
def test_relevant_pixels_hits_the_most_relevant(channels, nets):
    from idcgen.relevance import input_relevance
    net, x = nets[channels], batch(6, channels, interior=True)
    mutator = make_mutator("relevant_pixels(fraction=0.05)")
    out = mutator.mutate(x, np.random.default_rng(0), context(net, 6))
    k = pixel_count(0.05, 12, 12)
    assert k == 7
    changed = changed_positions(out, x)
    assert (changed.sum(axis=1) == k).all()
    score = np.abs(input_relevance(net, x).sum(axis=-1)).reshape(6, -1)
    for i in range(6):
        ranked = np.sort(score[i])[::-1]
        assert ranked[k - 1] > ranked[k]                            # no tie at the cut
        np.testing.assert_array_equal(np.flatnonzero(changed[i]), np.sort(np.argsort(-score[i])[:k]))
    if channels == 3:                                               # all channels of a chosen position
        assert ((out != x).sum(axis=-1).reshape(6, -1)[changed] == 3).all()


def test_random_pixels_changes_the_same_count(nets):
    x = batch(6, interior=True)
    out = make_mutator("random_pixels(fraction=0.05)").mutate(x, np.random.default_rng(0), context(nets[1], 6))
    assert (changed_positions(out, x).sum(axis=1) == pixel_count(0.05, 12, 12)).all()
    assert len({tuple(np.flatnonzero(row)) for row in changed_positions(out, x)}) > 1   # per-image positions


def test_transforms_draw_parameters_per_group(nets):
    group = make_mutator("rotate").group
    x = np.repeat(batch(1), 4 * group, axis=0)
    for name in ("rotate", "brightness", "elastic"):
        out = make_mutator(name).mutate(x, np.random.default_rng(0), context(nets[1], len(x)))
        firsts = {out[i * group].tobytes() for i in range(4)}
        assert len(firsts) == 4, name                               # each group its own parameters
        if name != "elastic":                                      # same parameters within a group
            assert all(np.array_equal(out[0], out[i]) for i in range(group)), name


def test_affine_flags():
    assert {m.name for m in MUTATORS if m.affine} == {"rotate", "shift", "scale", "shear"}
    assert {m.name for m in MUTATORS if m.needs_model} == {"relevant_pixels", "fgsm", "bim", "pgd", "cw", "jsma"}


# ---- attacks ------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", ["fgsm(eps=0.1)", "bim(eps=0.1, nb_iter=3)", "pgd(eps=0.1, nb_iter=3)"])
@pytest.mark.parametrize("value_range", [(0.0, 1.0), (-1.0, 1.0)])
def test_linf_attacks_stay_in_the_eps_ball(spec, value_range, nets):
    x = batch(8, value_range=value_range)
    out = make_mutator(spec).mutate(x, np.random.default_rng(0), context(nets[1], 8, value_range))
    eps = 0.1 * (value_range[1] - value_range[0])
    assert np.abs(out - x).max() <= eps + 1e-6
    if spec.startswith("fgsm"):                                     # one step of eps on every unclipped pixel
        assert np.abs(out - x).max() >= eps - 1e-6


def test_attacks_use_known_labels(nets):
    from idcgen.fuzz.attacks import attack_labels
    net, x = nets[1], batch(4)
    ctx = MutationContext(network=net, labels=np.array([3, -1, 5, -1]))
    labels = attack_labels(x, ctx)
    assert labels[0] == 3 and labels[2] == 5 and (labels[[1, 3]] == net.predict(x[[1, 3]])).all()
    with pytest.raises(InputError, match="labels must be < 10"):
        attack_labels(x, MutationContext(network=net, labels=np.array([10, 0, 0, 0])))
    with pytest.raises(InputError, match="got 3 labels for 4 inputs"):
        make_mutator("fgsm").mutate(x, np.random.default_rng(0), MutationContext(network=net, labels=np.zeros(3)))


def test_cw_moves_inputs_across_the_boundary(nets):
    """Without the optimizer adapter cleverhans' C&W raises (Keras 3) or returns its inputs unchanged."""
    net, x = nets[1], batch(4)
    out = make_mutator("cw(max_iterations=20, binary_search_steps=2, initial_const=10.0)").mutate(
        x, np.random.default_rng(0), context(net, 4))
    assert (net.predict(out) != net.predict(x)).any()
    assert np.abs(out - x).max() > 0


def test_jsma_only_raises_a_few_pixels(nets):
    net, x = nets[1], batch(2)
    out = make_mutator("jsma(gamma=0.1)").mutate(x, np.random.default_rng(0), context(net, 2))
    assert (out >= x).all()                                         # theta > 0 only increases pixels
    assert ((out != x).reshape(2, -1).sum(axis=1) <= 0.1 * 144 + 2).all()


# ---- specs --------------------------------------------------------------------------------------
def test_make_mutator_parses_specs():
    assert make_mutator("gauss").params() == {"std": 0.05}
    assert make_mutator(" gauss( std = 0.1 ) ").params() == {"std": 0.1}
    assert make_mutator("fgsm(eps=0.1)").eps == 0.1
    assert make_mutator("scale(low=0.9, high=1.1)").params() == {"low": 0.9, "high": 1.1}
    assert make_mutator("blur(max_kernel=7)").max_kernel == 7
    assert repr(make_mutator("gauss(std=1)")) == "gauss(std=1)"     # stored unchanged


def test_parse_mutators_splits_at_top_level_commas():
    mutators = parse_mutators("gauss(std=0.05), rotate,bim(eps=0.1, eps_iter=0.01),fgsm(eps=0.1)")
    assert [repr(m) for m in mutators] == ["gauss(std=0.05)", "rotate(limit=30.0)",
                                           "bim(eps=0.1, eps_iter=0.01, nb_iter=10)", "fgsm(eps=0.1)"]
    assert [m.name for m in parse_mutators(DEFAULT_MUTATORS)] == DEFAULT_MUTATORS.split(",")


@pytest.mark.parametrize("spec, message", [
    ("foo", "unknown mutator 'foo'; known mutators: gauss, relevant_pixels"),
    ("gauss(sd=0.1)", "gauss has no parameter 'sd'; its parameters are: std."),
    ("bim(eps=0.1, step=2)", "bim has no parameter 'step'; its parameters are: eps, eps_iter, nb_iter."),
    ("gauss(std=-1)", r"The 'std' parameter of gauss must be a float in the range \(0, 1\]. Got -1 instead."),
    ("gauss(std=True)", r"The 'std' parameter of gauss must be a float .* Got True instead."),
    ("gauss(std='big')", r"The 'std' parameter of gauss must be a float .* Got 'big' instead."),
    ("blur(max_kernel=4.5)", r"The 'max_kernel' parameter of blur must be an int in the range \[3, 31\]. Got 4.5"),
    ("cw(abort_early=1)", r"The 'abort_early' parameter of cw must be a bool \(True or False\). Got 1 instead."),
    ("bim(nb_iter=0)", r"The 'nb_iter' parameter of bim must be an int in the range \[1, inf\)"),
    ("bim(eps=0.1, eps_iter=0.2)", r"The 'eps_iter' parameter of bim must be <= eps \(0.1\). Got 0.2 instead."),
    ("scale(low=1.2, high=0.8)", r"The 'high' parameter of scale must be >= low \(1.2\)"),
    ("noise(std_low=0.1, std_high=0.05)", r"'std_high' parameter of noise must be >= std_low"),
    ("gauss(std=0.1", r"malformed mutator spec 'gauss\(std=0.1'"),
    ("gauss(0.1)", "give parameters by name"),
    ("gauss(**{'std': 1})", "give parameters by name"),
    ("gauss(std=0.1, std=0.2)", "parameter 'std' given twice"),
    ("gauss(std=abs(-1))", r"the value of 'std' must be a Python literal .* Got 'abs\(-1\)'"),
    ("gauss(std=__import__('os').getpid())", "must be a Python literal"),
    ("2gauss", "malformed mutator spec"),
])
def test_make_mutator_rejects(spec, message):
    with pytest.raises(ParameterError, match=message):
        make_mutator(spec)


@pytest.mark.parametrize("text", ["", "gauss,,rotate", "gauss,"])
def test_parse_mutators_rejects_empty_specs(text):
    with pytest.raises(ParameterError, match="empty mutator spec"):
        parse_mutators(text)


def test_constructor_validates():
    cls = REGISTRY["gauss"]
    with pytest.raises(ParameterError, match=re.escape("The 'std' parameter of gauss must be a float")):
        cls(std=0.0)
    with pytest.raises(ParameterError, match="gauss has no parameter 'mean'"):
        cls(mean=0.5)


@pytest.mark.parametrize("mutator", MUTATORS + [make_mutator("rotate(limit=10)"), make_mutator("cw(lr=0.01)")],
                         ids=repr)
def test_repr_round_trips(mutator):
    again = make_mutator(repr(mutator))
    assert again == mutator and repr(again) == repr(mutator)
    assert type(again) is type(mutator)


def test_describe_mutators():
    rows = {name: (kind, params) for name, kind, params in describe_mutators()}
    assert set(REGISTRY) <= set(rows)
    assert rows["gauss"] == ("noise", {"std": 0.05})
    assert rows["rotate"] == ("transform", {"limit": 30.0})
    assert rows["fgsm"] == ("attack", {"eps": 0.15})


def test_bad_inputs_are_rejected(nets):
    m, rng = make_mutator("gauss"), np.random.default_rng(0)
    with pytest.raises(InputError, match=r"expected a batch of images \(b, h, w, c\); got shape \(12, 12, 1\)"):
        m.mutate(batch(1)[0], rng, context(nets[1], 1))
    with pytest.raises(InputError, match=r"inside value_range \(0.0, 1.0\); got values in \[-1"):
        m.mutate(batch(2, value_range=(-1.0, 1.0)), rng, context(nets[1], 2))
    with pytest.raises(ParameterError, match="rng must be a numpy Generator"):
        m.mutate(batch(2), 0, context(nets[1], 2))
    with pytest.raises(ParameterError, match="value_range must be two finite numbers"):
        MutationContext(network=nets[1], labels=np.zeros(1), value_range=(1.0, 0.0))


@pytest.mark.parametrize("channels", [1, 3])
def test_cw_mutants_do_not_depend_on_the_rest_of_the_batch(channels, nets, monkeypatch):
    """cleverhans alone weights each example by a constant summed over the batch (or fails on 3 channels)."""
    from idcgen.fuzz.attacks import CW
    net, x = nets[channels], batch(4, channels)
    cw = make_mutator("cw(max_iterations=20, binary_search_steps=2, initial_const=0.1, abort_early=False)")
    both = cw.mutate(x, np.random.default_rng(0), context(net, 4))
    alone = cw.mutate(x[:2], np.random.default_rng(0), context(net, 2))
    assert np.abs(both - x).max() > 0
    np.testing.assert_allclose(both[:2], alone, atol=1e-6)
    monkeypatch.setattr(CW, "chunk_values", 3 * 3 * 144 * channels)   # chunks of 3 and 1
    np.testing.assert_allclose(cw.mutate(x, np.random.default_rng(0), context(net, 4)), both, atol=1e-6)


def test_noise_fields_differ_within_a_group(nets):
    x = np.repeat(batch(1, interior=True), 16, axis=0)
    out = make_mutator("noise").mutate(x, np.random.default_rng(0), context(nets[1], 16))
    assert len({(out[i] - x[i]).tobytes() for i in range(16)}) == 16
