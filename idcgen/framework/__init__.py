"""The framework boundary: the one protocol through which idcgen runs a model, and the dispatch to its
implementations.

Everything else in idcgen takes numpy arrays and a `Network`: the analysis record, coverage, criteria, the
fuzz loop, the campaign and its store, reports. Only the implementation modules of this package
(``keras_*.py``, ``torch_*.py``) import a deep-learning framework, and only when a model of theirs is loaded or wrapped, so
a process that reads analyses and campaigns never imports TensorFlow (docs/design.md, "How to add a
framework").

A *neuron* is a unit of a dense layer or a channel (feature map) of a convolutional layer; its activation is
the channel's spatial mean (docs/design.md, "Relevance").
"""

from __future__ import annotations

import abc
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..convention import InputConvention, resolve
from ..errors import ModelError, Param, ParameterError
from .common import is_factory

# OpenMP threads waiting for work sleep instead of spinning: a spinning thread takes a core from whatever else
# runs, and on a shared machine every parallel operation then waits for a descheduled one (BENCHMARKS.md,
# "PyTorch under load"). The OpenMP runtime reads it once, when torch loads it; this package is imported
# before any torch_* module, so only a caller who imported torch first keeps the runtime's default.
if "torch" not in sys.modules:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# quiet TensorFlow's C++ start-up logs, before any implementation module imports it
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

__all__ = [
    "Network",
    "ForwardNetwork",
    "DifferentiableNetwork",
    "Backend",
    "BACKENDS",
    "LayerInfo",
    "RANGE_TAP",
    "TASKS",
    "load_model",
    "load_network",
    "as_network",
    "network_with_convention",
    "convert",
    "limit_threads",
    "resolve_device",
]

TASKS = ("classification", "regression")

#: ``forward`` on ``name + RANGE_TAP`` gives each input's (min, max) over the whole output of layer ``name``,
#: shape (n, 2): what NC's per-input min-max scaling of a layer needs, without the feature maps themselves.
RANGE_TAP = "@range"


@dataclass(frozen=True)
class LayerInfo:
    name: str
    type: str
    output_shape: tuple
    neurons: int


class _Dispatching(abc.ABCMeta):
    """``Network(model)`` builds the implementation for ``model``'s framework (as ``pathlib.Path`` does for
    the operating system); a subclass called by name builds itself."""

    def __call__(cls, *args, **kwargs):
        if cls in (ForwardNetwork, DifferentiableNetwork, Network):
            return as_network(*args, **kwargs)
        return super().__call__(*args, **kwargs)


