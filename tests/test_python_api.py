"""The Python API as a researcher uses it in a notebook: the inputs people actually pass (uint8 arrays, (n, h, w)
digits, one image, channels-first arrays, torch tensors, Datasets, model paths), one-line errors for the wrong
ones, and reprs that say what a result is. A tiny plain-PyTorch CNN (random weights, seeded) on 200 embedded
digits keeps the file to a few seconds."""

from __future__ import annotations

import numpy as np
import pytest

import idcgen
from idcgen.errors import InputError, ParameterError

torch = pytest.importorskip("torch", reason="the PyTorch extra (pip install idcgen[torch]) is not installed")
nn = torch.nn


class TinyCNN(nn.Module):
    input_shape = (28, 28, 1)  # (H, W, C): idcgen moves the channels first itself

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 5, stride=3)
        self.fc1 = nn.Linear(4 * 8 * 8, 12)
        self.fc2 = nn.Linear(12, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(torch.relu(self.conv(x)).flatten(1))))


@pytest.fixture(scope="module")
def module():
    torch.manual_seed(0)
    return TinyCNN().eval()


@pytest.fixture(scope="module")
def digits():
    """200 training and 100 test digits as load_inputs gives them: (n, 28, 28) float32 in [0, 1], with labels."""
    return idcgen.load_inputs("embedded-mnist:train").subset(slice(0, 4000, 20)), idcgen.load_inputs(
        "embedded-mnist:test"
    ).subset(slice(0, 1000, 10))


@pytest.fixture(scope="module")
def analysis(module, digits):
    train, _ = digits
    return idcgen.analyze(module, train.x, train.y, layer="fc1", m=3, clusters=(2, 3), progress=False)


# ---- inputs in the shapes and types people have -------------------------------------------------------------
def test_nan_inputs_are_refused_not_covered(analysis, digits):
    """A NaN image was covered (IDC 6 % of a combination it does not reach) and ranked without a word."""
    x = digits[1].x[:3].copy()
    x[1, 4, 4] = np.nan
    with pytest.raises(InputError, match="inputs must be finite numbers; input 1 holds NaN or infinity"):
        analysis.coverage(x)
    with pytest.raises(InputError, match="input 1 holds NaN"):
        idcgen.prioritize(analysis.network, x, by="gini")


def test_one_image_without_the_batch_axis_is_named(analysis, digits):
    one = digits[1].x[0]
    for image in (one, one[..., None]):  # (28, 28) and (28, 28, 1) were called "(28,) per item" and "(28, 1)"
        with pytest.raises(InputError, match=r"one image of shape .* without the batch axis.*pass x\[None\]"):
            analysis.coverage(image)
        with pytest.raises(InputError, match=r"one image of shape .* without the batch axis"):
            idcgen.prioritize(analysis.network, image, by="gini")
    assert analysis.coverage(one[None]).total == analysis.total


def test_channels_first_arrays_are_named(analysis, digits):
    """A PyTorch user's (n, 1, 28, 28) was told to resize the inputs and to load them with channels=1."""
    with pytest.raises(InputError, match=r"channels first.*channels last \(28, 28, 1\).*x\.transpose\(0, 2, 3, 1\)"):
        analysis.coverage(digits[1].x[:, None])


def test_torch_tensors_that_require_grad_are_taken(analysis, digits):
    """np.asarray on such a tensor raised torch's RuntimeError from deep inside."""
    x = torch.tensor(digits[1].x, requires_grad=True)
    y = torch.tensor(digits[1].y)
    assert analysis.coverage(x) == analysis.coverage(digits[1].x)
    ranking = idcgen.prioritize(analysis.network, x, by="gini", y=y)
    assert ranking.evaluation is not None and len(ranking.order) == len(x)


def test_network_predict_takes_digits(analysis, digits):
    """Network.predict on (n, 28, 28) digits raised torch's permute RuntimeError."""
    test = digits[1]
    np.testing.assert_array_equal(analysis.network.predict(test.x), analysis.network.predict(test.x[..., None]))
    np.testing.assert_array_equal(analysis.network.predict(test), analysis.network.predict(test.x[..., None]))


def test_string_labels_say_what_to_do(analysis, digits):
    with pytest.raises(InputError, match=r"labels must be integers; got dtype <U1: .*class indices 0..K-1"):
        idcgen.prioritize(analysis.network, digits[1].x, by="gini", y=[str(v) for v in digits[1].y])


