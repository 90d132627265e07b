"""Tests of idcgen.criteria: NC, KMNC, NBC, SNAC, TKNC, LSC and DSC against values worked out by hand
(or by a direct computation), the tracker invariants, and the error messages."""

import numpy as np
import pytest
from conftest import small_cnn
from scipy.stats import gaussian_kde

from idcgen.coverage import CoverageResult
from idcgen.criteria import (
    CRITERIA,
    CriterionTracker,
    DistanceSurpriseCoverage,
    KMultisectionCoverage,
    LikelihoodSurpriseCoverage,
    MahalanobisSurpriseCoverage,
    NeuronBoundaryCoverage,
    NeuronCoverage,
    StrongNeuronActivationCoverage,
    TopKNeuronCoverage,
    default_neuron_layers,
    make_criterion,
    parse_criteria,
    parse_spec,
)
from idcgen.errors import InputError, LayerError, ParameterError

# ------------------------------------------------------------------ tiny models with hand-set weights


def _dense_model(n_in, w1, b1, w2, b2):
    """Input(n_in) -> Dense(relu) "h" -> Dense(2) "logits" -> Activation softmax."""
    import keras

    inputs = keras.Input((n_in,))
    h = keras.layers.Dense(len(b1), activation="relu", name="h")(inputs)
    z = keras.layers.Dense(2, name="logits")(h)
    model = keras.Model(inputs, keras.layers.Activation("softmax", name="softmax")(z))
    model.get_layer("h").set_weights([np.asarray(w1, float), np.asarray(b1, float)])
    model.get_layer("logits").set_weights([np.asarray(w2, float), np.asarray(b2, float)])
    return model


@pytest.fixture(scope="module")
def hand_net():
    """h = (relu(x0), relu(x1), relu(x0 - x1))."""
    from idcgen.framework import Network

    return Network(_dense_model(2, [[1, 0, 1], [0, 1, -1]], [0, 0, 0], [[1, 0], [0, 1], [0, 0]], [0, 0]))


@pytest.fixture(scope="module")
def sa_net():
    """h = x + 10 (for x > -10); predicted class 0 when x0 > 0, else 1."""
    from idcgen.framework import Network

    return Network(_dense_model(3, np.eye(3), [10, 10, 10], [[1, -1], [0, 0], [0, 0]], [-10, 10]))


# training activations of hand_net: h0 in [0, 4], h1 in [2, 6], h2 always 0 (a constant neuron)
X_TRAIN = np.array([[0, 2], [4, 6], [2, 3], [3, 4]], np.float32)
X_TEST = np.array(
    [
        [0, 2],  # h = (0, 2, 0)      all at their training minimum
        [4, 6],  # h = (4, 6, 0)      h0, h1 at their training maximum
        [2.5, 1],  # h = (2.5, 1, 1.5)  h1 below its minimum, h2 above its maximum
        [-1, 7],  # h = (0, 7, 0)      h1 above its maximum
    ],
    np.float32,
)


def fitted(cls, net, **params):
    return cls(**params).fit(net, X_TRAIN)


# ------------------------------------------------------------------ neuron criteria by hand


def test_default_neuron_layers_take_the_relu_output_of_weighted_layers(hand_net):
    import keras

    from idcgen.framework import Network

    assert default_neuron_layers(hand_net) == ["h"]
    assert default_neuron_layers(Network(small_cnn())) == ["conv1", "conv2", "fc"]
    L = keras.layers
    inputs = keras.Input((8, 8, 1))
    x = L.Conv2D(3, 3, name="conv")(inputs)
    x = L.BatchNormalization(name="bn")(x)
    x = L.ReLU(name="relu")(x)
    x = L.Flatten(name="flat")(x)
    x = L.Dense(5, name="d1")(x)
    x = L.Dropout(0.5, name="drop")(x)
    x = L.Activation("relu", name="a1")(x)
    x = L.Dense(4, activation="relu", name="d2")(x)
    x = L.Dense(3, name="logits")(x)
    model = keras.Model(inputs, L.Activation("softmax", name="softmax")(x))
    assert default_neuron_layers(Network(model)) == ["relu", "a1", "d2"]


def test_nc_by_hand(hand_net):
    nc = fitted(NeuronCoverage, hand_net)
    # per input, h min-max scaled: (0, 1, 0), (2/3, 1, 0), (1, 0, 1/3), (0, 1, 0)
    features = nc.features(hand_net, X_TEST)
    np.testing.assert_array_equal(features, [[-1, 1, -1], [-1, 1, -1], [0, -1, -1], [-1, 1, -1]])
    tracker = nc.tracker()
    np.testing.assert_array_equal(tracker.update(features), [True, False, True, False])
    assert (tracker.covered, tracker.total) == (2, 3)
    assert nc.coverage(hand_net, X_TEST) == tracker.result()
    # at 0.6 the 2/3 of input 1 counts: input 1 is now the first to cover neuron 0
    nc6 = fitted(NeuronCoverage, hand_net, threshold=0.6)
    tracker = nc6.tracker()
    np.testing.assert_array_equal(tracker.update(nc6.features(hand_net, X_TEST)), [True, True, False, False])
    np.testing.assert_array_equal(tracker.covered_ids(), [0, 1])
    # a layer equal everywhere (h = 0, 0, 0) covers nothing
    np.testing.assert_array_equal(nc.features(hand_net, np.array([[-1, -1]], np.float32)), [[-1, -1, -1]])


