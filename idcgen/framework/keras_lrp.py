"""Layer-wise relevance propagation (LRP-epsilon) over any Keras functional graph, batched, by autodiff.

Relevance starts at the explained logit and flows back through the model's graph
(idcgen/framework/keras_graph.py) in reverse topological order; a tensor read by several layers (a residual
block's input) sums what each of them returns before it is propagated further. One `Rule` class per kind of
layer, registered for the layer kinds it explains with `register` (docs/design.md, "Relevance on graphs",
"How to add an LRP rule"):

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
- **normalisation** for ``LayerNormalization`` (also RMS-scaled), ``RMSNormalization``, ``GroupNormalization``
  and ``UnitNormalization``: the epsilon rule on the layer with its normalising factor (1/std, 1/rms,
  1/norm) held constant; the centring stays, being linear (CP-LRP, Ali et al. 2022; AttnLRP, Achtibat et
  al. 2024).
- **attention** for ``MultiHeadAttention``: "cp" (default) holds the softmax attention weights constant, so
  relevance flows along the value path only (CP-LRP); "attnlrp" also sends relevance through the softmax
  and the query-key product (AttnLRP). Chosen per `Relevance` (``attention=``) or by ``ATTENTION_RULE``.

Batch normalisation right after a linear layer (conv -> BN, as in ResNets and MobileNets) is folded into
it: the pair is one affine map, explained at once. Mathematically this equals treating the BN as a layer
of its own, except where the linear layer's output is near zero and the BN's shift moves it away; there
the separate division by that small output loses or inflates relevance, the folded map does not.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import tensorflow as tf

from ..errors import InputError, LayerError
from .common import BatchedRelevance, rule_label_notes
from .keras_graph import TRACE_LOCK, AnyBatch, neuron_activations

L = keras.layers

#: Layer kinds (class names, matched along the layer's class hierarchy) -> the rule explaining them, and
#: keras.ops calls recorded in a functional graph (``x + y``) -> theirs.
_LAYER_RULES: dict[str, "Rule"] = {}
_OP_RULES: dict[str, "Rule"] = {}
_LINEAR_WITH_KERNEL = (
    L.Dense,
    L.Conv1D,
    L.Conv2D,
    L.Conv3D,
    L.DepthwiseConv1D,
    L.DepthwiseConv2D,
    L.SeparableConv1D,
    L.SeparableConv2D,
)
_GATE_ACTIVATIONS = ("sigmoid", "hard_sigmoid", "hard_silu", "softmax")
#: The attention rules: "cp" (CP-LRP: attention weights held constant) and "attnlrp" (AttnLRP: relevance
#: also through the softmax and the query-key product). The default, unless a `Relevance` is given one;
#: $IDCGEN_ATTENTION_RULE sets it for a whole run (the CLI). Chosen by the faithfulness measurement in
#: docs/results.md, "Attention rules".
ATTENTION_RULES = ("cp", "attnlrp")
ATTENTION_RULE = os.environ.get("IDCGEN_ATTENTION_RULE", "cp")


class Rule:
    """How relevance goes back through one call of a layer: ``explain`` returns the relevance of each of
    the call's inputs (tensors shaped as ``inputs``) from the relevance ``relevance`` of its output.
    ``label`` names the rule in notes and in `idcgen layers`."""

    label = "rule"

    def explain(self, step, inputs: list, relevance, lrp: "Relevance") -> list:
        raise NotImplementedError


def register(*kinds: str, ops: tuple[str, ...] = ()):
    """Class decorator: its rule explains layers of these kinds (Keras class names; a subclass of a
    registered kind gets its rule unless registered itself) and the keras.ops calls named in ``ops``."""

    def add(cls):
        rule = cls()
        for name in kinds:
            _LAYER_RULES[name] = rule
        for name in ops:
            _OP_RULES[name] = rule
        return cls

    return add


def rule_of(layer) -> Rule | None:
    """The rule explaining ``layer``, or None for a layer relevance cannot be explained through."""
    if not isinstance(layer, L.Layer):
        return _OP_RULES.get(type(layer).__name__)
    for cls in type(layer).__mro__:
        if cls.__name__ in _LAYER_RULES:
            return _LAYER_RULES[cls.__name__]
    return None


def supported() -> str:
    """The layer kinds LRP explains, for error messages."""
    return ", ".join(sorted(set(_LAYER_RULES) - {"InputLayer"}))


#: activations through which passing relevance unchanged is LRP's own rule (piecewise linear, zero at zero);
#: any other (swish, GELU, sigmoid, tanh) is approximated that way, and the notes say so
_EXACT_ACTIVATIONS = ("linear", "relu", "relu6", "leaky_relu", "elu", "ReLU", "LeakyReLU", "ELU", "PReLU")


#: keras.ops activations recorded in a functional graph (``ops.gelu(x)``) -> their activation names
_OP_ACTIVATIONS = {
    "Relu": "relu",
    "Relu6": "relu6",
    "LeakyRelu": "leaky_relu",
    "Elu": "elu",
    "Gelu": "gelu",
    "Silu": "silu",
    "HardSilu": "hard_silu",
    "Mish": "mish",
    "Sigmoid": "sigmoid",
    "HardSigmoid": "hard_sigmoid",
    "Tanh": "tanh",
    "Softplus": "softplus",
}


def _activation(layer) -> str:
    """The name of the activation a layer applies ("linear" for none)."""
    if isinstance(layer, (L.ReLU, L.LeakyReLU, L.ELU, L.PReLU)):
        return type(layer).__name__
    if not isinstance(layer, L.Layer) and type(layer).__name__ in _OP_ACTIVATIONS:
        return _OP_ACTIVATIONS[type(layer).__name__]
    fn = getattr(layer, "activation", None)
    return "linear" if fn is None else getattr(fn, "__name__", str(fn))


def rule_label(layer, *, logits: bool = False, n_inputs: int = 2) -> str:
    """How relevance goes back through ``layer``, for `idcgen layers`: "epsilon", "routing", "pass-through",
    "gate", with "(silu passed through unchanged)" when an activation that is not ReLU-like is taken as
    the identity; "none" when LRP cannot explain the layer."""
    rule = rule_of(layer)
    if rule is None:
        return "none"
    act = "linear" if logits else _activation(layer)  # the logits layer is explained without its activation
    if isinstance(rule, Gate):  # one tensor input: a scaling by a constant, which keeps all the relevance
        return "gate (all relevance to the signal, none to the gate)" if n_inputs > 1 else "epsilon"
    if isinstance(rule, (PassThrough, Epsilon)) and act not in _EXACT_ACTIVATIONS:
        return f"{rule.label} ({act} passed through unchanged)"
    return rule.label


def rule_notes(steps, logits_step, attention: str | None = None) -> list[str]:
    """Notes for an analysis: the rule of each layer kind on the relevance path (``steps``), and a note per
    approximation (a smooth activation taken as the identity, a gate given no relevance), the attention
    rule (``attention``, default ``ATTENTION_RULE``) if an attention layer is on the path."""
    notes = rule_label_notes(
        (step.name, step.kind, rule_label(step.layer, logits=step is logits_step, n_inputs=len(step.inputs)))
        for step in steps
    )
    if any(isinstance(rule_of(s.layer), Normalisation) for s in steps):
        notes.append(
            "LRP through normalisation layers: the epsilon rule with the normalising statistics "
            "(1/std, 1/rms) held constant, the identity rule for the division (CP-LRP, AttnLRP)"
        )
    if any(len(s.output_shapes[0]) == 3 for s in steps):
        notes.append(
            "a neuron of a token layer (batch, tokens, dims) is one of its dims: its activation is the "
            "mean over tokens and its relevance the sum over tokens, as a channel's over positions"
        )
    if any(isinstance(rule_of(s.layer), Attention) for s in steps):
        rule = ATTENTION_RULE if attention is None else attention
        notes.append(
            f"LRP attention rule: {rule}: "
            + (
                "attention weights held constant, relevance along the value path only (CP-LRP, Ali et al. 2022)"
                if rule == "cp"
                else "relevance also through the softmax and the query-key product, uniform rule "
                "for the products (AttnLRP, Achtibat et al. 2024)"
            )
        )
    return notes


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
            return (
                producer is not None
                and getattr(getattr(producer.layer, "activation", None), "__name__", "") in _GATE_ACTIVATIONS
            )

        candidates = [i for i in candidates if not gated(i)] or candidates
    signal = candidates[0]
    return [tf.reshape(relevance, tf.shape(a)) if i == signal else tf.zeros_like(a) for i, a in enumerate(inputs)]


@register(
    "InputLayer",
    "Activation",
    "ReLU",
    "LeakyReLU",
    "ELU",
    "PReLU",
    "Dropout",
    "SpatialDropout1D",
    "SpatialDropout2D",
    "SpatialDropout3D",
    "GaussianNoise",
    "GaussianDropout",
    "AlphaDropout",
    "ActivityRegularization",
    ops=tuple(_OP_ACTIVATIONS),
)
class PassThrough(Rule):
    """Elementwise or identity at inference: relevance passes unchanged."""

    label = "pass-through"

    def explain(self, step, inputs, relevance, lrp):
        return [tf.reshape(relevance, tf.shape(inputs[0]))]


@register(
    "Flatten",
    "Reshape",
    "Permute",
    "Concatenate",
    "ZeroPadding1D",
    "ZeroPadding2D",
    "ZeroPadding3D",
    "Cropping1D",
    "Cropping2D",
    "Cropping3D",
    "UpSampling1D",
    "RepeatVector",
    ops=("Reshape", "Concatenate", "Transpose", "ExpandDims", "Squeeze"),
)
class Routing(Rule):
    """Layers that move values without arithmetic: relevance goes back along the same paths."""

    label = "routing"

    def explain(self, step, inputs, relevance, lrp):
        return routing_rule(lambda a: step.call(a)[0], inputs, relevance)


@register(
    "Dense",
    "Conv1D",
    "Conv2D",
    "Conv3D",
    "DepthwiseConv1D",
    "DepthwiseConv2D",
    "SeparableConv1D",
    "SeparableConv2D",
    "MaxPooling1D",
    "MaxPooling2D",
    "MaxPooling3D",
    "AveragePooling1D",
    "AveragePooling2D",
    "AveragePooling3D",
    "GlobalAveragePooling1D",
    "GlobalAveragePooling2D",
    "GlobalAveragePooling3D",
    "GlobalMaxPooling1D",
    "GlobalMaxPooling2D",
    "GlobalMaxPooling3D",
    "BatchNormalization",
    "Add",
    "Subtract",
    "Average",
    "Maximum",
    "Minimum",
    "Rescaling",
    "Normalization",
    "LayerScale",
    ops=("Add", "Subtract", "Mean"),
)
class Epsilon(Rule):
    """Affine in the inputs once the activation is taken off (or max-pooling): the epsilon rule."""

    label = "epsilon"

    def explain(self, step, inputs, relevance, lrp):
        return epsilon_rule(lambda a: step.call(a, linear=True)[0], inputs, relevance, lrp.eps)


@register("Multiply", ops=("Multiply",))  # the op: ``x * c`` (MobileNetV3's hard sigmoid) or ``x * y``
class Gate(Rule):
    """``Multiply``: all relevance to the signal, none to the gate (see `gate_rule`)."""

    label = "gate"

    def explain(self, step, inputs, relevance, lrp):
        return gate_rule(step, lrp.network.graph, inputs, relevance)


@register("UpSampling2D", "UpSampling3D")
class Upsampling(Rule):
    """Nearest upsampling only copies values (routing); bilinear interpolation is affine (epsilon)."""

    label = "routing or epsilon"

    def explain(self, step, inputs, relevance, lrp):
        nearest = getattr(step.layer, "interpolation", "nearest") == "nearest"
        return (Routing() if nearest else Epsilon()).explain(step, inputs, relevance, lrp)


def _axes(axis, rank: int) -> list[int]:
    return sorted(a % rank for a in ([axis] if isinstance(axis, int) else axis))


def _broadcast(weight, axes: list[int], shape) -> "tf.Tensor":
    """A per-feature weight (over ``axes``) shaped to broadcast against a tensor of ``shape``."""
    return tf.reshape(weight, [shape[a] if a in axes else 1 for a in range(len(shape))])


def held_normalisation(layer, x):
    """``layer(x)`` with its normalising factor (1/std, 1/rms, 1/norm) held constant (stop_gradient): a map
    linear in ``x`` but for the offset beta, with the same value as the layer's output. The centring
    ``x - mean(x)`` stays a function of ``x``: it is linear, and keeping it conserves relevance."""
    kind, rank = type(layer).__name__, len(x.shape)
    if kind == "UnitNormalization":
        axes = _axes(layer.axis, rank)
        return x * tf.stop_gradient(tf.math.rsqrt(tf.maximum(tf.reduce_sum(x * x, axes, keepdims=True), 1e-12)))
    if kind == "RMSNormalization":
        axes = _axes(layer.axis, rank)
        y = x * tf.stop_gradient(tf.math.rsqrt(tf.reduce_mean(x * x, axes, keepdims=True) + layer.epsilon))
        return y * tf.cast(layer.scale, x.dtype)  # the scale is shaped to broadcast over the last axes
    if kind == "GroupNormalization":
        shape, axis = tf.shape(x), layer.axis % rank
        grouped_shape = [shape[a] for a in range(rank)]
        grouped_shape[axis : axis + 1] = [layer.groups, x.shape[axis] // layer.groups]
        g = tf.reshape(x, grouped_shape)
        reduce = [a for a in range(1, rank + 1) if a != axis]  # all but the batch and the group axis
        mean, var = tf.nn.moments(g, reduce, keepdims=True)
        y = tf.reshape((g - mean) * tf.stop_gradient(tf.math.rsqrt(var + layer.epsilon)), shape)
        if layer.scale:
            y = y * _broadcast(layer.gamma, [axis], x.shape)
        return y + _broadcast(layer.beta, [axis], x.shape) if layer.center else y
    axes = _axes(layer.axis, rank)  # LayerNormalization
    mean, var = tf.nn.moments(x, axes, keepdims=True)
    inv = tf.stop_gradient(tf.math.rsqrt(var + layer.epsilon))
    if layer.rms_scaling:  # Keras' RMS scaling: x / std, not centred, no offset
        return x * inv * (_broadcast(layer.gamma, axes, x.shape) if layer.scale else 1.0)
    y = (x - mean) * inv
    if layer.scale:
        y = y * _broadcast(layer.gamma, axes, x.shape)
    return y + _broadcast(layer.beta, axes, x.shape) if layer.center else y


@register("LayerNormalization", "RMSNormalization", "GroupNormalization", "UnitNormalization")
class Normalisation(Rule):
    """The epsilon rule on the layer with its normalising statistics held constant (`held_normalisation`):
    the division by the standard deviation is a nonlinearity that the identity rule explains, as CP-LRP
    (Ali et al. 2022) and AttnLRP (Achtibat et al. 2024) do for LayerNorm; what is left is affine."""

    label = "normalisation"

    def explain(self, step, inputs, relevance, lrp):
        return epsilon_rule(lambda a: held_normalisation(step.layer, a[0]), inputs, relevance, lrp.eps)


class _Slot:
    """Stands for the step's i-th input tensor when reading which argument of a call it was."""

    def __init__(self, index: int):
        self.index = index


