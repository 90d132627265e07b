"""Gradients with respect to the inputs, for the gradient mutators (DeepXplore's joint objective and the
coverage-directed pull towards centroids): traced once per network and objective, numpy in and out."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ..errors import ParameterError
from .keras_graph import neuron_activations


def _float32(*arrays):
    return [tf.constant(np.asarray(a, np.float32)) for a in arrays]


def logit_sum(network):
    """(x, weights) -> (gradient of sum(weights * logits) w.r.t. x, logits)."""

    def build():
        @tf.function(reduce_retracing=True)
        def grad(x, weights):
            with tf.GradientTape() as tape:
                tape.watch(x)
                z = network.logits(x)
                total = tf.reduce_sum(weights * z)
            return tape.gradient(total, x), z

        return grad

    traced = network.cached(("deepxplore-output",), build)

    def run(x, weights):
        g, z = traced(*_float32(x, weights))
        return g.numpy(), z.numpy()

    return run


def neuron_sum(network, *, layers: tuple[str, ...]):
    """(x, mask) -> (gradient of sum(mask * neuron activations) w.r.t. x, activations), the neurons of
    ``layers`` side by side (conv channels by spatial mean)."""
    layers = tuple(layers)

    def build():
        @tf.function(reduce_retracing=True)
        def grad(x, mask):
            with tf.GradientTape() as tape:
                tape.watch(x)
                outs, _ = network.outputs(x, layers)
                acts = tf.concat([neuron_activations(o) for o in outs], axis=1)
                total = tf.reduce_sum(mask * acts)
            return tape.gradient(total, x), acts

        return grad

    traced = network.cached(("deepxplore-nc", layers), build)

    def run(x, mask):
        g, acts = traced(*_float32(x, mask))
        return g.numpy(), acts.numpy()

    return run


def centroid_pull(network, *, layer: str, neurons):
    """(x, target, scale) -> gradient w.r.t. x of sum(((activations of ``neurons`` - target) / scale)^2)."""
    neurons = tuple(int(n) for n in neurons)

    def build():
        idx = tf.constant(neurons, tf.int32)

        @tf.function(reduce_retracing=True)
        def grad(x, target, scale):
            with tf.GradientTape() as tape:
                tape.watch(x)
                (out,), _ = network.outputs(x, (layer,))
                acts = tf.gather(neuron_activations(out), idx, axis=1)
                loss = tf.reduce_sum(tf.square((acts - target) / scale))
            return tape.gradient(loss, x)

        return grad

    traced = network.cached(("directed", layer, neurons), build)
    return lambda x, target, scale: traced(*_float32(x, target, scale)).numpy()


GRADIENTS = {"logit-sum": logit_sum, "neuron-sum": neuron_sum, "centroid-pull": centroid_pull}


def gradient_function(network, kind: str, **spec):
    if kind not in GRADIENTS:
        raise ParameterError(f"unknown gradient {kind!r}; expected one of {', '.join(GRADIENTS)}")
    return GRADIENTS[kind](network, **spec)
