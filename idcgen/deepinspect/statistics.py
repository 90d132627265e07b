"""DeepInspect's statistics (Tian et al., ICSE 2020): NAPV, NAPVD, the cut-offs, avg_bias, type-1
confusion and their evaluation against the labels; numpy functions on arrays (docs/design.md, "Confusion and
bias (DeepInspect)")."""

from __future__ import annotations

import math

import numpy as np

#: How activations become "active" (docs/design.md, "Confusion and bias (DeepInspect)"):
#: "neuron" min-max scales each neuron over the input set (default), "layer" each layer over the input set,
#: "input" each layer within each input (DeepXplore's neuron coverage).
SCALINGS = ("neuron", "layer", "input")
#: The share of pairs the "top 1 %" cut-off keeps (at least one pair).
TOP_SHARE = 0.01


def napv_from_counts(active: np.ndarray, per_class: np.ndarray) -> np.ndarray:
    """(neurons, classes) P(neuron active | predicted class) from (classes, neurons) counts of active
    inputs and (classes,) inputs per class; NaN columns for classes with no input."""
    active, per_class = np.asarray(active, np.float64), np.asarray(per_class, np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = active / per_class[:, None]
    rho[per_class == 0] = np.nan
    return rho.T


def napvd(rho: np.ndarray) -> np.ndarray:
    """(classes, classes) Euclidean distances between the columns of the NAPV matrix ``rho`` (neurons,
    classes); NaN where either class has no inputs."""
    rho = np.asarray(rho, np.float64)
    diff = rho[:, :, None] - rho[:, None, :]
    return np.sqrt(np.einsum("nab,nab->ab", diff, diff))


def class_pairs(n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """The class pairs (a < b) as two index arrays, in ``np.triu_indices`` order: the order of every per-pair
    column."""
    return np.triu_indices(n_classes, k=1)


def top_count(n_pairs: int, share: float = TOP_SHARE) -> int:
    """How many pairs the top-share cut-off keeps: ceil(share x pairs), at least one."""
    return max(1, math.ceil(share * n_pairs)) if n_pairs else 0


def cutoffs(scores: np.ndarray, *, low: bool, share: float = TOP_SHARE) -> dict[str, np.ndarray]:
    """DeepInspect's two cut-offs over the pairs' ``scores`` (NaN = undefined, never selected).

    ``low=True`` (NAPVD: small means confused): "std" keeps scores below mean - 1 std, "top" the lowest
    ``share`` of the defined pairs; ``low=False`` (avg_bias): above mean + 1 std, and the highest share.
    Mean and (population) standard deviation are over the defined pairs. Returns two boolean masks.
    """
    scores = np.asarray(scores, np.float64)
    ok = np.isfinite(scores)
    std_mask, top_mask = np.zeros(len(scores), bool), np.zeros(len(scores), bool)
    if ok.any():
        values = scores[ok]
        mean, std = values.mean(), values.std()
        with np.errstate(invalid="ignore"):
            std_mask = ok & ((scores < mean - std) if low else (scores > mean + std))
        order = np.flatnonzero(ok)[np.argsort(values if low else -values, kind="stable")]
        top_mask[order[: top_count(int(ok.sum()), share)]] = True
    return {"std": std_mask, "top": top_mask}


def avg_bias(distances: np.ndarray) -> tuple[np.ndarray, float]:
    """(classes, classes) avg_bias(a, b) and the triplet threshold ``th``, from NAPVD ``distances``.

    bias(a, b, c) = |D(c, a) - D(c, b)| / (D(c, a) + D(c, b)); avg_bias(a, b) is its mean over the
    classes c other than a and b, skipping triplets where both D(c, a) and D(c, b) exceed ``th`` (mean -
    1 std of all pair distances): c must be close to a or b for the difference to say something. NaN
    where no triplet is left (or a class has no inputs). 0/0 (c at distance 0 from both) counts as 0.
    """
    d = np.asarray(distances, np.float64)
    k = len(d)
    ia, ib = class_pairs(k)
    values = d[ia, ib][np.isfinite(d[ia, ib])]
    th = float(values.mean() - values.std()) if len(values) else float("nan")
    out = np.full((k, k), np.nan)
    for a, b in zip(ia, ib):
        dca, dcb = d[:, a], d[:, b]
        keep = np.isfinite(dca) & np.isfinite(dcb) & ~((dca > th) & (dcb > th))
        keep[[a, b]] = False
        if keep.any():
            num, den = np.abs(dca[keep] - dcb[keep]), dca[keep] + dcb[keep]
            out[a, b] = out[b, a] = float(np.mean(np.divide(num, den, out=np.zeros_like(num), where=den > 0)))
    return out, th


def confusion_matrix(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int) -> np.ndarray:
    """(classes, classes) counts: row = true class, column = predicted class."""
    return np.bincount(np.asarray(y_true) * n_classes + np.asarray(y_pred), minlength=n_classes**2).reshape(
        n_classes, n_classes
    )


def type1_confusion(matrix: np.ndarray) -> np.ndarray:
    """(classes, classes) type1conf(a, b) = mean(P(pred b | true a), P(pred a | true b)) from a confusion
    matrix; NaN where a class has no labelled input. The diagonal is left at NaN."""
    m = np.asarray(matrix, np.float64)
    totals = m.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = m / totals
    p[totals[:, 0] == 0] = np.nan
    out = (p + p.T) / 2
    np.fill_diagonal(out, np.nan)
    return out


def avg_confusion_difference(conf: np.ndarray) -> np.ndarray:
    """(classes, classes) avg_cd(a, b): the mean over c other than a, b of |type1conf(a, c) - type1conf(b, c)|
    (the ground truth of bias); classes c without labelled inputs are left out."""
    t = np.asarray(conf, np.float64)
    k = len(t)
    out = np.full((k, k), np.nan)
    for a, b in zip(*class_pairs(k)):
        others = np.ones(k, bool)
        others[[a, b]] = False
        cd = np.abs(t[a, others] - t[b, others])
        cd = cd[np.isfinite(cd)]
        if len(cd):
            out[a, b] = out[b, a] = float(cd.mean())
    return out


def ground_truth(scores: np.ndarray) -> np.ndarray:
    """The pairs whose ground-truth score (type1conf or avg_cd) is above mean + 1 std of the defined ones."""
    return cutoffs(scores, low=False)["std"]


def precision_recall(predicted: np.ndarray, actual: np.ndarray) -> tuple[float, float, int]:
    """(precision |A n E| / |E|, recall |A n E| / |A|, |A n E|) of predicted pairs E against actual pairs A;
    NaN where the denominator is 0."""
    predicted, actual = np.asarray(predicted, bool), np.asarray(actual, bool)
    hit = int((predicted & actual).sum())
    precision = hit / predicted.sum() if predicted.any() else float("nan")
    recall = hit / actual.sum() if actual.any() else float("nan")
    return float(precision), float(recall), hit


def aucec(scores: np.ndarray, actual: np.ndarray, *, low: bool) -> dict:
    """Cost-effectiveness of inspecting pairs in score order: the area under (share of pairs inspected,
    share of actual errors found), with (0, 0) as the first point and the trapezoid rule; undefined scores go
    last. Random order has expected area 0.5; ``gain`` = area / 0.5 - 1 (0 = no better than random), and
    ``optimal`` is the area of the perfect order."""
    scores, actual = np.asarray(scores, np.float64), np.asarray(actual, bool)
    n, found = len(scores), int(actual.sum())
    if n == 0 or found == 0:
        return {"aucec": float("nan"), "random": 0.5, "optimal": float("nan"), "gain": float("nan")}
    key = np.where(np.isfinite(scores), scores if low else -scores, np.inf)
    order = np.argsort(key, kind="stable")

    def area(hits):
        y = np.concatenate([[0.0], np.cumsum(hits) / found])
        return float(np.sum((y[1:] + y[:-1]) / 2) / n)

    value = area(actual[order])
    return {"aucec": value, "random": 0.5, "optimal": area(np.sort(actual)[::-1]), "gain": value / 0.5 - 1}


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation over the pairs where both are defined (scipy.stats.spearmanr); NaN for
    fewer than 3 pairs or a constant side."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3 or np.ptp(a[ok]) == 0 or np.ptp(b[ok]) == 0:
        return float("nan")
    from scipy.stats import spearmanr

    return float(spearmanr(a[ok], b[ok]).statistic)


def evaluate(rho: np.ndarray, conf: np.ndarray | None = None) -> tuple[dict, dict]:
    """Per-pair columns and summary figures from a NAPV matrix (and, with labels, the type1conf matrix).

    Returns (columns: name -> (pairs,) array, in ``np.triu_indices`` order; metrics: a JSON-ready dict).
    """
    k = rho.shape[1]
    ia, ib = class_pairs(k)
    d = napvd(rho)
    bias, th = avg_bias(d)
    cols = {"napvd": d[ia, ib], "avg_bias": bias[ia, ib]}
    conf_cut, bias_cut = cutoffs(cols["napvd"], low=True), cutoffs(cols["avg_bias"], low=False)
    cols.update(
        confusion_std=conf_cut["std"], confusion_top=conf_cut["top"], bias_std=bias_cut["std"], bias_top=bias_cut["top"]
    )
    defined = np.isfinite(cols["napvd"])
    metrics = {
        "neurons": int(rho.shape[0]),
        "pairs": int(defined.sum()),
        "top_pairs": top_count(int(defined.sum())),
        "napvd_mean": json_number(np.nanmean(cols["napvd"]) if defined.any() else np.nan),
        "napvd_std": json_number(np.nanstd(cols["napvd"]) if defined.any() else np.nan),
        "bias_threshold": json_number(th),
        "predicted": {
            "confusion_std": int(conf_cut["std"].sum()),
            "confusion_top": int(conf_cut["top"].sum()),
            "bias_std": int(bias_cut["std"].sum()),
            "bias_top": int(bias_cut["top"].sum()),
        },
    }
    if conf is not None:
        cd = avg_confusion_difference(conf)
        cols.update(type1conf=conf[ia, ib], avg_cd=cd[ia, ib])
        cols["confused"], cols["biased"] = ground_truth(cols["type1conf"]), ground_truth(cols["avg_cd"])
        for what, score, truth, low, cut in (
            ("confusion", "napvd", "confused", True, conf_cut),
            ("bias", "avg_bias", "biased", False, bias_cut),
        ):
            out = {"actual": int(cols[truth].sum())}
            for name, mask in cut.items():
                p, r, hit = precision_recall(mask, cols[truth])
                out[name] = {
                    "predicted": int(mask.sum()),
                    "hits": hit,
                    "precision": json_number(p),
                    "recall": json_number(r),
                }
            against = "type1conf" if what == "confusion" else "avg_cd"
            out["spearman"] = json_number(spearman(cols[score], cols[against]))
            out.update({k2: json_number(v) for k2, v in aucec(cols[score], cols[truth], low=low).items()})
            metrics[what] = out
    return cols, metrics


def json_number(value) -> float | None:
    """A float for JSON: None for NaN."""
    value = float(value)
    return None if not math.isfinite(value) else value
