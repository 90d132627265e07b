"""Faults against a reference pool (docs/design.md, "The fourth version extended"): the valid failures of
held-out unguided runs clustered once, each study run's failures mapped onto those reference faults or, where
none holds them, clustered among themselves as new faults; so a run's fault ids never depend on the other arms.
Also DBCV (Moulavi et al. 2014), which neither scikit-learn's HDBSCAN nor an installed package computes, and a
contact sheet of reference faults."""

from __future__ import annotations

from math import comb

import numpy as np


def rarefied_new(fault_ids: np.ndarray, n: int, first_new: int) -> float:
    """Hurlbert's rarefaction (guidance_v4.rarefied) summed over the new faults only (ids >= ``first_new``):
    the expected number of distinct new faults among n failures drawn without replacement."""
    total = len(fault_ids)
    if n <= 0 or total == 0:
        return 0.0
    if n > total:
        raise ValueError(f"cannot rarefy {total} failures to {n}")
    ids, counts = np.unique(fault_ids, return_counts=True)
    return float(sum(1 - comb(total - int(c), n) / comb(total, n) for c in counts[ids >= first_new]))


class ReferencePool:
    """The reference faults: the pool's valid failures clustered by ``idcgen.faults.distinct_faults`` (the
    study's method), with the pool's standardisation and PCA kept, so that other failures can be mapped into
    the same space and onto the pool's faults."""

    def __init__(self, features, labels, predictions, *, min_cluster_size: int = 5, dims: int = 10):
        from sklearn.decomposition import PCA

        from idcgen.faults import distinct_faults

        f = np.asarray(features, np.float64)
        self.min_cluster_size = min_cluster_size
        self.found = distinct_faults(f, labels, predictions, dims=dims, min_cluster_size=min_cluster_size)
        self.count = self.found.count
        std = f.std(axis=0)
        self.kept = std > 1e-12
        self.mean, self.std = f[:, self.kept].mean(axis=0), std[self.kept]
        z = self._standardised(f)
        k = min(dims, z.shape[1], len(z))  # as distinct_faults reduces: PCA only when it drops dimensions
        self.pca = PCA(n_components=k, random_state=0).fit(z) if k < z.shape[1] else None
        self.reduced = self.transform(f)
        self.groups: dict[tuple[int, int], tuple] = {}
        labels, predictions = np.asarray(labels), np.asarray(predictions)
        for key in set(zip(labels.tolist(), predictions.tolist())):
            rows = np.flatnonzero((labels == key[0]) & (predictions == key[1]))
            self.groups[key] = (rows, *self._core(self.reduced[rows]))

    def _standardised(self, f: np.ndarray) -> np.ndarray:
        return (np.asarray(f, np.float64)[:, self.kept] - self.mean) / self.std

    def transform(self, features) -> np.ndarray:
        z = self._standardised(features)
        return z if self.pca is None else self.pca.transform(z)

    def _core(self, points: np.ndarray) -> tuple:
        """A k-d tree of a pair's pool points and each point's core distance: the distance to its
        min_cluster_size-th nearest neighbour counting itself (scikit-learn HDBSCAN's min_samples convention);
        a pair with fewer points takes its farthest one."""
        from scipy.spatial import cKDTree

        tree = cKDTree(points)
        k = min(self.min_cluster_size, len(points))
        distances = tree.query(points, k=k)[0].reshape(len(points), -1)
        return tree, distances[:, -1]

    def assign(self, features, labels, predictions) -> np.ndarray:
        """The reference fault of each failure, or -1 (new): the fault of its nearest pool failure of the same
        (true, predicted) pair when it lies within that failure's core distance."""
        out = np.full(len(labels), -1, np.int64)
        if not len(labels):
            return out
        reduced = self.transform(features)
        labels, predictions = np.asarray(labels), np.asarray(predictions)
        for key in set(zip(labels.tolist(), predictions.tolist())):
            if key not in self.groups:
                continue
            rows = np.flatnonzero((labels == key[0]) & (predictions == key[1]))
            pool_rows, tree, core = self.groups[key]
            distance, nearest = tree.query(reduced[rows], k=1)
            inside = distance <= core[nearest]
            out[rows[inside]] = self.found.fault[pool_rows[nearest[inside]]]
        return out

    def run_faults(self, features, labels, predictions) -> np.ndarray:
        """A run's fault ids: reference faults (0 .. count - 1), and its new failures clustered among themselves
        alone (count + their own fault id)."""
        from idcgen.faults import distinct_faults

        ids = self.assign(features, labels, predictions)
        new = np.flatnonzero(ids < 0)
        if new.size:
            f, labels, predictions = np.asarray(features)[new], np.asarray(labels)[new], np.asarray(predictions)[new]
            own = distinct_faults(f, labels, predictions, min_cluster_size=self.min_cluster_size)
            ids[new] = self.count + own.fault
        return ids

    def dbcv(self) -> tuple[float, int]:
        """DBCV within each (true, predicted) pair that HDBSCAN split into two or more faults, weighted by the
        pair's size; and how many pairs that is (0: nan)."""
        values, weights = [], []
        for rows, _, _ in self.groups.values():
            fault = self.found.fault[rows]
            if np.unique(fault).size >= 2:
                values.append(dbcv(self.reduced[rows], fault))
                weights.append(len(rows))
        return (float(np.average(values, weights=weights)) if values else float("nan")), len(values)


