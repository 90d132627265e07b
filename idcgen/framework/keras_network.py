"""The Keras implementation of the framework protocol: load a Keras classifier or regression model, expose
its logits (or output pre-activation), and tap named layers in batched forward passes.

A *neuron* is a unit of a dense layer or a channel (feature map) of a convolutional layer; the
activation of a channel is its spatial mean (docs/design.md, "Relevance").
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
import warnings
from pathlib import Path

import numpy as np

from ..convention import InputConvention
from ..errors import ModelError, Param
from . import RANGE_TAP, TASKS, LayerInfo, Network
from .common import refuse_nan_outputs, relevance_batch_size
from .keras_graph import AnyBatch, neuron_activations
from .layers import GraphQueries, LayerGraph, LayerRecord

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402


class _TapTracing(logging.Filter):
    """Drops TensorFlow's "N out of the last M calls to <function ... run> triggered tf.function retracing":
    each set of layers tapped (:meth:`KerasNetwork._tap`) is a tf.function of its own, traced once for any
    batch size (`keras_graph.AnyBatch`), and TensorFlow counts them all as one function (one code object), so
    a command tapping several sets printed it with nothing to act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "triggered tf.function retracing" not in record.getMessage()


tf.get_logger().addFilter(_TapTracing())

#: the layers that drop units in training (MC dropout samples them at test time)
_DROPOUT = (
    keras.layers.Dropout,
    keras.layers.SpatialDropout1D,
    keras.layers.SpatialDropout2D,
    keras.layers.SpatialDropout3D,
)
_IDENTITY_AT_INFERENCE = _DROPOUT + (
    keras.layers.GaussianNoise,
    keras.layers.GaussianDropout,
    keras.layers.AlphaDropout,
    keras.layers.ActivityRegularization,
)
#: Skipped when choosing the default subject layer: identity at inference, or a reshape whose
#: "neurons" would be feature-map positions rather than channels (docs/design.md, "Relevance").
_SKIP_BEFORE_LOGITS = _IDENTITY_AT_INFERENCE + (keras.layers.Flatten, keras.layers.Reshape)
#: counted with the weighted layer before them in `neuron_layers` (an activation's output taken instead)
_FOLLOWERS = (
    keras.layers.BatchNormalization,
    keras.layers.LayerNormalization,
    keras.layers.GroupNormalization,
) + _IDENTITY_AT_INFERENCE
_ACTIVATIONS = (
    keras.layers.Activation,
    keras.layers.ReLU,
    keras.layers.LeakyReLU,
    keras.layers.ELU,
    keras.layers.PReLU,
)


def _role(layer) -> str:
    """The layer's part in `LayerGraph.neuron_layers`: "activation", "follower" or none."""
    return "activation" if isinstance(layer, _ACTIVATIONS) else "follower" if isinstance(layer, _FOLLOWERS) else ""


def check_container(path: Path) -> None:
    """A .keras file is a zip archive, an .h5 an HDF5 file: one that is not is empty, cut short or no model
    file at all, said so (Keras says "File not found" or "file signature not found" of a file that exists)."""
    import zipfile

    import h5py

    if path.suffix.lower() == ".json":
        raise ModelError(
            f"{path} is a JSON architecture, which holds no weights: give the weights file as --model and this "
            "file as --architecture (architecture= of idcgen.load_model)"
        )
    kind = {
        ".keras": ("a zip archive", zipfile.is_zipfile),
        ".h5": ("an HDF5 file", h5py.is_hdf5),
        ".hdf5": ("an HDF5 file", h5py.is_hdf5),
    }.get(path.suffix.lower())
    if kind is None:
        return
    what, is_kind = kind
    if not is_kind(path):
        size = path.stat().st_size
        raise ModelError(
            f"{path} is not a Keras model file, or is damaged: "
            + (
                "it is empty"
                if size == 0
                else f"a {path.suffix} file is {what} and this one ({size:,} bytes) is not "
                "(cut short in a copy or download, or another kind of file)"
            )
        )


