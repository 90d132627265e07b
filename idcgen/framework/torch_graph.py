"""A PyTorch model as idcgen sees it: the ``torch.export`` graph of ATen operations, with a name per layer,
the axis its neurons lie on, and a small executor that taps named layers and lets LRP change the backward
pass of chosen operations (idcgen/framework/torch_lrp.py).

Every PyTorch source (an ``nn.Module``, a TorchScript file, a ``torch.export`` program) becomes one
``ExportedProgram``; its module's graph holds ``get_attr`` nodes for weights and ``call_function`` nodes for
ATen operations, each with the stack of ``nn.Module`` calls it was made in (docs/design.md, "PyTorch").

**Layer names.** An operation made inside a module is named by that module's path (``layer1.0.conv1``) when
it is the only operation of that module and its output; otherwise by the path and the operation (``layer1.0.add``,
``layer1.0.relu.relu_2`` for the second call of a shared ReLU); an operation of the model's own ``forward``
by the operation (``flatten``). Each module's path is also an alias of its last operation (its output), so
``--layer layer4`` names a torchvision ResNet's fourth stage. TorchScript files carry no module stack, but keep
the module hierarchy: idcgen/framework/torch_jit.py recovers each operation's module path from it.

**Neurons.** A channel of a channels-first output (convolutions: (n, C, H, W), (n, C, L)) or a unit of the
last axis (dense outputs, token sequences (n, tokens, dims)); the axis is followed through permutes and
transposes (the last axis included), so a ConvNeXt block's channels-last section and timm's LayerNorm2d
(permute, layer norm, permute back) keep their channels. Only floating-point values are layers (a boolean
attention mask or int64 indices are not). A layer whose first axis is batch x windows (Swin's window
attention) is mapped back to its images, the windows one more position axis, and a sequence-first layer
(tokens, batch, dims) (``nn.TransformerEncoder`` with its default ``batch_first=False``) to (batch, tokens,
dims) (``Layer.per_image``).

**In-place operations** (``nn.ReLU(inplace=True)``, ``out += identity``, ``mul_``, ``clamp_``) are replaced
by their out-of-place forms before anything else (``functional``): they get those forms' rules, and a tap on
a value sees it before a later in-place write.
"""

from __future__ import annotations

import math
import operator
import warnings
from dataclasses import dataclass, field

import torch

from ..errors import LayerError

#: ATen operations whose output keeps channels first (n, C, ...)
CHANNELS_FIRST = {
    "conv1d",
    "conv2d",
    "conv3d",
    "convolution",
    "_convolution",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
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
    "upsample_nearest2d",
    "upsample_bilinear2d",
    "group_norm",
    "instance_norm",
    "pixel_shuffle",
}
#: reductions over given axes: the neuron axis moves down by the axes removed before it
_REDUCTIONS = {"mean", "sum", "amax", "amin", "var", "std", "prod", "logsumexp", "norm", "max", "min", "argmax"}
#: the key ``run``'s ``after`` gets for the input convention's affine preprocessing in front of the model
PREPROCESS = "preprocess"
#: operations that read a tensor's shape, not its values
_SHAPE_ONLY = {"sym_size", "sym_numel", "sym_stride", "sym_storage_offset"}
#: operations that only carry values: no tensor of their own worth a layer name
_PLUMBING = {
    "getitem",
    "_assert_tensor_metadata",
    "sym_size",
    "sym_numel",
    "_guards_fn",
    "detach_",
    "lift_fresh_copy",
    "alias",
}


#: dropout operations: MC dropout (idcgen/framework/torch_network.py) samples their masks
_DROPOUT_OPS = {"dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout"}


def mutates(node) -> bool:
    """Whether fx node ``node`` is an in-place ATen operation (``relu_``, ``add_`` from ``out += identity``,
    ``mul_``, ``clamp_``, ...): it writes into a tensor another node may still read."""
    schema = getattr(getattr(node, "target", None), "_schema", None)
    return node.op == "call_function" and schema is not None and schema.is_mutable


