"""The paper's MNIST models, LeNet-1, LeNet-4 and LeNet-5, with DeepXplore's layer names.

Their weights files in ../shared/models/deepxplore (MNIST_Model1-3.h5) load into these
architectures with ``model.load_weights(path)``.
"""

from __future__ import annotations

from .models import keras


def _features(x, filters: tuple[int, int]):
    L = keras.layers
    x = L.Conv2D(filters[0], 5, padding="same", activation="relu", name="block1_conv1")(x)
    x = L.MaxPooling2D(2, name="block1_pool1")(x)
    x = L.Conv2D(filters[1], 5, padding="same", activation="relu", name="block2_conv1")(x)
    x = L.MaxPooling2D(2, name="block2_pool1")(x)
    return L.Flatten(name="flatten")(x)


def _head(inputs, x, n_classes: int, name: str):
    x = keras.layers.Dense(n_classes, name="before_softmax")(x)
    out = keras.layers.Activation("softmax", name="predictions")(x)
    return keras.Model(inputs, out, name=name)


def lenet1(input_shape=(28, 28, 1), n_classes: int = 10) -> keras.Model:
    inputs = keras.Input(input_shape, name="input")
    return _head(inputs, _features(inputs, (4, 12)), n_classes, "lenet1")


def lenet4(input_shape=(28, 28, 1), n_classes: int = 10) -> keras.Model:
    inputs = keras.Input(input_shape, name="input")
    x = keras.layers.Dense(84, activation="relu", name="fc1")(_features(inputs, (6, 16)))
    return _head(inputs, x, n_classes, "lenet4")


def lenet5(input_shape=(28, 28, 1), n_classes: int = 10) -> keras.Model:
    inputs = keras.Input(input_shape, name="input")
    x = keras.layers.Dense(120, activation="relu", name="fc1")(_features(inputs, (6, 16)))
    x = keras.layers.Dense(84, activation="relu", name="fc2")(x)
    return _head(inputs, x, n_classes, "lenet5")


MODELS = {"lenet1": lenet1, "lenet4": lenet4, "lenet5": lenet5}


def train(model: keras.Model, x, y, *, epochs: int = 10, batch_size: int = 256, optimizer: str = "adadelta",
          validation=None, verbose: int = 0, random_state: int = 0) -> keras.callbacks.History:
    """Train with the paper's settings (adadelta lr 1.0, rho 0.95, batch 256) or ``optimizer="adam"``."""
    keras.utils.set_random_seed(random_state)
    opt = keras.optimizers.Adadelta(learning_rate=1.0, rho=0.95) if optimizer == "adadelta" else optimizer
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model.fit(x, y, epochs=epochs, batch_size=batch_size, validation_data=validation, verbose=verbose)
