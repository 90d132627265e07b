"""The record of loaded inputs: float32 inputs, optional labels, and where they came from."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..threads import extent


@dataclass(frozen=True)
class Dataset:
    """Inputs, optional labels, and where they came from.

    Attributes:
        x: float32 inputs, (n, h, w), (n, h, w, c) or (n, d); channels-last (n, h, w, c) after
            `fit_to_model`.
        y: int64 labels of shape (n,), float64 for a regression target, or None.
        source: what was loaded, e.g. "/data/test.npz[x_test,y_test]" or "embedded-mnist:test".
        scaling: how raw values were scaled, e.g. "uint8/255 -> [0, 1]".
        class_names: the class names of an image folder, index = label (given ones or the sorted
            subfolder names), else None (also for folders named by class integers).
        notes: lines the caller should show once: the label mapping of an image folder, channel
            conversions.
    """

    x: np.ndarray
    y: np.ndarray | None
    source: str
    scaling: str
    class_names: tuple[str, ...] | None = None
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.x)

    def __repr__(self) -> str:  # a notebook shows this: shapes, not every pixel
        y = "None" if self.y is None else f"({len(self.y)},) {self.y.dtype}"
        names = "" if self.class_names is None else f", class_names={list(self.class_names)}"
        return (
            f"Dataset(source={self.source!r}, x={tuple(self.x.shape)} {self.x.dtype}, y={y}, "
            f"scaling={self.scaling!r}{names})"
        )

    def subset(self, idx) -> Dataset:
        """The rows `idx` (indices, slice or boolean mask) with the same metadata."""
        rows = np.atleast_1d(np.arange(len(self))[idx])
        return replace(self, x=self.x[rows], y=None if self.y is None else self.y[rows])

    def summary(self) -> dict:
        """JSON-able description: source, n, per-item shape, dtype, scaling, value range, label counts."""
        empty = self.x.size == 0
        low, high = (None, None) if empty else extent(self.x)
        classes = self.y is not None and self.y.dtype.kind in "iu"  # float labels: a regression target
        labels, counts = np.unique(self.y, return_counts=True) if classes and self.y is not None else ((), ())
        return {
            "source": self.source,
            "n": len(self),
            "shape": [int(d) for d in self.x.shape[1:]],
            "dtype": str(self.x.dtype),
            "scaling": self.scaling,
            "min": low,
            "max": high,
            "n_labels": 0 if self.y is None else len(self.y),
            "class_counts": None if not classes else {str(k): int(c) for k, c in zip(labels, counts)},
            "class_names": None if self.class_names is None else list(self.class_names),
            "notes": list(self.notes),
        } | (
            {"label_range": [float(self.y.min()), float(self.y.max())]}  # a regression target's span
            if self.y is not None and not classes and len(self.y)
            else {}
        )
