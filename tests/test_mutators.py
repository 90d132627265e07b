"""Contract tests for every mutator, and the spec parser (idcgen.fuzz.mutators, idcgen.fuzz.mutators.attacks)."""

import math
import re

import numpy as np
import pytest

from idcgen.errors import InputError, ParameterError
from idcgen.fuzz.mutators import (
    DEFAULT_MUTATORS,
    REGISTRY,
    MutationContext,
    describe_mutators,
    make_mutator,
    parse_mutators,
)
from idcgen.fuzz.mutators.base import Mutator
from idcgen.fuzz.mutators.noise import pixel_count

#: Small settings for the slow attacks; every other mutator runs with its defaults.
SMALL = {
    "cw": "cw(max_iterations=5, binary_search_steps=1)",
    "bim": "bim(nb_iter=3)",
    "pgd": "pgd(nb_iter=3)",
    "deepxplore": "deepxplore(iterations=3)",
}
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
    from idcgen.framework import Network

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
    np.testing.assert_array_equal(out, again)  # same rng state, same mutants
    other = mutator.mutate(x, np.random.default_rng(8), ctx)
    assert np.array_equal(out, other) != mutator.stochastic  # only random mutators use rng
    return out


class _Returns(Mutator):
    """A mutator that returns what it is given to return (the contract's end is what is tested)."""

    name = "returns"
    kind = "noise"
    result = None

    def _mutate(self, x, rng, ctx):
        return self.result(x)


@pytest.mark.parametrize("part_rows", [None, 3])  # one part, or parts of 3 rows on the thread pool
def test_the_contract_end_keeps_the_input_pixel_for_non_finite_values_and_clips(part_rows, monkeypatch, caplog):
    import idcgen.threads as threads

    if part_rows:
        monkeypatch.setattr(threads, "PART_BYTES", part_rows * 12 * 12 * 4)
    x = batch(10, channels=1)
    bad = x.copy() + 0.5  # above the range: clipped to 1
    bad[1, 0, 0], bad[4, 3, 3], bad[9, 5, 5] = np.nan, np.inf, -np.inf
    mutator = _Returns()
    mutator.result = lambda given: bad
    with caplog.at_level("WARNING"):
        out = mutator.mutate(x, np.random.default_rng(0), MutationContext(None, np.full(10, -1), (0.0, 1.0)))
    want = np.clip(np.where(np.isfinite(bad), bad, x), 0, 1)
    np.testing.assert_array_equal(out, want)
    assert "produced 3 non-finite values" in caplog.text
    # a mutator handing back a view of its (read-only) input: a new array, the input never written
    x.setflags(write=False)
    mutator.result = lambda given: given[:, ::1]
    out = mutator.mutate(x, np.random.default_rng(0), MutationContext(None, np.full(10, -1), (0.0, 1.0)))
    assert not np.shares_memory(out, x) and out.flags.writeable
    np.testing.assert_array_equal(out, x)


def n_for(mutator):
    return 2 if mutator.name == "jsma" else 4


# ---- contract -----------------------------------------------------------------------------------
def test_every_registered_mutator_is_tested():
    assert {m.name for m in MUTATORS} | NEEDS_FUZZER >= set(REGISTRY)
    assert {m.kind for m in MUTATORS} == {"noise", "transform", "attack"}


def test_the_registry_names_each_mutator_by_its_own_name():
    """MUTATORS names a mutator's module and class without importing it; each class answers to its key."""
    assert {name: cls.name for name, cls in REGISTRY.items()} == {name: name for name in REGISTRY}


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
    out = make_mutator("gauss").mutate(
        np.zeros((0, 12, 12, 1), np.float32), np.random.default_rng(0), context(nets[1], 0)
    )
    assert out.shape == (0, 12, 12, 1)


# ---- noise --------------------------------------------------------------------------------------
def test_pixel_count_matches_paper():
    assert pixel_count(0.02, 28, 28) == 15 and pixel_count(0.02, 32, 32) == 20
    assert pixel_count(0.02, 100, 100) == 200 and pixel_count(0.02, 12, 12) == 2 and pixel_count(1e-6, 2, 2) == 1