def _conv_net():
    """Input 2x2x1 -> 1x1 conv "conv" (channel 0 = x, channel 1 = x / 2 + 1) -> Flatten -> Dense(3, relu) "fc"
    (x[0, 0], x[1, 1], 0) -> Dense(2) logits -> softmax."""
    import keras

    from idcgen.framework import Network

    L = keras.layers
    inputs = keras.Input((2, 2, 1))
    x = L.Conv2D(2, 1, name="conv")(inputs)
    x = L.Dense(3, activation="relu", name="fc")(L.Flatten(name="flat")(x))
    model = keras.Model(inputs, L.Activation("softmax")(L.Dense(2, name="logits")(x)))
    model.get_layer("conv").set_weights([np.array([1.0, 0.5]).reshape(1, 1, 1, 2), np.array([0.0, 1.0])])
    w = np.zeros((8, 3))  # flatten order (row, column, channel): channel 0 of (0, 0) is 0, of (1, 1) is 6
    w[0, 0] = w[6, 1] = 1.0
    model.get_layer("fc").set_weights([w, np.zeros(3)])
    return Network(model)


# input A: channel 0 = 0, 1, 2, 3 (mean 1.5), channel 1 = 1, 1.5, 2, 2.5 (mean 1.75), layer range [0, 3], fc (0, 3, 0)
# input B: channel 0 = 4, 0, 0, 0 (mean 1), channel 1 = 3, 1, 1, 1 (mean 1.5), layer range [0, 4], fc (4, 0, 0)
# input C: channel 0 = 3 everywhere, channel 1 = 2.5 everywhere, layer range [2.5, 3], fc (3, 3, 0)
X_CONV = np.array([[[0, 1], [2, 3]], [[4, 0], [0, 0]], [[3, 3], [3, 3]]], np.float32)[..., None]


def test_nc_scales_the_feature_maps_by_hand():
    net = _conv_net()
    nc = NeuronCoverage(layers=["conv", "fc"]).fit(net, X_CONV)
    assert nc.forward_layers() == ("conv", "fc", "conv@range")
    # feature maps scaled over the layer, then channel means: A (0.5, 0.583), B (0.25, 0.375), C (1, 0);
    # fc scaled: A (0, 1, 0), B (1, 0, 0), C (1, 1, 0); neurons: conv 0-1, fc 2-4
    np.testing.assert_array_equal(
        nc.features(net, X_CONV), [[-1, -1, -1, 3, -1], [-1, -1, 2, -1, -1], [0, -1, 2, 3, -1]]
    )
    assert nc.coverage(net, X_CONV).covered == 3
    # at 0.55 the 0.583 of A's channel 1 counts, the 0.5 of its channel 0 does not (strictly above)
    nc55 = NeuronCoverage(layers=["conv"], threshold=0.55).fit(net, X_CONV)
    np.testing.assert_array_equal(nc55.features(net, X_CONV), [[-1, 1], [-1, -1], [0, -1]])
    # the same from a forward pass the caller makes (a fuzz loop sharing it)
    probs, acts = net.forward(X_CONV, nc.forward_layers())
    np.testing.assert_array_equal(nc.features_from(probs, acts), nc.features(net, X_CONV))
    with pytest.raises(InputError, match=r"expected the activations of \['conv', 'fc', 'conv@range'\]"):
        nc.features_from(probs, acts[:2])


def test_nc_channel_means_variant_by_hand():
    net = _conv_net()
    nc = NeuronCoverage(layers=["conv", "fc"], scaling="channel-means").fit(net, X_CONV)
    assert nc.forward_layers() == ("conv", "fc")
    # channel means scaled among themselves: A (0, 1), B (0, 1), C (1, 0); fc as before
    np.testing.assert_array_equal(nc.features(net, X_CONV), [[-1, 1, -1, 3, -1], [-1, 1, 2, -1, -1], [0, -1, 2, 3, -1]])
    assert nc.coverage(net, X_CONV).covered == 4
    assert make_criterion("nc:scaling=channel-means:threshold=0.5").get_params() == {
        "threshold": 0.5,
        "layers": None,
        "scaling": "channel-means",
    }


def test_nc_equals_scaling_whole_feature_maps(cnn_data):
    """Against a direct computation: each input's full layer output scaled to [0, 1], then channel means."""
    import keras

    net, _, x = cnn_data
    layers = ["conv1", "conv2", "fc"]
    model = keras.Model(net.model.inputs, [net.model.get_layer(n).output for n in layers])
    expected, offset = [], 0
    for out in model.predict(x, verbose=0):
        out = out.astype(np.float64).reshape(len(x), -1, out.shape[-1])
        low, high = out.min(axis=(1, 2), keepdims=True), out.max(axis=(1, 2), keepdims=True)
        scaled = ((out - low) / np.where(high > low, high - low, 1.0)).mean(axis=1)
        expected.append(np.where(scaled > 0.5, offset + np.arange(out.shape[-1]), -1))
        offset += out.shape[-1]
    features = NeuronCoverage(threshold=0.5).fit(net, x).features(net, x)
    assert default_neuron_layers(net) == layers
    np.testing.assert_array_equal(features, np.concatenate(expected, axis=1))
    # the channel-means variant differs on this model (it is not the standard)
    assert (NeuronCoverage(threshold=0.5, scaling="channel-means").fit(net, x).features(net, x) != features).any()


