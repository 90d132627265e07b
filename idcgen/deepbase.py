"""Affinity between hidden units and hypotheses (DeepBase, Sellam et al., "Deep Neural Inspection").

Which functions of the input (hypotheses, idcgen/hypotheses.py) do the units of a model follow? For every
unit and hypothesis a statistical *measure* of their affinity: Pearson and Spearman correlation, mutual
information (scikit-learn's nearest-neighbour estimators); and for every *unit group* (the important
neurons of an analysis, a layer, a list) a linear model from the group to the hypothesis, scored by
cross-validated accuracy (logistic regression, 0/1 hypotheses) or R^2 (linear regression, the others).

Per-pixel hypotheses (masks (n, H, W)) are compared with the activation maps of convolutional channels,
pixel by pixel: Pearson over every pixel (``pixel``) and NetDissect's IoU of the channel's top 0.5 % region
with the mask (``iou``), on the inputs streamed; elsewhere a mask's area share stands in for it.

DeepBase's two optimisations (docs/design.md, "Affinity (DeepBase)"):

- *shared pass*: one forward pass per batch taps every layer any group needs, and every hypothesis is
  evaluated once per batch, whatever the number of groups and measures;
- *early stopping*: inputs are streamed in a random order (a prefix is a random sample) and every score
  carries a 95 % confidence interval; a score is final once its interval is within ``tol`` of it, and the
  stream stops when every score is final. Intervals: Fisher z for Pearson (standard error 1/sqrt(n-3)) and
  Spearman (sqrt(1.06/(n-3))); the spread over the 5 cross-validation folds for the linear model (t
  quantile with 4 degrees of freedom). A score open after a check is computed again where its interval
  predicts convergence (half-width proportional to 1/sqrt(n)), or at twice its inputs if that comes first,
  so each is computed a few times. Mutual information, whose estimate drifts with n (its bias), has a bound
  on its distance to the full-data estimate instead (`mi_half_width`): its drift per doubling of n times the
  doublings left, plus its sampling interval shrunk to the part of the data still to come.
"""

from __future__ import annotations

import csv
import io
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .checks import check_int, check_real
from .errors import InputError, ParameterError
from .hypotheses import Hypothesis, builtin_hypotheses, describe_function, evaluate, resize_mask
from .markdown import to_html

__all__ = ["affinity", "AffinityResult", "UnitGroup", "parse_units", "parse_measures", "MEASURES",
           "pearson", "spearman", "mutual_information", "linear_fit", "write_report"]

MEASURES = ("pearson", "spearman", "mi", "linear")
#: measures of one unit against one hypothesis; "linear" is a measure of a group
UNIT_MEASURES = ("pearson", "spearman", "mi")
TITLES = {"pearson": "Pearson", "spearman": "Spearman", "mi": "mutual information", "linear": "linear model",
          "pixel": "pixel Pearson", "iou": "IoU"}
#: measures of a spatial unit's activation map against a per-pixel hypothesis (a mask), on the inputs streamed
MASK_MEASURES = ("pixel", "iou")
#: NetDissect's top quantile: a unit's region is where its activation is among the top 0.5 % of all its values
IOU_TOP = 0.005
Z95 = 1.959963984540054
T95_4 = 2.7764451051977987   # t quantile 0.975 with 4 degrees of freedom: 5 parts or folds
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
    r[np.isnan(_correlation(a, h))] = np.nan   # constant columns stay undefined
    return r, _fisher_half_width(r, len(a), 1.06)


def _is_binary(h: np.ndarray) -> bool:
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
    radius = cKDTree(xy).query(xy, k=k + 1, p=np.inf)[0][:, -1]   # the k-th neighbour other than itself
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
    discrete = _is_binary(h)
    std = a.std(axis=0)
    a = a / np.where(std == 0, 1.0, std)                     # sklearn.preprocessing.scale(with_mean=False)
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
    binary = _is_binary(h)
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
            scores[f] = 1 - (resid ** 2).sum() / total if total > 0 else float("nan")
    return float(scores.mean()), float(T95_4 * scores.std(ddof=1) / math.sqrt(PARTS)), baseline


