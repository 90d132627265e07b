"""ONNX Runtime as a forward-only backend: a deployed ``.onnx`` export (fp32 or quantised) run on idcgen's
images, so it is measured against the analysis of its source model and tested against it differentially
(docs/models.md, "Deployed ONNX exports").

Forward only: coverage, the fuzz loop with gradient-free mutators and the orderings by output run; relevance
(``analyze``), the gradient mutators and the attacks need the source model (:class:`ForwardNetwork`).

**Layers** are the graph's floating-point values with a row per input, found by one probe run with every
value fetched (a value whose first axis is not the probe's batch, such as a reshaped constant, is not a
layer); a tap adds the value as a graph output. **Names** follow the source's module paths where the exporter
kept them, so ``--layer fc1`` names the same layer as on the ``.pt2``: the torch.export-based exporter writes
``pkg.torch.onnx.name_scopes`` on each node, the TorchScript-based one names nodes ``/fc1/Gemm``. As on the torch
backend, a module's only layer is named by its path when it is also the module's output, others by path and
operation numbered over the graph (``layer1.0.add``, ``layer1.0.relu.relu_2``: the second call of a shared
ReLU, which the TorchScript-based exporter scopes ``relu_1``), and a module's path is an alias of its last
layer (``layer1.0``: the block's output); a node without a recorded scope (what a quantiser adds) is named by
its output.
A convolution the exporter folded a batch norm into computes the norm's output, so it is ``conv1.folded``,
never the source's ``conv1``.
**Neurons** as on the torch backend: the channels (axis 1) of a 4-D or 5-D value, else the last axis; images
stay (n, H, W, C) and are moved channels first in front of a model taking (n, C, H, W).
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..convention import InputConvention
from ..errors import ModelError, Param
from . import RANGE_TAP, TASKS, ForwardNetwork, LayerInfo
from .common import refuse_nan_outputs, weights_digest
from .device import requested_device, say_once
from .layers import GraphQueries, LayerGraph, LayerRecord

#: operations a walk from the classifier down to the subject layer passes through (reshapes, dropout,
#: the casts and dynamic quantisation a quantiser puts in front of an integer matmul)
_PASS = {"Flatten", "Reshape", "Dropout", "Identity", "Cast", "DynamicQuantizeLinear", "QuantizeLinear", "Squeeze"}
_WEIGHTED = {"Conv", "ConvInteger", "Gemm", "MatMul", "MatMulInteger", "ConvTranspose", "QLinearConv", "QLinearMatMul"}
_ACTIVATIONS = {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "Selu", "HardSigmoid", "HardSwish", "Gelu", "Softplus"}
_FOLLOWERS = {"BatchNormalization", "Add", "Mul", "Dropout"}  # a bias or a scale after a (quantised) matmul
_QUANTISED = {"MatMulInteger", "ConvInteger", "QLinearConv", "QLinearMatMul", "QuantizeLinear", "DynamicQuantizeLinear"}
#: operations whose output for one input depends on the other inputs of the same call
_COUPLED = {"DynamicQuantizeLinear"}
#: the ATen name the torch backend gives an operation the TorchScript-based exporter names by ONNX type
_ATEN = {
    "Conv": "conv2d",
    "Gemm": "linear",
    "MaxPool": "max_pool2d",
    "AveragePool": "avg_pool2d",
    "GlobalAveragePool": "adaptive_avg_pool2d",
    "BatchNormalization": "batch_norm",
    "Relu": "relu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Flatten": "flatten",
    "Add": "add",
    "Mul": "mul",
    "Softmax": "softmax",
}
#: a batch size a value's first axis matches only when it is the batch (a prime, as torch_network's probe)
_PROBE = 7


@dataclass
class OnnxModel:
    """An ONNX model as read: the serialised proto, where it came from."""

    data: bytes
    origin: str


def load_model(path, *, safe_mode: bool = True, architecture=None, input_shape=None) -> OnnxModel:
    """The ONNX model in ``path``; ``safe_mode`` does not apply (an ONNX file holds no code)."""
    if architecture is not None:
        raise ModelError(f"{path}: an ONNX file holds its weights: drop --weights/--architecture")
    import onnx

    if not Path(path).is_file():
        raise ModelError(f"model file not found: {path}")
    if Path(path).stat().st_size == 0:  # protobuf parses no bytes as an empty model, which "takes 0 inputs"
        raise ModelError(f"cannot read ONNX file {path}: {path} is empty")
    try:  # with the weights the exporter wrote beside it (m.onnx.data), so the model travels as one proto
        proto = onnx.load(str(path))
    except Exception as exc:  # a truncated or foreign file: protobuf's own error
        raise ModelError(f"cannot read ONNX file {path}: {_first_line(exc)}") from None
    if not proto.graph.node:
        raise ModelError(f"cannot read ONNX file {path}: {path} holds no graph (no nodes); export the model again")
    return OnnxModel(proto.SerializeToString(), f"ONNX file {path}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def limit_threads(threads: int) -> None:
    """Threads are set per session (``_session``)."""
    _THREADS[0] = int(threads)


_THREADS = [0]  # 0: onnxruntime's default


def _providers(device) -> list:
    """CUDA (device ``cuda:N``: that GPU) when asked for, or auto, and onnxruntime has it, else the CPU; an
    explicit cuda that onnxruntime cannot give is one line."""
    import onnxruntime as ort

    setting = requested_device(device if device is None or isinstance(device, str) else str(device))
    have = ort.get_available_providers()
    if setting.kind != "cpu" and "CUDAExecutionProvider" in have:
        return [("CUDAExecutionProvider", {"device_id": setting.index or 0}), "CPUExecutionProvider"]
    if setting.kind == "cuda":
        raise ModelError(
            setting.given_as(),
            f": onnxruntime {ort.__version__} has no CUDA provider here (providers: "
            f"{', '.join(have)}); install onnxruntime-gpu in its place, or run on the CPU (--device cpu)",
        )
    return ["CPUExecutionProvider"]


def _scope(node) -> tuple[str, str] | None:
    """(module path, operation) the exporter recorded for ``node``, or None."""
    meta = {p.key: p.value for p in node.metadata_props}
    scopes = meta.get("pkg.torch.onnx.name_scopes")
    if scopes:  # torch.export-based exporter: ['', 'layer1', '0', 'conv1', 'conv2d'] or dotted paths
        try:
            parts = [str(s) for s in ast.literal_eval(scopes)]
        except (ValueError, SyntaxError):
            parts = []
        if parts:
            return _joined(parts[:-1]), parts[-1]
    if node.name.startswith("/"):  # TorchScript-based exporter: /layer1/layer1.0/conv1/Conv
        parts = node.name.split("/")[1:]
        op = parts[-1].split("_")[0]
        return _joined(parts[:-1]), _ATEN.get(op, op.lower())
    return None


def _repeated_calls(scoped: dict) -> tuple[dict, set]:
    """(``scoped`` with each further call of a module scoped as that module, the modules called more than
    once). The TorchScript-based exporter scopes the second call of ``layer1.0.relu`` (torchvision's shared
    in-place ReLU) ``layer1.0.relu_1``; torch.export keeps both under ``layer1.0.relu``, named by operation."""
    seen, repeated, found = set(), set(), {}
    for value, s in scoped.items():
        if s is not None and s[0]:
            base, _, k = s[0].rpartition("_")
            if k.isdigit() and base in seen:
                s = (base, s[1])
                repeated.add(base)
            seen.add(s[0])
        found[value] = s
    return found, repeated


def _op_numbered(nodes, scoped: dict) -> dict:
    """value -> its operation numbered over the graph in order (relu, relu_1, ...), as torch.export numbers
    the operations of a program, so ``layer1.0.relu.relu_2`` names the same value on both; the exporter's own
    numbers (``add_60``, counted before its decompositions) are dropped. The same where each operation
    exports to one node (a batch norm folded into its convolution shifts the count of those)."""
    counts, names = {}, {}
    for node in nodes:
        for out in node.output:
            s = scoped.get(out)
            if s is None:
                continue
            op = re.sub(r"_\d+$", "", s[1])
            k = counts.get(op, 0)
            counts[op] = k + 1
            names[out] = op if k == 0 else f"{op}_{k}"
    return names


def _norm_folded(layer) -> bool:
    """Whether ``layer`` is a convolution computing the batch norm after it (``conv1.folded``; the torch.export
    -based exporter scopes such a node as the norm, ``bn1``)."""
    return layer.name.endswith(".folded") or "batch_norm" in ((_scope(layer.node) or ("", ""))[1])


def _enclosing(path: str) -> list[str]:
    """The module paths ``path`` is inside of, itself included (``layer1``, ``layer1.0``, ``layer1.0.relu``);
    a folded convolution's output is its batch norm's, so not its own module's."""
    parts = path.split(".")
    outer = parts[:-2] if parts[-1] == "folded" else parts[:-1]
    return [".".join(outer[: i + 1]) for i in range(len(outer))] + [path]


