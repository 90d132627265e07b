"""A framework-free `Network` for the tests of the fuzz loop: a one-hidden-layer ReLU classifier in numpy.

The fuzz loop, its campaigns and their store need of a network only its forward taps, predictions, a
weights fingerprint, LRP-epsilon relevance (for ``analyze`` and the relevance-guided mutators) and its
input convention; this double gives exactly that, with no framework imported and nothing to train by
gradient descent: the hidden layer is a fixed random ReLU projection and the readout is fitted in closed
form (ridge regression on one-hot labels, milliseconds), so the loop tests run in seconds and the same
digits give the same network on every machine. Capabilities the loop does not use (feature maps,
gradients, attacks, retraining, shipping to another process) raise NotImplementedError.
"""

from __future__ import annotations

import hashlib

import numpy as np

from idcgen.convention import InputConvention
from idcgen.errors import LayerError
from idcgen.framework import RANGE_TAP, LayerInfo, Network

HIDDEN, LOGITS = "hidden", "logits"


class NumpyNet(Network):
    """``softmax(relu(flatten(x) @ w1 + b1) @ w2 + b2)`` on images of ``input_shape``."""

    def __init__(
        self,
        w1,
        b1,
        w2,
        b2,
        *,
        input_shape=(28, 28, 1),
        convention: InputConvention | None = None,
        batch_size: int = 256,
    ):
        self.w1, self.b1, self.w2, self.b2 = (np.asarray(a, np.float32) for a in (w1, b1, w2, b2))
        self.input_shape = tuple(input_shape)
        self.n_classes = self.w2.shape[1]
        self.task = "classification"
        self.convention = convention
        self.batch_size = batch_size
        self.model = self.inner = self
        self.head_note = None
        self.logits_layer = LOGITS
        self._built = {}

    @classmethod
    def fit(
        cls, x: np.ndarray, y: np.ndarray, *, hidden: int = 48, random_state: int = 0, ridge: float = 1.0
    ) -> NumpyNet:
        """A random ReLU layer of width ``hidden`` and a readout fitted to one-hot ``y`` by ridge regression."""
        rng = np.random.default_rng(random_state)
        flat = x.reshape(len(x), -1).astype(np.float64)
        w1 = rng.normal(0.0, 1.0 / np.sqrt(flat.shape[1]), (flat.shape[1], hidden))
        b1 = rng.normal(0.0, 0.1, hidden)
        h = np.maximum(flat @ w1 + b1, 0.0)
        n_classes = int(y.max()) + 1
        target = np.eye(n_classes)[y] * 4.0 - 2.0  # logits of +-2: a confident but not saturated softmax
        design = np.hstack([h, np.ones((len(h), 1))])
        solved = np.linalg.solve(design.T @ design + ridge * np.eye(design.shape[1]), design.T @ target)
        return cls(w1, b1, solved[:-1], solved[-1], input_shape=x.shape[1:])

    # ---- the forward pass ----------------------------------------------------------------------
    def _hidden(self, x: np.ndarray) -> np.ndarray:
        return np.maximum(np.asarray(x, np.float32).reshape(len(x), -1) @ self.w1 + self.b1, 0.0)

    def forward(self, x: np.ndarray, layers: tuple[str, ...] = (), *, progress=None) -> tuple:
        """(softmax outputs, [each tap]); a tap ``name + RANGE_TAP`` is each input's (min, max) of that layer."""
        for name in layers:
            self.step(name.removesuffix(RANGE_TAP))
        h = self._hidden(x)
        z = h @ self.w2 + self.b2
        e = np.exp(z - z.max(axis=1, keepdims=True))
        taps = {HIDDEN: h, LOGITS: z}
        taps.update(
            {name + RANGE_TAP: np.stack([a.min(axis=1), a.max(axis=1)], axis=1) for name, a in list(taps.items())}
        )
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32), [taps[name] for name in layers]

    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for a in (self.w1, self.b1, self.w2, self.b2):
            digest.update(f"{a.shape}:{a.dtype}".encode())
            digest.update(np.ascontiguousarray(a).tobytes())
        return digest.hexdigest()

    # ---- layers ----------------------------------------------------------------------------------
    def layer_names(self) -> list[str]:
        return [HIDDEN, LOGITS]

    def layers_info(self) -> list[LayerInfo]:
        return [
            LayerInfo(name, "Dense", self.output_shape(name), self.neuron_count(name)) for name in self.layer_names()
        ]

    def step(self, name: str):
        if name not in self.layer_names():
            raise LayerError(f"unknown layer {name!r}; valid layers: {', '.join(self.layer_names())}")
        return name

    check_layer = step

    def layer(self, name: str) -> LayerInfo:
        return self.layers_info()[self.layer_names().index(self.step(name))]

    def output_shape(self, name: str) -> tuple:
        return (None, self.w1.shape[1] if self.step(name) == HIDDEN else self.n_classes)

    def neuron_count(self, name: str) -> int:
        return self.output_shape(name)[1]

    def default_layer(self) -> str:
        return HIDDEN

    def check_subject_layer(self, name: str) -> str:
        if self.step(name) != HIDDEN:
            raise LayerError(f"layer {name!r} is the logits; the subject layer is {HIDDEN!r}")
        return name

    def is_hidden(self, name: str) -> bool:
        return self.step(name) == HIDDEN

    def subject_layers(self) -> list[str]:
        return [HIDDEN]

    def neuron_layers(self) -> list[str]:
        return [HIDDEN]

    def weighted_layers(self) -> tuple[str, ...]:
        return (HIDDEN, LOGITS)

    def rule_label(self, name: str) -> str:
        return "epsilon"

    def rule_notes(self, layer: str | None) -> list[str]:
        return []

    # ---- relevance (LRP-epsilon through the two dense layers) -----------------------------------
    def relevance(self, layer: str | None, *, eps: float = 1e-7, batch_size: int | None = None):
        if layer is not None:
            self.check_subject_layer(layer)
        return _Relevance(self, layer, eps, batch_size or 512)

    def relevance_batch_size(self) -> int:
        return 512

    # ---- conventions -----------------------------------------------------------------------------
    def own_convention(self) -> InputConvention:
        return InputConvention()

    def measured_as(self, convention: InputConvention, *, wrapped: InputConvention | None) -> NumpyNet:
        if convention.preprocess is not None or convention.value_range != (0.0, 1.0):
            raise NotImplementedError("the test double takes images in [0, 1] without preprocessing")
        self.convention = convention
        return self

    def on_images(self, image_shape: tuple) -> NumpyNet:
        if tuple(image_shape) != self.input_shape:
            raise NotImplementedError("the test double takes images of its own input shape only")
        return self

    # ---- what the fuzz loop does not use ---------------------------------------------------------
    def feature_maps(self, layers):
        raise NotImplementedError("the test double has no feature maps")

    def gradients(self, kind: str, **spec):
        raise NotImplementedError("the test double has no gradients: use a Keras or PyTorch model")

    def attack(self, name: str, x, labels, **params):
        raise NotImplementedError("the test double runs no attacks: use a Keras or PyTorch model")

    def retrained(self, x, y, *, mode: str, epochs: int, batch_size: int = 256, random_state: int = 0):
        raise NotImplementedError("the test double does not train")

    def recipe(self):
        raise NotImplementedError("the test double is not shipped to other processes")


