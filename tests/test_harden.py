"""idcgen harden on a small real LeNet-1 and a short campaign."""

import numpy as np
import pytest

from idcgen.errors import InputError, ParameterError


@pytest.fixture(scope="module")
def campaign(trained_lenet, digits, tmp_path_factory):
    from idcgen.analysis import analyze
    from idcgen.fuzz.fuzzer import Fuzzer

    model, _ = trained_lenet
    x_train, y_train, x_test, y_test = digits
    analysis = analyze(model, x_train[:1000], y_train[:1000], layer="block2_conv1", m=6, progress=False)
    fuzzer = Fuzzer(analysis, mutators=["rotate", "gauss(std=0.05)", "directed"], batch_size=64, random_state=0)
    c = fuzzer.start(x_test[::20], y_test[::20], tmp_path_factory.mktemp("h") / "c", budget=384)
    fuzzer.run(c, progress=False)
    return c


def test_control_twins_match_the_kept_mutants(campaign, trained_lenet):
    from idcgen.framework import Network
    from idcgen.hardening import campaign_augmentations

    guided, control = campaign_augmentations(campaign, Network(trained_lenet[0]))
    kept = campaign.corpus.parent >= 0
    assert len(guided.y) == len(control.y) == kept.sum() > 0
    np.testing.assert_array_equal(guided.y, control.y)
    assert not np.array_equal(guided.x, control.x)
    assert control.x.min() >= 0 and control.x.max() <= 1


def test_harden_table_and_files(campaign, trained_lenet, digits, tmp_path):
    from idcgen.hardening import EVALUATIONS, Assessment, Retraining, harden

    model, _ = trained_lenet
    x_train, y_train, x_test, y_test = digits
    summary = harden(
        model,
        x_train[:600],
        y_train[:600],
        campaign,
        x_test[1::5],
        y_test[1::5],
        retraining=Retraining(epochs=1),
        out=tmp_path,
        progress=False,
        assessment=Assessment(corruptions=["contrast"], severities=[5], pgd_eps=[0.1]),
    )
    models = [row["model"] for row in summary["table"]]
    assert models == ["original", "IDC-guided", "random"]
    for row in summary["table"]:
        assert all(0 <= row[name] <= 1 for name in EVALUATIONS)
    original = summary["table"][0]
    assert original["clean"] > 0.6 and original["FGSM (eps 0.3)"] < original["clean"]
    for name in ("harden.md", "harden.csv", "hardening.csv", "harden.json", "harden.png"):
        assert (tmp_path / name).exists()
    assert "IDC-guided" in (tmp_path / "harden.md").read_text()


def test_a_suite_built_once_is_measured_as_one_built_inside(campaign, trained_lenet, digits):
    from idcgen.hardening import Assessment, CorruptionSuite, Retraining, harden

    model, _ = trained_lenet
    x_train, y_train, x_test, y_test = digits
    args = (model, x_train[:300], y_train[:300], campaign, x_test[1::10], y_test[1::10])
    kwargs = dict(retraining=Retraining(epochs=1), progress=False, baselines=["clean"])
    inside = harden(
        *args, assessment=Assessment(corruptions=["contrast", "pixelate"], severities=[2, 5], pgd_eps=[0.1]), **kwargs
    )
    x = x_test[1::10].reshape((-1,) + campaign.corpus.x.shape[1:])
    suite = CorruptionSuite(x, ["contrast", "pixelate"], [2, 5], value_range=campaign.value_range)
    shared = harden(*args, assessment=Assessment(corruptions=suite, pgd_eps=[0.1]), **kwargs)
    a, b = inside["rows"][0], shared["rows"][0]  # the original model: the same suite, the same accuracies
    assert a["corruption mean"] == b["corruption mean"] and a["corruption: pixelate"] == b["corruption: pixelate"]
    assert shared["severities"] == [2, 5]
    # Assessment(original=False): the same retrained rows, without the original's (a caller that measured it already)
    without = harden(*args, assessment=Assessment(corruptions=suite, pgd_eps=[0.1], original=False), **kwargs)
    assert [r["arm"] for r in without["rows"]] == [r["arm"] for r in shared["rows"][1:]] == ["IDC-guided", "clean"]
    assert [r["corruption mean"] for r in without["rows"]] == [r["corruption mean"] for r in shared["rows"][1:]]
    assert [t["model"] for t in without["table"]] == ["IDC-guided", "clean"]
    with pytest.raises(InputError, match="built on"):
        harden(*args[:4], x_test[:7], y_test[:7], assessment=Assessment(corruptions=suite, pgd_eps=[0.1]), **kwargs)


