import json

import numpy as np
import pytest
from conftest import small_cnn

from idcgen.analysis import RelevanceSettings
from idcgen.errors import AnalysisMismatchError, InputError, LayerError, ParameterError


@pytest.fixture(scope="module")
def analysed(trained_lenet, digits):
    from idcgen.analysis import analyze

    model, _ = trained_lenet
    x_train, y_train, _, _ = digits
    return analyze(model, x_train[:2000], y_train[:2000], m=4, progress=False)


def test_analysis_structure(analysed):
    a = analysed
    assert a.layer == "block2_pool1"  # LeNet-1: before its logits, Flatten skipped (neurons are channels)
    assert a.m == 4 and len(a.clusters) == 4
    assert a.importance.shape == (12,)
    np.testing.assert_array_equal(a.neurons, np.argsort(-a.importance, kind="stable")[:4])
    assert a.total == int(np.prod([c.k for c in a.clusters]))
    for c in a.clusters:
        assert np.all(np.diff(c.centroids) > 0)
    assert a.timings["relevance"] > 0 and a.data["n_inputs"] == 2000


def test_coverage_bounds_monotone_and_order_independent(analysed, trained_lenet, digits):
    model, _ = trained_lenet
    _, _, x_test, _ = digits
    a = analysed.bind(model)
    small, big = a.coverage(x_test[:100]), a.coverage(x_test)
    assert 0 <= small.score <= big.score <= 1
    perm = np.random.default_rng(0).permutation(len(x_test))
    assert a.coverage(x_test[perm]) == big
    halves = a.tracker(x_test[:500]).merge(a.tracker(x_test[500:]))
    assert halves.result() == big


def test_ids_match_nearest_centroids(analysed, trained_lenet, digits):
    model, _ = trained_lenet
    x = digits[2][:50]
    acts = analysed.activations(x, model)
    idx = np.stack([np.abs(acts[:, j, None] - c.centroids[None]).argmin(1) for j, c in enumerate(analysed.clusters)], 1)
    np.testing.assert_array_equal(analysed.combinations.decode(analysed.ids(x, model)), idx)


def test_save_load_round_trip(analysed, trained_lenet, digits, tmp_path):
    from idcgen.analysis import Analysis

    model, _ = trained_lenet
    analysed.save(tmp_path / "a")
    meta = json.loads((tmp_path / "a" / "analysis.json").read_text())
    assert meta["important_neurons"] == analysed.neurons.tolist()
    assert meta["combinations_total"] == analysed.total and "versions" in meta
    loaded = Analysis.load(tmp_path / "a", model=model)
    x = digits[2][:300]
    assert loaded.coverage(x) == analysed.coverage(x, model)
    np.testing.assert_allclose(loaded.importance, analysed.importance)
    assert [c.k for c in loaded.clusters] == [c.k for c in analysed.clusters]
    assert [p.name for p in tmp_path.iterdir()] == ["a"]  # no temporary folder left behind


def test_other_model_refused(analysed, tmp_path):
    from idcgen.analysis import Analysis

    analysed.save(tmp_path / "a")
    from idcgen.framework.keras_zoo import lenet1

    with pytest.raises(AnalysisMismatchError, match="made for another model"):
        Analysis.load(tmp_path / "a", model=lenet1())


def test_load_corrupt_folder(tmp_path):
    from idcgen.analysis import Analysis

    with pytest.raises(InputError, match="no analysis.json"):
        Analysis.load(tmp_path)
    (tmp_path / "analysis.json").write_text("{not json")
    with pytest.raises(InputError, match="incomplete or corrupt"):
        Analysis.load(tmp_path)


