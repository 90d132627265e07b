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
    from idcgen.harden import campaign_augmentations
    from idcgen.models import Network
    guided, control = campaign_augmentations(campaign, Network(trained_lenet[0]))
    kept = campaign.corpus.parent >= 0
    assert len(guided.y) == len(control.y) == kept.sum() > 0
    np.testing.assert_array_equal(guided.y, control.y)
    assert not np.array_equal(guided.x, control.x)
    assert control.x.min() >= 0 and control.x.max() <= 1


def test_harden_table_and_files(campaign, trained_lenet, digits, tmp_path):
    from idcgen.harden import EVALUATIONS, harden
    model, _ = trained_lenet
    x_train, y_train, x_test, y_test = digits
    summary = harden(model, x_train[:600], y_train[:600], campaign, x_test[1::5], y_test[1::5], epochs=1,
                     out=tmp_path, progress=False)
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
    from idcgen.harden import harden, retrain
    from idcgen.zoo import lenet1
    x_train, y_train, x_test, y_test = digits
    with pytest.raises(InputError, match="another model"):
        harden(lenet1(), x_train[:10], y_train[:10], campaign, x_test[:10], y_test[:10], progress=False)
    with pytest.raises(ParameterError, match="'mode' parameter"):
        retrain(lenet1(), x_train[:10], y_train[:10], mode="warm", epochs=1)
