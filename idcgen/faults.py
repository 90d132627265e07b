"""Distinct faults: failing inputs grouped into clusters, each cluster counted once (docs/design.md,
"What a credible guidance study measures").

Counting findings rewards a generator that lands on the same failure again and again; counting
(true, predicted) pairs cannot tell two different reasons for one confusion apart. Aghababaeyan et al.
(TSE 2023) count *faults*: the failing inputs' features, reduced and clustered, one fault per cluster.
idcgen's method, stated:

1. Features: the activations of the model's last hidden layer before the logits (its penultimate layer,
   the usual stand-in for a pre-trained feature extractor), one row per failing input. Any model can serve
   as the extractor (``failure_features(other, x)``, ``campaign_faults(campaign, other)``): a second model
   of the same task gives faults independent of the model under test.
2. Reduction: each feature standardised over the failing inputs (constant ones dropped), then PCA to
   ``dims`` components (scikit-learn, seeded), in place of UMAP, which idcgen does not depend on.
3. Clusters: the failing inputs of each (true, predicted) pair are clustered apart (a regression model
   has one group); a group with fewer than ``2 * min_cluster_size`` inputs is one fault, else HDBSCAN
   (scikit-learn, ``min_cluster_size``) finds its clusters and each is a fault; the points HDBSCAN leaves
   as noise join the nearest cluster (by centroid), so noise never counts as faults of its own; a group
   where HDBSCAN finds no cluster is one fault.

So faults >= (true, predicted) pairs: a pair splits into several faults only where its failures form
separate dense groups in the model's own feature space.

    faults = distinct_faults(features, labels, predictions)     # Faults(count=..., pairs=...)
    faults.hit(rows)                                            # distinct faults among some of them
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .checks import check_int
from .errors import InputError

__all__ = ["Faults", "distinct_faults", "failure_features", "METHOD"]

METHOD = (
    "penultimate-layer features, standardised, PCA to {dims} dimensions; HDBSCAN (min_cluster_size "
    "{min_cluster_size}) {within}, noise joined to the nearest cluster; groups under {small} inputs are one "
    "fault"
)


@dataclass(frozen=True)
class Faults:
    """The faults of a set of failing inputs: ``fault`` (n,) the fault id of each input (0..count-1),
    ``count`` distinct faults, ``pairs`` distinct (true, predicted) pairs (groups), ``noise`` inputs
    HDBSCAN left unclustered (joined to a cluster), ``method`` how they were found."""

    fault: np.ndarray
    count: int
    pairs: int
    noise: int
    method: str

    def hit(self, rows=None) -> int:
        """Distinct faults among the inputs ``rows`` (indices or a boolean mask; all if None)."""
        ids = self.fault if rows is None else self.fault[np.asarray(rows)]
        return int(np.unique(ids).size)

    def __repr__(self) -> str:
        return f"Faults(count={self.count}, pairs={self.pairs}, inputs={len(self.fault)}, noise={self.noise})"


def _reduce(features: np.ndarray, dims: int, random_state: int) -> np.ndarray:
    from sklearn.decomposition import PCA

    std = features.std(axis=0)
    kept = std > 1e-12
    if not kept.any():
        return np.zeros((len(features), 1))
    z = (features[:, kept] - features[:, kept].mean(axis=0)) / std[kept]
    k = min(dims, z.shape[1], len(z))
    if k >= z.shape[1]:
        return z
    return PCA(n_components=k, random_state=random_state).fit_transform(z)


def distinct_faults(
    features, labels=None, predictions=None, *, dims: int = 10, min_cluster_size: int = 5, random_state: int = 0
) -> Faults:
    """Cluster failing inputs into faults (see the module's docstring).

    Parameters
    ----------
    features : array (n, d), e.g. the penultimate-layer activations of the failing inputs.
    labels, predictions : (n,) true and predicted classes (classifiers); None for a regression model (one
        group).
    dims : PCA components, default 10.
    min_cluster_size : HDBSCAN's smallest cluster, default 5.
    """
    from sklearn.cluster import HDBSCAN

    check_int("dims", dims, 1)
    check_int("min_cluster_size", min_cluster_size, 2)
    f = np.asarray(features, dtype=np.float64)
    if f.ndim != 2:
        raise InputError(f"features must be an (n, d) array, one row per failing input; got shape {f.shape}")
    n = len(f)
    if (labels is None) != (predictions is None):
        raise InputError("give both labels and predictions (a classifier) or neither (a regression model)")
    if labels is None:
        groups = np.zeros(n, dtype=np.int64)
    else:
        labels, predictions = np.asarray(labels).reshape(-1), np.asarray(predictions).reshape(-1)
        if len(labels) != n or len(predictions) != n:
            raise InputError(f"{n} feature rows but {len(labels)} labels and {len(predictions)} predictions")
        _, groups = np.unique(np.stack([labels, predictions], axis=1), axis=0, return_inverse=True)
        groups = groups.reshape(-1)
    within = (
        "within each (true, predicted) pair"
        if labels is not None
        else "over all failing inputs (one group: no classes)"
    )
    method = METHOD.format(dims=dims, min_cluster_size=min_cluster_size, small=2 * min_cluster_size, within=within)
    fault = np.zeros(n, dtype=np.int64)
    if n == 0:
        return Faults(fault, 0, 0, 0, method)
    reduced = _reduce(f, dims, random_state)
    next_id, noise = 0, 0
    for g in np.unique(groups):
        rows = np.flatnonzero(groups == g)
        found = np.zeros(len(rows), dtype=np.int64)
        if len(rows) >= 2 * min_cluster_size:
            found = HDBSCAN(min_cluster_size=min_cluster_size, copy=True).fit(reduced[rows]).labels_.astype(np.int64)
            clusters = np.unique(found[found >= 0])
            if clusters.size == 0:
                found[:] = 0
            elif (found < 0).any():
                noise += int((found < 0).sum())
                centroids = np.stack([reduced[rows][found == c].mean(axis=0) for c in clusters])
                lost = np.flatnonzero(found < 0)
                d = ((reduced[rows][lost][:, None, :] - centroids[None]) ** 2).sum(axis=2)
                found[lost] = clusters[d.argmin(axis=1)]
            _, found = np.unique(found, return_inverse=True)
        fault[rows] = next_id + found.reshape(-1)
        next_id += int(found.max()) + 1
    return Faults(fault, next_id, int(np.unique(groups).size), noise, method)


def failure_features(network, x, *, layer: str | None = None) -> np.ndarray:
    """(n, neurons) activations of ``layer`` (default the model's last hidden layer before the logits) for
    the inputs ``x``; the features ``distinct_faults`` clusters."""
    from .data import fit_to_model

    name = network.default_layer() if layer is None else network.layer(layer).name
    if len(x) == 0:
        return np.zeros((0, network.neuron_count(name)), np.float32)
    _, (acts,) = network.forward(fit_to_model(np.asarray(x), network.input_shape), (name,))
    return acts


def campaign_faults(campaign, network=None) -> Faults | None:
    """The distinct faults among a campaign's findings (None without findings or without a model bound to
    its analysis). ``network``: take the features from this model instead of the model under test, e.g. a
    second model trained on the same data: faults that do not depend on the tested model's own feature
    space (which, at its penultimate layer, is also where IDC partitions by default)."""
    found = campaign.findings()
    network = getattr(campaign.analysis, "network", None) if network is None else network
    if not found or network is None or "x" not in found:
        return None
    features = failure_features(network, found["x"])
    if campaign.corpus.regression:
        return distinct_faults(features)
    return distinct_faults(features, found["label"], found["prediction"])
