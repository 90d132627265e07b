"""LRP-epsilon on a PyTorch model's exported graph, with the rules of the Keras side (keras_lrp.py), written
as one modified gradient pass.

For every rule idcgen uses, the relevance of a tensor ``t`` on the path to the logits is ``t * g_t`` for a
*modified gradient* ``g`` (docs/design.md, "PyTorch"): starting from ``g = onehot`` at the logits,

- **epsilon** (an operation affine in its inputs: convolution, linear, batch norm, pooling, add/sub, a
  product with a constant): ``R_in = a * J^T (R / (z + eps sign z))`` is ``a * J^T (g z / (z + eps sign z))``:
  the gradient is scaled by ``z / (z + eps sign z)`` at the operation's output, then passes as usual;
- **routing** (reshapes, permutes, concatenation, padding, slicing): ``R_in = J^T R`` is the plain gradient,
  since each output value is one input value;
- **pass-through** (elementwise activations, dropout at inference): ``R_in = R_out``, i.e. the gradient
  times ``out / in``; for ReLU and leaky ReLU that is the plain gradient;
- **gate** (the product of two activations): the signal takes all of the relevance, the gate none: the gate
  is detached; likewise the divisor of a quotient of two (a normalisation written by hand, ``(x - u) / std``:
  its normalising factor held constant, as CP-LRP's layer norm rule).

As on the Keras side, each rule is one `Rule` class, registered with `register` for the ATen operations it
explains (docs/design.md, "How to add an LRP rule"); an operation with no registered rule has none, and
relevance cannot pass it.

In-place operations (``relu_``, ``out += identity``) take the rules of their out-of-place forms: the graph is
functionalised first (torch_graph.functional).

Batch norm right after a convolution or linear layer whose only reader it is (and which is not the subject
layer) is folded into it, as on the Keras side: one scaling at the batch norm's output, none at the
convolution's. So a Keras model and its PyTorch twin get the same relevance (tests/test_torch_twins.py).
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import InputError, LayerError
from .common import BatchedRelevance
from .torch_graph import PREPROCESS, Layer, neuron_values, op_name

_WEIGHTED = {
    "conv1d",
    "conv2d",
    "conv3d",
    "convolution",
    "_convolution",
    "linear",
    "addmm",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
}
EPSILON = _WEIGHTED | {
    "batch_norm",
    "_native_batch_norm_legit_no_training",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "max_pool2d_with_indices",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "adaptive_max_pool1d",
    "adaptive_max_pool2d",
    "mean",
    "sum",
    "add",
    "sub",
    "rsub",
    "upsample_bilinear2d",
}
ROUTING = {
    "view",
    "reshape",
    "_unsafe_view",
    "flatten",
    "permute",
    "transpose",
    "t",
    "contiguous",
    "clone",
    "squeeze",
    "unsqueeze",
    "cat",
    "concat",
    "pad",
    "constant_pad_nd",
    "slice",
    "select",
    "narrow",
    "split",
    "chunk",
    "upsample_nearest1d",
    "upsample_nearest2d",
    "upsample_nearest3d",
    "pixel_shuffle",
    "getitem",
    "expand",
    "split_with_sizes",
    "unflatten",
    "alias",
    "_to_copy",
    "to",
    "type_as",
    "roll",
    "gather",
    "index_select",
    "index",
    "take_along_dim",
}
#: elementwise: relevance passes unchanged; the plain gradient already does so for these
EXACT_ACTIVATIONS = {"relu", "leaky_relu", "dropout", "feature_dropout", "alpha_dropout", "native_dropout"}
#: normalisations explained through their linear part, the normalising factor held constant (CP-LRP)
NORMALISATION = {"layer_norm", "rms_norm"}
#: attention: the softmax weights held constant, relevance along the value path (CP-LRP)
ATTENTION = {"scaled_dot_product_attention"}
_WEIGHTS = {"softmax", "_softmax"}
PASS_THROUGH = EXACT_ACTIVATIONS | {
    "relu6",
    "hardtanh",
    "elu",
    "selu",
    "celu",
    "gelu",
    "silu",
    "hardswish",
    "mish",
    "sigmoid",
    "tanh",
    "softplus",
    "hardsigmoid",
    "prelu",
    "_prelu_kernel",
    "clamp",
    "clamp_min",
    "clamp_max",
}


class _EpsilonScale(torch.autograd.Function):
    """Identity forward; backward multiplies the gradient by ``z / (z + eps sign z)``."""

    @staticmethod
    def forward(ctx, z, eps):
        ctx.save_for_backward(z)
        ctx.eps = eps
        return z.view_as(z)

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        return grad * z / (z + ctx.eps * torch.where(z >= 0, 1.0, -1.0)), None


class _PassThrough(torch.autograd.Function):
    """Forward gives the activation's output; backward passes ``grad * out / in``: relevance unchanged."""

    @staticmethod
    def forward(ctx, a, out):
        ctx.save_for_backward(a, out)
        return out.clone()

    @staticmethod
    def backward(ctx, grad):
        # exactly out / in (no epsilon: that would shrink relevance where |in| is small, which the identity
        # rule does not); where in = 0 the input's relevance, in x gradient, is 0 whatever is passed: pass 0
        a, out = ctx.saved_tensors
        zero = a == 0
        return grad * torch.where(zero, 0.0, out / torch.where(zero, 1.0, a)), None


