"""DeepInspect's streaming driver: the passes over the model that fold each batch into per-class counts
(one pass, or two above the memory budget), and :func:`inspect`, which runs them and evaluates the counts."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..checks import check_choice, check_int, check_real
from ..errors import InputError, ParameterError
from ..prioritization import class_probabilities
from .report import InspectResult
from .statistics import SCALINGS, confusion_matrix, evaluate, napv_from_counts, type1_confusion

#: Bytes of (inputs x neurons) float32 activations kept in memory for a one-pass run; above it, two passes.
MEMORY_BUDGET = 256 * 2**20


@dataclass
class ClassCounts:
    """What the passes fold each batch into: each neuron's range, and its active counts per predicted class."""

    n_classes: int
    widths: tuple
    low: np.ndarray = None  # (neurons,) running min / max of each neuron
    high: np.ndarray = None
    active: np.ndarray = None  # (classes, neurons) active counts (scaling "input": filled as it goes)
    per_class: np.ndarray = None  # (classes,) inputs predicted each class
    predictions: list = field(default_factory=list)
    runner_up: list = field(default_factory=list)
    second: list = field(default_factory=list)  # the runner-up's probability

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
        part = a[:, start : start + w]
        lo, hi = part.min(axis=1, keepdims=True), part.max(axis=1, keepdims=True)
        span = hi - lo
        out[:, start : start + w] = np.divide(part - lo, span, out=np.zeros_like(part), where=span > 0)
        start += w
    return out


def activation_limits(low: np.ndarray, high: np.ndarray, widths, threshold: float, scaling: str) -> np.ndarray:
    """The raw value above which each neuron is active: min + threshold x (max - min), per neuron or per
    layer; +inf for a constant neuron (never active)."""
    low, high = low.copy(), high.copy()
    if scaling == "layer":
        start = 0
        for w in widths:
            low[start : start + w], high[start : start + w] = (
                low[start : start + w].min(),
                high[start : start + w].max(),
            )
            start += w
    return np.where(high > low, low + threshold * (high - low), np.inf)


def _check_layers_vary(low, high, widths, names) -> int:
    """InputError for a layer whose every neuron is constant over the inputs; returns the constant neurons."""
    start = 0
    for w, name in zip(widths, names):
        if not np.any(high[start : start + w] > low[start : start + w]):
            raise InputError(
                f"layer {name!r} gives the same activations for every input (all {w} neurons "
                "constant), so no neuron can be active on some classes and not others; leave it out "
                "of layers, or check the inputs (are they all alike?)"
            )
        start += w
    return int(np.sum(high <= low))


def first_pass(
    network, x, taps, widths, state: ClassCounts, *, threshold: float, scaling: str, batch: int, keep: bool, bar=None
):
    """The forward pass that folds each batch into ``state``: predictions, runner-up, each neuron's min and
    max, and (scaling "input") the active counts. Returns the (inputs x neurons) activations if ``keep``."""
    store = np.empty((len(x), int(sum(widths))), np.float32) if keep else None
    k = state.n_classes
    for start in range(0, len(x), batch):
        probs, acts = network.forward(x[start : start + batch], taps)
        a = np.concatenate(acts, axis=1) if len(acts) > 1 else acts[0]
        top2 = np.argsort(-probs, axis=1, kind="stable")[:, :2]  # ties: the lower class, in both passes
        pred = top2[:, 0]
        state.predictions.append(pred)
        state.runner_up.append(top2[:, 1] if k > 1 else top2[:, 0])
        # a model returning logits: the runner-up's probability, not its logit, orders the example pairs
        second = np.take_along_axis(class_probabilities(probs), top2[:, -1:], axis=1)[:, 0]
        state.second.append(second.astype(np.float32))
        np.minimum(state.low, a.min(axis=0), out=state.low)
        np.maximum(state.high, a.max(axis=0), out=state.high)
        if scaling == "input":
            _count_active(state.active, pred, _scale_rows_per_layer(a, widths) > threshold)
        elif store is not None:
            store[start : start + len(a)] = a
        if bar is not None:
            bar.update(len(a))
    return store


def count_pass(network, x, taps, state: ClassCounts, limits: np.ndarray, *, batch: int, store=None, bar=None):
    """Adds to ``state.active`` the inputs on which each neuron is above its limit, per predicted class: from
    the activations the first pass kept, else a second forward pass."""
    if store is not None:
        predictions = np.concatenate(state.predictions)
        for start in range(0, len(x), 4096):
            rows = slice(start, start + 4096)
            _count_active(state.active, predictions[rows], store[rows] > limits)
        return
    for start in range(0, len(x), batch):
        probs, acts = network.forward(x[start : start + batch], taps)
        a = np.concatenate(acts, axis=1) if len(acts) > 1 else acts[0]
        _count_active(state.active, np.argsort(-probs, axis=1, kind="stable")[:, 0], a > limits)
        if bar is not None:
            bar.update(len(a))