def test_a_dataset_is_taken_with_its_labels(module, analysis, digits):
    """coverage(Dataset) raised a TypeError; analyze(Dataset) and Fuzzer.run(Dataset) dropped its labels."""
    train, test = digits
    assert analysis.coverage(test) == analysis.coverage(test.x)
    again = idcgen.analyze(module, train, layer="fc1", m=3, clusters=(2, 3), progress=False)
    assert again.data["accuracy"] == pytest.approx(
        float((analysis.network.predict(train.x[..., None]) == train.y).mean())
    )
    campaign = idcgen.Fuzzer(analysis, mutators=["gauss"], batch_size=32).run(test, budget=64, progress=False)
    np.testing.assert_array_equal(campaign.corpus.label[: len(test)], test.y)
    ranking = idcgen.prioritize(module, test, by="gini")
    assert ranking.evaluation == idcgen.prioritize(module, test.x, by="gini", y=test.y).evaluation is not None
    from idcgen.deepbase.hypotheses import brightness

    found = idcgen.affinity(module, test, units="fc1:0", hypotheses=[brightness], measures="pearson", progress=False)
    assert found.y_source == "labels"


@pytest.mark.parametrize("call", ["prioritize", "inspect", "affinity", "criterion"])
def test_uint8_inputs_are_refused_where_no_analysis_checks_them(module, digits, call):
    """0..255 values went through prioritize, inspect, affinity and the criteria silently: another ranking (APFD 0.44 for
    0.96 on a trained LeNet), other confused pairs."""
    from idcgen.deepbase.hypotheses import brightness

    test = digits[1]
    raw = (test.x * 255).astype(np.uint8)
    run = {
        "prioritize": lambda: idcgen.prioritize(module, raw, by="gini", y=test.y),
        "inspect": lambda: idcgen.inspect(module, raw, test.y, layers=["fc1"]),
        "criterion": lambda: idcgen.make_criterion("kmnc").fit(module, raw),
        "affinity": lambda: idcgen.affinity(
            module, raw, test.y, units="fc1:0,1", hypotheses=[brightness], measures="pearson", tol=0, progress=False
        ),
    }[call]
    with pytest.raises(InputError, match=r"span \[0, 255\] but the model takes images in \[0, 1\]; divide them by 255"):
        run()


def test_input_relevance_takes_digits_and_a_model_object(module, digits):
    """(n, 28, 28) digits reached the model's first layer as they were (torch's or Keras' shape error)."""
    x = digits[1].x[:4]
    maps = idcgen.input_relevance(module, x)
    assert maps.shape == x.shape and np.isfinite(maps).all()
    relevance, activations, logits = idcgen.Relevance(module, layer="fc1")(x)
    assert relevance.shape == (4, 12) and logits.shape == (4, 10)


def test_a_model_path_is_taken_where_a_model_is(module, analysis, digits, tmp_path):
    """analyze("m.pt2") said "idcgen cannot run a builtins.str", though --model takes the same path."""
    from idcgen.framework.torch_zoo import export_program

    path = tmp_path / "tiny.pt2"
    export_program(module, path)
    train = digits[0]
    from_path = idcgen.analyze(str(path), train.x, train.y, layer="fc1", m=3, clusters=(2, 3), progress=False)
    np.testing.assert_array_equal(from_path.neurons, analysis.neurons)
    analysis.save(tmp_path / "analysis")
    loaded = idcgen.Analysis.load(tmp_path / "analysis", model=path)
    assert loaded.coverage(digits[1].x) == analysis.coverage(digits[1].x)


# ---- the fuzzer and its exports ---------------------------------------------------------------------------
def test_mutators_as_one_comma_separated_string(analysis):
    """mutators="gauss,rotate" was taken letter by letter: "unknown mutator 'g'"."""
    fuzzer = idcgen.Fuzzer(analysis, mutators="gauss(std=0.1),rotate")
    assert [repr(m) for m in fuzzer.mutators] == ["gauss(std=0.1)", "rotate(limit=30.0)"]


def test_export_fits_digits_and_wants_labels_for_training_inputs(analysis, digits, tmp_path):
    """train_x as load_inputs gives it, (n, 28, 28), crashed in np.concatenate against the (n, 28, 28, 1) mutants;
    train_x without train_y was left out of retrain.npz without a word."""
    train, test = digits
    campaign = idcgen.Fuzzer(analysis, mutators=["gauss"], batch_size=32).run(
        test.x, test.y, budget=64, out=tmp_path / "c", progress=False
    )
    with pytest.raises(ParameterError, match="train_x needs its labels: pass train_y too"):
        idcgen.export_campaign(campaign, train_x=train.x, out=tmp_path / "refused", images=False)
    assert not (tmp_path / "refused").exists()
    exports = idcgen.export_campaign(campaign, train_x=train.x, train_y=train.y, images=False)
    retrain = np.load(tmp_path / "c" / "exports" / "retrain.npz")
    assert exports["retrain"]["training_inputs"] == len(train) and retrain["x_train"].shape[1:] == (28, 28, 1)
    np.testing.assert_array_equal(retrain["x_train"][: len(train), ..., 0], train.x)


