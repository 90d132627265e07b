"""How natural a failure is: the distance of each mutant from its seed, and a campaign's failure rate.

    d = distances(mutants, seeds, value_range=(0.0, 1.0))   # arrays of n: l0, l2, linf, ssim, ...
    summary({"label": y, "prediction": p, "combination": c}, execs=20_000, seconds=95.0)

Per pair (mutant, seed), batched over (n, h, w, c) or (n, h, w) arrays:

- ``l0``: the share of pixels changed, in [0, 1]; a pixel is changed when one of its channels moved by
  more than half a uint8 step of the value range (less is rounding, as for the validity bounds of
  ``idcgen.fuzz.validity``); ``l0_pixels`` is the count.
- ``l2`` and ``linf``: the Euclidean and the largest absolute difference over every value, in the
  inputs' units; ``l2_rel`` and ``linf_rel`` divide them by the width of the value range.
- ``ssim``: the structural similarity of Wang et al. (2004): an 11x11 Gaussian window of sigma 1.5,
  K1 = 0.01, K2 = 0.03, the dynamic range L = the width of the value range, population (co)variances,
  averaged over every position where the window fits inside the image, then over channels. Values are
  taken from the low end of the range (x - low, in [0, L]): SSIM's luminance term is not shift-invariant,
  and this way one image pair scores the same whether a model sees it in [0, 1] or [-0.5, 0.5].

numpy only: this module imports without TensorFlow.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import InputError, ParameterError

__all__ = ["distances", "ssim", "summary"]

_SIGMA, _RADIUS, _K1, _K2 = 1.5, 5, 0.01, 0.03
#: images per block in SSIM: about ten float64 copies of a block are alive at once
_BLOCK = 256
#: the Gaussian window's taps (one axis; the filter is separable), summing to 1
_TAPS = np.exp(-0.5 * (np.arange(-_RADIUS, _RADIUS + 1) / _SIGMA) ** 2)
_TAPS /= _TAPS.sum()


def _span(value_range: Any) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in value_range)
    except (TypeError, ValueError):
        low = high = float("nan")
    if not (np.isfinite(low) and np.isfinite(high) and high > low):
        raise ParameterError(
            f"value_range must be (low, high) with finite low < high, e.g. (0.0, 1.0) or (0, 255); got {value_range!r}."
        )
    return low, high


def _pairs(mutants: Any, seeds: Any) -> tuple[np.ndarray, np.ndarray]:
    """Both as float64 (n, h, w, c); (n, h, w) gains a channel axis."""
    m, s = np.asarray(mutants), np.asarray(seeds)
    if m.shape != s.shape or m.ndim not in (3, 4) or len(m) == 0:
        raise InputError(
            f"mutants and seeds must be two non-empty arrays of the same shape (n, h, w, c) or "
            f"(n, h, w), one seed per mutant; got {m.shape} and {s.shape}."
        )
    if m.ndim == 3:
        m, s = m[..., None], s[..., None]
    return m.astype(np.float64), s.astype(np.float64)


def _valid_filter(x: np.ndarray) -> np.ndarray:
    """Separable Gaussian filter of (n, h, w, c) over h and w, only where the whole window fits."""
    size = len(_TAPS)
    h, w = x.shape[1] - size + 1, x.shape[2] - size + 1
    rows = sum(t * x[:, k : k + h] for k, t in enumerate(_TAPS))
    return sum(t * rows[:, :, k : k + w] for k, t in enumerate(_TAPS))


def ssim(mutants: Any, seeds: Any, value_range: Any = (0.0, 1.0)) -> np.ndarray:
    """(n,) mean SSIM of each mutant against its seed (see the module docstring)."""
    low, high = _span(value_range)
    x, y = _pairs(mutants, seeds)
    x, y = x - low, y - low
    size = 2 * _RADIUS + 1
    if x.shape[1] < size or x.shape[2] < size:
        raise InputError(
            f"SSIM needs images of at least {size}x{size} pixels (its Gaussian window); got {x.shape[1]}x{x.shape[2]}."
        )
    c1, c2 = (_K1 * (high - low)) ** 2, (_K2 * (high - low)) ** 2
    out = np.empty(len(x))
    for start in range(0, len(x), _BLOCK):
        a, b = x[start : start + _BLOCK], y[start : start + _BLOCK]
        mu_a, mu_b = _valid_filter(a), _valid_filter(b)
        var_a = _valid_filter(a * a) - mu_a * mu_a
        var_b = _valid_filter(b * b) - mu_b * mu_b
        cov = _valid_filter(a * b) - mu_a * mu_b
        index = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2))
        # every channel has the same number of positions: the mean over all is the mean of channel means
        out[start : start + len(a)] = index.mean(axis=(1, 2, 3))
    return out


def distances(mutants: Any, seeds: Any, value_range: Any = (0.0, 1.0)) -> dict[str, np.ndarray]:
    """Distances of each mutant from its seed: a dict of (n,) arrays ``l0`` (share of pixels changed),
    ``l0_pixels``, ``l2``, ``l2_rel``, ``linf``, ``linf_rel`` and ``ssim`` (see the module docstring;
    NaN for images smaller than SSIM's 11x11 window).

    ``value_range``: the inputs' (low, high), e.g. (0, 1) for scaled images or (0, 255) for uint8.
    """
    low, high = _span(value_range)
    span = high - low
    x, y = _pairs(mutants, seeds)
    diff = np.abs(x - y)
    pixels = diff.shape[1] * diff.shape[2]
    changed = np.count_nonzero((diff > 0.5 / 255 * span).any(axis=3), axis=(1, 2))
    flat = diff.reshape(len(diff), -1)
    l2 = np.sqrt(np.einsum("ij,ij->i", flat, flat))
    linf = flat.max(axis=1)
    return {
        "l0": changed / pixels,
        "l0_pixels": changed.astype(np.int64),
        "l2": l2,
        "l2_rel": l2 / span,
        "linf": linf,
        "linf_rel": linf / span,
        "ssim": ssim(x, y, (low, high)) if min(x.shape[1:3]) >= 2 * _RADIUS + 1 else np.full(len(x), np.nan),
    }


def summary(findings: dict, execs: int, seconds: float) -> dict:
    """A campaign's failure rate and variety.

    ``findings``: arrays of one row per finding: ``label`` and ``prediction`` (required), ``combination``
    (optional: an id per finding, or a row of cluster indices), and any of ``l0``, ``l2``, ``linf``,
    ``ssim`` (from :func:`distances`; their means are reported). ``execs``: mutants run; ``seconds``:
    the campaign's wall time.

    Returns ``findings`` (count), ``unique_pairs`` (distinct (true, predicted) pairs), ``pairs`` (them,
    sorted), ``per_1000_execs``, ``per_minute`` (None when execs or seconds is 0),
    ``distinct_combinations`` (None without combinations) and ``mean_<distance>`` for each given.
    """
    if not isinstance(findings, dict) or "label" not in findings or "prediction" not in findings:
        raise InputError(
            "findings must be a dict of arrays with at least 'label' and 'prediction' (and "
            f"optionally 'combination', 'l0', 'l2', 'linf', 'ssim'); got {findings!r:.120}."
        )
    labels = np.asarray(findings["label"]).reshape(-1)
    predictions = np.asarray(findings["prediction"]).reshape(-1)
    n = len(labels)
    for key, value in findings.items():
        rows = np.asarray(value)
        if rows.ndim == 0 or len(rows) != n:
            raise InputError(
                f"findings[{key!r}] has shape {rows.shape}; 'label' has {n} rows: one row per finding in every array."
            )
    if isinstance(execs, bool) or not isinstance(execs, (int, np.integer)) or execs < 0:
        raise ParameterError(f"execs must be an int >= 0 (mutants run); got {execs!r}.")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float, np.number)) or not seconds >= 0:
        raise ParameterError(f"seconds must be a number >= 0 (the campaign's wall time); got {seconds!r}.")
    classes = labels.dtype.kind in "iu" and predictions.dtype.kind in "iu"  # not a regression model's values
    pairs = sorted({(int(t), int(p)) for t, p in zip(labels.tolist(), predictions.tolist())}) if classes else []
    out = {
        "findings": n,
        "unique_pairs": len(pairs),
        "pairs": [list(pair) for pair in pairs],
        "per_1000_execs": 1000.0 * n / execs if execs else None,
        "per_minute": 60.0 * n / seconds if seconds else None,
        "distinct_combinations": None,
    }
    if "combination" in findings:
        combos = np.asarray(findings["combination"])
        out["distinct_combinations"] = int(len(np.unique(combos.reshape(n, -1), axis=0))) if n else 0
    for key in ("l0", "l2", "linf", "ssim"):
        if key in findings:
            values = np.asarray(findings[key], dtype=np.float64)
            out[f"mean_{key}"] = float(values.mean()) if len(values) else None
    return out
