"""Per-neuron 1-D k-means, with the number of clusters chosen by an exact silhouette score.

DeepImportance (Algorithm 2) clusters the training activations of each important neuron with k-means
for every k in a small range and keeps the k with the highest silhouette score. The silhouette of
``sklearn.metrics.silhouette_score`` costs O(n^2): about 27 s per neuron at 20,000 points. In 1-D the
clusters of k-means are intervals of the sorted values, so prefix sums give the exact score in
O(n log n), and one Lloyd iteration costs O(k log n).

A variant, ``method="zero-aware"`` (not the default), gives a ReLU neuron's exact zeros their own
cluster and chooses k by the silhouette of the positive values only (see ``_zero_aware`` for why and
docs/results.md, "Clusters on real models", for what it changes).

Nearest-centroid rule used everywhere in idcgen (here and in :mod:`idcgen.coverage`): a value exactly
halfway between two centroids goes to the lower one, as ``np.argmin`` over distances would choose.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from numbers import Integral
from typing import Any, Sequence

import numpy as np

from idcgen.checks import check_int
from idcgen.errors import InputError, ParameterError

__all__ = [
    "CLUSTER_METHODS",
    "DEFAULT_KS",
    "KMeans1D",
    "NeuronClusters",
    "check_cluster_method",
    "cluster_neuron",
    "kmeans_1d",
    "nearest_centroid",
    "parse_cluster_range",
    "silhouette_1d",
    "silhouette_samples_1d",
]

DEFAULT_KS: tuple[int, ...] = (2, 3, 4, 5)

#: how each neuron's clusters are found: "silhouette" is DeepImportance's (the default); "zero-aware"
#: gives a ReLU's exact zeros their own cluster (see ``_zero_aware``)
CLUSTER_METHODS: tuple[str, ...] = ("silhouette", "zero-aware")

#: zero-aware: exact zeros get their own cluster from this share of the values on
ZERO_CLUSTER_MIN_SHARE = 0.01

# A neuron whose most common value covers at least this share of the inputs is reported as almost
# constant (typically a ReLU that almost never fires); it is still clustered.
_ALMOST_CONSTANT_SHARE = 0.99


def _as_values(values: Any, where: str) -> np.ndarray:
    """Return ``values`` as a finite 1-D float64 array (an (n, 1) column is accepted)."""
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}: values must be numbers; got {type(values).__name__} ({exc}).") from exc
    if x.ndim == 2 and x.shape[1] == 1:
        x = x[:, 0]
    if x.ndim != 1:
        raise InputError(f"{where}: values must be 1-D with shape (n,); got shape {x.shape}.")
    if x.size == 0:
        raise InputError(f"{where}: values are empty; expected at least one value.")
    bad = ~np.isfinite(x)
    if bad.any():
        raise InputError(
            f"{where}: values must be finite; got {int(bad.sum())} NaN or infinite value(s), "
            f"the first at index {int(np.flatnonzero(bad)[0])}. Check the model's activations."
        )
    return x


def _check_rng(rng: Any, where: str) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise ParameterError(
            f"The 'rng' parameter of {where} must be a numpy.random.Generator "
            f"(np.random.default_rng(random_state)). Got {type(rng).__name__} instead."
        )
    return rng


def _midpoints(centroids: np.ndarray) -> np.ndarray:
    return (centroids[:-1] + centroids[1:]) / 2.0


def nearest_centroid(values: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Index of the nearest centroid for each value; ties go to the lower centroid.

    ``values``: (n,) float; ``centroids``: (k,) sorted ascending. Returns (n,) int64 in [0, k).
    """
    c = np.asarray(centroids, dtype=np.float64)
    return np.searchsorted(_midpoints(c), np.asarray(values, dtype=np.float64), side="left").astype(np.int64)


# --------------------------------------------------------------------------------------------------
# Silhouette
# --------------------------------------------------------------------------------------------------


def silhouette_1d(values: np.ndarray, labels: np.ndarray) -> float:
    """Exact mean silhouette of 1-D data whose clusters are intervals of the sorted values.

    Equal to ``sklearn.metrics.silhouette_score(values.reshape(-1, 1), labels)`` (euclidean), in
    O(n log n) time instead of O(n^2). Any k-means or nearest-centroid labelling of 1-D data has
    interval clusters. Singletons score 0, as do points with a(i) = b(i) = 0 (sklearn's nan_to_num).
    Parameters and errors as :func:`silhouette_samples_1d`.
    """
    s_sorted, _ = _silhouette_sorted(values, labels, "silhouette_1d")
    return float(s_sorted.mean())  # summed in sorted order, as before silhouette_samples_1d existed