def test_kmnc_by_hand(hand_net):
    kmnc = fitted(KMultisectionCoverage, hand_net, k=4)
    np.testing.assert_array_equal(kmnc.min_, [0, 2, 0])
    np.testing.assert_array_equal(kmnc.max_, [4, 6, 0])
    # sections of width 1 on h0 ([0, 4]) and h1 ([2, 6]); ids are neuron * 4 + section. Out-of-range
    # values are in no section: h1 = 1 and 7, h2 = 1.5. h2 is constant (0) in training: 0 hits section 0.
    features = kmnc.features(hand_net, X_TEST)
    np.testing.assert_array_equal(features, [[0, 4, 8], [3, 7, 8], [2, -1, -1], [0, -1, 8]])
    tracker = kmnc.tracker()
    np.testing.assert_array_equal(tracker.update(features), [True, True, True, False])
    result = tracker.result()
    assert (result.covered, result.total, result.score) == (6, 12, 0.5)
    assert str(result) == "KMNC 50.0 % (6 of 12 sections)"
    # inside values one section per neuron; h0 = 1.99 is section 1, exactly 2.0 is section 2
    np.testing.assert_array_equal(
        kmnc.features(hand_net, np.array([[1.99, 5.5], [2.0, 2.5]], np.float32)), [[1, 7, 8], [2, 4, 8]]
    )
    assert fitted(KMultisectionCoverage, hand_net, k=1).coverage(hand_net, X_TEST).covered == 3


def test_nbc_and_snac_by_hand(hand_net):
    nbc = fitted(NeuronBoundaryCoverage, hand_net)
    # lower corner of neuron j is j, upper corner 3 + j
    features = nbc.features(hand_net, X_TEST)
    np.testing.assert_array_equal(features, [[-1, -1, -1], [-1, -1, -1], [-1, 1, 5], [-1, 4, -1]])
    tracker = nbc.tracker()
    np.testing.assert_array_equal(tracker.update(features), [False, False, True, True])
    assert (tracker.covered, tracker.total) == (3, 6)  # values at the bounds are no corner
    snac = fitted(StrongNeuronActivationCoverage, hand_net)
    np.testing.assert_array_equal(
        snac.features(hand_net, X_TEST), [[-1, -1, -1], [-1, -1, -1], [-1, -1, 2], [-1, 1, -1]]
    )
    result = snac.coverage(hand_net, X_TEST)
    assert (result.covered, result.total) == (2, 3)
    assert str(result) == "SNAC 66.7 % (2 of 3 upper corners)"


def test_tknc_by_hand(hand_net):
    top1 = fitted(TopKNeuronCoverage, hand_net, k=1)
    np.testing.assert_array_equal(top1.features(hand_net, X_TEST), [[1], [1], [0], [1]])
    tracker = top1.tracker()
    np.testing.assert_array_equal(tracker.update(top1.features(hand_net, X_TEST)), [True, False, True, False])
    assert (tracker.covered, tracker.total) == (2, 3)
    top2 = fitted(TopKNeuronCoverage, hand_net, k=2)
    # (0, 2, 0): neuron 1, then the tie between 0 and 2 goes to the lower index
    np.testing.assert_array_equal(top2.features(hand_net, X_TEST), [[1, 0], [1, 0], [0, 2], [1, 0]])
    assert top2.coverage(hand_net, X_TEST).covered == 3
    # a layer narrower than k gives all its neurons
    assert fitted(TopKNeuronCoverage, hand_net, k=5).features(hand_net, X_TEST).shape == (4, 3)


def test_neuron_criteria_need_no_data_or_one_pass(hand_net):
    assert not NeuronCoverage.needs_data and not TopKNeuronCoverage.needs_data
    kmnc = KMultisectionCoverage(k=4)
    assert kmnc.fit(hand_net, X_TRAIN) is kmnc
    assert kmnc.n_inputs_ == 4 and kmnc.layers_ == ("h",) and kmnc.widths_ == (3,) and kmnc.total_ == 12
    assert kmnc.get_params() == {"k": 4, "layers": None}  # parameters stay as given
    assert repr(kmnc) == "KMultisectionCoverage(k=4, layers=None)"


