"""Driving transforms (idcgen.fuzz.mutators.driving) and the validity rule each mutator is judged by
(idcgen.fuzz.validity). The contract tests of tests/test_mutators.py run on these mutators too."""

import numpy as np
import pytest

from idcgen.errors import ParameterError
from idcgen.fuzz.mutators import REGISTRY, MutationContext, make_mutator
from idcgen.fuzz.validity import Validity
from idcgen.quality import ssim

DRIVING = ["rain", "fog", "sun_flare", "shadow", "motion_blur", "gaussian_blur"]
#: albumentations reads and writes these through uint8: a pixel it leaves alone may move by half a step
STEP = 0.5 / 255 + 1e-6


def ctx(n, value_range=(0.0, 1.0)):
    return MutationContext(network=None, labels=np.full(n, -1), value_range=value_range)


def road(n=4, channels=3, seed=0, level=0.35):
    """66x200 frames (Dave-2's input): a darker textured road below a brighter sky, with lane stripes."""
    rng = np.random.default_rng(seed)
    x = np.full((n, 66, 200, channels), level, np.float32)
    x[:, :25] = level + 0.25  # sky
    x[:, 25:, 95:105] = 0.9  # lane marking
    x += rng.uniform(-0.05, 0.05, x.shape).astype(np.float32)
    return np.clip(x, 0, 1)


def run(spec, x, seed=0, value_range=(0.0, 1.0)):
    return make_mutator(spec).mutate(x, np.random.default_rng(seed), ctx(len(x), value_range))


def test_registered_with_the_scene_rule_and_not_default():
    from idcgen.fuzz.mutators import DEFAULT_MUTATORS

    for name in DRIVING:
        assert REGISTRY[name].validity == "scene" and REGISTRY[name].kind == "transform"
        assert name not in DEFAULT_MUTATORS.split(",")
    deeptest = {"gain", "bias", "median_blur", "bilateral_blur", "deeptest_blur"}  # tests/test_deeptest.py
    assert {name for name, cls in REGISTRY.items() if cls.validity == "scene"} == set(DRIVING) | {
        "deepxplore"
    } | deeptest


def test_fog_is_the_scattering_model_by_hand():
    x = road(3)
    out = run("fog(fog_low=0.5, fog_high=1.5, airlight=0.9)", x, seed=4)
    density = np.random.default_rng(4).uniform(0.5, 1.5, 3)
    for i in range(3):
        for row in (0, 33, 65):
            t = np.exp(-density[i] * (1.0 - 0.5 * row / 65))  # depth 1 at the top, 0.5 at the bottom
            np.testing.assert_allclose(out[i, row], x[i, row] * t + 0.9 * (1 - t), atol=1e-5)
    # brighter and less contrast, more so at the top (further away)
    assert (out.mean(axis=(1, 2, 3)) > x.mean(axis=(1, 2, 3)) + 0.1).all()
    assert (out.std(axis=(1, 2, 3)) < 0.8 * x.std(axis=(1, 2, 3))).all()
    assert np.abs(out[:, 0] - 0.9).mean() < np.abs(out[:, -1] - 0.9).mean()


def test_shadow_darkens_a_region_below_top():
    x = road(8, seed=1)
    out = run("shadow(intensity_low=0.5, intensity_high=0.5)", x)
    assert (out <= x + STEP).all()  # nothing brighter
    assert np.abs(out[:, :33] - x[:, :33]).max() <= STEP  # the top half untouched (top=0.5)
    darker = (out < x - 0.05).all(axis=-1).reshape(8, -1).mean(axis=1)
    assert (darker > 0.02).all() and (darker < 0.5).all()  # a region, not the whole frame
    ratio = out[out < x - 0.05] / x[out < x - 0.05]
    np.testing.assert_allclose(np.median(ratio), 0.5, atol=0.03)  # darkened to 1 - intensity


def test_rain_adds_streaks_and_dims():
    x = road(4, seed=2, level=0.2)
    out = run("rain(slant=0.0, blur=1, brightness=0.8)", x)
    drops = (out > x * 0.8 + 0.2).all(axis=-1)  # grey drops on the dimmed frame
    background = ~drops
    np.testing.assert_allclose(np.median(out[background] / x[background]), 0.8, atol=0.02)  # dimmed
    for mask in drops:
        assert mask.sum() > 50
        # slant 0: vertical streaks, so a drop pixel mostly has a drop pixel above or below it
        ys, xs = np.nonzero(mask)
        neighbours = mask[np.clip(ys - 1, 0, 65), xs] | mask[np.clip(ys + 1, 0, 65), xs]
        assert neighbours.mean() > 0.9
    assert len({m.tobytes() for m in drops}) == 4  # drops drawn per image


def test_sun_flare_brightens_a_spot_in_the_top():
    x = road(6, seed=3, level=0.1) * 0.5
    out = run("sun_flare(radius=0.5, top=0.4)", x)
    assert (out >= x - STEP).all()  # the overlay only adds light
    gain = (out - x).mean(axis=-1)
    for g in gain:
        assert g.max() > 0.2 and (g > 0.05).mean() < 0.5  # bright spots, not the whole frame
        assert g[:27].mean() > g[27:].mean()  # the source is in the top 40 %


