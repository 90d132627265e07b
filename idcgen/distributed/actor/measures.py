"""DeepInspect's and DeepBase's forward passes on a worker (the driver's side: :mod:`idcgen.distributed.measures`)."""

from __future__ import annotations

import numpy as np


class MeasurePasses:
    """Inspect's two passes over a shard (the first keeps its activations in ``kept`` when asked) and
    affinity's forward pass."""

    def inspect_first(self, shard, x, start, stop, taps, widths, n_classes, threshold, scaling, batch, keep):
        """DeepInspect's first pass over a shard: predictions, runner-ups, min/max (and counts, scaling
        "input"); with ``keep`` the activations stay here for :meth:`inspect_count`."""
        from ...deepinspect import ClassCounts, first_pass

        state = ClassCounts(n_classes, tuple(widths))
        x = self.inputs(shard, x)[start:stop]
        store = first_pass(
            self.network, x, taps, widths, state, threshold=threshold, scaling=scaling, batch=batch, keep=keep
        )
        none = np.zeros(0, np.int64)
        found = dict(
            pred=np.concatenate(state.predictions) if state.predictions else none,
            runner_up=np.concatenate(state.runner_up) if state.runner_up else none,
            second=np.concatenate(state.second) if state.second else np.zeros(0),
            low=state.low,
            high=state.high,
            active=state.active if scaling == "input" else None,
        )
        if store is not None:
            self.kept[("inspect", shard)] = (store, found["pred"])
        return found

    def inspect_count(self, shard, x, start, stop, taps, widths, n_classes, limits, batch):
        """(classes, neurons) counts of the shard's inputs above ``limits``, per predicted class."""
        from ...deepinspect import ClassCounts, count_pass

        state = ClassCounts(n_classes, tuple(widths))
        store, pred = self.kept.pop(("inspect", shard), (None, None))
        if store is not None:
            state.predictions = [pred]
        count_pass(self.network, self.inputs(shard, x)[start:stop], taps, state, limits, batch=batch, store=store)
        return state.active

    def unit_activations(self, shard, x, start, stop, layers):
        """(outputs, [activations of each layer]) of a shard, batch by batch (affinity's forward pass)."""
        x = self.inputs(shard, x)[start:stop]
        outputs, taps = [], [[] for _ in layers]
        for begin in range(0, len(x), self.network.batch_size):
            out, acts = self.network.forward(x[begin : begin + self.network.batch_size], layers)
            outputs.append(out)
            for i, a in enumerate(acts):
                taps[i].append(a)
        return np.concatenate(outputs), [np.concatenate(t) for t in taps]
