"""Criteria whose coverage is a value rather than a share of known items: NLC (a sum of covariance norms),
TKNP (distinct top-k patterns), CC (activation vectors kept as far apart). None has a total: the number of
patterns or of vectors kept only grows, and NLC is a statistic of the inputs' spread.

Their trackers answer as :class:`~idcgen.criteria.base.CriterionTracker` does (``would_cover``, ``update``,
``result``, ``merge``), and also save their whole state as arrays (``state_arrays``, ``spec``), so that a
campaign folder restores them exactly (:func:`restore_tracker`).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import ParameterError
from .base import Criterion, CriterionResult, check_layer_names, layer_output_layers

__all__ = ["ValueCriterion", "ValueResult", "ValueTracker", "restore_tracker"]

#: a matrix product of fewer multiply-adds than this runs on one BLAS thread (a few ms on one core)
_ONE_THREAD_WORK = 1 << 27


class _OneBlasThread:
    """numpy's BLAS on one thread while any caller is inside (the setting is the process's: the first caller
    in sets it, the last one out restores it, whatever the threads and the nesting). The threadpoolctl
    controller is made once (20 ms); setting and restoring cost about 10 us."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._controller: Any = None
        self._limiter: Any = None

    def __enter__(self) -> None:
        with self._lock:
            if self._depth == 0:
                if self._controller is None:
                    from threadpoolctl import ThreadpoolController

                    self._controller = ThreadpoolController()
                self._limiter = self._controller.limit(limits=1, user_api="blas")
            self._depth += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                self._limiter.restore_original_limits()
                self._limiter = None


_ONE_BLAS_THREAD = _OneBlasThread()


def blas_threads_for(work: float) -> contextlib.AbstractContextManager:
    """A context in which numpy's BLAS runs on one thread when ``work`` (multiply-adds) is small. Beside a
    framework's own thread pools (TensorFlow's spin after each call), a small product split over BLAS threads
    mostly waits for them: on the 2-core machine of BENCHMARKS.md, NLC's scatter of 1,024 x 120 took 50-150 ms
    on the default threads against 1 ms on one."""
    return contextlib.nullcontext() if work > _ONE_THREAD_WORK else _ONE_BLAS_THREAD


@dataclass(frozen=True)
class ValueResult(CriterionResult):
    """The coverage of a set under a criterion without a total: ``score`` is the value itself (NLC's sum,
    the number of patterns or vectors); ``total`` is None. ``covered``: what the value counts (patterns,
    vectors) or, for NLC, the inputs it was computed over."""

    def __str__(self) -> str:
        if self.unit == "inputs":  # NLC: a statistic over the inputs, not a count of them
            return f"{self.criterion.upper()} {self.score:.6g} (over {self.covered} inputs; a value, not a share)"
        return f"{self.criterion.upper()} {self.covered} {self.unit} (a count, not a share)"

    def to_dict(self) -> dict:
        return {self.criterion: self.score, "covered": self.covered, "total": None}


#: tracker kind -> class, filled by ValueTracker's subclasses as their modules are imported
TRACKER_KINDS: dict[str, type[ValueTracker]] = {}


