"""The layer graph of a model, framework-neutral: the queries idcgen asks of a model's layers (which layers there
are, which are hidden, the default subject layer, the layers relevance can reach, the layers neurons are
counted in) written once, over plain records each backend fills from its own graph (docs/design.md, "The
framework boundary").

A backend describes every layer (call) of its model, in topological order, as a :class:`LayerRecord`: its name,
its kind, its output shape, the layers it reads and a few facts only the framework can tell (weights, dropout,
the LRP rule that explains it). :class:`LayerGraph` answers the queries from those records alone, so a Keras
model, a PyTorch program and any other backend's model get the same answers and the same messages; the network
classes take them through :class:`GraphQueries`. No framework is imported here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Collection, Iterable

from ..errors import LayerError
from . import LayerInfo


@dataclass(eq=False)
class LayerRecord:
    """One layer (call) as the layer graph sees it.

    ``inputs`` names what the layer reads, in argument order: other layers, or anything that is not a layer of
    the graph (the model's input, a constant), which counts as an input but is never followed. ``shape`` is
    the output shape without the batch axis (``batch``: that axis as the framework reports it, None when any
    size goes); ``neurons`` its neurons (units or channels; default: the last axis)."""

    name: str
    op: str  # the layer's kind: a Keras class name, an ATen operation, an ONNX operator type
    shape: tuple
    inputs: tuple = ()
    neurons: int | None = None
    weighted: bool = False  # has weights (DeepXplore's neuron coverage counts these)
    dropout: bool = False  # drops units in training (MC dropout samples these)
    #: identity at inference (dropout, noise) or a reshape: skipped when walking back from the logits to the
    #: default subject layer, and looked through for a classifier under a flatten (docs/design.md, "Relevance")
    transparent: bool = False
    #: "follower" (normalisation, dropout) or "activation": counted with the weighted layer before it in
    #: `LayerGraph.neuron_layers`, the activation's output taken instead of the weighted layer's
    role: str = ""
    rule: str = "none"  # how relevance goes back through it (`GraphQueries.rule_label`); "none": no LRP rule
    outputs: int = 1  # output tensors; only a layer of one is a subject layer
    per_input: bool = True  # False: its first axis is known not to hold one row per input
    batch: object = None
    ref: object = None  # the framework's own object for this layer (a Keras graph step, a torch Layer)

    def __post_init__(self):
        self.shape = tuple(self.shape)
        self.inputs = tuple(self.inputs)
        if self.neurons is None:
            self.neurons = int(self.shape[-1]) if self.shape and self.shape[-1] else 0


def listed(names: list[str], limit: int, head: int, tail: int) -> str:
    """``names`` joined, the middle left out past ``limit`` of them."""
    return ", ".join(names) if len(names) <= limit else ", ".join(names[:head] + ["..."] + names[-tail:])


class LayerGraph:
    """The layers of one model (records in topological order) with its logits layer, and every query on them.

    ``logits``: the layer whose output is the class scores (or a regression model's pre-activation); the
    *classifier* is that layer, or the weighted layer under the reshapes and dropout above it that computes
    the same scores (a 1x1 convolution classifier); the *hidden* layers are those the classifier depends on.
    ``aliases``: other names a layer answers to (a PyTorch module's path for its last operation).
    ``reached``: a callable giving the names of the layers relevance from the logits reaches, computed on first
    use (default: every layer the logits depend on; a backend whose LRP holds some inputs constant, as
    attention weights, gives its own). ``classifier``: the classifier's name, where the backend finds it
    otherwise (an ONNX integer matmul under its scale and bias layers)."""

    def __init__(
        self,
        records: Iterable[LayerRecord],
        *,
        logits: str,
        aliases: dict[str, str] | None = None,
        reached: Callable[[], Iterable[str]] | None = None,
        classifier: str | None = None,
    ):
        self.records = list(records)
        self.by_name = {r.name: r for r in self.records}
        self.index = {r.name: i for i, r in enumerate(self.records)}
        self.aliases = dict(aliases or {})
        self._readers: dict[str, list[LayerRecord]] = {}
        for r in self.records:
            for name in dict.fromkeys(r.inputs):
                if name in self.by_name:
                    self._readers.setdefault(name, []).append(r)
        self.logits = self.by_name[logits]
        self.classifier = self.by_name[classifier] if classifier else self._classifier(self.logits)
        self.hidden = {r.name for r in self.ancestors(self.classifier)} - {self.classifier.name}
        self._reached_by = reached
        self._reached: set[str] | None = None

    # ---- structure ----------------------------------------------------------------------------------
    def names(self) -> list[str]:
        return [r.name for r in self.records]

    def has(self, name: str) -> bool:
        return name in self.by_name or name in self.aliases

    def get(self, name: str) -> LayerRecord:
        """The layer named ``name`` (or an alias of it); a LayerError naming the valid ones."""
        record = self.by_name.get(self.aliases.get(name, name))
        if record is None:
            names = self.names()
            shown = listed(names, 40, 20, 10) + (
                f" ({len(names)} in all: see `idcgen layers`)" if len(names) > 40 else ""
            )
            raise LayerError(f"unknown layer {name!r}; valid layers: {shown}")
        return record

    def producers(self, record: LayerRecord) -> list[LayerRecord]:
        """The layers ``record`` reads (not the model input or constants)."""
        return [self.by_name[n] for n in record.inputs if n in self.by_name]

    def readers(self, record: LayerRecord) -> list[LayerRecord]:
        """The layers reading ``record``'s output, each once."""
        return self._readers.get(record.name, [])

    def ancestors(self, record: LayerRecord) -> list[LayerRecord]:
        """Every layer ``record`` depends on, itself included."""
        return self._closure(record, self.producers)

    def descendants(self, record: LayerRecord) -> list[LayerRecord]:
        """Every layer computed from ``record``'s output, itself included."""
        return self._closure(record, self.readers)

    @staticmethod
    def _closure(record, neighbours) -> list:
        seen: dict[str, LayerRecord] = {}
        todo = [record]
        while todo:
            cur = todo.pop()
            if cur.name not in seen:
                seen[cur.name] = cur
                todo.extend(neighbours(cur))
        return list(seen.values())

    def _classifier(self, logits: LayerRecord) -> LayerRecord:
        """``logits``, or, when it only reshapes or drops out, the weighted layer below it whose output holds
        exactly the class scores (a 1x1 convolution over a 1x1 map, as MobileNet V1 and V3 end)."""
        scores = math.prod(d for d in logits.shape if d is not None)
        below = logits
        while below.transparent and len(below.inputs) == 1:
            producer = self.by_name.get(below.inputs[0])
            if producer is None:
                return logits
            below = producer
            if below.weighted:
                size = math.prod(below.shape) if all(d is not None for d in below.shape) else -1
                return below if size == scores and below.outputs == 1 else logits
        return logits

    def reached(self) -> set[str]:
        """The layers relevance from the logits reaches (itself included)."""
        if self._reached is None:
            found = (
                self._reached_by() if self._reached_by is not None else (r.name for r in self.ancestors(self.logits))
            )
            self._reached = set(found)
        return self._reached

    # ---- the queries ---------------------------------------------------------------------------------
    def layers_info(self, *, batch_axis: bool) -> list[LayerInfo]:
        """Name, kind, output shape (with the batch axis or without) and neurons of every layer."""
        return [
            LayerInfo(r.name, r.op, (r.batch, *r.shape) if batch_axis else r.shape, int(r.neurons or 0))
            for r in self.records
        ]

    def output_shape(self, name: str) -> tuple:
        record = self.get(name)
        return (record.batch, *record.shape)

    def is_hidden(self, name: str) -> bool:
        """Whether the classifier depends on layer ``name``'s output (and it is not the classifier)."""
        return self.get(name).name in self.hidden

    def default_layer(self) -> str:
        """The last hidden layer before the logits (the paper's penultimate layer): walk back from the
        classifier's first input while that layer only reshapes or drops out."""
        record = self.classifier
        while True:
            below = self.by_name.get(record.inputs[0]) if record.inputs else None
            if below is None:
                raise LayerError("the model has no hidden layer before its logits")
            if not below.transparent or len(below.inputs) != 1:
                return below.name
            record = below

    def check_subject_layer(self, name: str) -> LayerRecord:
        """The layer ``name`` if the logits depend on its one output (a hidden layer), else a LayerError
        saying where it is and naming the hidden layers."""
        record = self.get(name)
        if record.outputs != 1 or record.name not in self.hidden:
            hidden = [r.name for r in self.records if r.name in self.hidden]
            where = (
                "is the logits or after them"
                if record in self.descendants(self.classifier)
                else "does not lead to the logits"
            )
            raise LayerError(f"layer {name!r} {where}; choose a hidden layer: {listed(hidden, 30, 10, 10)}")
        return record

    def subject_layers(self, rows: Collection[str] | None = None) -> list[str]:
        """The hidden layers relevance can reach from the logits: every layer between has an LRP rule (one
        without blocks every layer below it). ``rows``: the layers with one row per input (None: all)."""
        reached, blocked = self.reached(), set()
        for record in self.records:
            if record.name in reached and record.name not in blocked and (record.rule == "none" or record.outputs != 1):
                for below in self.producers(record):
                    blocked |= {r.name for r in self.ancestors(below)}
        return [
            r.name
            for r in self.records
            if r.name in self.hidden
            and r.name in reached
            and r.name not in blocked
            and r.outputs == 1  # as `check_subject_layer` takes
            and r.per_input
            and (rows is None or r.name in rows)
        ]

    def neuron_layers(self, rows: Collection[str] | None = None) -> list[str]:
        """Every hidden layer with weights before the logits, as DeepXplore and DeepGauge count neurons.

        When a weighted layer is followed (through normalisation or dropout layers) by an activation layer,
        the activation layer's output is taken instead, so a ``Dense`` + ``Activation("relu")`` pair gives
        the ReLU outputs. Normalisation layers and activation layers with weights (PReLU) are not counted
        as layers of their own. ``rows``: the layers with one row per input (None: all)."""
        chosen = []
        for record in self.records:
            if record.name not in self.hidden or not record.weighted or record.role or not record.per_input:
                continue
            pick = cur = record
            while len(self.readers(cur)) == 1:  # follow a single reader through norm/dropout/activation
                nxt = self.readers(cur)[0]
                if nxt.name not in self.hidden or not nxt.role:
                    break
                if nxt.role == "activation":
                    pick = nxt
                cur = nxt
            if pick.name not in chosen:  # two weighted layers of one module (ONNX) before one activation
                chosen.append(pick.name)
        chosen = [name for name in chosen if rows is None or name in rows]
        if not chosen:
            raise LayerError(
                "the model has no hidden layer with weights before its logits; pass layers=[...] "
                f"from: {', '.join(self.names())}"
            )
        return chosen

    def weighted_layers(self) -> tuple[str, ...]:
        """The layers with weights before the classifier (DeepXplore's neuron coverage counts these)."""
        return tuple(r.name for r in self.records[: self.index[self.classifier.name]] if r.weighted)

    def dropout_layers(self) -> list[str]:
        return [r.name for r in self.records if r.dropout]

    def on_path(self, layer: str | None = None) -> list[LayerRecord]:
        """The layers relevance from the logits reaches, in order (``layer``: only those computed from it)."""
        reached = self.reached()
        below = None if layer is None else {r.name for r in self.descendants(self.get(layer))}
        return [r for r in self.records if r.name in reached and (below is None or r.name in below)]


class GraphQueries:
    """The layer queries of the network protocol (idcgen/framework/__init__.py), answered by the network's
    `LayerGraph` (``self.layer_graph``); a backend mixes this in before its protocol class."""

    layer_graph: LayerGraph

    def layer_names(self) -> list[str]:
        return self.layer_graph.names()

    def check_layer(self, name: str) -> str:
        """``name`` (or the layer it is an alias of) if the model has that layer, else a LayerError naming the
        valid ones."""
        return self.layer_graph.get(name).name

    def step(self, name: str):
        """The framework's object for the layer (call) named ``name``."""
        return self.layer_graph.get(name).ref

    def output_shape(self, name: str) -> tuple:
        return self.layer_graph.output_shape(name)

    def neuron_count(self, name: str) -> int:
        return int(self.layer_graph.get(name).neurons or 0)

    def default_layer(self) -> str:
        return self.layer_graph.default_layer()

    def is_hidden(self, name: str) -> bool:
        return self.layer_graph.is_hidden(name)

    def check_subject_layer(self, name: str) -> str:
        return self.layer_graph.check_subject_layer(name).name

    def subject_layers(self) -> list[str]:
        return self.layer_graph.subject_layers()

    def neuron_layers(self) -> list[str]:
        return self.layer_graph.neuron_layers()

    def weighted_layers(self) -> tuple[str, ...]:
        return self.layer_graph.weighted_layers()

    def dropout_layers(self) -> list[str]:
        return self.layer_graph.dropout_layers()

    def rule_label(self, name: str) -> str:
        return self.layer_graph.get(name).rule