def changed_positions(out, x):
    return np.any(out != x, axis=-1).reshape(len(x), -1)  # (b, h*w)


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
        assert ranked[k - 1] > ranked[k]  # no tie at the cut
        np.testing.assert_array_equal(np.flatnonzero(changed[i]), np.sort(np.argsort(-score[i])[:k]))
    if channels == 3:  # all channels of a chosen position
        assert ((out != x).sum(axis=-1).reshape(6, -1)[changed] == 3).all()


@pytest.mark.parametrize("n, k", [(144, 2), (144, 30), (8, 3), (6, 5)])  # sparse (redraws), dense (partition)
def test_distinct_positions_are_uniform_subsets(n, k):
    from itertools import combinations

    from idcgen.fuzz.mutators.noise import distinct_positions

    draws = 30_000 if n > 10 else 1_000 * math.comb(n, k)
    positions = distinct_positions(np.random.default_rng(0), draws, n, k)
    assert positions.shape == (draws, k) and positions.min() >= 0 and positions.max() < n
    ordered = np.sort(positions, axis=1)
    assert (np.diff(ordered, axis=1) > 0).all()  # distinct within each row
    expected = draws * k / n  # every position equally likely
    assert np.abs(np.bincount(positions.ravel(), minlength=n) - expected).max() < 5 * np.sqrt(expected)
    if n <= 10:  # ... and every k-subset
        index = {c: i for i, c in enumerate(combinations(range(n), k))}
        counts = np.bincount([index[tuple(row)] for row in ordered.tolist()], minlength=len(index))
        assert np.abs(counts - 1_000).max() < 5 * np.sqrt(1_000)


def test_standard_normal_is_reproducible_in_parts():
    from idcgen.fuzz.mutators.noise import standard_normal

    big = standard_normal(np.random.default_rng(0), (300, 28, 28, 1))  # filled on two threads
    np.testing.assert_array_equal(big, standard_normal(np.random.default_rng(0), (300, 28, 28, 1)))
    assert big.dtype == np.float32 and abs(big.mean()) < 0.01 and abs(big.std() - 1) < 0.01
    small = standard_normal(np.random.default_rng(0), (3, 5))
    assert small.shape == (3, 5) and not np.array_equal(small, standard_normal(np.random.default_rng(1), (3, 5)))
    used, expected = np.random.default_rng(0), np.random.default_rng(0)
    standard_normal(used, (2, 2))
    expected.integers(0, 2**63, 2)
    assert used.bit_generator.state == expected.bit_generator.state  # rng advanced by the two child seeds


def _noise_from_child_seeds(seed: int, size: int, parts: int) -> np.ndarray:
    """What a batch's noise must be: ``parts`` consecutive runs, each from a child generator seeded by ``rng``."""
    seeds = np.random.default_rng(seed).integers(0, 2**63, size=parts)
    bounds = np.linspace(0, size, parts + 1).astype(int)
    runs = [
        np.random.default_rng(s).standard_normal(b - a, dtype=np.float32) for s, a, b in zip(seeds, bounds, bounds[1:])
    ]
    return np.concatenate(runs)


@pytest.mark.parametrize("workers", [1, 2, 8])
def test_big_noise_is_drawn_in_parts_fixed_by_its_size_not_by_the_cores(monkeypatch, workers):
    """A batch of more than two parts' normals spreads over the pool's threads (the GPU machine's 16 cores give
    it 8), yet draws the same numbers on every machine; batches of up to two parts keep the noise they drew when
    every batch was two parts, so campaigns at the default batch are unchanged."""
    from idcgen import threads
    from idcgen.fuzz.mutators import noise

    monkeypatch.setattr(threads, "_pool", None)  # a pool of `workers` threads, made on first use
    monkeypatch.setattr(threads, "WORKERS", workers)
    big = (5 * noise.NOISE_PART + 123,)
    assert noise.noise_parts(big[0]) == 6 and noise.noise_parts(2 * noise.NOISE_PART) == 2 == noise.noise_parts(10)
    np.testing.assert_array_equal(
        noise.standard_normal(np.random.default_rng(7), big), _noise_from_child_seeds(7, big[0], 6)
    )
    small = (256, 32, 32, 3)  # CIFAR-10 at the default batch: two parts, as before
    np.testing.assert_array_equal(
        noise.standard_normal(np.random.default_rng(7), small).reshape(-1), _noise_from_child_seeds(7, 256 * 3072, 2)
    )


