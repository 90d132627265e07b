"""NeuraL-Coverage's criteria (NLC, TKNP, CC), MDSC and unscaled NC, each checked against a value computed by
hand from its definition on the paper's LeNet-5 and 500 MNIST test digits: activations read from Keras
sub-models (not idcgen's forward pass), the definitions written out in plain numpy and Python loops."""

import json
from pathlib import Path

import numpy as np
import pytest

from idcgen.criteria import make_criterion

SHARED = Path(__file__).resolve().parents[2] / "shared"
DEEPXPLORE = SHARED / "models/deepxplore/MNIST_Model3.h5"
MNIST = SHARED / "data/mnist/mnist.npz"
needs_lenet5 = pytest.mark.skipif(
    not (DEEPXPLORE.exists() and MNIST.exists()),
    reason="needs DeepXplore's MNIST_Model3.h5 and MNIST's mnist.npz from the project's data folder beside "
    "the checkout (third-party files, not shipped)",
)
#: NeuraL-Coverage's layers on LeNet-5: every convolution and dense layer, the logits included
CONV_DENSE = ["block1_conv1", "block2_conv1", "fc1", "fc2", "before_softmax"]


@pytest.fixture(scope="module")
def lenet5(tmp_path_factory):
    """(model, network, 500 test digits, 2,000 training digits, their labels): DeepXplore's LeNet-5 weights."""
    from idcgen.framework import as_network, load_model
    from idcgen.framework.keras_zoo import lenet5 as architecture

    folder = tmp_path_factory.mktemp("lenet5")
    (folder / "lenet5.json").write_text(architecture().to_json())
    model = load_model(DEEPXPLORE, architecture=folder / "lenet5.json")
    data = np.load(MNIST)
    x = data["x_test"][:500, ..., None].astype("float32") / 255
    x_train = data["x_train"][:2000, ..., None].astype("float32") / 255
    return model, as_network(model), x, x_train, data["y_train"][:2000]


def outputs_by_hand(model, x, names):
    """Each layer's output from a Keras sub-model, a conv layer's as the mean of each channel's map."""
    import keras

    sub = keras.Model(model.inputs, [model.get_layer(n).output for n in names])
    outs = sub.predict(x, batch_size=len(x), verbose=0)
    outs = outs if isinstance(outs, list) else [outs]
    return [o.mean(axis=(1, 2)).astype(np.float64) if o.ndim == 4 else o.astype(np.float64) for o in outs]


@needs_lenet5
def test_default_layers_are_every_convolution_and_dense_layer(lenet5):
    _, network, x, _, _ = lenet5
    for name in ("nlc", "tknp", "cc"):
        assert list(make_criterion(name).fit(network, x[:1]).layers_) == CONV_DENSE


@needs_lenet5
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_nlc_is_the_sum_of_the_layers_covariance_norms(lenet5, reduction):
    model, network, x, _, _ = lenet5
    acts = outputs_by_hand(model, x, CONV_DENSE)
    norms = []
    for a in acts:
        centred = a - a.mean(axis=0)
        cov = centred.T @ centred / len(a)  # the population covariance, as NeuraL-Coverage's estimator
        norms.append(np.abs(cov).sum() / (cov.size if reduction == "mean" else 1))
    by_hand = float(np.sum(norms))
    crit = make_criterion(f"nlc(reduction={reduction})").fit(network, x[:1])
    result = crit.coverage(network, x, batch_size=64)  # batches merged: the same as the whole set at once
    assert result.total is None and result.covered == 500
    assert abs(result.score - by_hand) <= 1e-4 * max(1.0, by_hand)
    # a wrong definition fails: the sample covariance (n - 1) is 1/499 larger
    assert abs(by_hand * 500 / 499 - result.score) > 1e-4 * by_hand
    assert "a value, not a share" in str(result) and result.to_dict()["total"] is None


