"""The analysis' passes on a worker: relevance totals per batch (:func:`idcgen.relevance.batch_totals`), the
important neurons' activations, and one neuron's clusters. Both passes run in fp32 whatever precision the
worker's forward-only work uses, as the driver's analysis does (docs/design.md, "Devices")."""

from __future__ import annotations

import numpy as np


class RelevancePasses:
    """The relevance passes over a worker's shards; with ``keep`` the activations stay in ``kept`` for the
    gather."""

    def __init__(self):
        self._relevance = {}  # (layer, eps, batch size) -> Relevance of the worker's model

    def cluster(self, column, neuron: int, ks, stream, method: str):
        """One important neuron's clusters, from its own random stream (:func:`idcgen.analysis.neuron_streams`)."""
        from ...clusters import cluster_neuron

        return cluster_neuron(column, neuron=neuron, ks=ks, rng=np.random.default_rng(stream), method=method)

    def totals(self, shard, x, start, stop, layer, eps, batch_size, target, labels, keep):
        """The relevance pass over ``x[start:stop]``: per-batch (signed, abs, n used, predictions, None);
        with ``keep`` the layer's activations of the inputs used stay here for :meth:`activations`."""
        from ...framework.device import full_precision
        from ...relevance import Relevance, batch_totals

        key = (layer, eps, batch_size)
        if key not in self._relevance:
            self._relevance[key] = Relevance(self.network, layer=layer, eps=eps, batch_size=batch_size)
        x, part = self.inputs(shard, x), slice(start, stop)
        with full_precision(self.network):
            batches = list(
                batch_totals(
                    self._relevance[key],
                    x[part],
                    None if target is None else target[part],
                    labels=None if labels is None else labels[part],
                    keep_activations=keep,
                )
            )
        if keep and batches:  # (a shard left empty by only_class has none)
            self.kept[shard] = np.concatenate([b[4] for b in batches])
        return [b[:4] + (None,) for b in batches]

    def activations(self, shard, x, start, stop, layer, neurons, rows):
        """(rows, m) activations of the important neurons: kept by the relevance pass, else a forward pass."""
        from ...framework.device import full_precision

        if shard in self.kept:
            return self.kept.pop(shard)[:, neurons]
        with full_precision(self.network):
            return self.network.activations(self.inputs(shard, x)[start:stop], layer, neurons, rows=rows)