def functional(program):
    """``program`` with its in-place operations replaced by their out-of-place forms (functionalisation,
    nothing decomposed), so each gets the rule of its out-of-place form (``relu_`` -> ``relu``) and a tap
    sees the value before a later in-place write (docs/design.md, "PyTorch"); ``program`` itself when it
    has none (its node names unchanged)."""
    if not any(mutates(n) for n in program.graph_module.graph.nodes):
        return program
    rates = _dropout_rates(program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own pytree deprecation inside run_decompositions
        run = program.run_decompositions({})
    if not rates:
        return run
    for node in run.graph_module.graph.nodes:  # the identity (a clone) each dropout became: a dropout again
        if op_name(node) == "clone" and _dropout_key(node) in rates:
            op, rate = rates[_dropout_key(node)]
            node.target, node.args, node.kwargs = getattr(torch.ops.aten, op).default, (node.args[0], rate, False), {}
    run.graph_module.recompile()
    return run


def layout_free(graph_module):
    """``graph_module`` with its views made reshapes, in place. Export keeps ``x.contiguous().view(...)`` as a
    bare view where the traced tensor was contiguous; another device's kernels may lay the same values out
    otherwise (a GPU's attention returns its heads in another memory order), and the view then refuses what a
    reshape copies (torchvision's ViT on CUDA; docs/design.md, "PyTorch"). Same values, same node names."""
    views = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)
    changed = False
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and node.target in views:
            node.target, changed = torch.ops.aten.reshape.default, True
    if changed:
        graph_module.recompile()
    return graph_module


def _dropout_key(node):
    """What names a dropout call across functionalisation: its torch function and module path."""
    fn, stack = node.meta.get("torch_fn"), node.meta.get("nn_module_stack") or {}
    return (tuple(fn) if fn else None, next(reversed(stack.values()), (None,))[0] if stack else None)


def _dropout_rates(program) -> dict:
    """Dropout calls by :func:`_dropout_key` -> (out-of-place operation, rate). Functionalisation makes an
    inference-mode dropout the identity (a clone; an in-place one nothing at all, made out-of-place here
    first, the same at inference), and MC dropout (``prioritize --by mc-dropout``) would find none in a model
    with any in-place operation (torchvision's MobileNets: ReLU(inplace=True), Dropout(inplace=True))."""
    rates = {}
    for node in program.graph_module.graph.nodes:
        op = op_name(node)
        if node.op != "call_function" or op.rstrip("_") not in _DROPOUT_OPS or node.meta.get("torch_fn") is None:
            continue
        if op.endswith("_"):  # the program's own graph: the same computation at inference
            node.target = getattr(torch.ops.aten, op.rstrip("_")).default
        rates[_dropout_key(node)] = (op.rstrip("_"), float(node.args[1]) if len(node.args) > 1 else 0.5)
    if rates:
        program.graph_module.recompile()
    return rates


def op_name(node) -> str:
    """ "conv2d" for ``aten.conv2d.default``, "getitem" for ``operator.getitem``: the operation of an fx node."""
    target = node.target
    packet = getattr(target, "_overloadpacket", None)
    if packet is not None:
        return packet.__name__.split(".")[-1]
    return getattr(target, "__name__", str(target))


