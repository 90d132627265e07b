"""Functional graphs: layers of any graph by name, forward taps, and graph LRP against hand-computed values,
the LRP-0 = activation x gradient identity, and conservation on MobileNetV2 and ResNet-20."""

import numpy as np
import pytest

from idcgen.errors import LayerError


def _net(model):
    from idcgen.framework import Network

    return Network(model)


def _relevance(model, layer, x, eps=1e-9, target=None):
    from idcgen.relevance import Relevance

    r, a, z = Relevance(_net(model), layer=layer, eps=eps).raw(np.asarray(x, np.float32), target)
    return r.numpy(), a.numpy(), z.numpy()


def _build(inputs, out, weights):
    import keras

    model = keras.Model(inputs, keras.layers.Activation("softmax", name="softmax")(out))
    for name, w in weights.items():
        model.get_layer(name).set_weights([np.asarray(v, np.float32) for v in w])
    return model


def residual_block():
    """x (2) -> h = relu(W1 x) -> s = x + h -> logits W2 s. W1 = [[1, -1], [0.5, 2]], W2 = [[1, 0], [1, -1]]."""
    import keras

    x = keras.Input((2,))
    h = keras.layers.Dense(2, activation="relu", name="h")(x)
    s = keras.layers.Add(name="add")([x, h])
    z = keras.layers.Dense(2, name="logits")(s)
    return _build(x, z, {"h": ([[1, -1], [0.5, 2]], [0, 0]), "logits": ([[1, 0], [1, -1]], [0, 0])})


def test_residual_block_by_hand():
    # x = [1, 2]: h = [2, 3], s = [3, 5], logits [8, -5]; class 0, R = 8.
    # s: R_j = s_j w_j0 / 8 * 8 = [3, 5]. Add: x gets x/s*R = [1, 2], h gets h/s*R = [2, 3].
    # Input through h: x0: 1*1/2*2 + 1*(-1)/3*3 = 0, x1: 2*0.5/2*2 + 2*2/3*3 = 5; total [1, 7], sum 8.
    model = residual_block()
    r, _, z = _relevance(model, "add", [[1, 2]])
    np.testing.assert_allclose(z, [[8, -5]], atol=1e-6)
    np.testing.assert_allclose(r, [[3, 5]], atol=1e-5)
    np.testing.assert_allclose(_relevance(model, "h", [[1, 2]])[0], [[2, 3]], atol=1e-5)
    np.testing.assert_allclose(_relevance(model, None, [[1, 2]])[0], [[1, 7]], atol=1e-5)


def test_concatenate_by_hand():
    # x = [2, 1]: a = relu(x0 + x1) = 3, b = relu(2 x0 - x1) = 3, c = [3, 3], logits [6, 3]; R = 6.
    # c: R = [3*1/6*6, 3*1/6*6] = [3, 3], split by slices: a 3, b 3.
    # Input: from a x*1/3*3 = [2, 1]; from b [2*2/3*3, 1*(-1)/3*3] = [4, -1]; total [6, 0].
    import keras

    x = keras.Input((2,))
    a = keras.layers.Dense(1, activation="relu", name="a")(x)
    b = keras.layers.Dense(1, activation="relu", name="b")(x)
    c = keras.layers.Concatenate(name="cat")([a, b])
    z = keras.layers.Dense(2, name="logits")(c)
    model = _build(x, z, {"a": ([[1], [1]], [0]), "b": ([[2], [-1]], [0]), "logits": ([[1, 0], [1, 1]], [0, 0])})
    np.testing.assert_allclose(_relevance(model, "cat", [[2, 1]])[0], [[3, 3]], atol=1e-5)
    np.testing.assert_allclose(_relevance(model, "a", [[2, 1]])[0], [[3]], atol=1e-5)
    np.testing.assert_allclose(_relevance(model, None, [[2, 1]])[0], [[6, 0]], atol=1e-5)


