"""DeepTest's metamorphic oracle (idcgen.fuzz.deeptest), its transforms (idcgen.fuzz.mutators.deeptest) and
the Udacity recipes' blocked split of the real steering angles (recipes/kit/data.py)."""

import csv
import sys
from pathlib import Path

import numpy as np
import pytest

from idcgen.errors import InputError, ParameterError
from idcgen.fuzz.deeptest import DeepTest, calibrate, erroneous_behaviours, seed_mse, within_eps
from idcgen.fuzz.mutators import REGISTRY, MutationContext, make_mutator
from idcgen.fuzz.oracle import Execution, make_oracle, needs_labels

ROOT = Path(__file__).resolve().parents[1]
UDACITY = ROOT.parent / "shared" / "data" / "udacity"
DEEPTEST_MUTATORS = ["gain", "bias", "median_blur", "bilateral_blur", "deeptest_blur"]


def steering_run(predictions, labels):
    predictions = np.asarray(predictions, np.float64)
    return Execution(
        np.zeros((len(predictions), 2, 2, 1), np.float32),
        predictions[:, None],
        predictions,
        np.asarray(labels, np.float64),
        np.zeros(len(predictions)),
    )


# ---- the oracle ---------------------------------------------------------------------------------
def test_the_relation_by_hand():
    # mse 1/64, lam 4: an erroneous behaviour when (prediction - label)^2 > 1/16, i.e. |error| > 0.25
    oracle = DeepTest(lam=4, mse=0.015625)
    run = steering_run([0.0, 0.24, 0.26, -0.5, 0.25], [0.0, 0.0, 0.0, -0.2, 0.5])
    # squared errors: 0, 0.0576, 0.0676, 0.09, 0.0625 (exactly on the bound: not erroneous)
    np.testing.assert_array_equal(oracle(run), [False, False, True, True, False])
    assert oracle.bound == 0.0625
    # the seed's own prediction plays no part: the label is the reference
    moved = Execution(run.x, run.probabilities, run.predictions, run.root_labels, np.full(5, 9.0))
    np.testing.assert_array_equal(oracle(moved), oracle(run))


def test_the_mse_is_measured_on_the_seeds_and_kept_in_the_spec():
    predictions, labels = np.array([0.1, -0.2, 0.4]), np.array([0.0, 0.0, 0.1])
    assert seed_mse(predictions, labels) == pytest.approx((0.01 + 0.04 + 0.09) / 3)
    oracle = calibrate(make_oracle("deeptest(lam=5)"), predictions, labels, regression=True)
    assert oracle.mse == pytest.approx(0.14 / 3) and oracle.lam == 5
    assert make_oracle(str(oracle)) == oracle  # the recorded spec gives the same bound back
    assert str(oracle).startswith("deeptest(lam=5, mse=0.0466")
    given = make_oracle("deeptest(lam=2, mse=0.5)")  # an MSE given outright is kept
    assert calibrate(given, predictions, labels, regression=True) == given
    combined = calibrate(
        make_oracle("deeptest(lam=1) & ~deviation(threshold=0.1)"), predictions, labels, regression=True
    )
    assert str(combined) == f"deeptest(lam=1, mse={oracle.mse!r}) & ~deviation(threshold=0.1)"


def test_the_epsilon_filter_by_hand():
    # DeepTest's Eq. 3. Original MSE 1/16; lam 4: a frame breaks the relation when its squared error > 1/4.
    labels = np.zeros(4)
    raised = np.array([0.0, 0.25, -0.25, 0.75])  # squared 0, 1/16, 1/16, 9/16: MSE 11/64 = 0.171875
    assert within_eps(0.171875, 0.0625, 0.109375)  # the change is 7/64 = 0.109375: equal passes
    assert not within_eps(0.171875, 0.0625, 0.109374)
    # the change just above epsilon: the transformation is left out, its one erroneous frame with it
    assert erroneous_behaviours(raised, labels, mse=0.0625, lam=4, eps=0.109) == 0
    # just below epsilon: counted
    assert erroneous_behaviours(raised, labels, mse=0.0625, lam=4, eps=0.11) == 1
    assert erroneous_behaviours(raised, labels, mse=0.0625, lam=4) == 1  # no filter
    assert erroneous_behaviours(raised, labels, mse=0.0625, lam=10, eps=0.11) == 0  # 9/16 <= 10/16
    # a transformation that lowers the MSE by more than epsilon is left out too: |MSE_t - MSE| counts
    lowered = np.array([0.0, 0.0, 0.0, 0.75])  # MSE 9/64 against 1/4: 7/64 lower; lam 2 bound 1/2 < 9/16
    assert erroneous_behaviours(lowered, labels, mse=0.25, lam=2, eps=0.109) == 0
    assert erroneous_behaviours(lowered, labels, mse=0.25, lam=2, eps=0.11) == 1
    with pytest.raises(ParameterError, match="eps"):
        within_eps(0.1, 0.1, -0.01)


