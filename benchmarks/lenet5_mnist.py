"""What the benchmarks share: LeNet-5 with DeepXplore's weights and full MNIST from ../shared."""

from __future__ import annotations

import sys
from pathlib import Path


def lenet5_mnist(shared: Path):
    """(Network, train Dataset, test Dataset, x_train, x_test); exits with a message if ../shared is absent."""
    from idcgen.data import fit_to_model, load_inputs
    from idcgen.framework import Network
    from idcgen.framework.keras_zoo import lenet5

    weights, mnist = shared / "models/deepxplore/MNIST_Model3.h5", shared / "data/mnist"
    if not weights.exists() or not mnist.exists():
        sys.exit(f"needs {weights} and {mnist} (the ../shared folder of the development workspace)")
    model = lenet5()
    model.load_weights(weights)
    train, test = load_inputs(mnist, split="train"), load_inputs(mnist, split="test")
    return Network(model), train, test, fit_to_model(train, (28, 28, 1)), fit_to_model(test, (28, 28, 1))


def raw_forward(model):
    """The bare forward pass the benchmarks compare against: (a tf.function on one batch, a function
    that runs it over an array in batches of 1,024)."""
    import tensorflow as tf

    @tf.function(reduce_retracing=True)
    def forward(x):
        return model(x, training=False)

    def forward_pass(x, batch=1024):
        for i in range(0, len(x), batch):
            forward(tf.convert_to_tensor(x[i : i + batch])).numpy()

    return forward, forward_pass