@pytest.mark.parametrize("spec", ["motion_blur", "gaussian_blur"])
def test_blurs_keep_the_mean_and_soften_edges(spec):
    x = road(4, seed=4)
    out = run(spec, x)
    np.testing.assert_allclose(out.mean(axis=(1, 2, 3)), x.mean(axis=(1, 2, 3)), atol=0.01)
    edge = np.abs(np.diff(x[:, 40:, 90:110], axis=2)).max(axis=(1, 2, 3))
    assert (np.abs(np.diff(out[:, 40:, 90:110], axis=2)).max(axis=(1, 2, 3)) < edge).all()


@pytest.mark.parametrize("name", DRIVING)
def test_each_image_gets_its_own_draw_and_the_rng_decides(name):
    x = np.repeat(road(1, seed=5), 8, axis=0)
    out = run(name, x, seed=1)
    assert len({o.tobytes() for o in out}) == 8
    np.testing.assert_array_equal(out, run(name, x, seed=1))
    assert not np.array_equal(out, run(name, x, seed=2))


@pytest.mark.parametrize("name", DRIVING)
def test_grayscale(name):
    grey = road(3, channels=1, seed=6)
    out = run(name, grey, seed=3)
    assert out.shape == grey.shape and not np.array_equal(out, grey)
    if getattr(REGISTRY[name], "rgb_only", False):
        # the grey frame as RGB, transformed by the same draws, brought back as the channels' mean
        rgb = run(name, np.repeat(grey, 3, axis=-1), seed=3)
        np.testing.assert_allclose(out, rgb.mean(axis=-1, keepdims=True), atol=1e-6)


@pytest.mark.parametrize("name", DRIVING)
def test_other_value_range_is_the_same_transform(name):
    x = road(2, seed=7)
    out = run(name, x * 2 - 1, value_range=(-1.0, 1.0))
    np.testing.assert_allclose(out, run(name, x) * 2 - 1, atol=1e-5)


def test_bad_parameters_get_one_line():
    with pytest.raises(ParameterError, match="'fog_high' parameter of fog must be >= fog_low"):
        make_mutator("fog(fog_low=0.8, fog_high=0.2)")
    with pytest.raises(ParameterError, match="'intensity_high' parameter of shadow"):
        make_mutator("shadow(intensity_low=0.9, intensity_high=0.1)")
    with pytest.raises(ParameterError, match="'max_kernel' parameter of motion_blur"):
        make_mutator("motion_blur(max_kernel=2)")


# ---- validity: the rule each mutator is judged by -----------------------------------------------
def test_scene_rule_is_an_ssim_floor_and_pixel_rule_is_deephunters():
    x = road(4, seed=8)
    fogged = run("fog(fog_low=0.8, fog_high=1.2)", x)
    washed = np.random.default_rng(1).uniform(0, 1, x.shape).astype(np.float32)  # the scene is gone
    v = Validity()
    fog, gauss = make_mutator("fog"), make_mutator("gauss")
    assert np.abs(fogged - x).max() > 0.2  # not an L-inf-bounded change ...
    assert not v.check(fogged, x, gauss).any() and not v.check(fogged, x).any()
    assert (ssim(fogged, x) >= 0.3).all() and v.check(fogged, x, fog).all()  # ... but the scene is kept
    both = np.concatenate([fogged[:2], washed[:2]])
    np.testing.assert_array_equal(v.check(both, x, fog), [True, True, False, False])
    np.testing.assert_array_equal(Validity(ssim=0.99).check(fogged, x, fog), ssim(fogged, x) >= 0.99)
    assert Validity(enabled=False).check(washed, x, fog).all()
    # pixel-level mutators: exactly DeepHunter's bounds, mutator given or not
    noisy = np.clip(x + np.random.default_rng(0).normal(0, 0.1, x.shape).astype(np.float32), 0, 1)
    for m in (gauss, make_mutator("rotate"), make_mutator("blur"), None):
        np.testing.assert_array_equal(v.check(noisy, x, m), v.check(noisy, x))
    # smaller than SSIM's window: only the range, which every mutant keeps
    assert v.check(np.ones((2, 8, 8, 1), np.float32), np.zeros((2, 8, 8, 1), np.float32), fog).all()


def test_validity_names_the_scene_rule_and_refuses_unknown_rules():
    v = Validity()
    assert v.describe() == v.describe([make_mutator("gauss")])  # unchanged without scene mutators
    assert v.describe([make_mutator("gauss"), make_mutator("fog"), make_mutator("rain")]).endswith(
        "; fog, rain: SSIM >= 0.3 against the reference instead"
    )
    with pytest.raises(ParameterError, match="validity bound must be in"):
        Validity(ssim=0.0)

    class Odd:
        validity = "vibes"

    with pytest.raises(ParameterError, match="the rules are 'pixel' and 'scene'"):
        v.check(np.zeros((1, 12, 12, 1)), np.zeros((1, 12, 12, 1)), Odd())


