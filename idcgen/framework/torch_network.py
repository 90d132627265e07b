"""The PyTorch implementation of the framework protocol: a model exported with ``torch.export`` (from an
``nn.Module``, a TorchScript file, a ``.pt2`` program or a factory with weights), run on idcgen's images.

Images stay (n, H, W, C) in the convention's value range everywhere in idcgen; in front of the user's model
this network applies the preprocessing the convention names (mean/std, channel flip) and moves channels
first. Layers, neurons and rules: idcgen/framework/torch_graph.py and torch_lrp.py (docs/design.md,
"PyTorch").
"""

from __future__ import annotations

import copy
import hashlib
import io
import os
from pathlib import Path

import numpy as np
import torch

from ..convention import InputConvention
from ..errors import LayerError, ModelError
from . import RANGE_TAP, TASKS, LayerInfo, Network
from .common import refuse_nan_outputs, relevance_batch_size, rule_label_notes, weights_digest
from .device import (
    Batches,
    check_precision,
    free_memory,
    ieee_fp32,
    memory_batch_size,
    requested_device,
    torch_device,
)
from .layers import GraphQueries, LayerGraph, LayerRecord
from .torch_graph import PREPROCESS, TorchGraph, layout_free, op_name
from .torch_load import TorchModel, export, fit_threads, from_program, program_bytes, save_program
from .torch_load import load as _load
from .torch_lrp import PASS_THROUGH, Attention, Relevance, relevant_ancestors, rule_label, rule_of

_SOFTMAX = ("softmax", "_softmax", "log_softmax", "_log_softmax")
_SKIP_BEFORE_LOGITS = (
    "dropout",
    "feature_dropout",
    "alpha_dropout",
    "native_dropout",
    "flatten",
    "view",
    "reshape",
    "_unsafe_view",
    "clone",
    "contiguous",
)
_DROPOUT = ("dropout", "feature_dropout", "native_dropout")
_FOLLOWERS = ("batch_norm", "_native_batch_norm_legit_no_training", "layer_norm", "group_norm") + _DROPOUT
_ACTIVATIONS = tuple(sorted(PASS_THROUGH - set(_DROPOUT) - {"alpha_dropout"}))
_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def load_model(path, *, safe_mode: bool = True, architecture=None, input_shape=None) -> TorchModel:
    """The PyTorch model in ``path`` (``architecture``: the weights of a factory, or the factory of a
    weights file); ``safe_mode`` does not apply (TorchScript and .pt2 files hold no Python code)."""
    return _load(path, weights=architecture, image_shape=input_shape)


def limit_threads(threads: int) -> None:
    from .torch_load import limit_threads as limit

    limit(threads)


def _trainable(module) -> list:
    """The module's weights: its parameters, and the floating-point buffers a TorchScript program holds its
    weights in (not batch norm's running statistics)."""
    found = list(module.parameters())
    for name, buffer in list(module.named_buffers()):
        if buffer.is_floating_point() and "running_" not in name:
            owner, _, leaf = name.rpartition(".")
            weight = buffer.detach().clone().requires_grad_(True)  # the converter's buffers are not leaves
            setattr(module.get_submodule(owner) if owner else module, leaf, weight)
            found.append(weight)
    return found


def _sequence_first(layer, shapes) -> bool:
    """Whether ``layer``'s output on each (probe batch, shape) holds the batch on its second axis and the same
    count on its first (tokens), with its neurons after the batch's axis (sequence-first, batch_first=False)."""
    return (
        layer.channel_axis not in (0, 1)
        and all(len(s) >= 3 and s[1] == probe for probe, s in shapes)
        and len({s[0] for _, s in shapes}) == 1
    )