def load_model(path: str | os.PathLike, *, safe_mode: bool = True, architecture=None) -> keras.Model:
    """Load a Keras 3 ``.keras``/``.h5`` or a Keras 2.x full-model ``.h5`` file, uncompiled.

    ``safe_mode=False`` allows lambda layers (arbitrary code): only for files you trust.
    ``architecture`` (a Keras JSON file, as ``model.to_json()`` writes, or its text) builds the model for
    a weights-only file (``save_weights``) and loads the weights into it (``idcgen.framework.keras_legacy``).
    """
    path = Path(path)
    if not path.exists():
        raise ModelError(f"model file not found: {path}")
    if path.is_dir():
        raise ModelError(f"model path is a folder, expected a .keras or .h5 file: {path}")
    from . import keras_legacy as legacy

    if architecture is not None:
        return legacy.load_with_architecture(path, architecture, safe_mode=safe_mode)
    check_container(path)
    try:
        with legacy.lambda_names(), warnings.catch_warnings():
            # Keras 2 files give their first layer input_shape, which Keras 3 reads and then warns about
            warnings.filterwarnings("ignore", message="Do not pass an `input_shape`/`input_dim` argument")
            model = keras.models.load_model(path, compile=False, safe_mode=safe_mode)
    except Exception as exc:  # Keras raises many types for unreadable files; report them as one
        summary = legacy.weights_only_summary(path)
        if summary is not None:
            raise ModelError(legacy.weights_only_message(path, summary)) from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = ""
        if "pop expected at most 1 argument" in str(exc):
            hint = (
                f" (a Keras {legacy.full_legacy_model(path)} file, which Keras 3 cannot read: re-save it with "
                f"`idcgen convert {path} NEW.keras`, which needs tf-keras)"
            )
        elif "Could not locate class" in str(exc):  # Keras puts the class name past its first line
            name = re.search(r"Could not locate class '([^']+)'", str(exc))
            first = f"unknown layer class {name.group(1)!r}" if name else first
            hint = (
                " (a custom layer: idcgen can only load models of Keras' own layers; re-save the model "
                "without it, or load it in Python with its code and pass the model to idcgen's API)"
            )
        elif "safe_mode" in str(exc) or "Lambda" in str(exc):
            hint = " (the file has a Lambda layer: pass --unsafe only if you trust it)"
        raise ModelError(f"could not read model {path}: {first}{hint}") from None
    if not isinstance(model, keras.Model):
        raise ModelError(f"{path} does not hold a Keras model (got {type(model).__name__})")
    return legacy.restore_lambda_globals(model)


def convert(old, new, *, architecture=None, safe_mode: bool = True, overwrite: bool = False) -> str:
    """Re-save a model file in a format Keras 3 reads: ``.keras`` or ``.h5``, by ``new``'s suffix.

    Keras 2.1-era full models go through tf-keras (checked: the same outputs on a random batch); files
    Keras 3 reads already, and weights-only files with ``architecture``, are simply re-saved. Returns a
    one-line summary.
    """
    from . import keras_legacy as legacy

    old, new = Path(old), Path(new)
    if new.suffix not in (".keras", ".h5"):
        raise ModelError(f"the new file must end with .keras or .h5 (the format is chosen by its suffix), got {new}")
    if not old.is_file():
        raise ModelError(f"model file not found: {old}")
    if new.resolve() == old.resolve():
        raise ModelError(f"the new file is the old one ({new}); give another name")
    if new.exists() and not overwrite:  # a model file is often the only copy of days of training
        raise ModelError(
            f"{new} already exists: refusing to replace it; pass ",
            Param("overwrite", True),
            " to replace it, or give another name",
        )
    new.parent.mkdir(parents=True, exist_ok=True)
    legacy_version = None if architecture is not None else legacy.full_legacy_model(old)
    check = ""
    with tempfile.TemporaryDirectory(dir=new.parent) as tmp:
        try:
            model = load_model(old, safe_mode=safe_mode, architecture=architecture)
            how = "read with Keras 3" + (f" and architecture {architecture}" if architecture is not None else "")
        except ModelError:
            if legacy_version is None:
                raise
            model, before, after = legacy._read_with_tf_keras(old, Path(tmp) / "tf_keras.h5", safe_mode)
            diff = float(np.max(np.abs(before - after)))
            if not np.allclose(before, after, atol=1e-5, rtol=1e-4):
                raise ModelError(
                    f"converting {old} changed its outputs (largest difference {diff:.3g} on a random "
                    "batch); the file was not written"
                ) from None
            import tf_keras

            how = f"Keras {legacy_version} file read with tf-keras {tf_keras.__version__}"
            check = f"; outputs equal on a random batch (largest difference {diff:.1g})"
        staged = Path(tmp) / f"model{new.suffix}"
        with warnings.catch_warnings():  # Keras calls .h5 "legacy"; the user asked for it by the suffix
            warnings.simplefilter("ignore")
            model.save(staged)
        os.replace(staged, new)
    fmt = "Keras 3 .keras archive" if new.suffix == ".keras" else "HDF5 .h5"
    return (
        f"converted {old} ({how}) -> {new} ({fmt}): {len(model.layers)} layers, "
        f"{model.count_params():,} parameters{check}"
    )