def test_harden_refuses_bad_input(campaign, digits):
    from idcgen.framework.keras_zoo import lenet1
    from idcgen.hardening import harden, retrain

    x_train, y_train, x_test, y_test = digits
    with pytest.raises(InputError, match="another model"):
        harden(lenet1(), x_train[:10], y_train[:10], campaign, x_test[:10], y_test[:10], progress=False)
    with pytest.raises(ParameterError, match="'mode' parameter"):
        retrain(lenet1(), x_train[:10], y_train[:10], mode="warm", epochs=1)


def test_harden_on_a_channel_less_model_taking_0_255(trained_lenet, digits, tmp_path):
    """LeNet-1 behind Input((28, 28)) -> Rescaling(1/255) -> Reshape: the campaign mutates (28, 28, 1) images
    in 0..255. The original model's row must equal the same perturbations of the [0, 1] test set measured
    on the bare LeNet-1 (amounts are fractions of the range; FGSM/BIM signs are unchanged by the scale)."""
    import keras

    from idcgen.analysis import analyze
    from idcgen.framework import Network
    from idcgen.fuzz.fuzzer import Fuzzer
    from idcgen.fuzz.mutators import MutationContext, make_mutator
    from idcgen.hardening import EVALUATIONS, Assessment, Retraining, harden, robustness

    lenet, _ = trained_lenet
    x_train, y_train, x_test, y_test = digits
    wrapped = keras.Sequential(
        [keras.Input((28, 28)), keras.layers.Rescaling(1 / 255), keras.layers.Reshape((28, 28, 1)), lenet]
    )
    flat255 = lambda x: (x[..., 0] * 255).astype(np.float32)
    analysis = analyze(wrapped, flat255(x_train[:600]), y_train[:600], layer="block2_conv1", m=4, progress=False)
    fuzzer = Fuzzer(analysis, mutators=["rotate", "gauss(std=0.05)"], batch_size=64, random_state=0)
    assert fuzzer.value_range == (0.0, 255.0)
    c = fuzzer.start(flat255(x_test[::20]), y_test[::20], tmp_path / "c", budget=256)
    fuzzer.run(c, progress=False)
    xt, yt = x_test[1::10], y_test[1::10]
    summary = harden(
        wrapped,
        flat255(x_train[:300]),
        y_train[:300],
        c,
        flat255(xt),
        yt,
        retraining=Retraining(epochs=1),
        progress=False,
        assessment=Assessment(corruptions=["contrast"], severities=[5], pgd_eps=[0.1]),
    )
    original = summary["table"][0]
    rng = np.random.default_rng(0)
    plain = Network(lenet)
    fixed = {
        name: make_mutator(spec).mutate(xt, rng, MutationContext(plain, yt))
        for name, spec in EVALUATIONS.items()
        if spec and not make_mutator(spec).needs_model
    }
    expected = robustness(plain, xt, yt, fixed)
    for name in EVALUATIONS:
        assert abs(original[name] - expected[name]) <= 1.5 / len(yt), name  # one input may round differently
    assert [row["model"] for row in summary["table"]] == ["original", "IDC-guided", "random"]


