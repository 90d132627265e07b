"""Combinations of important-neuron clusters, and Importance-Driven Coverage (IDC).

INCC, the set of combinations, is the Cartesian product of the per-neuron centroid sets (paper Eq. 5).
An input maps to the combination nearest to its important-neuron activations; the Euclidean distance
separates by neuron, so that is the nearest centroid of each neuron on its own. A combination is
encoded as one integer in mixed radix, **neuron 0 the most significant digit** (the order of
``np.ravel_multi_index``):

    id = ((i_0 * k_1 + i_1) * k_2 + i_2) ... * k_{m-1} + i_{m-1}

where i_j is the cluster index of neuron j and k_j its number of clusters. IDC(Y) is the share of the
combinations hit by Y (Eq. 6); a :class:`CoverageTracker` holds the hit set: monotone, independent of
input order, and mergeable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral
from typing import Any, Iterable, Sequence

import numpy as np

from idcgen.clusters import nearest_centroid
from idcgen.errors import InputError, ParameterError

__all__ = ["MAX_COMBINATIONS", "BITMAP_MAX_TOTAL", "Combinations", "CoverageResult", "CoverageTracker"]

MAX_COMBINATIONS = 2**62  # ids are int64; this leaves headroom for arithmetic on them
BITMAP_MAX_TOTAL = 2**24  # up to here the covered set is a bool bitmap (16 MB at most)
_FORCED_BITMAP_LIMIT = 2**30


@dataclass(frozen=True)
class CoverageResult:
    """IDC of a set of inputs. ``score`` is a fraction in [0, 1]; percentages only on display."""

    score: float
    covered: int
    total: int

    def __str__(self) -> str:
        return f"IDC {100.0 * self.score:.1f} % ({self.covered} of {self.total} combinations)"

    def to_dict(self) -> dict:
        return {"idc": self.score, "covered": self.covered, "total": self.total}


def _as_ids(ids: Any, total: int, where: str) -> np.ndarray:
    """Combination ids as a 1-D int64 array, each in [0, total)."""
    arr = np.asarray(ids)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.ndim > 1:
        raise InputError(f"{where}: combination ids must be a 1-D array; got shape {arr.shape}.")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise InputError(f"{where}: combination ids must be integers; got dtype {arr.dtype}.")
    arr = np.atleast_1d(arr)
    outside = (arr < 0) | (arr >= total)
    if outside.any():
        first = int(np.flatnonzero(outside)[0])
        raise InputError(
            f"{where}: combination ids must be in [0, {total}); got {int(outside.sum())} outside, "
            f"the first {arr[first]} at position {first}. Were they made with a different analysis?"
        )
    return arr.astype(np.int64, copy=False)


class Combinations:
    """Maps important-neuron activations (n, m) to integer combination ids (mixed radix).

    Parameters
    ----------
    centroids : one sorted (strictly increasing) centroid array per important neuron, m >= 1.

    Attributes
    ----------
    m : number of important neurons.
    cluster_counts : (k_0, ..., k_{m-1}).
    total : |INCC| = prod k_j, a Python int.
    """

    def __init__(self, centroids: Sequence[np.ndarray]):
        arrays = []
        for j, c in enumerate(centroids):
            try:
                c = np.array(c, dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise ParameterError(f"Combinations: centroids of neuron {j} must be numbers ({exc}).") from exc
            if c.ndim != 1 or c.size == 0 or not np.all(np.isfinite(c)) or np.any(np.diff(c) <= 0):
                raise ParameterError(
                    f"Combinations: centroids of neuron {j} must be a non-empty, finite, strictly increasing "
                    f"1-D array; got {c!r}."
                )
            c.setflags(write=False)
            arrays.append(c)
        if not arrays:
            raise ParameterError("Combinations needs the centroids of at least one important neuron; got none.")
        self._centroids = tuple(arrays)
        self.cluster_counts = tuple(int(c.size) for c in arrays)
        self.m = len(arrays)
        total = math.prod(self.cluster_counts)
        if total > MAX_COMBINATIONS:
            raise ParameterError(
                f"Combinations: {self.m} important neurons with {self.cluster_counts} clusters make {total} "
                f"combinations, more than 2**62 = {MAX_COMBINATIONS}, the most one int64 id can encode. "
                "Lower m or the cluster range."
            )
        self.total = total

    @property
    def centroids(self) -> tuple[np.ndarray, ...]:
        """The (read-only) centroid array of each important neuron."""
        return self._centroids

    def __repr__(self) -> str:
        return f"Combinations(m={self.m}, cluster_counts={self.cluster_counts}, total={self.total})"

    def assign(self, activations: np.ndarray) -> np.ndarray:
        """Nearest-centroid index per neuron: (n, m) float -> (n, m) int64; ties go to the lower centroid."""
        try:
            a = np.asarray(activations, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InputError(f"Combinations.assign: activations must be numbers ({exc}).") from exc
        if a.ndim != 2 or a.shape[1] != self.m:
            raise InputError(
                f"Combinations.assign: activations must have shape (n, {self.m}), one column per important "
                f"neuron; got shape {a.shape}."
            )
        bad = ~np.isfinite(a)
        if bad.any():
            row = int(np.flatnonzero(bad.any(axis=1))[0])
            raise InputError(
                f"Combinations.assign: activations must be finite; {int(bad.sum())} NaN or infinite value(s), "
                f"the first in row {row}."
            )
        out = np.empty(a.shape, dtype=np.int64)
        for j, c in enumerate(self._centroids):
            out[:, j] = nearest_centroid(a[:, j], c)
        return out

    def ids(self, activations: np.ndarray) -> np.ndarray:
        """Combination id of each input: (n, m) float -> (n,) int64 (neuron 0 most significant)."""
        clusters = self.assign(activations)
        ids = np.zeros(clusters.shape[0], dtype=np.int64)
        for j, k in enumerate(self.cluster_counts):
            ids = ids * k + clusters[:, j]
        return ids

    def decode(self, ids: Any) -> np.ndarray:
        """Cluster index per neuron of each id: (n,) int -> (n, m) int64. Inverse of :meth:`ids`."""
        rest = _as_ids(ids, self.total, "Combinations.decode").copy()
        out = np.empty((rest.size, self.m), dtype=np.int64)
        for j in range(self.m - 1, -1, -1):
            rest, out[:, j] = np.divmod(rest, self.cluster_counts[j])
        return out

    def centroid_vector(self, combo_id: int) -> np.ndarray:
        """The (m,) centroids that make up one combination."""
        if isinstance(combo_id, (bool, np.bool_)) or not isinstance(combo_id, Integral):
            raise InputError(f"Combinations.centroid_vector: combo_id must be an int; got {combo_id!r}.")
        clusters = self.decode([combo_id])[0]
        return np.array([c[i] for c, i in zip(self._centroids, clusters)])


class CoverageTracker:
    """The set of covered combination ids. Monotone, order-independent, mergeable.

    Parameters
    ----------
    total : number of combinations, 1 <= total <= 2**62.
    covered : ids already covered.
    backend : "auto" (default: a bool bitmap when total <= 2**24, else a sorted int64 array),
        "bitmap" or "sorted". Both give the same answers.
    """

    _total: int
    _backend: str
    _count: int
    _bitmap: np.ndarray  # the "bitmap" backend's state
    _sorted: np.ndarray  # the "sorted" backend's state

    def __init__(self, total: int, covered: Iterable[int] = (), *, backend: str = "auto"):
        if isinstance(total, (bool, np.bool_)) or not isinstance(total, Integral) or not 1 <= total <= MAX_COMBINATIONS:
            raise ParameterError(
                f"The 'total' parameter of CoverageTracker must be an int in the range [1, 2**62]. Got {total!r} instead."
            )
        if backend not in ("auto", "bitmap", "sorted"):
            raise ParameterError(
                f"The 'backend' parameter of CoverageTracker must be 'auto', 'bitmap' or 'sorted'. Got {backend!r} instead."
            )
        if backend == "auto":
            backend = "bitmap" if total <= BITMAP_MAX_TOTAL else "sorted"
        if backend == "bitmap" and total > _FORCED_BITMAP_LIMIT:
            raise ParameterError(
                f"CoverageTracker: a bitmap of {total} combinations would not fit in memory; "
                "use backend='sorted' or 'auto'."
            )
        self._total = int(total)
        self._backend = backend
        self._count = 0
        if backend == "bitmap":
            self._bitmap = np.zeros(self._total, dtype=bool)
        else:
            self._sorted = np.zeros(0, dtype=np.int64)
        self.update(covered if isinstance(covered, np.ndarray) else list(covered))

    @property
    def total(self) -> int:
        return self._total

    @property
    def backend(self) -> str:
        return self._backend

    @property
    def covered(self) -> int:
        """Number of covered combinations."""
        return self._count

    @property
    def score(self) -> float:
        """IDC as a fraction in [0, 1]."""
        return self._count / self._total

    def result(self) -> CoverageResult:
        return CoverageResult(score=self.score, covered=self.covered, total=self.total)

    def __repr__(self) -> str:
        return f"CoverageTracker(total={self.total}, covered={self.covered}, backend={self.backend!r})"

    def _contains(self, ids: np.ndarray) -> np.ndarray:
        if self._backend == "bitmap":
            return self._bitmap[ids]
        if self._sorted.size == 0:
            return np.zeros(ids.size, dtype=bool)
        pos = np.minimum(np.searchsorted(self._sorted, ids), self._sorted.size - 1)
        return self._sorted[pos] == ids

    def _new_mask(self, ids: np.ndarray) -> np.ndarray:
        first = np.zeros(ids.size, dtype=bool)
        first[np.unique(ids, return_index=True)[1]] = True
        return first & ~self._contains(ids)

    def would_cover(self, ids: Any) -> np.ndarray:
        """Bool mask (n,): True for ids not covered yet (only the first occurrence of a repeated id)."""
        return self._new_mask(_as_ids(ids, self._total, "CoverageTracker.would_cover"))

    def update(self, ids: Any) -> np.ndarray:
        """Mark ids covered; return the mask :meth:`would_cover` would have returned before the call."""
        ids = _as_ids(ids, self._total, "CoverageTracker.update")
        mask = self._new_mask(ids)
        self._add(ids[mask])
        return mask

    def _add(self, new: np.ndarray) -> None:
        """Add ids known to be unique and not covered yet."""
        if new.size == 0:
            return
        if self._backend == "bitmap":
            self._bitmap[new] = True
        else:
            new = np.sort(new)
            self._sorted = np.insert(self._sorted, np.searchsorted(self._sorted, new), new)
        self._count += int(new.size)

    def covered_ids(self) -> np.ndarray:
        """Covered ids, sorted, int64."""
        if self._backend == "bitmap":
            return np.flatnonzero(self._bitmap).astype(np.int64)
        return self._sorted.copy()

    def merge(self, other: "CoverageTracker") -> "CoverageTracker":
        """A new tracker covering the union of both sets (same backend as ``self``)."""
        if not isinstance(other, CoverageTracker):
            raise ParameterError(f"CoverageTracker.merge expects a CoverageTracker; got {type(other).__name__}.")
        if other.total != self.total:
            raise ParameterError(
                f"CoverageTracker.merge: totals differ ({self.total} vs {other.total}); the trackers come from "
                "different analyses."
            )
        merged = CoverageTracker(self.total, backend=self._backend)
        if self._backend == "bitmap" and other._backend == "bitmap":
            merged._bitmap = self._bitmap | other._bitmap
            merged._count = int(merged._bitmap.sum())
        else:
            merged.update(np.union1d(self.covered_ids(), other.covered_ids()))
        return merged

    def uncovered_ids(self, limit: int | None = None, rng: np.random.Generator | None = None) -> np.ndarray:
        """Some uncovered ids, sorted int64.

        All of them when ``limit`` is None or at least their number (limit None needs at most 2**24
        uncovered ids). Otherwise ``limit`` of them: drawn uniformly without replacement from ``rng``,
        or, without ``rng``, the ``limit`` smallest.
        """
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, Integral) or limit < 0):
            raise ParameterError(
                f"The 'limit' parameter of CoverageTracker.uncovered_ids must be an int in the range [0, inf) "
                f"or None. Got {limit!r} instead."
            )
        if rng is not None and not isinstance(rng, np.random.Generator):
            raise ParameterError(
                f"The 'rng' parameter of CoverageTracker.uncovered_ids must be a numpy.random.Generator or None. "
                f"Got {type(rng).__name__} instead."
            )
        n_uncovered = self._total - self._count
        if limit is None:
            if n_uncovered > BITMAP_MAX_TOTAL:
                raise ParameterError(
                    f"CoverageTracker.uncovered_ids: {n_uncovered} combinations are uncovered, too many to list; "
                    "pass limit to get a sample."
                )
            ranks = np.arange(n_uncovered, dtype=np.int64)
        elif limit >= n_uncovered:
            ranks = np.arange(n_uncovered, dtype=np.int64)
        elif rng is None:
            ranks = np.arange(limit, dtype=np.int64)
        else:
            ranks = np.sort(rng.choice(n_uncovered, size=int(limit), replace=False)).astype(np.int64)
        if self._backend == "bitmap" and ranks.size == n_uncovered:
            return np.flatnonzero(~self._bitmap).astype(np.int64)
        # The r-th uncovered id (0-based) is r plus the number of covered ids below it. Covered id
        # covered[i] has covered[i] - i uncovered ids below it, a non-decreasing sequence.
        covered = self.covered_ids()
        below = covered - np.arange(covered.size, dtype=np.int64)
        return ranks + np.searchsorted(below, ranks, side="right")
