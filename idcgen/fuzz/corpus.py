"""The corpus: seeds plus kept mutants, each with where it came from.

Every entry keeps its parent, root seed and mutator chain (as tensorfuzz does), and its *reference*:
the image DeepHunter's validity bounds compare its descendants against (the root seed, or the root
seed after the chain's one affine transform, or the chain's one scene change; ``affine`` marks an entry
whose chain holds that one reference-moving transform).
"""

from __future__ import annotations

import numpy as np

#: per-entry columns besides the images: name -> dtype
COLUMNS = {
    "parent": np.int64,
    "root": np.int64,
    "label": np.int64,
    "prediction": np.int64,
    "combination": np.int64,
    "affine": bool,
    "fuzz_count": np.int64,
    "step": np.int64,
}


class Corpus:
    """Growable arrays of entries; ids are positions, seeds first."""

    def __init__(self, input_shape: tuple, dtype=np.float32, *, regression: bool = False):
        self.input_shape = tuple(input_shape)
        self.regression = bool(regression)
        self._size = 0
        self._x = np.zeros((0, *self.input_shape), dtype)
        self._reference = np.zeros((0, *self.input_shape), dtype)
        # a regression model's labels and predictions are output values (NaN: no label), not classes
        self._cols = {
            name: np.zeros(0, np.float64 if regression and name in ("label", "prediction") else dt)
            for name, dt in COLUMNS.items()
        }
        self.chains: list[list[str]] = []

    def __len__(self) -> int:
        return self._size

    def _reserve(self, extra: int) -> None:
        need = self._size + extra
        if need <= len(self._x):
            return
        cap = max(need, 2 * len(self._x), 64)

        def grow(a):
            out = np.zeros((cap, *a.shape[1:]), a.dtype)
            out[: self._size] = a[: self._size]
            return out

        self._x, self._reference = grow(self._x), grow(self._reference)
        self._cols = {k: grow(v) for k, v in self._cols.items()}

    def add(self, x: np.ndarray, reference: np.ndarray, chains: list[list[str]], **columns) -> np.ndarray:
        """Append entries; ``columns`` gives every name in COLUMNS except fuzz_count. Returns their ids."""
        n = len(x)
        self._reserve(n)
        sl = slice(self._size, self._size + n)
        self._x[sl], self._reference[sl] = x, reference
        for name in COLUMNS:
            self._cols[name][sl] = columns.get(name, 0)
        self.chains.extend(chains)
        self._size += n
        return np.arange(sl.start, sl.stop)

    @property
    def x(self) -> np.ndarray:
        return self._x[: self._size]

    @property
    def reference(self) -> np.ndarray:
        return self._reference[: self._size]

    # the per-entry columns, as views of the filled part
    parent = property(lambda self: self._column("parent"))
    root = property(lambda self: self._column("root"))
    label = property(lambda self: self._column("label"))
    prediction = property(lambda self: self._column("prediction"))
    combination = property(lambda self: self._column("combination"))
    affine = property(lambda self: self._column("affine"))
    fuzz_count = property(lambda self: self._column("fuzz_count"))
    step = property(lambda self: self._column("step"))

    def _column(self, name: str) -> np.ndarray:
        return self._cols[name][: self._size]

    def entries(self, ids: np.ndarray) -> dict:
        """Everything about ``ids`` as arrays (for saving a chunk)."""
        ids = np.asarray(ids, np.int64)
        out = {name: self._cols[name][ids] for name in COLUMNS if name != "fuzz_count"}
        out.update(
            x=self._x[ids],
            reference=self._reference[ids],
            id=ids,
            chain=np.array(["|".join(self.chains[i]) for i in ids], dtype=str),
        )
        return out

    def add_entries(self, arrays: dict) -> None:
        """Inverse of ``entries`` (used when a campaign is loaded)."""
        chains = [c.split("|") if c else [] for c in arrays["chain"].tolist()]
        self.add(
            arrays["x"], arrays["reference"], chains, **{name: arrays[name] for name in COLUMNS if name != "fuzz_count"}
        )

    @property
    def n_seeds(self) -> int:
        return int((self.parent < 0).sum())