def test_refuses_classifiers_unlabelled_seeds_and_bad_parameters_in_one_line():
    with pytest.raises(InputError, match="is for regression models") as info:
        calibrate(DeepTest(lam=5), np.array([1, 2]), np.array([1, 2]), regression=False)
    assert "\n" not in str(info.value)
    classes = Execution(np.zeros((2, 2, 2, 1)), np.eye(2), np.array([0, 1]), np.array([0, 1]), np.array([0, 1]))
    with pytest.raises(InputError, match="for a classifier use misclassification"):
        DeepTest(lam=5, mse=0.1)(classes)
    with pytest.raises(InputError, match="labelled seeds"):
        seed_mse([0.1, 0.2], [0.0, np.nan])
    with pytest.raises(InputError, match="compares angles with their labels"):
        DeepTest(lam=5, mse=0.1)(steering_run([0.1], [np.nan]))
    with pytest.raises(ParameterError, match="no MSE yet"):
        DeepTest(lam=5)(steering_run([0.1], [0.0]))
    with pytest.raises(ParameterError, match=r"The 'lam' parameter of the deeptest oracle must be a number > 0"):
        make_oracle("deeptest(lam=0)")
    with pytest.raises(ParameterError, match="takes lam=L and optionally mse=M"):
        make_oracle("deeptest(threshold=3)")
    assert needs_labels(make_oracle("deeptest(lam=5)")) and needs_labels(make_oracle("deviation | deeptest"))
    assert not needs_labels(make_oracle("deviation"))


def steering_setup(n=40):
    import keras

    from idcgen.analysis import analyze
    from idcgen.framework import Network

    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 1))
    h = keras.layers.Conv2D(4, 3, activation="relu", name="conv")(inp)
    h = keras.layers.Flatten(name="flatten")(h)
    h = keras.layers.Dense(6, activation="relu", name="hidden")(h)
    network = Network(keras.Model(inp, keras.layers.Dense(1, activation="tanh", name="steer")(h)))
    x = np.round(np.random.default_rng(1).random((n, 8, 8, 1)) * 255).astype(np.float32) / 255
    y = network.predict(x).astype(np.float64) + np.linspace(-0.1, 0.1, n)
    return network, x, y, analyze(network, x, y, m=3, progress=False)


def test_a_campaign_records_the_seeds_mse_and_its_findings_break_the_relation(tmp_path):
    import json

    from idcgen.export import export_campaign
    from idcgen.fuzz.fuzzer import Fuzzer

    network, x, y, found = steering_setup()
    mse = float(np.mean((network.predict(x).astype(np.float64) - y) ** 2))
    fuzzer = Fuzzer(
        found,
        mutators=["gain", "deeptest_blur", "rotate(limit=30.0)"],
        oracle="deeptest(lam=2)",
        batch_size=40,
        random_state=0,
    )
    campaign = fuzzer.run(x, y, budget=240, out=tmp_path / "camp", progress=False)
    recorded = json.loads((tmp_path / "camp" / "campaign.json").read_text())["config"]["oracle"]
    assert recorded == f"deeptest(lam=2, mse={mse!r})"
    findings = campaign.findings()
    assert len(findings["id"]) > 0
    again = network.predict(findings["x"]).astype(np.float64)
    assert ((again - findings["label"]) ** 2 > 2 * mse).all()
    exported = export_campaign(campaign, out=tmp_path / "exports")  # each finding re-run from its uint8 PNG
    assert exported["findings"]["surviving_uint8"] == len(findings["id"])
    resumed = Fuzzer(
        found, mutators=["gain", "deeptest_blur", "rotate(limit=30.0)"], oracle=recorded, batch_size=40, random_state=0
    ).resume(tmp_path / "camp")
    resumed.close()
    # with the spec as typed (what a parallel run's workers are given), the campaign keeps its measured MSE
    again = Fuzzer(
        found,
        mutators=["gain", "deeptest_blur", "rotate(limit=30.0)"],
        oracle="deeptest(lam=2)",
        batch_size=40,
        random_state=0,
    )
    again.resume(tmp_path / "camp").close()
    assert str(again.oracle) == recorded
    # another lam, or another MSE given outright, is another oracle: refused
    for other in ("deeptest(lam=3)", f"deeptest(lam=2, mse={2 * mse!r})"):
        with pytest.raises(ParameterError, match="made with other settings"):
            Fuzzer(
                found,
                mutators=["gain", "deeptest_blur", "rotate(limit=30.0)"],
                oracle=other,
                batch_size=40,
                random_state=0,
            ).resume(tmp_path / "camp")
    with pytest.raises(InputError, match=r"the seeds have no labels, which the deeptest\(lam=2\) oracle needs"):
        Fuzzer(found, mutators=["gain"], oracle="deeptest(lam=2)").run(x, None, budget=40, progress=False)