@needs_lenet5
def test_nlc_guide_admits_an_input_when_it_raises_the_value(lenet5):
    _, network, x, _, _ = lenet5
    crit = make_criterion("nlc").fit(network, x[:1])
    features = crit.features(network, x)
    tracker = crit.tracker()
    tracker.update(features[:400])
    before = tracker.value
    new = tracker.would_cover(features[400:])
    for i, row in enumerate(features[400:]):  # each judged alone against the state before the batch
        alone = crit.tracker()
        alone.add(features[:400])
        alone.add(row[None])
        assert new[i] == (alone.value > before * (1 + 1e-12)), i
    assert 0 < new.sum() < 100
    tracker.update(features[400:])
    whole = crit.tracker()
    whole.add(features)
    assert abs(tracker.value - whole.value) <= 1e-9 * whole.value


def patterns_by_hand(acts, k):
    """Each input's pattern: per layer, the set of its k most active neurons (ties to the lower index)."""
    rows = []
    for i in range(len(acts[0])):
        rows.append(tuple(frozenset(sorted(range(a.shape[1]), key=lambda j: (-a[i, j], j))[:k]) for a in acts))
    return rows


@needs_lenet5
@pytest.mark.parametrize("k", [1, 3])
def test_tknp_counts_distinct_top_k_patterns(lenet5, k):
    model, network, x, _, _ = lenet5
    rows = patterns_by_hand(outputs_by_hand(model, x, CONV_DENSE), k)
    network_mode = make_criterion(f"tknp(k={k})").fit(network, x[:1]).coverage(network, x, batch_size=100)
    assert network_mode.covered == len(set(rows)) and network_mode.total is None
    layer_mode = make_criterion(f"tknp(k={k},mode=layer)").fit(network, x[:1]).coverage(network, x)
    assert layer_mode.covered == sum(len({r[layer] for r in rows}) for layer in range(len(CONV_DENSE)))
    assert network_mode.covered != len(rows) or k == 3  # k=1 patterns repeat: a count of inputs would fail


def cc_by_hand(acts, threshold):
    """TensorFuzz's rule per layer, one input at a time: keep a vector when every kept one is farther than
    the threshold (squared distance)."""
    total = 0
    for a in acts:
        kept = []
        for v in a:
            if not kept or min(float(np.sum(np.square(v - u))) for u in kept) > threshold:
                kept.append(v)
        total += len(kept)
    return total


@needs_lenet5
@pytest.mark.parametrize("threshold", [1.0, 30.0])
def test_cc_keeps_the_vectors_farther_than_the_threshold(lenet5, threshold):
    model, network, x, _, _ = lenet5
    by_hand = cc_by_hand(outputs_by_hand(model, x, CONV_DENSE), threshold)
    result = make_criterion(f"cc(threshold={threshold})").fit(network, x[:1]).coverage(network, x, batch_size=128)
    assert result.covered == by_hand and result.total is None
    logits = make_criterion(f"cc(threshold={threshold},layers=before_softmax)").fit(network, x[:1])
    assert logits.coverage(network, x).covered == cc_by_hand(outputs_by_hand(model, x, ["before_softmax"]), threshold)


@needs_lenet5
@pytest.mark.parametrize("threshold", [0.0, 0.75])
def test_unscaled_nc_compares_the_raw_activation(lenet5, threshold):
    model, network, x, _, _ = lenet5
    names = ["block1_conv1", "block2_conv1", "fc1", "fc2"]  # NC's layers: hidden layers with weights
    by_hand = sum(int((a > threshold).any(axis=0).sum()) for a in outputs_by_hand(model, x, names))
    result = make_criterion(f"nc(scaling=none,threshold={threshold})").fit(network, x[:1]).coverage(network, x)
    assert (result.covered, result.total) == (by_hand, 226)
    scaled = make_criterion(f"nc(threshold={threshold})").fit(network, x[:1]).coverage(network, x)
    # DeepXplore's scaled NC is another count, except at 0 on ReLU layers (whose minimum is 0)
    assert (scaled.covered == by_hand) == (threshold == 0.0)


