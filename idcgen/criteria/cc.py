"""CC, TensorFuzz's coverage (Odena et al., ICML 2019), per layer as NeuraL-Coverage computes it: an input is
new in a layer when the nearest activation vector already kept for that layer is farther than ``threshold``
(squared Euclidean distance, as both compare); it is then kept. The coverage is the number of vectors kept,
over the layers. A count, with no total, and it depends on the order the inputs come in.

The nearest kept vector is found with matrix products in blocks (idcgen.criteria.surprise.nearest), not a
loop over the kept vectors; within a batch, the inputs new against the kept vectors are compared with
each other in order, so that of two close inputs only the first is kept.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..checks import check_real
from ..errors import InputError
from .surprise import nearest
from .values import ValueCriterion, ValueTracker

__all__ = ["ClusterCoverage", "ClusterTracker"]


class ClusterTracker(ValueTracker):
    """The activation vectors kept for each layer. ``widths``: the layers' widths, in the order of the feature
    columns; ``threshold``: the squared distance beyond which a vector is new."""

    kind = "cc"

    def __init__(self, widths: Sequence[int], threshold: float, *, criterion: str = "cc"):
        super().__init__(criterion=criterion, unit="vectors")
        self.widths = tuple(int(w) for w in widths)
        self.threshold = float(threshold)
        self._offsets = np.cumsum([0, *self.widths])
        self._vectors = [np.zeros((0, w)) for w in self.widths]  # capacity doubles; the first _counts rows hold
        self._counts = [0] * len(self.widths)

    @property
    def covered(self) -> int:
        return int(sum(self._counts))

    @property
    def value(self) -> float:
        return float(self.covered)

    def kept(self, layer: int) -> np.ndarray:
        """The vectors kept for layer number ``layer``, in the order kept."""
        return self._vectors[layer][: self._counts[layer]]

    def _rows(self, features: Any, where: str) -> np.ndarray:
        x = np.asarray(features, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self._offsets[-1]:
            raise InputError(
                f"{where}: features must be an (n, {self._offsets[-1]}) array of the layers' outputs; got shape "
                f"{x.shape}. Were they made by another criterion?"
            )
        return x

    def _new_in_layer(self, layer: int, part: np.ndarray) -> np.ndarray:
        """Row indices of ``part`` that are new in ``layer``, in order: farther than the threshold from every
        kept vector and from every earlier new row of the batch."""
        kept = self.kept(layer)
        if len(kept):
            _, distance = nearest(part, kept)
            candidates = np.flatnonzero(distance * distance > self.threshold)
        else:
            candidates = np.arange(len(part))
        if len(candidates) <= 1:
            return candidates
        c = part[candidates]
        norms = np.einsum("ij,ij->i", c, c)
        pairwise = np.maximum(norms[:, None] + norms[None, :] - 2.0 * (c @ c.T), 0.0)
        close = pairwise <= self.threshold
        blocked = np.zeros(len(candidates), dtype=bool)
        accepted = []
        for i in range(len(candidates)):  # in order: an accepted row blocks the later rows close to it
            if not blocked[i]:
                accepted.append(i)
                blocked |= close[i]
        return candidates[np.asarray(accepted, dtype=np.int64)]

    def _judge(self, features: Any, where: str, keep: bool) -> np.ndarray:
        x = self._rows(features, where)
        new = np.zeros(len(x), dtype=bool)
        for layer, (start, stop) in enumerate(zip(self._offsets[:-1], self._offsets[1:])):
            rows = self._new_in_layer(layer, x[:, start:stop])
            new[rows] = True
            if keep:
                self._append(layer, x[rows, start:stop])
        return new

    def _append(self, layer: int, rows: np.ndarray) -> None:
        count, store = self._counts[layer], self._vectors[layer]
        if count + len(rows) > len(store):
            grown = np.zeros((max(2 * len(store), count + len(rows), 64), store.shape[1]))
            grown[:count] = store[:count]
            self._vectors[layer] = store = grown
        store[count : count + len(rows)] = rows
        self._counts[layer] = count + len(rows)

    def would_cover(self, features: Any) -> np.ndarray:
        """Bool mask (n,): inputs new in some layer (of two close new inputs, the first only)."""
        return self._judge(features, "CC.would_cover", keep=False)

    def update(self, features: Any) -> np.ndarray:
        """Keep each layer's new vectors of the batch; return :meth:`would_cover`'s mask before the call."""
        return self._judge(features, "CC.update", keep=True)

    def merge(self, other: "ValueTracker") -> "ClusterTracker":
        """A new tracker: this one's vectors, then those of ``other`` that are new to them (in its order)."""
        self._check_merge(other)
        assert isinstance(other, ClusterTracker)
        merged = ClusterTracker.restore(self.spec(), self.state_arrays())
        for layer in range(len(self.widths)):
            theirs = other.kept(layer)
            merged._append(layer, theirs[merged._new_in_layer(layer, theirs)])
        return merged

    def spec(self) -> dict:
        return dict(super().spec(), widths=list(self.widths), threshold=self.threshold)

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {f"vectors{i}": self.kept(i).copy() for i in range(len(self.widths))}

    @classmethod
    def restore(cls, spec: dict, arrays: dict[str, np.ndarray]) -> "ClusterTracker":
        tracker = cls(spec["widths"], spec["threshold"], criterion=spec.get("criterion", "cc"))
        for i in range(len(tracker.widths)):
            tracker._append(i, np.asarray(arrays[f"vectors{i}"], dtype=np.float64).reshape(-1, tracker.widths[i]))
        return tracker


class ClusterCoverage(ValueCriterion):
    """CC (TensorFuzz's coverage, per layer as in NeuraL-Coverage): the number of activation vectors kept, an
    input's vector of a layer being kept when the nearest one kept before is farther than ``threshold``
    (squared Euclidean distance). A count, not a share: its result has no total.

    Parameters
    ----------
    threshold : float > 0, default 1.0 (TensorFuzz's ``ann_threshold``).
    layers : layer names, default every convolution and dense layer, the logits included (NeuraL-Coverage's);
        ``layers=[<logits layer>]`` is TensorFuzz's own coverage.
    """

    name = "cc"
    orderings = ("additional",)  # alone, every input covers one vector: a total ranks nothing
    unit = "vectors"

    def __init__(self, *, threshold: float = 1.0, layers: Sequence[str] | None = None):
        self.threshold = threshold
        self.layers = layers

    def _validate_params(self) -> None:
        super()._validate_params()
        check_real("threshold", self.threshold, 0.0, None, closed="neither", owner=type(self).__name__)

    def features_from(self, probs, acts) -> np.ndarray:
        """(n, sum of widths) float64: the layers' outputs side by side."""
        return self._stack(acts)

    def tracker(self) -> ClusterTracker:  # type: ignore[override]
        self._check_fitted()
        return ClusterTracker(self.widths_, self.threshold, criterion=self.name)
