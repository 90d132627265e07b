"""A Keras model as one flat graph of *steps*: every layer call is a step, nested models are expanded.

Keras 3 keeps a functional model as nodes grouped by depth; a model used inside another model (a
``keras.applications`` backbone inside a ``Sequential`` wrapper, say) is one opaque node there. idcgen
needs every layer of the whole network by name, in one topological order, with the tensors between them,
so that forward taps and relevance propagation (docs/design.md, "Relevance on graphs") can reach any
layer however deeply it is nested. `Graph` expands nested functional and sequential models into their
layers and numbers every tensor; `Graph.run` executes the steps as Keras would (each call with its own
recorded arguments, so ``Concatenate(axis=...)``, ``keras.ops`` calls and shared layers behave as in the
model).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field

from ..errors import ModelError

#: Held while a traced function's Python body runs: relevance and logits temporarily call a layer with
#: its activation removed (at trace time only), and no other trace may see the layer in that state.
TRACE_LOCK = threading.RLock()


class AnyBatch:
    """``fn`` as a tf.function traced once for every batch size: its signature is the first call's tensors with
    the batch axis unknown. ``reduce_retracing`` alone traces a second time for the first other size (a
    shorter last batch), and a trace of a keras.applications network's relevance pass takes 10-30 s on a CPU
    (ResNet50: about as long as its relevance on 300 images). A call whose other axes differ from the first
    (a fully convolutional model given another image size) runs a plain tf.function instead."""

    def __init__(self, fn):
        self.fn, self._signature, self._any, self._other = fn, None, None, None

    def __call__(self, *args):
        import tensorflow as tf

        args = [tf.convert_to_tensor(a) for a in args]
        if self._any is None:
            self._signature = [tf.TensorSpec((None, *a.shape[1:]), a.dtype) for a in args]
            self._any = tf.function(self.fn, input_signature=self._signature)
        if all(spec.is_compatible_with(a) for spec, a in zip(self._signature, args)):
            return self._any(*args)
        if self._other is None:
            self._other = tf.function(self.fn, reduce_retracing=True)
        return self._other(*args)


@contextlib.contextmanager
def without_activation(layer):
    """Let ``layer`` compute its pre-activation (read at trace time, so the traced graph keeps it)."""
    activation = getattr(layer, "activation", None)
    if activation is None:
        yield
        return
    import keras

    with TRACE_LOCK:
        layer.activation = keras.activations.linear
        try:
            yield
        finally:
            layer.activation = activation


def neuron_activations(outputs):
    """(n, ..., C) layer output -> (n, C): dense units as they are, channels by spatial mean."""
    import tensorflow as tf

    if len(outputs.shape) > 2:
        return tf.reduce_mean(outputs, axis=list(range(1, len(outputs.shape) - 1)))
    return outputs


@dataclass(eq=False)
class Step:
    """One call of one layer: its input and output tensors as keys of the graph."""

    name: str
    layer: object
    node: object | None  # the Keras node of this call; None: a plain one-input call
    inputs: tuple[int, ...]  # input tensor keys, in the order of ``node.input_tensors``
    outputs: tuple[int, ...]
    output_shapes: tuple[tuple, ...]
    kind: str = field(default="")  # the layer's class name

    def call(self, inputs, *, linear: bool = False):
        """Run this step on ``inputs`` (tensors in ``self.inputs`` order); ``linear``: pre-activation."""
        import keras

        if self.node is None:
            args, kwargs = (inputs[0],), {}
        else:
            args, kwargs = self.node.arguments.fill_in(
                {id(kt): value for kt, value in zip(self.node.input_tensors, inputs)}
            )
        if isinstance(self.layer, keras.layers.Layer):
            kwargs = dict(kwargs, training=False)
        context = without_activation(self.layer) if linear else contextlib.nullcontext()
        with context:
            out = self.layer(*args, **kwargs)
        return list(out) if isinstance(out, (list, tuple)) else [out]


class Graph:
    """The steps of a single-input, single-output Keras model, nested models expanded.

    Attributes: ``steps`` (topological order), ``input_key``, ``output_key``, ``producer`` (tensor key ->
    index of the step that makes it), ``consumers`` (tensor key -> indices of the steps that read it).
    """

    def __init__(self, model):
        import keras

        if len(model.inputs) != 1 or len(model.outputs) != 1:
            raise ModelError(
                f"the model has {len(model.inputs)} inputs and {len(model.outputs)} outputs; "
                "idcgen expects one image input and one output"
            )
        self.steps: list[Step] = []
        self._keys = 0
        self._names: dict[str, int] = {}
        self.input_key = self._new_key()
        (self.output_key,) = self._expand(model, [self.input_key], keras)
        self.producer = {k: i for i, s in enumerate(self.steps) for k in s.outputs}
        self.consumers: dict[int, list[int]] = {}
        for i, s in enumerate(self.steps):
            for k in dict.fromkeys(s.inputs):
                self.consumers.setdefault(k, []).append(i)
        self.by_name = {s.name: s for s in self.steps}

    # ---- building -------------------------------------------------------------------------------
    def _new_key(self) -> int:
        self._keys += 1
        return self._keys - 1

    def _unique(self, name: str) -> str:
        """Layer names are unique within one Keras model, not across nested ones, and a shared layer is
        called more than once: later calls get ``name:2``, ``name:3``..."""
        count = self._names.get(name, 0) + 1
        self._names[name] = count
        return name if count == 1 else f"{name}:{count}"

    def _expand(self, model, in_keys: list[int], keras) -> list[int]:
        functional = getattr(model, "_functional", None) if isinstance(model, keras.Sequential) else model
        if isinstance(model, keras.Sequential) and functional is None:
            key = in_keys[0]  # an unbuilt-by-Input Sequential: its layers form a chain
            for layer in model.layers:
                key = self._add(layer, None, [key], [tuple(layer.output.shape)])[0]
            return [key]
        ids = {id(t): k for t, k in zip(functional.inputs, in_keys)}
        for depth in sorted(functional._nodes_by_depth, reverse=True):
            for node in functional._nodes_by_depth[depth]:
                if node.is_input or not node.operation:
                    continue
                op, keys = node.operation, [ids[id(t)] for t in node.input_tensors]
                if isinstance(op, keras.Model) and (isinstance(op, keras.Sequential) or hasattr(op, "_nodes_by_depth")):
                    outs = self._expand(op, keys, keras)
                else:
                    outs = self._add(op, node, keys, [tuple(t.shape) for t in node.outputs])
                for t, k in zip(node.outputs, outs):
                    ids[id(t)] = k
        return [ids[id(t)] for t in functional.outputs]

    def _add(self, layer, node, in_keys, shapes) -> list[int]:
        outs = [self._new_key() for _ in shapes]
        self.steps.append(
            Step(
                self._unique(layer.name), layer, node, tuple(in_keys), tuple(outs), tuple(shapes), type(layer).__name__
            )
        )
        return outs

    # ---- queries --------------------------------------------------------------------------------
    def step(self, name: str) -> Step:
        return self.by_name[name]

    def producer_of(self, key: int) -> Step | None:
        index = self.producer.get(key)
        return None if index is None else self.steps[index]

    def ancestors(self, key: int) -> set[int]:
        """Keys of every tensor ``key`` depends on, itself included."""

        def inputs(k):
            step = self.producer_of(k)
            return () if step is None else step.inputs

        return _closure(key, inputs)

    def descendants(self, key: int) -> set[int]:
        """Keys of every tensor computed from ``key``, itself included."""
        return _closure(key, lambda k: [out for i in self.consumers.get(k, ()) for out in self.steps[i].outputs])

    # ---- running --------------------------------------------------------------------------------
    def run(self, x, *, until: int | None = None, linear: Step | None = None) -> dict:
        """Every tensor of the forward pass by key (through step ``until`` only, if given); the step
        ``linear`` is called without its activation."""
        values = {self.input_key: x}
        for i, step in enumerate(self.steps):
            if until is not None and i > until:
                break
            outs = step.call([values[k] for k in step.inputs], linear=step is linear)
            values.update(zip(step.outputs, outs))
        return values


def _closure(key: int, neighbours) -> set[int]:
    """``key`` and every key reachable from it through ``neighbours``."""
    seen, todo = set(), [key]
    while todo:
        k = todo.pop()
        if k not in seen:
            seen.add(k)
            todo.extend(neighbours(k))
    return seen