def test_depthwise_by_hand():
    # 2x2x2 input; channel 0 kernel all ones: z0 = 1+2+3+4 = 10; channel 1 kernel [[1, 0], [0, 2]]: z1 = 1 + 2 = 3.
    # logits W = [[1, 0], [1, 1]]: [13, 3]; R = 13; z: [10, 3]; pixels: channel 0 the pixel values, channel 1 [[1, 0], [0, 2]].
    import keras

    x = keras.Input((2, 2, 2))
    d = keras.layers.DepthwiseConv2D(2, use_bias=False, name="dw")(x)
    z = keras.layers.Dense(2, name="logits")(keras.layers.Flatten(name="flat")(d))
    kernel = np.zeros((2, 2, 2, 1), np.float32)
    kernel[..., 0, 0] = 1
    kernel[..., 1, 0] = [[1, 0], [0, 2]]
    model = _build(x, z, {"logits": ([[1, 0], [1, 1]], [0, 0])})
    model.get_layer("dw").set_weights([kernel])
    image = np.zeros((1, 2, 2, 2), np.float32)
    image[0, ..., 0] = [[1, 2], [3, 4]]
    image[0, ..., 1] = 1
    np.testing.assert_allclose(_relevance(model, "flat", image)[0], [[10, 3]], atol=1e-5)
    r = _relevance(model, None, image)[0]
    np.testing.assert_allclose(r[0, ..., 0], [[1, 2], [3, 4]], atol=1e-5)
    np.testing.assert_allclose(r[0, ..., 1], [[1, 0], [0, 2]], atol=1e-5)


def test_multiply_gives_relevance_to_the_signal():
    import keras

    x = keras.Input((4,))
    h = keras.layers.Dense(3, activation="relu", name="h")(x)
    g = keras.layers.Dense(3, activation="sigmoid", name="gate")(x)
    m = keras.layers.Multiply(name="mul")([g, h])  # gate first: the rule must still find the signal
    model = _build(x, keras.layers.Dense(2, name="logits")(m), {})
    xs = np.random.default_rng(0).random((5, 4))
    np.testing.assert_allclose(_relevance(model, "h", xs)[0], _relevance(model, "mul", xs)[0], atol=1e-5)


def test_batchnorm_folded_into_the_conv_before_it():
    # dense c = a0 + a1 = 0 for a = [1, -1]; BN (gamma 1, beta 0, mean -2, variance 1 - 1e-3, so sigma = 1):
    # z = c + 2 = 2; logits = 1 * z; R = 2. Folded (one affine map a -> z with weights [1, 1]):
    # R_a = a * 1 / 2 * 2 = [1, -1]. A BN explained on its own would give the dense output c = 0 no relevance.
    import keras

    x = keras.Input((2,))
    c = keras.layers.Dense(1, name="lin")(x)
    b = keras.layers.BatchNormalization(name="bn", epsilon=1e-3)(c)
    model = _build(x, keras.layers.Dense(1, name="logits")(b), {"lin": ([[1], [1]], [0]), "logits": ([[1]], [0])})
    model.get_layer("bn").set_weights([np.ones(1), np.zeros(1), -2 * np.ones(1), np.ones(1) - 1e-3])
    np.testing.assert_allclose(_relevance(model, None, [[1, -1]])[0], [[1, -1]], atol=1e-4)
    np.testing.assert_allclose(_relevance(model, "bn", [[1, -1]])[0], [[2]], atol=1e-4)


def small_graph(random_state=0):
    """Conv-BN-ReLU stem, a residual block with a projection, a concatenation of two branches, max and global
    pooling, a nested functional block; biases and BN statistics random (not zero)."""
    import keras

    L = keras.layers
    rng = np.random.default_rng(random_state)
    keras.utils.set_random_seed(random_state)
    inner_in = keras.Input((6, 6, 8))
    inner = keras.Model(
        inner_in, L.Conv2D(8, 3, padding="same", activation="relu", name="inner_conv")(inner_in), name="inner"
    )
    x = keras.Input((12, 12, 3))
    s = L.ReLU(name="stem_relu")(L.BatchNormalization(name="stem_bn")(L.Conv2D(8, 3, padding="same", name="stem")(x)))
    y = L.Conv2D(8, 3, padding="same", name="b1_conv")(s)
    y = L.ReLU(name="b1_relu")(L.BatchNormalization(name="b1_bn")(y))
    proj = L.BatchNormalization(name="proj_bn")(L.Conv2D(8, 1, name="proj")(s))
    a = L.ReLU(name="b1_out")(L.Add(name="b1_add")([y, proj]))
    p = L.MaxPooling2D(2, name="pool")(a)
    left = L.Conv2D(4, 3, padding="same", activation="relu", name="left")(p)
    right = L.Conv2D(4, 1, activation="relu", name="right")(p)
    c = L.Concatenate(name="cat")([left, right])
    n = inner(c)
    g = L.GlobalAveragePooling2D(name="gap")(n)
    out = L.Dense(5, activation="softmax", name="logits")(L.Dropout(0.2, name="drop")(g))
    model = keras.Model(x, out)
    for layer in model.layers:
        if isinstance(layer, L.BatchNormalization):
            k = layer.gamma.shape[0]
            layer.set_weights(
                [rng.uniform(0.5, 1.5, k), rng.normal(0, 0.1, k), rng.normal(0, 0.1, k), rng.uniform(0.5, 1.5, k)]
            )
        elif layer.weights and hasattr(layer, "bias") and layer.bias is not None:
            layer.bias.assign(rng.normal(0, 0.05, layer.bias.shape).astype(np.float32))
    return model


