"""Layer-wise relevance propagation (LRP-epsilon) over any functional graph, batched, by autodiff.

Relevance starts at the explained logit and flows back through the model's graph (idcgen/graph.py) in
reverse topological order; a tensor read by several layers (a residual block's input) sums what each of
them returns before it is propagated further. One rule per kind of layer (docs/design.md, "Relevance
on graphs"):

- **epsilon** for every layer whose pre-activation is linear (affine) in its inputs: Dense, every
  convolution (depthwise and separable too), pooling (max pooling becomes winner-take-all), batch
  normalisation, ``Add``/``Subtract``/``Average``, ``Rescaling``/``Normalization``:
  ``R_in = a * d/da sum(z * stop_gradient(R / (z + eps*sign(z))))``, one gradient per input, so ``Add``
  splits relevance in proportion to each input's contribution ``a_i / (z + eps) * R``.
- **routing** for layers that only move values (reshapes, ``Concatenate``, padding, cropping, nearest
  upsampling): the relevance goes back along the same paths, ``R_in = J^T R``, so ``Concatenate``
  splits it exactly by slices and padding takes none.
- **pass-through** for elementwise activations and layers that are the identity at inference.
- **gate** for ``Multiply``: the signal gets all of the relevance, the gate none (as LRP for LSTMs does).

Batch normalisation right after a linear layer (conv -> BN, as in ResNets and MobileNets) is folded into
it: the pair is one affine map, explained at once. Mathematically this equals treating the BN as a layer
of its own, except where the linear layer's output is near zero and the BN's shift moves it away; there
the separate division by that small output loses or inflates relevance, the folded map does not.
"""

from __future__ import annotations

import numpy as np

from .errors import InputError, LayerError
from .graph import TRACE_LOCK
from .models import Network, keras, neuron_activations, tf

L = keras.layers

#: Elementwise or identity at inference: relevance passes unchanged.
PASS_THROUGH = (L.InputLayer, L.Activation, L.ReLU, L.LeakyReLU, L.ELU, L.PReLU, L.Dropout, L.SpatialDropout1D,
                L.SpatialDropout2D, L.SpatialDropout3D, L.GaussianNoise, L.GaussianDropout, L.AlphaDropout,
                L.ActivityRegularization)
#: Move values without arithmetic: relevance goes back along the same paths.
ROUTING = (L.Flatten, L.Reshape, L.Permute, L.Concatenate, L.ZeroPadding1D, L.ZeroPadding2D, L.ZeroPadding3D,
           L.Cropping1D, L.Cropping2D, L.Cropping3D, L.UpSampling1D, L.RepeatVector)
#: Affine in their inputs once the activation is taken off (or max-pooling): the epsilon rule.
EPSILON = (L.Dense, L.Conv1D, L.Conv2D, L.Conv3D, L.DepthwiseConv1D, L.DepthwiseConv2D, L.SeparableConv1D,
           L.SeparableConv2D, L.MaxPooling1D, L.MaxPooling2D, L.MaxPooling3D, L.AveragePooling1D,
           L.AveragePooling2D, L.AveragePooling3D, L.GlobalAveragePooling1D, L.GlobalAveragePooling2D,
           L.GlobalAveragePooling3D, L.GlobalMaxPooling1D, L.GlobalMaxPooling2D, L.GlobalMaxPooling3D,
           L.BatchNormalization, L.Add, L.Subtract, L.Average, L.Maximum, L.Minimum, L.Rescaling,
           L.Normalization)
GATE = (L.Multiply,)
_LINEAR_WITH_KERNEL = (L.Dense, L.Conv1D, L.Conv2D, L.Conv3D, L.DepthwiseConv1D, L.DepthwiseConv2D,
                       L.SeparableConv1D, L.SeparableConv2D)
#: keras.ops calls recorded in a functional graph (``x + y``): the same rules as their layer forms.
_OP_RULES = {"Add": "epsilon", "Subtract": "epsilon", "Reshape": "routing", "Concatenate": "routing"}
_GATE_ACTIVATIONS = ("sigmoid", "hard_sigmoid", "hard_silu", "softmax")
SUPPORTED = ", ".join(sorted(({c.__name__ for c in PASS_THROUGH + ROUTING + EPSILON + GATE}
                              | {"UpSampling2D", "UpSampling3D"}) - {"InputLayer"}))


def rule_of(layer) -> str | None:
    """'pass', 'routing', 'epsilon', 'gate', or None for a layer relevance cannot be explained through."""
    if isinstance(layer, (L.UpSampling2D, L.UpSampling3D)):
        return "routing" if getattr(layer, "interpolation", "nearest") == "nearest" else "epsilon"
    for rule, kinds in (("pass", PASS_THROUGH), ("routing", ROUTING), ("epsilon", EPSILON), ("gate", GATE)):
        if isinstance(layer, kinds):
            return rule
    if not isinstance(layer, L.Layer):
        return _OP_RULES.get(type(layer).__name__)
    return None


