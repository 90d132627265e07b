"""Layer-wise relevance propagation (LRP-epsilon), batched, by autodiff (DESIGN §2).

For a layer ``z = f(a)`` with its activation removed, the epsilon rule
``R_j = sum_k a_j w_jk / (z_k + eps*sign(z_k)) * R_k`` is, for any layer,
``R_prev = a * d/da sum(z * stop_gradient(R / (z + eps*sign(z))))``: one backward pass per batch,
the same code for dense, convolutional and pooling layers (max-pooling becomes winner-take-all).
Elementwise and reshaping layers pass relevance through unchanged.
"""

from __future__ import annotations

import contextlib

import numpy as np

from .errors import InputError, LayerError
from .models import LRP_LAYERS, PASS_THROUGH, Network, keras, neuron_activations, tf


@contextlib.contextmanager
def _without_activation(layer):
    """Call ``layer`` as its linear part (read at trace time, so the traced graph keeps it)."""
    activation = getattr(layer, "activation", None)
    if activation is None:
        yield
        return
    layer.activation = keras.activations.linear
    try:
        yield
    finally:
        layer.activation = activation


def _linear_call(layer, a):
    with _without_activation(layer):
        return layer(a, training=False)


def lrp_step(layer, a: tf.Tensor, relevance: tf.Tensor, eps: float) -> tf.Tensor:
    """Relevance of ``layer``'s inputs ``a`` given the relevance of its (pre-activation) outputs."""
    if isinstance(layer, PASS_THROUGH):
        return tf.reshape(relevance, tf.shape(a))
    with tf.GradientTape() as tape:
        tape.watch(a)
        z = _linear_call(layer, a)
        stabiliser = eps * tf.where(z >= 0, 1.0, -1.0)
        s = tf.stop_gradient(relevance / (z + stabiliser))
        total = tf.reduce_sum(z * s)
    return a * tape.gradient(total, a)


class Relevance:
    """Relevance of a subject layer's neurons (or of the input pixels), from one logit per input.

    Parameters
    ----------
    network : Network
    layer : str or None
        Subject layer name; ``None`` propagates down to the input pixels.
    eps : float, default 1e-7
        The epsilon of LRP-epsilon; ``eps -> 0`` is LRP-0 (activation x gradient on ReLU networks).
    """

    def __init__(self, network: Network, *, layer: str | None, eps: float = 1e-7, batch_size: int = 512):
        self.network = network
        self.layer = layer
        self.eps = float(eps)
        self.batch_size = batch_size
        names = [lay.name for lay in network.logits_chain]
        start = 0 if layer is None else names.index(network.check_subject_layer(layer)) + 1
        self._below = network.logits_chain[:start]   # input -> subject layer (forward only)
        self._above = network.logits_chain[start:]   # subject layer -> logits (propagated through)
        for lay in self._above:
            if not isinstance(lay, PASS_THROUGH + LRP_LAYERS):
                raise LayerError(f"cannot propagate relevance through layer {lay.name!r} "
                                 f"({type(lay).__name__}): idcgen's LRP handles dense, convolutional, pooling, "
                                 "batch-normalisation, padding, reshaping and elementwise layers")
        self._fn = tf.function(self._pass, reduce_retracing=True)

    def _pass(self, x, target):
        a = x
        for layer in self._below:
            a = layer(a, training=False)
        subject = a
        inputs = []
        for layer in self._above[:-1]:
            inputs.append(a)
            a = layer(a, training=False)
        inputs.append(a)
        logits = _linear_call(self._above[-1], a)
        cls = tf.where(target >= 0, target, tf.argmax(logits, axis=1, output_type=tf.int32))
        relevance = logits * tf.one_hot(cls, tf.shape(logits)[1], dtype=logits.dtype)
        for layer, a_in in zip(reversed(self._above), reversed(inputs)):
            relevance = lrp_step(layer, a_in, relevance, self.eps)
        return relevance, subject, logits

    def raw(self, x: np.ndarray, target: np.ndarray | None = None):
        """Unaggregated relevance (same shape as the subject layer output or the input), activations, logits.

        ``target``: class per input to explain; ``None`` explains the predicted class.
        """
        t = np.full(len(x), -1, np.int32) if target is None else np.asarray(target, np.int32)
        if len(t) != len(x):
            raise InputError(f"got {len(t)} targets for {len(x)} inputs")
        return self._fn(tf.convert_to_tensor(x, tf.float32), tf.convert_to_tensor(t))

    def __call__(self, x: np.ndarray, target: np.ndarray | None = None, *, progress=None):
        """Per-neuron relevance (n, neurons), activations (n, neurons), logits (n, classes), batched.

        A convolutional neuron is a channel: relevance summed and activation averaged over positions.
        """
        rel, act, logits = [], [], []
        for start in range(0, len(x), self.batch_size):
            stop = start + self.batch_size
            r, a, z = self.raw(x[start:stop], None if target is None else target[start:stop])
            if len(r.shape) > 2:
                r = tf.reduce_sum(r, axis=list(range(1, len(r.shape) - 1)))
            rel.append(r.numpy())
            act.append(neuron_activations(a).numpy())
            logits.append(z.numpy())
            if progress is not None:
                progress.update(min(self.batch_size, len(x) - start))
        return np.concatenate(rel), np.concatenate(act), np.concatenate(logits)


def input_relevance(network: Network, x: np.ndarray, target: np.ndarray | None = None, *,
                    eps: float = 1e-7) -> np.ndarray:
    """Pixel-level relevance of the predicted (or ``target``) logit: same shape as ``x``."""
    cache = network.__dict__.setdefault("_input_relevance", {})
    if eps not in cache:  # one traced function per network and eps, reused across calls
        cache[eps] = Relevance(network, layer=None, eps=eps)
    rel = cache[eps]
    if len(x) == 0:
        return np.zeros_like(x)
    parts = [rel.raw(x[i:i + rel.batch_size], None if target is None else target[i:i + rel.batch_size])[0].numpy()
             for i in range(0, len(x), rel.batch_size)]
    return np.concatenate(parts)