def test_fit_is_batched(hand_net):
    import keras

    from idcgen.framework import Network

    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 2)).astype(np.float32) * 3
    small, large = (KMultisectionCoverage().fit(hand_net, x, batch_size=b) for b in (7, 1000))
    np.testing.assert_array_equal(small.min_, large.min_)
    np.testing.assert_array_equal(small.max_, large.max_)
    h = np.maximum(np.stack([x[:, 0], x[:, 1], x[:, 0] - x[:, 1]], axis=1), 0)
    np.testing.assert_array_equal(small.min_, h.min(axis=0))
    np.testing.assert_array_equal(small.max_, h.max(axis=0))
    keras.utils.set_random_seed(0)
    cnn = Network(small_cnn())
    x = rng.uniform(size=(40, 12, 12, 1)).astype(np.float32)
    small, large = (NeuronBoundaryCoverage().fit(cnn, x, batch_size=b) for b in (7, 1000))
    np.testing.assert_allclose(small.min_, large.min_, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(small.max_, large.max_, rtol=1e-6, atol=1e-7)
    _, (acts,) = cnn.forward(x, ("conv2",))
    np.testing.assert_allclose(large.max_[4:10], acts.max(axis=0), rtol=1e-6)


# ------------------------------------------------------------------ surprise adequacy


def _sa_data(n=60, m=25, random_state=0):
    rng = np.random.default_rng(random_state)
    x_train = rng.normal(size=(n, 3)).astype(np.float32)
    x_test = (rng.normal(size=(m, 3)) * 1.5).astype(np.float32)
    return x_train, (x_train[:, 0] <= 0).astype(np.int64), x_test


def test_lsa_equals_scipy_gaussian_kde(sa_net):
    x_train, y_train, x_test = _sa_data()
    lsc = LikelihoodSurpriseCoverage(upper=20.0, n_buckets=10).fit(sa_net, x_train, y_train)
    assert lsc.layer_ == "h" and list(lsc.kept_neurons_) == [0, 1, 2] and list(lsc.classes_) == [0, 1]
    probs, (train_acts,) = sa_net.forward(x_train, ("h",))
    probs, (test_acts,) = sa_net.forward(x_test, ("h",))
    predicted = probs.argmax(axis=1)
    train_acts, test_acts = train_acts.astype(np.float64), test_acts.astype(np.float64)
    expected = np.array(
        [-gaussian_kde(train_acts[y_train == c].T).logpdf(a[:, None])[0] for a, c in zip(test_acts, predicted)]
    )
    lsa = lsc.surprise(sa_net, x_test)
    np.testing.assert_allclose(lsa, expected, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(lsc.surprise(sa_net, x_test, batch_size=4), lsa, rtol=1e-12)
    # buckets of width 2 on [0, 20]
    buckets = np.where((expected >= 0) & (expected <= 20), np.minimum(np.floor(expected / 2), 9), -1)
    np.testing.assert_array_equal(lsc.features(sa_net, x_test)[:, 0], buckets)
    assert lsc.coverage(sa_net, x_test).covered == len(set(buckets.tolist()) - {-1})
    # without labels the classes are the predicted ones (here the same)
    unlabelled = LikelihoodSurpriseCoverage(upper=20.0).fit(sa_net, x_train)
    np.testing.assert_allclose(unlabelled.surprise(sa_net, x_test), lsa, rtol=1e-12)


def test_lsc_drops_low_variance_neurons_and_skips_classes_without_a_kde(sa_net):
    x_train, y_train, x_test = _sa_data()
    x_train[:, 2] = 0.5  # neuron 2 constant in both classes
    x_train[y_train == 0, 1] = -1.0  # neuron 1 constant in class 0 only: dropped too (union over classes)
    with pytest.raises(InputError, match="every neuron of layer 'h' varies less than var_threshold"):
        LikelihoodSurpriseCoverage(group="label").fit(
            sa_net, np.where(y_train[:, None] == 0, x_train, x_train * [0, 1, 0]), y_train
        )
    lsc = LikelihoodSurpriseCoverage(group="label").fit(sa_net, x_train, y_train)
    assert list(lsc.kept_neurons_) == [0] and "2 of 3 neurons dropped" in lsc.notes_[0]
    _, (acts,) = sa_net.forward(x_train, ("h",))
    probs, (test_acts,) = sa_net.forward(x_test, ("h",))
    c = probs.argmax(axis=1)
    expected = [
        -gaussian_kde(acts[y_train == k, 0].astype(np.float64)).logpdf(a)[0] for a, k in zip(test_acts[:, 0], c)
    ]
    np.testing.assert_allclose(lsc.surprise(sa_net, x_test), expected, rtol=1e-9)
    # a class with one training input has no KDE: noted, and its inputs get no LSA
    y_odd = y_train.copy()
    y_odd[0] = 5
    lsc = LikelihoodSurpriseCoverage(group="label").fit(sa_net, x_train, y_odd)
    assert list(lsc.classes_) == [0, 1] and any("class 5" in note for note in lsc.notes_)


def test_lsc_projects_a_layer_wider_than_the_classes_inputs(sa_net):
    """3 neurons, 3 training inputs per class: no KDE without a projection (SA's remedy for wide layers);
    "auto" projects onto 2 principal components, components=N onto N."""
    x_train, y_train, x_test = _sa_data(n=6)
    y_train = np.array([0, 0, 0, 1, 1, 1])
    with pytest.raises(InputError, match="no class of the training data gives a KDE"):
        LikelihoodSurpriseCoverage(group="label", components="none").fit(sa_net, x_train, y_train)
    lsc = LikelihoodSurpriseCoverage(group="label").fit(sa_net, x_train, y_train)
    assert lsc.projection_[1].shape == (3, 2) and list(lsc.classes_) == [0, 1]
    assert any("3 neurons projected onto their 2 principal components" in note for note in lsc.notes_)
    assert np.isfinite(lsc.surprise(sa_net, x_test)).all()
    one = LikelihoodSurpriseCoverage(group="label", components=1).fit(sa_net, x_train, y_train)
    _, (acts,) = sa_net.forward(x_train, ("h",))
    probs, (test_acts,) = sa_net.forward(x_test, ("h",))
    acts, test_acts = acts.astype(np.float64), test_acts.astype(np.float64)
    mean = acts.mean(axis=0)
    pc = np.linalg.eigh(np.cov(acts - mean, rowvar=False))[1][:, -1]
    expected = [
        -gaussian_kde((acts[y_train == k] - mean) @ pc).logpdf((a - mean) @ pc)[0]
        for a, k in zip(test_acts, probs.argmax(axis=1))
    ]
    np.testing.assert_allclose(one.surprise(sa_net, x_test), expected, rtol=1e-9)
    with pytest.raises(ParameterError, match="'components' parameter"):
        LikelihoodSurpriseCoverage(components=0).fit(sa_net, x_train, y_train)
    from idcgen.criteria import make_criterion

    assert make_criterion("lsc(components=5)").components == 5
    with pytest.raises(InputError, match="no class of the training data gives a KDE"):
        make_criterion("lsc(group=label, components=none)").fit(sa_net, x_train, y_train)


def test_dsa_equals_brute_force(sa_net):
    x_train, y_train, x_test = _sa_data(n=80, m=30, random_state=1)
    dsc = DistanceSurpriseCoverage(n_buckets=20).fit(sa_net, x_train, y_train)
    _, (train_acts,) = sa_net.forward(x_train, ("h",))
    probs, (test_acts,) = sa_net.forward(x_test, ("h",))
    train_acts, test_acts = train_acts.astype(np.float64), test_acts.astype(np.float64)
    expected = []
    for act, c in zip(test_acts, probs.argmax(axis=1)):
        own = np.flatnonzero(y_train == c)
        nearest = own[np.linalg.norm(train_acts[own] - act, axis=1).argmin()]
        a = np.linalg.norm(train_acts[nearest] - act)
        b = np.linalg.norm(train_acts[y_train != c] - train_acts[nearest], axis=1).min()
        expected.append(a / b)
    expected = np.array(expected)
    np.testing.assert_allclose(dsc.surprise(sa_net, x_test), expected, rtol=1e-9)
    np.testing.assert_allclose(dsc.surprise(sa_net, x_test, batch_size=3), expected, rtol=1e-9)  # memo of b reused
    buckets = np.where(expected <= 2, np.minimum(np.floor(expected * 10), 19), -1)
    np.testing.assert_array_equal(dsc.features(sa_net, x_test)[:, 0], buckets)
    # the same with tiny blocks: the chunked search does not depend on the block size
    from idcgen.criteria import surprise

    old, surprise._BLOCK_ELEMENTS = surprise._BLOCK_ELEMENTS, 7
    try:
        fresh = DistanceSurpriseCoverage().fit(sa_net, x_train, y_train)
        np.testing.assert_allclose(fresh.surprise(sa_net, x_test), expected, rtol=1e-9)
    finally:
        surprise._BLOCK_ELEMENTS = old


def test_dsa_by_hand_and_zero_b(sa_net):
    # activations are x + 10; class 0 at x0 > 0. The point (1, 0, 0) is in both classes (by label).
    x_train = np.array([[1, 0, 0], [1, 0, 0], [2, 1, 0], [3, 0, 1], [-2, 0, 0], [-3, 1, 1]], np.float32)
    y_train = np.array([0, 1, 0, 0, 1, 1])
    dsc = DistanceSurpriseCoverage(n_buckets=4, group="label").fit(sa_net, x_train, y_train)
    dsa = dsc.surprise(sa_net, np.array([[2, 1, 0.5], [1.25, 0, 0]], np.float32))
    # input 0: nearest class-0 point (2, 1, 0) at 0.5; from there the nearest class-1 point (1, 0, 0) at sqrt 2
    # input 1: nearest class-0 point (1, 0, 0), which is also a class-1 point: b = 0, DSA = inf, no bucket
    np.testing.assert_allclose(dsa[0], 0.5 / np.sqrt(2), rtol=1e-6)
    assert dsa[1] == np.inf
    np.testing.assert_array_equal(dsc.buckets(dsa), [0, -1])


def test_dsa_groups_training_inputs_by_prediction_by_hand(sa_net):
    # activations x + 10 (distances as in x); predicted class 0 when x0 > 0, else 1. (3, 0, 0) is labelled 1.
    x_train = np.array([[1, 0, 0], [3, 0, 0], [-1, 0, 0], [-2, 2, 0]], np.float32)
    y_train = np.array([0, 1, 1, 1])
    x_test = np.array([[2.5, 0, 0]], np.float32)  # predicted 0
    # by prediction: class 0 = {(1,0,0), (3,0,0)}; nearest (3,0,0) at 0.5; from it the nearest class-1 point
    # (-1,0,0) at 4 (the other at sqrt 29): DSA = 0.5 / 4
    dsc = DistanceSurpriseCoverage(n_buckets=8).fit(sa_net, x_train, y_train)
    np.testing.assert_allclose(dsc.surprise(sa_net, x_test), [0.125], rtol=1e-6)
    assert list(dsc.train_classes_) == [0, 0, 1, 1]
    # by label: class 0 = {(1,0,0)} at 1.5; from it (3,0,0) and (-1,0,0) at 2: DSA = 0.75
    by_label = DistanceSurpriseCoverage(n_buckets=8, group="label").fit(sa_net, x_train, y_train)
    np.testing.assert_allclose(by_label.surprise(sa_net, x_test), [0.75], rtol=1e-6)
    np.testing.assert_array_equal([dsc.features(sa_net, x_test)[0, 0], by_label.features(sa_net, x_test)[0, 0]], [0, 3])


def test_lsa_groups_training_inputs_by_prediction(sa_net):
    x_train, _, x_test = _sa_data(n=90)
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 2, size=len(x_train))  # labels unrelated to the predictions
    _, (train_acts,) = sa_net.forward(x_train, ("h",))
    probs, (test_acts,) = sa_net.forward(x_test, ("h",))
    train_pred = sa_net.forward(x_train)[0].argmax(axis=1)
    train_acts, test_acts = train_acts.astype(np.float64), test_acts.astype(np.float64)

    def reference(groups):
        return np.array(
            [
                -gaussian_kde(train_acts[groups == c].T).logpdf(a[:, None])[0]
                for a, c in zip(test_acts, probs.argmax(axis=1))
            ]
        )

    lsc = LikelihoodSurpriseCoverage(upper=20.0).fit(sa_net, x_train, labels)  # labels given, not used
    np.testing.assert_allclose(lsc.surprise(sa_net, x_test), reference(train_pred), rtol=1e-9)
    by_label = LikelihoodSurpriseCoverage(upper=20.0, group="label").fit(sa_net, x_train, labels)
    np.testing.assert_allclose(by_label.surprise(sa_net, x_test), reference(labels), rtol=1e-9)
    assert not np.allclose(reference(train_pred), reference(labels))


def test_surprise_coverage_cli_equals_api(trained_lenet, digits, tmp_path):
    """The CLI (which has labels) and the API (with or without them) group by prediction alike."""
    import json

    from typer.testing import CliRunner

    from idcgen.cli import app
    from idcgen.data import fit_to_model, load_inputs

    model, path = trained_lenet
    x_train, y_train, x_test, _ = digits
    to_uint8 = lambda a: (a[..., 0] * 255).round().astype(np.uint8)  # noqa: E731
    np.savez(tmp_path / "train.npz", x=to_uint8(x_train[:800]), y=y_train[:800])
    np.savez(tmp_path / "test.npz", x=to_uint8(x_test[:200]))
    specs = "lsc,dsc,lsc:group=label:lower=-100:upper=100:n_buckets=50"
    result = CliRunner().invoke(
        app,
        [
            "coverage",
            "--model",
            str(path),
            "--inputs",
            str(tmp_path / "test.npz"),
            "--train",
            str(tmp_path / "train.npz"),
            "--criteria",
            specs,
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    got = json.loads(result.output.strip().splitlines()[-1])["criteria"]
    train = load_inputs(tmp_path / "train.npz")
    xs, ys = fit_to_model(train, (28, 28, 1)), train.y
    xt = fit_to_model(load_inputs(tmp_path / "test.npz"), (28, 28, 1))
    for spec in specs.split(","):
        with_labels = make_criterion(spec).fit(model, xs, ys).coverage(model, xt)
        assert got[spec]["covered"] == with_labels.covered, spec
        if "label" not in spec:
            assert make_criterion(spec).fit(model, xs).coverage(model, xt).covered == with_labels.covered


def test_surprise_buckets_and_bounds(sa_net):
    x_train, y_train, _ = _sa_data()
    dsc = DistanceSurpriseCoverage(n_buckets=4, upper=2.0).fit(sa_net, x_train, y_train)
    values = [0.0, 0.5, 1.99, 2.0, 2.01, -0.1, np.nan, np.inf]
    np.testing.assert_array_equal(dsc.buckets(values), [0, 1, 3, 3, -1, -1, -1, -1])
    lsc = LikelihoodSurpriseCoverage(lower=-10.0, upper=10.0, n_buckets=4).fit(sa_net, x_train, y_train)
    np.testing.assert_array_equal(lsc.buckets([-10, -5.01, -5, 9.99, 10, 2000]), [0, 0, 1, 3, 3, -1])
    assert LikelihoodSurpriseCoverage().upper == 2000.0 and DistanceSurpriseCoverage().upper == 2.0
    assert LikelihoodSurpriseCoverage().n_buckets == DistanceSurpriseCoverage().n_buckets == 1000


# ------------------------------------------------------------------ invariants of every criterion


@pytest.fixture(scope="module")
def cnn_data():
    import keras

    from idcgen.framework import Network

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(260, 12, 12, 1)).astype(np.float32)
    return Network(small_cnn()), x[:140], x[140:] * rng.uniform(0.2, 2.0, size=(120, 1, 1, 1)).astype(np.float32)


@pytest.fixture(scope="module")
def sa_data(sa_net):
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(300, 3)) * 2).astype(np.float32)
    return sa_net, x[:180], x[180:]