def test_random_pixels_changes_the_same_count(nets):
    x = batch(6, interior=True)
    out = make_mutator("random_pixels(fraction=0.05)").mutate(x, np.random.default_rng(0), context(nets[1], 6))
    assert (changed_positions(out, x).sum(axis=1) == pixel_count(0.05, 12, 12)).all()
    assert len({tuple(np.flatnonzero(row)) for row in changed_positions(out, x)}) > 1  # per-image positions


@pytest.mark.parametrize(
    "spec", ["rotate", "shift(limit=0.25)", "scale", "shear", "brightness", "contrast", "noise", "elastic"]
)
def test_transforms_draw_parameters_per_image(spec, nets):
    x = np.repeat(batch(1, interior=True), 16, axis=0)
    out = make_mutator(spec).mutate(x, np.random.default_rng(0), context(nets[1], len(x)))
    assert len({o.tobytes() for o in out}) >= 12  # shift: 49 possible moves on 12x12


def test_blur_draws_parameters_per_group(nets):
    group = make_mutator("blur").group
    x = np.repeat(batch(1), 8 * group, axis=0)
    out = make_mutator("blur").mutate(x, np.random.default_rng(0), context(nets[1], len(x)))
    assert len({out[i * group].tobytes() for i in range(8)}) > 1  # groups draw their own kernel size
    assert all(np.array_equal(out[0], out[i]) for i in range(group))  # one draw within a group


AFFINE_CASES = [
    dict(rotate=17.0),
    dict(rotate=-25.0, scale=0.85),
    dict(shear=12.0),
    dict(translate=(2, -3)),
    dict(rotate=33.0, scale=1.15, shear=-7.0, translate=(1, 2)),
]


@pytest.mark.parametrize("shape", [(12, 12, 1), (20, 15, 3)])
@pytest.mark.parametrize("case", AFFINE_CASES, ids=repr)
def test_warp_affine_matches_albumentations(case, shape):
    import albumentations as A
    import cv2

    from idcgen.fuzz.mutators.geometry import affine_matrices, warp_affine

    rotate, scale, shear = case.get("rotate", 0.0), case.get("scale", 1.0), case.get("shear", 0.0)
    tx, ty = case.get("translate", (0, 0))
    x = np.random.default_rng(0).random((3, *shape), dtype=np.float32)
    reference = A.Affine(
        rotate=(rotate, rotate),
        scale=(scale, scale),
        shear={"x": (shear, shear), "y": (0, 0)},
        translate_px={"x": (tx, tx), "y": (ty, ty)},
        keep_ratio=True,
        border_mode=cv2.BORDER_CONSTANT,
        fill=0,
        p=1.0,
    )
    expected = np.stack([reference(image=image)["image"].reshape(shape) for image in x])
    # albumentations negates the drawn shear angle
    matrices = affine_matrices(
        shape[0], shape[1], rotate=rotate, scale=scale, shear_x=-shear, translate_x=tx, translate_y=ty
    ).repeat(3, axis=0)
    np.testing.assert_allclose(warp_affine(x, matrices), expected, atol=2e-5)


def test_warp_affine_identity_and_canvas_chunks(monkeypatch):
    from idcgen.fuzz.mutators import geometry as transforms

    x = np.random.default_rng(1).random((7, 9, 11, 5), dtype=np.float32)  # 5 channels: two remaps
    np.testing.assert_array_equal(transforms.warp_affine(x, transforms.affine_matrices(9, 11).repeat(7, 0)), x)
    matrices = transforms.affine_matrices(9, 11, rotate=np.linspace(-40, 40, 7), scale=np.linspace(0.7, 1.3, 7))
    whole = transforms.warp_affine(x, matrices)
    monkeypatch.setattr(transforms, "_MAX_ROWS", 2 * (9 + 2 * transforms._PAD))  # canvases of 2 images
    np.testing.assert_allclose(transforms.warp_affine(x, matrices), whole, atol=1e-4)
    assert not np.allclose(whole, x)


