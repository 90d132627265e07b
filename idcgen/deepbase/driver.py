"""DeepBase's streaming driver: :func:`affinity` streams the inputs in a random order through one shared
forward pass per batch and stops once every score is final (docs/design.md, "Affinity (DeepBase)")."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ..checks import check_int, check_real
from ..errors import InputError, ParameterError
from .hypotheses import Hypothesis, builtin_hypotheses, describe_function, evaluate, resize_mask
from .report import AffinityResult
from .statistics import (
    MASK_MEASURES,
    MEASURES,
    TITLES,
    is_binary,
    linear_fit,
    mask_scores,
    mi_half_width,
    mutual_information,
    pearson,
    spearman,
)
from .units import UnitGroup, parse_measures, parse_units


@dataclass(frozen=True)
class Sampling:
    """How `affinity` streams the inputs: in batches of ``batch_size`` (one traced shape for the model), the
    scores first checked against ``tol`` after ``first_check`` inputs."""

    batch_size: int = 256
    first_check: int = 500

    def checked(self) -> tuple[int, int]:
        return check_int("batch_size", self.batch_size, 1), check_int("first_check", self.first_check, 10)


def _checked_inputs(network, x, y):
    """``x`` fitted to the model's input shape and ``y`` as an array: at least 10 inputs, one label each."""
    from ..convention import check_unscaled
    from ..data import Dataset, as_array, fit_to_model

    if isinstance(x, Dataset) and y is None:  # a loaded dataset brings its labels
        y = x.y
    x = fit_to_model(x, network.input_shape)
    check_unscaled(x, network)
    n = len(x)
    if n < 10:
        raise InputError(f"affinity needs at least 10 inputs to estimate correlations; got {n}")
    if y is not None:
        y = as_array(y)
        if len(y) != n:
            raise InputError(f"{len(y)} labels for {n} inputs; give one label per input or none")
    return x, y


