"""Importance: relevance aggregated over the training inputs, and the top-m neurons (Algorithm 1)."""

from __future__ import annotations

import numpy as np

from .errors import Param, ParameterError

AGGREGATES = ("sum", "abs", "mean")


def importance(relevance: np.ndarray, *, aggregate: str = "sum") -> np.ndarray:
    """Importance per neuron from relevance (n_inputs, n_neurons).

    ``"sum"``: cumulative signed relevance (the paper's choice); ``"abs"``: cumulative absolute
    relevance; ``"mean"``: mean signed relevance.
    """
    if aggregate not in AGGREGATES:
        raise ParameterError(f"The 'aggregate' parameter must be one of {AGGREGATES}. Got {aggregate!r} instead.")
    relevance = np.asarray(relevance, dtype=np.float64)
    if aggregate == "abs":
        return np.abs(relevance).sum(axis=0)
    if aggregate == "mean":
        return relevance.mean(axis=0)
    return relevance.sum(axis=0)


def top_neurons(scores: np.ndarray, m: int) -> np.ndarray:
    """Indices of the ``m`` highest scores, highest first; ties broken by the lower index (stable)."""
    n = len(scores)
    if not isinstance(m, (int, np.integer)) or isinstance(m, bool) or not 1 <= m <= n:
        raise ParameterError(
            Param("m"), f" must be an int in the range [1, {n}] (the layer has {n} neurons). Got {m!r} instead."
        )
    return np.argsort(-np.asarray(scores), kind="stable")[:m].astype(np.int64)
