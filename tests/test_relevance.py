import numpy as np
import pytest
from conftest import hand_dense, small_cnn


def relevance_of(model, layer, x, **kw):
    from idcgen.framework import Network
    from idcgen.relevance import Relevance

    return Relevance(Network(model), layer=layer, **kw)(np.asarray(x, np.float32))


def test_hand_dense_lrp0_matches_hand_values():
    # x = [1, 2]: hidden z = [1*1 + 2*0.5, 1*-1 + 2*2] = [2, 3] (relu keeps both); logits [5, -3].
    # Class 0 wins with R = 5. Hidden: R_j = a_j w_j0 / z_0 * R_0 = [2*1/5*5, 3*1/5*5] = [2, 3].
    r, a, z = relevance_of(hand_dense(), "hidden", [[1.0, 2.0]], eps=1e-9)
    np.testing.assert_allclose(z, [[5.0, -3.0]], atol=1e-6)
    np.testing.assert_allclose(a, [[2.0, 3.0]], atol=1e-6)
    np.testing.assert_allclose(r, [[2.0, 3.0]], atol=1e-5)


def test_hand_dense_input_relevance():
    # Input: R_i = sum_k x_i w_ik / z_k * R_k with z = [2, 3], R = [2, 3]:
    # x0: 1*1/2*2 + 1*(-1)/3*3 = 0;  x1: 2*0.5/2*2 + 2*2/3*3 = 5.  Sum 5 = the logit (conserved).
    from idcgen.framework import Network
    from idcgen.relevance import input_relevance

    r = input_relevance(Network(hand_dense()), np.array([[1.0, 2.0]], np.float32), eps=1e-9)
    np.testing.assert_allclose(r, [[0.0, 5.0]], atol=1e-5)


def test_hand_dense_epsilon_and_bias():
    # b2 = [1, 0]: logit 6; eps = 1: R_j = a_j * 1 / (6 + 1) * 6 = [12/7, 18/7].
    r, _, z = relevance_of(hand_dense(b2=(1.0, 0.0)), "hidden", [[1.0, 2.0]], eps=1.0)
    np.testing.assert_allclose(z[0, 0], 6.0, atol=1e-6)
    np.testing.assert_allclose(r, [[12 / 7, 18 / 7]], atol=1e-5)


def test_true_label_target():
    # Explaining class 1 (logit -3): R = -3; R_j = a_j w_j1 / z_1 * R_1 = [2*0/-3*-3, 3*-1/-3*-3] = [0, -3].
    from idcgen.framework import Network
    from idcgen.relevance import Relevance

    rel = Relevance(Network(hand_dense()), layer="hidden", eps=1e-9)
    r, _, _ = rel(np.array([[1.0, 2.0]], np.float32), np.array([1]))
    np.testing.assert_allclose(r, [[0.0, -3.0]], atol=1e-5)


def test_softmax_inside_last_dense_gives_same_logits_and_relevance():
    x = np.array([[1.0, 2.0], [0.5, -1.0]], np.float32)
    r1, a1, z1 = relevance_of(hand_dense(True), "hidden", x)
    r2, a2, z2 = relevance_of(hand_dense(False), "hidden", x)
    np.testing.assert_allclose(z1, z2, atol=1e-6)
    np.testing.assert_allclose(r1, r2, atol=1e-6)


@pytest.mark.parametrize("layer", ["fc", "conv2", "conv1"])
def test_conservation_with_zero_biases(layer):
    model = small_cnn(zero_bias=True)
    x = np.random.default_rng(0).random((32, 12, 12, 1), dtype=np.float32)
    r, a, z = relevance_of(model, layer, x, eps=1e-9)
    np.testing.assert_allclose(r.sum(axis=1), z.max(axis=1), rtol=1e-3, atol=1e-5)


def test_lrp0_equals_activation_times_gradient_on_relu_net():
    import keras
    import tensorflow as tf

    model = small_cnn()
    x = np.random.default_rng(1).random((16, 12, 12, 1), dtype=np.float32)
    r, _, _ = relevance_of(model, "conv2", x, eps=1e-12)
    tap = keras.Model(model.inputs[0], model.get_layer("conv2").output)
    a = tf.Variable(tap(x))
    head = [model.get_layer(n) for n in ("flatten", "fc", "before_softmax")]
    with tf.GradientTape() as tape:
        h = a
        for layer in head:
            h = layer(h)
        chosen = tf.reduce_max(h, axis=1)
    expected = tf.reduce_sum(a * tape.gradient(chosen, a), axis=(1, 2)).numpy()
    np.testing.assert_allclose(r, expected, rtol=1e-3, atol=1e-5)


def test_conv_neurons_are_channels():
    r, a, _ = relevance_of(small_cnn(), "conv2", np.zeros((3, 12, 12, 1), np.float32) + 0.5)
    assert r.shape == (3, 6) and a.shape == (3, 6)


def test_model_unchanged_after_attribution():
    model = small_cnn()
    before = [w.copy() for w in model.get_weights()]
    x = np.random.default_rng(2).random((4, 12, 12, 1), dtype=np.float32)
    p0 = model(x).numpy()
    relevance_of(model, "fc", x)
    for w0, w1 in zip(before, model.get_weights()):
        np.testing.assert_array_equal(w0, w1)
    assert model.get_layer("fc").activation.__name__ == "relu"
    np.testing.assert_allclose(model(x).numpy(), p0, atol=1e-7)


def test_batched_equals_one_by_one():
    from idcgen.framework import Network
    from idcgen.relevance import Relevance

    rel = Relevance(Network(small_cnn()), layer="fc", batch_size=7)
    x = np.random.default_rng(3).random((20, 12, 12, 1), dtype=np.float32)
    r_all, _, _ = rel(x)
    r_one = np.concatenate([rel(x[i : i + 1])[0] for i in range(len(x))])
    np.testing.assert_allclose(r_all, r_one, rtol=1e-5, atol=1e-6)


def test_unsupported_layer_refused():
    import keras

    from idcgen.errors import LayerError
    from idcgen.framework import Network
    from idcgen.relevance import Relevance

    inputs = keras.Input((4,))
    h = keras.layers.Dense(3, activation="relu", name="h")(inputs)
    h = keras.layers.Softmax(name="norm")(h)  # a hidden softmax: no LRP rule
    out = keras.layers.Dense(2, activation="softmax", name="out")(h)
    with pytest.raises(LayerError, match="cannot propagate relevance through layer 'norm'"):
        Relevance(Network(keras.Model(inputs, out)), layer="h")
