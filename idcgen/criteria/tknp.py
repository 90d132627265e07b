"""TKNP, DeepGauge's top-k neuron patterns (Ma et al., ASE 2018): the pattern of an input is, for each layer,
the set of its k most active neurons; TKNP counts the distinct patterns a set reaches, over the layers
together (``mode="network"``, DeepGauge's and NeuraL-Coverage's default) or layer by layer, summed
(``mode="layer"``). A count, with no total: the possible patterns are too many to enumerate.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..checks import check_choice, check_int
from ..errors import InputError
from .values import ValueCriterion, ValueTracker

__all__ = ["TopKNeuronPatterns", "PatternTracker"]


class PatternTracker(ValueTracker):
    """The distinct patterns seen so far. ``slots``: how many neuron indices each layer's part of a pattern
    holds (min(k, width)); ``mode``: "network" (a pattern is the whole row) or "layer" (each layer's part
    counts on its own)."""

    kind = "tknp"

    def __init__(self, slots: Sequence[int], mode: str = "network", *, criterion: str = "tknp"):
        super().__init__(criterion=criterion, unit="patterns")
        self.slots = tuple(int(s) for s in slots)
        self.mode = mode
        self._offsets = np.cumsum([0, *self.slots])
        parts = 1 if mode == "network" else len(self.slots)
        self._seen: list[set] = [set() for _ in range(parts)]
        self._kept: list[list] = [[] for _ in range(parts)]  # in the order first seen, for saving

    @property
    def covered(self) -> int:
        return sum(len(s) for s in self._seen)

    @property
    def value(self) -> float:
        return float(self.covered)

    def _parts(self, features: Any, where: str) -> list[np.ndarray]:
        x = np.asarray(features)
        if x.ndim != 2 or x.shape[1] != self._offsets[-1] or (x.size and not np.issubdtype(x.dtype, np.integer)):
            raise InputError(
                f"{where}: features must be an (n, {self._offsets[-1]}) integer array of top-k neuron indices; "
                f"got shape {x.shape}, dtype {x.dtype}. Were they made by another criterion?"
            )
        x = x.astype(np.int64, copy=False)
        if self.mode == "network":
            return [np.ascontiguousarray(x)]
        return [np.ascontiguousarray(x[:, a:b]) for a, b in zip(self._offsets[:-1], self._offsets[1:])]

    def _judge(self, features: Any, where: str, keep: bool) -> np.ndarray:
        """Mask of the inputs with a pattern not seen before (nor earlier in the batch); ``keep`` records them."""
        parts = self._parts(features, where)
        n = len(parts[0])
        new = np.zeros(n, dtype=bool)
        for part, seen, kept in zip(parts, self._seen, self._kept):
            batch: set = set()
            for i in range(n):
                key = part[i].tobytes()
                if key not in seen and key not in batch:
                    batch.add(key)
                    new[i] = True
                    if keep:
                        kept.append(part[i].copy())
            if keep:
                seen |= batch
        return new

    def would_cover(self, features: Any) -> np.ndarray:
        """Bool mask (n,): inputs with a new pattern (a new pattern counts for its first input only)."""
        return self._judge(features, "TKNP.would_cover", keep=False)

    def update(self, features: Any) -> np.ndarray:
        """Record the batch's patterns; return :meth:`would_cover`'s mask before the call."""
        return self._judge(features, "TKNP.update", keep=True)

    def merge(self, other: "ValueTracker") -> "PatternTracker":
        """A new tracker holding the patterns of both."""
        self._check_merge(other)
        assert isinstance(other, PatternTracker)
        merged = PatternTracker.restore(self.spec(), self.state_arrays())
        for seen, kept, theirs in zip(merged._seen, merged._kept, other._kept):
            for row in theirs:
                if row.tobytes() not in seen:
                    seen.add(row.tobytes())
                    kept.append(row.copy())
        return merged

    def spec(self) -> dict:
        return dict(super().spec(), slots=list(self.slots), mode=self.mode)

    def state_arrays(self) -> dict[str, np.ndarray]:
        widths = [self._offsets[-1]] if self.mode == "network" else list(self.slots)
        return {
            f"patterns{i}": (np.array(kept, dtype=np.int64) if kept else np.zeros((0, w), np.int64))
            for i, (kept, w) in enumerate(zip(self._kept, widths))
        }

    @classmethod
    def restore(cls, spec: dict, arrays: dict[str, np.ndarray]) -> "PatternTracker":
        tracker = cls(spec["slots"], spec.get("mode", "network"), criterion=spec.get("criterion", "tknp"))
        for i, (seen, kept) in enumerate(zip(tracker._seen, tracker._kept)):
            for row in np.asarray(arrays[f"patterns{i}"], dtype=np.int64):
                row = np.ascontiguousarray(row)
                seen.add(row.tobytes())
                kept.append(row)
        return tracker


class TopKNeuronPatterns(ValueCriterion):
    """TKNP (DeepGauge): the number of distinct top-k neuron patterns. An input's pattern holds, for each of
    ``layers``, the indices of its ``k`` most active neurons as a set (written in increasing order; ties go
    to the lower index, as in TKNC). A count, not a share: its result has no total.

    Parameters
    ----------
    k : int >= 1, default 3 (as TKNC here; DeepGauge reports k = 1, 2, 3).
    layers : layer names, default every convolution and dense layer, the logits included (NeuraL-Coverage's).
    mode : "network" (default: a pattern is the tuple over all layers) or "layer" (the distinct patterns
        of each layer, summed over the layers).
    """

    name = "tknp"
    orderings = ("additional",)  # alone, every input covers one pattern: a total ranks nothing
    unit = "patterns"
    MODES = ("network", "layer")

    def __init__(self, *, k: int = 3, layers: Sequence[str] | None = None, mode: str = "network"):
        self.k = k
        self.layers = layers
        self.mode = mode

    def _validate_params(self) -> None:
        super()._validate_params()
        check_int("k", self.k, 1, owner=type(self).__name__)
        check_choice("mode", self.mode, self.MODES, owner=type(self).__name__)

    def features_from(self, probs, acts) -> np.ndarray:
        """(n, slots) int64: each layer's top-k neuron indices, in increasing order, layers side by side."""
        self._check_fitted()
        self._check_widths(acts, self.widths_, self.layers_)
        parts = []
        for a in acts:
            top = np.argsort(-np.asarray(a, dtype=np.float64), axis=1, kind="stable")[:, : self.k]
            parts.append(np.sort(top, axis=1).astype(np.int64))
        return np.concatenate(parts, axis=1)

    def tracker(self) -> PatternTracker:  # type: ignore[override]
        self._check_fitted()
        return PatternTracker([min(self.k, w) for w in self.widths_], self.mode, criterion=self.name)
