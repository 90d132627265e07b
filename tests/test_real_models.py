"""Issue 26: no silent wrong results on real model heads and layers (keras.applications built with
weights=None at 32x32, no download): a conv classifier's logits, the rule used per layer kind, mutators
that cannot run on the model, regression models fed the wrong scale, dead layers."""

import numpy as np
import pytest


def conv_head(classes: int = 4):
    """MobileNet's head in small: Conv - GAP(keepdims) - Conv2D(classes, 1x1) `logits` - Flatten - softmax."""
    import keras

    L = keras.layers
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 3))
    x = L.Conv2D(6, 3, activation="relu", name="conv")(inputs)
    x = L.GlobalAveragePooling2D(keepdims=True, name="gap")(x)
    x = L.Dropout(0.2, name="dropout")(x)
    x = L.Conv2D(classes, 1, name="logits")(x)
    x = L.Flatten(name="flatten")(x)
    return keras.Model(inputs, L.Activation("softmax", name="predictions")(x))


def test_conv_classifier_is_the_logits_not_a_hidden_layer():
    from idcgen.errors import LayerError
    from idcgen.framework.keras_network import KerasNetwork

    network = KerasNetwork(conv_head())
    assert network.logits_layer == "logits"
    assert network.default_layer() == "gap"  # through the dropout, not the class scores
    with pytest.raises(LayerError, match="is the logits or after them"):
        network.check_subject_layer("logits")
    assert "logits" not in network.weighted_layers()


def test_mobilenetv3small_logits():
    import keras

    from idcgen.framework.keras_network import KerasNetwork

    model = keras.applications.MobileNetV3Small(
        weights=None, input_shape=(32, 32, 3), classes=10, include_preprocessing=False
    )
    network = KerasNetwork(model)
    # the last activation before the logits (by position: its name depends on Keras' global layer counter)
    names = [layer.name for layer in model.layers]
    before = [n for n in names[: names.index("logits")] if isinstance(model.get_layer(n), keras.layers.Activation)]
    assert (network.logits_layer, network.default_layer()) == ("logits", before[-1])
    x = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    relevance, _, logits = network.relevance(network.default_layer())(x)
    assert relevance.shape == (2, 1024) and logits.shape == (2, 10)
    # its hard sigmoid multiplies by a constant (a keras.ops call): explained, so every hidden layer is a
    # subject layer and relevance reaches the pixels (relevant_pixels runs)
    assert len(network.subject_layers()) == sum(network.is_hidden(i.name) for i in network.layers_info())
    assert network.relevance(None).maps(x).shape == x.shape


def test_a_dead_layer_is_refused_not_fully_covered():
    import keras

    from idcgen.analysis import analyze
    from idcgen.errors import LayerError

    L = keras.layers
    inputs = keras.Input((6,))
    dead = L.Dense(5, activation="relu", name="dead")(inputs)
    model = keras.Model(inputs, L.Dense(3, activation="softmax", name="out")(dead))
    model.get_layer("dead").set_weights([np.zeros((6, 5)), np.full(5, -1.0)])  # relu(-1) = 0 for every input
    x = np.random.default_rng(0).uniform(0, 1, (40, 6)).astype("float32")
    with pytest.raises(LayerError, match="layer 'dead' is constant on the 40 training inputs"):
        analyze(model, x, np.arange(40) % 3, layer="dead", m=3, progress=False)


def unexplained_cnn():
    """Conv - Softmax over channels `sm0a` (no LRP rule) - Conv `conv2` - GAP - softmax."""
    import keras

    L = keras.layers
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 1))
    x = L.Conv2D(4, 3, activation="relu", name="conv1")(inputs)
    x = L.Softmax(name="sm0a")(x)
    x = L.Conv2D(6, 3, activation="relu", name="conv2")(x)
    x = L.GlobalAveragePooling2D(name="gap")(x)
    return keras.Model(inputs, L.Dense(3, activation="softmax", name="out")(x))


