"""NLC, NeuraL-Coverage (Yuan, Pang and Wang, ICSE 2023): per layer, the covariance of the layer's outputs
over the inputs (a conv layer's as channel means); the coverage is the sum over the layers of a norm of
that covariance, and an input is new when adding it raises the sum (docs/design.md, "Other criteria").

The state of a layer is the count n, the mean and the scatter matrix M2 = sum (x - mean)(x - mean)^T; the
covariance is M2 / n (the population covariance, as NeuraL-Coverage's estimator divides by the count). A
batch is merged into it with the pairwise update of Chan, Golub and LeVeque, exact whatever the batching,
so the NLC of a set does not depend on how it was cut into batches (up to rounding).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..checks import check_choice
from ..errors import InputError
from .values import ValueCriterion, ValueTracker, blas_threads_for

__all__ = ["NeuraLCoverage", "CovarianceTracker"]

#: rows x width^2 float64 values computed at once when judging inputs (2 MiB: they stay in the core's cache
#: through the five passes over them)
_BLOCK_ELEMENTS = 1 << 18
#: a gain within this relative rounding of the value is none (an input at the mean, a duplicate)
_ROUNDING = 1e-12


class CovarianceTracker(ValueTracker):
    """The running mean and scatter matrix of each layer's outputs over the inputs added, and their NLC.

    ``widths``: the layers' widths, in the order of the feature columns. ``reduction``: "sum" (the sum of
    the covariance's absolute entries) or "mean" (their mean)."""

    kind = "nlc"

    def __init__(self, widths: Sequence[int], reduction: str = "sum", *, criterion: str = "nlc"):
        super().__init__(criterion=criterion, unit="inputs")
        self.widths = tuple(int(w) for w in widths)
        self.reduction = reduction
        self.count = 0
        self.means = [np.zeros(w) for w in self.widths]
        self.scatters = [np.zeros((w, w)) for w in self.widths]
        self._offsets = np.cumsum([0, *self.widths])
        self._layer_values: np.ndarray | None = None  # layer_values() of the current state, once computed

    @property
    def covered(self) -> int:
        return self.count

    def _norm(self, total_abs: Any, width: int) -> Any:
        return total_abs / (width * width) if self.reduction == "mean" else total_abs

    def layer_values(self) -> np.ndarray:
        """(layers,) the norm of each layer's covariance; zeros before two inputs."""
        if self.count == 0:
            return np.zeros(len(self.widths))
        if self._layer_values is None:
            self._layer_values = np.array(
                [self._norm(np.abs(m2).sum() / self.count, w) for m2, w in zip(self.scatters, self.widths)]
            )
        return self._layer_values.copy()

    @property
    def value(self) -> float:
        return float(self.layer_values().sum())

    def covariances(self) -> list[np.ndarray]:
        """Each layer's covariance (population: divided by the count)."""
        return [m2 / max(self.count, 1) for m2 in self.scatters]

    def _rows(self, features: Any, where: str) -> np.ndarray:
        x = np.asarray(features, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self._offsets[-1]:
            raise InputError(
                f"{where}: features must be an (n, {self._offsets[-1]}) array of the layers' outputs; got shape "
                f"{x.shape}. Were they made by another criterion?"
            )
        return x

    def gains(self, features: Any) -> np.ndarray:
        """(n,) how much adding each input alone would change the NLC (negative: it would lower it)."""
        x = self._rows(features, "NLC.gains")
        n = self.count
        out = np.zeros(len(x))
        weight = n / (n + 1) ** 2  # M2 grows by delta delta^T n / (n + 1), then divides by n + 1
        before = self.layer_values()
        for layer, ((start, stop), mean, m2, width) in enumerate(
            zip(zip(self._offsets[:-1], self._offsets[1:]), self.means, self.scatters, self.widths)
        ):
            delta = x[:, start:stop] - mean
            base = m2 / (n + 1)
            # every candidate's whole covariance at once, a block of rows at a time: the outer products by
            # broadcasting into one buffer, scaled, shifted and summed in place (no gathers, no temporaries)
            rows = max(1, _BLOCK_ELEMENTS // (width * width))
            buffer = np.empty((min(rows, len(x)), width, width))
            for s in range(0, len(x), rows):
                d = delta[s : s + rows]
                after = buffer[: len(d)]
                np.multiply(d[:, :, None], d[:, None, :], out=after)
                after *= weight
                after += base
                np.abs(after, out=after)
                out[s : s + len(d)] += self._norm(after.reshape(len(d), -1).sum(axis=1), width) - before[layer]
        return out

    def would_cover(self, features: Any) -> np.ndarray:
        """Bool mask (n,): inputs whose addition alone to the inputs so far raises the NLC. Each is judged
        against the state before the batch (a batch is computed at once)."""
        gains = self.gains(features)
        return gains > _ROUNDING * max(self.value, 1e-300)

    def update(self, features: Any) -> np.ndarray:
        """Merge a batch into every layer's state (exact, whatever the batch); return :meth:`would_cover`'s
        mask before the call."""
        x = self._rows(features, "NLC.update")
        mask = self.would_cover(x)
        self.add(x)
        return mask

    def add(self, features: Any) -> None:
        """Merge a batch without judging its inputs (what measuring a set needs)."""
        x = self._rows(features, "NLC.add")
        self._merge(len(x), *self._batch_state(x))

    def _batch_state(self, x: np.ndarray) -> tuple[list, list]:
        means, scatters = [], []
        for start, stop in zip(self._offsets[:-1], self._offsets[1:]):
            part = x[:, start:stop]
            mean = part.mean(axis=0) if len(part) else np.zeros(stop - start)
            centred = part - mean
            means.append(mean)
            with blas_threads_for(len(part) * (stop - start) ** 2):
                scatters.append(centred.T @ centred)
        return means, scatters

    def _merge(self, m: int, means: list, scatters: list) -> None:
        if m == 0:
            return
        n, total = self.count, self.count + m
        for i, (mean_b, m2_b) in enumerate(zip(means, scatters)):
            delta = mean_b - self.means[i]
            self.scatters[i] = self.scatters[i] + m2_b + np.outer(delta, delta) * (n * m / total)
            self.means[i] = self.means[i] + delta * (m / total)
        self.count = total
        self._layer_values = None

    def merge(self, other: "ValueTracker") -> "CovarianceTracker":
        """A new tracker over the inputs of both (exact)."""
        self._check_merge(other)
        assert isinstance(other, CovarianceTracker)
        merged = CovarianceTracker.restore(self.spec(), self.state_arrays())
        merged._merge(other.count, [m.copy() for m in other.means], [m.copy() for m in other.scatters])
        return merged

    def spec(self) -> dict:
        return dict(super().spec(), widths=list(self.widths), reduction=self.reduction)

    def state_arrays(self) -> dict[str, np.ndarray]:
        arrays = {"count": np.array(self.count, dtype=np.int64)}
        for i, (mean, m2) in enumerate(zip(self.means, self.scatters)):
            arrays[f"mean{i}"] = mean.copy()
            arrays[f"scatter{i}"] = m2.copy()
        return arrays

    @classmethod
    def restore(cls, spec: dict, arrays: dict[str, np.ndarray]) -> "CovarianceTracker":
        tracker = cls(spec["widths"], spec.get("reduction", "sum"), criterion=spec.get("criterion", "nlc"))
        tracker.count = int(arrays["count"])
        tracker.means = [np.array(arrays[f"mean{i}"], dtype=np.float64) for i in range(len(tracker.widths))]
        tracker.scatters = [np.array(arrays[f"scatter{i}"], dtype=np.float64) for i in range(len(tracker.widths))]
        return tracker


class NeuraLCoverage(ValueCriterion):
    """NLC (NeuraL-Coverage, Yuan et al., ICSE 2023): the sum over ``layers`` of the norm of the covariance
    of the layer's outputs over the inputs. A value, not a share: its result has no total.

    Parameters
    ----------
    layers : layer names, default every convolution and dense layer, the logits included (NeuraL-Coverage's).
    reduction : "sum" (default: the sum of the covariance's absolute entries, what NeuraL-Coverage's code
        computes) or "mean" (their mean, which weighs a wide layer as much as a narrow one).
    """

    name = "nlc"
    unit = "inputs"
    orderings = ()  # one input has no spread, and a greedy NLC ordering is quadratic in the set
    REDUCTIONS = ("sum", "mean")

    def __init__(self, *, layers: Sequence[str] | None = None, reduction: str = "sum"):
        self.layers = layers
        self.reduction = reduction

    def _validate_params(self) -> None:
        super()._validate_params()
        check_choice("reduction", self.reduction, self.REDUCTIONS, owner=type(self).__name__)

    def features_from(self, probs, acts) -> np.ndarray:
        """(n, sum of widths) float64: the layers' outputs side by side (what the tracker accumulates)."""
        return self._stack(acts)

    def tracker(self) -> CovarianceTracker:  # type: ignore[override]
        self._check_fitted()
        return CovarianceTracker(self.widths_, self.reduction, criterion=self.name)
