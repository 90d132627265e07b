"""The inputs a worker holds: shards it read itself (:mod:`idcgen.distributed.shards`), or the arrays the
driver sends with each call."""

from __future__ import annotations

import numpy as np


class HeldInputs:
    """Shards read and held by this worker: (token, shard) -> (x, y)."""

    def __init__(self):
        self._held = {}

    def inputs(self, shard, x):
        """``x`` as sent, or (``x`` None) the inputs of a shard this worker holds."""
        return self._held[shard][0] if x is None else x

    def hold(self, shard, source, load: dict):
        """Read one shard (a path, or a Ray Data block) and keep it; returns ("ok", facts) for the driver to
        reduce, or ("error", the error's message parts) for it to report."""
        from ...analysis import data_fingerprint
        from ...errors import IdcgenError
        from ...threads import extent
        from ..shards import read_shard

        try:
            x, y = read_shard(source, self.network, load)
        except IdcgenError as exc:  # reported by the driver, naming the shard
            return "error", exc.parts
        self._held[shard] = (x, y)
        low, high = extent(x)
        return "ok", dict(
            n=len(x),
            y=y,
            min=low,
            max=high,
            shape=tuple(x.shape[1:]),
            digest=data_fingerprint(x, y),
        )

    def select(self, shard, keep):
        """Keep the rows ``keep`` of a held shard; returns its size and value range."""
        x, y = self._held[shard]
        x, y = x[keep], None if y is None else y[keep]
        self._held[shard] = (x, y)
        return dict(n=len(x), min=float(x.min()) if len(x) else None, max=float(x.max()) if len(x) else None)

    def predict_held(self, shard):
        x = self._held[shard][0]
        return self.network.predict(x) if len(x) else np.zeros(0)

    def drop(self, token) -> None:
        for key in [k for k in self._held if k[0] == token]:
            del self._held[key]

    def held_count(self) -> int:
        return len(self._held)