class ValueTracker:
    """The state of one value criterion over the inputs added so far. Subclasses keep their state in numpy
    arrays and define ``would_cover``, ``update``, ``value`` and the saving pair ``state_arrays``/``restore``."""

    kind: ClassVar[str] = ""
    total = None  # no total: see the module docstring

    def __init_subclass__(cls, **kwargs):
        # each kind registers itself, so restoring needs no import of the criteria' modules here (no cycle)
        super().__init_subclass__(**kwargs)
        if cls.kind:
            TRACKER_KINDS[cls.kind] = cls

    def __init__(self, *, criterion: str, unit: str):
        self.criterion = criterion
        self.unit = unit

    # ---- what callers read, as from CriterionTracker ------------------------------------------------
    @property
    def covered(self) -> int:
        raise NotImplementedError

    @property
    def value(self) -> float:
        raise NotImplementedError

    @property
    def score(self) -> float:
        """The value (not a fraction)."""
        return float(self.value)

    def result(self) -> ValueResult:
        return ValueResult(score=self.score, covered=self.covered, total=None, criterion=self.criterion, unit=self.unit)  # type: ignore[arg-type]

    def format_score(self, score: float) -> str:
        """``score`` as a report shows it: a number, never a percentage."""
        return f"{score:.6g}" if self.unit == "inputs" else f"{int(round(score))}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(criterion={self.criterion!r}, value={self.score:.6g}, covered={self.covered})"

    # ---- the tracker protocol ---------------------------------------------------------------------------
    def would_cover(self, features: Any) -> np.ndarray:
        raise NotImplementedError

    def update(self, features: Any) -> np.ndarray:
        raise NotImplementedError

    def add(self, features: Any) -> None:
        """Add a batch without returning which inputs were new (measuring a set); by default :meth:`update`."""
        self.update(features)

    def merge(self, other: "ValueTracker") -> "ValueTracker":
        raise NotImplementedError

    def _check_merge(self, other: Any) -> None:
        if type(other) is not type(self) or other.spec() != self.spec():
            raise ParameterError(
                f"{type(self).__name__}.merge: the trackers measure different things "
                f"({self.spec()} vs {getattr(other, 'spec', lambda: type(other).__name__)()})."
            )

    # ---- saving -----------------------------------------------------------------------------------------
    def spec(self) -> dict:
        """What the tracker is, as JSON (its kind and the parameters its state needs)."""
        return {"kind": self.kind, "criterion": self.criterion, "unit": self.unit}

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The whole state, as new arrays (a snapshot: later updates do not change them)."""
        raise NotImplementedError

    @classmethod
    def restore(cls, spec: dict, arrays: dict[str, np.ndarray]) -> "ValueTracker":
        raise NotImplementedError


class ValueCriterion(Criterion):
    """A value criterion over the outputs of ``layers`` (default: every convolution and dense layer, the logits
    included, as NeuraL-Coverage takes them; a conv layer's neurons are its channel means). Fit needs no
    training data: it only resolves the layers. Learns ``layers_`` and ``widths_``; ``total_`` is None."""

    needs_data = False

    def __init__(self, *, layers=None):
        self.layers = layers

    def _validate_params(self) -> None:
        check_layer_names(type(self).__name__, self.layers)

    def _fit_layers(self, network) -> tuple[str, ...]:
        names = layer_output_layers(network) if self.layers is None else self.layers
        self.layers_ = tuple(network.layer(name).name for name in names)  # LayerError for an unknown name
        self.widths_ = tuple(int(network.neuron_count(name)) for name in self.layers_)
        return self.layers_

    def _fit_end(self, state: Any) -> None:
        self.total_ = None

    def forward_layers(self) -> tuple[str, ...]:
        return self.layers_

    def _stack(self, acts) -> np.ndarray:
        """(n, sum of widths) float64: every layer's activations side by side, checked against the fit."""
        self._check_fitted()
        self._check_widths(acts, self.widths_, self.layers_)
        return np.concatenate([np.asarray(a, dtype=np.float64) for a in acts], axis=1)

    def _offsets(self) -> np.ndarray:
        return np.cumsum([0, *self.widths_])

    def tracker(self) -> ValueTracker:  # type: ignore[override]
        raise NotImplementedError


def restore_tracker(spec: dict, arrays: dict[str, np.ndarray]) -> ValueTracker:
    """A value tracker from what ``spec()`` and ``state_arrays()`` saved."""
    kinds = TRACKER_KINDS  # filled as idcgen.criteria imports nlc, tknp and cc
    if spec.get("kind") not in kinds:
        raise ParameterError(f"unknown tracker kind {spec.get('kind')!r}; known: {', '.join(kinds)}")
    return kinds[spec["kind"]].restore(spec, arrays)