def _normalised(node, args):
    """Layer or RMS normalisation with its normalising factor (1/std, 1/rms) detached: linear in the input."""
    x, shape = args[0], args[1]
    weight = args[2] if len(args) > 2 else None
    bias = args[3] if len(args) > 3 else None
    eps = args[4] if len(args) > 4 else (1e-5 if op_name(node) == "layer_norm" else None)
    dims = tuple(range(-len(shape), 0))
    if op_name(node) == "layer_norm":
        centred = x - x.mean(dim=dims, keepdim=True)  # centring is linear in x: it stays in the graph
        y = centred * torch.rsqrt(centred.pow(2).mean(dim=dims, keepdim=True) + eps).detach()
    else:
        eps = torch.finfo(x.dtype).eps if eps is None else eps
        y = x * torch.rsqrt(x.pow(2).mean(dim=dims, keepdim=True) + eps).detach()
    if weight is not None:
        y = y * weight
    return y + bias if bias is not None else y


def _attended(node, args, graph):
    """The attention's output with its weights detached: linear in the values."""
    if op_name(node) in ("matmul", "bmm"):
        parts = [a.detach() if _attention_weights(n, graph) else a for a, n in zip(args[:2], node.args[:2])]
        return node.target(*parts)
    q, k, v = args[:3]
    mask = args[3] if len(args) > 3 else node.kwargs.get("attn_mask")
    causal = args[5] if len(args) > 5 else node.kwargs.get("is_causal", False)
    scale = node.kwargs.get("scale") or (args[6] if len(args) > 6 else None) or q.shape[-1] ** -0.5
    scores = q @ k.transpose(-2, -1) * scale
    if causal:
        n, m = scores.shape[-2:]
        above = torch.ones(n, m, dtype=torch.bool, device=scores.device).triu(1)  # on the scores' device (a GPU's)
        scores = scores.masked_fill(above, float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    return torch.softmax(scores, dim=-1).detach() @ v


def _is_constant(arg, graph) -> bool:
    """A number, or a tensor that does not depend on the input (a weight, a buffer, a constant)."""
    return not isinstance(arg, torch.fx.Node) or arg in graph.constant


def _attention_weights(arg, graph) -> bool:
    """Whether fx node ``arg`` holds attention weights: a softmax, seen through reshapes and dropout."""
    while isinstance(arg, torch.fx.Node):
        op = op_name(arg)
        if op in _WEIGHTS:
            return True
        if arg.op != "call_function" or not (op in ROUTING or op in EXACT_ACTIVATIONS - {"relu", "leaky_relu"}):
            return False
        arg = arg.args[0] if arg.args else None
    return False


def gate_of(layer: Layer) -> int:
    """Which argument of a product of two activations is the gate: the one broadcast over the other
    (fewer values, as a squeeze-excitation scale), else one a sigmoid-like activation made."""
    args = layer.node.args[:2]
    if layer.op == "div":
        return 1
    floats = [a.meta["val"].is_floating_point() for a in args]
    if floats[0] != floats[1]:  # a boolean mask (a where written as a product)
        return floats.index(False)
    sizes = [int(np.prod(a.meta["val"].shape[1:])) for a in args]
    if sizes[0] != sizes[1]:
        return int(np.argmin(sizes))
    gates = [op_name(a) in ("sigmoid", "hardsigmoid", "softmax") for a in args]
    return 1 if gates[1] or not gates[0] else 0


def _sources(args, graph) -> list:
    found = []
    for arg in args:
        while isinstance(arg, torch.fx.Node) and arg not in graph.by_node and arg.all_input_nodes:
            arg = arg.all_input_nodes[0]
        if arg in graph.by_node:
            found.append(arg)
    return found


#: ATen operations (``op_name``) -> the rule explaining them
_RULES: dict[str, "Rule"] = {}


class Rule:
    """How relevance goes back through one ATen operation. The relevance pass runs the model forward with
    ``apply``'s value in place of each operation's: the same value, with the backward pass through it changed
    so that a tensor's relevance is the tensor times the gradient arriving there (module docstring).
    ``label`` names the rule in notes and in `idcgen layers`."""

    label = "rule"

    def resolve(self, layer: Layer, graph) -> "Rule | None":
        """The rule for this call of the operation: itself, unless its arguments decide (a product)."""
        return self

    def label_of(self, layer: Layer) -> str:
        return self.label

    def inputs(self, layer: Layer, graph) -> list:
        """The input layers relevance flows to from ``layer``."""
        return layer.inputs

    def apply(self, node, args, value, lrp: "Relevance"):
        """The operation's value in the relevance pass (``args``: its arguments' values)."""
        return value


def register(*ops: str):
    """Class decorator: its rule explains the ATen operations ``ops`` (as ``op_name`` names them)."""

    def add(cls):
        rule = cls()
        for op in ops:
            _RULES[op] = rule
        return cls

    return add


def registered() -> dict[str, Rule]:
    """Every operation with a rule, and its rule."""
    return dict(_RULES)


@register(*EPSILON)
class Epsilon(Rule):
    """Affine in the inputs: the gradient scaled by ``z / (z + eps sign z)`` at the output (none at a
    convolution folded into the batch norm reading it)."""

    label = "epsilon"

    def apply(self, node, args, value, lrp):
        return value if node in lrp._folded else _EpsilonScale.apply(value, lrp.eps)


@register(*ROUTING)
class Routing(Rule):
    """Moves values without arithmetic: the plain gradient takes relevance back along the same paths."""

    label = "routing"


@register(*PASS_THROUGH)
class PassThrough(Rule):
    """Elementwise or identity at inference: relevance unchanged, the gradient times ``out / in`` (for ReLU and
    leaky ReLU the plain gradient already is)."""

    label = "pass-through"

    def label_of(self, layer):
        return self.label if layer.op in EXACT_ACTIVATIONS else f"{self.label} ({layer.op} passed through unchanged)"

    def apply(self, node, args, value, lrp):
        return value if op_name(node) in EXACT_ACTIVATIONS else _PassThrough.apply(args[0], value.detach())


class Gate(Rule):
    """A product of two activations: the signal takes all of the relevance, the gate (`gate_of`) none; a
    quotient of two: the divisor held constant (a hand-written normalisation's std)."""

    label = "gate"

    def label_of(self, layer):
        if layer.op == "div":
            return "gate (the divisor held constant, as a normalising factor: all relevance to the dividend)"
        return "gate (all relevance to the signal, none to the gate)"

    def inputs(self, layer, graph):
        return [graph.by_node[a] for a in _sources([layer.node.args[1 - gate_of(layer)]], graph)]

    def apply(self, node, args, value, lrp):
        gate = lrp._gates[node]
        parts = [a.detach() if i == gate else a for i, a in enumerate(args[:2])]
        return node.target(*parts, *args[2:])


@register("mul", "div")
class Product(Rule):
    """A product or quotient: by a constant or a learned vector (layer scale) it is affine (`Epsilon`); of two
    activations, a `Gate`."""

    label = "epsilon or gate"

    def resolve(self, layer, graph):
        return Epsilon() if any(_is_constant(a, graph) for a in layer.node.args[:2]) else Gate()


@register(*NORMALISATION)
class Normalisation(Rule):
    """Layer or RMS normalisation: the epsilon rule with the normalising factor held constant (CP-LRP)."""

    label = "epsilon (normalising factor held constant, CP-LRP)"

    def apply(self, node, args, value, lrp):
        return _EpsilonScale.apply(_normalised(node, args), lrp.eps)


@register(*ATTENTION)
class Attention(Rule):
    """Attention: the epsilon rule with the softmax weights held constant, relevance along the values only
    (CP-LRP); fused (``scaled_dot_product_attention``) or a product of weights and values (`WeightedValues`)."""

    label = "epsilon (attention weights held constant: relevance along the values, CP-LRP)"

    def inputs(self, layer, graph):
        if layer.op in ATTENTION:
            return [graph.by_node[a] for a in _sources([layer.node.args[2]], graph)]
        values = [a for a in layer.node.args[:2] if not _attention_weights(a, graph)]
        return [graph.by_node[a] for a in _sources(values, graph)]

    def apply(self, node, args, value, lrp):
        return _EpsilonScale.apply(_attended(node, args, lrp.network.graph), lrp.eps)


@register("matmul", "bmm")
class WeightedValues(Rule):
    """A matrix product: attention (`Attention`) when one factor is softmax weights; else no rule."""

    label = "attention or none"

    def resolve(self, layer, graph):
        return Attention() if any(_attention_weights(a, graph) for a in layer.node.args[:2]) else None


@register(*_WEIGHTS)
class Constant(Rule):
    """Attention weights (a softmax inside the model): held constant, no relevance flows into them."""

    label = "constant (attention weights: no relevance)"

    def inputs(self, layer, graph):
        return []

    def apply(self, node, args, value, lrp):
        return value.detach()


def rule_of(layer: Layer, graph) -> Rule | None:
    """The rule explaining ``layer`` (an `Epsilon`, `Routing`, `PassThrough`, `Gate`, `Normalisation`,
    `Attention` or `Constant`), or None for an operation relevance cannot be explained through."""
    rule = _RULES.get(layer.op)
    return None if rule is None else rule.resolve(layer, graph)


def relevance_inputs(layer: Layer, graph) -> list:
    """The input layers relevance flows to from ``layer``: none from attention weights (a softmax inside
    the model), only the value from attention, only the values from a product of weights and values, only
    the signal from a gated product (the gate gets none)."""
    rule = rule_of(layer, graph)
    return layer.inputs if rule is None else rule.inputs(layer, graph)


def relevant_ancestors(layer: Layer, graph) -> set:
    """The layers relevance from ``layer`` reaches (itself included)."""
    seen, todo = set(), [layer]
    while todo:
        cur = todo.pop()
        if cur not in seen:
            seen.add(cur)
            todo.extend(relevance_inputs(cur, graph))
    return seen


def rule_label(layer: Layer, graph) -> str:
    rule = rule_of(layer, graph)
    return "none" if rule is None else rule.label_of(layer)


class Relevance(BatchedRelevance):
    """Relevance of a subject layer's neurons (or of the input pixels) from one logit per input, on a
    TorchNetwork (idcgen/framework/torch_network.py); the interface of the Keras side's `Relevance`."""

    def __init__(self, network, *, layer: str | None, eps: float = 1e-7, batch_size: int = 512):
        self.network = network
        self.layer = layer
        self.eps = float(eps)
        self.batch_size = batch_size
        graph = network.graph
        self.subject = None if layer is None else graph.layer(network.check_subject_layer(layer))
        reached = relevant_ancestors(network.logits_layer_, graph)
        if self.subject is not None and self.subject not in reached:
            raise LayerError(
                f"relevance does not reach layer {self.subject.name!r}: it feeds only attention weights "
                "or gates, which the attention and gate rules hold constant (choose a layer on the "
                "value or signal path: see `idcgen layers`)"
            )
        needed = graph.descendants(self.subject) & reached
        self.steps = [s for s in graph.layers if s in needed and s is not self.subject]
        for step in self.steps:
            if rule_of(step, graph) is None:
                where = " to the input" if layer is None else ""
                raise LayerError(
                    f"cannot propagate relevance{where} through layer {step.name!r} ({step.op}): "
                    f"idcgen's LRP has no rule for {step.op}"
                    + ("" if layer is None else "; choose a subject layer after it (see `idcgen layers`)")
                )
        self._rules = {s.node: rule_of(s, graph) for s in self.steps}
        self._rules[PREPROCESS] = Epsilon()  # the convention's (x - mean) / std, as a Keras Rescaling
        self._folded = self._batchnorm_folds()
        self._gates = {s.node: gate_of(s) for s in self.steps if isinstance(self._rules[s.node], Gate)}

    def _batchnorm_folds(self) -> set:
        """Nodes of convolution/linear layers folded into the batch norm reading them (no scaling of their own)."""
        graph, folded = self.network.graph, set()
        for step in self.steps:
            if step.op not in ("batch_norm", "_native_batch_norm_legit_no_training") or not step.inputs:
                continue
            producer = step.inputs[0]
            if producer.op in _WEIGHTED and producer in self.steps and len(graph.consumers(producer)) == 1:
                folded.add(producer.node)
        return folded

    def _after(self, node, args, value):
        rule = self._rules.get(node)
        if rule is None or not isinstance(value, torch.Tensor):
            return value
        return rule.apply(node, args, value, self)

    def raw(self, x: np.ndarray, target: np.ndarray | None = None):
        """Unaggregated relevance (the subject layer's output shape, or the input's), its activations and
        the logits, as torch tensors."""
        network = self.network
        t = np.full(len(x), -1, np.int64) if target is None else np.asarray(target, np.int64)
        if len(t) != len(x):
            raise InputError(f"got {len(t)} targets for {len(x)} inputs")
        with torch.enable_grad():
            # requires grad even at a subject layer: one reading only the input (a permute of it) has no weight
            # upstream to give it a gradient otherwise
            image = network.to_device(x).requires_grad_(True)
            env = network.run(image, keep=() if self.subject is None else (self.subject.node,), after=self._after)
            logits = env[network.logits_layer_.node]
            subject = image if self.subject is None else env[self.subject.node]
            if network.task == "regression":
                total = logits.sum()
            else:
                cls = network.to_device(t, np.int64)
                cls = torch.where(cls >= 0, cls, logits.argmax(dim=1))
                total = logits.gather(1, cls[:, None]).sum()
            (grad,) = torch.autograd.grad(total, subject)
        return (subject * grad).detach(), subject.detach(), logits.detach()

    def batch(self, x: np.ndarray, target: np.ndarray | None = None, *, activations: bool = True):
        """One batch as numpy: per-neuron relevance (n, neurons), activations (n, neurons) or None, logits."""
        r, a, z = self.raw(x, target)
        host = self.network.to_host  # back to the host once per batch
        if self.subject is None:
            acts = host(neuron_values(a, -1)) if activations else None
            return host(neuron_values(r, -1, reduce="sum")), acts, host(z)
        acts = host(self.subject.neurons_of(a)) if activations else None
        return host(self.subject.neurons_of(r, reduce="sum")), acts, host(z)