def affinity(
    model,
    x,
    y=None,
    *,
    analysis=None,
    units=None,
    hypotheses=None,
    measures=MEASURES,
    tol: float | None = 0.05,
    sampling: Sampling | None = None,
    random_state: int = 0,
    progress: bool = True,
    forward=None,
) -> AffinityResult:
    """Affinity of unit groups with hypotheses over the inputs ``x`` (labels ``y`` optional).

    ``analysis``: an `Analysis` whose important neurons form one group; ``units``: a spec string
    (``"fc2"``, ``"fc2:3,17;fc1"``, see `parse_units`) or a list of `UnitGroup`; both may be given;
    neither: all neurons of the model's default layer. ``hypotheses``: `Hypothesis` objects or a dict
    name -> f(x, y) (default: the built-in library). Without labels the hypotheses get the model's
    predictions as ``y``. ``tol``: a score is final once its 95 % interval is within +-tol (0 or None: every
    score on all inputs); ``sampling``: how the inputs are streamed (a `Sampling`).
    ``forward(rows, layers)``: the model's outputs and those layers' activations of
    ``x[rows]`` (default: a forward pass here; ``idcgen.distributed`` gives the Ray workers'). Returns an
    `AffinityResult`.
    """
    from tqdm.auto import tqdm

    from ..framework import as_network

    start = time.perf_counter()
    network = as_network(model) if analysis is None else analysis._network(model)
    measures = parse_measures(measures)
    tol = None if tol in (None, 0) else check_real("tol", tol, 0.0, None, closed="left")  # 0: every input scored
    batch_size, first_check = (sampling or Sampling()).checked()
    x, y = _checked_inputs(network, x, y)
    n = len(x)
    groups = _groups(network, analysis, units)
    hyps = _hypotheses(hypotheses, network, x)
    unit_list, layers, group_cols, unit_pos = _layout(groups)
    U, K, G = len(unit_list), len(hyps), len(groups)
    cells = _Cells.empty(measures, U, G, K, tol)
    order = np.random.default_rng(random_state).permutation(n)
    # per-pixel hypotheses (masks, found on the first batch) against the activation maps of spatial units
    spatial = {layer: unit_pos[layer] for layer in layers if len(network.output_shape(layer)) == 4}
    stream = _Stream.empty(K, spatial)
    next_check = n if tol is None else min(-(-first_check // batch_size) * batch_size, n)  # whole batches
    bar = tqdm(total=n, desc="affinity", unit="input", disable=not progress, leave=False)
    while stream.seen < n:
        active = [j for j in range(K) if not all(cells.final[m][:, j].all() for m in measures)]
        if not active:
            break
        active = sorted(set(active) | set(np.flatnonzero(stream.is_mask)))  # masks: every input streamed
        rows = order[stream.seen : min(stream.seen + batch_size, next_check)]
        xb = x[rows]
        probs = _stream_activations(network, forward, xb, rows, (layers, unit_pos, U), stream)
        yb = y[rows] if y is not None else (probs[:, 0] if network.task == "regression" else probs.argmax(axis=1))
        _stream_hypotheses(network, hyps, active, xb, yb, spatial, stream)
        if spatial and stream.is_mask.any():  # the maps themselves (a second pass, masks only)
            _stream_maps(network, spatial, xb, stream)
        stream.seen += len(rows)
        bar.update(len(rows))
        if stream.seen < next_check:
            continue
        _checkpoint(cells, measures, stream, active, group_cols, stream.seen >= n, random_state, n)
        next_check = _next_check(cells, stream.seen, n, measures, batch_size)
    bar.close()
    notes = _notes(y is None, tol, n, measures, cells.used, cells.scores, hyps, stream.is_mask)
    if spatial and stream.is_mask.any():
        measures = _scored_stream_masks(cells, (U, K), spatial, stream, measures, hyps, notes)
    channels = {layer for layer in layers if len(network.output_shape(layer)) > 2}
    return _result(cells, stream, (unit_list, groups, hyps, channels), measures, n, y is not None, start, notes)


@dataclass
class _Stream:
    """What `affinity` has streamed so far: the activation blocks, each hypothesis's values, the spatial units'
    maps and the masks' pixels per batch, which hypotheses are masks, the inputs seen, the input counts at
    which the scores were checked, and the seconds spent per stage."""

    acts: list
    hvals: list
    maps: dict
    masks: dict
    is_mask: np.ndarray
    timings: dict
    seen: int = 0
    checks: list = field(default_factory=list)

    @classmethod
    def empty(cls, hypotheses: int, spatial) -> "_Stream":
        return cls(
            acts=[],
            hvals=[[] for _ in range(hypotheses)],
            maps={layer: [] for layer in spatial},
            masks={},
            is_mask=np.zeros(hypotheses, bool),
            timings={"forward": 0.0, "hypotheses": 0.0, "measures": 0.0},
        )


def _stream_activations(network, forward, xb, rows, layout, stream: _Stream) -> np.ndarray:
    """One forward pass over the batch ``xb`` (rows ``rows`` of the inputs) through every layer any group needs:
    the units' activations appended to ``stream.acts``; returns the model's outputs."""
    layers, unit_pos, n_units = layout
    t = time.perf_counter()
    probs, taps = network.forward(xb, layers) if forward is None else forward(rows, layers)
    stream.timings["forward"] += time.perf_counter() - t
    block = np.empty((len(rows), n_units), np.float64)
    for layer, values in zip(layers, taps):
        cols, neurons = unit_pos[layer]
        block[:, cols] = values[:, neurons]
    stream.acts.append(block)
    return probs


def _stream_hypotheses(network, hyps, active, xb, yb, spatial, stream: _Stream) -> None:
    """Each active hypothesis once on the batch, for every group."""
    t = time.perf_counter()
    for j in active:
        stream.hvals[j].append(_hypothesis_values(network, hyps, j, xb, yb, spatial, stream.is_mask, stream.masks))
    stream.timings["hypotheses"] += time.perf_counter() - t


def _stream_maps(network, spatial, xb, stream: _Stream) -> None:
    """The spatial units' activation maps of the batch, for the masks."""
    t = time.perf_counter()
    for layer, out in zip(spatial, network.feature_maps(tuple(spatial))(xb)):
        stream.maps[layer].append(out[..., spatial[layer][1]])
    stream.timings["forward"] += time.perf_counter() - t


def _checkpoint(cells, measures, stream: _Stream, active, group_cols, last: bool, random_state, n: int) -> None:
    """Score the due cells of the active hypotheses on every input streamed so far."""
    from threadpoolctl import threadpool_limits

    t = time.perf_counter()
    a_all = np.concatenate(stream.acts)
    h_all = {j: np.concatenate(stream.hvals[j]) for j in active}
    with threadpool_limits(1, user_api="blas"):  # small matrices: BLAS threads only wait on each other
        _check(cells, measures, a_all, h_all, group_cols, last, random_state, stream.timings, n)
    stream.checks.append(stream.seen)
    stream.timings["measures"] += time.perf_counter() - t


def _scored_stream_masks(cells, shape, spatial, stream: _Stream, measures, hyps, notes: list) -> tuple:
    """The masks scored pixel by pixel on the inputs streamed, with a note saying so; returns the measures."""
    t = time.perf_counter()
    measures = _scored_masks(cells, shape, spatial, stream.maps, stream.masks, stream.seen, measures)
    stream.timings["measures"] += time.perf_counter() - t
    notes.append(
        f"masks ({', '.join(hyps[j].name for j in np.flatnonzero(stream.is_mask))}) scored pixel by pixel on "
        f"the {stream.seen} inputs streamed; their area share stands in for them in the other measures"
    )
    return measures


def _result(cells, stream: _Stream, layout, measures, n: int, labelled: bool, start: float, notes) -> AffinityResult:
    """The `AffinityResult` of a run: ``layout`` is (units, groups, hypotheses, channel layers)."""
    unit_list, groups, hyps, channels = layout
    return AffinityResult(
        units=unit_list,
        groups=groups,
        hypotheses=hyps,
        measures=measures,
        scores=cells.scores,
        half_widths=cells.widths,
        n_used=cells.used,
        baselines=cells.baselines,
        binary=cells.binary,
        n_inputs=n,
        n_seen=stream.seen,
        tol=cells.tol,
        y_source="labels" if labelled else "predictions",
        seconds=time.perf_counter() - start,
        timings=stream.timings,
        checks=stream.checks,
        channels=channels,
        notes=notes,
    )


def _hypothesis_values(network, hyps, j: int, xb, yb, spatial, is_mask, masks) -> np.ndarray:
    """Hypothesis ``j`` on one batch: a value per input; a mask (its pixels kept in ``masks`` at each spatial
    layer's resolution) gives its area share, and is marked in ``is_mask``."""
    value = evaluate(hyps[j], xb, yb, masks=True)
    if value.ndim == 3:  # a mask: its area share stands in for the unit measures
        is_mask[j] = True
        for layer in spatial:
            masks.setdefault((layer, j), []).append(
                resize_mask(value, network.output_shape(layer)[1:3]).astype(np.float32)
            )
        value = value.mean(axis=(1, 2))
    return value


def _scored_masks(cells, shape: tuple[int, int], spatial, maps, masks, seen: int, measures) -> tuple:
    """The mask measures scored pixel by pixel into ``cells``; returns the measures with them."""
    scores, widths, used = cells.scores, cells.widths, cells.used
    for m in MASK_MEASURES:
        scores[m], widths[m], used[m] = np.full(shape, np.nan), np.full(shape, np.nan), np.zeros(shape, np.int64)
    mask_scores(spatial, maps, masks, scores, used, seen)
    return measures + MASK_MEASURES


def _layout(groups: list[UnitGroup]):
    """The units of every group once each (their columns in the activation block), the layers they are in, each
    group's columns, and per layer (columns, neuron indices)."""
    unit_list = list(dict.fromkeys((g.layer, i) for g in groups for i in g.neurons))
    layers = tuple(dict.fromkeys(layer for layer, _ in unit_list))
    column = {u: c for c, u in enumerate(unit_list)}
    group_cols = [np.array([column[(g.layer, i)] for i in g.neurons]) for g in groups]
    unit_pos = {
        layer: (
            np.array([c for c, (l, _) in enumerate(unit_list) if l == layer]),
            np.array([i for l, i in unit_list if l == layer]),
        )
        for layer in layers
    }
    return unit_list, layers, group_cols, unit_pos


def _notes(unlabelled: bool, tol, n: int, measures, used, scores, hyps, is_mask) -> list[str]:
    """What the result says of how it was computed: predictions for labels, scores that needed every input,
    hypotheses constant on the inputs."""
    notes = []
    if unlabelled:
        notes.append("the inputs have no labels: the hypotheses were given the model's predictions as y")
    late = {m: int((used[m] == n).sum()) for m in measures} if tol is not None else {}
    if any(late.values()):
        notes.append(
            f"not within +-{tol} before the end of the inputs, so computed on all {n}: "
            + ", ".join(f"{k} of {used[m].size} {TITLES[m]}" for m, k in late.items() if k)
            + " scores"
        )
    undefined = [
        h.name for j, h in enumerate(hyps) if not is_mask[j] and any(np.isnan(scores[m][:, j]).all() for m in measures)
    ]
    if undefined:
        notes.append(f"constant on the inputs (no score): {', '.join(undefined)}")
    return notes


def _groups(network, analysis, units) -> list[UnitGroup]:
    groups = []
    if analysis is not None:
        groups.append(
            UnitGroup(f"important neurons of {analysis.layer}", analysis.layer, tuple(int(i) for i in analysis.neurons))
        )
    if isinstance(units, str):
        groups += parse_units(units, network)
    elif units is not None:
        groups += list(units)
    if not groups:
        layer = network.default_layer()
        groups.append(
            UnitGroup(f"{layer} (all {network.neuron_count(layer)})", layer, tuple(range(network.neuron_count(layer))))
        )
    return groups


def _hypotheses(hypotheses, network, x) -> list[Hypothesis]:
    if hypotheses is None:
        channels = x.shape[-1] if x.ndim == 4 else 1
        return builtin_hypotheses(
            task=network.task, n_classes=network.n_classes if network.task != "regression" else 0, channels=channels
        )
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
        raise ParameterError(
            "no hypotheses given"
            if not out
            else f"two hypotheses are named {next(n for n in names if names.count(n) > 1)!r}; names must be distinct"
        )
    return out


@dataclass
class _Cells:
    """The scores of every (unit or group, hypothesis) cell per measure as the stream goes on: the score, its
    interval's half-width, the inputs it used, whether it is final, and the input count at which it is scored
    next; the linear measure's baselines and which hypotheses are binary."""

    scores: dict
    widths: dict
    used: dict
    final: dict
    due: dict
    baselines: np.ndarray
    binary: np.ndarray
    tol: float | None

    @classmethod
    def empty(cls, measures, units: int, groups: int, hypotheses: int, tol) -> "_Cells":
        shapes = {m: ((groups if m == "linear" else units), hypotheses) for m in measures}
        return cls(
            scores={m: np.full(shapes[m], np.nan) for m in measures},
            widths={m: np.full(shapes[m], np.inf) for m in measures},
            used={m: np.zeros(shapes[m], np.int64) for m in measures},
            final={m: np.zeros(shapes[m], bool) for m in measures},
            due={m: np.zeros(shapes[m], np.float64) for m in measures},
            baselines=np.full((groups, hypotheses), np.nan),
            binary=np.zeros(hypotheses, bool),
            tol=tol,
        )


def _check(cells: _Cells, measures, a, h_all, group_cols, last, random_state, timings, n_total=None):
    """Score the cells due at this check (every open one at the end) on the inputs so far; cells within tol (or
    all, at the end) become final, the others are due again where their interval predicts convergence."""
    scores, widths, used, final, due, tol = cells.scores, cells.widths, cells.used, cells.final, cells.due, cells.tol
    baselines, binary = cells.baselines, cells.binary
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
        binary[j] = is_binary(h)
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
                w, mi_due = mi_half_width(
                    s,
                    w,
                    scores["mi"][rows, j],
                    used["mi"][rows, j],
                    n,
                    n_total or n,
                    final=last or tol is None,
                    tol=tol,
                )
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


def _next_check(cells: _Cells, seen, n, measures, batch_size) -> int:
    """The first input count at which an open score is due, between 1.25 and 2 times the inputs so far (so the
    checks' cost stays within twice that of the last one, and scores that converge early stop early even when
    another needs every input), in whole batches, the end at most."""
    if cells.tol is None or seen >= n:
        return n
    open_due = np.concatenate([cells.due[m][~cells.final[m]] for m in measures])
    need = float(open_due.min()) if len(open_due) else n
    need = min(max(math.ceil(need), math.ceil(1.25 * seen)), 2 * seen)
    return int(min(n, -(-need // batch_size) * batch_size))  # whole batches: one traced shape for the model