class ForwardNetwork(metaclass=_Dispatching):
    """A model under test, seen through numpy, as far as running it forward goes: batched forward taps on
    named layers, logits, a weights fingerprint and its input convention. What coverage, the fuzz loop's
    forward pass with gradient-free mutators and the orderings by output need; a backend that can only run a
    model forward (an exported program) implements this much (docs/design.md, "The framework boundary").

    Attributes every implementation sets: ``model`` (the framework's own model object, as run: wrapped with
    the input convention), ``inner`` (the user's model under that wrapper), ``input_shape`` (one input,
    without the batch), ``n_classes`` (classes; 1 for regression), ``task`` ("classification" or
    "regression"), ``convention`` (the :class:`~idcgen.convention.InputConvention` the model is measured
    with, set by :func:`network_with_convention`; None until then), ``batch_size`` (inputs per forward
    batch), ``logits_layer`` (the name of the layer computing the class scores) and ``head_note`` (a note on
    how the head was read, or None).
    """

    model: object
    inner: object
    input_shape: tuple
    n_classes: int
    task: str
    convention: InputConvention | None
    batch_size: int
    head_note: str | None

    #: what this network can do beyond running forward (see :class:`DifferentiableNetwork`, :class:`Network`)
    capabilities: frozenset = frozenset({"forward"})

    # ---- layers -------------------------------------------------------------------------------
    @abc.abstractmethod
    def layer_names(self) -> list[str]:
        """Every layer (call) in topological order."""

    @abc.abstractmethod
    def layers_info(self) -> list[LayerInfo]: ...

    @abc.abstractmethod
    def step(self, name: str):
        """The layer call named ``name`` (an object with ``.name``); LayerError naming the valid ones."""

    @abc.abstractmethod
    def layer(self, name: str):
        """The layer object of the call named ``name`` (with ``.name``, the layer's own name)."""

    @abc.abstractmethod
    def check_layer(self, name: str) -> str:
        """``name`` if the model has that layer (call), else a LayerError naming the valid ones."""

    @abc.abstractmethod
    def output_shape(self, name: str) -> tuple: ...

    @abc.abstractmethod
    def neuron_count(self, name: str) -> int: ...

    @abc.abstractmethod
    def default_layer(self) -> str:
        """The paper's subject layer: the last hidden layer before the logits."""

    @abc.abstractmethod
    def check_subject_layer(self, name: str) -> str:
        """``name`` if the logits depend on its output (a hidden layer), else a LayerError."""

    @abc.abstractmethod
    def is_hidden(self, name: str) -> bool: ...

    @abc.abstractmethod
    def subject_layers(self) -> list[str]:
        """The hidden layers relevance can reach from the logits (every layer between has an LRP rule)."""

    @abc.abstractmethod
    def rule_label(self, name: str) -> str:
        """How relevance goes back through layer ``name``: "epsilon", "routing", "pass-through", "gate", with
        the approximation made if any, or "none" (docs/design.md, "Relevance on graphs")."""

    @abc.abstractmethod
    def rule_notes(self, layer: str | None) -> list[str]:
        """The rule of each layer kind between subject layer ``layer`` (None: the input) and the logits, and
        each approximation made."""

    @abc.abstractmethod
    def neuron_layers(self) -> list[str]:
        """Every hidden layer with weights before the logits, as DeepXplore and DeepGauge count neurons."""

    @abc.abstractmethod
    def weighted_layers(self) -> tuple[str, ...]:
        """Every layer with weights before the logits layer (DeepXplore's NC term)."""

    # ---- identity -----------------------------------------------------------------------------
    @abc.abstractmethod
    def fingerprint(self) -> str:
        """sha256 of every weight (shape, dtype, bytes) in model order: what ties an analysis to a model."""

    def weights_digest(self) -> str | None:
        """sha256 of the floating-point weights by name, in name order (`common.weights_digest`): the same for a
        model, its ``.pt2`` and TorchScript files and an fp32 export that keeps the weights' names, whose
        fingerprints differ by the order the weights are held in; None where the backend has none."""
        return None

    # ---- running ------------------------------------------------------------------------------
    @abc.abstractmethod
    def forward(self, x: np.ndarray, layers: tuple[str, ...] = (), *, progress=None) -> tuple:
        """(outputs (n, classes), [neuron activations (n, neurons) per layer]), batched; a name ending in
        ``RANGE_TAP`` gives that layer's per-input (min, max), (n, 2)."""

    @abc.abstractmethod
    def feature_maps(self, layers: tuple[str, ...]):
        """A callable x -> the raw outputs of ``layers`` (n, h, w, channels), as numpy."""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(input_shape={tuple(self.input_shape)}, "
            f"n_classes={self.n_classes}, task={self.task!r})"
        )

    def cached(self, key, build):
        """``build()`` once per network and ``key``: what is traced or compiled is kept with its model (in the
        ``_built`` dict every implementation makes)."""
        if key not in self._built:
            self._built[key] = build()
        return self._built[key]

    def activations(self, x: np.ndarray, layer: str, neurons, *, rows=None) -> np.ndarray:
        """(len(rows), len(neurons)) activations of some neurons of ``layer``, batch by batch: memory holds one
        batch of the layer and the selected columns, never (inputs x layer width)."""
        rows = np.arange(len(x)) if rows is None else np.asarray(rows)
        columns = np.asarray(neurons)
        out = np.empty((len(rows), len(columns)), np.float32)
        for start in range(0, len(rows), self.batch_size):
            _, (acts,) = self.forward(x[rows[start : start + self.batch_size]], (layer,))
            out[start : start + len(acts)] = acts[:, columns]
        return out

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The predicted class of each input; for a regression model its output value (float, (n,)). ``x`` in the
        model's input shape, or any shape :func:`idcgen.fit_to_model` fits ((n, h, w) digits, a Dataset)."""
        if not isinstance(x, np.ndarray) or x.shape[1:] != tuple(self.input_shape):  # the fuzz loop's are fitted
            from ..data import fit_to_model

            x = fit_to_model(x, self.input_shape)
        out = self.forward(x)[0]
        return out[:, 0] if self.task == "regression" else out.argmax(axis=1)

    def dropout_layers(self) -> list[str]:
        """The layers that drop units in training (MC dropout samples them at test time)."""
        return []

    def device_info(self) -> dict:
        """The device the model runs on and the precision of its forward passes, as analysis.json and
        campaign.json record them: information only, never part of a fingerprint or a comparison."""
        return dict(getattr(self, "_device_info", None) or {"device": "cpu"}, precision="fp32")

    def preprocessing(self) -> list[str]:
        """The preprocessing layers at the start of the user's model, described (``idcgen layers``)."""
        return []

    def head_activation(self) -> str:
        """The activation of the output unit(s) ("linear", "softmax", "tanh", ...)."""
        return "linear"

    def dropout_outputs(self, x: np.ndarray, passes: int, rng: np.random.Generator) -> np.ndarray:
        """(passes, n, outputs): the outputs with every dropout layer dropping, masks drawn from ``rng`` (the
        same random state gives the same outputs); every other layer in inference mode."""
        raise ModelError("this model has no dropout layers to sample (MC dropout)")

    # ---- conventions and shipping ----------------------------------------------------------------
    @abc.abstractmethod
    def own_convention(self) -> InputConvention:
        """The convention read from the model itself (a leading Rescaling of 0..255, else [0, 1])."""

    @abc.abstractmethod
    def measured_as(self, convention: InputConvention, *, wrapped: InputConvention | None) -> "ForwardNetwork":
        """This network taking images of ``convention`` (what it does not do itself put in front of the
        user's model), with ``convention`` as its field; ``wrapped`` is the convention it is wrapped with now."""

    @abc.abstractmethod
    def on_images(self, image_shape: tuple) -> "ForwardNetwork":
        """This network taking images of ``image_shape`` (reshaped in front of the model)."""

    @abc.abstractmethod
    def recipe(self) -> tuple[str, bytes]:
        """(file suffix, bytes) of the user's model as a file :func:`load_model` reads: what ships the model
        to another process."""


