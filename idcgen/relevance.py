"""The relevance pass of an analysis, in numpy: per-neuron totals over batches, whatever the framework.

The network computes relevance (LRP-epsilon, :meth:`idcgen.framework.Network.relevance`; for Keras
:mod:`idcgen.framework.keras_lrp`); this module streams it over an input set, keeping per-neuron sums and
never the (inputs x neurons) relevance matrix (docs/design.md, "Relevance" and "Scale-out on Ray").
"""

from __future__ import annotations

import numpy as np


def Relevance(network, *, layer: str | None, eps: float = 1e-7, batch_size: int = 512):  # noqa: N802 (was a class)
    """The relevance of ``layer``'s neurons (None: the input pixels) from one logit per input, as ``network``
    computes it: called as ``rel(x, target=None)`` it gives per-neuron relevance (n, neurons), activations
    (n, neurons) and logits (n, classes), batched. ``eps`` is LRP-epsilon's (``eps -> 0``: LRP-0). ``network``: a
    Network or a framework's model object."""
    from .framework import as_network

    return as_network(network).relevance(layer, eps=eps, batch_size=batch_size)


def batch_size_for(network) -> int:
    """Inputs per relevance batch, within the network's memory budget."""
    return network.relevance_batch_size()


def batch_totals(rel, x: np.ndarray, target=None, *, labels=None, keep_activations=False, progress=None):
    """The relevance pass, one batch of ``rel.batch_size`` inputs at a time: yields per batch
    ``(signed_sum, abs_sum, n_used, predictions, activations or None)`` (see :func:`sum_totals`).

    The map step of an analysis: a Ray worker runs it on its shard, and :func:`sum_totals` reduces the
    batches of all shards in input order, so the sums are added as in one process (docs/design.md,
    "Scale-out on Ray"). A batch out of the device's memory is run again halved (rel.batcher())."""
    from .framework.common import refuse_nan_outputs

    batches = rel.batcher() if hasattr(rel, "batcher") else None
    start = 0
    while start < len(x):
        stop = min(start + rel.batch_size, len(x))
        try:
            r, a, z = rel.batch(
                x[start:stop], None if target is None else target[start:stop], activations=keep_activations
            )
        except Exception as exc:
            if batches is None:
                raise
            batches.failed(exc, stop - start, release=getattr(rel, "release", None))
            rel.batch_size = batches.size
            continue
        r, pred = r.astype(np.float64), refuse_nan_outputs(np.asarray(z)).argmax(axis=1)
        used = slice(None) if labels is None else pred == labels[start:stop]
        r = r[used]
        start = stop
        yield (r.sum(axis=0), np.abs(r).sum(axis=0), len(r), pred, a[used] if keep_activations else None)
        if progress is not None:
            progress.update(len(pred))
    if batches is not None:
        batches.settle()


def sum_totals(batches, keep_activations=False):
    """Reduce :func:`batch_totals`' batches, in input order, to one streamed relevance pass's per-neuron totals
    (never the (inputs x neurons) relevance matrix): ``(signed_sum, abs_sum, n_used, predictions, activations)``,
    sums over the inputs used (all, or with ``labels`` given only those classified correctly), every input's
    predicted class, and, with ``keep_activations``, the subject layer's neuron activations of the inputs used
    (else None)."""
    signed = absolute = None
    n_used, predictions, activations = 0, [], []
    for batch_signed, batch_abs, n, pred, acts in batches:
        signed = batch_signed if signed is None else signed + batch_signed
        absolute = batch_abs if absolute is None else absolute + batch_abs
        n_used += n
        predictions.append(pred)
        if keep_activations:
            activations.append(acts)
    return (
        signed,
        absolute,
        n_used,
        np.concatenate(predictions),
        np.concatenate(activations) if keep_activations else None,
    )


def input_relevance(network, x: np.ndarray, target: np.ndarray | None = None, *, eps: float = 1e-7) -> np.ndarray:
    """Pixel-level relevance of the predicted (or ``target``) logit: same shape as ``x``. ``network``: a
    Network or a framework's model object."""
    from .data import as_array
    from .framework import as_network

    x = as_array(x)
    maps = input_relevance_pass(as_network(network), eps=eps).maps(x, target)
    return maps.reshape(x.shape) if maps.size == x.size else maps


def input_relevance_pass(network, *, eps: float = 1e-7):
    """The relevance pass down to the input pixels, built once per network and eps (a LayerError when some
    layer of the model has no LRP rule)."""
    return network.cached(("input-relevance", eps), lambda: network.relevance(None, eps=eps))