def test_graph_layers_forward_and_nested_names():
    model = small_graph()
    net = _net(model)
    names = net.layer_names()
    assert "inner_conv" in names and "b1_add" in names and "cat" in names  # the nested model expanded
    assert net.default_layer() == "gap" and net.logits_layer == "logits"
    x = np.random.default_rng(1).random((6, 12, 12, 3), dtype=np.float32)
    probs, (acts,) = net.forward(x, ("inner_conv",))
    np.testing.assert_allclose(probs, model.predict(x, verbose=0), atol=1e-5)
    assert acts.shape == (6, 8)
    with pytest.raises(LayerError, match="is the logits or after them"):
        net.check_subject_layer("softmax" if "softmax" in names else "logits")


@pytest.mark.parametrize("layer", ["stem", "stem_relu", "b1_bn", "b1_add", "cat", "left", "inner_conv", "gap", None])
def test_lrp0_equals_activation_times_gradient(layer):
    # On linear/affine layers (biases included), ReLU, max pooling, Add and Concatenate, LRP-0 relevance at
    # any tensor equals activation x gradient of the explained logit (docs/design.md, "Relevance on graphs").
    import tensorflow as tf

    model = small_graph()
    net = _net(model)
    x = tf.constant(np.random.default_rng(2).random((4, 12, 12, 3), dtype=np.float32))
    r, a, z = _relevance(model, layer, x.numpy(), eps=1e-9)
    cls = z.argmax(axis=1)
    with tf.GradientTape() as tape:
        tape.watch(x)
        values = net.graph.run(x, linear=net.logits_step)  # one run: the tape sees every tensor
        t = x if layer is None else values[net.key_of(layer)]
        top = tf.reduce_sum(tf.gather(values[net.logits_key], cls, axis=1, batch_dims=1))
    grad = tape.gradient(top, t)
    expected = (t * grad).numpy()
    scale = np.abs(expected).max()
    np.testing.assert_allclose(r, expected, atol=2e-4 * scale)


def _zero_bias_bn_calibrated(model, x):
    """Zero every bias and BN shift, and give each BN the second moment of its input, so activations keep a
    unit scale through a randomly initialised network (conservation then holds up to epsilon)."""
    import keras

    L = keras.layers
    from idcgen.framework import Network

    net = Network(model)
    values = {net.graph.input_key: x}  # one walk, each step run once after it is set (a run per BN was O(L^2))
    for step in net.graph.steps:
        layer = step.layer
        if isinstance(layer, L.BatchNormalization):
            second = np.mean(np.square(np.asarray(values[step.inputs[0]])), axis=(0, 1, 2)) + 1e-3
            layer.set_weights([np.ones_like(second), np.zeros_like(second), np.zeros_like(second), second])
        elif getattr(layer, "bias", None) is not None and getattr(layer, "use_bias", True):
            layer.bias.assign(np.zeros(layer.bias.shape, np.float32))
        values.update(zip(step.outputs, step.call([values[k] for k in step.inputs])))
    return Network(model)


def _check_cuts(net, x, layers):
    from idcgen.relevance import Relevance

    for layer in layers:
        r, _, z = Relevance(net, layer=layer, eps=1e-7).raw(x)
        total = r.numpy().reshape(len(x), -1).sum(axis=1)
        np.testing.assert_allclose(total, z.numpy().max(axis=1), rtol=2e-3, err_msg=f"layer {layer}")


def test_conservation_on_mobilenetv2():
    import keras

    model = keras.applications.MobileNetV2(
        weights=None, input_shape=(32, 32, 3), classes=10, alpha=0.35, classifier_activation="softmax"
    )
    x = np.random.default_rng(3).random((4, 32, 32, 3), dtype=np.float32)
    net = _zero_bias_bn_calibrated(model, x)
    assert any(s.kind == "DepthwiseConv2D" for s in net.graph.steps)
    _check_cuts(net, x, ["block_16_project_BN", "block_5_add", None])


def test_conservation_on_resnet20():
    from idcgen.framework import keras_zoo as zoo

    model = zoo.resnet20()
    x = np.random.default_rng(4).random((4, 32, 32, 3), dtype=np.float32)
    net = _zero_bias_bn_calibrated(model, x)
    adds = [s.name for s in net.graph.steps if s.kind == "Add"]
    assert len(adds) == 9
    cuts = [net.graph.steps[net.graph.consumers[net.key_of(a)][0]].name for a in adds[::3]]  # the ReLU after
    _check_cuts(net, x, cuts + [net.default_layer(), None])