def test_a_report_folder_given_as_a_file_is_refused_before_the_work(campaign, trained_lenet, digits, tmp_path):
    # harden retrained both models, inspect and affinity ran the model, then each failed on "File exists"
    from typer.testing import CliRunner

    from idcgen.cli import app

    _, model = trained_lenet
    x_train, y_train, x_test, y_test = digits
    np.savez(tmp_path / "d.npz", x=x_train[:50], y=y_train[:50])
    taken = tmp_path / "notes.txt"
    taken.write_text("mine")
    data = str(tmp_path / "d.npz")
    for args in (
        ["harden", "--train", data, "--test", data, "--campaign", str(campaign.folder), "--epochs", "1"],
        ["inspect", "--inputs", data],
        ["affinity", "--inputs", data, "--units", "block2_conv1"],
    ):
        result = CliRunner().invoke(app, args + ["--model", str(model), "--out", str(taken)])
        assert result.exit_code == 1, result.output
        assert result.output.strip().splitlines()[-1] == (
            f"error: --out {taken} is a file; the report is a folder: give a folder name"
        ), result.output
        assert "%" not in result.output  # no progress bar: refused before the model ran
    assert taken.read_text() == "mine"


# ---- issue 47: equal-size baselines from the same seeds, the corruption suite ------------------------------------
@pytest.fixture(scope="module")
def fixed_campaign(trained_lenet, digits, tmp_path_factory):
    """A campaign whose mutators (FGSM, a 3x3 box blur) draw nothing: replaying a kept input's chain on its seed
    must give the kept input back, so the random baseline is checkable exactly."""
    from idcgen.analysis import analyze
    from idcgen.fuzz.fuzzer import Fuzzer
    from idcgen.fuzz.validity import Validity

    model, _ = trained_lenet
    x_train, y_train, x_test, y_test = digits
    analysis = analyze(model, x_train[:600], y_train[:600], layer="block2_conv1", m=8, progress=False)
    mutators = ["fgsm(eps=0.05)", "blur(max_kernel=3)"]  # neither draws; a blur moves edges past beta
    fuzzer = Fuzzer(analysis, mutators=mutators, batch_size=32, random_state=0, validity=Validity(enabled=False))
    c = fuzzer.start(x_test[::40], y_test[::40], tmp_path_factory.mktemp("b") / "c", budget=384)
    fuzzer.run(c, progress=False)
    return c


def _by_hand(campaign):
    """The kept inputs, their seeds and the seeds' labels; median L2 and L-inf of kept - seed (range [0, 1])."""
    c = campaign.corpus
    kept = np.flatnonzero((c.parent >= 0) & (c.label >= 0))
    seeds = c.x[c.root[kept]]
    diff = (c.x[kept].astype(np.float64) - seeds).reshape(len(kept), -1)
    l2 = np.median([np.sqrt(np.sum(d * d)) for d in diff])
    linf = np.median([np.max(np.abs(d)) for d in diff])
    return kept, seeds, c.label[c.root[kept]], l2, linf


def test_random_baseline_replays_each_chain_on_its_seed(fixed_campaign, trained_lenet):
    from idcgen.framework import Network
    from idcgen.fuzz.mutators import MutationContext, make_mutator
    from idcgen.hardening import baseline_additions, perturbation

    kept, seeds, labels, l2, linf = _by_hand(fixed_campaign)
    chains = [fixed_campaign.corpus.chains[i] for i in kept]
    assert len(kept) >= 5 and max(len(chain) for chain in chains) >= 2  # chains longer than one step
    net = Network(trained_lenet[0])
    x, y, _ = baseline_additions("random", fixed_campaign, net, np.random.default_rng(3), 0.1)
    assert x.shape == fixed_campaign.corpus.x[kept].shape
    np.testing.assert_array_equal(y, labels)
    np.testing.assert_allclose(x, fixed_campaign.corpus.x[kept], atol=1e-6)  # the same chains, the same mutants
    size = perturbation(x, seeds)
    assert size["median_l2"] == pytest.approx(l2, abs=1e-4) and size["median_linf"] == pytest.approx(linf, abs=1e-5)
    # a blur chain of k steps from the seed: k blurs by hand for one kept input
    import cv2

    i = int(np.argmax([len(chain) for chain in chains]))
    by_hand = seeds[i : i + 1].copy()
    for step in chains[i]:  # the campaign rounds each mutant to 8-bit levels
        if step.startswith("blur"):
            by_hand = cv2.blur(by_hand[0], (3, 3)).reshape(by_hand.shape)
        else:
            by_hand = make_mutator(step).mutate(by_hand, None, MutationContext(net, labels[i : i + 1]))
        by_hand = np.round(by_hand * 255) / 255
    np.testing.assert_allclose(x[i : i + 1], by_hand, atol=1e-5)