def _stabilise(z, eps):
    return z + eps * tf.where(z >= 0, 1.0, -1.0)


def epsilon_rule(call, inputs, relevance, eps):
    """``R_i = a_i * d/da_i sum(z * stop(R / (z + eps*sign z)))`` for ``z = call(inputs)``."""
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        z = call(inputs)
        total = tf.reduce_sum(z * tf.stop_gradient(relevance / _stabilise(z, eps)))
    grads = tape.gradient(total, inputs)
    return [a * g if g is not None else tf.zeros_like(a) for a, g in zip(inputs, grads)]


def routing_rule(call, inputs, relevance):
    """``R_in = J^T R``: each value's relevance goes back to where the value came from."""
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        z = call(inputs)
    grads = tape.gradient(z, inputs, output_gradients=relevance)
    return [g if g is not None else tf.zeros_like(a) for a, g in zip(inputs, grads)]


def gate_rule(step, graph, inputs, relevance):
    """``Multiply``: all relevance to the signal, none to the gate. The gate is the input broadcast over
    the other (fewer values, as a squeeze-excitation scale), else the one a sigmoid-like activation made;
    failing both, the first input is taken as the signal."""
    sizes = [int(np.prod([d for d in a.shape[1:] if d is not None])) for a in inputs]
    candidates = [i for i, s in enumerate(sizes) if s == max(sizes)]
    if len(candidates) > 1:
        def gated(i):
            producer = graph.producer_of(step.inputs[i])
            return producer is not None and getattr(getattr(producer.layer, "activation", None), "__name__",
                                                    "") in _GATE_ACTIVATIONS
        candidates = [i for i in candidates if not gated(i)] or candidates
    signal = candidates[0]
    return [tf.reshape(relevance, tf.shape(a)) if i == signal else tf.zeros_like(a) for i, a in enumerate(inputs)]


def per_neuron(relevance):
    """(n, ..., C) relevance -> (n, C): a convolutional neuron (channel) sums its positions."""
    if len(relevance.shape) > 2:
        return tf.reduce_sum(relevance, axis=list(range(1, len(relevance.shape) - 1)))
    return relevance


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
        graph = network.graph
        self.subject_key = graph.input_key if layer is None else network.key_of(network.check_subject_layer(layer))
        # the tensors relevance must reach: on a path from the subject to the logits
        self._needed = graph.descendants(self.subject_key) & graph.ancestors(network.logits_key)
        last = graph.steps.index(network.logits_step)
        self._steps = [s for s in graph.steps[:last + 1] if s.outputs[0] in self._needed
                       and s.outputs[0] != self.subject_key]
        for step in self._steps:
            if rule_of(step.layer) is None:
                raise LayerError(f"cannot propagate relevance through layer {step.name!r} ({step.kind}): idcgen's "
                                 f"LRP explains {SUPPORTED}; choose a subject layer after it (see `idcgen layers`)")
            if len(step.outputs) != 1:
                raise LayerError(f"cannot propagate relevance through layer {step.name!r} ({step.kind}): it has "
                                 f"{len(step.outputs)} outputs")
        self._folded = self._batchnorm_folds()
        self._last = last
        self._fn = tf.function(self._pass, reduce_retracing=True)

    def _batchnorm_folds(self) -> dict:
        """BN step name -> the linear step it folds into: a conv/dense without activation whose only reader
        is this BN, and whose output is not the subject layer's."""
        graph, folds = self.network.graph, {}
        for step in self._steps:
            if not isinstance(step.layer, L.BatchNormalization) or len(step.inputs) != 1:
                continue
            producer = graph.producer_of(step.inputs[0])
            if (producer is not None and isinstance(producer.layer, _LINEAR_WITH_KERNEL)
                    and getattr(producer.layer.activation, "__name__", "") == "linear"
                    and len(graph.consumers[producer.outputs[0]]) == 1
                    and producer.outputs[0] != self.subject_key and producer in self._steps):
                folds[step.name] = producer
        return folds

    def _pass(self, x, target):
        network, graph = self.network, self.network.graph
        with TRACE_LOCK:
            values = graph.run(x, until=self._last,
                               linear=network.logits_step if network.softmax_in_last_layer else None)
            logits = values[network.logits_key]
            if network.task == "regression":  # the one output unit's pre-activation, whatever its sign
                relevance = {network.logits_key: logits}
            else:
                cls = tf.where(target >= 0, target, tf.argmax(logits, axis=1, output_type=tf.int32))
                relevance = {network.logits_key: logits * tf.one_hot(cls, tf.shape(logits)[1], dtype=logits.dtype)}
            skip = set()
            for step in reversed(self._steps):
                if step.name in skip:
                    continue
                r = relevance.pop(step.outputs[0])
                step, returned = self._explain(step, values, r, skip)
                for key, part in zip(step.inputs, returned):
                    if key in self._needed:
                        relevance[key] = relevance[key] + part if key in relevance else part
            return relevance[self.subject_key], values[self.subject_key], logits

    def _explain(self, step, values, r, skip):
        """(the step whose inputs receive relevance, their relevance) for the relevance ``r`` of ``step``."""
        inputs = [values[k] for k in step.inputs]
        rule = rule_of(step.layer)
        if rule == "pass":
            return step, [tf.reshape(r, tf.shape(inputs[0]))]
        if rule == "gate":
            return step, gate_rule(step, self.network.graph, inputs, r)
        if rule == "routing":
            return step, routing_rule(lambda a: step.call(a)[0], inputs, r)
        if step.name in self._folded:  # conv -> BN as one affine map from the conv's input
            linear = self._folded[step.name]
            skip.add(linear.name)
            a = [values[k] for k in linear.inputs]
            return linear, epsilon_rule(lambda t: step.call(linear.call(t))[0], a, r, self.eps)
        return step, epsilon_rule(lambda a: step.call(a, linear=True)[0], inputs, r, self.eps)

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
            rel.append(per_neuron(r).numpy())
            act.append(neuron_activations(a).numpy())
            logits.append(z.numpy())
            if progress is not None:
                progress.update(min(self.batch_size, len(x) - start))
        return np.concatenate(rel), np.concatenate(act), np.concatenate(logits)