INVARIANT_CASES = [
    NeuronCoverage(threshold=0.5),
    KMultisectionCoverage(k=10),
    NeuronBoundaryCoverage(),
    StrongNeuronActivationCoverage(),
    TopKNeuronCoverage(k=2),
    LikelihoodSurpriseCoverage(upper=20.0, n_buckets=40),
    DistanceSurpriseCoverage(n_buckets=40),
    MahalanobisSurpriseCoverage(upper=20.0, n_buckets=40),
]


@pytest.fixture(scope="module", params=INVARIANT_CASES, ids=repr)
def case(request, cnn_data, sa_data):
    import copy

    criterion = copy.copy(request.param)
    net, x_train, x_test = sa_data if criterion.name in ("lsc", "dsc", "mdsc") else cnn_data
    criterion.fit(net, x_train)
    return criterion, net, x_test


def test_every_criterion_is_listed():
    assert list(CRITERIA) == ["nc", "kmnc", "nbc", "snac", "tknc", "lsc", "dsc", "mdsc", "nlc", "tknp", "cc"]
    # NLC, TKNP and CC hold a value, not covered items (CC's depends on the order): tests/test_nlc_criteria.py
    assert {type(c).name for c in INVARIANT_CASES} == set(CRITERIA) - {"nlc", "tknp", "cc"}