class DifferentiableNetwork(ForwardNetwork):
    """A network whose gradients idcgen can take: relevance (the analysis), the gradient mutators and the
    white-box attacks."""

    capabilities = frozenset({"forward", "differentiable"})

    @abc.abstractmethod
    def relevance(self, layer: str | None, *, eps: float = 1e-7, batch_size: int | None = None):
        """The LRP-epsilon pass to ``layer`` (None: the input): an object called as ``rel(x, target)`` giving
        per-neuron relevance, activations and logits (numpy), with ``batch`` (one batch) and ``batch_size``."""

    @abc.abstractmethod
    def relevance_batch_size(self) -> int:
        """Inputs per relevance batch that keep its memory within bounds."""

    # ---- gradients (the gradient mutators) ----------------------------------------------------
    @abc.abstractmethod
    def gradients(self, kind: str, **spec):
        """A callable on numpy arrays giving a gradient with respect to the inputs, traced once per network:
        "logit-sum" ``(x, weights) -> (d sum(weights * logits)/dx, logits)``; "neuron-sum" (``layers=``)
        ``(x, mask) -> (d sum(mask * activations)/dx, activations)``, the layers' neurons side by side;
        "centroid-pull" (``layer=, neurons=``) ``(x, target, scale) -> d sum(((acts - target)/scale)^2)/dx``."""

    @abc.abstractmethod
    def attack(self, name: str, x: np.ndarray, labels: np.ndarray | None, **params) -> np.ndarray:
        """Adversarial inputs by a white-box attack on the logits: "fgsm", "bim", "pgd" (untargeted, away from
        ``labels``; for regression ``labels`` are directions), "cw" (untargeted) or "jsma" (towards the classes
        ``labels``); ``params`` as the attack mutators pass them (idcgen/fuzz/mutators/attacks.py)."""


