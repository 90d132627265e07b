"""Coverage on a worker: the combination ids of its inputs under an analysis, bound to the worker's model
once per analysis."""

from __future__ import annotations


class CoverageIds:
    """Combination ids of sent or held inputs."""

    def __init__(self):
        self._bound = {}  # analysis key -> the analysis bound to the worker's model

    def _bind(self, analysis):
        key = (analysis.fingerprint, analysis.layer, tuple(int(n) for n in analysis.neurons), analysis.total)
        if key not in self._bound:
            self._bound[key] = analysis.bind(self.network)
        return self._bound[key]

    def ids(self, analysis, x, start, stop):
        """Combination ids of ``x[start:stop]``."""
        return self._bind(analysis).ids(x[start:stop])

    def held_ids(self, analysis, shard, what: str):
        """Combination ids of a held shard (checked against the analysis' scale first)."""
        bound = self._bind(analysis)
        x = self.inputs(shard, None)
        bound.check_inputs(x, what)
        return bound.ids(x)