def test_random_baseline_matches_chain_length_not_one_step(campaign, trained_lenet):
    """On a campaign of random mutators the replay draws anew: its change is of the kept chains' order (here
    2.96 against 2.18 median L2: coverage kept the smaller changes; hardening.csv reports both sizes), and not
    below one mutation of the seed (the old control)."""
    from idcgen.framework import Network
    from idcgen.hardening import baseline_additions

    kept, seeds, labels, l2, linf = _by_hand(campaign)
    net = Network(trained_lenet[0])
    replay, y, _ = baseline_additions("random", campaign, net, np.random.default_rng(0), 0.1)
    one, _, _ = baseline_additions("one-step", campaign, net, np.random.default_rng(0), 0.1)
    assert len(replay) == len(one) == len(kept)
    np.testing.assert_array_equal(y, labels)
    assert not np.array_equal(replay, campaign.corpus.x[kept])
    # sizes by hand: whole chains perturb more than one mutation of the seed
    diff = lambda a: np.median(np.sqrt(((a - seeds).reshape(len(kept), -1) ** 2).sum(axis=1)))
    assert 0.5 * l2 < diff(replay) < 2 * l2  # the same chains, fresh draws: a change of the same order
    assert diff(replay) > diff(one)


def test_attack_baselines_in_the_l2_ball_of_the_kept_median_l2(campaign, trained_lenet):
    """pgd and fgsm attack the seeds in the L2 ball of the kept inputs' median L2 distance from their seeds:
    FGSM one step of exactly that L2 length (cleverhans with norm 2, called here by hand), PGD inside the ball.
    (On a campaign of rotations the median L-inf is near 1, and an L-inf ball of it the whole space.)"""
    import tensorflow as tf
    from cleverhans.tf2.attacks.fast_gradient_method import fast_gradient_method

    from idcgen.framework import Network
    from idcgen.hardening import baseline_additions, perturbation

    kept, seeds, labels, l2, linf = _by_hand(campaign)
    assert perturbation(campaign.corpus.x[kept], seeds)["median_l2"] == pytest.approx(l2, rel=1e-6)
    assert l2 > 0
    net = Network(trained_lenet[0])
    x, y, recipe = baseline_additions("fgsm", campaign, net, np.random.default_rng(0), l2)
    assert recipe.startswith(f"FGSM, L2 eps {l2:.4g} ") and len(x) == len(kept)
    np.testing.assert_array_equal(y, labels)
    by_hand = fast_gradient_method(
        net.logits_model(), tf.constant(seeds), l2, 2, clip_min=0.0, clip_max=1.0, y=labels, targeted=False
    ).numpy()
    np.testing.assert_allclose(x, by_hand, atol=1e-5)
    norms = np.sqrt(((x.astype(np.float64) - seeds) ** 2).reshape(len(x), -1).sum(axis=1))
    assert np.all(norms <= l2 + 1e-4) and np.median(norms) > 0.5 * l2  # clipping at 0 and 1 only shortens
    x, y, recipe = baseline_additions("pgd", campaign, net, np.random.default_rng(0), l2)
    assert recipe.startswith(f"PGD, L2 eps {l2:.4g} ") and len(x) == len(kept)
    norms = np.sqrt(((x.astype(np.float64) - seeds) ** 2).reshape(len(x), -1).sum(axis=1))
    assert np.all(norms <= l2 + 1e-4)  # inside the eps ball
    again, _, _ = baseline_additions("pgd", campaign, net, np.random.default_rng(0), l2)
    np.testing.assert_array_equal(x, again)  # the random start is drawn from the generator
    clean, none, _ = baseline_additions("clean", campaign, net, np.random.default_rng(0), l2)
    assert len(clean) == len(none) == 0
    aug, y, _ = baseline_additions("augment", campaign, net, np.random.default_rng(0), l2)
    assert aug.shape == seeds.shape and aug.min() >= 0 and aug.max() <= 1
    np.testing.assert_array_equal(y, labels)
    again, _, _ = baseline_additions("augment", campaign, net, np.random.default_rng(0), l2)
    np.testing.assert_array_equal(aug, again)  # drawn from the generator: repeatable