def test_conv_subject_layer_and_options():
    from idcgen.analysis import analyze

    x = np.random.default_rng(0).random((300, 12, 12, 1), dtype=np.float32)
    y = np.random.default_rng(1).integers(0, 10, 300)
    model = small_cnn()
    a = analyze(model, x, y, layer="conv2", m=3, clusters=(2, 3), progress=False)
    assert a.importance.shape == (6,) and a.config["neuron"].startswith("channel")
    pred = model(x).numpy().argmax(1)
    cls = int(pred[0])
    b = analyze(
        model, x, y, layer="fc", m=2, relevance=RelevanceSettings(of="label", only_class=int(y[0])), progress=False
    )
    assert b.data["n_inputs"] == int((y == y[0]).sum())
    c = analyze(model, x, y, layer="fc", m=2, relevance=RelevanceSettings(correct_only=True), progress=False)
    assert c.data["n_used"] == int((pred == y).sum()) < 300
    d = analyze(model, x, pred, layer="fc", m=2, relevance=RelevanceSettings(correct_only=True), progress=False)
    assert d.data["n_used"] == 300 and 0 <= cls < 10


def test_bad_parameters():
    from idcgen.analysis import analyze

    model = small_cnn()
    x = np.random.default_rng(0).random((20, 12, 12, 1), dtype=np.float32)
    with pytest.raises(ParameterError, match=r"'m' parameter must be an int in the range \[1, 16\]"):
        analyze(model, x, m=17, progress=False)
    with pytest.raises(LayerError, match="unknown layer 'nope'"):
        analyze(model, x, layer="nope", progress=False)
    with pytest.raises(InputError, match="labels are needed"):
        analyze(model, x, relevance=RelevanceSettings(correct_only=True), progress=False)
    with pytest.raises(InputError, match="got 19 labels for 20 inputs"):
        analyze(model, x, np.zeros(19, int), progress=False)
    with pytest.raises(InputError, match="channel count"):
        analyze(model, np.zeros((4, 12, 12, 3), np.float32), progress=False)
    with pytest.raises(InputError, match="labels go up to 12 but the model has 10 classes"):
        analyze(model, x, np.full(20, 12), progress=False)
    with pytest.raises(ParameterError, match="'random_state' parameter"):
        analyze(model, x, random_state=-1, progress=False)


def test_save_refuses_to_replace_other_folders(analysed, tmp_path):
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "campaign.txt").write_text("keep me")
    with pytest.raises(InputError, match="not an analysis folder"):
        analysed.save(tmp_path / "precious")
    assert (tmp_path / "precious" / "campaign.txt").read_text() == "keep me"
    analysed.save(tmp_path / "a")
    before = (tmp_path / "a" / "analysis.json").stat().st_mtime_ns
    analysed.save(tmp_path / "a")  # the same analysis again: left as it is
    assert (tmp_path / "a" / "analysis.json").stat().st_mtime_ns == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "precious"]


def test_save_never_replaces_another_analysis_silently(analysed, tmp_path):
    import dataclasses

    from idcgen.analysis import Analysis

    other = dataclasses.replace(analysed, neurons=analysed.neurons[::-1].copy())  # another result, same model
    analysed.save(tmp_path / "a")
    assert analysed.matches_saved(tmp_path / "a") and not other.matches_saved(tmp_path / "a")
    with pytest.raises(InputError, match=f"{tmp_path / 'a'} already holds an analysis: .*overwrite=True"):
        other.save(tmp_path / "a")
    assert Analysis.load(tmp_path / "a").neurons.tolist() == analysed.neurons.tolist()
    other.save(tmp_path / "a", overwrite=True)
    assert Analysis.load(tmp_path / "a").neurons.tolist() == analysed.neurons[::-1].tolist()
    # save_unique: the folder itself when it holds the same analysis, else the next free name
    assert other.save_unique(tmp_path / "a") == (tmp_path / "a", False)
    assert analysed.save_unique(tmp_path / "a") == (tmp_path / "a-2", True)
    assert analysed.save_unique(tmp_path / "a") == (tmp_path / "a-2", False)
    assert Analysis.load(tmp_path / "a").neurons.tolist() == analysed.neurons[::-1].tolist()