class _Relevance:
    """LRP-epsilon from one logit per input (the predicted one, or ``target``) down to the hidden layer's
    neurons (``layer`` = "hidden") or to the input pixels (None), as idcgen.relevance streams it."""

    def __init__(self, network: NumpyNet, layer: str | None, eps: float, batch_size: int):
        self.network, self.layer, self.eps, self.batch_size = network, layer, eps, batch_size

    def _stabilised(self, z: np.ndarray) -> np.ndarray:
        return z + self.eps * np.where(z >= 0, 1.0, -1.0)

    def batch(self, x: np.ndarray, target: np.ndarray | None = None, *, activations: bool = True):
        net = self.network
        flat = np.asarray(x, np.float64).reshape(len(x), -1)
        h = np.maximum(flat @ net.w1 + net.b1, 0.0)
        z = h @ net.w2 + net.b2
        t = z.argmax(axis=1) if target is None else np.asarray(target)
        rows = np.arange(len(x))
        # R_j = h_j w_jt / (z_t + eps sign z_t) * z_t: the chosen logit's relevance spread over the hidden units
        r_hidden = h * net.w2[:, t].T * (z[rows, t] / self._stabilised(z[rows, t]))[:, None]
        if self.layer is None:  # one layer further down: R_i = sum_j x_i w_ij / (a_j + eps sign a_j) * R_j
            pre = flat @ net.w1 + net.b1
            share = np.where(pre > 0, r_hidden / self._stabilised(pre), 0.0)
            r, a = flat * (share @ net.w1.T), flat
        else:
            r, a = r_hidden, h
        return r.astype(np.float32), (a.astype(np.float32) if activations else None), z.astype(np.float32)

    def maps(self, x: np.ndarray, target: np.ndarray | None = None) -> np.ndarray:
        """Pixel relevance in the shape of ``x`` (the pass down to the input)."""
        return self.batch(x, target, activations=False)[0].reshape(np.shape(x))
