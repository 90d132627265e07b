"""DeepBase's measures of affinity (Sellam et al., "Deep Neural Inspection"), numpy functions on (n, U) units
and (n,) or (n, K) hypotheses: Pearson, Spearman and mutual information with their 95 % intervals, the
cross-validated linear model of a unit group, the early-stopping bound of mutual information, and the
per-pixel scores of masks (docs/design.md, "Affinity (DeepBase)")."""

from __future__ import annotations

import math

import numpy as np

MEASURES = ("pearson", "spearman", "mi", "linear")
#: measures of one unit against one hypothesis; "linear" is a measure of a group
UNIT_MEASURES = ("pearson", "spearman", "mi")
TITLES = {
    "pearson": "Pearson",
    "spearman": "Spearman",
    "mi": "mutual information",
    "linear": "linear model",
    "pixel": "pixel Pearson",
    "iou": "IoU",
}
#: measures of a spatial unit's activation map against a per-pixel hypothesis (a mask), on the inputs streamed
MASK_MEASURES = ("pixel", "iou")
#: NetDissect's top quantile: a unit's region is where its activation is among the top 0.5 % of all its values
IOU_TOP = 0.005
Z95 = 1.959963984540054
T95_4 = 2.7764451051977987  # t quantile 0.975 with 4 degrees of freedom: 5 parts or folds
PARTS = 5
#: a unit or hypothesis constant on the inputs seen has no correlation (NaN): final at once
_TINY = 1e-12


# ---- measures: (n, U) units and (n,) or (n, K) hypotheses -> (score, half-width of the 95 % interval) ------


def _correlation(a: np.ndarray, h: np.ndarray) -> np.ndarray:
    a = a - a.mean(axis=0)
    h = h - h.mean(axis=0)
    sa, sh = np.sqrt((a * a).sum(axis=0)), np.sqrt((h * h).sum(axis=0))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (a.T @ h) / np.outer(sa, sh)
    r[(sa <= _TINY * max(1.0, float(np.abs(a).max(initial=0))))[:, None] | (sh <= _TINY)[None, :]] = np.nan
    return np.clip(r, -1.0, 1.0)


def _fisher_half_width(r: np.ndarray, n: int, variance: float) -> np.ndarray:
    if n <= 3:
        return np.full(r.shape, np.inf)
    z = np.arctanh(np.clip(r, -1 + 1e-12, 1 - 1e-12))
    step = Z95 * math.sqrt(variance / (n - 3))
    return np.where(np.isnan(r), np.inf, (np.tanh(z + step) - np.tanh(z - step)) / 2)


def pearson(a, h) -> tuple[np.ndarray, np.ndarray]:
    """Pearson correlation of each unit (column of ``a``, (n, U)) with each hypothesis (column of ``h``,
    (n, K)): (r (U, K), half-width of its 95 % Fisher-z interval). NaN where a column is constant, with an
    infinite half-width (a unit silent so far may fire on later inputs)."""
    a, h = np.asarray(a, np.float64), np.asarray(h, np.float64)
    r = _correlation(a, h)
    return r, _fisher_half_width(r, len(a), 1.0)