class TorchNetwork(GraphQueries, Network):
    """A PyTorch classifier or regression model, exported, with logits exposed and taps on named layers."""

    def __init__(
        self,
        model,
        *,
        batch_size: int | None = None,
        task: str | None = None,
        convention: InputConvention | None = None,
        input_shape=None,
        device=None,
        precision=None,
    ):
        if task not in TASKS + (None,):
            raise ModelError(f"the task must be one of {', '.join(TASKS)} (or left out to detect it); got {task!r}")
        if isinstance(model, torch.nn.Module):
            model = export(model, input_shape)  # traced where its weights are (a model already on its GPU)
        elif isinstance(model, torch.export.ExportedProgram):
            model = from_program(model, "torch.export program")
        if not isinstance(model, TorchModel):
            raise ModelError(f"expected a torch.nn.Module or torch.export program, got {type(model).__name__}")
        fit_threads()  # before the first parallel operation (docs/design.md, "PyTorch")
        self.source = model  # kept on the CPU: what ships the model to another process (recipe)
        self.model = self.inner = model
        self.convention = convention
        self._task_given = task
        self.device = torch_device(device)  # before anything is placed: a missing GPU is one line
        # what was asked ("cpu", "auto", "cuda"): a Ray worker runs where its driver was asked to
        self.device_asked = device.type if isinstance(device, torch.device) else requested_device(device).kind
        self.precision = check_precision(precision)
        self.graph = TorchGraph(self._placed(model.program))
        if not self.graph.layers:
            raise ModelError("the model has no layers")
        self.input_shape = tuple(model.image_shape)
        self._built: dict = {}
        self._preprocess = self._preprocess_of(convention)
        self._find_head(task)
        where, explicit = str(self.device), batch_size is not None
        # a batch size given is the relevance pass's too
        forward, relevance = (batch_size, batch_size) if batch_size else self._batch_sizes()
        self._forward_batches = Batches(forward, what="forward", device=where, explicit=explicit)
        self._relevance_batches = Batches(relevance, what="relevance", device=where, explicit=explicit)

    def _placed(self, program):
        """The program with its weights, constants and device arguments on the network's device (a copy:
        the CPU program stays what ``recipe`` ships)."""
        if self.device.type == "cpu":
            return program
        from torch.export.passes import move_to_device_pass

        ieee_fp32(torch)  # fp32 on the GPU as on the CPU: no TF32 convolutions

        return move_to_device_pass(torch.export.load(io.BytesIO(program_bytes(program))), self.device)

    @property
    def batch_size(self) -> int:
        """Inputs per forward batch: sized from the device's free memory (the CPU: a fixed budget), halved
        when one runs out of memory."""
        return self._forward_batches.size

    @batch_size.setter
    def batch_size(self, size: int) -> None:
        self._forward_batches.size = int(size)

    def device_info(self) -> dict:
        """The device and precision, as analysis.json and campaign.json record them (information only, never
        compared)."""
        info = {"device": str(self.device), "framework": f"torch {torch.__version__}"}
        if self.device.type == "cuda":
            info["name"] = torch.cuda.get_device_name(self.device)
        return dict(info, precision=self.precision)

    # ---- tensors across the boundary: host -> device once per batch, back once per batch -----------
    def to_device(self, x, dtype=np.float32) -> torch.Tensor:
        """A numpy batch as a tensor on the network's device: one copy, from pinned memory and not waited
        for on a GPU."""
        tensor = torch.from_numpy(np.ascontiguousarray(x, dtype=dtype))
        if self.device.type == "cuda":
            return tensor.pin_memory().to(self.device, non_blocking=True)
        return tensor.to(self.device)

    @staticmethod
    def to_host(tensor: torch.Tensor) -> np.ndarray:
        """A result tensor as numpy on the host (a float32 copy of bf16/fp16 values)."""
        tensor = tensor.detach()
        if tensor.is_floating_point() and tensor.dtype != torch.float32 and tensor.dtype != torch.float64:
            tensor = tensor.float()
        return tensor.cpu().numpy()

    def _release(self) -> None:
        """Give a failed batch's memory back to the device (before it is run again, halved)."""
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _autocast(self):
        """bf16/fp16 for forward-only work (coverage, the fuzz loop's forward); fp32 does nothing."""
        import contextlib

        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=_AUTOCAST[self.precision])

    # ---- the head -----------------------------------------------------------------------------
    def _find_head(self, task: str | None) -> None:
        graph = self.graph
        out = graph.output_node.all_input_nodes[0]
        while out not in graph.by_node and out.all_input_nodes:  # a getitem of a tuple output
            out = out.all_input_nodes[0]
        last = graph.by_node.get(out)
        if last is None:
            raise ModelError("the model's output is not computed from its input")
        self.head_note = None
        one_unit = last.shape == (1,)
        if last.op in _SOFTMAX:
            logits = last.inputs[0]
        elif one_unit and not last.weighted and task != "classification":
            logits = last  # a squashing (tanh, atan * 2) after the one output unit: explained from below it
            while logits.inputs and not logits.weighted and logits.shape == (1,):
                logits = logits.inputs[0]
            if logits is not last:
                self.head_note = (
                    f"the output comes from {last.name!r} ({last.op}); relevance starts from the "
                    f"pre-activation of {logits.name!r}"
                )
        else:
            logits = last
        if len(logits.shape) != 1:
            raise ModelError(
                f"the model's logits come from {logits.name!r} ({logits.op}, shape {logits.shape}), not "
                "one score per class; expected a final linear layer"
            )
        self.logits_layer_ = logits
        self.layer_graph = self._layer_graph(logits)
        classifier = self.layer_graph.classifier.ref
        if not classifier.weighted:
            raise ModelError(
                f"the model's output comes from {classifier.name!r} ({classifier.op}), not a classifier or "
                "regression head; expected a final linear layer (logits) or a softmax"
            )
        self.classifier_ = classifier
        self.logits_layer = classifier.name
        self.n_classes = int(logits.shape[0])
        if task == "regression" and self.n_classes != 1:
            raise ModelError(
                f"--task regression needs a model whose output is one unit; this one gives "
                f"{self.n_classes}; leave --task out or give classification"
            )
        self.task = task or ("regression" if self.n_classes == 1 and last.op not in _SOFTMAX else "classification")

    def _batch_sizes(self) -> tuple[int, int]:
        """Inputs per forward and per relevance batch. The CPU: fixed budgets (64 MB over the widest layer's
        values; relevance_batch_size's over every value); a GPU: its free memory over a few live values of the
        widest layer (the executor frees each value after its last reader), and over every value."""
        sizes = [layer.size for layer in self.graph.layers]  # a windowed layer: all its windows
        largest, values = max(sizes), sum(sizes)
        free = free_memory(self.device)
        if free is None:
            return int(np.clip(64 * 2**20 // (12 * largest), 32, 1024)), relevance_batch_size(values)
        return memory_batch_size(4 * largest, free, smallest=32), memory_batch_size(values, free, largest=4096)

    # ---- running ------------------------------------------------------------------------------
    def _preprocess_of(self, convention):
        """(scale, offset, channel flip) of the convention's preprocessing, as tensors, or None."""
        pre = None if convention is None else convention.preprocess
        if pre is None:
            return None
        pre.check_channels(self.input_shape[-1])
        mean, std = np.asarray(pre.mean, np.float32), np.asarray(pre.std, np.float32)
        return self.to_device(1.0 / std), self.to_device(-mean / std), bool(pre.bgr)

    def _prepare(self, x: torch.Tensor, after=None) -> torch.Tensor:
        """Images (n, H, W, C) -> what the user's model takes: preprocessing, then channels first."""
        if self._preprocess is not None:
            scale, offset, bgr = self._preprocess
            if bgr:
                x = x.flip(-1)
            x = x * scale + offset
            if after is not None:
                x = after(PREPROCESS, (x,), x)
        if self.source.channels_first:
            # a copy in NCHW's own strides, as a user's DataLoader gives: the permuted view is channels-last in
            # memory, convolutions keep that layout, and a model's x.view(x.size(0), -1) then fails on it
            x = x.permute(0, 3, 1, 2).clone(memory_format=torch.contiguous_format)
        return x

    def run(self, x: torch.Tensor, *, keep=(), until=None, after=None) -> dict:
        """The graph's values on images ``x`` (see TorchGraph.run)."""
        keep = tuple(keep) + (self.logits_layer_.node,)
        return self.graph.run(self._prepare(x, after), keep=keep, until=until, after=after)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Differentiable logits of image tensor ``x``."""
        return self.run(x, until=self.logits_layer_.node)[self.logits_layer_.node]

    def forward(self, x: np.ndarray, layers: tuple[str, ...] = (), *, progress=None):
        targets = [self._tap_target(name) for name in layers]
        keep = tuple(layer.node for layer, _ in targets)
        outs, acts = [], [[] for _ in layers]

        def step(start, stop):
            with torch.inference_mode(), self._autocast():
                env = self.run(self.to_device(x[start:stop]), keep=keep)
                values = [self.graph.output_value(env)]
                for layer, span in targets:
                    value = env[layer.node]
                    if span:
                        flat = layer.per_image(value)[0]
                        flat = flat.reshape(len(flat), -1)
                        values.append(torch.stack([flat.min(dim=1).values, flat.max(dim=1).values], dim=1))
                    else:
                        values.append(layer.neurons_of(value))
                del env
            host = [self.to_host(v) for v in values]  # appended only once the whole batch is done
            outs.append(host[0])
            for store, value in zip(acts, host[1:]):
                store.append(value)
            if progress is not None:
                progress.update(stop - start)

        self._forward_batches.run(len(x), step, release=self._release)
        out = np.concatenate(outs) if outs else np.zeros((0, self.n_classes), np.float32)
        return refuse_nan_outputs(out), [
            np.concatenate(a) if a else np.zeros((0, 2 if span else layer.neurons), np.float32)
            for a, (layer, span) in zip(acts, targets)
        ]

    def _tap_target(self, name: str):
        if name.endswith(RANGE_TAP) and not self.graph.has(name):
            return self.graph.layer(self._check_rows(self.check_layer(name[: -len(RANGE_TAP)]))), True
        return self.graph.layer(self._check_rows(self.check_layer(name))), False

    #: probe batch sizes that a layer's first (or, sequence-first, second) axis matches only when it is the
    #: batch's: primes, not a product of the batch with tokens or heads, and two, so that no count of tokens
    #: equals both
    _PROBES = (7, 5)

    def _batch_first(self) -> frozenset:
        """The layers with a row per input, by a run on each probe batch: those whose first axis is the batch's
        and the sequence-first ones, whose second axis is, which it marks (``Layer.batch_axis``) with their shape
        per input. Inside some modules the rows are not inputs: nn.MultiheadAttention runs on (tokens x batch, d)
        tensors, so one input would count as several (docs/design.md, "PyTorch")."""

        def build():
            runs = []
            for probe in self._PROBES:
                shapes = self._probe_shapes(probe)
                if shapes is None:  # a program that runs one batch size only: its layers' rows cannot be told apart
                    return frozenset(layer.name for layer in self.graph.layers)
                runs.append((probe, shapes))
            rows = set()
            for layer in self.graph.layers:
                shapes = [(probe, found.get(layer.node, ())) for probe, found in runs]
                # a windowed layer (Swin) holds its windows on the first axis, batch-major: probe x windows rows
                if all(s[:1] == (probe * max(layer.windows, 1),) for probe, s in shapes):
                    rows.add(layer.name)
                elif _sequence_first(layer, shapes):
                    layer.batch_axis, layer.windows = 1, 1
                    layer.shape = (shapes[0][1][0], *shapes[0][1][2:])
                    rows.add(layer.name)
            return frozenset(rows)

        return self.cached("batch-first layers", build)

    def _probe_shapes(self, probe: int) -> dict | None:
        """Every value's shape on a batch of ``probe`` images; None where the program does not run on it."""
        shapes = {}

        def after(node, args, value):
            if isinstance(value, torch.Tensor):
                shapes[node] = tuple(value.shape)
            return value

        try:
            with torch.inference_mode():  # on the device: a probe on the CPU fails against a GPU's weights
                self.run(torch.zeros((probe, *self.input_shape), device=self.device), after=after)
        except Exception:
            return None
        return shapes

    def _check_rows(self, name: str) -> str:
        if name not in self._batch_first():
            shape = self.graph.layer(name).node.meta.get("val")
            shape = tuple(shape.shape) if isinstance(shape, torch.Tensor) else "?"
            raise LayerError(
                f"layer {name!r} has no row per input: it does not keep the images on its first axis "
                f"(traced shape "
                f"{shape} for a batch of the program's example; inside nn.MultiheadAttention the tensors "
                "are (tokens x batch, ...)), so its neurons cannot be measured per input; choose a "
                "layer outside it, such as the block's output, or where the tokens are batch-first again "
                "(see `idcgen layers`, 'subject layers')"
            )
        return name

    def feature_maps(self, layers: tuple[str, ...]):
        chosen = [self.graph.layer(self.check_layer(name)) for name in layers]
        for layer in chosen:
            if layer.windows != 1:
                raise LayerError(
                    f"layer {layer.name!r} is computed per window (its first axis is batch x windows): "
                    "it has no per-image feature map; choose a layer after the windows are merged back"
                )

        def run(x):
            with torch.inference_mode(), self._autocast():
                env = self.run(self.to_device(x), keep=tuple(layer.node for layer in chosen))
            return [self.to_host(torch.movedim(*layer.per_image(env[layer.node]), -1)) for layer in chosen]

        return run

    # ---- layers -----------------------------------------------------------------------------
    def _layer_graph(self, logits) -> LayerGraph:
        """The layer graph of the program's layers (idcgen/framework/layers.py)."""
        graph = self.graph
        if any(layer.windows == 0 for layer in graph.layers):  # sequence-first ones among them: found and marked
            self._batch_first()
        records = (
            LayerRecord(
                layer.name,
                layer.op,
                layer.shape,
                tuple(below.name for below in layer.inputs),
                neurons=layer.neurons,
                weighted=layer.weighted,
                dropout=layer.op in _DROPOUT,
                transparent=layer.op in _SKIP_BEFORE_LOGITS,
                role="follower" if layer.op in _FOLLOWERS else "activation" if layer.op in _ACTIVATIONS else "",
                rule=rule_label(layer, graph),
                per_input=layer.windows != 0,  # (nn.MultiheadAttention's (tokens x batch, dims))
                ref=layer,
            )
            for layer in graph.layers
        )

        def reached():  # not what only feeds attention weights or gates, which their rules hold constant
            return [layer.name for layer in relevant_ancestors(logits, graph)]

        return LayerGraph(records, logits=logits.name, aliases=graph.aliases, reached=reached)

    layer = GraphQueries.step

    def layers_info(self) -> list[LayerInfo]:
        return self.layer_graph.layers_info(batch_axis=False)

    def check_subject_layer(self, name: str) -> str:
        name = self.layer_graph.check_subject_layer(name).name
        if name not in self.layer_graph.reached():
            return name  # off relevance's path (attention scores): the relevance pass says so, better
        return self._check_rows(name)

    def subject_layers(self) -> list[str]:
        return self.layer_graph.subject_layers(rows=self._batch_first())

    def neuron_layers(self) -> list[str]:
        return self.layer_graph.neuron_layers(rows=self._batch_first())  # not what has no row per input

    def rule_notes(self, layer: str | None) -> list[str]:
        steps = self.relevance(layer).steps if layer is not None else [r.ref for r in self.layer_graph.on_path()]
        return rule_label_notes((step.name, step.op, rule_label(step, self.graph)) for step in steps)

    # ---- identity -----------------------------------------------------------------------------
    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for name, value in self.graph.module.state_dict().items():
            array = np.ascontiguousarray(value.detach().cpu().numpy())
            digest.update(f"{name}:{array.shape}:{array.dtype}".encode())
            digest.update(array.tobytes())
        return digest.hexdigest()

    def weights_digest(self) -> str:
        state = self.graph.module.state_dict().items()
        return weights_digest((name, value.detach().cpu().numpy()) for name, value in state)

    # ---- relevance and gradients ----------------------------------------------------------------
    def relevance(
        self, layer: str | None, *, eps: float = 1e-7, batch_size: int | None = None, attention: str | None = None
    ):
        """`torch_lrp.Relevance`. Attention takes CP-LRP's rule (its weights held constant); AttnLRP's rule,
        an option on Keras models (``attention="attnlrp"``, IDCGEN_ATTENTION_RULE), is not implemented here."""
        sized = self._relevance_batches
        explicit = batch_size is not None and batch_size != sized.size  # passes.py asks with the sized one
        rel = Relevance(self, layer=layer, eps=eps, batch_size=batch_size if explicit else sized.size)
        rel.batches = (
            Batches(batch_size, what="relevance", device=str(self.device), explicit=True) if explicit else sized
        )  # halved here, halved for the next pass too
        rel.release = self._release
        chosen = attention or os.environ.get("IDCGEN_ATTENTION_RULE") or "cp"
        if chosen != "cp" and any(isinstance(rule_of(step, self.graph), Attention) for step in rel.steps):
            raise LayerError(f"attention rule {chosen!r}: PyTorch models take CP-LRP's rule only ('cp')")
        return rel

    def relevance_batch_size(self) -> int:
        return self._relevance_batches.size

    def gradients(self, kind: str, **spec):
        from .torch_attacks import gradient_function

        return gradient_function(self, kind, **spec)

    def attack(self, name: str, x: np.ndarray, labels: np.ndarray | None, **params) -> np.ndarray:
        from .torch_attacks import attack

        return attack(self, name, x, labels, **params)

    def head_activation(self) -> str:
        out = self.graph.output_node.all_input_nodes[0]
        return "linear" if out is self.logits_layer_.node else op_name(out)

    def dropout_outputs(self, x: np.ndarray, passes: int, rng: np.random.Generator) -> np.ndarray:
        dropped = {layer.node for layer in self.graph.layers if layer.op in _DROPOUT}
        if not dropped:
            return super().dropout_outputs(x, passes, rng)

        def after(node, args, value):
            if node not in dropped:
                return value
            rate = float(args[1]) if len(args) > 1 else 0.5
            shape = value.shape if op_name(node) != "feature_dropout" else (*value.shape[:2], *[1] * (value.dim() - 2))
            keep = self.to_device((rng.random(shape) >= rate).astype(np.float32) / max(1.0 - rate, 1e-12))
            return args[0] * keep

        runs = []
        with torch.inference_mode():
            images = self.to_device(x)  # once for every pass
            for _ in range(passes):
                env = self.run(images, after=after)
                runs.append(self.graph.output_value(env))
        return np.stack([self.to_host(run) for run in runs]).astype(np.float64)

    # ---- conventions, training, shipping -------------------------------------------------------
    def own_convention(self) -> InputConvention:
        return InputConvention()

    def measured_as(self, convention: InputConvention, *, wrapped: InputConvention | None) -> "TorchNetwork":
        if convention.image_shape is not None and tuple(convention.image_shape) != tuple(self.input_shape):
            raise ModelError(
                f"--image-shape is for Keras models taking flat inputs; this PyTorch model takes {self.input_shape}"
            )
        if wrapped is not None and wrapped == convention:
            return self
        placed = TorchNetwork(
            self.source, task=self._task_given, convention=convention, device=self.device, precision=self.precision
        )
        placed.device_asked = self.device_asked
        return placed

    def on_images(self, image_shape: tuple) -> "TorchNetwork":
        if tuple(self.input_shape) == tuple(image_shape):
            return self
        raise ModelError(f"the images are {tuple(image_shape)} and this PyTorch model takes {self.input_shape}")

    def retrained(
        self, x: np.ndarray, y: np.ndarray, *, mode: str, epochs: int, batch_size: int = 256, random_state: int = 0
    ) -> "TorchNetwork":
        """A copy fine-tuned (Adam, lr 1e-4) or trained from scratch (Adadelta, lr 1.0, as the Keras side)
        with cross-entropy on the logits; from scratch needs the module's code (a factory or nn.Module)."""
        torch.manual_seed(random_state)
        if mode == "scratch":
            if self.source.module is None:
                raise ModelError(
                    "training from scratch rebuilds the model from its code: give it as "
                    "--model package.module:make_model (a TorchScript or .pt2 file can be fine-tuned)"
                )
            module = copy.deepcopy(self.source.module)
            for sub in module.modules():
                if hasattr(sub, "reset_parameters"):
                    sub.reset_parameters()
            optimizer = torch.optim.Adadelta(module.to(self.device).parameters(), lr=1.0, rho=0.95)
        else:
            if self.source.module is not None:
                module = copy.deepcopy(self.source.module).to(self.device)
            else:  # a fresh copy of a program (re-read), with its device arguments on the device too
                program = torch.export.load(io.BytesIO(program_bytes(self.source.program)))
                module = layout_free(self._placed(program).module())
            optimizer = torch.optim.Adam(_trainable(module), lr=1e-4)  # once placed: it holds the tensors
        if self.source.module is not None:  # a program's module stays in the mode it was exported in
            module.train()
        images, labels = np.asarray(x, np.float32), np.asarray(y, np.int64)
        generator = torch.Generator().manual_seed(random_state)  # on the CPU: the same order on every device
        for _ in range(epochs):
            order = torch.randperm(len(images), generator=generator).numpy()
            for start in range(0, len(images), batch_size):
                idx = order[start : start + batch_size]
                batch = self._prepare(self.to_device(images[idx]))
                loss = torch.nn.functional.cross_entropy(module(batch), self.to_device(labels[idx], np.int64))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        for buffer in module.buffers():
            buffer.requires_grad_(False)
        model = export(module, self.input_shape, origin=f"{self.source.origin}, retrained", device=self.device)
        if self.device.type != "cpu":  # the source program stays on the CPU (what recipe ships)
            from torch.export.passes import move_to_device_pass

            model.program = move_to_device_pass(model.program, "cpu")
        trained = TorchNetwork(
            model, task=self._task_given, convention=self.convention, device=self.device, precision=self.precision
        )
        trained.device_asked = self.device_asked
        return trained

    def recipe(self) -> tuple[str, bytes]:
        return ".pt2", program_bytes(self.source.program)

    def save(self, path) -> Path:
        """The user's model as a ``.pt2`` program file (what load_model reads back)."""
        return save_program(self.source.program, path)
