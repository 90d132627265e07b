"""The paper's MNIST models, LeNet-1, LeNet-4 and LeNet-5, with DeepXplore's layer names.

Their weights files in ../shared/models/deepxplore (MNIST_Model1-3.h5) load into these
architectures with ``model.load_weights(path)``.
"""

from __future__ import annotations

from .models import keras


class _Init:
    """Kernel initialisers seeded per layer from ``random_state``: the same random_state builds the same
    model, without touching Keras' global generator (None: unseeded, Keras' default)."""

    def __init__(self, random_state: int | None):
        self.random_state, self.layers = random_state, 0

    def __call__(self) -> dict:
        if self.random_state is None:
            return {}
        self.layers += 1
        return {"kernel_initializer": keras.initializers.GlorotUniform(seed=self.random_state * 1000 + self.layers)}


def _features(x, filters: tuple[int, int], init: _Init):
    L = keras.layers
    x = L.Conv2D(filters[0], 5, padding="same", activation="relu", name="block1_conv1", **init())(x)
    x = L.MaxPooling2D(2, name="block1_pool1")(x)
    x = L.Conv2D(filters[1], 5, padding="same", activation="relu", name="block2_conv1", **init())(x)
    x = L.MaxPooling2D(2, name="block2_pool1")(x)
    return L.Flatten(name="flatten")(x)


def _head(inputs, x, n_classes: int, name: str, init: _Init):
    x = keras.layers.Dense(n_classes, name="before_softmax", **init())(x)
    out = keras.layers.Activation("softmax", name="predictions")(x)
    return keras.Model(inputs, out, name=name)


def lenet1(input_shape=(28, 28, 1), n_classes: int = 10, random_state: int | None = 0) -> keras.Model:
    inputs, init = keras.Input(input_shape, name="input"), _Init(random_state)
    return _head(inputs, _features(inputs, (4, 12), init), n_classes, "lenet1", init)


def lenet4(input_shape=(28, 28, 1), n_classes: int = 10, random_state: int | None = 0) -> keras.Model:
    inputs, init = keras.Input(input_shape, name="input"), _Init(random_state)
    x = keras.layers.Dense(84, activation="relu", name="fc1", **init())(_features(inputs, (6, 16), init))
    return _head(inputs, x, n_classes, "lenet4", init)


def lenet5(input_shape=(28, 28, 1), n_classes: int = 10, random_state: int | None = 0) -> keras.Model:
    inputs, init = keras.Input(input_shape, name="input"), _Init(random_state)
    x = keras.layers.Dense(120, activation="relu", name="fc1", **init())(_features(inputs, (6, 16), init))
    x = keras.layers.Dense(84, activation="relu", name="fc2", **init())(x)
    return _head(inputs, x, n_classes, "lenet5", init)


MODELS = {"lenet1": lenet1, "lenet4": lenet4, "lenet5": lenet5}


def train(model: keras.Model, x, y, *, epochs: int = 10, batch_size: int = 256, optimizer: str = "adadelta",
          validation=None, verbose: int = 0, random_state: int = 0) -> keras.callbacks.History:
    """Train with the paper's settings (adadelta lr 1.0, rho 0.95, batch 256) or ``optimizer="adam"``."""
    keras.utils.set_random_seed(random_state)
    opt = keras.optimizers.Adadelta(learning_rate=1.0, rho=0.95) if optimizer == "adadelta" else optimizer
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model.fit(x, y, epochs=epochs, batch_size=batch_size, validation_data=validation, verbose=verbose)