def limit_threads(threads: int) -> None:
    """TensorFlow's intra- and inter-op thread pools, if it has not run yet in this process."""
    try:
        tf.config.threading.set_intra_op_parallelism_threads(int(threads))
        tf.config.threading.set_inter_op_parallelism_threads(int(threads))
    except RuntimeError:  # TensorFlow already ran in this process: its pools are fixed
        pass


def _tap_target(name: str, known) -> tuple[str, bool]:
    """(layer name, whether the tap is the layer's range): a real layer name wins over the suffix."""
    if name.endswith(RANGE_TAP) and name not in known:
        return name[: -len(RANGE_TAP)], True
    return name, False


def activation_name(layer) -> str:
    """The name of a layer's activation ("linear" when it has none)."""
    act = getattr(layer, "activation", None)
    return "linear" if act is None else getattr(act, "__name__", str(act))


def _described(step) -> str:
    """ "Flatten 'flatten' (196 values)": a graph step as an error message names it."""
    shape = step.output_shapes[0]
    values = int(np.prod([d for d in shape[1:] if d is not None]))
    return f"{type(step.layer).__name__} {step.name!r} ({values} values, shape {tuple(shape)})"


def _describe_layer(layer) -> str:
    """ "Rescaling 'rescaling' (scale=0.00392, offset=0.0)": a preprocessing layer with its settings."""
    config = layer.get_config()
    keys = [k for k in ("scale", "offset", "mean", "variance", "height", "width") if config.get(k) is not None]
    return f"{type(layer).__name__} {layer.name!r}" + (
        f" ({', '.join(f'{k}={config[k]}' for k in keys)})" if keys else ""
    )


def _is_softmax(layer) -> bool:
    return isinstance(layer, keras.layers.Softmax) or (
        isinstance(layer, keras.layers.Activation) and activation_name(layer) == "softmax"
    )


def _under_lambda(graph, last):
    """The one-unit layer a final Lambda of one output reads (a squashing written as code), else None."""
    if not isinstance(last.layer, keras.layers.Lambda) or len(last.inputs) != 1:
        return None
    below = graph.producer_of(last.inputs[0])
    if (
        below is None
        or not below.layer.weights
        or tuple(below.output_shapes[0][1:]) != (1,)
        or tuple(last.output_shapes[0][1:]) != (1,)
    ):
        return None
    return below


