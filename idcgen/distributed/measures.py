"""DeepInspect and DeepBase's forward passes on Ray workers, reduced on the driver.

- inspect: each worker folds its shards into per-class counts (:func:`idcgen.deepinspect.driver.first_pass`);
  the driver takes each neuron's min and max over all shards (a reduction), sends back the activation
  limits, and adds up the workers' active counts (:func:`idcgen.deepinspect.driver.count_pass`) -- sums, so the
  same NAPV as in one process. Predictions and runner-ups (n ints) are gathered in input order.
- affinity: the workers compute the units' activations and the model's outputs of every input (n x units
  and n x outputs floats, gathered); :func:`idcgen.deepbase.affinity` then streams them in its random
  order with the hypotheses evaluated here, as in one process (docs/design.md, "Scale-out on Ray").
"""

from __future__ import annotations

import itertools

import numpy as np

_TOKENS = itertools.count()


def spans(pool, x, batch_size: int) -> list[tuple]:
    """(actor, key, x or None, start, stop) of each shard of ``x``: an array (put once in the object store,
    cut into whole batches) or :class:`~idcgen.distributed.shards.ShardedInputs` the workers hold."""
    from .cluster import shard_bounds

    if getattr(x, "read_by_workers", False):
        x.load()
        return [(x.actor(i), x.key(i), None, 0, size) for i, size in enumerate(x.sizes)]
    token, ref = ("array", next(_TOKENS)), pool.ray.put(np.ascontiguousarray(x))
    return [
        (pool.actor(i), token + (i,), ref, start, stop)
        for i, (start, stop) in enumerate(shard_bounds(len(x), batch_size, len(pool.actors)))
    ]


def inspect_counting(pool):
    """What :func:`idcgen.deepinspect.inspect` takes as ``counting``: its passes on ``pool``'s workers."""
    from .cluster import gather

    def counting(network, x, taps, widths, state, *, threshold, scaling, batch, memory_budget, progress):
        from tqdm.auto import tqdm

        from ..deepinspect import activation_limits

        parts = spans(pool, x, batch)
        # the budget is a worker's: its shards' activations are kept while their sum fits (shard i on actor
        # i mod workers, as spans gives them), the others counted in a second pass
        held, keep = [0] * len(pool.actors), []
        for i, (_, _, _, start, stop) in enumerate(parts):
            size = (stop - start) * int(sum(widths)) * 4
            keep.append(scaling != "input" and held[i % len(held)] + size <= memory_budget)
            held[i % len(held)] += size if keep[-1] else 0
        passes = 1 if scaling == "input" or all(keep) else 2
        sizes = [stop - start for *_, start, stop in parts]
        with tqdm(total=len(x) * passes, desc="inspect", unit="input", disable=not progress, leave=False) as bar:
            refs = [
                actor.inspect_first.remote(
                    key, xs, start, stop, taps, widths, state.n_classes, threshold, scaling, batch, kept
                )
                for (actor, key, xs, start, stop), kept in zip(parts, keep)
            ]
            for found in gather(pool.ray, refs, sizes, bar):
                if not len(found["pred"]):
                    continue
                state.predictions.append(found["pred"])
                state.runner_up.append(found["runner_up"])
                state.second.append(found["second"])
                np.minimum(state.low, found["low"], out=state.low)
                np.maximum(state.high, found["high"], out=state.high)
                if found["active"] is not None:
                    state.active += found["active"]
            if scaling != "input":
                limits = activation_limits(state.low, state.high, widths, threshold, scaling)
                refs = [
                    actor.inspect_count.remote(key, xs, start, stop, taps, widths, state.n_classes, limits, batch)
                    for actor, key, xs, start, stop in parts
                ]
                for active in gather(pool.ray, refs, [0 if k else s for k, s in zip(keep, sizes)], bar):
                    state.active += active
        return passes

    return counting


def affinity_forward(pool, x, layers, batch_size: int):
    """(outputs (n, outputs), [(n, width) activations of each layer]) of every input, from the workers."""
    from .cluster import fetch

    parts = spans(pool, x, batch_size)
    found = fetch(
        pool.ray,
        [actor.unit_activations.remote(key, xs, start, stop, tuple(layers)) for actor, key, xs, start, stop in parts],
    )
    return np.concatenate([f[0] for f in found]), [np.concatenate([f[1][i] for f in found]) for i in range(len(layers))]