# ---- the transforms -----------------------------------------------------------------------------
def ctx(n):
    return MutationContext(network=None, labels=np.full(n, -1), value_range=(0.0, 1.0))


def run(spec, x, seed=0):
    return make_mutator(spec).mutate(x, np.random.default_rng(seed), ctx(len(x)))


@pytest.fixture(scope="module")
def frames():
    """Six real Udacity frames at Dave-2's input (sky cropped, 66x200), or skip without ../shared."""
    archive = UDACITY / "udacity_test_center_160x120.zip"
    if not archive.exists():
        pytest.skip("the Udacity frames (../shared) are not here")
    import zipfile

    import cv2

    with zipfile.ZipFile(archive) as z:
        names = sorted(n for n in z.namelist() if n.endswith(".jpg"))[::1000][:6]
        images = [cv2.imdecode(np.frombuffer(z.read(n), np.uint8), cv2.IMREAD_COLOR)[40:, :, ::-1] for n in names]
    return np.stack([cv2.resize(i, (200, 66), interpolation=cv2.INTER_AREA) for i in images]).astype(np.float32) / 255


def test_registered_as_scene_transforms():
    for name in DEEPTEST_MUTATORS:
        assert REGISTRY[name].kind == "transform" and REGISTRY[name].validity == "scene"


def test_gain_and_bias_on_a_real_frame(frames):
    out = run("gain(low=1.2, high=3.0)", frames, seed=3)
    gains = np.random.default_rng(3).uniform(1.2, 3.0, len(frames))
    for image, mutant, gain in zip(frames, out, gains):
        unsaturated = image * gain < 1
        np.testing.assert_allclose(mutant[unsaturated], image[unsaturated] * gain, rtol=1e-5)
        assert (mutant[~unsaturated] == 1).all()
    out = run("bias", frames, seed=4)
    biases = np.random.default_rng(4).uniform(10 / 255, 100 / 255, len(frames))
    np.testing.assert_allclose(out, np.clip(frames + biases[:, None, None, None], 0, 1), atol=1e-6)


def test_blurs_on_a_real_frame_are_opencvs(frames):
    import cv2

    out = run("bilateral_blur", frames)
    for image, mutant in zip(frames, out):
        np.testing.assert_allclose(mutant, np.clip(cv2.bilateralFilter(image, 9, 75 / 255, 75), 0, 1), atol=1e-6)
        assert 0 < np.abs(mutant - image).mean() < 0.05  # smoothed, not a different scene
    out = run("median_blur", frames, seed=1)
    sizes = np.random.default_rng(1).choice([3, 5], size=len(frames))
    for image, mutant, size in zip(frames, out, sizes):
        np.testing.assert_allclose(mutant, cv2.medianBlur(image, int(size)), atol=1e-6)
    # deeptest_blur: each frame gets one of DeepTest's ten settings, the one the rng draws
    from idcgen.fuzz.mutators.deeptest import DEEPTEST_BLURS, blur_image

    many = np.concatenate([frames] * 4)
    out = run("deeptest_blur", many, seed=2)
    drawn = np.random.default_rng(2).integers(0, 10, size=len(many))
    for image, mutant, i in zip(many, out, drawn):
        np.testing.assert_allclose(mutant, np.clip(blur_image(image, *DEEPTEST_BLURS[i]), 0, 1), atol=1e-6)
    assert len(set(drawn.tolist())) >= 6
    # every blur keeps the frame's mean and lowers its local contrast
    for spec in ("median_blur", "bilateral_blur", "deeptest_blur"):
        blurred = run(spec, frames)
        assert np.abs(blurred.mean() - frames.mean()) < 0.01
        assert np.abs(np.diff(blurred, axis=2)).mean() < np.abs(np.diff(frames, axis=2)).mean()


def test_the_scene_rule_keeps_deeptests_blurs_on_real_frames(frames):
    from idcgen.fuzz.validity import Validity

    v = Validity()
    for spec in ("median_blur", "bilateral_blur", "deeptest_blur"):
        assert v.check(run(spec, frames), frames, make_mutator(spec)).mean() >= 0.8, spec


