"""The frame every criterion other than IDC shares: fit on training data, map a batch of inputs to
the coverage items it hits, and track the items covered.

An *item* is what a criterion counts: a neuron (NC, TKNC), one of the k sections of a neuron's
training range (KMNC), a corner (NBC, SNAC), a surprise bucket (LSC, DSC). Items are numbered
0..total-1. The *features* of a batch of n inputs are an (n, slots) int64 array of item ids, -1 where
a slot hits nothing; a :class:`CriterionTracker` holds the covered items and, like the IDC
:class:`~idcgen.coverage.CoverageTracker` it wraps, is monotone, independent of input order, and
mergeable.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np
from tqdm.auto import tqdm

from idcgen.checks import check_int
from idcgen.convention import check_unscaled
from idcgen.coverage import CoverageResult, CoverageTracker
from idcgen.data import Dataset, as_array, check_labels, fit_to_model
from idcgen.errors import InputError, ParameterError

__all__ = ["Criterion", "CriterionResult", "CriterionTracker", "default_neuron_layers", "layer_output_layers"]


@dataclass(frozen=True)
class CriterionResult(CoverageResult):
    """The coverage of a set of inputs under one criterion; ``score`` is a fraction in [0, 1]."""

    criterion: str = ""
    unit: str = "items"

    def __str__(self) -> str:
        return f"{self.criterion.upper()} {100.0 * self.score:.1f} % ({self.covered} of {self.total} {self.unit})"

    def to_dict(self) -> dict:
        return {self.criterion: self.score, "covered": self.covered, "total": self.total}


def _as_features(features: Any, where: str) -> np.ndarray:
    """Features as a 2-D int64 array (n, slots); a 1-D array is one slot per input."""
    arr = np.asarray(features)
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2:
        raise InputError(f"{where}: features must be an (n, slots) array of item ids; got shape {arr.shape}.")
    if arr.size and (arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer)):
        raise InputError(f"{where}: features must be integer item ids (-1 for none); got dtype {arr.dtype}.")
    return arr.astype(np.int64, copy=False)


class CriterionTracker:
    """The set of covered items of one criterion. Monotone, order-independent, mergeable.

    Parameters
    ----------
    total : number of items, >= 1.
    covered : item ids already covered.
    criterion : the criterion's name ("kmnc", ...), for display and to refuse merging across criteria.
    unit : what an item is ("sections", ...), for display.
    """

    def __init__(self, total: int, covered: Any = (), *, criterion: str = "", unit: str = "items"):
        self._items = CoverageTracker(total)
        self.criterion = criterion
        self.unit = unit
        self.update(np.asarray(covered, dtype=np.int64).reshape(-1, 1))

    @property
    def total(self) -> int:
        return self._items.total

    @property
    def covered(self) -> int:
        """Number of covered items."""
        return self._items.covered

    @property
    def score(self) -> float:
        """Coverage as a fraction in [0, 1]."""
        return self._items.score

    def result(self) -> CriterionResult:
        return CriterionResult(
            score=self.score, covered=self.covered, total=self.total, criterion=self.criterion, unit=self.unit
        )

    def __repr__(self) -> str:
        return f"CriterionTracker(criterion={self.criterion!r}, total={self.total}, covered={self.covered})"

    def covered_ids(self) -> np.ndarray:
        """Covered item ids, sorted, int64."""
        return self._items.covered_ids()

    def _split(self, features: Any, where: str) -> tuple[np.ndarray, np.ndarray, int]:
        ids = _as_features(features, where)
        outside = (ids < -1) | (ids >= self.total)
        if outside.any():
            row, col = (int(i[0]) for i in np.nonzero(outside))
            raise InputError(
                f"{where}: item ids must be in [0, {self.total}) or -1 for none; got {int(outside.sum())} "
                f"outside, the first {ids[row, col]} in row {row}. Were the features made by another criterion "
                "or fit?"
            )
        hit = ids != -1
        return ids[hit], np.nonzero(hit)[0], len(ids)

    def _row_mask(self, rows: np.ndarray, new: np.ndarray, n: int) -> np.ndarray:
        mask = np.zeros(n, dtype=bool)
        mask[rows[new]] = True
        return mask

    def would_cover(self, features: Any) -> np.ndarray:
        """Bool mask (n,): inputs that would cover a new item (a new item counts for its first input only)."""
        ids, rows, n = self._split(features, f"{self.criterion or 'CriterionTracker'}.would_cover")
        return self._row_mask(rows, self._items.would_cover(ids), n)

    def update(self, features: Any) -> np.ndarray:
        """Mark the items hit by a batch covered; return the mask :meth:`would_cover` gave before the call.

        ``features``: (n, slots) int item ids, -1 for none (what ``Criterion.features`` returns).
        """
        ids, rows, n = self._split(features, f"{self.criterion or 'CriterionTracker'}.update")
        # ids are in row-major order, so the first occurrence of an id belongs to its first input
        return self._row_mask(rows, self._items.update(ids), n)

    def add(self, features: Any) -> None:
        """Add a batch without asking which inputs were new (measuring a set): what ``Criterion.coverage`` calls,
        so a value tracker (criteria/values.py) can skip the per-input answer."""
        self.update(features)

    def merge(self, other: "CriterionTracker") -> "CriterionTracker":
        """A new tracker covering the union of both sets."""
        if not isinstance(other, CriterionTracker):
            raise ParameterError(f"CriterionTracker.merge expects a CriterionTracker; got {type(other).__name__}.")
        if other.criterion != self.criterion or other.total != self.total:
            raise ParameterError(
                f"CriterionTracker.merge: the trackers measure different things ({self.criterion!r} with "
                f"{self.total} {self.unit} vs {other.criterion!r} with {other.total} {other.unit})."
            )
        merged = CriterionTracker(self.total, criterion=self.criterion, unit=self.unit)
        merged._items = self._items.merge(other._items)
        return merged


def check_layer_names(owner: str, layers: Any) -> None:
    if layers is None:
        return
    if (
        isinstance(layers, str)
        or not isinstance(layers, Sequence)
        or not layers
        or not all(isinstance(name, str) for name in layers)
    ):
        hint = f" (write layers=[{layers!r}])" if isinstance(layers, str) else ""
        raise ParameterError(
            f"The 'layers' parameter of {owner} must be a non-empty list of layer names or "
            f"None. Got {layers!r} instead{hint}."
        )
    if len(set(layers)) != len(layers):
        raise ParameterError(f"The 'layers' parameter of {owner} names a layer twice. Got {list(layers)!r} instead.")


def default_neuron_layers(network) -> list[str]:
    """Every hidden layer with weights before the logits, as DeepXplore and DeepGauge count neurons (an
    activation layer right after a weighted one stands for it): :meth:`idcgen.framework.Network.neuron_layers`."""
    return network.neuron_layers()


def layer_output_layers(network) -> list[str]:
    """Every convolution and dense layer, the logits included, as NeuraL-Coverage hooks them: the layers with
    weights that are not normalisation or activation layers (a Keras layer's fused activation is part of its
    output). Without a layer graph (a network of another kind): its weighted layers."""
    graph = getattr(network, "layer_graph", None)
    if graph is None:
        return list(network.weighted_layers())
    last = graph.classifier.name
    chosen = [
        r.name
        for r in graph.records
        if r.weighted and not r.role and r.per_input and r.outputs == 1 and (r.name in graph.hidden or r.name == last)
    ]
    return chosen or list(network.weighted_layers())


def as_network(model):
    from idcgen.framework import as_network

    return as_network(model)


def check_batch_size(owner: str, batch_size: Any) -> None:
    """ParameterError, naming ``owner``, unless ``batch_size`` is an int >= 1."""
    check_int("batch_size", batch_size, 1, owner=owner)


def raw_inputs(x: Any, network) -> np.ndarray:
    """The inputs as an array, checked against the model's input shape on the first item only; a uint8 array
    (pixels as read from image files) is refused for a model taking [0, 1] images. Float inputs are left as they
    are: a criterion measures any model, hand-made ones on integer-valued inputs included."""
    x = as_array(x)
    try:
        fit_to_model(x[:1] if x.ndim >= 1 else x, network.input_shape)  # raises InputError when it cannot fit
    except InputError:
        fit_to_model(x, network.input_shape)  # the whole array's message: one image without its batch axis
        raise
    if x.dtype == np.uint8:
        check_unscaled(x, network)
    return x


# ---- the criterion base class ------------------------------------------------------------------------
class Criterion:
    """A coverage criterion: ``fit`` on training data, then ``features`` / ``tracker`` / ``coverage``.

    scikit-learn conventions: ``__init__`` stores its keyword-only parameters unchanged, ``fit``
    validates them, learns, and returns ``self``; learned attributes end in ``_`` (every fitted
    criterion has ``total_``, its number of items).
    """

    name: ClassVar[str] = ""
    unit: ClassVar[str] = "items"
    #: whether fit reads the training activations (NC and TKNC need only the layer widths)
    needs_data: ClassVar[bool] = True
    #: the coverage orderings of idcgen.prioritize it gives: <name>-total and <name>-additional
    orderings: ClassVar[tuple[str, ...]] = ("total", "additional")

    # ---- parameters -------------------------------------------------------------------------------
    @classmethod
    def _param_names(cls) -> list[str]:
        return [p.name for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"]

    def get_params(self) -> dict:
        return {name: getattr(self, name) for name in self._param_names()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.get_params().items())})"

    def _validate_params(self) -> None:
        """Raise ParameterError for a parameter out of range (subclasses extend)."""

    # ---- fitting: one batched pass, the subclass folds each batch into its state -----------------
    def _fit_layers(self, network) -> tuple[str, ...]:
        raise NotImplementedError

    def _fit_start(self, network, layers: tuple[str, ...]) -> Any:
        return None

    def _fit_batch(self, state: Any, probs: np.ndarray, acts: list[np.ndarray], y: np.ndarray | None) -> None:
        pass

    def _fit_end(self, state: Any) -> None:
        pass

    def fit(self, network, x_train, y_train=None, *, batch_size: int = 1024, progress: bool = False) -> "Criterion":
        """Learn what the criterion needs from the training inputs, in one batched forward pass.

        Parameters
        ----------
        network : Network or keras.Model
        x_train : array (n, *input_shape) or Dataset, scaled as the model expects.
        y_train : array (n,), optional. Labels; only LSC and DSC with ``group="label"`` use them.
        batch_size : inputs per forward pass; only one batch of activations is held at a time.
        progress : show a progress bar.
        """
        owner = type(self).__name__
        self.__dict__.pop("total_", None)  # a failed refit must not leave the old fit looking valid
        self._validate_params()
        check_batch_size(owner, batch_size)
        network = as_network(network)
        layers = self._fit_layers(network)
        x = raw_inputs(x_train, network)  # InputError when empty or mis-shaped
        y = None if y_train is None else check_labels(x, y_train, network.task)  # floats for regression
        state = self._fit_start(network, layers)
        if self.needs_data:
            with tqdm(total=len(x), desc=f"{self.name} fit", unit="input", disable=not progress, leave=False) as bar:
                for start in range(0, len(x), batch_size):
                    stop = min(start + batch_size, len(x))
                    probs, acts = network.forward(fit_to_model(x[start:stop], network.input_shape), layers)
                    self._fit_batch(state, probs, acts, None if y is None else y[start:stop])
                    bar.update(stop - start)
        self._fit_end(state)
        self.n_inputs_ = int(len(x))
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "total_"):
            raise ParameterError(f"this {type(self).__name__} is not fitted yet: call fit first.")

    # ---- measuring --------------------------------------------------------------------------------
    def forward_layers(self) -> tuple[str, ...]:
        """The layers whose activations ``features_from`` needs, in order (after fit)."""
        raise NotImplementedError

    def features_from(self, probs: np.ndarray, acts: Sequence[np.ndarray]) -> np.ndarray:
        """Features from a forward pass already made: ``probs, acts = network.forward(x, crit.forward_layers())``.

        Lets a caller that runs the model anyway (a fuzz loop) share the pass. Returns (n, slots) int64
        item ids, -1 for none.
        """
        raise NotImplementedError

    def features(self, network, x) -> np.ndarray:
        """(n, slots) int64 item ids hit by each input (-1 for none), from one forward pass."""
        self._check_fitted()
        network = as_network(network)
        probs, acts = network.forward(
            fit_to_model(x.x if isinstance(x, Dataset) else x, network.input_shape), self.forward_layers()
        )
        return self.features_from(probs, acts)

    def tracker(self) -> CriterionTracker:
        """An empty tracker for this criterion's items."""
        self._check_fitted()
        return CriterionTracker(self.total_, criterion=self.name, unit=self.unit)

    def coverage(self, network, x, *, batch_size: int = 1024) -> CriterionResult:
        """The coverage of the input set ``x`` (batched; one batch of activations at a time)."""
        self._check_fitted()
        check_batch_size(type(self).__name__, batch_size)
        network = as_network(network)
        x = raw_inputs(x, network)
        tracker = self.tracker()
        for start in range(0, len(x), batch_size):
            tracker.add(self.features(network, x[start : start + batch_size]))
        return tracker.result()

    def _check_widths(self, acts: Sequence[np.ndarray], widths: Sequence[int], layers: Sequence[str]) -> None:
        if len(acts) != len(widths):
            raise InputError(
                f"{type(self).__name__}: expected the activations of {len(widths)} layer(s) "
                f"{list(layers)}; got {len(acts)}."
            )
        for a, w, name in zip(acts, widths, layers):
            if a.ndim != 2 or a.shape[1] != w:
                raise InputError(
                    f"{type(self).__name__}: the activations of layer {name!r} must have shape "
                    f"(n, {w}) as when fitted; got {a.shape}. Is this the fitted model?"
                )