def test_data_fingerprint_tells_inputs_apart(analysed, digits):
    from idcgen.analysis import data_fingerprint

    x, y = digits[0][:2000], digits[1][:2000]
    assert analysed.data["fingerprint"] == data_fingerprint(x, y)
    assert len(data_fingerprint(x)) == 8 and data_fingerprint(x) == data_fingerprint(x.copy())
    changed = x.copy()
    changed[1234, 5, 6, 0] += 1 / 255
    assert (
        len(
            {
                data_fingerprint(x),
                data_fingerprint(changed),
                data_fingerprint(x.reshape(2000, 784)),
                data_fingerprint(x, y),
                data_fingerprint(x[:1999]),
            }
        )
        == 5
    )
    assert analysed.default_name("lenet1") == f"lenet1_block2_pool1_m4_{data_fingerprint(x, y)}"


def test_saved_folder_follows_the_umask(analysed, tmp_path):
    import os
    import stat

    previous = os.umask(0o022)
    try:
        analysed.save(tmp_path / "a")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o755


def test_constant_neuron_is_reported_not_dropped():
    import keras

    from idcgen.analysis import analyze

    inputs = keras.Input((4,))
    h = keras.layers.Dense(3, activation="relu", name="h")(inputs)
    out = keras.layers.Dense(2, activation="softmax", name="out")(h)
    model = keras.Model(inputs, out)
    w = np.array([[1.0, 0, -1], [0.5, 0, -1], [0, 0, -1], [1, 0, -1]], np.float32)
    model.get_layer("h").set_weights([w, np.zeros(3, np.float32)])  # neuron 1 is always 0
    model.get_layer("out").set_weights([np.array([[1, -1], [5, 5], [1, 1]], np.float32), np.zeros(2, np.float32)])
    x = np.random.default_rng(0).random((200, 4), dtype=np.float32)
    a = analyze(model, x, m=3, progress=False)
    assert a.m == 3
    ks = {c.neuron: c.k for c in a.clusters}
    assert ks[1] == 1 and ks[2] == 1
    assert any("neuron 1" in n and "constant" in n for n in a.notes)


@pytest.mark.parametrize("aggregate, correct_only", [("sum", False), ("abs", True), ("mean", False)])
def test_streamed_analysis_equals_the_relevance_matrix(trained_lenet, digits, monkeypatch, aggregate, correct_only):
    # The streamed pass (totals, then the important neurons' activations, in one pass or two) must give what
    # the whole (inputs x neurons) relevance and activation matrices give.
    import idcgen.analysis.passes as analysis_module
    from idcgen.clusters import cluster_neuron
    from idcgen.framework import Network
    from idcgen.importance import importance, top_neurons
    from idcgen.relevance import Relevance

    model, _ = trained_lenet
    x, y = digits[0][:700], digits[1][:700]
    network = Network(model)
    rel, acts, logits = Relevance(network, layer="block2_pool1")(x)
    keep = logits.argmax(axis=1) == y if correct_only else np.ones(len(x), bool)
    neurons = top_neurons(importance(rel[keep], aggregate=aggregate), 3)
    for one_pass in (2**40, 0):
        monkeypatch.setattr(analysis_module, "ACTIVATIONS_IN_ONE_PASS", one_pass)
        a = analysis_module.analyze(
            network,
            x,
            y,
            m=3,
            relevance=RelevanceSettings(aggregate=aggregate, correct_only=correct_only),
            progress=False,
        )
        np.testing.assert_array_equal(a.neurons, neurons)
        np.testing.assert_allclose(a.importance, importance(rel[keep], aggregate=aggregate), rtol=1e-5)
        assert a.data["n_used"] == int(keep.sum())
        rng = np.random.default_rng(0)
        for c, n in zip(a.clusters, neurons):
            expected = cluster_neuron(acts[keep][:, n], neuron=int(n), ks=(2, 3, 4, 5), rng=rng)
            assert c.k == expected.k
            np.testing.assert_allclose(c.centroids, expected.centroids, rtol=1e-4, atol=1e-5)