class Network(DifferentiableNetwork):
    """A model under test with every capability: forward taps, relevance and gradients
    (:class:`DifferentiableNetwork`) and a training step for ``harden``; the attributes of
    :class:`ForwardNetwork`. The Keras and PyTorch backends implement it.

    ``idcgen.Network(model, *, batch_size=None, task=None, input_shape=None, device=None, precision=None)``
    wraps a Keras model, a ``torch.nn.Module`` (``input_shape`` (H, W, C) unless the module has one) or a model
    file's path in its framework's implementation (see :func:`as_network`); a Network is returned as it is.
    """

    capabilities = frozenset({"forward", "differentiable", "trainable"})

    @abc.abstractmethod
    def retrained(
        self, x: np.ndarray, y: np.ndarray, *, mode: str, epochs: int, batch_size: int = 256, random_state: int = 0
    ) -> "Network":
        """A copy fine-tuned ("finetune") or trained from scratch ("scratch") on (x, y), for ``harden``."""


# ---- backends ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Backend:
    """A framework idcgen runs models of: the module and Network class implementing it (imported on first use),
    the model files it reads (by suffix), the top-level modules its model classes come from, the packages it
    needs and the pip extra that installs them."""

    name: str
    module: str
    network_class: str
    suffixes: tuple[str, ...]
    roots: tuple[str, ...]
    requires: tuple[str, ...]
    extra: str
    needs: str  # what a missing requirement is said to be for

    def require(self) -> None:
        """One line naming the extra when a package this backend needs is not installed."""
        import importlib.util

        if any(importlib.util.find_spec(name) is None for name in self.requires):
            raise ModelError(f'{self.needs}: pip install "idcgen[{self.extra}]"')

    def implementation(self):
        from importlib import import_module

        from .quiet import quiet_start

        with quiet_start():  # the framework's start-up lines dropped, anything else written back
            return import_module(self.module, __name__)

    def available(self) -> bool:
        import importlib.util

        return all(importlib.util.find_spec(name) is not None for name in self.requires)


#: the backends, by name; the first whose suffixes name a file reads it (Keras reads what no backend names,
#: to say in its words what it cannot read)
BACKENDS = {
    b.name: b
    for b in (
        Backend(
            "keras",
            ".keras_network",
            "KerasNetwork",
            (".keras", ".h5", ".hdf5"),
            ("keras", "tf_keras", "tensorflow"),
            ("tensorflow", "keras"),
            "keras",
            "Keras models need TensorFlow and Keras",
        ),
        Backend(
            "torch",
            ".torch_network",
            "TorchNetwork",
            (".pt", ".pth", ".pt2"),
            ("torch", "idcgen.framework.torch_load"),
            ("torch",),
            "torch",
            "PyTorch models need torch",
        ),
        Backend(  # forward only: a deployed export, tested against its source (idcgen/framework/onnx_network.py)
            "onnx",
            ".onnx_network",
            "OnnxNetwork",
            (".onnx",),
            ("onnx", "idcgen.framework.onnx_network"),
            ("onnx", "onnxruntime"),
            "onnx",
            "ONNX models need onnxruntime and onnx",
        ),
    )
}
DEFAULT_BACKEND = "keras"