def _apts(points: np.ndarray) -> np.ndarray:
    """All-points core distance of each point of one cluster: (mean over the others of (1/d)^dim)^(-1/dim),
    computed scaled by the smallest distance so that (1/d)^dim cannot overflow; a duplicate point gives 0."""
    n, dim = points.shape
    if n < 2:
        return np.zeros(n)
    d = np.sqrt(((points[:, None] - points[None]) ** 2).sum(-1))
    out = np.zeros(n)
    for i in range(n):
        others = np.delete(d[i], i)
        if (others == 0).any():
            continue
        low = others.min()
        out[i] = low * np.mean((low / others) ** dim) ** (-1.0 / dim)
    return out


def _mst_edges(weights: np.ndarray) -> list[tuple[int, int, float]]:
    """Prim's minimum spanning tree of a dense symmetric weight matrix: (i, j, weight) edges."""
    n = len(weights)
    inside, best, parent = np.zeros(n, bool), weights[0].copy(), np.zeros(n, int)
    inside[0], edges = True, []
    for _ in range(n - 1):
        j = int(np.argmin(np.where(inside, np.inf, best)))
        edges.append((int(parent[j]), j, float(best[j])))
        inside[j] = True
        closer = weights[j] < best
        best, parent = np.where(closer, weights[j], best), np.where(closer, j, parent)
    return edges


def dbcv(points, labels) -> float:
    """Density-Based Clustering Validation (Moulavi et al., SDM 2014) of ``labels`` (-1: noise) on ``points``,
    in [-1, 1]: per cluster, the density sparseness DSC (the largest edge of the mutual-reachability minimum
    spanning tree among its internal nodes, those of degree > 1; all edges when no edge joins two internal
    nodes, as the hdbscan package does) against the density separation DSPC (the smallest mutual reachability
    between its internal nodes and another cluster's); V = (DSPC - DSC) / max(DSPC, DSC); DBCV the mean of V
    weighted by cluster size over all points, noise included."""
    points, labels = np.asarray(points, np.float64), np.asarray(labels)
    if points.ndim == 1:
        points = points[:, None]
    clusters = [c for c in np.unique(labels) if c >= 0]
    if len(clusters) < 2:
        raise ValueError("DBCV needs at least two clusters")
    inner, sparseness = {}, {}
    for c in clusters:
        members = points[labels == c]
        core = _apts(members)
        d = np.sqrt(((members[:, None] - members[None]) ** 2).sum(-1))
        reach = np.maximum(d, np.maximum(core[:, None], core[None]))
        edges = _mst_edges(reach) if len(members) > 1 else []
        degree = np.bincount([v for i, j, _ in edges for v in (i, j)], minlength=len(members))
        internal = np.flatnonzero(degree > 1)
        if not internal.size:
            internal = np.arange(len(members))
        between = [w for i, j, w in edges if i in internal and j in internal] or [w for _, _, w in edges]
        sparseness[c] = max(between) if between else 0.0
        inner[c] = (members[internal], core[internal])
    total = 0.0
    for c in clusters:
        p, core = inner[c]
        separation = min(
            float(
                np.maximum(
                    np.sqrt(((p[:, None] - q[None]) ** 2).sum(-1)), np.maximum(core[:, None], other_core[None])
                ).min()
            )
            for o, (q, other_core) in inner.items()
            if o != c
        )
        denominator = max(separation, sparseness[c])
        validity = (separation - sparseness[c]) / denominator if denominator > 0 else 0.0
        total += (labels == c).sum() * validity
    return float(total / len(labels))


def contact_sheet(path, images: np.ndarray, fault: np.ndarray, *, clusters: int = 50, per: int = 8, seed: int = 0):
    """A PNG of ``clusters`` faults drawn at random (one row each, up to ``per`` of its failures drawn at
    random); returns the fault ids shown. ``images`` are channels-last; colour images stay in colour (a CIFAR-10
    fault may be a matter of hue)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(np.unique(fault), size=min(clusters, np.unique(fault).size), replace=False))
    x = np.asarray(images, np.float32)
    if x.ndim == 4 and x.shape[-1] == 1:
        x = x[..., 0]
    h, w = x.shape[1:3]
    low, high = float(x.min()), float(x.max())
    sheet = np.full((len(chosen) * (h + 2), per * (w + 2), *x.shape[3:]), 255, np.uint8)
    for row, f in enumerate(chosen):
        members = np.flatnonzero(fault == f)
        members = rng.choice(members, size=min(per, len(members)), replace=False)
        for col, i in enumerate(members):
            tile = np.round(255 * (x[i] - low) / max(high - low, 1e-12)).astype(np.uint8)
            sheet[row * (h + 2) + 1 : row * (h + 2) + 1 + h, col * (w + 2) + 1 : col * (w + 2) + 1 + w] = tile
    Image.fromarray(sheet).resize((sheet.shape[1] * 2, sheet.shape[0] * 2), Image.NEAREST).save(path)
    return chosen