def attention_roles(step) -> dict[str, int]:
    """{"query", "value", "key"} -> index of the step input playing that part in a MultiHeadAttention call
    (key defaults to value); a LayerError for masks, gates or other arguments LRP does not explain."""
    node = step.node
    args, kwargs = node.arguments.fill_in({id(t): _Slot(i) for i, t in enumerate(node.input_tensors)})
    given = dict(zip(("query", "value", "key"), args), **kwargs)
    extra = [k for k, v in given.items() if k not in ("query", "value", "key", "training") and v not in (None, False)]
    if extra or getattr(step.layer, "_use_gate", False):
        raise LayerError(
            f"cannot propagate relevance through layer {step.name!r} (MultiHeadAttention): its "
            f"{', '.join(extra) or 'gate'} is not explained; only unmasked attention is"
        )
    roles = {k: given[k].index for k in ("query", "value") if isinstance(given.get(k), _Slot)}
    roles["key"] = given["key"].index if isinstance(given.get("key"), _Slot) else roles["value"]
    return roles


def attention_parts(layer, query, value, key):
    """The scaled query, the key and value projections and the attention weights A of a Keras
    MultiHeadAttention call, computed with its own sub-layers and equations (no dropout, no mask)."""
    q = layer._query_dense(query) * layer._inverse_sqrt_key_dim
    k = layer._key_dense(key)
    v = layer._value_dense(value)
    weights = layer._softmax(tf.einsum(layer._dot_product_equation, k, q))
    return q, k, v, weights