def _framework_of(model) -> str:
    """The backend for a model object, by the module its class comes from (no framework imported)."""
    for cls in type(model).__mro__:
        for backend in BACKENDS.values():
            if any(cls.__module__ == root or cls.__module__.startswith(root + ".") for root in backend.roots):
                return backend.name
    raise ModelError(
        f"idcgen cannot run a {type(model).__module__}.{type(model).__name__}: expected a Keras "
        "model, a torch.nn.Module, a model file's path (or a Network)"
    )


def framework_of_path(path) -> str:
    """ "keras", "torch" or "onnx" for a model file (by its suffix) or a ``package.module:make_model`` factory."""
    if is_factory(path):
        return "torch"
    suffix = Path(str(path)).suffix.lower()
    return next((b.name for b in BACKENDS.values() if suffix in b.suffixes), DEFAULT_BACKEND)


def load_model(path: str | os.PathLike, *, safe_mode: bool = True, architecture=None, input_shape=None):
    """The model in ``path``, as its framework's object: Keras ``.keras``/``.h5`` files, uncompiled (see
    :func:`idcgen.framework.keras_network.load_model`: ``safe_mode``, ``architecture``); PyTorch TorchScript
    ``.pt``, ``torch.export`` ``.pt2`` files, or a factory ``package.module:make_model`` with its
    state_dict file as ``architecture`` (:func:`idcgen.framework.torch_load.load`; ``input_shape`` (H, W, C)
    where the file does not record it); ONNX ``.onnx`` files, run by onnxruntime, forward only."""
    framework = framework_of_path(path)
    BACKENDS[framework].require()  # each framework an extra: a missing one said in one line naming it
    if framework in ("torch", "onnx"):
        return BACKENDS[framework].implementation().load_model(path, architecture=architecture, input_shape=input_shape)
    # TensorFlow's devices queried before the load would first (quiet: a CUDA build's cuInit failure is dropped
    # with the start-up lines); "auto" changes no visibility a --device or IDCGEN_DEVICE set before
    from .device import keras_device

    keras_device("auto")
    return BACKENDS[framework].implementation().load_model(path, safe_mode=safe_mode, architecture=architecture)


def as_network(
    model,
    *,
    batch_size: int | None = None,
    task: str | None = None,
    convention: InputConvention | None = None,
    input_shape=None,
    device=None,
    precision=None,
) -> Network:
    """``model`` as a Network: a Network as it is, a framework's model wrapped by its implementation
    (``input_shape`` (H, W, C): the images a ``torch.nn.Module`` takes, unless it has an ``input_shape``),
    a model file's path (or a factory ``package.module:make_model``) loaded with :func:`load_model`.
    ``device`` (``auto|cpu|cuda|cuda:N``, default ``IDCGEN_DEVICE`` or auto) and ``precision`` (``fp32``,
    or ``bf16``/``fp16`` for forward passes; PyTorch models only): see :mod:`idcgen.framework.device`."""
    if isinstance(model, ForwardNetwork):
        return model
    if isinstance(model, (str, os.PathLike)):  # a path, as --model takes it: every API call that takes a model
        resolve_device(framework_of_path(model), device, precision)  # a GPU asked for and not seen: before the load
        model = load_model(model, input_shape=input_shape)
    framework = _framework_of(model)
    backend = BACKENDS[framework]
    network_class = getattr(backend.implementation(), backend.network_class)
    if framework == "torch":
        return network_class(
            model,
            batch_size=batch_size,
            task=task,
            convention=convention,
            input_shape=input_shape,
            device=device,
            precision=precision,
        )
    if framework == "onnx":
        return network_class(
            model, batch_size=batch_size, task=task, convention=convention, device=device, precision=precision
        )
    from .device import requested_device

    where = resolve_device("keras", device, precision)
    network = network_class(model, batch_size=batch_size, task=task, convention=convention)
    network._device_info = {"device": where}
    network.device_asked = requested_device(device).kind
    return network


