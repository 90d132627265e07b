"""Load a Keras classifier, expose its logits, and tap named layers in batched forward passes.

A *neuron* is a unit of a dense layer or a channel (feature map) of a convolutional layer; the
activation of a channel is its spatial mean (DESIGN §2).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import LayerError, ModelError

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

#: Layers whose relevance passes straight through (elementwise, identity at inference, or reshaping).
PASS_THROUGH = (
    keras.layers.InputLayer,
    keras.layers.Activation,
    keras.layers.ReLU,
    keras.layers.LeakyReLU,
    keras.layers.ELU,
    keras.layers.Dropout,
    keras.layers.SpatialDropout1D,
    keras.layers.SpatialDropout2D,
    keras.layers.GaussianNoise,
    keras.layers.GaussianDropout,
    keras.layers.AlphaDropout,
    keras.layers.ActivityRegularization,
    keras.layers.Flatten,
    keras.layers.Reshape,
)
#: Skipped when choosing the default subject layer: identity at inference, or a reshape whose
#: "neurons" would be feature-map positions rather than channels (DESIGN §2).
_SKIP_BEFORE_LOGITS = (keras.layers.Dropout, keras.layers.SpatialDropout1D, keras.layers.SpatialDropout2D,
                       keras.layers.SpatialDropout3D, keras.layers.GaussianNoise, keras.layers.GaussianDropout,
                       keras.layers.AlphaDropout, keras.layers.ActivityRegularization, keras.layers.Flatten,
                       keras.layers.Reshape)
#: Layers the epsilon rule handles exactly (linear given the activation is taken off, or max-pooling).
LRP_LAYERS = (keras.layers.Dense, keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D,
              keras.layers.DepthwiseConv2D, keras.layers.MaxPooling1D, keras.layers.MaxPooling2D,
              keras.layers.MaxPooling3D, keras.layers.AveragePooling1D, keras.layers.AveragePooling2D,
              keras.layers.AveragePooling3D, keras.layers.GlobalAveragePooling1D, keras.layers.GlobalAveragePooling2D,
              keras.layers.GlobalMaxPooling1D, keras.layers.GlobalMaxPooling2D, keras.layers.BatchNormalization,
              keras.layers.ZeroPadding1D, keras.layers.ZeroPadding2D, keras.layers.Cropping1D, keras.layers.Cropping2D)


def load_model(path: str | os.PathLike, *, safe_mode: bool = True, architecture=None) -> keras.Model:
    """Load a Keras 3 ``.keras``/``.h5`` or a Keras 2.x full-model ``.h5`` file, uncompiled.

    ``safe_mode=False`` allows lambda layers (arbitrary code): only for files you trust.
    ``architecture`` (a Keras JSON file, as ``model.to_json()`` writes, or its text) builds the model for
    a weights-only file (``save_weights``) and loads the weights into it (``idcgen.legacy``).
    """
    path = Path(path)
    if not path.exists():
        raise ModelError(f"model file not found: {path}")
    if path.is_dir():
        raise ModelError(f"model path is a folder, expected a .keras or .h5 file: {path}")
    from . import legacy
    if architecture is not None:
        return legacy.load_with_architecture(path, architecture, safe_mode=safe_mode)
    try:
        model = keras.models.load_model(path, compile=False, safe_mode=safe_mode)
    except Exception as exc:  # Keras raises many types for unreadable files; report them as one
        summary = legacy.weights_only_summary(path)
        if summary is not None:
            raise ModelError(legacy.weights_only_message(path, summary)) from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = ""
        if "pop expected at most 1 argument" in str(exc):
            hint = (f" (a Keras {legacy.full_legacy_model(path)} file, which Keras 3 cannot read: re-save it with "
                    f"`idcgen convert {path} NEW.keras`, which needs tf-keras)")
        elif "safe_mode" in str(exc) or "Lambda" in str(exc):
            hint = " (the file has a Lambda layer: pass --unsafe only if you trust it)"
        raise ModelError(f"could not read model {path}: {first}{hint}") from None
    if not isinstance(model, keras.Model):
        raise ModelError(f"{path} does not hold a Keras model (got {type(model).__name__})")
    return model


@dataclass(frozen=True)
class LayerInfo:
    name: str
    type: str
    output_shape: tuple
    neurons: int


def _output_shape(layer) -> tuple:
    return tuple(layer.output.shape)


def neuron_activations(outputs: tf.Tensor) -> tf.Tensor:
    """(n, ..., C) layer output -> (n, C): dense units as they are, channels by spatial mean."""
    if len(outputs.shape) > 2:
        return tf.reduce_mean(outputs, axis=list(range(1, len(outputs.shape) - 1)))
    return outputs


def _chain(model: keras.Model) -> list:
    """The model's layers from input to output, if it is a chain (each layer has one input)."""
    if isinstance(model, keras.Sequential):
        return [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    chain, tensor = [], model.outputs[0]
    if len(model.outputs) != 1:
        raise ModelError(f"the model has {len(model.outputs)} outputs; idcgen expects one classifier output")
    while True:
        layer = tensor._keras_history.operation
        if isinstance(layer, keras.layers.InputLayer):
            break
        inputs = layer._inbound_nodes[0].input_tensors
        if len(inputs) != 1:
            raise LayerError(f"layer {layer.name!r} merges {len(inputs)} inputs; idcgen's relevance "
                             "handles chain models (one input per layer) only")
        chain.append(layer)
        tensor = inputs[0]
    return chain[::-1]


class Network:
    """A classifier with its logits exposed and batched taps on named layers.

    The logits are the pre-softmax values: the input of a final ``Activation("softmax")`` layer, or
    the pre-activation of a final layer with ``activation="softmax"`` (DESIGN §2).
    """

    def __init__(self, model: keras.Model, *, batch_size: int = 1024):
        self.model = model
        self.batch_size = batch_size
        self.chain = _chain(model)
        if not self.chain:
            raise ModelError("the model has no layers")
        self.input_shape = tuple(model.inputs[0].shape[1:])
        last = self.chain[-1]
        act = getattr(last, "activation", None)
        act_name = getattr(act, "__name__", str(act))
        if isinstance(last, keras.layers.Activation) and act_name == "softmax" or isinstance(last, keras.layers.Softmax):
            self.logits_chain = self.chain[:-1]      # drop the softmax layer
            self.softmax_in_last_layer = False
        elif act_name == "softmax":
            self.logits_chain = self.chain            # last layer called with its activation removed
            self.softmax_in_last_layer = True
        elif act_name == "linear" or act is None:
            self.logits_chain = self.chain            # the model already outputs logits
            self.softmax_in_last_layer = False
        else:
            raise ModelError(f"cannot find the logits: the last layer {last.name!r} has activation "
                             f"{act_name!r}; expected softmax (as a layer or an activation) or linear logits")
        self.logits_layer = self.logits_chain[-1].name
        self.n_classes = int(self.logits_chain[-1].output.shape[-1])
        self._taps: dict[tuple, object] = {}

    # ---- layers -----------------------------------------------------------------------------
    def layer_names(self) -> list[str]:
        return [layer.name for layer in self.chain]

    def layer(self, name: str):
        for layer in self.chain:
            if layer.name == name:
                return layer
        raise LayerError(f"unknown layer {name!r}; valid layers: {', '.join(self.layer_names())}")

    def layers_info(self) -> list[LayerInfo]:
        return [LayerInfo(layer.name, type(layer).__name__, _output_shape(layer), int(_output_shape(layer)[-1]))
                for layer in self.chain]

    def neuron_count(self, name: str) -> int:
        return int(_output_shape(self.layer(name))[-1])

    def default_layer(self) -> str:
        """The last hidden layer before the logits (the paper's penultimate layer), skipping dropout."""
        idx = [layer.name for layer in self.chain].index(self.logits_layer) - 1
        while idx >= 0 and isinstance(self.chain[idx], _SKIP_BEFORE_LOGITS):
            idx -= 1
        if idx < 0:
            raise LayerError("the model has no hidden layer before its logits")
        return self.chain[idx].name

    def check_subject_layer(self, name: str) -> str:
        names = self.layer_names()
        layer = self.layer(name)
        if names.index(name) >= names.index(self.logits_layer):
            raise LayerError(f"layer {name!r} is the logits or after them; choose a hidden layer: "
                             f"{', '.join(names[:names.index(self.logits_layer)])}")
        return layer.name

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
    def _tap(self, layers: tuple[str, ...]):
        if layers not in self._taps:
            outputs = [self.layer(name).output for name in layers] + [self.model.outputs[0]]
            tap_model = keras.Model(self.model.inputs[0], outputs)

            @tf.function(reduce_retracing=True)
            def run(x):
                outs = tap_model(x, training=False)
                if not layers:  # a one-output Keras model returns a tensor, not a list
                    return [], outs
                return [neuron_activations(o) for o in outs[:-1]], outs[-1]

            self._taps[layers] = run
        return self._taps[layers]

    def forward(self, x: np.ndarray, layers: tuple[str, ...] = (), *, progress=None):
        """Batched forward pass: (probabilities (n, classes), [neuron activations (n, neurons) per layer])."""
        run = self._tap(tuple(layers))
        probs, acts = [], [[] for _ in layers]
        for start in range(0, len(x), self.batch_size):
            a, p = run(tf.convert_to_tensor(x[start:start + self.batch_size], dtype=tf.float32))
            probs.append(p.numpy())
            for store, value in zip(acts, a):
                store.append(value.numpy())
            if progress is not None:
                progress.update(min(self.batch_size, len(x) - start))
        probs = np.concatenate(probs) if probs else np.zeros((0, self.n_classes), np.float32)
        return probs, [np.concatenate(a) for a in acts]

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.forward(x)[0].argmax(axis=1)

    def logits_model(self) -> keras.Model:
        """A Keras model from the inputs to the logits (for attacks that need logits)."""
        if not hasattr(self, "_logits_model"):
            last = self.logits_chain[-1]
            if self.softmax_in_last_layer:
                config = dict(last.get_config(), activation="linear", name=last.name + "_logits")
                linear = type(last).from_config(config)
                out = linear(last.input)
                linear.set_weights(last.get_weights())
            else:
                out = last.output
            self._logits_model = keras.Model(self.model.inputs[0], out)
        return self._logits_model
