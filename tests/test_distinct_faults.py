"""Distinct faults (idcgen/faults.py): clusters of failing inputs counted once, on hand-made feature clouds,
and in a campaign's report."""

import numpy as np
import pytest

from idcgen.errors import InputError, ParameterError
from idcgen.faults import distinct_faults, failure_features


def blob(centre, n, rng, spread=0.05, d=6):
    return np.asarray(centre, float) + spread * rng.normal(size=(n, d))


def test_a_pair_with_two_separate_groups_is_two_faults_and_a_small_pair_one():
    rng = np.random.default_rng(0)
    features = np.concatenate([blob([0] * 6, 25, rng), blob([5] * 6, 25, rng), blob([2] * 6, 3, rng)])
    labels = np.array([3] * 50 + [1] * 3)
    predictions = np.array([8] * 50 + [7] * 3)
    faults = distinct_faults(features, labels, predictions)
    assert (faults.count, faults.pairs) == (3, 2)
    # the two groups of the (3, 8) pair are the two faults, each whole
    assert len(set(faults.fault[:25])) == 1 and len(set(faults.fault[25:50])) == 1
    assert faults.fault[0] != faults.fault[25] and len(set(faults.fault[50:])) == 1
    assert faults.hit([0, 1, 2]) == 1 and faults.hit([0, 30, 51]) == 3 and faults.hit() == 3
    assert faults.hit(np.arange(53) < 25) == 1


def test_one_dense_group_is_one_fault_and_pairs_never_share_a_fault():
    rng = np.random.default_rng(1)
    same = blob([0] * 6, 40, rng)
    faults = distinct_faults(same, [0] * 20 + [1] * 20, [1] * 20 + [0] * 20)
    assert (faults.count, faults.pairs) == (2, 2)  # the same place in feature space, two confusions
    assert distinct_faults(same[:20], [0] * 20, [1] * 20).count == 1


def test_a_regression_model_has_one_group_and_noise_joins_a_cluster():
    rng = np.random.default_rng(2)
    features = np.concatenate([blob([0] * 6, 30, rng), blob([4] * 6, 30, rng), [[2.0] * 6]])
    faults = distinct_faults(features)
    assert (faults.count, faults.pairs) == (2, 1)
    assert faults.fault[-1] in (
        faults.fault[0],
        faults.fault[30],
    )  # the point between the groups is no fault of its own
    assert "PCA to 10 dimensions" in faults.method and "over all failing inputs (one group" in faults.method
    assert distinct_faults(np.zeros((0, 4))).count == 0


def test_bad_input_is_refused_in_one_line():
    with pytest.raises(InputError, match=r"features must be an \(n, d\) array"):
        distinct_faults(np.zeros(5))
    with pytest.raises(InputError, match="give both labels and predictions"):
        distinct_faults(np.zeros((5, 2)), labels=[0] * 5)
    with pytest.raises(InputError, match="5 feature rows but 4 labels and 5 predictions"):
        distinct_faults(np.zeros((5, 2)), [0] * 4, [1] * 5)
    with pytest.raises(ParameterError, match="'min_cluster_size' parameter must be an int >= 2"):
        distinct_faults(np.zeros((5, 2)), min_cluster_size=1)


def test_the_campaign_report_gives_distinct_faults_beside_findings_and_pairs(trained_lenet, digits, tmp_path):
    from idcgen.analysis import analyze
    from idcgen.faults import campaign_faults
    from idcgen.fuzz.fuzzer import Fuzzer
    from idcgen.report import write_report

    model, _ = trained_lenet
    x_train, y_train, x_test, y_test = digits
    analysis = analyze(model, x_train[:500], y_train[:500], m=4, progress=False)
    fuzzer = Fuzzer(analysis, mutators=["gauss(std=0.3)", "fgsm"], batch_size=64, random_state=0)
    campaign = fuzzer.start(x_test[:60], y_test[:60], tmp_path / "c", budget=256)
    fuzzer.run(campaign, progress=False)
    faults = campaign_faults(campaign)
    found = campaign.findings()
    pairs = len(set(zip(found["label"].tolist(), found["prediction"].tolist())))
    assert len(faults.fault) == campaign.n_findings > 0 and faults.pairs == pairs <= faults.count
    text = write_report(campaign).read_text()
    assert (
        f"Distinct faults: {faults.count} among the {campaign.n_findings} findings ({pairs} (true, predicted) pairs"
        in text
    )
    # the same model as an explicit extractor gives the same faults; a second model (another LeNet) is an
    # extractor independent of the model under test: its own clusters, still at least one fault per pair
    from idcgen.framework import Network
    from idcgen.framework.keras_zoo import lenet1

    assert campaign_faults(campaign, Network(model)).count == faults.count
    second = Network(lenet1(random_state=3))
    asked = []
    forward = second.forward
    second.forward = lambda x, layers: asked.append(tuple(layers)) or forward(x, layers)  # records, runs the model
    other = campaign_faults(campaign, second)
    assert asked == [(second.default_layer(),)]  # the features came from the second model
    assert len(other.fault) == campaign.n_findings and other.pairs == pairs <= other.count
    direct = distinct_faults(failure_features(second, found["x"]), found["label"], found["prediction"])
    assert np.array_equal(other.fault, direct.fault)