# ---- what a notebook shows --------------------------------------------------------------------------------
def test_reprs_say_what_a_result_is(analysis, digits):
    """Dataset and Analysis printed every array (thousands of lines), Campaign its settings and analysis, Fuzzer
    and Network an address."""
    from idcgen.deepbase.hypotheses import brightness

    test = digits[1]
    campaign = idcgen.Fuzzer(analysis, mutators=["gauss"], batch_size=32).run(test.x, test.y, budget=64, progress=False)
    affinity = idcgen.affinity(
        analysis.network, test, units="fc1:0,1", hypotheses=[brightness], measures="pearson", tol=0, progress=False
    )
    shown = {
        "Dataset(source='embedded-mnist:test', x=(100, 28, 28) float32, y=(100,) int64": repr(test),
        f"Analysis(layer='fc1', m=3, neurons={[int(n) for n in analysis.neurons]}": repr(analysis),
        "Campaign(execs=64 of 64, IDC ": repr(campaign),
        "Fuzzer(layer='fc1', mutators=['gauss(std=0.05)'], oracle='misclassification'": repr(
            idcgen.Fuzzer(analysis, mutators=["gauss"])
        ),
        "TorchNetwork(input_shape=(28, 28, 1), n_classes=10, task='classification')": repr(analysis.network),
        "AffinityResult(2 units, 1 hypotheses (brightness)": repr(affinity),
    }
    for start, text in shown.items():
        assert text.startswith(start) and len(text) < 200 and "\n" not in text, text


def test_harden_checks_its_inputs_and_keeps_the_callers_random_state(module, analysis, digits):
    """harden reshaped channels-first arrays into scrambled images and retrained on 0..255 values without a word,
    failed deep inside on Datasets, lists, one-hot or miscounted labels (AttributeError, ValueError, IndexError),
    and left torch's global generator seeded with its random_state."""
    from idcgen.hardening import Retraining

    train, test = digits
    campaign = idcgen.Fuzzer(analysis, mutators=["rotate"], batch_size=32, guide="none").run(
        test.x, test.y, budget=64, progress=False
    )
    once = Retraining(epochs=1)
    refused = {
        r"channels first": (train.x[:, None], train.y, test.x, test.y),
        r"the training inputs span \[0, 255\].*divide them by 255": (
            (train.x * 255).astype(np.uint8),
            train.y,
            test.x,
            test.y,
        ),
        r"got 95 labels for 100 inputs": (train.x, train.y, test.x, test.y[:95]),
        r"the test inputs need their labels: pass y_test": (train.x, train.y, test.x, None),
    }
    for message, given in refused.items():
        x_train, y_train, x_test, y_test = given
        with pytest.raises(InputError, match=message):
            idcgen.harden(module, x_train, y_train, campaign, x_test, y_test, retraining=once, progress=False)
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    summary = idcgen.harden(module, train, np.eye(10)[train.y], campaign, test, None, retraining=once, progress=False)
    assert torch.equal(torch.rand(3), expected)
    assert summary["training_inputs"] == len(train) and summary["test_inputs"] == len(test)


def test_a_report_of_a_campaign_in_memory_asks_to_save_it(analysis, digits):
    """write_report on a campaign run without out= raised TypeError: unsupported operand type(s) for /."""
    test = digits[1]
    campaign = idcgen.Fuzzer(analysis, mutators=["gauss"], batch_size=32).run(test.x, test.y, budget=32, progress=False)
    with pytest.raises(ParameterError, match=r"in memory only: save it first \(campaign.save\(folder\)\)"):
        idcgen.write_report(campaign)


def test_settings_of_another_type_are_named(module, analysis, digits):
    """clusters=3, clusters=[], relevance="label", convention=(0, 255) and measure=["kmnc"] failed deep inside
    (TypeError, ValueError, AttributeError)."""
    train = digits[0]
    refused = {
        r"The 'clusters' parameter must be a non-empty sequence of ints >= 2.*Got 3 instead": dict(clusters=3),
        r"The 'clusters' parameter .* Got \[\] instead": dict(clusters=[]),
        r"takes an idcgen.RelevanceSettings, for example RelevanceSettings\(of='label'\)": dict(relevance="label"),
        r"takes an idcgen.InputConvention, for example InputConvention\(value_range": dict(convention=(0, 255)),
    }
    for message, given in refused.items():
        with pytest.raises(ParameterError, match=message):
            idcgen.analyze(module, train.x, train.y, layer="fc1", m=3, progress=False, **given)
    with pytest.raises(ParameterError, match=r"measure takes fitted criteria, not names: .*make_criterion\('kmnc'\)"):
        idcgen.Fuzzer(analysis, mutators=["gauss"], measure=["kmnc"])
    with pytest.raises(ParameterError, match=r"takes an idcgen.InputConvention"):
        idcgen.Fuzzer(analysis, mutators=["gauss"], convention=(0, 1))