def mi_half_width(score, half_width, previous, n_previous, n: int, n_total: int, *, final: bool = False,
                  tol: float | None = None):
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
        for later in reversed(n * 2.0 ** np.arange(1, math.log2(n_total / n), 0.25)):   # the first fit wins
            shrink = math.sqrt(n / later)
            bound = (half_width * shrink * math.sqrt(1 - later / n_total)
                     + math.log2(n_total / later) * (np.where(first, 0.0, drift) + se * shrink))
            due = np.where(bound <= tol, math.ceil(later), due)
    return width, due


# ---- unit groups -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class UnitGroup:
    """Units of one layer, measured together by the linear model."""

    name: str
    layer: str
    neurons: tuple[int, ...]


def parse_measures(spec) -> tuple[str, ...]:
    """"pearson,spearman" or a sequence -> the measures, in the order given, each once."""
    names = [s.strip().lower() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    unknown = [n for n in names if n not in MEASURES]
    if not names or unknown:
        raise ParameterError(f"unknown measure {unknown[0]!r}; choose among {', '.join(MEASURES)}" if unknown else
                             f"no measure given; choose among {', '.join(MEASURES)}")
    return tuple(dict.fromkeys(names))


def parse_units(spec: str, network) -> list[UnitGroup]:
    """Unit groups from ``LAYER`` (all its neurons) or ``LAYER:i,j,k``, several joined by ``;``."""
    groups = []
    for part in (p.strip() for p in spec.split(";")):
        if not part:
            continue
        layer, _, listed = part.partition(":")
        layer = network.step(layer.strip()).name   # LayerError naming the valid layers
        width = network.neuron_count(layer)
        if not listed.strip():
            groups.append(UnitGroup(f"{layer} (all {width})", layer, tuple(range(width))))
            continue
        try:
            neurons = tuple(int(v) for v in listed.split(",") if v.strip())
        except ValueError:
            raise ParameterError(f"units {part!r}: expected LAYER or LAYER:i,j,k with neuron indices, "
                                 "e.g. fc2:3,17,40") from None
        bad = [i for i in neurons if not 0 <= i < width]
        if not neurons or bad:
            raise ParameterError(f"units {part!r}: layer {layer} has neurons 0..{width - 1}; "
                                 + (f"got {bad[0]}" if bad else "no index given"))
        groups.append(UnitGroup(f"{layer}:{','.join(map(str, neurons))}", layer, tuple(dict.fromkeys(neurons))))
    if not groups:
        raise ParameterError(f"no unit group in {spec!r}; expected LAYER or LAYER:i,j,k, joined by ;")
    return groups


# ---- result ----------------------------------------------------------------------------------------------

@dataclass
class AffinityResult:
    """Scores of every (unit, hypothesis) per unit measure and every (group, hypothesis) for ``linear``.

    ``scores[m]`` is (units, hypotheses) for pearson/spearman/mi and (groups, hypotheses) for linear, with
    ``half_widths[m]`` (95 % interval) and ``n_used[m]`` (inputs the score was computed on)."""

    units: list[tuple[str, int]]
    groups: list[UnitGroup]
    hypotheses: list[Hypothesis]
    measures: tuple[str, ...]
    scores: dict
    half_widths: dict
    n_used: dict
    baselines: np.ndarray                    # (groups, hypotheses): majority share (0/1 hypotheses) or 0 (R^2)
    binary: np.ndarray                       # (hypotheses,) bool: a 0/1 hypothesis on the inputs used
    n_inputs: int
    n_seen: int
    tol: float | None
    y_source: str                            # "labels" or "predictions": what the hypotheses got as y
    seconds: float
    timings: dict = field(default_factory=dict)
    checks: list = field(default_factory=list)   # input counts at which scores were checked
    channels: set = field(default_factory=set)   # layers whose neurons are channels (conv)
    notes: list = field(default_factory=list)

    # -- words --
    def unit_name(self, i: int) -> str:
        layer, neuron = self.units[i]
        return f"{'channel' if layer in self.channels else 'neuron'} {neuron} of {layer}"

    def headline(self) -> str | None:
        """The unit measure that plain-words lines use: Spearman, else Pearson, else MI."""
        return next((m for m in ("spearman", "pearson", "mi") if m in self.measures), None)

    def top(self, k: int = 3, measure: str | None = None) -> list[tuple[int, list[tuple[int, float]]]]:
        """Per unit: its ``k`` hypotheses of largest |score| (NaN last): [(unit, [(hypothesis, score)])]."""
        measure = measure or self.headline()
        if measure is None:
            return []
        s = self.scores[measure]
        out = []
        for u in range(len(self.units)):
            key = np.where(np.isnan(s[u]), -1.0, np.abs(s[u]))
            order = np.argsort(-key, kind="stable")[:k]
            out.append((u, [(int(j), float(s[u, j])) for j in order]))
        return out

    def describe(self, k: int = 1, measure: str | None = None) -> list[str]:
        """"neuron 71 of fc2: class 1 one-vs-rest, Spearman 0.83" per unit; then each group's best
        hypothesis by the linear model."""
        measure = measure or self.headline()
        lines = []
        if measure is not None:
            for u, best in self.top(k, measure):
                said = "; ".join(f"{self.hypotheses[j].words}, {TITLES[measure].capitalize() if measure != 'mi' else 'MI'} "
                                 f"{_fmt(v)}" for j, v in best)
                lines.append(f"{self.unit_name(u)}: {said}")
        if "linear" in self.measures:
            s = self.scores["linear"]
            for g, group in enumerate(self.groups):
                for kind in (True, False):   # the best 0/1 hypothesis (accuracy above the majority share), then R^2
                    gain = np.where(self.binary == kind, s[g] - self.baselines[g], np.nan)
                    if np.isnan(gain).all():
                        continue
                    j = int(np.nanargmax(gain))
                    what = (f"logistic accuracy {_fmt(s[g, j])} (majority {_fmt(self.baselines[g, j])})" if kind
                            else f"linear R^2 {_fmt(s[g, j])}")
                    lines.append(f"{group.name} ({len(group.neurons)} units): {self.hypotheses[j].words}, {what}")
        return lines

    # -- tables --
    def rows(self) -> list[dict]:
        """One row per score: unit or group, hypothesis, measure, score, 95 % interval half-width, inputs used."""
        out = []
        for m in self.measures:
            s, w, n = self.scores[m], self.half_widths[m], self.n_used[m]
            owners = ([(self.unit_name(i), self.units[i][0], self.units[i][1], "") for i in range(len(self.units))]
                      if m != "linear" else [(g.name, g.layer, "", g.name) for g in self.groups])
            for i, (who, layer, neuron, group) in enumerate(owners):
                for j, hyp in enumerate(self.hypotheses):
                    out.append({"unit": who, "layer": layer, "neuron": neuron, "group": group,
                                "hypothesis": hyp.name, "measure": m, "score": _num(s[i, j]),
                                "half_width": _num(w[i, j]), "inputs": int(n[i, j]),
                                "baseline": _num(self.baselines[i, j]) if m == "linear" else ""})
        return out

    def to_frame(self):
        """The rows as a pandas DataFrame (pandas needed)."""
        try:
            import pandas as pd
        except ImportError:
            raise ParameterError("to_frame needs pandas (pip install pandas); rows() gives the same as dicts") from None
        return pd.DataFrame(self.rows())

    def matrix(self, measure: str) -> np.ndarray:
        return self.scores[measure]

    def to_dict(self) -> dict:
        return {"units": [self.unit_name(i) for i in range(len(self.units))],
                "groups": [{"name": g.name, "layer": g.layer, "neurons": list(g.neurons)} for g in self.groups],
                "hypotheses": [{"name": h.name, "description": h.words, "binary": bool(b)}
                               for h, b in zip(self.hypotheses, self.binary)],
                "measures": list(self.measures),
                "scores": {m: _nested(self.scores[m]) for m in self.measures},
                "half_widths": {m: _nested(self.half_widths[m]) for m in self.measures},
                "inputs_used": {m: self.n_used[m].tolist() for m in self.measures},
                "inputs": self.n_inputs, "inputs_seen": self.n_seen, "tol": self.tol, "y": self.y_source,
                "checks": self.checks, "seconds": round(self.seconds, 3),
                "timings": {k: round(v, 3) for k, v in self.timings.items()},
                "top": self.describe(), "notes": self.notes}

    def table(self, measure: str | None = None) -> str:
        """The hypothesis x unit matrix of one measure as aligned text (hypotheses as rows)."""
        measure = measure or self.headline() or self.measures[0]
        s = self.scores[measure]
        cols = ([f"{l}:{n}" for l, n in self.units] if measure != "linear" else [g.name for g in self.groups])
        head = [f"{TITLES[measure]}"] + cols
        body = [[h.name] + [_fmt(v) for v in s[:, j]] for j, h in enumerate(self.hypotheses)
                if measure not in MASK_MEASURES or not np.isnan(s[:, j]).all()]   # mask measures: the masks only
        widths = [max(len(r[c]) for r in [head] + body) for c in range(len(head))]
        return "\n".join("  ".join(v.rjust(w) if c else v.ljust(w) for c, (v, w) in enumerate(zip(r, widths))).rstrip()
                         for r in [head] + body)

    def plot(self, path=None, measure: str | None = None):
        """Heatmap of one measure (hypotheses x units; the linear measure: x groups); saved to ``path`` if
        given. Returns the matplotlib figure."""
        from .plots import pyplot
        plt = pyplot()
        measure = measure or self.headline() or self.measures[0]
        s = self.scores[measure].T
        cols = ([f"{l}:{n}" for l, n in self.units] if measure != "linear" else [g.name for g in self.groups])
        fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * len(cols) + 2.5), max(3.0, 0.32 * len(self.hypotheses) + 1.5)))
        signed = measure in ("pearson", "spearman", "pixel")
        image = ax.imshow(np.ma.masked_invalid(s), cmap="RdBu_r" if signed else "viridis", aspect="auto",
                          vmin=-1 if signed else None, vmax=1 if signed else None)
        ax.set_xticks(range(len(cols)), cols, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(len(self.hypotheses)), [h.name for h in self.hypotheses], fontsize=7)
        fig.colorbar(image, ax=ax, label=TITLES[measure])
        ax.set_title(f"Affinity ({TITLES[measure]}), {self.n_seen} of {self.n_inputs} inputs", fontsize=9)
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, dpi=110)
            plt.close(fig)
        return fig

    def save(self, folder) -> Path:
        """``affinity.csv``, ``affinity.json``, the heatmaps and ``report.md``/``report.html`` into ``folder``."""
        return write_report(self, folder)