@needs_lenet5
def test_mdsc_buckets_the_mahalanobis_distance_to_the_predicted_class(lenet5):
    model, network, x, x_train, _ = lenet5
    (train,) = outputs_by_hand(model, x_train, ["fc2"])
    (test,) = outputs_by_hand(model, x, ["fc2"])
    train_class = model.predict(x_train, verbose=0).argmax(1)
    test_class = model.predict(x, verbose=0).argmax(1)
    kept = train.var(axis=0) >= 1e-5
    distance = np.full(len(x), np.nan)
    for c in np.unique(test_class):
        own = train[train_class == c][:, kept]
        precision = np.linalg.pinv(np.cov(own, rowvar=False))
        for i in np.flatnonzero(test_class == c):
            d = test[i, kept] - own.mean(axis=0)
            distance[i] = np.sqrt(max(float(d @ precision @ d), 0.0))
    buckets = {int(v * 1000 / 100) for v in distance if 0 <= v <= 100}
    crit = make_criterion("mdsc").fit(network, x_train)
    np.testing.assert_allclose(crit.surprise(network, x), distance, rtol=1e-4)
    result = crit.coverage(network, x)
    assert abs(result.covered - len(buckets)) <= 2  # a distance within rounding of a bucket's edge may move
    assert result.total == 1000


def test_value_trackers_save_restore_and_merge_exactly(digits):
    """On a small real Keras model: each tracker restored from its arrays is the same tracker, and merging
    two halves gives what the whole set gives (NLC, TKNP; CC depends on the order, so only bounds hold)."""
    from conftest import small_cnn

    from idcgen.criteria.values import restore_tracker
    from idcgen.framework import as_network

    x = digits[2][:200, 8:20, 8:20]
    network = as_network(small_cnn())
    for spec in ("nlc", "tknp", "tknp(mode=layer)", "cc(threshold=0.01)"):
        crit = make_criterion(spec).fit(network, x[:1])
        features = crit.features(network, x)
        first, second, whole = crit.tracker(), crit.tracker(), crit.tracker()
        first.update(features[:120])
        second.update(features[120:])
        whole.update(features)
        saved = json.loads(json.dumps(first.spec()))
        again = restore_tracker(saved, first.state_arrays())
        assert again.score == first.score and again.covered == first.covered, spec
        np.testing.assert_array_equal(again.would_cover(features[120:]), first.would_cover(features[120:]))
        merged = first.merge(second)
        if spec == "nlc":
            assert abs(merged.score - whole.score) <= 1e-9 * whole.score
        elif spec.startswith("tknp"):
            assert merged.covered == whole.covered
        else:  # order matters: the second half's kept vectors, judged again against the first's
            assert first.covered <= merged.covered <= first.covered + second.covered
        assert whole.covered > 0, spec


@pytest.fixture(scope="module")
def loop(digits):
    """(analysis, seeds, labels) on the numpy double of tests/test_fuzz.py: the loop without a framework."""
    from doubles import NumpyNet
    from idcgen.analysis import analyze

    x_train, y_train, x_test, y_test = digits
    network = NumpyNet.fit(x_train, y_train)
    analysis = analyze(network, x_train[:1000], y_train[:1000], layer="hidden", m=6, progress=False)
    return analysis, x_test[:60], y_test[:60]


def fuzzer_for(analysis, guide, measure):
    from idcgen.fuzz.fuzzer import Fuzzer

    return Fuzzer(
        analysis,
        mutators=["gauss(std=0.05)", "random_pixels", "rotate", "brightness"],
        guide=guide,
        measure=measure,
        batch_size=64,
        random_state=5,
    )