def _uniform_product(equation, a, b, relevance, eps):
    """AttnLRP's rule for a bilinear product ``einsum(equation, a, b)``: the epsilon rule over its sums, each
    product term's share then split evenly between its two factors (half of the epsilon rule's a*grad)."""
    ra, rb = epsilon_rule(lambda t: tf.einsum(equation, t[0], t[1]), [a, b], relevance, eps)
    return ra / 2, rb / 2


@register("MultiHeadAttention")
class Attention(Rule):
    """MultiHeadAttention: "cp" holds the attention weights constant, so the layer is linear in its value
    input and relevance goes along the value path only, by the epsilon rule at each of its linear steps
    (output projection, weighted sum of values, value projection; CP-LRP, Ali et al. 2022);
    "attnlrp" also explains the weights: the output product A.V and the query-key product by the uniform
    rule, the softmax by ``R_s = s * (R_A - A * sum R_A)`` (AttnLRP, Achtibat et al. 2024, Prop. 3.1)."""

    label = "attention"

    def explain(self, step, inputs, relevance, lrp):
        layer, roles = step.layer, attention_roles(step)
        # copies per role: in self-attention one tensor is query, key and value, and each part needs its own
        query, value, key = (tf.identity(inputs[roles[r]]) for r in ("query", "value", "key"))
        out = [tf.zeros_like(a) for a in inputs]
        q, k, v, weights = attention_parts(layer, query, value, key)
        o = tf.einsum(layer._combine_equation, weights, v)
        (r_o,) = epsilon_rule(lambda t: layer._output_dense(t[0]), [o], relevance, lrp.eps)
        if lrp.attention == "cp":  # the epsilon rule at each linear step, as for a chain of layers
            held = tf.stop_gradient(weights)
            (r_v,) = epsilon_rule(lambda t: tf.einsum(layer._combine_equation, held, t[0]), [v], r_o, lrp.eps)
            out[roles["value"]] += epsilon_rule(lambda t: layer._value_dense(t[0]), [value], r_v, lrp.eps)[0]
            return out
        r_weights, r_v = _uniform_product(layer._combine_equation, weights, v, r_o, lrp.eps)
        scores = tf.einsum(layer._dot_product_equation, k, q)
        axes = list(layer._softmax.axis) if isinstance(layer._softmax.axis, (list, tuple)) else [layer._softmax.axis]
        r_scores = scores * (r_weights - weights * tf.reduce_sum(r_weights, axes, keepdims=True))
        r_k, r_q = _uniform_product(layer._dot_product_equation, k, q, r_scores, lrp.eps)
        parts = {
            "value": epsilon_rule(lambda t: layer._value_dense(t[0]), [value], r_v, lrp.eps)[0],
            "query": epsilon_rule(
                lambda t: layer._query_dense(t[0]) * layer._inverse_sqrt_key_dim, [query], r_q, lrp.eps
            )[0],
            "key": epsilon_rule(lambda t: layer._key_dense(t[0]), [key], r_k, lrp.eps)[0],
        }
        for role, r in parts.items():
            out[roles[role]] += r
        return out


