"""DeepInspect (Tian et al., ICSE 2020): which class pairs a classifier confuses, and which it treats with
bias, from per-class neuron activation probabilities alone (docs/design.md, "Confusion and bias
(DeepInspect)").

    result = idcgen.inspect(model, x, y)          # y optional: without labels, predictions only
    result.top(5)                                 # the five pairs with the smallest NAPVD
    result.metrics["all"]["confusion"]            # precision, recall, Spearman, AUCEC (with labels)
    result.write_csv("pairs.csv"); result.plot("folder")

The numpy core (``napv_from_counts``, ``napvd``, ``cutoffs``, ``avg_bias``, ``type1_confusion``, ...)
works on arrays; only :func:`inspect` runs a model, through :class:`idcgen.framework.Network` (imported
when called, so importing this module does not load TensorFlow).
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

from .checks import check_choice, check_int, check_real
from .errors import InputError, ParameterError
from .markdown import to_html

__all__ = ["inspect", "InspectResult", "napv_from_counts", "napvd", "cutoffs", "avg_bias", "type1_confusion",
           "avg_confusion_difference", "ground_truth", "precision_recall", "aucec", "spearman", "SCALINGS"]

#: How activations become "active" (docs/design.md, "Confusion and bias (DeepInspect)"):
#: "neuron" min-max scales each neuron over the input set (default), "layer" each layer over the input set,
#: "input" each layer within each input (DeepXplore's neuron coverage).
SCALINGS = ("neuron", "layer", "input")
#: The share of pairs the "top 1 %" cut-off keeps (at least one pair).
TOP_SHARE = 0.01
#: Bytes of (inputs x neurons) float32 activations kept in memory for a one-pass run; above it, two passes.
MEMORY_BUDGET = 256 * 2**20


# ---- the numpy core ------------------------------------------------------------------------------------
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


def _pairs(n_classes: int) -> tuple[np.ndarray, np.ndarray]:
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
        top_mask[order[:top_count(int(ok.sum()), share)]] = True
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
    ia, ib = _pairs(k)
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
    return np.bincount(np.asarray(y_true) * n_classes + np.asarray(y_pred), minlength=n_classes ** 2
                       ).reshape(n_classes, n_classes)


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
    for a, b in zip(*_pairs(k)):
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
    ia, ib = _pairs(k)
    d = napvd(rho)
    bias, th = avg_bias(d)
    cols = {"napvd": d[ia, ib], "avg_bias": bias[ia, ib]}
    conf_cut, bias_cut = cutoffs(cols["napvd"], low=True), cutoffs(cols["avg_bias"], low=False)
    cols.update(confusion_std=conf_cut["std"], confusion_top=conf_cut["top"],
                bias_std=bias_cut["std"], bias_top=bias_cut["top"])
    defined = np.isfinite(cols["napvd"])
    metrics = {"neurons": int(rho.shape[0]), "pairs": int(defined.sum()), "top_pairs": top_count(int(defined.sum())),
               "napvd_mean": _num(np.nanmean(cols["napvd"]) if defined.any() else np.nan),
               "napvd_std": _num(np.nanstd(cols["napvd"]) if defined.any() else np.nan), "bias_threshold": _num(th),
               "predicted": {"confusion_std": int(conf_cut["std"].sum()), "confusion_top": int(conf_cut["top"].sum()),
                             "bias_std": int(bias_cut["std"].sum()), "bias_top": int(bias_cut["top"].sum())}}
    if conf is not None:
        cd = avg_confusion_difference(conf)
        cols.update(type1conf=conf[ia, ib], avg_cd=cd[ia, ib])
        cols["confused"], cols["biased"] = ground_truth(cols["type1conf"]), ground_truth(cols["avg_cd"])
        for what, score, truth, low, cut in (("confusion", "napvd", "confused", True, conf_cut),
                                             ("bias", "avg_bias", "biased", False, bias_cut)):
            out = {"actual": int(cols[truth].sum())}
            for name, mask in cut.items():
                p, r, hit = precision_recall(mask, cols[truth])
                out[name] = {"predicted": int(mask.sum()), "hits": hit, "precision": _num(p), "recall": _num(r)}
            against = "type1conf" if what == "confusion" else "avg_cd"
            out["spearman"] = _num(spearman(cols[score], cols[against]))
            out.update({k2: _num(v) for k2, v in aucec(cols[score], cols[truth], low=low).items()})
            metrics[what] = out
    return cols, metrics


def _num(value) -> float | None:
    """A float for JSON: None for NaN."""
    value = float(value)
    return None if not math.isfinite(value) else value


# ---- the streaming pass ----------------------------------------------------------------------------------
@dataclass
class _Counts:
    """What the pass folds each batch into."""

    n_classes: int
    widths: tuple
    low: np.ndarray = None        # (neurons,) running min / max of each neuron
    high: np.ndarray = None
    active: np.ndarray = None     # (classes, neurons) active counts (scaling "input": filled as it goes)
    per_class: np.ndarray = None  # (classes,) inputs predicted each class
    predictions: list = field(default_factory=list)
    runner_up: list = field(default_factory=list)
    second: list = field(default_factory=list)      # the runner-up's probability

    def __post_init__(self):
        n = int(sum(self.widths))
        self.low, self.high = np.full(n, np.inf), np.full(n, -np.inf)
        self.active = np.zeros((self.n_classes, n), np.int64)
        self.per_class = np.zeros(self.n_classes, np.int64)


def _count_active(counts: np.ndarray, pred: np.ndarray, active: np.ndarray) -> None:
    """counts[c] += the active rows predicted c: one (classes x batch) @ (batch x neurons) product (exact:
    a batch holds far fewer than 2^24 inputs)."""
    onehot = np.zeros((counts.shape[0], len(pred)), np.float32)
    onehot[pred, np.arange(len(pred))] = 1.0
    counts += np.rint(onehot @ active.astype(np.float32)).astype(np.int64)


def _scale_rows_per_layer(a: np.ndarray, widths) -> np.ndarray:
    """Each layer of each row min-max scaled to [0, 1] within the row (a constant row gives 0)."""
    out = np.empty_like(a)
    start = 0
    for w in widths:
        part = a[:, start:start + w]
        lo, hi = part.min(axis=1, keepdims=True), part.max(axis=1, keepdims=True)
        span = hi - lo
        out[:, start:start + w] = np.divide(part - lo, span, out=np.zeros_like(part), where=span > 0)
        start += w
    return out


def _thresholds(low: np.ndarray, high: np.ndarray, widths, threshold: float, scaling: str) -> np.ndarray:
    """The raw value above which each neuron is active: min + threshold x (max - min), per neuron or per
    layer; +inf for a constant neuron (never active)."""
    low, high = low.copy(), high.copy()
    if scaling == "layer":
        start = 0
        for w in widths:
            low[start:start + w], high[start:start + w] = low[start:start + w].min(), high[start:start + w].max()
            start += w
    return np.where(high > low, low + threshold * (high - low), np.inf)


def _check_layers_vary(low, high, widths, names) -> int:
    """InputError for a layer whose every neuron is constant over the inputs; returns the constant neurons."""
    start = 0
    for w, name in zip(widths, names):
        if not np.any(high[start:start + w] > low[start:start + w]):
            raise InputError(f"layer {name!r} gives the same activations for every input (all {w} neurons "
                             "constant), so no neuron can be active on some classes and not others; leave it out "
                             "of layers, or check the inputs (are they all alike?)")
        start += w
    return int(np.sum(high <= low))


def _first_pass(network, x, taps, widths, state: _Counts, *, threshold: float, scaling: str, batch: int,
                keep: bool, bar=None):
    """The forward pass that folds each batch into ``state``: predictions, runner-up, each neuron's min and
    max, and (scaling "input") the active counts. Returns the (inputs x neurons) activations if ``keep``."""
    store = np.empty((len(x), int(sum(widths))), np.float32) if keep else None
    k = state.n_classes
    for start in range(0, len(x), batch):
        probs, acts = network.forward(x[start:start + batch], taps)
        a = np.concatenate(acts, axis=1) if len(acts) > 1 else acts[0]
        top2 = np.argsort(-probs, axis=1, kind="stable")[:, :2]   # ties: the lower class, in both passes
        pred = top2[:, 0]
        state.predictions.append(pred)
        state.runner_up.append(top2[:, 1] if k > 1 else top2[:, 0])
        state.second.append(np.take_along_axis(probs, top2[:, -1:], axis=1)[:, 0])
        np.minimum(state.low, a.min(axis=0), out=state.low)
        np.maximum(state.high, a.max(axis=0), out=state.high)
        if scaling == "input":
            _count_active(state.active, pred, _scale_rows_per_layer(a, widths) > threshold)
        elif store is not None:
            store[start:start + len(a)] = a
        if bar is not None:
            bar.update(len(a))
    return store


def _count_pass(network, x, taps, state: _Counts, limits: np.ndarray, *, batch: int, store=None, bar=None):
    """Adds to ``state.active`` the inputs on which each neuron is above its limit, per predicted class: from
    the activations the first pass kept, else a second forward pass."""
    if store is not None:
        predictions = np.concatenate(state.predictions)
        for start in range(0, len(x), 4096):
            rows = slice(start, start + 4096)
            _count_active(state.active, predictions[rows], store[rows] > limits)
        return
    for start in range(0, len(x), batch):
        probs, acts = network.forward(x[start:start + batch], taps)
        a = np.concatenate(acts, axis=1) if len(acts) > 1 else acts[0]
        _count_active(state.active, np.argsort(-probs, axis=1, kind="stable")[:, 0], a > limits)
        if bar is not None:
            bar.update(len(a))


def _count_locally(network, x, taps, widths, state: _Counts, *, threshold: float, scaling: str, batch: int,
                   memory_budget: int, progress: bool) -> int:
    """The pass (or two) over ``x`` in this process; returns the number of forward passes."""
    from tqdm.auto import tqdm
    one_pass = scaling == "input" or len(x) * int(sum(widths)) * 4 <= memory_budget
    passes = 1 if one_pass else 2
    with tqdm(total=len(x) * passes, desc="inspect", unit="input", disable=not progress, leave=False) as bar:
        store = _first_pass(network, x, taps, widths, state, threshold=threshold, scaling=scaling, batch=batch,
                            keep=one_pass and scaling != "input", bar=bar)
        if scaling != "input":
            _count_pass(network, x, taps, state, _thresholds(state.low, state.high, widths, threshold, scaling),
                        batch=batch, store=store, bar=bar)
    return passes


def inspect(model, x, y=None, *, layers=None, threshold: float = 0.5, scaling: str = "neuron", analysis=None,
            batch_size: int | None = None, memory_budget: int = MEMORY_BUDGET, progress: bool = False,
            class_names=None, counting=None) -> "InspectResult":
    """DeepInspect on ``model`` over the inputs ``x`` (labels ``y`` optional): NAPV, NAPVD, confusion and
    bias predictions at both cut-offs and, with labels, their precision, recall, Spearman and AUCEC.

    Parameters
    ----------
    model : Network or keras.Model (a classifier).
    x : array (n, *input_shape) or Dataset, scaled as the model expects.
    y : optional (n,) int labels: the ground truth (type-1 confusion) and its evaluation.
    layers : layer names; default every hidden layer a neuron criterion uses (the weighted layers before
        the logits, the ReLU output where an activation layer follows). Conv neurons are channels, their
        activation the spatial mean, as everywhere in idcgen.
    threshold : in [0, 1): a neuron is active on an input when its scaled activation is above it.
    scaling : "neuron" (min-max over the inputs, per neuron), "layer" (over the inputs, per layer) or
        "input" (per layer within each input, as DeepXplore's NC).
    analysis : an :class:`idcgen.Analysis`: the same figures restricted to its important neurons, beside
        those of all neurons ("important" in ``metrics``).
    memory_budget : bytes of (inputs x neurons) float32 activations kept for one pass; larger input sets
        take a second pass (the first finds each neuron's min and max).
    counting : what runs the passes (default: this process); ``idcgen.distributed`` maps them on Ray
        workers and sums their counts (docs/design.md, "Scale-out on Ray").
    """
    from .criteria.base import as_network, check_layer_names, default_neuron_layers
    from .data import Dataset, check_labels, fit_to_model
    started = time.perf_counter()
    threshold = check_real("threshold", threshold, 0.0, 1.0, closed="left")
    scaling = check_choice("scaling", scaling, SCALINGS)
    check_int("memory_budget", memory_budget, 0)
    network = as_network(model)
    if network.task != "classification":
        raise ParameterError("inspect compares classes and needs a classifier; this model is a regression model "
                             "(one output unit)")
    batch = network.batch_size if batch_size is None else check_int("batch_size", batch_size, 1)
    if layers is not None:
        layers = [layers] if isinstance(layers, str) else list(layers)
        check_layer_names("inspect", layers)
    names = tuple(network.step(n).name for n in (default_neuron_layers(network) if layers is None else layers))
    for name in names:
        if not network.is_hidden(name):
            network.check_subject_layer(name)   # LayerError naming the hidden layers
    class_names = tuple(class_names) if class_names is not None else \
        (tuple(x.class_names) if isinstance(x, Dataset) and getattr(x, "class_names", None) else None)
    if isinstance(x, Dataset):
        y = x.y if y is None else y
    if getattr(x, "read_by_workers", False):   # shards Ray workers read and hold (idcgen.distributed.shards)
        labels = x.load()
        y = labels if y is None else y
    else:
        x = fit_to_model(x, network.input_shape)
    if len(x) == 0:
        raise InputError("no inputs to inspect")
    k = network.n_classes
    if y is not None:
        y = check_labels(x, y)
        if y.min() < 0 or y.max() >= k:
            raise InputError(f"labels must be classes 0..{k - 1} of the model; got {int(y.min())}..{int(y.max())}")
    taps = names
    important = None
    if analysis is not None:
        analysis.bind(network)   # AnalysisMismatchError for an analysis of another model
        if analysis.layer not in names:
            taps = names + (analysis.layer,)
        important = (analysis.layer, np.asarray(analysis.neurons, np.int64))
    widths = tuple(network.neuron_count(n) for n in taps)
    kept_widths = widths[:len(names)]
    state = _Counts(k, widths)
    passes = (counting or _count_locally)(network, x, taps, widths, state, threshold=threshold, scaling=scaling,
                                          batch=batch, memory_budget=memory_budget, progress=progress)
    predictions, runner_up = np.concatenate(state.predictions), np.concatenate(state.runner_up)
    state.per_class = np.bincount(predictions, minlength=k)
    if len(k_present := np.flatnonzero(state.per_class > 0)) < 2:
        raise InputError(f"the model predicts only class {k_present.tolist()} on these {len(x)} inputs; "
                         "comparing classes needs inputs predicted as at least two (give more or varied inputs)")
    constant = _check_layers_vary(state.low[:sum(kept_widths)], state.high[:sum(kept_widths)], kept_widths, names)
    rho_all = napv_from_counts(state.active, state.per_class)
    notes = []
    empty = np.flatnonzero(state.per_class == 0)
    if len(empty):
        notes.append(f"no input is predicted as class {', '.join(map(str, empty))}: NAPVD and avg_bias of "
                     f"{'its' if len(empty) == 1 else 'their'} pairs are undefined (NaN, left out of the cut-offs)")
    if constant:
        notes.append(f"{constant} of {sum(kept_widths)} neurons are constant over the inputs (never active)")
    conf = None
    if y is not None:
        matrix = confusion_matrix(y, predictions, k)
        conf = type1_confusion(matrix)
        missing = np.flatnonzero(matrix.sum(axis=1) == 0)
        if len(missing):
            notes.append(f"no labelled input of class {', '.join(map(str, missing))}: its type-1 confusion "
                         "is undefined (NaN)")
    columns, metrics = {}, {}
    columns["all"], metrics["all"] = evaluate(rho_all[:sum(kept_widths)], conf)
    if important is not None:
        offset = int(sum(widths[:taps.index(important[0])]))
        rows = offset + important[1]
        columns["important"], metrics["important"] = evaluate(rho_all[rows], conf)
        if analysis.layer not in names:
            notes.append(f"the analysis' layer {analysis.layer!r} is not among the inspected layers: it was "
                         "tapped for the important neurons only")
    return InspectResult(
        layers=names, widths=kept_widths, threshold=threshold, scaling=scaling, n_inputs=len(x), n_classes=k,
        napv=rho_all[:sum(kept_widths)], per_class=state.per_class, columns=columns, metrics=metrics,
        predictions=predictions, runner_up=runner_up, runner_up_probability=np.concatenate(state.second), labels=y, notes=notes, passes=passes,
        seconds=time.perf_counter() - started, class_names=class_names,
        important=None if important is None else {"layer": important[0], "neurons": important[1].tolist()},
        napv_important=None if important is None else rho_all[rows])


# ---- the result ------------------------------------------------------------------------------------------
@dataclass
class InspectResult:
    """What :func:`inspect` found. ``napv`` is (neurons, classes) P(active | predicted class), neurons of
    ``layers`` in order; ``columns[view]`` the per-pair arrays of the view ("all", and "important" with an
    analysis); ``metrics[view]`` the figures; ``pairs`` the table (one dict per class pair)."""

    layers: tuple
    widths: tuple
    threshold: float
    scaling: str
    n_inputs: int
    n_classes: int
    napv: np.ndarray
    per_class: np.ndarray
    columns: dict
    metrics: dict
    predictions: np.ndarray
    runner_up: np.ndarray
    runner_up_probability: np.ndarray
    labels: np.ndarray | None = None
    notes: list = field(default_factory=list)
    passes: int = 1
    seconds: float = 0.0
    class_names: tuple | None = None
    important: dict | None = None
    napv_important: np.ndarray | None = None

    def name(self, c: int) -> str:
        return str(self.class_names[c]) if self.class_names and c < len(self.class_names) else str(c)

    @property
    def napvd(self) -> np.ndarray:
        """(classes, classes) NAPVD over all neurons."""
        return napvd(self.napv)

    @property
    def pairs(self) -> list[dict]:
        """One row per class pair (a < b), smallest NAPVD first; columns of the "important" view are
        prefixed ``important_``."""
        ia, ib = _pairs(self.n_classes)
        rows = []
        for i, (a, b) in enumerate(zip(ia.tolist(), ib.tolist())):
            row = {"a": a, "b": b}
            if self.class_names:
                row.update(a_name=self.name(a), b_name=self.name(b))
            for view, cols in self.columns.items():
                prefix = "" if view == "all" else f"{view}_"
                for key, values in cols.items():
                    if prefix and key in ("type1conf", "avg_cd", "confused", "biased"):
                        continue   # the ground truth does not depend on the neurons
                    value = values[i]
                    row[prefix + key] = bool(value) if values.dtype == bool else _num(value)
            rows.append(row)
        return sorted(rows, key=lambda r: (r["napvd"] is None, r["napvd"] if r["napvd"] is not None else 0))

    def to_frame(self) -> list[dict]:
        """The pairs table as a list of dicts (``pandas.DataFrame(result.to_frame())`` if you use pandas)."""
        return self.pairs

    def top(self, k: int = 10) -> list[dict]:
        """The ``k`` pairs with the smallest NAPVD (the likeliest confusions)."""
        return self.pairs[:check_int("k", k, 1)]

    def summary(self) -> dict:
        """Everything but the per-pair table, JSON-ready."""
        return {"inputs": self.n_inputs, "classes": self.n_classes, "layers": list(self.layers),
                "neurons": int(sum(self.widths)), "threshold": self.threshold, "scaling": self.scaling,
                "labels": self.labels is not None, "predicted_per_class": self.per_class.tolist(),
                "passes": self.passes, "seconds": round(self.seconds, 3), "important": self.important,
                "metrics": self.metrics, "notes": list(self.notes)}

    def to_dict(self) -> dict:
        return dict(self.summary(), pairs=self.pairs)

    def write_csv(self, path) -> Path:
        rows = self.pairs
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in r.items()} for r in rows)
        return _write(path, buffer.getvalue())

    def write_json(self, path) -> Path:
        return _write(path, json.dumps(self.to_dict(), indent=1) + "\n")

    def __repr__(self) -> str:
        m = self.metrics["all"]
        line = (f"InspectResult({self.n_inputs} inputs, {self.n_classes} classes, {m['neurons']} neurons of "
                f"{len(self.layers)} layers; {m['predicted']['confusion_std']} pairs predicted confused "
                f"(mean - 1 std), {m['predicted']['confusion_top']} at the top 1 %")
        if "confusion" in m:
            c = m["confusion"]
            line += f"; precision {_fmt(c['std']['precision'])}, recall {_fmt(c['std']['recall'])}, " \
                    f"Spearman {_fmt(c['spearman'])}"
        return line + ")"

    # ---- plots and report --------------------------------------------------------------------------
    def plot(self, folder=None) -> dict[str, Path]:
        """Save the NAPVD heatmap (``napvd.png``) and, with labels, the NAPVD-vs-type-1-confusion scatter
        (``scatter.png``) into ``folder`` (default the working folder); returns their paths."""
        from .plots import pyplot
        plt = pyplot()
        folder = Path(folder or ".")
        folder.mkdir(parents=True, exist_ok=True)
        paths = {}
        d = self.napvd.copy()
        np.fill_diagonal(d, np.nan)
        k = self.n_classes
        fig, ax = plt.subplots(figsize=(1.2 + 0.45 * k, 0.8 + 0.45 * k))
        im = ax.imshow(d, cmap="viridis_r")
        ticks = [self.name(c) for c in range(k)]
        ax.set_xticks(range(k), ticks, rotation=90, fontsize=7)
        ax.set_yticks(range(k), ticks, fontsize=7)
        fig.colorbar(im, ax=ax, fraction=0.046, label="NAPVD (small = likely confused)")
        ax.set_title(f"NAPVD, {sum(self.widths)} neurons", fontsize=9)
        fig.tight_layout()
        paths["heatmap"] = folder / "napvd.png"
        fig.savefig(paths["heatmap"], dpi=110)
        plt.close(fig)
        if "type1conf" in self.columns["all"]:
            views = list(self.columns)
            fig, axes = plt.subplots(1, len(views), figsize=(4.2 * len(views), 3.6), squeeze=False)
            for ax, view in zip(axes[0], views):
                cols = self.columns[view]
                truth = self.columns["all"]["confused"]
                ax.scatter(cols["napvd"][~truth], self.columns["all"]["type1conf"][~truth], s=12, c="tab:blue",
                           label="not confused")
                ax.scatter(cols["napvd"][truth], self.columns["all"]["type1conf"][truth], s=16, c="tab:red",
                           label="confused (ground truth)")
                ax.set_xlabel(f"NAPVD ({view} neurons)")
                ax.set_ylabel("type-1 confusion")
                rho = self.metrics[view]["confusion"]["spearman"]
                ax.set_title(f"{view}: Spearman {_fmt(rho)}", fontsize=9)
                ax.legend(fontsize=7)
            fig.tight_layout()
            paths["scatter"] = folder / "scatter.png"
            fig.savefig(paths["scatter"], dpi=110)
            plt.close(fig)
        return paths

    def examples(self, a: int, b: int, per_side: int = 4) -> tuple[np.ndarray, np.ndarray]:
        """Indices of inputs predicted ``a`` with ``b`` second, and of inputs predicted ``b`` with ``a``
        second, the most hesitant first (highest runner-up probability), ``per_side`` each at most."""
        out = []
        for first, second in ((a, b), (b, a)):
            idx = np.flatnonzero((self.predictions == first) & (self.runner_up == second))
            out.append(idx[np.argsort(-self.runner_up_probability[idx], kind="stable")][:per_side])
        return out[0], out[1]

    def write_report(self, folder, x=None, *, top: int = 10, title: str = "", value_range=(0.0, 1.0)) -> Path:
        """``pairs.csv``, ``inspect.json``, the plots, example images of the predicted pairs (from ``x``,
        the inputs as inspected) and ``report.md``/``report.html`` into ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.write_csv(folder / "pairs.csv")
        self.write_json(folder / "inspect.json")
        plots = self.plot(folder)
        lines = [f"# DeepInspect report{': ' + title if title else ''}", ""]
        lines += [f"- note: {n}" for n in self.notes]
        m = self.metrics["all"]
        lines += [f"- {self.n_inputs} inputs, {self.n_classes} classes; layers {', '.join(self.layers)} "
                  f"({m['neurons']} neurons); active = above {self.threshold:g} after min-max scaling per "
                  f"{self.scaling}; {self.passes} pass(es), {self.seconds:.1f} s",
                  f"- inputs predicted per class: {', '.join(f'{self.name(c)}: {n}' for c, n in enumerate(self.per_class))}",
                  f"- NAPVD mean {_fmt(m['napvd_mean'])}, std {_fmt(m['napvd_std'])}; predicted confused: "
                  f"{m['predicted']['confusion_std']} pairs below mean - 1 std, {m['predicted']['confusion_top']} "
                  f"at the top 1 %; predicted biased: {m['predicted']['bias_std']} above mean + 1 std, "
                  f"{m['predicted']['bias_top']} at the top 1 %"]
        if self.important:
            lines.append(f"- important neurons: {len(self.important['neurons'])} of layer "
                         f"`{self.important['layer']}` {self.important['neurons']}")
        if "confusion" in m:
            lines += ["", "## Against the labels", "",
                      "Ground truth: type-1 confusion and avg_cd above mean + 1 std (docs/design.md, "
                      "\"Confusion and bias (DeepInspect)\").", "",
                      "| neurons | errors | actual | precision (mean - 1 std) | recall (mean - 1 std) | "
                      "precision (top 1 %) | recall (top 1 %) | Spearman | AUCEC | gain over random |",
                      "|---|---|---|---|---|---|---|---|---|---|"]
            for view, vm in self.metrics.items():
                for what in ("confusion", "bias"):
                    e = vm[what]
                    lines.append(f"| {view} ({vm['neurons']}) | {what} | {e['actual']} | {_fmt(e['std']['precision'])} | "
                                 f"{_fmt(e['std']['recall'])} | {_fmt(e['top']['precision'])} | "
                                 f"{_fmt(e['top']['recall'])} | {_fmt(e['spearman'])} | {_fmt(e['aucec'])} | "
                                 f"{_fmt(e['gain'], pct=True)} |")
        lines += ["", f"## The {min(top, len(self.pairs))} pairs with the smallest NAPVD", "", *_pair_table(self, top),
                  "", "![NAPVD heatmap](napvd.png)"]
        if "scatter" in plots:
            lines += ["", "![NAPVD against type-1 confusion](scatter.png)"]
        if x is not None:
            shown = self._example_plot(folder, x, value_range)
            if shown:
                lines += ["", "## Examples of the predicted confusion pairs", "",
                          "Per pair: inputs predicted a with b as the runner-up (top row), and the reverse "
                          "(bottom row).", "", "![Examples](examples.png)"]
        md = "\n".join(lines) + "\n"
        _write(folder / "report.md", md)
        _write(folder / "report.html", to_html(md, folder, title="idcgen inspect"))
        return folder / "report.md"

    def _example_plot(self, folder: Path, x: np.ndarray, value_range) -> bool:
        from .plots import pyplot
        cols = self.columns["all"]
        ia, ib = _pairs(self.n_classes)
        chosen = np.flatnonzero(cols["confusion_std"] | cols["confusion_top"])
        chosen = chosen[np.argsort(cols["napvd"][chosen])][:6]
        if not len(chosen) or np.asarray(x).ndim != 4:
            return False
        plt = pyplot()
        per_side = 4
        fig, axes = plt.subplots(2 * len(chosen), per_side, figsize=(1.3 * per_side, 2.6 * len(chosen)),
                                 squeeze=False)
        lo, hi = value_range
        for row, i in enumerate(chosen):
            a, b = int(ia[i]), int(ib[i])
            for side, idx in enumerate(self.examples(a, b, per_side)):
                for col in range(per_side):
                    ax = axes[2 * row + side, col]
                    ax.axis("off")
                    if col < len(idx):
                        img = np.clip((np.asarray(x[idx[col]], np.float64) - lo) / (hi - lo), 0, 1)
                        ax.imshow(img[..., 0] if img.shape[-1] == 1 else img, cmap="gray", vmin=0, vmax=1)
                        first, second = (a, b) if side == 0 else (b, a)
                        ax.set_title(f"#{idx[col]} {self.name(first)} (2nd {self.name(second)})", fontsize=6)
        fig.tight_layout()
        fig.savefig(folder / "examples.png", dpi=100)
        plt.close(fig)
        return True


def _pair_table(result: InspectResult, top: int) -> list[str]:
    rows = result.pairs[:top]
    keys = [k for k in ("napvd", "important_napvd", "avg_bias", "type1conf") if k in rows[0]]
    flags = [k for k in ("confusion_std", "confusion_top", "confused") if k in rows[0]]
    out = ["| a | b | " + " | ".join(keys + flags) + " |", "|---" * (2 + len(keys) + len(flags)) + "|"]
    for r in rows:
        out.append(f"| {result.name(r['a'])} | {result.name(r['b'])} | " + " | ".join(_fmt(r[k]) for k in keys) +
                   (" | " if flags else "") + " | ".join("yes" if r[k] else "" for k in flags) + " |")
    return out


def _fmt(value, pct: bool = False) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{100 * value:+.0f} %" if pct else f"{value:.3g}"


def _write(path, text: str) -> Path:
    from .files import atomic_text
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_text(path, text)
    return path