def test_the_command_line_help_names_every_registered_criterion():
    """The criteria lists of the help texts come from the registry: a criterion added to CRITERIA shows up in
    coverage's --criteria and --train, fuzz's --guide and prioritize's --by and --train without more typing."""
    import re

    from typer.testing import CliRunner

    from idcgen.cli import app
    from idcgen.criteria import NEEDS_DATA

    def option_help(command: str, option: str) -> set:
        text = CliRunner().invoke(app, [command, "--help"], terminal_width=100).output
        match = re.search(rf"^\s+{option} .*?(?=^\s+--|\Z)", text, re.M | re.S)
        assert match, (command, option, text)
        return set(re.findall(r"[a-z]+", match.group(0)))

    assert set(CRITERIA) | {"idc"} <= option_help("coverage", "--criteria")
    assert set(NEEDS_DATA) <= option_help("coverage", "--train") and "nc" not in option_help("coverage", "--train")
    assert set(CRITERIA) | {"idc", "none"} <= option_help("fuzz", "--guide")
    assert set(CRITERIA) <= option_help("prioritize", "--by")  # nlc: "gives none"
    assert set(NEEDS_DATA) <= option_help("prioritize", "--train")
    assert {"kmnc", "nbc", "snac", "lsc", "dsc", "mdsc"} <= set(NEEDS_DATA) and not {"nc", "tknc"} & set(NEEDS_DATA)