def test_fuzzer_judges_each_mutator_by_its_rule(trained_lenet, digits, tmp_path):
    from idcgen.analysis import analyze
    from idcgen.fuzz.fuzzer import Fuzzer

    model, _ = trained_lenet
    x_train, y_train, x_test, y_test = digits
    analysis = analyze(model, x_train[:500], y_train[:500], layer="block2_conv1", m=4, progress=False)
    fuzzer = Fuzzer(analysis, mutators=["fog(fog_low=0.2, fog_high=3.0)"], random_state=0, batch_size=32)
    c = fuzzer.start(x_test[:32], y_test[:32], tmp_path / "c", budget=32)
    step = fuzzer.step(c, 32)
    assert step.error is None and len(step.mutants) == 32
    before = c.corpus.reference[step.parents]  # the parents' reference (the seeds)
    expected = ssim(step.mutants, before) >= 0.3
    np.testing.assert_array_equal(step.valid, expected)
    assert expected.any() and not expected.all()  # the floor decides some both ways
    assert not Validity().check(step.mutants, before).any()  # DeepHunter's bounds would drop all
    np.testing.assert_array_equal(step.references, step.mutants)  # the fogged frame is the new reference


def test_a_scene_change_becomes_the_chains_reference_once(trained_lenet, digits, tmp_path):
    from idcgen.analysis import analyze
    from idcgen.fuzz.fuzzer import Fuzzer
    from idcgen.fuzz.mutators import make_mutator

    model, _ = trained_lenet
    x_train, y_train, x_test, y_test = digits
    analysis = analyze(model, x_train[:500], y_train[:500], layer="block2_conv1", m=4, progress=False)
    fuzzer = Fuzzer(
        analysis,
        mutators=[
            "fog(fog_low=0.2, fog_high=1.0)",
            "gauss(std=0.02)",
            "rotate(limit=10)",
            "deepxplore(constraint='light', iterations=2)",
        ],
        guide="none",
        random_state=0,
        batch_size=32,
    )
    c = fuzzer.run(x_test[:32], y_test[:32], budget=512, progress=False)
    corpus = c.corpus
    moving = {"fog", "rotate"}  # deepxplore and gauss keep the chain's reference
    assert [make_mutator(m).moves_reference for m in ("fog", "rotate", "gauss", "deepxplore")] == [
        True,
        True,
        False,
        False,
    ]
    chains = [[m.split("(")[0] for m in chain] for chain in corpus.chains]
    assert any("fog" in ch and "gauss" in ch[ch.index("fog") :] for ch in chains)  # pixel mutations after a fog
    for i, chain in enumerate(chains):
        assert sum(m in moving for m in chain) <= 1, chain  # one reference-moving step
        assert corpus.affine[i] == any(m in moving for m in chain)
        if "fog" in chain:  # the reference is the entry the fog made, whatever followed
            j = i
            while chains[j][-1] != "fog":
                j = corpus.parent[j]
            np.testing.assert_array_equal(corpus.reference[i], corpus.x[j])
        elif "rotate" not in chain:
            np.testing.assert_array_equal(corpus.reference[i], corpus.x[corpus.root[i]])


UDACITY = (
    __import__("pathlib").Path(__file__).resolve().parents[1]
    / ".."
    / "shared"
    / "data"
    / "udacity"
    / "udacity_test_center_160x120.zip"
)


@pytest.mark.skipif(not UDACITY.exists(), reason="the Udacity frames (../shared) are not here")
def test_on_udacity_frames_the_scene_rule_keeps_what_deephunter_drops():
    import zipfile

    import cv2

    with zipfile.ZipFile(UDACITY) as z:
        names = sorted(n for n in z.namelist() if n.endswith((".jpg", ".png")))[::350][:16]
        x = (
            np.stack(
                [
                    cv2.resize(
                        cv2.imdecode(np.frombuffer(z.read(n), np.uint8), cv2.IMREAD_COLOR)[..., ::-1],
                        (200, 66),
                        interpolation=cv2.INTER_AREA,
                    )
                    for n in names
                ]
            ).astype(np.float32)
            / 255
        )
    v = Validity()
    for name in DRIVING:
        out = run(name, x)
        assert v.check(out, x, REGISTRY[name]()).mean() >= 0.9, name  # the defaults keep the scene ...
        assert v.check(out, x).mean() <= 0.25, name  # ... and are no L-inf-bounded change


def test_mutators_command_says_which_rule():
    from typer.testing import CliRunner

    from idcgen.cli import app

    result = CliRunner().invoke(app, ["mutators"])
    assert result.exit_code == 0
    lines = {line.split()[0]: line for line in result.output.splitlines() if line.strip()}
    for name in DRIVING:
        assert lines[name].endswith("(validity: scene, SSIM floor)")
    assert "validity" not in lines["gauss"] and "validity" not in lines["blur"]