def test_a_campaign_goes_on_only_with_a_fuzzer_built_alike(analysis, digits):
    """Fuzzer(mutators=["rotate"]).run(campaign of a gauss fuzzer) raised KeyError: 'rotate(limit=30.0)' midway,
    and another batch size or oracle would have been recorded under the campaign's settings without a word."""
    test = digits[1]
    campaign = idcgen.Fuzzer(analysis, mutators=["gauss"], batch_size=32).run(test.x, test.y, budget=32, progress=False)
    with pytest.raises(ParameterError, match=r"this campaign was made with other settings \(mutators"):
        idcgen.Fuzzer(analysis, mutators=["rotate"], batch_size=32).run(campaign, budget=64, progress=False)
    assert campaign.execs == 32
    again = idcgen.Fuzzer(analysis, mutators=["gauss"], batch_size=32).run(campaign, budget=64, progress=False)
    assert again.execs == 64


def test_a_channels_first_input_shape_is_named(module):
    """Network(module, input_shape=(1, 28, 28)), as PyTorch writes shapes, ended in torch's "expected input[s77,
    28, 1, 28] to have 1 channels" with nothing saying idcgen reads the shape as (H, W, C)."""
    from idcgen.errors import ModelError

    with pytest.raises(
        ModelError, match=r"read as \(H, W, C\): for images \(C, H, W\) = \(1, 28, 28\) give \(28, 28, 1\)"
    ):
        idcgen.Network(module, input_shape=(1, 28, 28))


def test_exporting_a_campaign_read_without_its_model_asks_for_it(analysis, digits, tmp_path):
    """Campaign.load(folder) then export_campaign raised AttributeError: 'NoneType' object has no attribute 'forward'."""
    test = digits[1]
    idcgen.Fuzzer(analysis, mutators=["gauss"], batch_size=32).run(
        test.x, test.y, budget=32, out=tmp_path / "c", progress=False
    ).close()
    read = idcgen.Campaign.load(tmp_path / "c")
    with pytest.raises(ParameterError, match=r"read without its model: load it with Campaign.load\(folder, model\)"):
        idcgen.export_campaign(read, images=False)
    assert idcgen.export_campaign(idcgen.Campaign.load(tmp_path / "c", analysis.network), images=False)["grown"]


def test_a_campaign_read_only_does_not_go_on_in_memory(analysis, digits, tmp_path):
    """Fuzzer.run(Campaign.load(folder)) ran to its new budget in memory, its repr naming the folder, while the
    folder stayed at the old step: work lost when the notebook closes."""
    test = digits[1]
    fuzzer = idcgen.Fuzzer(analysis, mutators=["gauss"], batch_size=32)
    fuzzer.run(test.x, test.y, budget=32, out=tmp_path / "c", progress=False).close()
    with pytest.raises(ParameterError, match=r"was read only \(Campaign.load\).*Fuzzer.resume\(folder\)"):
        fuzzer.run(idcgen.Campaign.load(tmp_path / "c", analysis.network), budget=64, progress=False)
    resumed = fuzzer.run(fuzzer.resume(tmp_path / "c"), budget=64, progress=False)
    resumed.close()
    assert idcgen.Campaign.load(tmp_path / "c").execs == 64


def test_keep_none_fuzzes_the_seeds_alone(analysis, digits):
    """guide="keep-none": no mutant joins the corpus, yet the whole budget runs and failures are flagged; the
    same campaign unguided keeps mutants, so the count checked is not zero by construction."""
    _, test = digits
    runs = {
        guide: idcgen.Fuzzer(analysis, mutators=["rotate", "gauss"], batch_size=32, guide=guide).run(
            test.x, test.y, budget=128, progress=False
        )
        for guide in ("keep-none", "none")
    }
    assert int((runs["keep-none"].corpus.parent >= 0).sum()) == 0 and runs["keep-none"].execs == 128
    assert int((runs["none"].corpus.parent >= 0).sum()) > 0
    assert len(runs["keep-none"].corpus.parent) == len(test.x)  # the seeds, and nothing else
    assert sum(s.kept for s in runs["keep-none"].mutator_stats.values()) == 0