def folder_bytes(folder: Path) -> dict:
    """The files a campaign commits, by name: corpus and findings step files and the logs (no timings)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix in (".npz", ".jsonl") and path.name != "stats.jsonl":
            out[str(path.relative_to(folder))] = path.read_bytes()
    return out


@pytest.mark.parametrize("guide", ["nlc", "tknp", "cc"])
def test_a_campaign_guided_by_a_value_criterion_resumes_byte_identically(loop, guide, tmp_path):
    from idcgen.fuzz.campaign import Campaign

    analysis, x, y = loop
    network = analysis.network
    measure = lambda: [make_criterion(n).fit(network, x[:1]) for n in ("nlc", "tknp", "cc")]  # noqa: E731
    whole = fuzzer_for(analysis, guide, measure()).run(x, y, budget=640, out=tmp_path / "whole", progress=False)
    assert (whole.corpus.parent >= 0).sum() > 0, "the guide kept no mutant"
    if guide != "cc":  # CC on this double keeps every mutant farther than 1 from the corpus: most of them
        assert (whole.corpus.parent >= 0).sum() < whole.execs

    def killed_at_three(c):
        if c.step == 3:
            raise KeyboardInterrupt

    fuzzer = fuzzer_for(analysis, guide, measure())
    with pytest.raises(KeyboardInterrupt):
        fuzzer.run(x, y, budget=640, out=tmp_path / "killed", progress=False, on_step=killed_at_three)
    resumed = fuzzer_for(analysis, guide, measure()).resume(tmp_path / "killed")
    assert resumed.step == 3 and resumed.coverage[guide].score > 0
    fuzzer_for(analysis, guide, measure()).run(resumed, progress=False)
    assert folder_bytes(tmp_path / "whole") == folder_bytes(tmp_path / "killed")
    loaded = {name: Campaign.load(tmp_path / name) for name in ("whole", "killed")}
    for name in ("nlc", "tknp", "cc"):
        a, b = (loaded[k].coverage[name] for k in ("whole", "killed"))
        assert a.score == b.score and a.spec() == b.spec(), name
        for key, value in a.state_arrays().items():
            np.testing.assert_array_equal(value, b.state_arrays()[key])
    text = __import__("idcgen.report", fromlist=["write_report"]).write_report(loaded["whole"]).read_text()
    assert "| NLC |" in text and "patterns |" in text and "vectors |" in text


@needs_lenet5
def test_prioritize_orders_by_the_new_criteria_where_an_ordering_exists(lenet5):
    import idcgen
    from idcgen.prioritization import orderings

    model, network, x, x_train, _ = lenet5
    names = [o for o in orderings() if o.split("-")[0] in ("nlc", "tknp", "cc", "mdsc")]
    assert names == ["mdsc-total", "mdsc-additional", "tknp-additional", "cc-additional"]
    rows = patterns_by_hand(outputs_by_hand(model, x, CONV_DENSE), 3)
    first_of_each = [i for i, r in enumerate(rows) if r not in rows[:i]]
    ranking = idcgen.prioritize(network, x, by="tknp-additional")
    assert list(ranking.order[: len(first_of_each)]) == first_of_each  # the first input of every pattern first
    assert sorted(ranking.order) == list(range(len(x)))


def kept_by_hand(x, threshold):
    """TensorFuzz's loop on one layer: a vector is kept when no kept one is within the threshold."""
    kept = []
    for v in x:
        if not any(float(np.sum(np.square(v - u))) <= threshold for u in kept):
            kept.append(v)
    return np.array(kept).reshape(-1, x.shape[1])


KINDS = ["normal", "offset", "lattice", "huge", "near-duplicates", "not-finite"]


