"""CC, TensorFuzz's coverage (Odena et al., ICML 2019), per layer as NeuraL-Coverage computes it: an input is
new in a layer when the nearest activation vector already kept for that layer is farther than ``threshold``
(squared Euclidean distance, as both compare); it is then kept. The coverage is the number of vectors kept,
over the layers. A count, with no total, and it depends on the order the inputs come in.

The kept vectors are searched with matrix products in blocks, not a loop over them (:class:`_NormIndex`):
sorted by norm, so that a block of queries of similar norms is compared only with the kept vectors whose
norm is within sqrt(threshold) of theirs (|q - r| >= ||q| - |r||, the others are farther for certain); in
float32 (half the memory traffic of float64), with a bound on its rounding error, and every distance
within that bound of the threshold computed again exactly, in float64 from the two vectors as the
definition does. So the vectors kept are those of TensorFuzz's loop over every kept vector (the benchmark
and the tests check it). Within a batch, the inputs new against the kept vectors are compared with each
other the same way, in order, so that of two close inputs only the first is kept.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..checks import check_real
from ..errors import InputError
from .values import ValueCriterion, ValueTracker, blas_threads_for

__all__ = ["ClusterCoverage", "ClusterTracker"]

#: a batch of at most this many new rows is compared with itself through a bool matrix (16 MiB)
_DENSE_PAIRS = 4096
#: at most this many in-order steps before a batch's remaining rows are compared pairwise
_LEADERS = 8
#: unit roundoff of the search's float type
_UNIT = {np.dtype(np.float32): 2.0**-24, np.dtype(np.float64): 2.0**-53}
#: query rows per block of the search (sorted by norm: a block's norms are close, so is its band)
_QUERY_BLOCK = 64
#: query x kept entries of one block's distance matrix (16 MiB of float32)
_BLOCK_ELEMENTS = 1 << 22


def _round_up(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``values`` in ``dtype``, each rounded up (a bound compared in the search's own type stays a bound)."""
    out = values.astype(dtype)
    low = out < values
    out[low] = np.nextafter(out[low], dtype.type(np.inf))
    return out