def test_bad_parameters_get_one_line():
    with pytest.raises(ParameterError, match=r"The 'high' parameter of gain must be >= low \(2.0\)"):
        make_mutator("gain(low=2.0, high=1.5)")
    with pytest.raises(ParameterError, match=r"The 'max_kernel' parameter of median_blur must be an int in the range"):
        make_mutator("median_blur(max_kernel=7)")


# ---- the blocked split of the real angles ---------------------------------------------------------
@pytest.fixture()
def udacity_data(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "recipes"))
    for name in [n for n in sys.modules if n == "kit" or n.startswith("kit.")]:
        del sys.modules[name]
    import kit.data

    return kit.data


def test_blocked_split_by_hand(udacity_data):
    train, test = udacity_data.blocked_split(100, blocks=10, test_blocks=(2, 7), gap=3)
    np.testing.assert_array_equal(test, np.r_[10:20, 60:70])
    np.testing.assert_array_equal(train, np.r_[0:7, 23:57, 73:100])
    train, test = udacity_data.blocked_split(5614)
    assert len(test) == 1122 and len(train) == 4412 and not set(train) & set(test)
    assert min(abs(int(a) - int(b)) for a in (561, 1122, 3368, 3929) for b in train) >= 20
    with pytest.raises(ValueError, match="test_blocks must lie in 1..10"):
        udacity_data.blocked_split(100, test_blocks=(0,))


@pytest.mark.skipif(not (UDACITY / "CH2_final_evaluation.csv").exists(), reason="../shared is not here")
def test_the_real_angles_pass_the_label_check_and_the_template_fails(udacity_data):
    ids, angles = udacity_data.read_angles()
    assert len(ids) == 5614 and (np.diff(ids) > 0).all()
    assert udacity_data.check_labels()["lag1_autocorrelation"] > 0.99
    with pytest.raises(SystemExit, match="look like random values"):
        udacity_data.check_labels(UDACITY / "final_example.csv")
    train, test = udacity_data.blocked_split(len(ids))
    baseline = np.mean((angles[test] - angles[train].mean()) ** 2)  # the training mean as a predictor
    assert baseline == pytest.approx(0.0454, abs=5e-5)