def test_invariants_score_monotone_order_merge(case):
    criterion, net, x = case
    features = criterion.features(net, x)
    assert features.dtype == np.int64 and features.ndim == 2 and len(features) == len(x)
    assert features.min() >= -1 and features.max() < criterion.total_
    # monotone, in [0, 1]
    tracker, last = criterion.tracker(), 0.0
    for start in range(0, len(x), 25):
        tracker.update(features[start : start + 25])
        assert last <= tracker.score <= 1.0
        last = tracker.score
    assert 0 < tracker.covered < tracker.total  # the cases are chosen to cover some, not all
    # the same as coverage(), in any batch size
    assert criterion.coverage(net, x, batch_size=17) == tracker.result()
    # order-independent: shuffled inputs in other batches give the same covered items
    order = np.random.default_rng(1).permutation(len(x))
    shuffled = criterion.tracker()
    for start in range(0, len(x), 40):
        shuffled.update(criterion.features(net, x[order[start : start + 40]]))
    np.testing.assert_array_equal(shuffled.covered_ids(), tracker.covered_ids())
    # merge equals the union, leaving both trackers as they were
    first, second = criterion.tracker(), criterion.tracker()
    first.update(features[:50])
    second.update(features[50:])
    before = first.covered
    merged = first.merge(second)
    np.testing.assert_array_equal(merged.covered_ids(), tracker.covered_ids())
    assert first.covered == before and merged.result() == tracker.result()


def test_invariants_update_mask(case):
    criterion, net, x = case
    features = criterion.features(net, x)
    np.testing.assert_array_equal(criterion.features_from(*net.forward(x, criterion.forward_layers())), features)
    batch = criterion.tracker()
    assert not batch.would_cover(features[:0]).size
    expected = batch.would_cover(features)
    mask = batch.update(features)
    np.testing.assert_array_equal(mask, expected)
    one_by_one = criterion.tracker()
    np.testing.assert_array_equal(mask, [one_by_one.update(features[i : i + 1])[0] for i in range(len(x))])
    assert not batch.update(features).any()  # nothing new the second time


def test_result_is_a_coverage_result(hand_net):
    result = fitted(KMultisectionCoverage, hand_net, k=4).coverage(hand_net, X_TEST)
    assert isinstance(result, CoverageResult)
    assert result.to_dict() == {"kmnc": 0.5, "covered": 6, "total": 12}
    assert "KMNC 50.0 %" in str(result)


def test_a_keras_model_works_as_well(hand_net):
    result = KMultisectionCoverage(k=4).fit(hand_net.model, X_TRAIN).coverage(hand_net.model, X_TEST)
    assert result.covered == 6


# ------------------------------------------------------------------ names and errors


def test_make_criterion_and_parse_criteria():
    assert isinstance(make_criterion("KMNC", k=4), KMultisectionCoverage)
    assert make_criterion(" lsc ", upper=100.0).upper == 100.0
    assert parse_criteria("idc, NC,kmnc,nc") == ["idc", "nc", "kmnc"]
    assert parse_criteria("idc, NC:threshold=0.5,kmnc:k=10:layers=conv1+fc,nc:threshold=0.5") == [
        "idc",
        "nc:threshold=0.5",
        "kmnc:k=10:layers=conv1+fc",
    ]
    assert parse_spec("kmnc:k=10:layers=conv1+fc") == ("kmnc", {"k": 10, "layers": ["conv1", "fc"]})
    assert parse_spec("lsc:lower=-50:upper=2e3:layer=7") == ("lsc", {"lower": -50, "upper": 2000.0, "layer": "7"})
    assert make_criterion("lsc:upper=20", upper=30.0).upper == 30.0  # keywords override the spec
    with pytest.raises(ParameterError, match=r"criterion spec 'nc:threshold': expected name:key=value"):
        parse_criteria("nc:threshold")
    with pytest.raises(
        ParameterError,
        match=r"The 'scaling' parameter of NeuronCoverage must be a str among "
        r"\{'feature-maps', 'channel-means', 'none'\}. Got 'maps' instead.",
    ):
        parse_criteria("nc:scaling=maps")
    with pytest.raises(ParameterError, match="IDC takes no parameters here"):
        parse_criteria("idc:m=8")
    with pytest.raises(
        ParameterError, match=r"unknown criterion 'foo'; known criteria: nc, kmnc, nbc, snac, tknc, lsc, dsc"
    ):
        make_criterion("foo")
    with pytest.raises(ParameterError, match=r"unknown criterion 'idc' \(IDC is measured by an analysis"):
        make_criterion("idc")
    with pytest.raises(
        ParameterError,
        match=r"KMultisectionCoverage \(kmnc\) got unknown parameter\(s\) 'kk'; "
        "valid parameters: k, layers",
    ):
        make_criterion("kmnc", kk=3)
    with pytest.raises(
        ParameterError, match=r"unknown criteria 'foo', 'lcs' in 'idc,foo,lcs'; known criteria: idc, nc"
    ):
        parse_criteria("idc,foo,lcs")
    with pytest.raises(ParameterError, match="must name at least one of idc, nc"):
        parse_criteria(" , ")
    with pytest.raises(ParameterError, match="must be a comma-separated string"):
        parse_criteria(["nc"])