@pytest.mark.parametrize("name", ["rotate", "scale", "shear"])
def test_affine_mutators_draw_as_documented(name, nets):
    """rotate/scale/shear draw one uniform value per image from their range, in batch order."""
    import albumentations as A
    import cv2

    from idcgen.fuzz.mutators.geometry import affine_matrices, warp_affine

    x, mutator = batch(5), make_mutator(name)
    out = mutator.mutate(x, np.random.default_rng(3), context(nets[1], 5))
    low, high = {"rotate": (-30.0, 30.0), "scale": (0.8, 1.2), "shear": (-20.0, 20.0)}[name]
    drawn = np.random.default_rng(3).uniform(low, high, 5)
    key = {"rotate": "rotate", "scale": "scale", "shear": "shear_x"}[name]
    np.testing.assert_allclose(out, np.clip(warp_affine(x, affine_matrices(12, 12, **{key: drawn})), 0, 1))
    if name == "rotate":  # and the same as albumentations' Affine with that angle
        first = A.Affine(rotate=(drawn[0], drawn[0]), border_mode=cv2.BORDER_CONSTANT, fill=0, p=1.0)
        np.testing.assert_allclose(out[0], first(image=x[0])["image"].reshape(12, 12, 1), atol=2e-5)


def test_shift_moves_whole_pixels_within_the_limit(nets):
    x = np.zeros((64, 12, 12, 1), np.float32)
    x[:, 5, 6] = 1.0  # one bright pixel, away from the border
    out = make_mutator("shift(limit=0.2)").mutate(x, np.random.default_rng(0), context(nets[1], 64))
    assert set(np.unique(out)) == {0.0, 1.0}  # whole pixels: no interpolation
    rows, cols = (
        np.nonzero(out[..., 0].reshape(64, -1) == 1.0)[1] // 12,
        np.nonzero(out[..., 0].reshape(64, -1))[1] % 12,
    )
    moves = set(zip((rows - 5).tolist(), (cols - 6).tolist()))
    assert all(abs(dy) <= 2 and abs(dx) <= 2 for dy, dx in moves) and len(moves) > 10


@pytest.mark.parametrize(
    "name, albumentations_kwargs",
    [
        ("brightness", lambda v: dict(brightness_limit=(v, v), contrast_limit=(0.0, 0.0))),
        ("contrast", lambda v: dict(brightness_limit=(0.0, 0.0), contrast_limit=(v - 1.0, v - 1.0))),
    ],
)
def test_photometric_mutators_match_albumentations(name, albumentations_kwargs, nets):
    import albumentations as A

    x = batch(4)
    out = make_mutator(name).mutate(x, np.random.default_rng(5), context(nets[1], 4))
    drawn = np.random.default_rng(5).uniform(*((-0.2, 0.2) if name == "brightness" else (0.8, 1.2)), 4)
    for i in range(4):
        expected = A.RandomBrightnessContrast(**albumentations_kwargs(drawn[i]), p=1.0)(image=x[i])["image"]
        np.testing.assert_allclose(out[i], np.clip(expected, 0, 1), atol=1e-6)


def test_noise_std_is_drawn_per_image(nets):
    x = np.full((200, 12, 12, 1), 0.5, np.float32)
    out = make_mutator("noise(std_low=0.02, std_high=0.08)").mutate(x, np.random.default_rng(0), context(nets[1], 200))
    std = (out - x).reshape(200, -1).std(axis=1)
    assert 0.015 < std.min() < 0.03 and 0.07 < std.max() < 0.095  # 144 pixels each: std estimates +-6 %


@pytest.mark.parametrize("name", ["rotate", "shift", "scale", "shear"])
@pytest.mark.parametrize("channels", [1, 3])
def test_mutate_with_reference_moves_both_alike(name, channels, nets):
    mutator = make_mutator(name)
    x, reference = batch(6, channels, seed=1), batch(6, channels, seed=2)
    reference[[1, 4]] = x[[1, 4]]  # seeds are their own reference
    ctx = context(nets[channels], 6)
    mutants, moved = mutator.mutate_with_reference(x, reference, np.random.default_rng(4), ctx)
    np.testing.assert_allclose(mutants, mutator.mutate(x, np.random.default_rng(4), ctx), atol=1e-5)
    np.testing.assert_allclose(moved, mutator.mutate(reference, np.random.default_rng(4), ctx), atol=1e-5)
    np.testing.assert_array_equal(moved[[1, 4]], mutants[[1, 4]])
    with pytest.raises(InputError, match="references of shape"):
        mutator.mutate_with_reference(x, reference[:3], np.random.default_rng(4), ctx)