def test_refuses_layers_it_cannot_explain():
    import keras

    x = keras.Input((4,))
    h = keras.layers.Dense(4, activation="relu", name="h")(x)
    n = keras.layers.Softmax(name="norm")(h)  # a hidden softmax: no LRP rule
    model = keras.Model(x, keras.layers.Dense(2, activation="softmax", name="logits")(n))
    from idcgen.relevance import Relevance

    with pytest.raises(
        LayerError,
        match=r"cannot propagate relevance through layer 'norm' \(Softmax\)"
        r".*Concatenate.*DepthwiseConv2D",
    ):
        Relevance(_net(model), layer="h")
    Relevance(_net(model), layer="norm")  # a subject layer after it is fine


def test_chain_model_equals_layer_by_layer_epsilon_rule():
    # On a chain (LeNet-5) the graph walk must give what the plain layer-by-layer epsilon rule gives.
    import tensorflow as tf

    from idcgen.framework.keras_graph import without_activation
    from idcgen.framework.keras_zoo import lenet5

    model = lenet5()
    x = np.random.default_rng(5).random((6, 28, 28, 1), dtype=np.float32)
    r, _, _ = _relevance(model, "block2_conv1", x, eps=1e-7)
    layers = [model.get_layer(n) for n in ("block2_pool1", "flatten", "fc1", "fc2", "before_softmax")]
    acts, a = [], tf.constant(x)
    for layer in [model.get_layer(n) for n in ("block1_conv1", "block1_pool1", "block2_conv1")] + layers:
        acts.append(a)
        a = layer(a)
    z = a
    rel = z * tf.one_hot(tf.argmax(z, axis=1), 10)
    for layer, a_in in zip(reversed(layers), reversed(acts[3:])):
        if layer.name == "flatten":
            rel = tf.reshape(rel, a_in.shape)
            continue
        with tf.GradientTape() as tape:
            tape.watch(a_in)
            with without_activation(layer):
                out = layer(a_in)
            s = tf.stop_gradient(rel / (out + 1e-7 * tf.where(out >= 0, 1.0, -1.0)))
            total = tf.reduce_sum(out * s)
        rel = a_in * tape.gradient(total, a_in)
    np.testing.assert_allclose(r, rel.numpy(), rtol=1e-5, atol=1e-6)


def test_cli_on_a_nested_mobilenet(tmp_path):
    # `idcgen layers`, `analyze` on a layer inside the nested backbone, and `coverage` by IDC and the neuron
    # criteria, on a keras.applications MobileNetV2 inside a Sequential wrapper, saved and read back as a file.
    import json

    import keras
    from typer.testing import CliRunner

    from idcgen.cli import app

    backbone = keras.applications.MobileNetV2(weights=None, include_top=False, input_shape=(32, 32, 3), alpha=0.35)
    model = keras.Sequential(
        [
            keras.Input((32, 32, 3)),
            backbone,
            keras.layers.GlobalAveragePooling2D(name="gap"),
            keras.layers.Dense(10, activation="softmax", name="head"),
        ]
    )
    model.save(tmp_path / "wrapped.keras")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "imgs.npz", x=rng.integers(0, 256, (60, 32, 32, 3), dtype=np.uint8), y=rng.integers(0, 10, 60))
    run = CliRunner().invoke
    result = run(app, ["layers", "--model", str(tmp_path / "wrapped.keras")])
    assert result.exit_code == 0, result.output
    assert "block_16_project_BN" in result.output and "DepthwiseConv2D" in result.output
    assert "default subject layer: gap" in result.output
    result = run(
        app,
        [
            "analyze",
            "--model",
            str(tmp_path / "wrapped.keras"),
            "--train",
            str(tmp_path / "imgs.npz"),
            "--layer",
            "block_13_expand_relu",
            "--m",
            "3",
            "--clusters",
            "2-3",
            "--out",
            str(tmp_path / "a"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "a" / "analysis.json").read_text())["layer"] == "block_13_expand_relu"
    result = run(
        app,
        [
            "coverage",
            "--model",
            str(tmp_path / "wrapped.keras"),
            "--analysis",
            str(tmp_path / "a"),
            "--inputs",
            str(tmp_path / "imgs.npz"),
            "--criteria",
            "idc,nc,tknc",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output.strip().splitlines()[-1])
    assert set(payload["criteria"]) == {"idc", "nc", "tknc"} and all(
        0 < v["score"] <= 1 for v in payload["criteria"].values()
    )