def silhouette_samples_1d(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Exact silhouette of every point of 1-D data whose clusters are intervals of the sorted values.

    Equal to ``sklearn.metrics.silhouette_samples(values.reshape(-1, 1), labels)``; returns (n,) float64
    in the input order. Lets a report say which points carry the mean (e.g. a ReLU's exact zeros).

    Parameters
    ----------
    values : (n,) float, finite.
    labels : (n,) any hashable labels; 2 to n - 1 distinct.

    Raises
    ------
    ParameterError
        Fewer than 2 labels, or as many labels as values.
    InputError
        Non-finite values, mismatched shapes, or clusters that are not intervals of the sorted values.
    """
    s_sorted, order = _silhouette_sorted(values, labels, "silhouette_samples_1d")
    out = np.empty(s_sorted.size)
    out[order] = s_sorted
    return out


def _silhouette_sorted(values: np.ndarray, labels: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Silhouette of each point in sorted order, and the order (the sorted points are values[order])."""
    x = _as_values(values, where)
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != x.shape[0]:
        raise InputError(f"{where}: labels must have shape ({x.shape[0]},) like values; got shape {labels.shape}.")
    names, inverse = np.unique(labels, return_inverse=True)
    n, k = x.size, names.size
    if not 1 < k < n:
        raise ParameterError(f"Number of labels is {k}. Valid values are 2 to n_samples - 1 (inclusive)")

    # Rank clusters by (min, max): if any order makes them intervals, this one does, even when equal
    # values straddle a boundary. Then sort the points by (value, rank); the ranks must not decrease.
    lows = np.full(k, np.inf)
    highs = np.full(k, -np.inf)
    np.minimum.at(lows, inverse, x)
    np.maximum.at(highs, inverse, x)
    label_of_rank = np.lexsort((highs, lows))
    rank_of_label = np.empty(k, dtype=np.int64)
    rank_of_label[label_of_rank] = np.arange(k)
    rank = rank_of_label[inverse]
    order = np.lexsort((rank, x))
    xs, ranks = x[order], rank[order]
    backwards = np.flatnonzero(np.diff(ranks) < 0)
    if backwards.size:
        i = backwards[0]
        first, second = names[label_of_rank[ranks[i + 1]]], names[label_of_rank[ranks[i]]]
        raise InputError(
            f"{where}: clusters {first!r} and {second!r} overlap (value {xs[i]:g} of {second!r} "
            f"lies above value {xs[i + 1]:g} of {first!r}); the exact 1-D silhouette needs clusters that "
            "are intervals of the sorted values, as k-means and nearest-centroid labels are. "
            "Use sklearn.metrics.silhouette_score for other labellings."
        )

    bounds = np.searchsorted(ranks, np.arange(k + 1), side="left")
    means = np.array([xs[bounds[c] : bounds[c + 1]].mean() for c in range(k)])
    s = np.zeros(n)
    for c in range(k):
        lo, hi = bounds[c], bounds[c + 1]
        size = hi - lo
        if size == 1:
            continue  # singleton: s = 0
        xc = xs[lo:hi]
        # Distances within a cluster do not change under a shift; shifting to the cluster's minimum
        # keeps the prefix sums small and exact enough for 1e-9 agreement with sklearn.
        y = xc - xc[0]
        prefix = np.concatenate(([0.0], np.cumsum(y)))
        j = np.arange(size)
        summed = y * j - prefix[:-1] + (prefix[-1] - prefix[1:]) - y * (size - 1 - j)
        a = summed / (size - 1)
        # A neighbouring cluster lies entirely on one side, so its mean distance is |x - its mean|;
        # clusters farther away are never nearer on average.
        b = np.full(size, np.inf)
        if c > 0:
            b = np.minimum(b, np.abs(xc - means[c - 1]))
        if c < k - 1:
            b = np.minimum(b, np.abs(means[c + 1] - xc))
        denom = np.maximum(a, b)
        with np.errstate(divide="ignore", invalid="ignore"):
            s[lo:hi] = np.where(denom > 0, (b - a) / denom, 0.0)
    return s, order


# --------------------------------------------------------------------------------------------------
# k-means
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class KMeans1D:
    """Result of :func:`kmeans_1d`.

    centroids : (k,) float64, sorted ascending.
    labels : (n,) int64, index of the nearest centroid of each value (in the input order).
    inertia : sum of squared distances of the values to their centroids.
    """

    centroids: np.ndarray
    labels: np.ndarray
    inertia: float


def _kmeans_plusplus(xs: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Greedy k-means++ seeding (as scikit-learn's): k distinct values of ``xs``, sorted."""
    n = xs.size
    n_trials = 2 + int(math.log(k))
    centers = np.empty(k)
    centers[0] = xs[rng.integers(n)]
    d2 = (xs - centers[0]) ** 2
    for i in range(1, k):
        cumulative = np.cumsum(d2)
        # side="right" never picks a value at distance 0, so the centres stay distinct.
        picks = np.searchsorted(cumulative, rng.random(n_trials) * cumulative[-1], side="right")
        candidates = xs[np.minimum(picks, n - 1)]
        trial_d2 = np.minimum(d2, (xs[None, :] - candidates[:, None]) ** 2)
        best = int(np.argmin(trial_d2.sum(axis=1)))
        centers[i] = candidates[best]
        d2 = trial_d2[best]
    return np.sort(centers)


def _partition(xs: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Bounds (k + 1,) of the nearest-centroid intervals of sorted ``xs``: cluster j is xs[b[j]:b[j+1]]."""
    ends = np.searchsorted(xs, _midpoints(centroids), side="right")
    return np.concatenate(([0], ends, [xs.size]))


def _reseed_empty(xs: np.ndarray, centroids: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Move each empty cluster's centroid to the farthest remaining value (distinct values)."""
    counts = np.diff(bounds)
    d2 = (xs - np.repeat(centroids, counts)) ** 2
    centroids = centroids.copy()
    for j in np.flatnonzero(counts == 0):
        far = int(np.argmax(d2))
        if d2[far] <= 0:
            break  # cannot happen when k <= number of distinct values
        centroids[j] = xs[far]
        d2[xs == xs[far]] = -1.0
    return np.sort(centroids)


def _lloyd(xs: np.ndarray, prefix: np.ndarray, centroids: np.ndarray, max_iter: int, tol: float) -> np.ndarray:
    """Lloyd's algorithm on sorted ``xs``; cluster sums come from ``prefix`` (O(k log n) per step)."""
    previous = None
    for _ in range(max_iter):
        bounds = _partition(xs, centroids)
        counts = np.diff(bounds)
        if np.any(counts == 0):
            centroids = _reseed_empty(xs, centroids, bounds)
            previous = None
            continue
        if previous is not None and np.array_equal(bounds, previous):
            break  # same partition, so the centroids are already its means: a fixed point
        updated = (prefix[bounds[1:]] - prefix[bounds[:-1]]) / counts
        shift = float(np.sum((updated - centroids) ** 2))
        centroids, previous = updated, bounds
        if shift <= tol:
            break
    return centroids


def kmeans_1d(
    values: np.ndarray,
    k: int,
    *,
    rng: np.random.Generator,
    n_init: int = 10,
    max_iter: int = 300,
    tol: float = 1e-10,
) -> KMeans1D:
    """k-means of 1-D values: greedy k-means++ seeding and Lloyd's algorithm on sorted data.

    Parameters
    ----------
    values : (n,) float, finite.
    k : number of clusters, 1 <= k <= number of distinct values.
    rng : the generator every random draw comes from (same state, same result).
    n_init : runs from different seeds; the lowest inertia wins. Default 10.
    max_iter : Lloyd iterations per run. Default 300.
    tol : stop a run when the squared centroid shift falls below tol * var(values). Default 1e-10;
        runs normally stop earlier, at the exact fixed point (partition unchanged).

    Returns
    -------
    KMeans1D with centroids sorted ascending, each the mean of its cluster. An empty cluster is
    re-seeded at the value farthest from its centroid; one still empty after ``max_iter`` iterations is
    dropped (then fewer than k centroids; not seen in practice).
    """
    x = _as_values(values, "kmeans_1d")
    k = check_int("k", k, 1, owner="kmeans_1d")
    n_init = check_int("n_init", n_init, 1, owner="kmeans_1d")
    max_iter = check_int("max_iter", max_iter, 1, owner="kmeans_1d")
    if not (isinstance(tol, (int, float)) and tol >= 0):
        raise ParameterError(
            f"The 'tol' parameter of kmeans_1d must be a float in the range [0, inf). Got {tol!r} instead."
        )
    rng = _check_rng(rng, "kmeans_1d")
    xs = np.sort(x)
    n_distinct = int(np.count_nonzero(np.diff(xs))) + 1
    if k > n_distinct:
        raise ParameterError(
            f"The 'k' parameter of kmeans_1d must be at most the number of distinct values ({n_distinct}). "
            f"Got {k} instead."
        )
    # Centre the data so that the prefix sums stay small.
    offset = xs.mean()
    xc = xs - offset
    prefix = np.concatenate(([0.0], np.cumsum(xc)))
    tol_abs = tol * float(xc.var())

    best, best_inertia = None, np.inf
    for _ in range(n_init):
        centroids = _lloyd(xc, prefix, _kmeans_plusplus(xc, k, rng), max_iter, tol_abs)
        bounds = _partition(xc, centroids)
        inertia = float(np.sum((xc - np.repeat(centroids, np.diff(bounds))) ** 2))
        if inertia < best_inertia:
            best, best_inertia = centroids, inertia

    # Final centroids: the means of the best partition, in the original coordinates (pairwise sums).
    assert best is not None  # n_init >= 1 restarts ran, the first always taken
    bounds = _partition(xc, best)
    centroids = np.array([xs[lo:hi].mean() for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo])
    centroids = np.unique(centroids)  # sorted; guards against two means collapsing after rounding
    labels = nearest_centroid(x, centroids)
    inertia = float(np.sum((x - centroids[labels]) ** 2))
    centroids.setflags(write=False)
    labels.setflags(write=False)
    return KMeans1D(centroids=centroids, labels=labels, inertia=inertia)


# --------------------------------------------------------------------------------------------------
# One neuron
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class NeuronClusters:
    """The clusters of one important neuron.

    neuron : index of the neuron (channel) in its layer.
    centroids : (k,) float64, sorted ascending, k >= 1.
    silhouette : silhouette score of the chosen k; None when k == 1.
    scores : silhouette score of every k tried.
    note : why fewer clusters than asked were possible, or None.
    """

    neuron: int
    centroids: np.ndarray
    silhouette: float | None
    scores: dict[int, float]
    note: str | None = None

    def __post_init__(self) -> None:
        c = np.array(self.centroids, dtype=np.float64)
        if c.ndim != 1 or c.size == 0 or not np.all(np.isfinite(c)) or np.any(np.diff(c) <= 0):
            raise ParameterError(
                f"NeuronClusters: centroids of neuron {self.neuron} must be a non-empty, finite, strictly "
                f"increasing 1-D array; got {c!r}."
            )
        c.setflags(write=False)
        object.__setattr__(self, "centroids", c)
        object.__setattr__(self, "scores", {int(k): float(v) for k, v in self.scores.items()})

    @property
    def k(self) -> int:
        """Number of clusters."""
        return int(self.centroids.size)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NeuronClusters):
            return NotImplemented
        return (
            self.neuron == other.neuron
            and np.array_equal(self.centroids, other.centroids)
            and self.silhouette == other.silhouette
            and self.scores == other.scores
            and self.note == other.note
        )

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict:
        """Plain JSON-ready form (score keys become strings in JSON; :meth:`from_dict` restores them)."""
        return {
            "neuron": self.neuron,
            "centroids": self.centroids.tolist(),
            "silhouette": self.silhouette,
            "scores": {str(k): v for k, v in self.scores.items()},
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "NeuronClusters":
        return cls(
            neuron=int(data["neuron"]),
            centroids=np.asarray(data["centroids"], dtype=np.float64),
            silhouette=None if data.get("silhouette") is None else float(data["silhouette"]),
            scores={int(k): float(v) for k, v in data.get("scores", {}).items()},
            note=data.get("note"),
        )


def _check_ks(ks: Any) -> tuple[int, ...]:
    message = (
        "The 'ks' parameter of cluster_neuron must be a non-empty sequence of ints >= 2 "
        "(numbers of clusters to try, for example (2, 3, 4, 5)). Got {!r} instead."
    )
    if isinstance(ks, (str, bytes)) or not isinstance(ks, Sequence) or len(ks) == 0:
        raise ParameterError(message.format(ks))
    if any(isinstance(k, bool) or not isinstance(k, Integral) or k < 2 for k in ks):
        raise ParameterError(message.format(ks))
    return tuple(sorted({int(k) for k in ks}))


def cluster_neuron(
    values: np.ndarray,
    *,
    neuron: int,
    ks: Sequence[int] = DEFAULT_KS,
    rng: np.random.Generator,
    method: str = "silhouette",
    min_zero_share: float = ZERO_CLUSTER_MIN_SHARE,
) -> NeuronClusters:
    """Cluster one neuron's activations; keep the k in ``ks`` with the highest silhouette.

    A k is tried only if k <= number of distinct values and k < n. Ties go to the smaller k.
    Degenerate neurons are never dropped: a constant neuron gets one cluster; one with fewer distinct
    values than every k gets one cluster per distinct value; ``note`` says what happened.

    Parameters
    ----------
    values : (n,) float, finite: the neuron's activation on each training input.
    neuron : index of the neuron in its layer (kept for reports).
    ks : numbers of clusters to try. Default (2, 3, 4, 5).
    rng : generator for k-means seeding.
    method : "silhouette" (default, DeepImportance's method: k-means on all values) or "zero-aware"
        (the exact zeros of a ReLU form their own cluster and the silhouette chooses k on the positive
        values only, so the neuron gets 1 + k clusters; see :func:`_zero_aware` and docs/design.md,
        "Clusters").
    min_zero_share : zero-aware only: the share of exact zeros from which they get their own cluster.
        Default 0.01.
    """
    where = f"cluster_neuron (neuron {neuron})"
    x = _as_values(values, where)
    ks = _check_ks(ks)
    rng = _check_rng(rng, "cluster_neuron")
    method = check_cluster_method(method)
    if method == "zero-aware":
        if (
            isinstance(min_zero_share, bool)
            or not isinstance(min_zero_share, (int, float))
            or not 0 < min_zero_share <= 1
        ):
            raise ParameterError(
                f"The 'min_zero_share' parameter of cluster_neuron must be a float in (0, 1]. "
                f"Got {min_zero_share!r} instead."
            )
        return _zero_aware(x, neuron, ks, rng, float(min_zero_share))
    return _by_silhouette(x, neuron, ks, rng)


def check_cluster_method(method: Any) -> str:
    """``method`` if it is one of :data:`CLUSTER_METHODS`, else a one-line ParameterError."""
    if method not in CLUSTER_METHODS:
        raise ParameterError(
            f"The cluster method must be one of {', '.join(CLUSTER_METHODS)} "
            f"(silhouette is DeepImportance's). Got {method!r} instead."
        )
    return method


def _zero_aware(
    x: np.ndarray, neuron: int, ks: tuple[int, ...], rng: np.random.Generator, min_zero_share: float
) -> NeuronClusters:
    """Exact zeros as their own cluster, k chosen by the silhouette of the positive values.

    Why: a ReLU neuron is exactly 0 on every input where it is off. On all values, the silhouette
    mixes two things: how the active values spread, and how pure the cluster holding the zeros is
    (zeros among zeros score s(i) = 1). With a small zero mass, k = 2 lumps the zeros with the lowest
    active values; with a large one, finer splits win because they purify the zero cluster (50 %
    zeros + half-normal: k = 5), whatever the active values do. The zeros are a state, not a range of
    values: giving them a cluster of their own and asking the silhouette only about the positive part
    makes k describe the active values. (Measured in docs/results.md, "Clusters on real models": the
    silhouette also picks k = 2 on every unimodal shape without zeros, so k = 2 on real models is
    mostly that, not the zeros.) Neurons with negative values (not a ReLU's output) or with fewer
    than ``min_zero_share`` exact zeros keep the paper's method, with a note.

    Consistency with nearest-centroid assignment (:func:`nearest_centroid`, :mod:`idcgen.coverage`):
    the zero cluster's centroid is stored as -c1, the mirror of the lowest positive centroid c1, so
    the boundary between them is (-c1 + c1) / 2 = 0 exactly; ties go to the lower centroid, so a value
    <= 0 maps to the zero cluster and any value > 0 to its nearest positive centroid, the same rule
    that labelled the training values. (A centroid at 0 would instead send positives below c1 / 2 to
    the zero cluster.) ``scores`` are the positive part's silhouettes, keyed by the neuron's total
    number of clusters (1 + k), so ``silhouette == scores[k]`` as for the paper's method.
    """
    n = x.size
    negative = int(np.count_nonzero(x < 0))
    zeros = int(np.count_nonzero(x == 0))
    if negative:
        found = _by_silhouette(x, neuron, ks, rng)
        why: str | None = (
            f"zero-aware: {negative} negative values (not a ReLU's output), clustered by silhouette on all values"
        )
        return dataclasses.replace(found, note="; ".join(filter(None, [why, found.note])))
    if zeros == n or zeros < min_zero_share * n:
        found = _by_silhouette(x, neuron, ks, rng)
        why = (
            None
            if zeros == n
            else (
                f"zero-aware: {zeros} of {n} values exactly 0, below the {min_zero_share:.0%} "
                "for a zero cluster; clustered by silhouette on all values"
            )
        )
        return dataclasses.replace(found, note="; ".join(filter(None, [why, found.note])) or None)
    positive = _by_silhouette(x[x > 0], neuron, ks, rng)
    lowest = positive.centroids[0]
    centroids = np.concatenate(([-lowest], positive.centroids))
    scores = {k + 1: v for k, v in positive.scores.items()}
    note = (
        f"zero cluster for {zeros} of {n} values exactly 0 ({zeros / n:.1%}), stored centroid {-lowest:.4g} "
        f"(mirror of the lowest positive one: boundary at 0) + {positive.k} positive"
    )
    return NeuronClusters(
        neuron, centroids, positive.silhouette, scores, "; ".join(filter(None, [note, positive.note]))
    )


def _by_silhouette(x: np.ndarray, neuron: int, ks: tuple[int, ...], rng: np.random.Generator) -> NeuronClusters:
    """DeepImportance's method on checked values: k-means for each k, the best silhouette wins."""
    n = x.size
    distinct, counts = np.unique(x, return_counts=True)
    n_distinct = distinct.size
    if n_distinct == 1:
        return NeuronClusters(neuron, distinct, None, {}, f"constant activation {distinct[0]:g}: one cluster")

    notes = []
    mode_count = int(counts.max())
    if mode_count >= _ALMOST_CONSTANT_SHARE * n:
        mode = distinct[int(np.argmax(counts))]
        notes.append(f"almost constant: {mode_count} of {n} values equal {mode:g}")
    limit = min(n_distinct, n - 1)
    what = f"only {n_distinct} distinct values" if n_distinct < n else f"only {n} values"
    tried = [k for k in ks if k <= limit]
    if not tried and limit < 2:
        notes.append(f"{what}: too few to choose k by silhouette; one cluster")
        return NeuronClusters(neuron, np.array([x.mean()]), None, {}, "; ".join(notes))
    if not tried:
        tried = [limit]
        notes.append(f"{what}, fewer than the smallest k ({ks[0]}): {limit} clusters")
    elif len(tried) < len(ks):
        notes.append(f"{what}: k limited to {tried[-1]}")

    scores: dict[int, float] = {}
    best_k, best_centroids = None, None
    for k in tried:
        result = kmeans_1d(x, k, rng=rng)
        got = int(result.centroids.size)  # an empty cluster may have been dropped
        if got < 2 or got in scores:
            continue
        scores[got] = silhouette_1d(x, result.labels)
        if best_k is None or scores[got] > scores[best_k]:
            best_k, best_centroids = got, result.centroids
    if best_k is None:
        notes.append("k-means found fewer than 2 clusters for every k tried: one cluster")
        return NeuronClusters(neuron, np.array([x.mean()]), None, {}, "; ".join(notes))
    assert best_centroids is not None  # set with best_k
    return NeuronClusters(neuron, best_centroids, scores[best_k], scores, "; ".join(notes) or None)


_RANGE_ITEM = re.compile(r"^\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?$")


def parse_cluster_range(text: str) -> tuple[int, ...]:
    """Parse a cluster range such as "2-5" -> (2, 3, 4, 5) or "2,3,4" -> (2, 3, 4).

    Items are integers >= 2 or ascending ranges "a-b", separated by commas; the result is sorted and
    without duplicates. Raises ParameterError otherwise.
    """

    def bad(reason: str) -> ParameterError:
        return ParameterError(
            f"The cluster range must be integers >= 2 as a range '2-5' or a list '2,3,4'; {reason}. "
            f"Got {text!r} instead."
        )

    if not isinstance(text, str):
        raise bad("expected a string")
    ks: set[int] = set()
    for item in text.split(","):
        match = _RANGE_ITEM.match(item)
        if match is None:
            raise bad(f"cannot read {item.strip()!r}")
        low = int(match[1])
        high = int(match[2]) if match[2] is not None else low
        if high < low:
            raise bad(f"the range {item.strip()!r} runs backwards")
        ks.update(range(low, high + 1))
    if min(ks) < 2:
        raise bad(f"{min(ks)} clusters is too few")
    return tuple(sorted(ks))