def per_neuron(relevance):
    """(n, ..., C) relevance -> (n, C): a convolutional neuron (channel) sums its positions."""
    if len(relevance.shape) > 2:
        return tf.reduce_sum(relevance, axis=list(range(1, len(relevance.shape) - 1)))
    return relevance


class Relevance(BatchedRelevance):
    """Relevance of a subject layer's neurons (or of the input pixels), from one logit per input.

    Parameters
    ----------
    network : KerasNetwork (idcgen/framework/keras_network.py)
    layer : str or None
        Subject layer name; ``None`` propagates down to the input pixels.
    eps : float, default 1e-7
        The epsilon of LRP-epsilon; ``eps -> 0`` is LRP-0 (activation x gradient on ReLU networks).
    attention : "cp", "attnlrp" or None
        The rule for MultiHeadAttention layers (see `Attention`); None: ``ATTENTION_RULE``.
    """

    def __init__(
        self, network, *, layer: str | None, eps: float = 1e-7, batch_size: int = 512, attention: str | None = None
    ):
        attention = ATTENTION_RULE if attention is None else attention
        if attention not in ATTENTION_RULES:
            raise InputError(f"the attention rule must be one of {', '.join(ATTENTION_RULES)}; got {attention!r}")
        self.attention = attention
        self.network = network
        self.layer = layer
        self.eps = float(eps)
        self.batch_size = batch_size
        graph = network.graph
        self.subject_key = graph.input_key if layer is None else network.key_of(network.check_subject_layer(layer))
        # the tensors relevance must reach: on a path from the subject to the logits
        self._needed = graph.descendants(self.subject_key) & graph.ancestors(network.logits_key)
        last = graph.steps.index(network.logits_step)
        self._steps = [
            s for s in graph.steps[: last + 1] if s.outputs[0] in self._needed and s.outputs[0] != self.subject_key
        ]
        for step in self._steps:
            if rule_of(step.layer) is None:
                if layer is None:  # to the pixels: no subject layer to move
                    raise LayerError(
                        f"cannot propagate relevance to the input through layer {step.name!r} "
                        f"({step.kind}): idcgen's LRP has no rule for {step.kind}"
                    )
                raise LayerError(
                    f"cannot propagate relevance through layer {step.name!r} ({step.kind}): idcgen's "
                    f"LRP explains {supported()}; choose a subject layer after it (see `idcgen layers`)"
                )
            if isinstance(rule_of(step.layer), Attention):
                attention_roles(step)  # refuses masks and gates now rather than at the first batch
            if len(step.outputs) != 1:
                raise LayerError(
                    f"cannot propagate relevance through layer {step.name!r} ({step.kind}): it has "
                    f"{len(step.outputs)} outputs"
                )
        self.steps = self._steps
        self._folded = self._batchnorm_folds()
        self._last = last
        self._fn = AnyBatch(self._pass)

    def _batchnorm_folds(self) -> dict:
        """BN step name -> the linear step it folds into: a conv/dense without activation whose only reader
        is this BN, and whose output is not the subject layer's."""
        graph, folds = self.network.graph, {}
        for step in self._steps:
            if not isinstance(step.layer, L.BatchNormalization) or len(step.inputs) != 1:
                continue
            producer = graph.producer_of(step.inputs[0])
            if (
                producer is not None
                and isinstance(producer.layer, _LINEAR_WITH_KERNEL)
                and getattr(producer.layer.activation, "__name__", "") == "linear"
                and len(graph.consumers[producer.outputs[0]]) == 1
                and producer.outputs[0] != self.subject_key
                and producer in self._steps
            ):
                folds[step.name] = producer
        return folds

    def _pass(self, x, target):
        network, graph = self.network, self.network.graph
        with TRACE_LOCK:
            values = graph.run(
                x, until=self._last, linear=network.logits_step if network.softmax_in_last_layer else None
            )
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
        if step.name in self._folded:  # conv -> BN as one affine map from the conv's input
            linear = self._folded[step.name]
            skip.add(linear.name)
            a = [values[k] for k in linear.inputs]
            return linear, epsilon_rule(lambda t: step.call(linear.call(t))[0], a, r, self.eps)
        return step, rule_of(step.layer).explain(step, [values[k] for k in step.inputs], r, self)

    def raw(self, x: np.ndarray, target: np.ndarray | None = None):
        """Unaggregated relevance (same shape as the subject layer output or the input), activations, logits.

        ``target``: class per input to explain; ``None`` explains the predicted class.
        """
        t = np.full(len(x), -1, np.int32) if target is None else np.asarray(target, np.int32)
        if len(t) != len(x):
            raise InputError(f"got {len(t)} targets for {len(x)} inputs")
        return self._fn(tf.convert_to_tensor(x, tf.float32), tf.convert_to_tensor(t))

    def batch(self, x: np.ndarray, target: np.ndarray | None = None, *, activations: bool = True):
        """One batch as numpy: per-neuron relevance (n, neurons), activations (n, neurons) or None, logits."""
        r, a, z = self.raw(x, target)
        return per_neuron(r).numpy(), neuron_activations(a).numpy() if activations else None, z.numpy()