def test_an_edited_analysis_is_refused(analysed, tmp_path):
    """One centroid changed by hand in analysis.json: refused on load, not measured with silently."""
    from idcgen.analysis import Analysis

    analysed.save(tmp_path / "a")
    meta_path = tmp_path / "a" / "analysis.json"
    original = meta_path.read_text()
    meta = json.loads(original)
    meta["clusters"][0]["centroids"][0] -= 0.01  # still sorted: loads today
    meta_path.write_text(json.dumps(meta, indent=2))
    with pytest.raises(InputError, match=r"edited or damaged since it was saved .*idcgen analyze"):
        Analysis.load(tmp_path / "a")
    meta_path.write_text(original)  # put back: loads again
    assert Analysis.load(tmp_path / "a").total == analysed.total
    np.savez(tmp_path / "a" / "arrays.npz", neurons=analysed.neurons[::-1], importance=analysed.importance)
    with pytest.raises(InputError, match="edited or damaged"):
        Analysis.load(tmp_path / "a")


def test_k_values_the_inputs_cannot_support_are_not_tried(trained_lenet, digits):
    """--clusters 2-400 on 500 inputs ran minutes of silhouette searches for k the data cannot support."""
    from idcgen.analysis import analyze

    model, _ = trained_lenet
    x, y = digits[0][:40], digits[1][:40]
    a = analyze(model, x, y, m=2, clusters=range(2, 30), progress=False)
    assert all(c.k <= 8 for c in a.clusters)
    assert any(n.startswith("k above 8 not tried (21 of the 28 k values asked): 40 inputs") for n in a.notes)
    with pytest.raises(ParameterError, match=r"asks for at least 12 clusters of 40 inputs, which support at most 8"):
        analyze(model, x, y, m=2, clusters=(12, 13), progress=False)


def test_near_chance_accuracy_from_mapped_labels_is_said_to_be_the_labels(trained_lenet, digits):
    """Class folders with word names numbered in another order got a warning about scaling."""
    from idcgen.analysis import analyze

    model, _ = trained_lenet
    x, y = digits[0][::13][:300], digits[1][::13][:300]  # every class (the set is sorted by class)
    assert len(np.unique(y)) == 10
    shifted = analyze(model, x, (y + 1) % 10, m=2, progress=False)
    assert any(
        "labels are likely mapped to other classes" in w and "label 1 -> predicted 0" in w for w in shifted.warnings
    ), shifted.warnings
    assert not any("scaled twice" in w for w in shifted.warnings)


def test_a_label_mapping_needs_two_labels_at_least():
    """`analyze --limit 300` on a class-sorted set (embedded-mnist:train) gives one label: a model predicting
    one class for it was said to number the classes otherwise ("label 0 -> predicted 3")."""
    from idcgen.analysis.passes import label_mapping

    assert label_mapping(np.zeros(300, np.int64), np.full(300, 3)) is None
    assert label_mapping(np.repeat([0, 1], 50), np.repeat([3, 5], 50)) == (1.0, [(0, 3), (1, 5)])


def test_the_record_digest_is_of_the_arrays_bytes_in_any_shape():
    # the digest hashes each array's shape, dtype and bytes; an empty array of several axes has no bytes but a
    # shape (a memoryview cast refused it)
    from idcgen.analysis.record import content_digest

    neurons, importance = np.arange(3), np.ones(3)
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    assert content_digest({}, neurons, importance, x) == content_digest({}, neurons, importance, x.T.copy().T)
    assert content_digest({}, neurons, importance, x) != content_digest({}, neurons, importance, x.reshape(4, 3))
    empty = [content_digest({}, neurons, importance, np.zeros(shape)) for shape in ((0, 4), (4, 0), (0,))]
    assert len(set(empty)) == 3 and all(len(d) == 16 for d in empty)