class _NormIndex:
    """One layer's kept vectors sorted by norm, as the search reads them: ``norms`` (float64, ascending),
    ``sq`` (their squares), ``keys`` (rows [-2 r, |r|^2], float32 unless |r|^2 could overflow it) and
    ``order`` (each sorted row's index among the kept vectors). A cache: new vectors are merged in by norm."""

    def __init__(self, vectors: np.ndarray):
        d = vectors.shape[1]
        self.dtype = np.dtype(np.float32)
        self.norms, self.sq = np.zeros(0), np.zeros(0)
        self.keys = np.zeros((0, d + 1), self.dtype)
        self.order = np.zeros(0, np.int64)
        self.insert(vectors, 0)

    def insert(self, vectors: np.ndarray, first: int, kept: np.ndarray | None = None) -> None:
        """Merge ``vectors``, kept as numbers ``first``, ``first + 1``, ... into the sorted rows (``kept``: the
        vectors kept before them, in their order, for a switch to float64)."""
        if not len(vectors):
            return
        sq = np.einsum("ij,ij->i", vectors, vectors)
        self._fit_dtype(sq, kept)
        new = np.argsort(sq, kind="stable")
        sq = sq[new]
        keys = np.empty((len(vectors), vectors.shape[1] + 1), self.dtype)
        keys[:, :-1] = vectors[new]
        keys[:, :-1] *= -2.0
        keys[:, -1] = sq
        at = np.searchsorted(self.sq, sq, side="right")
        self.sq = np.insert(self.sq, at, sq)
        self.norms = np.sqrt(self.sq)
        self.keys = np.insert(self.keys, at, keys, axis=0)
        self.order = np.insert(self.order, at, first + new)

    def _fit_dtype(self, sq: np.ndarray, kept: np.ndarray | None) -> None:
        """Search in float64 from now on if squares ``sq`` could overflow float32's products. The rows already
        indexed are rebuilt from ``kept`` (the kept vectors in their order): rows rounded to float32 would carry
        float32's error under float64's smaller margin, and a pair could pass as close without its exact check."""
        if self.dtype == np.float32 and len(sq) and not sq.max() < 1e30:
            self.dtype = np.dtype(np.float64)
            if not len(self.order):
                self.keys = self.keys.astype(np.float64)
                return
            if kept is None:
                raise ValueError("switching an index to float64 needs its kept vectors")
            rows = np.asarray(kept, np.float64)[self.order]
            self.keys = np.empty((len(rows), rows.shape[1] + 1), np.float64)
            self.keys[:, :-1] = -2.0 * rows
            self.keys[:, -1] = np.einsum("ij,ij->i", rows, rows)

    def close(self, queries: np.ndarray, kept: np.ndarray, threshold: float, pairs: bool, itself: bool = False):
        """Which kept vectors are within ``threshold`` (squared Euclidean distance, <=) of each query.
        ``pairs`` False: bool (n,), whether any is; True: (query rows, kept numbers) of every close pair.
        ``kept``: the kept vectors in their own order (the exact distances are computed from them).
        ``itself``: the queries are the indexed vectors, in order (pairs only): each pair is searched once,
        from its lower-norm end, and returned both ways (each row is also paired with itself)."""
        n, d = queries.shape
        hit = np.zeros(n, dtype=bool)
        found: list[tuple[np.ndarray, np.ndarray]] = []
        if not len(self.sq) or not n:
            return (np.zeros(0, np.int64), np.zeros(0, np.int64)) if pairs else hit
        q_sq = np.einsum("ij,ij->i", queries, queries)
        self._fit_dtype(q_sq, kept)
        augmented = np.empty((n, d + 1), self.dtype)
        augmented[:, :-1] = queries
        augmented[:, -1] = 1.0
        rows_per_block = max(1, min(_QUERY_BLOCK, n))
        with blas_threads_for(rows_per_block * len(self.sq) * (d + 1)):  # the largest product, at most
            self._search(queries, kept, threshold, pairs, itself, q_sq, augmented, hit, found, rows_per_block)
        if not pairs:
            return hit
        if not found:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        i, j = np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found])
        return (np.concatenate([i, j]), np.concatenate([j, i])) if itself else (i, j)

    def _search(self, queries, kept, threshold, pairs, itself, q_sq, augmented, hit, found, rows_per_block) -> None:
        """:meth:`close`'s blocks: fills ``hit`` or ``found``."""
        d = queries.shape[1]
        q_norm = np.sqrt(q_sq)
        by_norm = np.argsort(q_sq, kind="stable")
        radius = float(np.sqrt(threshold))
        # the rounding of the float32 search: the inputs' (2u |q||r|), BLAS's sum of d + 1 terms
        # (gamma_{d+1} (2|q||r| + |r|^2)) and the final additions; (d + 8) 4u (|q|^2 + |r|^2) bounds them all
        unit = (d + 8) * 4.0 * _UNIT[self.dtype]
        for start in range(0, len(queries), rows_per_block):
            rows = by_norm[start : start + rows_per_block]
            low, high = q_norm[rows[0]], q_norm[rows[-1]]
            # float64 norms carry relative errors of about 1e-15: 1e-9 of slack is far more than enough
            slack = radius * (1 + 1e-9) + 1e-9 * (1.0 + high + self.norms[-1])
            lo = start if itself else int(np.searchsorted(self.norms, low - slack, side="left"))
            hi = int(np.searchsorted(self.norms, high + slack, side="right"))
            for s in range(lo, hi, max(1, _BLOCK_ELEMENTS // len(rows))):
                e = min(hi, s + max(1, _BLOCK_ELEMENTS // len(rows)))
                key = augmented[rows] @ self.keys[s:e].T  # |q - r|^2 - |q|^2, within the margin
                margin = unit * (q_sq[rows] + self.sq[e - 1])  # |r|^2 largest at the band's end
                if pairs:  # close pairs are few: one comparison over the block, then only the pairs it found
                    i, j = np.nonzero(key <= _round_up(threshold + margin - q_sq[rows], self.dtype)[:, None])
                    near = key[i, j] + q_sq[rows[i]]
                    sure = near < threshold - margin[i]
                    unsure = np.flatnonzero(~sure)
                    q_rows, r_rows = rows[i], self.order[s + j]
                    sure[unsure] = self._exact(queries[q_rows[unsure]], kept[r_rows[unsure]], threshold)
                    found.append((q_rows[sure], r_rows[sure]))
                    continue
                least = key.min(axis=1) + q_sq[rows]
                hit[rows[least < threshold - margin]] = True
                for k in np.flatnonzero((least >= threshold - margin) & (least <= threshold + margin)):
                    j = np.flatnonzero(key[k] + q_sq[rows[k]] <= threshold + margin[k])
                    if self._exact(queries[rows[k]][None], kept[self.order[s + j]], threshold).any():
                        hit[rows[k]] = True

    @staticmethod
    def _exact(q: np.ndarray, r: np.ndarray, threshold: float) -> np.ndarray:
        """Row by row, whether |q - r|^2 <= threshold, computed as the definition does (float64)."""
        return np.square(q - r).sum(axis=1) <= threshold


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
        self._indexes: list[_NormIndex | None] = [None] * len(self.widths)  # made when first searched
        self._finite = [True] * len(self.widths)  # every kept vector finite (else the layer is searched directly)

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

    def _index(self, layer: int) -> "_NormIndex":
        index = self._indexes[layer]
        if index is None:
            index = self._indexes[layer] = _NormIndex(self.kept(layer))
        return index

    def _new_in_layer(self, layer: int, part: np.ndarray) -> np.ndarray:
        """Row indices of ``part`` that are new in ``layer``, in order: farther than the threshold from every
        kept vector and from every earlier new row of the batch."""
        if not (self._finite[layer] and np.isfinite(part).all()):  # no order by norm: as the definition does
            return self._new_in_layer_directly(layer, part)
        if self._counts[layer]:
            close = self._index(layer).close(part, self.kept(layer), self.threshold, pairs=False)
            candidates = np.flatnonzero(~close)
        else:
            candidates = np.arange(len(part))
        if len(candidates) <= 1:
            return candidates
        leaders, candidates = self._leaders(part[candidates], candidates)
        if len(candidates) <= 1:
            return np.concatenate([leaders, candidates])
        c = part[candidates]
        i, j = _NormIndex(c).close(c, c, self.threshold, pairs=True, itself=True)
        other = i != j
        i, j = i[other], j[other]
        if not len(i):
            return np.concatenate([leaders, candidates])
        accepted = np.ones(len(candidates), dtype=bool)  # a row close to no other one is accepted as it is
        if len(candidates) <= _DENSE_PAIRS:  # a bool matrix: pairs can be most of them (a layer's first batch)
            close = np.zeros((len(candidates), len(candidates)), dtype=bool)
            close[i, j] = True
            np.fill_diagonal(close, False)
            blocked = np.zeros(len(candidates), dtype=bool)
            for row in np.flatnonzero(close.any(axis=1)).tolist():  # in order: an accepted row blocks the later
                if blocked[row]:  # rows close to it
                    accepted[row] = False
                else:
                    blocked |= close[row]
            return np.concatenate([leaders, candidates[accepted]])
        by_row = np.argsort(i, kind="stable")
        i, j = i[by_row], j[by_row]
        rows, first = np.unique(i, return_index=True)
        ends = np.append(first[1:], len(i))
        blocked = np.zeros(len(candidates), dtype=bool)
        for row, a, b in zip(rows.tolist(), first.tolist(), ends.tolist()):
            if blocked[row]:
                accepted[row] = False
            else:
                blocked[j[a:b]] = True
        return np.concatenate([leaders, candidates[accepted]])

    def _leaders(self, c: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The in-order pass's first steps, one accepted row at a time: the first row left is accepted and
        the later rows close to it are not (exact distances). Where most rows are close to each other (a
        conv layer's first batch) a few steps settle the batch, where pairs would be most of the n^2; it
        stops at the first accepted row close to no other one. (accepted rows, the rows still to judge, all
        after the last accepted and far from every accepted one)."""
        alive = np.ones(len(c), dtype=bool)
        accepted = []
        for _ in range(_LEADERS):
            rest = np.flatnonzero(alive)
            if not len(rest):
                break
            accepted.append(rest[0])
            alive[rest[0]] = False
            close = _NormIndex._exact(c[rest[1:]], c[rest[0]][None], self.threshold)
            alive[rest[1:][close]] = False
            if not close.any():
                break
        return candidates[np.asarray(accepted, dtype=np.int64)], candidates[alive]

    def _new_in_layer_directly(self, layer: int, part: np.ndarray) -> np.ndarray:
        """What :meth:`_new_in_layer` returns, by the definition: each row against every kept vector and every
        earlier new row (for activations that are not all finite, which have no order by norm)."""
        kept, new = self.kept(layer), []
        for i, v in enumerate(part):
            earlier = part[np.asarray(new, dtype=np.int64)]
            if all(not (np.square(v - r).sum(axis=1) <= self.threshold).any() for r in (kept, earlier) if len(r)):
                new.append(i)
        return np.asarray(new, dtype=np.int64)

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
        if not np.isfinite(rows).all():
            self._finite[layer], self._indexes[layer] = False, None
        index = self._indexes[layer]
        if index is not None:
            index.insert(store[count : count + len(rows)], count, kept=store[:count])

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