def test_baselines_refused_in_one_line():
    import keras

    from idcgen.framework import Network
    from idcgen.hardening import check_baselines

    regression = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    with pytest.raises(ParameterError, match=r"^the pgd baseline attacks class scores .* leave pgd out"):
        check_baselines(["random", "pgd"], Network(regression))
    assert check_baselines(["random", "clean"], Network(regression)) == ("random", "clean")
    with pytest.raises(ParameterError, match="'baselines' parameter"):
        check_baselines(["rando"])


def test_harden_command_writes_a_row_per_arm_and_repeat(campaign, trained_lenet, digits, tmp_path):
    """The issue's acceptance run, small: --baselines random,pgd,clean --repeats 2 writes hardening.csv with a
    row per (arm, repeat), clean and corruption accuracy columns; the summary states pgd's epsilon."""
    import csv
    import json

    from typer.testing import CliRunner

    from idcgen.cli import app

    _, model = trained_lenet
    x_train, y_train, x_test, y_test = digits
    np.savez(tmp_path / "train.npz", x=x_train[:300], y=y_train[:300])
    np.savez(tmp_path / "test.npz", x=x_test[1::40], y=y_test[1::40])
    out = tmp_path / "h"
    args = ["harden", "--model", str(model), "--campaign", str(campaign.folder), "--out", str(out)]
    args += ["--train", str(tmp_path / "train.npz"), "--test", str(tmp_path / "test.npz"), "--epochs", "1"]
    args += ["--baselines", "random,pgd,clean", "--repeats", "2", "--corruptions", "gaussian_noise,contrast"]
    args += ["--severities", "1,5", "--pgd-eps", "0.1", "--held-out", str(campaign.folder), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    with open(out / "hardening.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["arm"], r["repeat"]) for r in rows] == [("original", "0")] + [
        (arm, str(r)) for r in range(2) for arm in ("IDC-guided", "random", "pgd", "clean")
    ]
    for column in ("clean", "corruption mean", "corruption: gaussian_noise", "corruption: contrast", "PGD eps 0.1"):
        assert all(0 <= float(r[column]) <= 1 for r in rows), column
    kept, _, _, l2, linf = _by_hand(campaign)
    assert summary["attack_eps"] == pytest.approx(l2, rel=1e-6) and summary["attack_norm"] == "L2"
    assert f"pgd and fgsm additions at L2 eps {l2:.4g} of the value range" in (out / "harden.md").read_text()
    assert [(r["attack_eps"] != "", r["attack_norm"]) for r in rows if r["repeat"] == "0"] == [
        (False, ""),
        (False, ""),
        (False, ""),
        (True, "L2"),
        (False, ""),
    ]
    sizes = {r["arm"]: int(r["extra_inputs"]) for r in rows}
    assert sizes == {"original": 0, "IDC-guided": len(kept), "random": len(kept), "pgd": len(kept), "clean": 0}
    guided = [r for r in rows if r["arm"] == "IDC-guided"]
    assert float(guided[0]["median_l2"]) == pytest.approx(l2, rel=1e-4)
    pgd = [r for r in rows if r["arm"] == "pgd"]
    assert all(float(r["attack_eps"]) == pytest.approx(l2, rel=1e-6) for r in pgd)
    assert all(float(r["median_l2"]) <= l2 + 1e-4 for r in pgd)
    assert [d["baseline"] for d in summary["differences"]] == ["random", "pgd", "clean"]
    # a paired difference by hand: IDC-guided minus clean, clean accuracy, over the two repeats
    clean = [r for r in rows if r["arm"] == "clean"]
    by_hand = np.mean([float(g["clean"]) - float(c["clean"]) for g, c in zip(guided, clean)])
    assert summary["differences"][2]["clean"] == pytest.approx(by_hand)
    assert rows[0]["held-out findings"] == "0.0"  # the campaign's own findings fool the model they were found on
    assert "IDC-guided minus" in (out / "harden.md").read_text()
