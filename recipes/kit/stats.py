"""The statistics the recipes report, once: effect sizes and tests over repeated runs, and the scores of a
steering model. Correlations are idcgen's (idcgen/deepbase/statistics.py), not a second implementation."""

from __future__ import annotations

import numpy as np


def correlation(a, b) -> float:
    """Pearson's r of two series (idcgen.deepbase.statistics.pearson); NaN when one is constant."""
    from idcgen.deepbase.statistics import pearson

    r, _ = pearson(np.asarray(a, np.float64)[:, None], np.asarray(b, np.float64)[:, None])
    return float(r[0, 0])


def a12(a, b) -> float:
    """Vargha-Delaney A12: the probability that a run of ``a`` beats one of ``b`` (ties count half)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    greater = (a[:, None] > b[None, :]).sum()
    equal = (a[:, None] == b[None, :]).sum()
    return float((greater + 0.5 * equal) / (len(a) * len(b)))


def holm(p: dict) -> dict:
    """Holm's step-down adjustment of a family of p values (NaN left out)."""
    keys = sorted((k for k in p if not np.isnan(p[k])), key=lambda k: p[k])
    out, running = dict.fromkeys(p, float("nan")), 0.0
    for i, k in enumerate(keys):
        running = max(running, min(1.0, (len(keys) - i) * p[k]))
        out[k] = running
    return out


def mann_whitney(a, b) -> float:
    from scipy.stats import mannwhitneyu

    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2 or len(b) < 2:
        return float("nan")
    if np.ptp(np.concatenate([a, b])) == 0:
        return 1.0
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def calibration(predicted: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(a, b) of the least-squares line ``y ~ a * predicted + b``."""
    predicted, y = np.asarray(predicted, np.float64), np.asarray(y, np.float64)
    a = float(np.cov(predicted, y, bias=True)[0, 1] / predicted.var())
    return a, float(y.mean() - a * predicted.mean())


def steering_scores(predicted: np.ndarray, y: np.ndarray, baseline: float, prefix: str = "test") -> dict:
    """MSE, RMSE, MSE as a multiple of ``baseline`` (the training mean's), correlation with the true angle,
    and the spread (std) of the predictions; column names start with ``prefix``."""
    predicted = np.asarray(predicted, np.float64)
    mse = float(np.mean((predicted - y) ** 2))
    return {
        f"{prefix} MSE": round(mse, 4),
        f"{prefix} RMSE": round(mse**0.5, 4),
        f"{prefix} x mean": round(mse / baseline, 3),
        f"{prefix} corr": round(correlation(predicted, y), 3),
        f"{prefix} std": round(float(predicted.std()), 3),
    }


def label_check(y: np.ndarray) -> dict:
    """How much the angles of neighbouring frames agree (lag-1 autocorrelation), and the excess kurtosis
    (-1.2 for a uniform distribution, 0 for a normal one): real steering angles at 20 frames per second have
    an autocorrelation near 1."""
    y = np.asarray(y, np.float64)
    lag1 = float(correlation(y[1:], y[:-1]))
    kurtosis = float(((y - y.mean()) ** 4).mean() / y.var() ** 2 - 3)
    verdict = (
        "the angles of neighbouring frames are unrelated: these labels look like random values, not a "
        "recorded drive; a model cannot learn them and any test MSE is at best the labels' variance"
        if abs(lag1) < 0.3
        else "neighbouring frames' angles agree, as a recorded drive's do"
    )
    return {
        "lag1_autocorrelation": round(lag1, 3),
        "excess_kurtosis": round(kurtosis, 2),
        "min": round(float(y.min()), 3),
        "max": round(float(y.max()), 3),
        "std": round(float(y.std()), 4),
        "verdict": verdict,
    }


def wilcoxon(a, b) -> float:
    """Two-sided Wilcoxon signed-rank p of paired runs (``a[i]`` and ``b[i]`` share model copy, seeds and random
    state); 1.0 when every difference is zero, NaN under two pairs."""
    from scipy.stats import wilcoxon as signed_rank

    d = np.asarray(a, float) - np.asarray(b, float)
    if len(d) < 2:
        return float("nan")
    if not np.any(d):
        return 1.0
    return float(signed_rank(d, alternative="two-sided").pvalue)


def rank_biserial(x, y) -> float:
    """The matched-pairs rank-biserial correlation, the paired effect size that goes with Wilcoxon's test: (sum of
    the ranks of positive differences - that of negative ones) / the sum of all ranks (zero differences
    dropped); +1 when a beats b on every pair. A12 compares every run of a with every run of b, pairs ignored,
    so differences between subject copies dilute it."""
    from scipy.stats import rankdata

    d = np.asarray(x, float) - np.asarray(y, float)
    d = d[d != 0]
    if not len(d):
        return 0.0
    ranks = rankdata(np.abs(d))
    return float((ranks[d > 0].sum() - ranks[d < 0].sum()) / ranks.sum())