def batch_size_for(network: Network, budget_bytes: int = 256 * 2**20, largest: int = 512) -> int:
    """Inputs per relevance batch: the forward values and their gradients (about three floats per value of
    every tensor) within ``budget_bytes``, so that a ResNet's batch does not take gigabytes; 16 .. largest."""
    floats = sum(int(np.prod([d or 1 for d in shape[1:]])) for s in network.graph.steps for shape in s.output_shapes)
    return int(np.clip(budget_bytes // max(12 * floats, 1), 16, largest))


def batch_totals(rel: Relevance, x: np.ndarray, target=None, *, labels=None, keep_activations=False,
                 progress=None):
    """The relevance pass, one batch of ``rel.batch_size`` inputs at a time: yields per batch
    ``(signed_sum, abs_sum, n_used, predictions, activations or None)`` (see :func:`relevance_totals`).

    The map step of an analysis: a Ray worker runs it on its shard, and :func:`sum_totals` reduces the
    batches of all shards in input order, so the sums are added as in one process (docs/design.md,
    "Scale-out on Ray")."""
    for start in range(0, len(x), rel.batch_size):
        stop = start + rel.batch_size
        r, a, z = rel.raw(x[start:stop], None if target is None else target[start:stop])
        r, pred = per_neuron(r).numpy().astype(np.float64), z.numpy().argmax(axis=1)
        used = slice(None) if labels is None else pred == labels[start:stop]
        r = r[used]
        yield (r.sum(axis=0), np.abs(r).sum(axis=0), len(r), pred,
               neuron_activations(a).numpy()[used] if keep_activations else None)
        if progress is not None:
            progress.update(len(pred))


def sum_totals(batches, keep_activations=False):
    """Reduce :func:`batch_totals`' batches, in input order, to ``relevance_totals``' result."""
    signed = absolute = None
    n_used, predictions, activations = 0, [], []
    for batch_signed, batch_abs, n, pred, acts in batches:
        signed = batch_signed if signed is None else signed + batch_signed
        absolute = batch_abs if absolute is None else absolute + batch_abs
        n_used += n
        predictions.append(pred)
        if keep_activations:
            activations.append(acts)
    return (signed, absolute, n_used, np.concatenate(predictions),
            np.concatenate(activations) if keep_activations else None)


def relevance_totals(rel: Relevance, x: np.ndarray, target=None, *, labels=None, keep_activations=False,
                     progress=None):
    """One streamed relevance pass: per-neuron totals, never the (inputs x neurons) relevance matrix.

    Returns ``(signed_sum, abs_sum, n_used, predictions, activations)``: sums over the inputs used (all, or
    with ``labels`` given only those classified correctly), every input's predicted class, and, with
    ``keep_activations``, the subject layer's neuron activations of the inputs used (else None).
    """
    return sum_totals(batch_totals(rel, x, target, labels=labels, keep_activations=keep_activations,
                                   progress=progress), keep_activations)


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