def resolve_device(framework: str, device=None, precision=None):
    """The device a model of ``framework`` ("torch", "keras") runs on, settled before any model is loaded:
    a ``torch.device``, or "cpu"/"cuda:N" for Keras (``cpu`` hides the GPU from TensorFlow). A GPU asked for
    and not seen, or a precision other than fp32 for a Keras model, is one line."""
    from .device import check_precision, keras_device, torch_device

    precision = check_precision(precision)
    BACKENDS[framework].require()
    if framework == "torch":
        return torch_device(device)
    if framework == "onnx":  # the provider is chosen with the session (onnx_network._providers)
        if precision != "fp32":
            raise ModelError(Param("precision", precision), ": an ONNX model runs in the precision it was exported in")
        return device
    if precision != "fp32":
        raise ModelError(Param("precision", precision), " is for PyTorch models; Keras models run in fp32")
    return keras_device(device)


def load_network(
    path: str | os.PathLike,
    *,
    safe_mode: bool = True,
    architecture=None,
    task: str | None = None,
    batch_size: int | None = None,
    input_shape=None,
    device=None,
    precision=None,
) -> Network:
    resolve_device(framework_of_path(path), device, precision)  # a GPU asked for and not seen: before the load
    return as_network(
        load_model(path, safe_mode=safe_mode, architecture=architecture, input_shape=input_shape),
        task=task,
        batch_size=batch_size,
        device=device,
        precision=precision,
    )


def convert(old, new, *, architecture=None, safe_mode: bool = True, overwrite: bool = False, input_shape=None) -> str:
    """Re-save a model file in a format idcgen reads fully (``idcgen convert``); a one-line summary. Keras:
    a Keras 2.x or weights-only file as ``.keras``/``.h5``; PyTorch: a TorchScript file (with ``input_shape``)
    or a factory as a ``.pt2`` program. An existing ``new`` is replaced only with ``overwrite=True``."""
    framework = framework_of_path(old)
    if framework == "onnx":
        raise ParameterError(f"{old}: ONNX models are run as they are (onnxruntime, forward only): nothing to convert")
    BACKENDS[framework].require()
    if framework == "torch":
        from .torch_load import convert as torch_convert

        return torch_convert(old, new, weights=architecture, input_shape=input_shape, overwrite=overwrite)
    if input_shape is not None:  # a Keras file records its input shape: a given one would be ignored
        raise ParameterError(
            f"an input shape (--input-shape) is for PyTorch TorchScript files, which do not record "
            f"theirs; {old} is a Keras model, which does: drop --input-shape"
        )
    keras = BACKENDS["keras"].implementation()
    return keras.convert(old, new, architecture=architecture, safe_mode=safe_mode, overwrite=overwrite)


def limit_threads(threads: int) -> None:
    """``threads`` intra- and inter-op threads for the frameworks in this process (a Ray worker), before they run."""
    for backend in BACKENDS.values():  # each an extra: either may be missing
        if backend.available():
            backend.implementation().limit_threads(threads)


def network_with_convention(
    model, *, value_range=None, preprocess=None, image_shape=None, recorded: InputConvention | None = None
) -> tuple[Network, InputConvention]:
    """The Network to measure (the model with what its input convention puts in front of it, see
    :mod:`idcgen.convention`) and that convention, which is also the network's ``convention`` field. A
    Network passed with no choices is kept."""
    network = as_network(model)
    if value_range is None and preprocess is None and image_shape is None and recorded is None:
        if network.convention is None:
            network.convention = resolve(network.own_convention())
        return network, network.convention
    # a network idcgen wrapped keeps its convention unless a choice given here changes it
    wrapped = network.convention if network.model is not network.inner else None
    convention = resolve(
        network.own_convention(),
        value_range=value_range,
        preprocess=preprocess,
        image_shape=image_shape,
        recorded=recorded if recorded is not None else wrapped,
    )
    return network.measured_as(convention, wrapped=wrapped), convention