def _detect_task(last, task: str | None) -> str:
    """ "regression" for a head of one output unit (linear, tanh or any other squashing), else
    "classification"; ``task`` overrides, and regression is refused for a head of several outputs."""
    shape = last.output_shapes[0]
    one_unit = len(shape) == 2 and shape[-1] == 1 and bool(last.layer.weights) and not _is_softmax(last.layer)
    if task == "regression" and not one_unit:
        raise ModelError(
            f"--task regression needs a model whose last layer is one output unit (a Dense(1)); "
            f"this one ends with {_described(last)}; leave --task out or give classification"
        )
    if task is not None:
        return task
    return "regression" if one_unit and activation_name(last.layer) != "softmax" else "classification"


class KerasNetwork(GraphQueries, Network):
    """A Keras classifier with its logits exposed and batched taps on named layers, for any functional graph.

    The model is read as a `Graph` (idcgen/framework/keras_graph.py): nested models are expanded, so every layer of a
    ``keras.applications`` backbone inside a wrapper has its own name here. The logits are the
    pre-softmax values: the input of a final ``Softmax``/``Activation("softmax")`` layer, or the
    pre-activation of a final layer with ``activation="softmax"`` (docs/design.md, "Relevance").

    ``task`` is "classification" or "regression" (detected: a head of one output unit, linear or squashed
    as ``tanh``, is a regression model; give ``task`` to override). For regression the "logits" are the one
    unit's pre-activation and `forward`'s first value is the model's output (n, 1) rather than probabilities.
    """

    def __init__(
        self,
        model: keras.Model,
        *,
        batch_size: int | None = None,
        task: str | None = None,
        convention: InputConvention | None = None,
        inner: keras.Model | None = None,
    ):
        from .keras_graph import Graph

        if task not in TASKS + (None,):
            raise ModelError(f"the task must be one of {', '.join(TASKS)} (or left out to detect it); got {task!r}")
        self.model = model
        self.inner = model if inner is None else inner  # the user's model under the convention's wrapper
        self.convention = convention
        self._task_given = task
        self.graph = Graph(model)
        self._built: dict = {}  # functions built once per model (traced gradients, attack wrappers)
        self.batch_size = batch_size or self._forward_batch_size()
        self._batch_size_given = batch_size  # the relevance pass's too, when given
        if not self.graph.steps:
            raise ModelError("the model has no layers")
        self.input_shape = tuple(model.inputs[0].shape[1:])
        last = self.graph.producer_of(self.graph.output_key)
        self.head_note = None
        below = _under_lambda(self.graph, last)
        if below is not None and task != "classification":  # DeepXplore's atan(x) * 2 after a Dense(1)
            self.head_note = (
                f"the output comes from Lambda {last.name!r}, which idcgen cannot explain; relevance "
                f"starts from the pre-activation of {below.name!r}, the layer below it"
            )
            last = below
        self.task = _detect_task(last, task)
        if self.task == "regression":
            # relevance starts from the output unit's pre-activation (docs/design.md, "Regression models")
            self.logits_key = last.outputs[0]
            self.softmax_in_last_layer = activation_name(last.layer) != "linear"  # run without its squashing
        elif _is_softmax(last.layer):
            self.logits_key = last.inputs[0]  # drop the softmax layer
            self.softmax_in_last_layer = False
        elif activation_name(last.layer) == "softmax":
            self.logits_key = last.outputs[0]  # last layer called with its activation removed
            self.softmax_in_last_layer = True
        elif activation_name(last.layer) == "linear":
            if not last.layer.weights:  # Flatten, Reshape, pooling, Dropout ...: the output is not a head's
                raise ModelError(
                    f"the model's output comes from {_described(last)}, not a classifier or "
                    "regression head; expected a final Dense (logits, or one unit for regression) "
                    "or a softmax"
                )
            self.logits_key = last.outputs[0]  # the model already outputs logits
            self.softmax_in_last_layer = False
        else:
            raise ModelError(
                f"cannot find the logits: the last layer {last.name!r} has activation "
                f"{activation_name(last.layer)!r}; expected softmax (as a layer or an activation) "
                "or linear logits"
            )
        self.logits_step = self.graph.producer_of(self.logits_key)
        if self.logits_step is None:
            raise ModelError("the model's softmax is applied to its input directly: there is no layer to explain")
        self.layer_graph = self._layer_graph()
        # a conv classifier (MobileNet's 1x1 Conv2D "logits", then Flatten): its output is the logits, not hidden
        self.classifier_step = self.layer_graph.classifier.ref
        self.logits_layer = self.classifier_step.name
        if len(self.logits_step.output_shapes[0]) != 2:  # (batch, classes): one score per class and input
            raise ModelError(
                f"the model's logits come from {_described(self.logits_step)}, not one score per "
                "class; expected a (batch, classes) output such as a final Dense's"
            )
        self.n_classes = int(self.logits_step.output_shapes[0][-1])
        self._taps: dict[tuple, object] = {}
        self._logits_fn = None

    def _forward_batch_size(self, budget_bytes: int = 64 * 2**20) -> int:
        """Inputs per forward batch: 1,024 for small models; fewer when the largest tensor of a batch (with
        its neighbours, about three of that size alive at once) would pass ``budget_bytes``."""
        largest = max(int(np.prod([d or 1 for d in shape[1:]])) for s in self.graph.steps for shape in s.output_shapes)
        return int(np.clip(budget_bytes // (12 * largest), 32, 1024))

    # ---- layers -----------------------------------------------------------------------------
    @property
    def chain(self) -> list:
        """Every layer in topological order (a shared layer once per call)."""
        return [step.layer for step in self.graph.steps]

    def layer(self, name: str):
        return self.step(name).layer

    def _layer_graph(self) -> LayerGraph:
        """The layer graph of the steps (idcgen/framework/layers.py); a step reads the model input as ""."""
        from .keras_lrp import rule_label

        graph = self.graph

        def name_of(key) -> str:
            producer = graph.producer_of(key)
            return "" if producer is None else producer.name

        return LayerGraph(
            (
                LayerRecord(
                    s.name,
                    s.kind,
                    tuple(s.output_shapes[0][1:]),
                    tuple(name_of(key) for key in s.inputs),
                    weighted=bool(getattr(s.layer, "weights", None)),
                    dropout=isinstance(s.layer, _DROPOUT),
                    transparent=isinstance(s.layer, _SKIP_BEFORE_LOGITS),
                    role=_role(s.layer),
                    rule=rule_label(s.layer, logits=s is self.logits_step, n_inputs=len(s.inputs)),
                    outputs=len(s.outputs),
                    batch=s.output_shapes[0][0] if s.output_shapes[0] else None,
                    ref=s,
                )
                for s in graph.steps
            ),
            logits=self.logits_step.name,
        )

    def layers_info(self) -> list[LayerInfo]:
        return self.layer_graph.layers_info(batch_axis=True)

    def rule_notes(self, layer: str | None, *, attention: str | None = None) -> list[str]:
        from .keras_lrp import rule_notes

        if layer is not None:
            return rule_notes(self.relevance(layer, attention=attention).steps, self.logits_step, attention)
        last = self.graph.steps.index(self.logits_step)  # the whole model, layers without a rule included
        return rule_notes(
            [s for s in self.graph.steps[: last + 1] if s.name in self.layer_graph.hidden or s is self.logits_step],
            self.logits_step,
        )

    def key_of(self, name: str) -> int:
        """The graph key of layer ``name``'s output tensor."""
        return self.step(name).outputs[0]

    # ---- identity ---------------------------------------------------------------------------
    def fingerprint(self) -> str:
        """sha256 of every weight array (shape, dtype and bytes) in model order."""
        digest = hashlib.sha256()
        for weight in self.model.weights:
            value = np.ascontiguousarray(keras.ops.convert_to_numpy(weight))
            digest.update(f"{weight.path}:{value.shape}:{value.dtype}".encode())
            digest.update(value.tobytes())
        return digest.hexdigest()

    # ---- forward ----------------------------------------------------------------------------
    def outputs(self, x, layers: tuple[str, ...]) -> tuple[list, object]:
        """Symbolic forward pass (for use under a GradientTape or in a tf.function): the raw outputs of
        ``layers`` and the model's output."""
        from .keras_graph import TRACE_LOCK

        keys = [self.key_of(name) for name in layers]
        with TRACE_LOCK:
            values = self.graph.run(x)
        return [values[k] for k in keys], values[self.graph.output_key]

    def _tap(self, layers: tuple[str, ...]):
        if layers not in self._taps:
            known = set(self.layer_names())
            targets = [_tap_target(name, known) for name in layers]
            for name, _ in targets:
                self.step(name)  # LayerError for an unknown name, before tracing
            names = tuple(name for name, _ in targets)

            def reduce(out, span):
                if not span:
                    return neuron_activations(out)
                flat = tf.reshape(out, (tf.shape(out)[0], -1))
                return tf.stack([tf.reduce_min(flat, axis=1), tf.reduce_max(flat, axis=1)], axis=1)

            def run(x):
                outs, final = self.outputs(x, names)
                return [reduce(o, span) for o, (_, span) in zip(outs, targets)], final

            self._taps[layers] = AnyBatch(run)  # one trace: a shorter last batch would trace it again
        return self._taps[layers]

    def forward(self, x: np.ndarray, layers: tuple[str, ...] = (), *, progress=None):
        """Batched forward pass: (probabilities (n, classes), [neuron activations (n, neurons) per layer]);
        a name ending in ``RANGE_TAP`` gives that layer's per-input (min, max) instead (n, 2)."""
        run = self._tap(tuple(layers))
        probs, acts = [], [[] for _ in layers]
        for start in range(0, len(x), self.batch_size):
            a, p = run(tf.convert_to_tensor(x[start : start + self.batch_size], dtype=tf.float32))
            probs.append(p.numpy())
            for store, value in zip(acts, a):
                store.append(value.numpy())
            if progress is not None:
                progress.update(min(self.batch_size, len(x) - start))
        probs = np.concatenate(probs) if probs else np.zeros((0, self.n_classes), np.float32)
        return refuse_nan_outputs(probs), [np.concatenate(a) for a in acts]

    def logits(self, x, training=False):
        """Symbolic logits of ``x`` (differentiable; ``training`` is accepted and ignored: inference)."""
        from .keras_graph import TRACE_LOCK

        index = self.graph.steps.index(self.logits_step)
        with TRACE_LOCK:
            values = self.graph.run(x, until=index, linear=self.logits_step if self.softmax_in_last_layer else None)
        return values[self.logits_key]

    def logits_model(self):
        """A callable from inputs to logits, traced once (for attacks: ``f(x, training=False)``)."""
        if self._logits_fn is None:
            traced = tf.function(lambda x: self.logits(x), reduce_retracing=True)
            self._logits_fn = lambda x, training=False: traced(tf.convert_to_tensor(x, tf.float32))
        return self._logits_fn

    # ---- what the rest of idcgen asks of a network, beyond forward taps -----------------------------
    def feature_maps(self, layers: tuple[str, ...]):
        """x -> the raw outputs (n, h, w, channels) of ``layers`` as numpy, traced once per model."""

        def build():
            run = tf.function(lambda x: self.outputs(x, layers)[0], reduce_retracing=True)
            return lambda x: [o.numpy() for o in run(tf.convert_to_tensor(x, dtype=tf.float32))]

        return self.cached(("feature-maps", tuple(layers)), build)

    def preprocessing(self) -> list[str]:
        from .keras_convention import leading_preprocessing

        return [_describe_layer(layer) for layer in leading_preprocessing(self.inner)]

    def head_activation(self) -> str:
        return activation_name(self.logits_step.layer)

    def dropout_outputs(self, x: np.ndarray, passes: int, rng: np.random.Generator) -> np.ndarray:
        dropped = set(self.dropout_layers())
        if not dropped:
            return super().dropout_outputs(x, passes, rng)
        batch = tf.convert_to_tensor(x, tf.float32)
        runs = []
        for _ in range(passes):
            values = {self.graph.input_key: batch}
            for step in self.graph.steps:
                inputs = [values[k] for k in step.inputs]
                if step.name in dropped:  # a mask of our own, drawn from rng: reproducible, unlike Keras' dropout
                    a, rate = inputs[0], float(step.layer.rate)
                    shape = list(a.shape)
                    if type(step.layer).__name__.startswith("SpatialDropout"):  # one mask per channel
                        shape = [shape[0]] + [1] * (len(shape) - 2) + [shape[-1]]
                    outs = [a * ((rng.random(shape) >= rate).astype(np.float32) / max(1.0 - rate, 1e-12))]
                else:
                    outs = step.call(inputs)
                values.update(zip(step.outputs, outs))
            runs.append(np.asarray(values[self.graph.output_key], np.float64))
        return np.stack(runs)

    def relevance(
        self, layer: str | None, *, eps: float = 1e-7, batch_size: int | None = None, attention: str | None = None
    ):
        """`keras_lrp.Relevance`; ``attention`` picks the MultiHeadAttention rule ("cp", "attnlrp")."""
        from .keras_lrp import Relevance

        return Relevance(self, layer=layer, eps=eps, batch_size=batch_size or 512, attention=attention)

    def relevance_batch_size(self) -> int:
        if self._batch_size_given is not None:
            return self._batch_size_given
        floats = sum(int(np.prod([d or 1 for d in shape[1:]])) for s in self.graph.steps for shape in s.output_shapes)
        return relevance_batch_size(floats)

    def gradients(self, kind: str, **spec):
        from .keras_gradients import gradient_function

        return gradient_function(self, kind, **spec)

    def attack(self, name: str, x: np.ndarray, labels: np.ndarray | None, **params) -> np.ndarray:
        from .keras_attacks import attack

        return attack(self, name, x, labels, **params)

    # ---- conventions, training, shipping -------------------------------------------------------
    def own_convention(self) -> InputConvention:
        from .keras_convention import from_model

        return from_model(self.inner)

    def measured_as(self, convention: InputConvention, *, wrapped: InputConvention | None) -> "KerasNetwork":
        if wrapped is not None and wrapped == convention:
            return self
        from .keras_convention import wrap

        model = wrap(self.inner, convention)
        if model is self.model:
            self.convention = convention  # what later calls with this network fall back to
            return self
        return KerasNetwork(model, task=self._task_given, convention=convention, inner=self.inner)

    def on_images(self, image_shape: tuple) -> "KerasNetwork":
        """This network taking images of ``image_shape``: the campaign mutated (h, w, c) images for a model
        taking flat or channel-less inputs (docs/design.md), reshaped in front of the model."""
        if tuple(self.input_shape) == tuple(image_shape):
            return self
        wrapper = keras.Sequential(
            [keras.Input(tuple(image_shape)), keras.layers.Reshape(tuple(self.input_shape)), self.model]
        )
        return KerasNetwork(wrapper)

    def retrained(
        self, x: np.ndarray, y: np.ndarray, *, mode: str, epochs: int, batch_size: int = 256, random_state: int = 0
    ) -> "KerasNetwork":
        """A copy fine-tuned (Adam, lr 1e-4) or trained from scratch (the paper's Adadelta)."""
        keras.utils.set_random_seed(random_state)
        copy = keras.models.clone_model(self.model)
        if mode == "finetune":
            copy.set_weights(self.model.get_weights())
            optimizer = keras.optimizers.Adam(learning_rate=1e-4)
        else:
            optimizer = keras.optimizers.Adadelta(learning_rate=1.0, rho=0.95)
        copy.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        copy.fit(x, y, epochs=epochs, batch_size=batch_size, shuffle=True, verbose=0)
        return KerasNetwork(copy)

    def recipe(self) -> tuple[str, bytes]:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.keras"
            self.inner.save(path)
            return ".keras", path.read_bytes()