def _count_locally(
    network,
    x,
    taps,
    widths,
    state: ClassCounts,
    *,
    threshold: float,
    scaling: str,
    batch: int,
    memory_budget: int,
    progress: bool,
) -> int:
    """The pass (or two) over ``x`` in this process; returns the number of forward passes."""
    from tqdm.auto import tqdm

    one_pass = scaling == "input" or len(x) * int(sum(widths)) * 4 <= memory_budget
    passes = 1 if one_pass else 2
    with tqdm(total=len(x) * passes, desc="inspect", unit="input", disable=not progress, leave=False) as bar:
        store = first_pass(
            network,
            x,
            taps,
            widths,
            state,
            threshold=threshold,
            scaling=scaling,
            batch=batch,
            keep=one_pass and scaling != "input",
            bar=bar,
        )
        if scaling != "input":
            count_pass(
                network,
                x,
                taps,
                state,
                activation_limits(state.low, state.high, widths, threshold, scaling),
                batch=batch,
                store=store,
                bar=bar,
            )
    return passes


def _inspected_layers(network, layers) -> tuple[str, ...]:
    """The hidden layers inspected: those named, else every layer a neuron criterion uses."""
    from ..criteria.base import check_layer_names, default_neuron_layers

    if layers is not None:
        layers = [layers] if isinstance(layers, str) else list(layers)
        check_layer_names("inspect", layers)
    names = tuple(network.step(n).name for n in (default_neuron_layers(network) if layers is None else layers))
    for name in names:
        if not network.is_hidden(name):
            network.check_subject_layer(name)  # LayerError naming the hidden layers
    return names


def _inspected_inputs(network, x, y, class_names):
    """(x, y, class names): the inputs fitted to the model (shards: loaded by their workers), the labels (a
    Dataset's own when none are given) checked to be the model's classes, the class names given or the
    Dataset's."""
    from ..convention import check_unscaled
    from ..data import Dataset, check_labels, fit_to_model

    class_names = (
        tuple(class_names)
        if class_names is not None
        else (tuple(x.class_names) if isinstance(x, Dataset) and getattr(x, "class_names", None) else None)
    )
    if isinstance(x, Dataset):
        y = x.y if y is None else y
    if getattr(x, "read_by_workers", False):  # shards Ray workers read and hold (idcgen.distributed.shards)
        labels = x.load()
        y = labels if y is None else y
    else:
        x = fit_to_model(x, network.input_shape)
        check_unscaled(x, network)
    if len(x) == 0:
        raise InputError("no inputs to inspect")
    k = network.n_classes
    if y is not None:
        y = check_labels(x, y)
        if y.min() < 0 or y.max() >= k:
            raise InputError(f"labels must be classes 0..{k - 1} of the model; got {int(y.min())}..{int(y.max())}")
    return x, y, class_names


def _count_notes(per_class: np.ndarray, constant: int, n_neurons: int) -> list[str]:
    """What the counts leave undefined: classes no input is predicted as, neurons never active."""
    notes = []
    empty = np.flatnonzero(per_class == 0)
    if len(empty):
        notes.append(
            f"no input is predicted as class {', '.join(map(str, empty))}: NAPVD and avg_bias of "
            f"{'its' if len(empty) == 1 else 'their'} pairs are undefined (NaN, left out of the cut-offs)"
        )
    if constant:
        notes.append(f"{constant} of {n_neurons} neurons are constant over the inputs (never active)")
    return notes


def _type1_confusion(y: np.ndarray, predictions: np.ndarray, k: int, notes: list[str]) -> np.ndarray:
    """The ground truth the predictions are evaluated on (a note added for each class without a labelled input)."""
    matrix = confusion_matrix(y, predictions, k)
    missing = np.flatnonzero(matrix.sum(axis=1) == 0)
    if len(missing):
        notes.append(
            f"no labelled input of class {', '.join(map(str, missing))}: its type-1 confusion is undefined (NaN)"
        )
    return type1_confusion(matrix)