@dataclass(eq=False)
class Layer:
    """One tensor-producing operation: its fx node, name, (traced) output shape without the batch, and the
    axis its neurons lie on."""

    name: str
    node: object
    op: str
    shape: tuple
    channel_axis: int
    inputs: list = field(default_factory=list)  # the Layers whose outputs it reads
    weighted: bool = False  # reads a weight (or a tensor computed from weights only)
    windows: int = 1  # its first axis is batch x windows (Swin); 0: not a multiple
    batch_axis: int = 0  # 1: a sequence-first (tokens, batch, ...) output (batch_first=False), found by a probe run

    @property
    def kind(self) -> str:
        return self.op

    @property
    def neurons(self) -> int:
        return int(self.shape[self.channel_axis - 1]) if self.shape else 1

    @property
    def size(self) -> int:
        """Values per image (all its windows')."""
        return int(math.prod(self.shape)) * max(self.windows, 1)

    def per_image(self, value: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(value with its windows an axis after the batch, the neuron axis in it): a windowed layer's
        (n * windows, ...) output as (n, windows, ...), windows taken as one more position axis; Swin and
        its kin partition batch-major (each image's windows together), which this reshape undoes. A
        sequence-first output (tokens, n, ...) is moved to (n, tokens, ...); the axes after the batch's, the
        neurons' among them, keep their places."""
        if self.batch_axis == 1:
            return torch.movedim(value, 1, 0), self.channel_axis
        if self.windows == 1:
            return value, self.channel_axis
        if self.windows == 0:
            raise LayerError(
                f"layer {self.name!r} ({self.op}) does not keep the images on its first axis (neither the "
                "batch nor batch x windows): it has no per-image neurons; choose another layer (see "
                "`idcgen layers`)"
            )
        return value.reshape(len(value) // self.windows, self.windows, *value.shape[1:]), self.channel_axis + 1

    def neurons_of(self, value: torch.Tensor, *, reduce: str = "mean") -> torch.Tensor:
        """(n, neurons): this layer's output ``value`` per neuron, averaged (activations) or summed (relevance)
        over every other axis (windows included)."""
        value, axis = self.per_image(value)
        return neuron_values(value, axis, reduce=reduce)


def _module_path(node) -> tuple[str, str]:
    """(innermost module path, its call key) of the ``nn.Module`` call that made ``node``; ("", "") at the top."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "", ""
    key, (path, _) = list(stack.items())[-1]
    return path, key


def _op_numbered(graph) -> dict:
    """fx node -> its operation numbered in execution order (relu, relu_1, ...), as torch.export names them."""
    counts: dict[str, int] = {}
    names = {}
    for node in graph.nodes:
        if node.op == "call_function":
            op = op_name(node)
            k = counts.get(op, 0)
            counts[op] = k + 1
            names[node] = op if k == 0 else f"{op}_{k}"
    return names


def _shape(node) -> tuple | None:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return tuple(int(d) for d in val.shape[1:])
    return None


class TorchGraph:
    """The layers of an exported program, in execution order, and a runner over them."""

    def __init__(self, program):
        self.program = program
        run = functional(program)
        self.module = run.module()  # exported in inference mode (it refuses .eval())
        graph = self.module.graph
        # functionalisation numbers its nodes by its own count (add_65): named again as export names them
        self._node_names = _op_numbered(graph) if run is not program else {}
        for node in list(graph.nodes):  # an in-place write into the input, made a copy back into it: the
            if node.op == "call_function" and op_name(node) == "copy_" and node.args[0].op == "placeholder":
                node.replace_all_uses_with(node.args[1])  # value stays; the caller's images stay untouched
                graph.erase_node(node)
        layout_free(self.module)
        self.fx_nodes = [n for n in graph.nodes if not (n.op == "call_module" and "guards" in str(n.target))]
        inputs = [n for n in self.fx_nodes if n.op == "placeholder"]
        if len(inputs) != 1:
            raise LayerError(f"idcgen runs models of one input; this one takes {len(inputs)}")
        self.input_node = inputs[0]
        self.output_node = next(n for n in self.fx_nodes if n.op == "output")
        self.attrs = {n: operator.attrgetter(n.target)(self.module) for n in self.fx_nodes if n.op == "get_attr"}
        # nodes that do not depend on the input's values: weights, what is computed from them and from the
        # input's shape only (a class token expanded to the batch size is no layer: it is the same for every image)
        self.constant = set()
        for node in self.fx_nodes:
            if node.op == "get_attr" or (
                node.op == "call_function"
                and (op_name(node) in _SHAPE_ONLY or all(a in self.constant for a in node.all_input_nodes))
            ):
                self.constant.add(node)
        # what is computed from weights: a layer reading one is weighted, one reading only the input's shape
        # (x.view(x.size(0), -1)) is not, or NC would count a flatten as a layer of its own
        self.weights = {n for n in self.constant if n.op == "get_attr"}
        for node in self.fx_nodes:
            if node in self.constant and any(a in self.weights for a in node.all_input_nodes):
                self.weights.add(node)
        self.layers: list[Layer] = []
        self.by_node: dict = {}
        self._name_layers()
        # node -> the index of the last node reading it: values are dropped after it (memory for big batches)
        self._last_use = {arg: i for i, node in enumerate(self.fx_nodes) for arg in node.all_input_nodes}

    # ---- naming -------------------------------------------------------------------------------
    def source(self, node):
        """The operation whose value ``node`` is: a tuple-valued operation (max pooling with indices, a
        decomposed batch norm) for the ``getitem`` taking its first value, else ``node`` itself."""
        if (
            op_name(node) == "getitem"
            and node.args[1] == 0
            and isinstance(node.args[0], torch.fx.Node)
            and isinstance(node.args[0].meta.get("val"), (tuple, list))
        ):
            return node.args[0]
        return node

    def _name_layers(self) -> None:
        # only floating-point values are layers: a boolean attention mask, int64 indices carry no activations
        ops = [
            n
            for n in self.fx_nodes
            if n.op == "call_function"
            and n not in self.constant
            and _shape(n) is not None
            and n.meta["val"].is_floating_point()
            and (op_name(n) not in _PLUMBING or self.source(n) is not n)
        ]
        counts: dict[str, int] = {}
        last_of: dict[str, object] = {}  # module path -> its last operation (its output)
        calls: dict[str, set] = {}
        for node in ops:
            counts[_module_path(node)[0]] = counts.get(_module_path(node)[0], 0) + 1
            for key, (path, _) in (node.meta.get("nn_module_stack") or {}).items():
                if path:
                    calls.setdefault(path, set()).add(key)
                    last_of[path] = node
        names, taken = {}, set()
        for node in ops:
            path, _ = _module_path(node)
            if path and counts[path] == 1 and last_of[path] is node:
                name = path
            elif path:
                name = f"{path}.{self._node_names.get(node, node.name)}"
            else:
                name = self._node_names.get(node, node.name)
            while name in taken:
                name += "_"
            taken.add(name)
            names[node] = name
        self.aliases: dict[str, str] = {
            path: names[node] for path, node in last_of.items() if path not in taken and len(calls[path]) == 1
        }
        axis = {self.input_node: 1 if len(_shape(self.input_node) or ()) >= 2 else -1}
        for node in self.fx_nodes:
            if node.op != "call_function":
                continue
            source = self.source(node)
            axis[node] = self._channel_axis(source, axis, _shape(node))
            if node in names:
                shape = _shape(node)
                ax = axis[node] if axis[node] > 0 else len(shape) + 1 + axis[node]
                weighted = any(a in self.weights for a in source.all_input_nodes)
                layer = Layer(
                    names[node],
                    node,
                    op_name(source),
                    shape,
                    max(1, min(ax, len(shape))),
                    weighted=weighted,
                    windows=self._windows(node),
                )
                layer.inputs = [self.by_node[a] for a in self._tensor_inputs(source) if a in self.by_node]
                self.layers.append(layer)
                self.by_node[node] = layer
        self._by_name = {layer.name: layer for layer in self.layers}

    def _windows(self, node) -> int:
        """How many values ``node``'s first axis holds per image: 1 (the batch axis), the windows per image
        (Swin's batch x windows), or 0 (not a whole multiple of the batch)."""
        if node.meta["val"].dim() == 0:
            return 0
        batch, first = self.input_node.meta["val"].shape[0], node.meta["val"].shape[0]
        if str(first) == str(batch):
            return 1
        if str(batch).isdigit():  # a batch fixed at export (nn.MultiheadAttention's fast path fixes it): 4 rows
            return 0  # for 2 images may be 2 windows each or (tokens, batch, dims): no guess
        ratio = first / batch  # s0 * 64 / s0: the windows of each image; 197 / s0 (tokens first): none
        try:
            ratio = float(ratio)
        except TypeError:
            return 0
        return int(ratio) if ratio >= 1 and ratio == int(ratio) else 0

    def _tensor_inputs(self, node) -> list:
        """The producing nodes of ``node``'s tensor arguments, skipping plumbing (getitem) to its source."""
        found = []
        for arg in node.all_input_nodes:
            while (
                arg.op == "call_function"
                and arg not in self.by_node
                and op_name(arg) in _PLUMBING
                and arg.all_input_nodes
            ):
                arg = arg.all_input_nodes[0]
            if arg.op in ("call_function", "placeholder") and arg not in self.constant:
                found.append(arg)
        return found

    def _channel_axis(self, node, axis: dict, shape=None) -> int:
        """The axis of ``node``'s output its neurons lie on (1-based over the batch axis, or -1 for last)."""
        op, shape = op_name(node), _shape(node) if shape is None else shape
        ndim = len(shape) if shape is not None else 0
        if ndim <= 1:
            return -1
        if op in CHANNELS_FIRST:
            return 1
        if op in ("linear", "layer_norm", "matmul", "addmm", "mm", "bmm", "scaled_dot_product_attention", "rms_norm"):
            return -1
        source = next((a for a in node.all_input_nodes if a in axis and a not in self.constant), None)
        inherited = axis.get(source, -1)
        src_shape = _shape(source) if source is not None else None
        if inherited < 0 and src_shape:  # "the last axis" as a number, so a permute can move it
            inherited = len(src_shape) + 1 + inherited
        if op == "permute" and inherited > 0:
            dims = list(node.args[1])
            dims = [d % (len(src_shape) + 1) for d in dims]
            return dims.index(inherited) if inherited in dims else -1
        if op in ("transpose", "swapaxes") and inherited > 0:
            a, b = (int(d) % (len(src_shape) + 1) for d in node.args[1:3])
            return b if inherited == a else a if inherited == b else inherited
        if (
            op in _REDUCTIONS
            and src_shape is not None
            and len(src_shape) != ndim
            and len(node.args) > 1
            and isinstance(node.args[1], (int, list, tuple))
        ):
            dims = {
                int(d) % (len(src_shape) + 1)
                for d in ([node.args[1]] if isinstance(node.args[1], int) else node.args[1])
            }
            return -1 if inherited in dims else inherited - sum(d < inherited for d in dims)
        if src_shape is not None and len(src_shape) != ndim:
            # a reshape or a reduction that keeps the neuron axis and all before it (flatten(2) of a
            # convolution's positions), or it and all after it (a window partition of channels-last
            # patches); else a flat vector's units, or tokens' last axis
            if tuple(src_shape[:inherited]) == tuple(shape[:inherited]):
                return inherited
            tail = len(src_shape) - inherited + 1
            if len(shape) >= tail and tuple(src_shape[-tail:]) == tuple(shape[-tail:]):
                return len(shape) + 1 - tail
            return -1
        return inherited

    # ---- lookup -------------------------------------------------------------------------------
    def layer(self, name: str) -> Layer:
        name = self.aliases.get(name, name)
        return self._by_name[name]

    def has(self, name: str) -> bool:
        return name in self._by_name or name in self.aliases

    def consumers(self, layer: Layer) -> list:
        return [other for other in self.layers if layer in other.inputs]

    def ancestors(self, layer: Layer) -> set:
        """Every layer ``layer`` depends on, itself included."""
        seen, todo = set(), [layer]
        while todo:
            cur = todo.pop()
            if cur not in seen:
                seen.add(cur)
                todo.extend(cur.inputs)
        return seen

    def descendants(self, layer: Layer | None) -> set:
        """Every layer depending on ``layer`` (None: the input), itself included."""
        seen = {layer} if layer is not None else set()
        for other in self.layers:
            if (layer is None and self.input_node in self._tensor_inputs(other.node)) or any(
                i in seen for i in other.inputs
            ):
                seen.add(other)
        return seen

    # ---- running ------------------------------------------------------------------------------
    def run(self, x, *, keep=(), until=None, after=None) -> dict:
        """Run the graph on the (channels-first) tensor ``x``: {node: value} for the nodes in ``keep`` and
        the output node; ``until`` (a node) stops after it; ``after(node, args, value) -> value`` may replace
        an operation's value (LRP's changed backward passes)."""
        keep = set(keep)
        env = {self.input_node: x}
        for i, node in enumerate(self.fx_nodes):
            if node.op == "get_attr":
                env[node] = self.attrs[node]
            elif node.op == "call_function":
                args = torch.fx.node.map_arg(node.args, env.__getitem__)
                kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
                value = node.target(*args, **kwargs)
                env[node] = value if after is None else after(node, args, value)
            elif node.op == "output":
                env[node] = torch.fx.node.map_arg(node.args[0], env.__getitem__)
            if node is until:
                break
            for arg in node.all_input_nodes:  # free what no later node reads
                if self._last_use.get(arg) == i and arg not in keep and arg.op == "call_function":
                    del env[arg]
        return env

    def output_value(self, env):
        """The model's one output tensor from a run's values."""
        out = env[self.output_node]
        while isinstance(out, (tuple, list)):
            out = out[0]
        return out


def neuron_values(value: torch.Tensor, axis: int, *, reduce: str = "mean") -> torch.Tensor:
    """(n, ...) layer output -> (n, neurons): the ``axis`` units, averaged (activations) or summed (relevance)
    over every other axis."""
    if value.dim() <= 2:
        return value if value.dim() == 2 else value.reshape(len(value), -1)
    axis = axis % value.dim()
    moved = torch.movedim(value, axis, -1).reshape(len(value), -1, value.shape[axis])
    return moved.mean(dim=1) if reduce == "mean" else moved.sum(dim=1)