@pytest.mark.parametrize("query_block", [1, 64])
@pytest.mark.parametrize("kind", KINDS)
def test_cc_search_keeps_what_the_loop_over_every_kept_vector_keeps(kind, query_block, monkeypatch):
    """The norm-sorted float32 search, in batches, against the loop: pairs near the threshold far from the
    origin (float32's rounding larger than the gap), distances exactly at the threshold (a lattice), vectors
    whose products with the kept ones overflow float32 (rows of 1e25 after rows of 1e14), near-duplicates
    (many in-batch pairs), inf and nan. A query block of one row makes the band by norm as narrow as it gets
    (and the batch's pairs go through the sparse path)."""
    import idcgen.criteria.cc as cc
    from idcgen.criteria.cc import ClusterTracker

    monkeypatch.setattr(cc, "_QUERY_BLOCK", query_block)
    monkeypatch.setattr(cc, "_DENSE_PAIRS", 4096 if query_block > 1 else 0)
    rng = np.random.default_rng(KINDS.index(kind))
    widths, threshold = (3, 17, 40), 2.0
    x = {
        "normal": lambda: rng.normal(size=(300, 60)) * 0.8,
        "offset": lambda: 50 + rng.normal(size=(300, 60)) * np.repeat([0.8, 0.3, 0.16], [3, 17, 40]),
        "lattice": lambda: rng.integers(-1, 2, size=(300, 60)).astype(float),
        "huge": lambda: rng.normal(size=(300, 60)) * np.repeat([1e14, 1e25], [90, 210])[:, None],
        "near-duplicates": lambda: np.repeat(rng.normal(size=(100, 60)), 3, axis=0) + 1e-9 * rng.normal(size=(300, 60)),
        "not-finite": lambda: rng.normal(size=(300, 60)),
    }[kind]()
    if kind == "huge":
        threshold = 1.5e52  # about the squared distance of two huge rows, and above a small row to a huge one
    if kind == "not-finite":
        x[7, 1], x[20, 30], x[41, 59] = np.inf, np.nan, -np.inf
    tracker = ClusterTracker(widths, threshold)
    for start, stop in ((0, 1), (1, 90), (90, 91), (91, 300)):
        tracker.update(x[start:stop])
    offsets = np.cumsum([0, *widths])
    for layer, (a, b) in enumerate(zip(offsets[:-1], offsets[1:])):
        np.testing.assert_array_equal(tracker.kept(layer), kept_by_hand(x[:, a:b], threshold))


def test_nlc_gains_are_each_inputs_own_covariance_change():
    """Each candidate's gain against the state before the batch, recomputed from the covariances by hand."""
    from idcgen.criteria.nlc import CovarianceTracker

    rng = np.random.default_rng(3)
    widths = (4, 30, 7)
    x = rng.normal(size=(80, 41)) * rng.uniform(0.1, 3, size=41)
    tracker = CovarianceTracker(widths)
    tracker.update(x[:50])

    def nlc(rows):
        out, offsets = 0.0, np.cumsum([0, *widths])
        for a, b in zip(offsets[:-1], offsets[1:]):
            centred = rows[:, a:b] - rows[:, a:b].mean(axis=0)
            out += float(np.abs(centred.T @ centred / len(rows)).sum())
        return out

    by_hand = np.array([nlc(np.vstack([x[:50], row])) - nlc(x[:50]) for row in x[50:]])
    np.testing.assert_allclose(tracker.gains(x[50:]), by_hand, rtol=1e-9, atol=1e-9 * nlc(x[:50]))
    assert 0 < tracker.would_cover(x[50:]).sum() < 30


def test_one_blas_thread_is_restored_after_nested_and_concurrent_use():
    import threading

    from threadpoolctl import threadpool_info

    from idcgen.criteria.values import blas_threads_for

    def threads():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    before = threads()
    with blas_threads_for(10):
        with blas_threads_for(10):
            assert set(threads()) <= {1}
        assert set(threads()) <= {1}
    assert threads() == before

    def work():
        for _ in range(100):
            with blas_threads_for(10):
                pass

    workers = [threading.Thread(target=work) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert threads() == before
    with blas_threads_for(1e12):  # a large product keeps the default
        assert threads() == before


def test_cc_index_switching_to_float64_rebuilds_its_rows_exactly():
    """A query whose square would overflow float32 moves the search to float64: the rows already indexed are
    rebuilt from the kept vectors, not widened from their float32 rounding (whose error float64's margin would
    not cover)."""
    from idcgen.criteria.cc import _NormIndex

    rng = np.random.default_rng(0)
    kept = rng.normal(size=(20, 5)) * (1 + 1e-3 * rng.random((20, 5)))  # float64, not float32-representable
    index = _NormIndex(kept)
    assert index.dtype == np.float32
    index.close(np.full((1, 5), 1e16), kept, 1.0, pairs=False)
    assert index.dtype == np.float64
    rows = kept[index.order]
    assert np.array_equal(index.keys[:, :-1], -2.0 * rows)
    assert np.array_equal(index.keys[:, -1], np.einsum("ij,ij->i", rows, rows))