def _ranks(a: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(a, axis=0, method="average")


def spearman(a, h) -> tuple[np.ndarray, np.ndarray]:
    """Spearman correlation (Pearson on average ranks) and the half-width of its 95 % Fisher-z interval with
    the variance 1.06 / (n - 3) of Fieller, Hartley and Pearson (1957)."""
    a, h = np.asarray(a, np.float64), np.asarray(h, np.float64)
    r = _correlation(_ranks(a), _ranks(h))
    r[np.isnan(_correlation(a, h))] = np.nan  # constant columns stay undefined
    return r, _fisher_half_width(r, len(a), 1.06)


def is_binary(h: np.ndarray) -> bool:
    """Whether a hypothesis takes only the values 0 and 1 (then scored by accuracy, not R^2)."""
    return bool(np.isin(h, (0.0, 1.0)).all())


def _within(sorted_v: np.ndarray, v: np.ndarray, radius: np.ndarray) -> np.ndarray:
    """How many values of ``sorted_v`` lie within ``radius`` of each ``v`` (|difference| <= radius, as a
    KD-tree's radius query counts): a 1-D range count by binary search. ``v +- radius`` rounds, so the
    ends found are moved while the distance itself says they are wrong (a value or two at most)."""
    n = len(sorted_v)
    hi = np.searchsorted(sorted_v, v + radius, "right")
    lo = np.searchsorted(sorted_v, v - radius, "left")
    for _ in range(3):
        over = (hi > 0) & (sorted_v[np.clip(hi - 1, 0, n - 1)] - v > radius)
        under = (hi < n) & (sorted_v[np.clip(hi, 0, n - 1)] - v <= radius)
        hi = hi - over + under
        over = (lo < n) & (v - sorted_v[np.clip(lo, 0, n - 1)] > radius)
        under = (lo > 0) & (v - sorted_v[np.clip(lo - 1, 0, n - 1)] <= radius)
        lo = lo + over - under
    return hi - lo


def _mi_cc(x: np.ndarray, y: np.ndarray, k: int) -> tuple[float, float]:
    """Kraskov-Stoegbauer-Grassberger estimate (their algorithm 1) for two continuous variables, and the
    standard error of the mean of its per-input terms."""
    from scipy.spatial import cKDTree
    from scipy.special import digamma

    xy = np.stack([x, y], axis=1)
    radius = cKDTree(xy).query(xy, k=k + 1, p=np.inf)[0][:, -1]  # the k-th neighbour other than itself
    radius = np.nextafter(radius, 0)
    nx = _within(np.sort(x), x, radius) - 1.0
    ny = _within(np.sort(y), y, radius) - 1.0
    n = len(x)
    terms = -(digamma(nx + 1) + digamma(ny + 1))
    return max(0.0, float(digamma(n) + digamma(k) + terms.mean())), float(terms.std(ddof=1) / math.sqrt(n))


def _mi_cd(c: np.ndarray, d: np.ndarray, k: int) -> tuple[float, float]:
    """Ross' estimate for a continuous variable and a discrete one, and the standard error of the mean of its
    per-input terms."""
    from scipy.special import digamma

    radius, counts, ks = np.empty(len(c)), np.empty(len(c)), np.empty(len(c))
    for label in np.unique(d):
        mask = d == label
        count = int(mask.sum())
        if count > 1:
            kk = min(k, count - 1)
            values = np.sort(c[mask])
            # the kk-th nearest other value in 1-D: the kk-th smallest of the gaps to either side
            pos = np.searchsorted(values, c[mask])
            cand = np.full((count, 2 * kk), np.inf)
            for step in range(1, kk + 1):
                left, right = pos - step, pos + step
                cand[:, 2 * step - 2] = np.where(left >= 0, c[mask] - values[np.clip(left, 0, count - 1)], np.inf)
                cand[:, 2 * step - 1] = np.where(right < count, values[np.clip(right, 0, count - 1)] - c[mask], np.inf)
            radius[mask] = np.nextafter(np.sort(cand, axis=1)[:, kk - 1], 0)
            ks[mask] = kk
        counts[mask] = count
    keep = counts > 1
    c, radius = c[keep], radius[keep]
    m = _within(np.sort(c), c, radius)
    n = int(keep.sum())
    terms = digamma(ks[keep]) - digamma(counts[keep]) - digamma(m)
    return max(0.0, float(digamma(n) + terms.mean())), float(terms.std(ddof=1) / math.sqrt(n))


def _mi(a: np.ndarray, h: np.ndarray, random_state: int, k: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's ``mutual_info_classif`` (0/1 hypothesis) or ``mutual_info_regression`` of every column
    of ``a`` with ``h``, the same estimators on the same scaled, jittered values, with the range counts done
    by sorting (one KD-tree per column instead of three; equal to scikit-learn's, tested), and 0 for a constant
    unit; with the standard error of the mean of each estimate's per-input terms (infinite for a constant)."""
    if np.ptp(h) == 0:
        return np.zeros(a.shape[1]), np.full(a.shape[1], np.inf)
    rng = np.random.RandomState(random_state)
    discrete = is_binary(h)
    std = a.std(axis=0)
    a = a / np.where(std == 0, 1.0, std)  # sklearn.preprocessing.scale(with_mean=False)
    a = a + 1e-10 * np.maximum(1, np.abs(a).mean(axis=0)) * rng.standard_normal(a.shape)
    # a constant unit carries no information (the jitter alone would give it a spurious estimate)
    varies = std > 0
    if discrete:
        pairs = [_mi_cd(a[:, i], h, k) if varies[i] else (0.0, np.inf) for i in range(a.shape[1])]
        return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    sd = h.std()
    h = h / (sd if sd else 1.0)
    h = h + 1e-10 * max(1.0, float(np.abs(h).mean())) * rng.standard_normal(len(h))
    pairs = [_mi_cc(a[:, i], h, k) if varies[i] else (0.0, np.inf) for i in range(a.shape[1])]
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


def mutual_information(a, h, *, random_state: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Mutual information in nats between each unit (column of ``a``) and one hypothesis ``h`` (n,):
    scikit-learn's nearest-neighbour estimate (``mutual_info_classif`` for a 0/1 hypothesis, else
    ``mutual_info_regression``), and the half-width of an approximate 95 % interval, 1.96 standard errors of
    the mean of the estimate's per-input terms (they are not independent, so this is a lower bound: the
    stream also asks the estimate to have settled, see `affinity`). Infinite while the hypothesis or the
    unit is constant."""
    a, h = np.asarray(a, np.float64), np.asarray(h, np.float64).ravel()
    score, se = _mi(a, h, random_state)
    return score, Z95 * se


def _folds(h: np.ndarray, binary: bool, random_state: int) -> np.ndarray:
    """Fold number (0..4) of each input: shuffled, and for a 0/1 hypothesis stratified (each class dealt in
    turn to the folds, as scikit-learn's StratifiedKFold keeps the class shares)."""
    rng = np.random.default_rng(random_state)
    fold = np.empty(len(h), np.int64)
    groups = [np.flatnonzero(h == c) for c in (0.0, 1.0)] if binary else [np.arange(len(h))]
    offset = 0
    for idx in groups:
        idx = rng.permutation(idx)
        fold[idx] = (np.arange(len(idx)) + offset) % PARTS
        offset += len(idx)
    return fold


def _standardised(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both scaled by the training part's mean and deviation, with an intercept column appended."""
    mu, sd = train.mean(axis=0), train.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    one = lambda v: np.hstack([(v - mu) / sd, np.ones((len(v), 1))])  # noqa: E731
    return one(train), one(test)


def _logistic(x: np.ndarray, t: np.ndarray, c: float = 1.0) -> np.ndarray:
    """Weights (intercept last) of L2-regularised logistic regression, scikit-learn's default objective
    (sum of log-losses + ||w||^2 / 2C, intercept not penalised), by Newton's method with step halving."""
    from scipy.special import expit, log_expit

    d = x.shape[1]
    reg = np.full(d, 1.0 / c)
    reg[-1] = 0.0
    w = np.zeros(d)
    sign = 2 * t - 1

    def loss(w):
        return -log_expit(sign * (x @ w)).sum() + 0.5 * (reg * w * w).sum()

    current = loss(w)
    for _ in range(100):
        p = expit(x @ w)
        grad = x.T @ (p - t) + reg * w
        hess = (x * (p * (1 - p))[:, None]).T @ x + np.diag(reg + 1e-9)
        step = np.linalg.solve(hess, grad)
        rate = 1.0
        while rate > 1e-6:
            trial = loss(w - rate * step)
            if trial <= current:
                break
            rate /= 2
        w, before, current = w - rate * step, current, trial
        if before - current <= 1e-12 * max(1.0, abs(before)):
            break
    return w


def linear_fit(a, h, *, random_state: int = 0) -> tuple[float, float, float]:
    """A linear model from the unit group ``a`` (n, U) to the hypothesis ``h`` (n,), 5-fold cross-validated
    on standardised units: L2-regularised logistic regression (scikit-learn's defaults, C = 1) scored by
    accuracy for a 0/1 hypothesis, least squares scored by R^2 (of each test fold about its own mean)
    otherwise. Returns (mean score over the folds, half-width of the 95 % interval from the folds' spread,
    baseline: the majority share for a 0/1 hypothesis, 0 for R^2). NaN where a fold cannot be made (a class
    with fewer than 5 inputs) or the hypothesis is constant. Written in numpy (equal to scikit-learn's
    ``cross_val_score`` on the same folds, tested): its per-call overhead dominated the checks."""
    a, h = np.asarray(a, np.float64), np.asarray(h, np.float64).ravel()
    if np.ptp(h) == 0:
        return float("nan"), float("inf"), float("nan")
    binary = is_binary(h)
    if binary:
        counts = np.bincount(h.astype(np.int64), minlength=2)
        baseline = float(counts.max() / len(h))
        if counts.min() < PARTS:
            return float("nan"), float("inf"), baseline
    else:
        baseline = 0.0
        if len(h) < 4 * PARTS:
            return float("nan"), float("inf"), baseline
    fold = _folds(h, binary, random_state)
    scores = np.empty(PARTS)
    for f in range(PARTS):
        train, test = fold != f, fold == f
        xtr, xte = _standardised(a[train], a[test])
        if binary:
            scores[f] = float(((xte @ _logistic(xtr, h[train]) > 0) == (h[test] == 1)).mean())
        else:
            # normal equations (a tiny ridge keeps a constant unit solvable): small, and far cheaper than an SVD
            coef = np.linalg.solve(xtr.T @ xtr + 1e-9 * np.eye(xtr.shape[1]), xtr.T @ h[train])
            resid = h[test] - xte @ coef
            total = ((h[test] - h[test].mean()) ** 2).sum()
            scores[f] = 1 - (resid**2).sum() / total if total > 0 else float("nan")
    return float(scores.mean()), float(T95_4 * scores.std(ddof=1) / math.sqrt(PARTS)), baseline


def mi_half_width(
    score, half_width, previous, n_previous, n: int, n_total: int, *, final: bool = False, tol: float | None = None
):
    """The early-stopping half-width of mutual-information scores computed on the first ``n`` of ``n_total``
    streamed inputs (docs/design.md, "Early stopping of mutual information"): a bound on |estimate at n -
    estimate on all n_total inputs|; and the input count at which an open one is computed again.

    The nearest-neighbour estimate moves with n in expectation (its bias), so its sampling interval alone does
    not say where the full-data value lies. The rule bounds the drift still to come by the drift per doubling
    of n times the doublings left, log2(n_total / n): an upper bound as long as the expected change per
    doubling does not grow with n (a bias decaying as a power of n, or at the slowest as log n where a unit
    nearly determines a hypothesis). The drift per doubling is measured as the change since the score's
    previous computation (``previous`` at ``n_previous`` inputs, a doubling or more before) per doubling. That
    change is noisy, with a standard deviation of about one standard error of the estimate (se,
    ``half_width`` / 1.96: the change between nested samples of n / 2 and n inputs), so the drift taken is the
    measured one plus se. To it adds the sampling term: ``half_width`` times sqrt(1 - n / n_total), the
    spread of a prefix's estimate about the full data's, which contains it. A first computation has no drift
    to show: infinite (open). On all the inputs, or ``final`` (the stream ends), the estimate's own
    ``half_width``.

    An open score is due again at the first input count n' >= 2 n (its drift then spans a doubling at least:
    over a shorter step the change is mostly noise) at which this bound, with se shrinking as 1/sqrt(n') and
    the drift per doubling as measured (none yet after a first computation), would be within ``tol``; at
    ``n_total`` if none is."""
    score, half_width = np.asarray(score, np.float64), np.asarray(half_width, np.float64)
    if final or n >= n_total:
        return half_width, np.full(score.shape, float(n_total))
    previous, n_previous = np.asarray(previous, np.float64), np.asarray(n_previous, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        drift = np.abs(score - previous) / np.log2(n / n_previous)
    first = ~((n_previous > 0) & np.isfinite(drift))
    drift = np.where(first, np.inf, drift)
    se = half_width / Z95
    width = half_width * math.sqrt(1 - n / n_total) + math.log2(n_total / n) * (drift + se)
    due = np.full(score.shape, float(n_total))
    if tol is not None:
        for later in reversed(n * 2.0 ** np.arange(1, math.log2(n_total / n), 0.25)):  # the first fit wins
            shrink = math.sqrt(n / later)
            bound = half_width * shrink * math.sqrt(1 - later / n_total) + math.log2(n_total / later) * (
                np.where(first, 0.0, drift) + se * shrink
            )
            due = np.where(bound <= tol, math.ceil(later), due)
    return width, due


def mask_scores(spatial, maps, masks, scores, used, n):
    """Per spatial unit and mask (into ``scores`` and ``used``): Pearson over every pixel of every input
    between the unit's activation map and the mask resized to the map (area averages), and NetDissect's IoU
    of the unit's region (its top IOU_TOP of values over all pixels and inputs) with the mask (resized, above
    one half)."""
    for layer, (cols, _) in spatial.items():
        stack = np.concatenate(maps[layer])  # (n, h, w, units of the layer) float32
        found = []
        for (where, j), pieces in masks.items():
            if where == layer:
                mask = np.concatenate(pieces).astype(np.float64).ravel()
                mask -= mask.mean()
                found.append((j, mask, math.sqrt(mask @ mask), np.concatenate(pieces).ravel() >= 0.5))
        for k, c in enumerate(cols):
            a = stack[..., k].astype(np.float64).ravel()
            # a sparse ReLU channel's quantile can be its minimum (0): its region is then the values above it,
            # not every pixel (which would score the mask's area share as IoU)
            top = (a >= np.quantile(a, 1 - IOU_TOP)) & (a > a.min())
            a -= a.mean()
            norm = math.sqrt(a @ a)
            for j, mask, mask_norm, region in found:
                constant = norm <= _TINY * max(1.0, float(np.abs(a).max())) or mask_norm <= _TINY
                scores["pixel"][c, j] = np.nan if constant else float(np.clip(a @ mask / (norm * mask_norm), -1, 1))
                union = (top | region).sum()
                scores["iou"][c, j] = (top & region).sum() / union if union else np.nan
                used["pixel"][c, j] = used["iou"][c, j] = n