def _joined(parts: list[str]) -> str:
    """A module path from its scopes: each a child name, the full path so far (``layer1``, ``layer1.0``) or the
    child's path from the module before (``downsample``, ``downsample.0``: a Sequential inside a block)."""
    path = ""
    for part in (p for p in parts if p):
        last = path.rpartition(".")[2]
        if not path or part.startswith(path + "."):
            path = part
        elif part.startswith(last + "."):
            path = f"{path}{part[len(last) :]}"
        else:
            path = f"{path}.{part}"
    return path


@dataclass(eq=False)
class OnnxLayer:
    """One floating-point value of the graph with a row per input."""

    name: str
    value: str  # the graph value's name
    node: object  # the NodeProto computing it
    op: str
    shape: tuple  # without the batch
    channel_axis: int

    @property
    def neurons(self) -> int:
        return int(self.shape[self.channel_axis - 1]) if self.shape else 1


class OnnxNetwork(GraphQueries, ForwardNetwork):
    """A classifier or regression model exported to ONNX, run by onnxruntime, forward only; its layers are
    queried through their :class:`~idcgen.framework.layers.LayerGraph`, as a Keras or PyTorch model's."""

    #: an export cannot carry its source model's weights fingerprint (weights re-laid out, folded or quantised):
    #: an analysis of the source binds by subject layer name and neuron count, and says so (Analysis.bind)
    analysis_by_layer = True

    def __init__(self, model, *, batch_size=None, task=None, convention=None, device=None, precision=None):
        import onnx

        if task not in TASKS + (None,):
            raise ModelError(f"the task must be one of {', '.join(TASKS)} (or left out to detect it); got {task!r}")
        if precision not in (None, "fp32"):
            raise ModelError(Param("precision", precision), ": an ONNX model runs in the precision it was exported in")
        if isinstance(model, onnx.ModelProto):
            model = OnnxModel(model.SerializeToString(), "ONNX model")
        if not isinstance(model, OnnxModel):
            raise ModelError(f"expected an ONNX model, got {type(model).__name__}")
        self.source = model
        self.model = self.inner = model
        self.convention = convention
        self._task_given = task
        self._device = device
        self.providers = _providers(device)
        self.device_asked = requested_device(device if device is None or isinstance(device, str) else str(device)).kind
        gpu = self.providers[0][1]["device_id"] if isinstance(self.providers[0], tuple) else None
        self._device_info = {"device": "cpu" if gpu is None else f"cuda:{gpu}"}
        try:
            self.proto = onnx.load_from_string(model.data)
        except Exception as exc:  # a truncated or foreign proto: protobuf's own error
            raise ModelError(f"cannot read {model.origin}: {_first_line(exc)}") from None
        self._built: dict = {}
        # dynamic quantisation takes one scale per call over the whole input tensor: in a batch, an input's
        # outputs would depend on the inputs beside it, so each runs alone, as a deployment at batch 1 does
        self.coupled = any(node.op_type in _COUPLED for node in self.proto.graph.node)
        if self.coupled:
            say_once(
                f"{model.origin} quantises its activations per call (DynamicQuantizeLinear): each input runs "
                "alone, so its outputs do not depend on the other inputs of a batch"
            )
        self._read_input()
        self._find_layers()
        self._find_head(task)
        self.batch_size = int(batch_size or self._fixed_batch or 256)
        self._preprocess = None if convention is None else convention.preprocess
        if self._preprocess is not None:
            self._preprocess.check_channels(self.input_shape[-1])

    # ---- the graph --------------------------------------------------------------------------
    def _read_input(self) -> None:
        graph = self.proto.graph
        weights = {w.name for w in graph.initializer}
        inputs = [i for i in graph.input if i.name not in weights]
        if len(inputs) != 1:
            raise ModelError(f"{self.source.origin} takes {len(inputs)} inputs; idcgen runs models taking one image")
        self.input_name = inputs[0].name
        dims = inputs[0].type.tensor_type.shape.dim
        first = dims[0] if dims else None
        self._fixed_batch = int(first.dim_value) if first is not None and first.HasField("dim_value") else None
        shape = [int(d.dim_value) if d.HasField("dim_value") else 0 for d in dims[1:]]
        if not shape or 0 in shape:
            raise ModelError(
                f"{self.source.origin}: the input {self.input_name!r} has no fixed shape after the batch "
                f"({[d.dim_param or d.dim_value for d in dims]}); export it with a fixed image size"
            )
        # (C, H, W) images are taken as (H, W, C), as the torch backend does, unless the last axis is the channels
        self.channels_first = len(shape) == 3 and not (shape[-1] <= 4 < shape[0])
        self.input_shape = (shape[1], shape[2], shape[0]) if self.channels_first else tuple(shape)
        self._input_dtype = np.float16 if inputs[0].type.tensor_type.elem_type == 10 else np.float32

    def _session(self, outputs: tuple[str, ...]):
        """An InferenceSession fetching ``outputs`` besides the model's own (values made graph outputs)."""

        def build():
            import onnx
            import onnxruntime as ort

            proto = self.proto
            if outputs:
                proto = onnx.ModelProto()
                proto.CopyFrom(self.proto)
                have = {o.name for o in proto.graph.output}
                for name in outputs:
                    if name not in have:
                        proto.graph.output.append(onnx.ValueInfoProto(name=name))
            options = ort.SessionOptions()
            options.log_severity_level = 3  # warnings on every tapped value's missing type are noise
            if _THREADS[0]:
                options.intra_op_num_threads = _THREADS[0]
                options.inter_op_num_threads = 1
            try:
                session = ort.InferenceSession(proto.SerializeToString(), options, providers=self.providers)
            except Exception as exc:
                raise ModelError(f"onnxruntime cannot run {self.source.origin}: {_first_line(exc)}") from None
            if self._device_info["device"] != "cpu" and "CUDAExecutionProvider" not in session.get_providers():
                self._cuda_did_not_start(ort)
            return session

        return self.cached(("session", outputs), build)

    def _cuda_did_not_start(self, ort) -> None:
        """onnxruntime lists its CUDA provider but could not start it (onnxruntime-gpu without the CUDA or cuDNN
        libraries it was built for, or no GPU) and ran on the CPU: an explicit cuda is one line, auto is the CPU
        and recorded so."""
        if self.device_asked == "cuda":
            raise ModelError(
                requested_device(self._device if self._device is None else str(self._device)).given_as(),
                f": onnxruntime {ort.__version__} could not start its CUDA provider (the "
                "CUDA and cuDNN libraries its build needs, a GPU); run on the CPU (device='cpu')",
            )
        self.providers, self._device_info = ["CPUExecutionProvider"], {"device": "cpu"}

    def _run(self, x: np.ndarray, outputs: tuple[str, ...] = ()) -> list[np.ndarray]:
        """The model's first output and ``outputs`` on model inputs ``x``, one call (a fixed batch padded)."""
        session = self._session(outputs)
        names = [self.output_name, *outputs]
        fixed = self._fixed_batch or (1 if self.coupled else None)
        if fixed is None or len(x) == fixed:
            return session.run(names, {self.input_name: x})
        parts = []
        for start in range(0, len(x), fixed):
            chunk = x[start : start + fixed]
            padded = np.concatenate([chunk, np.repeat(chunk[-1:], fixed - len(chunk), axis=0)])
            parts.append([v[: len(chunk)] if v.ndim else v for v in session.run(names, {self.input_name: padded})])
        return [np.concatenate(vs) if vs[0].ndim else vs[0] for vs in zip(*parts)]

    def _find_layers(self) -> None:
        graph = self.proto.graph
        self.output_name = graph.output[0].name
        producers = [(node, out) for node in graph.node for out in node.output if out]
        probe = self._fixed_batch or _PROBE
        values = self._run(
            self._prepare(np.zeros((probe, *self.input_shape), np.float32)),
            tuple(o for _, o in producers if o != self.output_name),
        )
        got = dict(zip([o for _, o in producers if o != self.output_name], values[1:]))
        got[self.output_name] = values[0]
        self.producer = {out: node for node, out in producers}
        self.node_inputs = {id(node): [i for i in node.input if i] for node in graph.node}
        candidates = []
        for node, out in producers:
            value = got.get(out)
            if not isinstance(value, np.ndarray) or value.dtype.kind != "f" or value.ndim < 2 or len(value) != probe:
                continue
            shape = tuple(int(d) for d in value.shape[1:])
            candidates.append((node, out, shape, 1 if value.ndim >= 4 else value.ndim - 1))
        if not candidates:
            raise ModelError(f"{self.source.origin} has no floating-point layers with a row per input")
        # names: the module path of a module's only layer; path.operation where it has several
        scoped = {out: _scope(node) for node, out, _, _ in candidates}
        for node, out, _, _ in candidates:  # a convolution with a batch norm folded in is not the source's conv
            s = scoped[out]
            if s is not None and s[0] and self._folded(node):
                scoped[out] = (f"{s[0]}.folded", s[1])
        scoped, repeated = _repeated_calls(scoped)
        numbered = _op_numbered(self.proto.graph.node, scoped)
        counts, last = {}, {}  # layers per module path; each module's last layer (its output), submodules' too
        for out, s in scoped.items():
            if s is not None and s[0]:
                counts[s[0]] = counts.get(s[0], 0) + 1
                for path in _enclosing(s[0]):
                    last[path] = out
        self.layers, taken = [], set()
        for node, out, shape, axis in candidates:
            s = scoped[out]
            if s is None:
                name = out
            elif s[0] and counts[s[0]] == 1 and last[s[0]] == out and s[0] not in repeated:
                name = s[0]
            else:
                name = f"{s[0]}.{numbered[out]}" if s[0] else numbered[out]
            base, k = name, 1
            while name in taken:
                name, k = f"{base}_{k}", k + 1
            taken.add(name)
            layer = OnnxLayer(name, out, node, node.op_type, shape, axis)
            self.layers.append(layer)
        self._by_value = {layer.value: layer for layer in self.layers}
        self._aliases: dict[str, str] = {}
        for path, out in last.items():  # a module called once: its path names its output, as on the .pt2
            if path not in repeated and path not in taken:
                self._aliases[path] = self._by_value[out].name
        for layer in self.layers:  # each value's own name, path.operation of a module's output
            s = scoped[layer.value]
            for alias in [layer.value] + ([f"{s[0]}.{s[1]}"] if s is not None and s[0] else []):
                if alias not in taken and alias not in self._aliases:
                    self._aliases[alias] = layer.name

    def _folded(self, node) -> bool:
        """Whether the exporter folded what follows ``node`` (a batch norm) into its weights: they are then a
        new constant (``onnx::Conv_12``), not the module's own, and its output is the batch norm's."""
        if node.op_type not in ("Conv", "Gemm", "ConvTranspose") or len(node.input) < 2:
            return False
        weight = node.input[1]
        while weight in self.producer and self.producer[weight].op_type == "Identity":
            weight = self.producer[weight].input[0]
        return weight.startswith("onnx::")

    def _ancestors(self, value: str) -> set[str]:
        """Every graph value ``value`` is computed from (itself included)."""
        seen, todo = set(), [value]
        while todo:
            v = todo.pop()
            if v in seen:
                continue
            seen.add(v)
            node = self.producer.get(v)
            if node is not None:
                todo.extend(self.node_inputs[id(node)])
        return seen

    def _reads_weight(self, node) -> bool:
        weights = self.cached("weights", lambda: {w.name for w in self.proto.graph.initializer})
        return node.op_type in _WEIGHTED and any(i in weights for i in node.input[1:])

    # ---- the head -----------------------------------------------------------------------------
    def _find_head(self, task) -> None:
        out = self._by_value.get(self.output_name)
        if out is None:
            raise ModelError(f"{self.source.origin}: its output {self.output_name!r} is not one row per input")
        self.head_note = None
        logits = out
        if out.op in ("Softmax", "LogSoftmax") and self.node_inputs[id(out.node)][0] in self._by_value:
            logits = self._by_value[self.node_inputs[id(out.node)][0]]
        if len(logits.shape) != 1:
            raise ModelError(
                f"the model's logits come from {logits.name!r} ({logits.op}, shape {logits.shape}), not one "
                "score per class; expected a final linear layer"
            )
        self.logits_ = logits
        self.logits_layer = logits.name
        self.n_classes = int(logits.shape[0])
        if task == "regression" and self.n_classes != 1:
            raise ModelError(
                f"--task regression needs a model whose output is one unit; this one gives {self.n_classes}; "
                "leave --task out or give classification"
            )
        self.task = task or ("regression" if self.n_classes == 1 and out.op != "Softmax" else "classification")
        self._softmax_out = out is not logits
        # the classifier: the last weighted node under the logits (a quantised matmul's scale and bias above it)
        ancestors = self._ancestors(logits.value)
        order = [n for n in self.proto.graph.node if any(o in ancestors for o in n.output)]
        weighted = [n for n in order if self._reads_weight(n)]
        self.classifier_node = weighted[-1] if weighted else logits.node
        self.layer_graph = self._layer_graph()

    # ---- layers -------------------------------------------------------------------------------
    def _layer_graph(self) -> LayerGraph:
        """The layer graph of the model's layers (idcgen/framework/layers.py): each layer reads the layers found
        through the values that are no layer (a quantiser's integers and scales); the classifier is the layer
        computed by the classifier node (an integer matmul's: the first layer after it)."""
        weighted = self._weighted()
        records = [
            LayerRecord(
                layer.name,
                layer.op,
                layer.shape,
                self._layer_inputs(layer.node),
                neurons=layer.neurons,
                weighted=layer.value in weighted,
                transparent=layer.op in _PASS,
                # a quantised module's last layer (its bias) is its weighted layer: it follows no other
                role=""
                if layer.value in weighted
                else "activation"
                if layer.op in _ACTIVATIONS
                else "follower"
                if layer.op in _FOLLOWERS and not self._joins(layer)  # a residual join ends the walk
                else "",
                ref=layer,
            )
            for layer in self.layers
        ]
        return LayerGraph(records, logits=self.logits_.name, aliases=self._aliases, classifier=self._classifier())

    def _layer_inputs(self, node) -> tuple[str, ...]:
        """The layers ``node`` reads, in argument order, looked for through the values that are no layer."""
        found, seen, todo = [], set(), list(reversed(self.node_inputs[id(node)]))
        while todo:  # depth first, so that the first input's layer comes first (default_layer follows it)
            value = todo.pop()
            if value in seen:
                continue
            seen.add(value)
            if value in self._by_value:
                found.append(self._by_value[value].name)
            elif value in self.producer:
                todo.extend(reversed(self.node_inputs[id(self.producer[value])]))
        return tuple(dict.fromkeys(found))

    def _classifier(self) -> str:
        """The layer computed by the classifier node: its own, or the first layer computed from it through
        values that are no layer (a quantised matmul's integer output, cast and scaled)."""
        own = set(self.classifier_node.output)
        through = self._through(own)
        for layer in self.layers:
            if layer.value in own or set(self.node_inputs[id(layer.node)]) & through:
                return layer.name
        return self.logits_.name

    def _through(self, values: set[str]) -> set[str]:
        """``values`` and every value computed from them by nodes whose outputs are no layer."""
        reached, todo = set(values), list(values)
        while todo:
            value = todo.pop()
            for node in self._consumers().get(value, []):
                for out in node.output:
                    if out and out not in self._by_value and out not in reached:
                        reached.add(out)
                        todo.append(out)
        return reached

    def _consumers(self) -> dict[str, list]:
        """Graph value -> the nodes reading it."""

        def build():
            consumers: dict[str, list] = {}
            for node in self.proto.graph.node:
                for value in node.input:
                    consumers.setdefault(value, []).append(node)
            return consumers

        return self.cached("consumers", build)

    layer = GraphQueries.step

    def layers_info(self) -> list[LayerInfo]:
        return self.layer_graph.layers_info(batch_axis=False)

    def subject_layers(self) -> list[str]:
        # relevance is computed on the source model: no LRP rule limits them here, every hidden layer is one
        return [name for name in self.layer_names() if self.layer_graph.is_hidden(name)]

    def rule_notes(self, layer: str | None) -> list[str]:
        return ["an ONNX model runs forward only: relevance (analyze) is computed on its source model"]

    def _weighted(self) -> set[str]:
        """The values of the layers computed by a weighted operation: the node itself, or for a module whose
        weighted node has an integer output (a quantised ConvInteger/MatMulInteger, its scale and bias after
        it) the module's last layer."""
        paths = {s[0] for node in self.proto.graph.node if self._reads_weight(node) for s in [_scope(node)] if s}
        last = {}
        for layer in self.layers:
            s = _scope(layer.node)
            if s is not None and s[0] in paths:
                last[s[0]] = layer
        return {
            layer.value
            for layer in self.layers
            if self._reads_weight(layer.node) or any(layer is last.get(s[0]) for s in [_scope(layer.node)] if s)
        }

    def neuron_layers(self) -> list[str]:
        chosen = self.layer_graph.neuron_layers()
        folded = [name for name in chosen if _norm_folded(self.layer_graph.get(name).ref)]
        if folded:  # the source counts the convolution's own output, before its batch norm: other values
            say_once(
                f"{self.source.origin}: NC and the other neuron criteria count {folded[0]}"
                f"{f' and {len(folded) - 1} more' if len(folded) > 1 else ''} (a batch norm the exporter folded "
                "into its convolution) where the source model counts the convolution before its norm: their "
                "figures differ from the source's"
            )
        return chosen

    def _joins(self, layer: OnnxLayer) -> bool:
        """Whether ``layer`` (an Add, a Mul) joins two layers (a residual connection), not a bias or a scale:
        the walk from a weighted layer stops there, as the torch and Keras backends' does."""
        return layer.op in ("Add", "Mul") and sum(i in self._by_value for i in self.node_inputs[id(layer.node)]) > 1

    # ---- identity -----------------------------------------------------------------------------
    def fingerprint(self) -> str:
        from onnx import numpy_helper

        digest = hashlib.sha256()
        for weight in self.proto.graph.initializer:
            array = np.ascontiguousarray(numpy_helper.to_array(weight))
            digest.update(f"{weight.name}:{array.shape}:{array.dtype}".encode())
            digest.update(array.tobytes())
        return digest.hexdigest()

    def weights_digest(self) -> str:
        from onnx import numpy_helper

        return weights_digest((w.name, numpy_helper.to_array(w)) for w in self.proto.graph.initializer)

    # ---- running ------------------------------------------------------------------------------
    def _prepare(self, x: np.ndarray) -> np.ndarray:
        """Images (n, H, W, C) -> what the model takes: the convention's preprocessing, then channels first."""
        x = np.asarray(x, np.float32)
        pre = getattr(self, "_preprocess", None)
        if pre is not None:
            if pre.bgr:
                x = x[..., ::-1]
            x = (x - np.asarray(pre.mean, np.float32)) / np.asarray(pre.std, np.float32)
        if self.channels_first:
            x = x.transpose(0, 3, 1, 2)
        return np.ascontiguousarray(x, self._input_dtype)

    def forward(self, x: np.ndarray, layers: tuple[str, ...] = (), *, progress=None) -> tuple:
        targets = []
        for name in layers:
            span = name.endswith(RANGE_TAP) and not self.layer_graph.has(name)
            targets.append((self.step(name[: -len(RANGE_TAP)] if span else name), span))
        fetch = tuple(dict.fromkeys(layer.value for layer, _ in targets if layer.value != self.output_name))
        outs, acts = [], [[] for _ in targets]
        for start in range(0, len(x), self.batch_size):
            batch = x[start : start + self.batch_size]
            values = self._run(self._prepare(batch), fetch)
            by_value = dict(zip(fetch, values[1:]))
            by_value[self.output_name] = values[0]
            outs.append(np.asarray(values[0], np.float32).reshape(len(batch), -1))
            for store, (layer, span) in zip(acts, targets):
                value = np.asarray(by_value[layer.value], np.float32)
                if span:
                    flat = value.reshape(len(value), -1)
                    store.append(np.stack([flat.min(axis=1), flat.max(axis=1)], axis=1))
                else:
                    store.append(_neuron_values(value, layer.channel_axis))
            if progress is not None:
                progress.update(len(batch))
        out = np.concatenate(outs) if outs else np.zeros((0, self.n_classes), np.float32)
        return refuse_nan_outputs(out), [
            np.concatenate(a) if a else np.zeros((0, 2 if span else layer.neurons), np.float32)
            for a, (layer, span) in zip(acts, targets)
        ]

    def feature_maps(self, layers: tuple[str, ...]):
        chosen = [self.step(name) for name in layers]

        def run(x):
            values = self._run(self._prepare(x), tuple(layer.value for layer in chosen))[1:]
            return [np.moveaxis(np.asarray(v, np.float32), layer.channel_axis, -1) for v, layer in zip(values, chosen)]

        return run

    def device_info(self) -> dict:
        """Where it runs and in what precision, as analysis.json and campaign.json record them (information only):
        "int8" for a quantised export."""
        quantised = any(node.op_type in _QUANTISED for node in self.proto.graph.node)
        if self._device_info["device"] != "cpu":
            self._session(())  # where onnxruntime really runs it: its CUDA provider may not start
        return dict(self._device_info, precision="int8" if quantised else "fp32")

    def head_activation(self) -> str:
        return "softmax" if self._softmax_out else "linear"

    # ---- conventions and shipping ---------------------------------------------------------------
    def own_convention(self) -> InputConvention:
        return InputConvention()

    def measured_as(self, convention: InputConvention, *, wrapped: InputConvention | None) -> "OnnxNetwork":
        if convention.image_shape is not None and tuple(convention.image_shape) != tuple(self.input_shape):
            raise ModelError(
                f"--image-shape is for Keras models taking flat inputs; this ONNX model takes {self.input_shape}"
            )
        if wrapped is not None and wrapped == convention:
            return self
        return OnnxNetwork(
            self.source, batch_size=self.batch_size, task=self._task_given, convention=convention, device=self._device
        )

    def on_images(self, image_shape: tuple) -> "OnnxNetwork":
        if tuple(self.input_shape) == tuple(image_shape):
            return self
        raise ModelError(f"the images are {tuple(image_shape)} and this ONNX model takes {self.input_shape}")

    def recipe(self) -> tuple[str, bytes]:
        return ".onnx", self.source.data


def _neuron_values(value: np.ndarray, axis: int) -> np.ndarray:
    """(n, ...) -> (n, neurons): the ``axis`` units averaged over every other axis (torch_graph.neuron_values)."""
    if value.ndim <= 2:
        return value.reshape(len(value), -1)
    moved = np.moveaxis(value, axis, -1).reshape(len(value), -1, value.shape[axis])
    return moved.mean(axis=1)
