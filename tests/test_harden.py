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
    from idcgen.hardening import EVALUATIONS, Retraining, harden

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
    )
    models = [row["model"] for row in summary["table"]]
    assert models == ["original", "IDC-guided", "random control"]
    for row in summary["table"]:
        assert all(0 <= row[name] <= 1 for name in EVALUATIONS)
    original = summary["table"][0]
    assert original["clean"] > 0.6 and original["FGSM (eps 0.3)"] < original["clean"]
    for name in ("harden.md", "harden.csv", "harden.json", "harden.png"):
        assert (tmp_path / name).exists()
    assert "IDC-guided" in (tmp_path / "harden.md").read_text()


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
    from idcgen.hardening import EVALUATIONS, Retraining, harden, robustness

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
    assert [row["model"] for row in summary["table"]] == ["original", "IDC-guided", "random control"]


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