def inspect(
    model,
    x,
    y=None,
    *,
    layers=None,
    threshold: float = 0.5,
    scaling: str = "neuron",
    analysis=None,
    batch_size: int | None = None,
    memory_budget: int = MEMORY_BUDGET,
    progress: bool = False,
    class_names=None,
    counting=None,
) -> "InspectResult":
    """DeepInspect on ``model`` over the inputs ``x`` (labels ``y`` optional): NAPV, NAPVD, confusion and
    bias predictions at both cut-offs and, with labels, their precision, recall, Spearman and AUCEC.

    Parameters
    ----------
    model : a classifier: a framework's model (keras.Model, torch.nn.Module), a model file's path, or a Network.
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
    batch_size : inputs per forward batch (default: the network's)
    memory_budget : bytes of (inputs x neurons) float32 activations kept for one pass; larger input sets
        take a second pass (the first finds each neuron's min and max).
    progress : a progress bar on stderr
    class_names : the classes' names, index = label, for the report (default: a Dataset's own)
    counting : what runs the passes (default: this process); ``idcgen.distributed`` maps them on Ray
        workers and sums their counts (docs/design.md, "Scale-out on Ray").
    """
    started = time.perf_counter()
    threshold = check_real("threshold", threshold, 0.0, 1.0, closed="left")
    scaling = check_choice("scaling", scaling, SCALINGS)
    check_int("memory_budget", memory_budget, 0)
    network = _classifier(model)
    batch = network.batch_size if batch_size is None else check_int("batch_size", batch_size, 1)
    names = _inspected_layers(network, layers)
    x, y, class_names = _inspected_inputs(network, x, y, class_names)
    k = network.n_classes
    taps, important = _taps(network, names, analysis)
    widths = tuple(network.neuron_count(n) for n in taps)
    kept_widths = widths[: len(names)]
    state = ClassCounts(k, widths)
    passes = (counting or _count_locally)(
        network,
        x,
        taps,
        widths,
        state,
        threshold=threshold,
        scaling=scaling,
        batch=batch,
        memory_budget=memory_budget,
        progress=progress,
    )
    predictions, runner_up = _predicted_classes(state, k, len(x))
    constant = _check_layers_vary(state.low[: sum(kept_widths)], state.high[: sum(kept_widths)], kept_widths, names)
    rho_all = napv_from_counts(state.active, state.per_class)
    notes = _count_notes(state.per_class, constant, sum(kept_widths))
    conf = None if y is None else _type1_confusion(y, predictions, k, notes)
    columns, metrics, rows = _evaluations(rho_all, (names, taps, widths), important, conf, notes)
    return InspectResult(
        layers=names,
        widths=kept_widths,
        threshold=threshold,
        scaling=scaling,
        n_inputs=len(x),
        n_classes=k,
        napv=rho_all[: sum(kept_widths)],
        per_class=state.per_class,
        columns=columns,
        metrics=metrics,
        predictions=predictions,
        runner_up=runner_up,
        runner_up_probability=np.concatenate(state.second),
        labels=y,
        notes=notes,
        passes=passes,
        seconds=time.perf_counter() - started,
        class_names=class_names,
        important=None if important is None else {"layer": important[0], "neurons": important[1].tolist()},
        napv_important=None if important is None else rho_all[rows],
    )


def _classifier(model):
    """The model as a `Network`; DeepInspect compares classes, so a regression model is refused."""
    from ..criteria.base import as_network

    network = as_network(model)
    if network.task != "classification":
        raise ParameterError(
            "inspect compares classes and needs a classifier; this model is a regression model (one output unit)"
        )
    return network


def _taps(network, names: tuple[str, ...], analysis) -> tuple[tuple[str, ...], tuple | None]:
    """The layers tapped (the inspected ones, then the analysis' layer if not among them) and the important
    neurons as (layer, neuron indices), None without an analysis."""
    if analysis is None:
        return names, None
    analysis.bind(network)  # AnalysisMismatchError for an analysis of another model
    taps = names if analysis.layer in names else names + (analysis.layer,)
    return taps, (analysis.layer, np.asarray(analysis.neurons, np.int64))


def _predicted_classes(state: ClassCounts, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each input's predicted and runner-up class; counts the inputs per predicted class into ``state`` and
    refuses inputs predicted as fewer than two classes."""
    predictions, runner_up = np.concatenate(state.predictions), np.concatenate(state.runner_up)
    state.per_class = np.bincount(predictions, minlength=k)
    if len(k_present := np.flatnonzero(state.per_class > 0)) < 2:
        raise InputError(
            f"the model predicts only class {k_present.tolist()} on these {n} inputs; "
            "comparing classes needs inputs predicted as at least two (give more or varied inputs)"
        )
    return predictions, runner_up


def _evaluations(rho_all: np.ndarray, layout, important, conf, notes: list[str]):
    """The figures of all inspected neurons and, with an analysis, of its important ones: (columns, metrics,
    the important neurons' rows in ``rho_all`` or None). ``layout`` is (inspected layers, tapped layers, the
    tapped layers' widths)."""
    names, taps, widths = layout
    columns, metrics, rows = {}, {}, None
    columns["all"], metrics["all"] = evaluate(rho_all[: sum(widths[: len(names)])], conf)
    if important is not None:
        offset = int(sum(widths[: taps.index(important[0])]))
        rows = offset + important[1]
        columns["important"], metrics["important"] = evaluate(rho_all[rows], conf)
        if important[0] not in names:
            notes.append(
                f"the analysis' layer {important[0]!r} is not among the inspected layers: it was "
                "tapped for the important neurons only"
            )
    return columns, metrics, rows