def test_a_mutator_that_cannot_run_on_the_model_is_refused_before_the_campaign():
    from idcgen.analysis import analyze
    from idcgen.errors import ParameterError
    from idcgen.fuzz.fuzzer import Fuzzer

    x = np.random.default_rng(0).uniform(0, 1, (30, 8, 8, 1)).astype("float32")
    analysis = analyze(unexplained_cnn(), x, np.arange(30) % 3, layer="conv2", m=2, clusters=(2,), progress=False)
    with pytest.raises(ParameterError) as refused:
        Fuzzer(analysis, mutators=["gauss", "relevant_pixels"])
    message = str(refused.value)
    assert (
        message.startswith(
            "mutator relevant_pixels cannot run on this model: cannot propagate relevance to "
            "the input through layer 'sm0a' (Softmax)"
        )
        and "\n" not in message
    )
    Fuzzer(analysis, mutators=["gauss", "random_pixels"])  # the others still run


def test_rules_and_approximations_are_stated():
    import keras

    from idcgen.framework.keras_network import KerasNetwork

    network = KerasNetwork(keras.applications.EfficientNetB0(weights=None, input_shape=(32, 32, 3), classes=10))
    notes = network.rule_notes(None)
    assert (
        notes[0].startswith("LRP rules: epsilon for Add, BatchNormalization, Conv2D")
        and "gate for Multiply" in notes[0]
    )
    assert any(
        n.startswith("LRP approximated in 49 layer(s) (stem_activation,") and "silu passed through unchanged" in n
        for n in notes
    )
    assert any("none to the gate" in n and "block1a_se_excite" in n for n in notes)
    assert network.rule_label("block1a_se_excite") == "gate (all relevance to the signal, none to the gate)"


def test_layers_names_the_usable_subject_layers(tmp_path):
    from typer.testing import CliRunner

    from idcgen.analysis import analyze
    from idcgen.cli import app

    model = unexplained_cnn()
    model.save(tmp_path / "m.keras")
    out = CliRunner().invoke(app, ["layers", "--model", str(tmp_path / "m.keras")]).output
    assert "LRP rules: epsilon for Conv2D, Dense, GlobalAveragePooling2D; none for Softmax" in out
    assert (
        "subject layers: 3 of 4 hidden layers, from the last layer without an LRP rule on ('sm0a' "
        "(Softmax)): sm0a, conv2, gap"
    ) in out
    x = np.random.default_rng(0).uniform(0, 1, (30, 8, 8, 1)).astype("float32")
    analysis = analyze(model, x, layer="conv2", m=2, clusters=(2,), progress=False)
    assert analysis.notes[0] == "LRP rules: epsilon for Dense, GlobalAveragePooling2D"


def mean_steering():
    """A steering model that outputs the mean pixel: Flatten - Dense(3, relu) `hidden` - Dense(1) `steer`."""
    import keras

    L = keras.layers
    inputs = keras.Input((4, 4, 1))
    h = L.Dense(3, activation="relu", name="hidden")(L.Flatten(name="flatten")(inputs))
    model = keras.Model(inputs, L.Dense(1, name="steer")(h))
    model.get_layer("hidden").set_weights([np.outer(np.full(16, 1 / 16), [1.0, 0.5, 2.0]), np.zeros(3)])
    model.get_layer("steer").set_weights(
        [np.array([[0.5], [0.5], [0.125]]), np.zeros(1)]
    )  # 0.5 + 0.25 + 0.25: the mean
    return model


def test_a_regression_model_fed_the_wrong_scale_is_warned():
    from idcgen.analysis import analyze

    model = mean_steering()
    x = np.random.default_rng(0).uniform(0, 1, (50, 4, 4, 1)).astype("float32")
    y = x.mean(axis=(1, 2, 3)).astype("float64")
    fits = analyze(model, x, y, m=2, clusters=(2,), progress=False)
    assert fits.data["mse"] < 1e-10 and fits.warnings == []
    unscaled = analyze(model, x / 255, y, m=2, clusters=(2,), progress=False)  # scaled twice: outputs near 0
    assert len(unscaled.warnings) == 1 and unscaled.warnings[0].startswith(
        f"the model's MSE on the training labels, {unscaled.data['mse']:.4g}, is not below their variance "
        f"{np.var(y):.4g} (predicting their mean would do as well): the inputs are likely scaled twice"
    )