def _num(v):
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) or (np.ndim(v) == 0 and np.isnan(v)) \
        else round(float(v), 6)


def _nested(a: np.ndarray) -> list:
    return [[None if not np.isfinite(v) else round(float(v), 6) for v in row] for row in a]


def _fmt(v) -> str:
    return "nan" if v is None or not np.isfinite(v) else f"{v:.2f}"


# ---- the stream ------------------------------------------------------------------------------------------

def affinity(model, x, y=None, *, analysis=None, units=None, hypotheses=None, measures=MEASURES,
             tol: float | None = 0.05, batch_size: int = 256, first_check: int = 500, random_state: int = 0,
             progress: bool = True, forward=None) -> AffinityResult:
    """Affinity of unit groups with hypotheses over the inputs ``x`` (labels ``y`` optional).

    ``analysis``: an `Analysis` whose important neurons form one group; ``units``: a spec string
    (``"fc2"``, ``"fc2:3,17;fc1"``, see `parse_units`) or a list of `UnitGroup`; both may be given;
    neither: all neurons of the model's default layer. ``hypotheses``: `Hypothesis` objects or a dict
    name -> f(x, y) (default: the built-in library). Without labels the hypotheses get the model's
    predictions as ``y``. ``tol``: a score is final once its 95 % interval is within +-tol (0 or None: every
    score on all inputs). ``forward(rows, layers)``: the model's outputs and those layers' activations of
    ``x[rows]`` (default: a forward pass here; ``idcgen.distributed`` gives the Ray workers'). Returns an
    `AffinityResult`.
    """
    from threadpoolctl import threadpool_limits
    from tqdm.auto import tqdm
    from .framework import as_network
    from .data import fit_to_model
    start = time.perf_counter()
    network = as_network(model) if analysis is None else analysis._network(model)
    measures = parse_measures(measures)
    tol = None if tol in (None, 0) else check_real("tol", tol, 0.0, None, closed="neither")
    batch_size = check_int("batch_size", batch_size, 1)
    first_check = check_int("first_check", first_check, 10)
    x = fit_to_model(x, network.input_shape)
    n = len(x)
    if n < 10:
        raise InputError(f"affinity needs at least 10 inputs to estimate correlations; got {n}")
    if y is not None:
        y = np.asarray(y)
        if len(y) != n:
            raise InputError(f"{len(y)} labels for {n} inputs; give one label per input or none")
    groups = _groups(network, analysis, units)
    hyps = _hypotheses(hypotheses, network, x)
    unit_list = list(dict.fromkeys((g.layer, i) for g in groups for i in g.neurons))
    layers = tuple(dict.fromkeys(layer for layer, _ in unit_list))
    column = {u: c for c, u in enumerate(unit_list)}
    group_cols = [np.array([column[(g.layer, i)] for i in g.neurons]) for g in groups]
    unit_pos = {layer: (np.array([c for c, (l, _) in enumerate(unit_list) if l == layer]),
                        np.array([i for l, i in unit_list if l == layer])) for layer in layers}
    U, K, G = len(unit_list), len(hyps), len(groups)
    shapes = {m: ((G if m == "linear" else U), K) for m in measures}
    scores = {m: np.full(shapes[m], np.nan) for m in measures}
    widths = {m: np.full(shapes[m], np.inf) for m in measures}
    used = {m: np.zeros(shapes[m], np.int64) for m in measures}
    final = {m: np.zeros(shapes[m], bool) for m in measures}
    due = {m: np.zeros(shapes[m], np.float64) for m in measures}   # input count at which a cell is scored next
    baselines = np.full((G, K), np.nan)
    binary = np.zeros(K, bool)
    order = np.random.default_rng(random_state).permutation(n)
    acts, hvals, seen, checks = [], [[] for _ in hyps], 0, []
    # per-pixel hypotheses (masks, found on the first batch) against the activation maps of spatial units
    spatial = {layer: unit_pos[layer] for layer in layers if len(network.output_shape(layer)) == 4}
    is_mask, maps, masks = np.zeros(K, bool), {layer: [] for layer in spatial}, {}
    timings = {"forward": 0.0, "hypotheses": 0.0, "measures": 0.0}
    next_check = n if tol is None else min(-(-first_check // batch_size) * batch_size, n)   # whole batches
    bar = tqdm(total=n, desc="affinity", unit="input", disable=not progress, leave=False)
    while seen < n:
        active = [j for j in range(K) if not all(final[m][:, j].all() for m in measures)]
        if not active:
            break
        active = sorted(set(active) | set(np.flatnonzero(is_mask)))   # masks: every input streamed
        rows = order[seen:min(seen + batch_size, next_check)]
        xb = x[rows]
        t = time.perf_counter()
        probs, taps = network.forward(xb, layers) if forward is None else forward(rows, layers)   # every layer any group needs
        timings["forward"] += time.perf_counter() - t
        block = np.empty((len(rows), U), np.float64)
        for layer, values in zip(layers, taps):
            cols, neurons = unit_pos[layer]
            block[:, cols] = values[:, neurons]
        acts.append(block)
        yb = y[rows] if y is not None else (probs[:, 0] if network.task == "regression" else probs.argmax(axis=1))
        t = time.perf_counter()
        for j in active:                                 # each hypothesis once per batch, for every group
            value = evaluate(hyps[j], xb, yb, masks=True)
            if value.ndim == 3:                          # a mask: its area share stands in for the unit measures
                is_mask[j] = True
                for layer in spatial:
                    masks.setdefault((layer, j), []).append(
                        resize_mask(value, network.output_shape(layer)[1:3]).astype(np.float32))
                value = value.mean(axis=(1, 2))
            hvals[j].append(value)
        timings["hypotheses"] += time.perf_counter() - t
        if spatial and is_mask.any():                    # the maps themselves (a second pass, masks only)
            t = time.perf_counter()
            for layer, out in zip(spatial, network.feature_maps(tuple(spatial))(xb)):
                maps[layer].append(out[..., unit_pos[layer][1]])
            timings["forward"] += time.perf_counter() - t
        seen += len(rows)
        bar.update(len(rows))
        if seen < next_check:
            continue
        t = time.perf_counter()
        last = seen >= n
        a_all = np.concatenate(acts)
        h_all = {j: np.concatenate(hvals[j]) for j in active}
        with threadpool_limits(1, user_api="blas"):   # small matrices: BLAS threads only wait on each other
            _check(measures, a_all, h_all, group_cols, scores, widths, used, final, due, baselines, binary, tol,
                   last, random_state, timings, n)
        checks.append(seen)
        timings["measures"] += time.perf_counter() - t
        next_check = _next_check(seen, n, measures, final, due, tol, batch_size)
    bar.close()
    notes = []
    if y is None:
        notes.append("the inputs have no labels: the hypotheses were given the model's predictions as y")
    late = {m: int((used[m] == n).sum()) for m in measures} if tol is not None else {}
    if any(late.values()):
        notes.append(f"not within +-{tol} before the end of the inputs, so computed on all {n}: "
                     + ", ".join(f"{k} of {used[m].size} {TITLES[m]}" for m, k in late.items() if k) + " scores")
    undefined = [hyps[j].name for j in range(K) if not is_mask[j]
                 and any(np.isnan(scores[m][:, j]).all() for m in measures)]
    if undefined:
        notes.append(f"constant on the inputs (no score): {', '.join(undefined)}")
    if spatial and is_mask.any():
        t = time.perf_counter()
        for m in MASK_MEASURES:
            scores[m], widths[m], used[m] = np.full((U, K), np.nan), np.full((U, K), np.nan), np.zeros((U, K), np.int64)
        _mask_scores(spatial, maps, masks, scores, used, seen)
        measures = measures + MASK_MEASURES
        timings["measures"] += time.perf_counter() - t
        notes.append(f"masks ({', '.join(hyps[j].name for j in np.flatnonzero(is_mask))}) scored pixel by pixel on "
                     f"the {seen} inputs streamed; their area share stands in for them in the other measures")
    channels = {layer for layer in layers if len(network.output_shape(layer)) > 2}
    return AffinityResult(units=unit_list, groups=groups, hypotheses=hyps, measures=measures, scores=scores,
                          half_widths=widths, n_used=used, baselines=baselines, binary=binary, n_inputs=n,
                          n_seen=seen, tol=tol, y_source="labels" if y is not None else "predictions",
                          seconds=time.perf_counter() - start, timings=timings, checks=checks, channels=channels,
                          notes=notes)


def _mask_scores(spatial, maps, masks, scores, used, n):
    """Per spatial unit and mask: Pearson over every pixel of every input between the unit's activation map
    and the mask resized to the map (area averages), and NetDissect's IoU of the unit's region (its top
    IOU_TOP of values over all pixels and inputs) with the mask (resized, above one half)."""
    for layer, (cols, _) in spatial.items():
        stack = np.concatenate(maps[layer])                              # (n, h, w, units of the layer) float32
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


def _groups(network, analysis, units) -> list[UnitGroup]:
    groups = []
    if analysis is not None:
        groups.append(UnitGroup(f"important neurons of {analysis.layer}", analysis.layer,
                                tuple(int(i) for i in analysis.neurons)))
    if isinstance(units, str):
        groups += parse_units(units, network)
    elif units is not None:
        groups += list(units)
    if not groups:
        layer = network.default_layer()
        groups.append(UnitGroup(f"{layer} (all {network.neuron_count(layer)})", layer,
                                tuple(range(network.neuron_count(layer)))))
    return groups


def _hypotheses(hypotheses, network, x) -> list[Hypothesis]:
    if hypotheses is None:
        channels = x.shape[-1] if x.ndim == 4 else 1
        return builtin_hypotheses(task=network.task, n_classes=network.n_classes if network.task != "regression"
                                  else 0, channels=channels)
    if isinstance(hypotheses, dict):
        hypotheses = [Hypothesis(k, f) for k, f in hypotheses.items()]
    out = []
    for h in hypotheses:
        if isinstance(h, Hypothesis):
            out.append(h)
        elif callable(h):
            name = getattr(h, "__name__", f"hypothesis_{len(out)}")
            out.append(Hypothesis(name, h, describe_function(h, name)))
        else:
            raise ParameterError(f"a hypothesis must be a function f(x, y) or a Hypothesis; got {type(h).__name__}")
    names = [h.name for h in out]
    if not out or len(set(names)) != len(names):
        raise ParameterError("no hypotheses given" if not out else
                             f"two hypotheses are named {next(n for n in names if names.count(n) > 1)!r}; "
                             "names must be distinct")
    return out


def _check(measures, a, h_all, group_cols, scores, widths, used, final, due, baselines, binary, tol, last,
           random_state, timings, n_total=None):
    """Score the cells due at this check (every open one at the end) on the inputs so far; cells within tol (or
    all, at the end) become final, the others are due again where their interval predicts convergence."""
    n = len(a)
    clock = time.perf_counter()

    def lap(m):
        nonlocal clock
        now = time.perf_counter()
        timings[f"measure {m}"] = timings.get(f"measure {m}", 0.0) + now - clock
        clock = now

    def todo_of(m):
        return ~final[m] & ((due[m] <= n) | last)

    def record(m, where, s, w):
        scores[m][where], widths[m][where], used[m][where] = s, w, n
        w = np.asarray(w, np.float64)
        final[m][where] = True if last or tol is None else (w <= tol)
        # due again where the interval, narrowing as 1/sqrt(n), should be within tol (10 % beyond), and at twice
        # the inputs at most: an interval from few folds or parts is itself noisy, so it is measured again
        need = np.where(np.isfinite(w), np.ceil(n * (np.nan_to_num(w, posinf=0.0) / (tol or 1.0)) ** 2 * 1.1), 2 * n)
        due[m][where] = np.clip(need, n + 1, 2 * n)

    for j, h in h_all.items():
        binary[j] = _is_binary(h)
    js = list(h_all)
    for m in ("pearson", "spearman"):
        if m not in measures:
            continue
        todo = todo_of(m)
        open_js = [j for j in js if todo[:, j].any()]
        if open_js:
            s, w = (pearson if m == "pearson" else spearman)(a, np.stack([h_all[j] for j in open_js], axis=1))
            for c, j in enumerate(open_js):
                rows = np.flatnonzero(todo[:, j])
                record(m, (rows, j), s[rows, c], w[rows, c])
        lap(m)
    if "mi" in measures:
        todo = todo_of("mi")
        for j in js:
            rows = np.flatnonzero(todo[:, j])
            if len(rows):
                s, w = mutual_information(a[:, rows], h_all[j], random_state=random_state)
                w, mi_due = mi_half_width(s, w, scores["mi"][rows, j], used["mi"][rows, j], n, n_total or n,
                                          final=last or tol is None, tol=tol)
                record("mi", (rows, j), s, w)
                due["mi"][rows, j] = mi_due
        lap("mi")
    if "linear" in measures:
        todo = todo_of("linear")
        for j in js:
            for g, cols in enumerate(group_cols):
                if todo[g, j]:
                    s, w, base = linear_fit(a[:, cols], h_all[j], random_state=random_state)
                    baselines[g, j] = base
                    record("linear", (g, j), s, w)
        lap("linear")


def _next_check(seen, n, measures, final, due, tol, batch_size) -> int:
    """The first input count at which an open score is due, between 1.25 and 2 times the inputs so far (so the
    checks' cost stays within twice that of the last one, and scores that converge early stop early even when
    another needs every input), in whole batches, the end at most."""
    if tol is None or seen >= n:
        return n
    open_due = np.concatenate([due[m][~final[m]] for m in measures])
    need = float(open_due.min()) if len(open_due) else n
    need = min(max(math.ceil(need), math.ceil(1.25 * seen)), 2 * seen)
    return int(min(n, -(-need // batch_size) * batch_size))   # whole batches: one traced shape for the model


# ---- report ----------------------------------------------------------------------------------------------

def write_report(result: AffinityResult, folder) -> Path:
    """``affinity.csv`` (every score), ``affinity.json``, one heatmap per measure and ``report.md`` /
    ``report.html`` (the heatmaps inlined) into ``folder``; returns the report.md path."""
    from .files import atomic_text
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rows = result.rows()
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    atomic_text(folder / "affinity.csv", buffer.getvalue())
    atomic_text(folder / "affinity.json", json.dumps(result.to_dict(), indent=2) + "\n")
    lines = ["# Affinity of hidden units with hypotheses (DeepBase)", "",
             f"- inputs: {result.n_seen} of {result.n_inputs} streamed in a random order; hypotheses got the "
             f"{result.y_source} as y",
             f"- early stopping: " + (f"a score is final once its 95 % interval is within +-{result.tol}; checks at "
                                      f"{', '.join(map(str, result.checks))} inputs" if result.tol else "off (every "
                                      "score on all inputs)"),
             f"- time: {result.seconds:.1f} s (forward {result.timings.get('forward', 0):.1f} s, hypotheses "
             f"{result.timings.get('hypotheses', 0):.1f} s, measures {result.timings.get('measures', 0):.1f} s)"]
    lines += [f"- note: {n}" for n in result.notes]
    lines += ["", "## Top hypotheses per unit", ""] + [f"- {line}" for line in result.describe(k=3)]
    for m in result.measures:
        path = folder / f"heatmap_{m}.png"
        result.plot(path, m)
        owners = ([f"{l}:{n}" for l, n in result.units] if m != "linear" else [g.name for g in result.groups])
        lines += ["", f"## {TITLES[m].capitalize()}", "", f"![{TITLES[m]}]({path.name})", "",
                  "| hypothesis | " + " | ".join(owners) + " |", "|---|" + "---|" * len(owners)]
        lines += [f"| {h.name} | " + " | ".join(_fmt(v) for v in result.scores[m][:, j]) + " |"
                  for j, h in enumerate(result.hypotheses)]
    md = "\n".join(lines) + "\n"
    atomic_text(folder / "report.md", md)
    atomic_text(folder / "report.html", to_html(md, folder, title="idcgen affinity"))
    return folder / "report.md"