# ---- DeepTest's grid in recipes/deeptest.py ("grid") ---------------------------------------------
@pytest.fixture()
def recipe(tmp_path, monkeypatch):
    """Import a recipe with IDCGEN_OUTPUTS in a temporary folder (as tests/test_recipes.py's fixture does)."""
    import importlib

    from test_recipes import forget_recipes

    monkeypatch.setenv("IDCGEN_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.syspath_prepend(str(ROOT / "recipes"))
    forget_recipes()
    yield importlib.import_module
    forget_recipes()


def test_deeptests_grid_is_its_seven_transformations_at_ten_values(recipe):
    from idcgen.fuzz.mutators.deeptest import DEEPTEST_BLURS

    grid = recipe("deeptest").GRID
    assert list(grid) == ["translation", "scale", "shear", "rotation", "contrast", "brightness", "blur"]
    assert all(len(values) == 10 for values in grid.values())
    assert grid["translation"][0] == 10 and grid["translation"][-1] == 100
    assert grid["scale"][0] == 1.5 and grid["scale"][-1] == 6.0
    assert grid["shear"][0] == 0.1 and grid["shear"][-1] == 1.0
    assert grid["rotation"][0] == 3 and grid["rotation"][-1] == 30
    assert grid["contrast"][0] == 1.2 and grid["contrast"][-1] == 3.0
    assert grid["brightness"][0] == 10 and grid["brightness"][-1] == 100
    assert grid["blur"] == tuple(f"{kind} {size}" for kind, size in DEEPTEST_BLURS)


def test_grid_transforms_by_hand(recipe):
    deeptest = recipe("deeptest")
    frame = np.zeros((120, 160, 3), np.uint8)
    frame[8, 20] = 200  # one bright pixel at x 20, y 8

    def moved(transformation, value):
        out = deeptest.grid_transform(frame, transformation, value)
        return tuple(int(v) for v in np.argwhere(out[..., 0] == 200)[0]) if (out == 200).any() else None

    assert moved("translation", 40) == (18, 30)  # 40 px of a 640-wide frame: 10 px of a 160-wide one
    assert moved("shear", 0.5) == (8, 16)  # x' = x - 0.5 y
    assert moved("rotation", 180) == (112, 140)  # about the centre (80, 60)
    assert deeptest.grid_transform(frame, "scale", 2.0).shape == (240, 320, 3)
    bright = deeptest.grid_transform(frame, "brightness", 100)
    assert bright[8, 20, 0] == 255 and bright[0, 0, 0] == 100  # saturates at 255
    assert deeptest.grid_transform(frame, "contrast", 1.2)[8, 20, 0] == 240
    assert deeptest.grid_transform(frame, "contrast", 1.4)[8, 20, 0] == 255
    assert deeptest.grid_transform(frame, "blur", "median 3")[8, 20, 0] == 0  # a lone pixel is no median
    with pytest.raises(ValueError, match="transformation must be one of translation"):
        deeptest.grid_transform(frame, "fog", 1)
    sky = np.zeros((120, 160, 3), np.uint8)
    sky[:40] = 255  # the rows Dave-2 never sees
    x = deeptest.model_input([sky, np.full((120, 160, 3), 51, np.uint8)])
    assert x.shape == (2, 66, 200, 3) and x.dtype == np.float32
    assert x[0].max() == 0 and np.allclose(x[1], 0.2)


def test_the_epsilon_filter_over_grid_rows(recipe):
    deeptest = recipe("deeptest")
    rows = [
        {"mse original": 0.03, "mse transformed": 0.05, "erroneous lambda=5": 7},  # MSE 0.02 higher
        {"mse original": 0.03, "mse transformed": 0.07, "erroneous lambda=5": 11},  # 0.04 higher
    ]
    assert deeptest.grid_count(rows, lam=5, eps=0.03) == (7, 1)
    assert deeptest.grid_count(rows, lam=5, eps=0.05) == (18, 2)
    assert deeptest.grid_count(rows, lam=5) == (18, 2)
    with_every_lambda = [
        dict(r, model="m", transformation=t, **{f"erroneous lambda={lam}": 1 for lam in (1, 2, 3, 4, 6, 8, 10)})
        for r, t in zip(rows, ("blur", "shear"))
    ]
    summary = deeptest.grid_tables(with_every_lambda, ["m"])
    assert len(summary) == 2 * (2 * 7 + 6 + 8)  # model m and all: Table 8 and both halves of Table 7
    total = {(r["model"], r["lambda"], r["eps"]): r["erroneous"] for r in summary if r["transformation"] == "total"}
    assert total["m", 5, 0.03] == 7 and total["all", 5, "none"] == 18


@pytest.mark.skipif(not (UDACITY / "CH2_final_evaluation.csv").exists(), reason="../shared is not here")
def test_the_grids_untransformed_frames_are_the_models_test_frames(recipe):
    deeptest = recipe("deeptest")
    frames, angles, ids = deeptest.camera_frames(200)
    x, y = deeptest.udacity("test")
    assert len(frames) == 6 and (np.diff(ids) > 0).all()
    np.testing.assert_array_equal(deeptest.model_input(frames), x[::200])
    np.testing.assert_array_equal(angles, y[::200])


def test_the_grid_on_a_small_steering_model(recipe, tmp_path):
    import keras

    from idcgen.framework import Network

    deeptest = recipe("deeptest")
    keras.utils.set_random_seed(0)
    inp = keras.Input((66, 200, 3))
    h = keras.layers.Conv2D(2, 5, strides=4, activation="relu")(inp)
    model = keras.Model(inp, keras.layers.Dense(1)(keras.layers.GlobalAveragePooling2D()(h)))
    frames = np.random.default_rng(0).integers(0, 256, (4, 120, 160, 3), dtype=np.uint8)
    y = np.array([0.0, 0.1, -0.1, 0.3])
    result = deeptest.grid({"tiny": Network(model)}, frames, y)
    rows = result["rows"]
    assert len(rows) == 70 and {r["frames"] for r in rows} == {4}
    clean = np.asarray(model.predict(deeptest.model_input(frames), verbose=0), np.float64).ravel()
    assert result["mse"]["tiny"] == pytest.approx(np.mean((clean - y) ** 2))
    for r in rows:  # a larger lambda never flags more
        counts = [r[f"erroneous lambda={lam}"] for lam in range(1, 11)]
        assert counts == sorted(counts, reverse=True) and counts[0] <= 4
    deeptest.write_grid_tables(tmp_path, result, ["tiny"], "python recipes/deeptest.py --parts grid")
    text = (tmp_path / "study.md").read_text()
    assert "## Table 8" in text and "| translation | " in text and "| 0.03 | " in text
    with open(tmp_path / "runs.csv", newline="") as handle:
        assert len(list(csv.DictReader(handle))) == 70