def keras213_json() -> str:
    """What Keras 2.13+ `to_json()` writes for Input(4) - Dense(3, relu) - Dense(2, softmax): "module" keys
    (keras.src.engine.functional) that Keras 3's own reader cannot import, and keras_version 2.x."""
    import json

    def dense(name, units, activation, inbound):
        init = {"module": "keras.initializers", "registered_name": None}
        return {
            "module": "keras.layers",
            "class_name": "Dense",
            "registered_name": None,
            "name": name,
            "inbound_nodes": [[[inbound, 0, 0, {}]]],
            "config": {
                "name": name,
                "trainable": True,
                "dtype": "float32",
                "units": units,
                "activation": activation,
                "use_bias": True,
                "kernel_initializer": dict(init, class_name="GlorotUniform", config={"seed": None}),
                "bias_initializer": dict(init, class_name="Zeros", config={}),
                "kernel_regularizer": None,
                "bias_regularizer": None,
                "activity_regularizer": None,
                "kernel_constraint": None,
                "bias_constraint": None,
            },
        }

    layers = [
        {
            "module": "keras.layers",
            "class_name": "InputLayer",
            "registered_name": None,
            "name": "x",
            "inbound_nodes": [],
            "config": {
                "batch_input_shape": [None, 4],
                "dtype": "float32",
                "sparse": False,
                "ragged": False,
                "name": "x",
            },
        },
        dense("h", 3, "relu", "x"),
        dense("d", 2, "softmax", "h"),
    ]
    return json.dumps(
        {
            "module": "keras.src.engine.functional",
            "class_name": "Functional",
            "registered_name": "Functional",
            "keras_version": "2.13.1",
            "backend": "tensorflow",
            "config": {
                "name": "model",
                "layers": layers,
                "input_layers": [["x", 0, 0]],
                "output_layers": [["d", 0, 0]],
            },
        }
    )


def test_keras2_json_with_module_keys_is_read():
    from idcgen.framework.keras_legacy import model_from_architecture

    model = model_from_architecture(keras213_json())
    assert [layer.name for layer in model.layers] == ["x", "h", "d"] and model.output_shape == (None, 2)


def lambda_model(function):
    import keras

    L = keras.layers
    inputs = keras.Input((4,))
    h = L.Dense(1, name="before_prediction")(L.Dense(3, activation="relu", name="fc")(inputs))
    return keras.Model(inputs, L.Lambda(function, name="prediction")(h))


def test_a_python_lambda_using_tf_runs_after_loading(tmp_path):
    import tensorflow as tf

    from idcgen.framework.keras_legacy import model_from_architecture
    from idcgen.framework.keras_network import load_model

    # DeepXplore's Dave_orig head, written where tf is a module global
    model = lambda_model(eval("lambda x: tf.multiply(tf.atan(x), 2)", {"tf": tf}))
    x = np.random.default_rng(0).uniform(0, 1, (3, 4)).astype("float32")
    expected = np.asarray(model(x))
    rebuilt = model_from_architecture(model.to_json(), safe_mode=False)
    rebuilt.set_weights(model.get_weights())
    np.testing.assert_allclose(np.asarray(rebuilt(x)), expected, rtol=1e-6)  # not NameError: 'tf'
    model.save(tmp_path / "dave.keras")
    np.testing.assert_allclose(np.asarray(load_model(tmp_path / "dave.keras", safe_mode=False)(x)), expected, rtol=1e-6)


def test_a_lambda_calling_a_missing_function_is_named():
    import json

    from idcgen.errors import ModelError
    from idcgen.framework.keras_legacy import model_from_architecture

    def atan_layer(x):
        return x

    config = json.loads(lambda_model(atan_layer).to_json())
    for layer in config["config"]["layers"]:
        if layer["class_name"] == "Lambda":
            layer["config"]["function"]["module"] = "dave_orig_driving"  # the user's module, absent here
    with pytest.raises(ModelError) as refused:
        model_from_architecture(json.dumps(config), safe_mode=False)
    message = str(refused.value)
    assert (
        "Lambda layer 'prediction' calls function 'atan_layer' of module 'dave_orig_driving', stored by name only"
    ) in message
    assert "\n" not in message and len(message) < 700