def test_affine_flags():
    assert {m.name for m in MUTATORS if m.affine} == {"rotate", "shift", "scale", "shear"}
    assert {m.name for m in MUTATORS if m.needs_model} == {
        "relevant_pixels",
        "fgsm",
        "bim",
        "pgd",
        "cw",
        "jsma",
        "deepxplore",
    }


# ---- attacks ------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", ["fgsm(eps=0.1)", "bim(eps=0.1, nb_iter=3)", "pgd(eps=0.1, nb_iter=3)"])
@pytest.mark.parametrize("value_range", [(0.0, 1.0), (-1.0, 1.0)])
def test_linf_attacks_stay_in_the_eps_ball(spec, value_range, nets):
    x = batch(8, value_range=value_range)
    out = make_mutator(spec).mutate(x, np.random.default_rng(0), context(nets[1], 8, value_range))
    eps = 0.1 * (value_range[1] - value_range[0])
    assert np.abs(out - x).max() <= eps + 1e-6
    if spec.startswith("fgsm"):  # one step of eps on every unclipped pixel
        assert np.abs(out - x).max() >= eps - 1e-6


def test_attacks_use_known_labels(nets):
    from idcgen.fuzz.mutators.attacks import attack_labels

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
        x, np.random.default_rng(0), context(net, 4)
    )
    assert (net.predict(out) != net.predict(x)).any()
    assert np.abs(out - x).max() > 0


def test_jsma_only_raises_a_few_pixels(nets):
    net, x = nets[1], batch(2)
    out = make_mutator("jsma(gamma=0.1)").mutate(x, np.random.default_rng(0), context(net, 2))
    assert (out >= x).all()  # theta > 0 only increases pixels
    assert ((out != x).reshape(2, -1).sum(axis=1) <= 0.1 * 144 + 2).all()


# ---- specs --------------------------------------------------------------------------------------
def test_make_mutator_parses_specs():
    assert make_mutator("gauss").params() == {"std": 0.05}
    assert make_mutator(" gauss( std = 0.1 ) ").params() == {"std": 0.1}
    assert make_mutator("fgsm(eps=0.1)").eps == 0.1
    assert make_mutator("scale(low=0.9, high=1.1)").params() == {"low": 0.9, "high": 1.1}
    assert make_mutator("blur(max_kernel=7)").max_kernel == 7
    assert repr(make_mutator("gauss(std=1)")) == "gauss(std=1)"  # stored unchanged


def test_parse_mutators_splits_at_top_level_commas():
    mutators = parse_mutators("gauss(std=0.05), rotate,bim(eps=0.1, eps_iter=0.01),fgsm(eps=0.1)")
    assert [repr(m) for m in mutators] == [
        "gauss(std=0.05)",
        "rotate(limit=30.0)",
        "bim(eps=0.1, eps_iter=0.01, nb_iter=10)",
        "fgsm(eps=0.1)",
    ]
    assert [m.name for m in parse_mutators(DEFAULT_MUTATORS)] == DEFAULT_MUTATORS.split(",")


@pytest.mark.parametrize(
    "spec, message",
    [
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
        # a word left unquoted (the README writes constraint='light'): the message says how to write it
        ("deepxplore(constraint=light)", r"Got 'light'; a string goes in quotes: constraint='light'"),
        ("2gauss", "malformed mutator spec"),
    ],
)
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


@pytest.mark.parametrize(
    "mutator", MUTATORS + [make_mutator("rotate(limit=10)"), make_mutator("cw(lr=0.01)")], ids=repr
)
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
    from idcgen.fuzz.mutators.attacks import CW

    net, x = nets[channels], batch(4, channels)
    cw = make_mutator("cw(max_iterations=20, binary_search_steps=2, initial_const=0.1, abort_early=False)")
    both = cw.mutate(x, np.random.default_rng(0), context(net, 4))
    alone = cw.mutate(x[:2], np.random.default_rng(0), context(net, 2))
    assert np.abs(both - x).max() > 0
    np.testing.assert_allclose(both[:2], alone, atol=1e-6)
    monkeypatch.setattr(CW, "chunk_values", 3 * 3 * 144 * channels)  # chunks of 3 and 1
    np.testing.assert_allclose(cw.mutate(x, np.random.default_rng(0), context(net, 4)), both, atol=1e-6)