@pytest.mark.parametrize(
    "name, params, message",
    [
        ("kmnc", {"k": 0}, r"The 'k' parameter of KMultisectionCoverage must be an int >= 1. Got 0 instead."),
        ("tknc", {"k": 2.5}, r"The 'k' parameter of TopKNeuronCoverage must be an int >= 1. Got 2.5"),
        (
            "nc",
            {"threshold": 1.5},
            r"The 'threshold' parameter of NeuronCoverage must be a finite float in the range "
            r"\[0.0, 1.0\). Got 1.5 instead.",
        ),
        (
            "nbc",
            {"layers": "h"},
            r"The 'layers' parameter of NeuronBoundaryCoverage must be a non-empty list of layer "
            r"names or None. Got 'h' instead \(write layers=\['h'\]\).",
        ),
        ("snac", {"layers": ["h", "h"]}, r"names a layer twice"),
        ("lsc", {"n_buckets": 0}, r"The 'n_buckets' parameter of LikelihoodSurpriseCoverage must be an int"),
        (
            "lsc",
            {"var_threshold": -1.0},
            r"The 'var_threshold' parameter of LikelihoodSurpriseCoverage must be a finite "
            r"float in the range \[0.0, inf\). Got -1.0 instead.",
        ),
        (
            "dsc",
            {"upper": 0.0},
            r"The 'upper' parameter of DistanceSurpriseCoverage must be a finite float in the range "
            r"\(0.0, inf\). Got 0.0 instead.",
        ),
        ("dsc", {"layer": ["h"]}, r"The 'layer' parameter of DistanceSurpriseCoverage must be a layer name or None"),
        (
            "dsc",
            {"group": "labels"},
            r"The 'group' parameter of DistanceSurpriseCoverage must be a str among "
            r"\{'predicted', 'label'\}. Got 'labels' instead.",
        ),
    ],
)
def test_parameter_errors(name, params, message, hand_net):
    with pytest.raises(ParameterError, match=message):
        make_criterion(name, **params)
    with pytest.raises(ParameterError, match=message):  # constructed directly: checked at fit
        CRITERIA[name](**params).fit(hand_net, X_TRAIN)


def test_usage_errors(hand_net, sa_net):
    for name in CRITERIA:
        criterion = make_criterion(name)
        for use in (
            lambda: criterion.coverage(hand_net, X_TEST),  # noqa: B023 (run at once)
            criterion.tracker,
            lambda: criterion.features(hand_net, X_TEST),  # noqa: B023 (run at once)
        ):
            message = f"this {type(criterion).__name__} is not fitted yet: call fit first"
            with pytest.raises(ParameterError, match=message):
                use()
    with pytest.raises(LayerError, match="unknown layer 'nope'; valid layers: h, logits, softmax"):
        KMultisectionCoverage(layers=["nope"]).fit(hand_net, X_TRAIN)
    with pytest.raises(LayerError, match="unknown layer 'nope'"):
        DistanceSurpriseCoverage(layer="nope").fit(hand_net, X_TRAIN)
    with pytest.raises(ParameterError, match=r"The 'batch_size' parameter of KMultisectionCoverage must be an int"):
        KMultisectionCoverage().fit(hand_net, X_TRAIN, batch_size=0)
    with pytest.raises(InputError, match="got 3 labels for 4 inputs"):
        LikelihoodSurpriseCoverage().fit(hand_net, X_TRAIN, [0, 1, 0])
    with pytest.raises(InputError, match="DSC needs training inputs of at least two classes; got only class 1"):
        DistanceSurpriseCoverage(group="label").fit(sa_net, np.ones((5, 3), np.float32), np.ones(5, int))
    with pytest.raises(InputError, match="DSC needs training inputs of at least two classes; got only class 0"):
        DistanceSurpriseCoverage().fit(sa_net, np.ones((5, 3), np.float32), np.ones(5, int))  # all predicted 0
    with pytest.raises(
        ParameterError,
        match=r"LikelihoodSurpriseCoverage with group='label' groups the training "
        r"inputs by their labels: pass y_train \(or use group='predicted'\)",
    ):
        LikelihoodSurpriseCoverage(group="label").fit(sa_net, np.ones((5, 3), np.float32))
    kmnc = fitted(KMultisectionCoverage, hand_net, k=4)
    with pytest.raises(
        InputError, match=r"the activations of layer 'h' must have shape \(n, 3\) as when fitted; got \(2, 4\)"
    ):
        kmnc.features_from(np.zeros((2, 2)), [np.zeros((2, 4))])
    with pytest.raises(InputError, match="no inputs to feed the model"):
        kmnc.coverage(hand_net, np.zeros((0, 2), np.float32))


def test_tracker_errors(hand_net):
    tracker = fitted(KMultisectionCoverage, hand_net, k=4).tracker()
    with pytest.raises(InputError, match="features must be integer item ids"):
        tracker.update(np.zeros((2, 3)))
    with pytest.raises(
        InputError, match=r"item ids must be in \[0, 12\) or -1 for none; got 1 outside, the first 12 in row 0"
    ):
        tracker.update(np.array([[0, 12]]))
    with pytest.raises(InputError, match=r"in \[0, 12\)"):
        tracker.update(np.array([[-2]]))
    other = fitted(StrongNeuronActivationCoverage, hand_net).tracker()
    with pytest.raises(ParameterError, match="the trackers measure different things"):
        tracker.merge(other)
    with pytest.raises(ParameterError, match="expects a CriterionTracker; got CoverageTracker"):
        from idcgen.coverage import CoverageTracker

        tracker.merge(CoverageTracker(12))
    assert repr(CriterionTracker(5, [1, 3], criterion="nc")) == "CriterionTracker(criterion='nc', total=5, covered=2)"
