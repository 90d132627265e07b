"""Making an analysis: one batched relevance pass over the training inputs (which also yields every
neuron's activations), the neurons ranked by importance, and the top m clustered (docs/design.md,
"Relevance" to "Clusters"). The passes run through the framework protocol, here (:class:`LocalPasses`) or on
Ray workers (``idcgen.distributed``).
"""

from __future__ import annotations

import functools
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from numbers import Integral
from typing import Protocol, Sequence, cast

import numpy as np
from tqdm.auto import tqdm

from ..checks import check_int
from ..clusters import check_cluster_method, cluster_neuron
from ..convention import InputConvention, check_scale
from ..data import Dataset, check_labels, fit_to_model
from ..errors import InputError, LayerError, ModelError, Param, ParameterError
from ..framework import Network, network_with_convention
from ..importance import AGGREGATES, top_neurons
from ..relevance import batch_totals, sum_totals
from ..threads import extent
from .record import Analysis, data_fingerprint, versions


class _HeldByWorkers(Protocol):
    """What analyze takes of inputs Ray workers read and hold (idcgen.distributed.shards.ShardedInputs, not
    imported: idcgen.distributed imports this module)."""

    def passes(self, network, layer: str, eps: float, x=None): ...


#: Bytes of subject-layer activations kept during the relevance pass; wider layers get a second, forward pass.
ACTIVATIONS_IN_ONE_PASS = 64 * 2**20


def check_class_labels(x: np.ndarray, y, n_classes: int) -> np.ndarray:
    """Labels as int64, one per input, each a class of the model (0 .. n_classes - 1)."""
    y = check_labels(x, y)
    if len(y) and y.max() >= n_classes:
        raise InputError(f"labels go up to {int(y.max())} but the model has {n_classes} classes (0 .. {n_classes - 1})")
    return y


class LocalPasses:
    """The two passes of an analysis over its inputs, in this process: the relevance pass (per-neuron
    totals, :func:`idcgen.relevance.batch_totals` and ``sum_totals``) and the gathering of the important
    neurons' activations. ``idcgen.distributed`` runs the same two steps on Ray workers (docs/design.md,
    "Scale-out on Ray")."""

    def __init__(self, network: Network, layer: str, eps: float, x: np.ndarray):
        self.network, self.layer, self.x = network, layer, x
        self.rel = network.relevance(layer, eps=eps, batch_size=network.relevance_batch_size())
        self.kept = None

    def totals(self, target, *, labels, keep_activations, progress):
        """(signed sums, absolute sums, inputs used, predictions): the relevance pass's batches summed in input
        order, as the Ray workers' are; keeps the layer's activations if asked."""
        batches = batch_totals(
            self.rel, self.x, target, labels=labels, keep_activations=keep_activations, progress=progress
        )
        signed, absolute, n_used, predictions, self.kept = sum_totals(batches, keep_activations)
        return signed, absolute, n_used, predictions

    def activations(self, neurons: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """(inputs used, m) activations of the important neurons: those kept by the relevance pass, else a
        forward pass over ``rows``."""
        if self.kept is not None:
            return self.kept[:, neurons]
        return self.network.activations(self.x, self.layer, neurons, rows=rows)

    def clusters(
        self, acts: np.ndarray, neurons: np.ndarray, ks: tuple[int, ...], method: str, random_state: int, progress: bool
    ) -> list:
        """Each important neuron's clusters, one after the other here (Ray workers cluster them side by side)."""
        return cluster_neurons(acts, neurons, ks, method, random_state, progress)


def label_mapping(y: np.ndarray, predictions: np.ndarray):
    """(share, [(label, predicted class)]) when the predictions follow the labels under another numbering
    (each label's majority prediction is its own class, and these cover at least half the inputs), else None.
    Predictions collapsed onto a few classes (inputs on another scale) are not a numbering."""
    y, predictions = np.asarray(y, np.int64), np.asarray(predictions, np.int64)
    pairs, agreeing = [], 0
    for label in np.unique(y):
        counts = np.bincount(predictions[y == label])
        pairs.append((int(label), int(counts.argmax())))
        agreeing += int(counts.max())
    share = agreeing / max(len(y), 1)
    moved = [(a, b) for a, b in pairs if a != b]
    # one label (a class-sorted set cut by --limit) says nothing of a numbering: any constant model "maps" it
    one_to_one = len(pairs) >= 2 and len({b for _, b in pairs}) == len(pairs)
    return (share, moved) if share >= 0.5 and moved and one_to_one else None


#: k-means on fewer inputs a cluster than this finds noise, and a silhouette search over such k only costs time
MIN_INPUTS_PER_CLUSTER = 5


def supported_clusters(ks, n_inputs: int) -> tuple[list[int], str | None]:
    """The k values ``n_inputs`` inputs can support (at most one cluster per MIN_INPUTS_PER_CLUSTER inputs,
    2 at least) and a note naming those left out; refused in one line when none is left."""
    ks = [int(k) for k in ks]
    most = max(2, n_inputs // MIN_INPUTS_PER_CLUSTER)
    kept = [k for k in ks if k <= most]
    if not kept:
        raise ParameterError(
            Param("clusters"),
            f" asks for at least {min(ks)} clusters of {n_inputs} inputs, "
            f"which support at most {most} ({MIN_INPUTS_PER_CLUSTER} inputs a cluster): give "
            "smaller k values or more inputs",
        )
    if len(kept) == len(ks):
        return kept, None
    return kept, (
        f"k above {most} not tried ({len(ks) - len(kept)} of the {len(ks)} k values asked): {n_inputs} "
        f"inputs support at most {most} clusters ({MIN_INPUTS_PER_CLUSTER} inputs a cluster)"
    )


def cluster_neurons(
    acts: np.ndarray, neurons: np.ndarray, ks: tuple[int, ...], method: str, random_state: int, progress: bool = False
) -> list:
    """:func:`idcgen.clusters.cluster_neuron` of each column of ``acts`` (neuron ``neurons[i]``), each from
    its own stream (:func:`neuron_streams`)."""
    streams = neuron_streams(random_state, len(neurons))
    return [
        cluster_neuron(acts[:, i], neuron=int(n), ks=ks, rng=np.random.default_rng(streams[i]), method=method)
        for i, n in tqdm(list(enumerate(neurons)), desc="clusters", unit="neuron", disable=not progress, leave=False)
    ]


def neuron_streams(random_state: int, m: int) -> list[np.random.SeedSequence]:
    """One independent random stream per important neuron (by its rank): a neuron's clusters depend on its
    own activations and rank only, not on how many draws the neurons before it took, so they can be
    computed in any order and on any machine with the same result."""
    return np.random.SeedSequence(int(random_state)).spawn(int(m))


def _in_fp32(func):
    """An analysis runs in fp32 (relevance must conserve; its clusters are fp32 activations) whatever
    precision the network's forward-only work uses (docs/design.md, "Devices")."""

    @functools.wraps(func)
    def run(model, *args, **kwargs):
        from ..framework.device import full_precision

        with full_precision(model):
            return func(model, *args, **kwargs)

    return run


@dataclass(frozen=True)
class RelevanceSettings:
    """How the relevance that ranks the neurons is taken: from the ``of`` logit ("predicted", the default, or
    "label"), over the inputs the model classifies correctly (``correct_only``) or of one label (``only_class``,
    the paper's per-class setting) or all, aggregated by ``aggregate`` ("sum": cumulative relevance, the default;
    "abs" or "mean"), with LRP-epsilon's ``eps``."""

    of: str = "predicted"
    correct_only: bool = False
    only_class: int | None = None
    aggregate: str = "sum"
    eps: float = 1e-7


@dataclass(frozen=True)
class Clustering:
    """How each important neuron's activations are clustered: the k values ``ks`` tried (default 2..5) and the
    ``method``: "silhouette" (DeepImportance's, default) or "zero-aware" (a ReLU's exact zeros form their own
    cluster, k is chosen on the positive values; :func:`idcgen.clusters.cluster_neuron`)."""

    ks: Sequence[int] = (2, 3, 4, 5)
    method: str = "silhouette"

    def checked(self) -> tuple[tuple[int, ...], str]:
        ks = self.ks
        listed = isinstance(ks, (Sequence, np.ndarray)) and not isinstance(ks, (str, bytes))
        if not listed or not len(ks) or any(isinstance(k, bool) or not isinstance(k, Integral) or k < 2 for k in ks):
            raise ParameterError(
                Param("clusters"),
                " must be a non-empty sequence of ints >= 2 (the k values tried per "
                f"neuron, for example (2, 3, 4, 5); (3,) tries k = 3 only) or a Clustering. Got {ks!r} instead.",
            )
        return tuple(int(k) for k in ks), self.method


@_in_fp32
def analyze(
    model,
    x: np.ndarray,
    y: np.ndarray | None = None,
    *,
    layer: str | None = None,
    m: int = 8,
    clusters: Sequence[int] | Clustering = (2, 3, 4, 5),
    relevance: RelevanceSettings | None = None,
    random_state: int = 0,
    convention: InputConvention | None = None,
    data_summary: dict | None = None,
    progress: bool = True,
    passes=None,
) -> Analysis:
    """Find the m most important neurons of ``layer`` over ``x`` and cluster their activations.

    Parameters
    ----------
    model : a framework's model (keras.Model, torch.nn.Module), a model file's path, or a Network
    x : array (n, *input_shape), (n, h, w) for one channel, or a Dataset (which brings its labels)
        Training inputs: images in the model's value range (see ``convention``). Or shards that Ray workers
        read and hold themselves (``idcgen.distributed.Workers.shards``; labels are the shards' own, y=None).
    y : array (n,) or one-hot (n, K), optional
        Labels; needed for ``RelevanceSettings(of="label")``, ``correct_only`` and ``only_class``.
    layer : str, default: the last hidden layer before the logits
    m : int, default 8
    clusters : the k values tried per neuron, default 2..5 (the silhouette picks one), or a :class:`Clustering`
        (the k values and the method)
    relevance : how the relevance is taken and over which inputs (a :class:`RelevanceSettings`; default: from
        the predicted logit, summed over every input)
    convention : the :class:`~idcgen.convention.InputConvention` of the images (value range, preprocessing
        such as "tf" or "mean=0.5,std=0.25" between image and model, image shape for a model taking flat or
        channel-less inputs); default: read from the model (0..255 when it starts with ``Rescaling(1/255)``),
        else [0, 1]. Recorded (with the inputs' observed range) and re-applied when the analysis is loaded.
    random_state : seeds the k-means of the clusters; the same inputs and random_state give the same analysis
    data_summary : a description of ``x`` recorded with the analysis (``Dataset.summary()``)
    progress : show progress bars on stderr
    passes : what runs the passes over ``x``: :class:`LocalPasses` (default) or, from
        :func:`idcgen.distributed.analyze`, Ray workers; called as ``passes(network, layer, eps, x)``, giving an
        object with ``totals``, ``activations`` and ``clusters`` (as :class:`LocalPasses`)
    """
    _check_settings_types(relevance, convention)
    network, convention = _differentiable_network(model, convention)
    ks, cluster_method = (clusters if isinstance(clusters, Clustering) else Clustering(clusters)).checked()
    relevance = relevance or RelevanceSettings()
    relevance_of, only_class, aggregate = relevance.of, relevance.only_class, relevance.aggregate
    correct_only, eps = bool(relevance.correct_only), float(relevance.eps)
    clusters = ks
    layer = network.check_subject_layer(layer or network.default_layer())
    width = network.neuron_count(layer)
    _check_options(width, m, relevance_of, aggregate, cluster_method, random_state)
    sharded = getattr(x, "read_by_workers", False)  # shards Ray workers read and hold (idcgen.distributed.shards)
    x, y, span = _training_inputs(
        network, convention, x, y, sharded, selecting=relevance_of == "label" or correct_only or only_class is not None
    )
    regression = network.task == "regression"
    fingerprint = _fingerprint_in_background(x, y, sharded)
    if only_class is not None:
        x, y = _of_class(x, y, only_class, sharded)
        span = _span(x, sharded)  # the record's observed range is the analysed inputs'
    clusters, cluster_note = supported_clusters(clusters, len(x))

    timings = {}
    start = time.perf_counter()
    # Streamed: the relevance pass keeps per-neuron totals (and the layer's activations when they are small),
    # else a forward pass then keeps only the m important neurons' activations, so memory holds a batch and
    # at most max(ACTIVATIONS_IN_ONE_PASS, inputs x m floats), whatever the layer's width.
    # sharded: x is a ShardedInputs (it has read_by_workers), which the getattr test cannot tell mypy
    passes = (passes or (cast(_HeldByWorkers, x).passes if sharded else LocalPasses))(network, layer, eps, x)
    one_pass = len(x) * width * 4 <= ACTIVATIONS_IN_ONE_PASS
    signed, absolute, n_used, predictions = _relevance_pass(
        passes, len(x), y, (relevance_of, correct_only), one_pass, progress
    )
    timings["relevance"] = time.perf_counter() - start
    if n_used == 0:
        raise _none_correct(data_summary)
    scores = {"sum": signed, "abs": absolute, "mean": signed / n_used}[aggregate]
    neurons = top_neurons(scores, m)
    start = time.perf_counter()
    acts = passes.activations(neurons, np.flatnonzero(predictions == y) if correct_only else np.arange(len(x)))
    timings["activations"] = time.perf_counter() - start
    _check_activations(acts, layer, len(neurons))

    start = time.perf_counter()
    found = passes.clusters(acts, neurons, tuple(clusters), cluster_method, random_state, progress)
    timings["clusters"] = time.perf_counter() - start
    notes = _notes(network, layer, cluster_note, found)

    accuracy = None if y is None or regression else float((predictions == y).mean())
    data = _data_record(network, x, y, sharded, span, dict(data_summary or {}, n_used=n_used, accuracy=accuracy))
    data.update(fingerprint=fingerprint.result())
    warnings = _diagnostics(network, convention, data, y, predictions, accuracy) + _unreached(layer, scores, neurons)
    config = _config(network, layer, m, Clustering(tuple(clusters), cluster_method), relevance, random_state)
    config.update(input_convention=convention.to_dict())
    made = _analysis(network, layer, neurons, scores, found, config, data, timings, notes, warnings)
    # how often the clustered inputs reach each combination, kept so that idc-rarity needs no --train again
    made.training_counts = np.stack(np.unique(made.combinations.ids(acts), return_counts=True)).astype(np.int64)
    return made


def _check_settings_types(relevance, convention) -> None:
    """The settings objects ``analyze`` takes, or one line naming the class to pass (a string or a tuple failed
    deep inside with an AttributeError)."""
    if relevance is not None and not isinstance(relevance, RelevanceSettings):
        example = f"of={relevance!r}" if relevance in ("label", "predicted") else "of='label'"
        raise ParameterError(
            f"The 'relevance' parameter takes an idcgen.RelevanceSettings, for example RelevanceSettings({example}). "
            f"Got {relevance!r} instead."
        )
    if convention is not None and not isinstance(convention, InputConvention):
        raise ParameterError(
            "The 'convention' parameter takes an idcgen.InputConvention, for example "
            f"InputConvention(value_range=(0, 255)). Got {convention!r} instead."
        )


def _differentiable_network(model, convention: InputConvention | None):
    """The model as a `Network` with its input convention; an ONNX export runs forward only, and relevance
    needs its source model."""
    network, convention = network_with_convention(model, recorded=convention)
    if "differentiable" not in network.capabilities:
        raise ModelError(
            "the analysis takes relevance (LRP), and this model runs forward only (an ONNX export): analyse its "
            "source model (.pt2, .keras) and pass that analysis with --analysis"
        )
    return network, convention


def _fingerprint_in_background(x, y, sharded: bool):
    """A future of the inputs' fingerprint, as given, before correct_only / only_class select (sharded: of the
    shards' own fingerprints), hashed on a thread while the passes run (hashlib lets go of the GIL): 0.3 s for
    60,000 MNIST images, which the driver would otherwise add to a sharded pass's time."""
    hashing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="idcgen-fingerprint")
    fingerprint = hashing.submit(str, x.fingerprint) if sharded else hashing.submit(data_fingerprint, x, y)
    hashing.shutdown(wait=False)
    return fingerprint


def _relevance_pass(passes, n: int, y, taken: tuple[str, bool], one_pass: bool, progress: bool):
    """The relevance pass over the ``n`` inputs, with a progress bar; ``taken`` is (relevance_of, correct_only).
    Returns (signed totals, absolute totals, inputs used, predictions)."""
    relevance_of, correct_only = taken
    with tqdm(total=n, desc="relevance", unit="input", disable=not progress, leave=False) as bar:
        return passes.totals(
            y if relevance_of == "label" else None,
            labels=y if correct_only else None,
            keep_activations=one_pass,
            progress=bar,
        )


def _notes(network, layer: str, cluster_note: str | None, found) -> list[str]:
    """The analysis's notes: the relevance rules', the k values left out, each neuron's clustering, the head's."""
    return (
        network.rule_notes(layer)
        + ([cluster_note] if cluster_note else [])
        + [f"neuron {c.neuron}: {c.note}" for c in found if c.note]
        + ([network.head_note] if getattr(network, "head_note", None) else [])
    )


def _analysis(network, layer: str, neurons, scores, found, config, data, timings, notes, warnings) -> Analysis:
    """The `Analysis` record; the diagnostics' warnings are notes too."""
    return Analysis(
        layer=layer,
        neurons=neurons,
        importance=scores,
        clusters=found,
        fingerprint=network.fingerprint(),
        weights_digest=network.weights_digest(),
        config=config,
        data=data,
        timings=timings,
        versions=versions(),
        notes=notes + warnings,
        warnings=warnings,
        network=network,
        device=network.device_info(),
    )


def _of_class(x, y, only_class: int, sharded: bool):
    """The inputs of label ``only_class`` (the paper's per-class setting); shards select theirs in place."""
    keep = y == only_class
    if not keep.any():
        raise InputError(f"no inputs of class {only_class} (classes present: {sorted(set(y.tolist()))})")
    if sharded:
        x.select(keep)
        return x, y[keep]
    return x[keep], y[keep]


def _none_correct(data_summary: dict | None) -> InputError:
    """The refusal when correct_only keeps no input: most often labels numbered unlike the model's classes."""
    names = (data_summary or {}).get("class_names")
    mapping = (
        ""
        if not names
        else (
            " (here the labels come from class folders: "
            + ", ".join(f"{i} = {n!r}" for i, n in enumerate(names[:4]))
            + (", ..." if len(names) > 4 else "")
            + "; give the names in the model's class order, --class-names, if that differs)"
        )
    )
    return InputError(
        "no input is classified correctly, so ",
        Param("correct_only", True),
        f" keeps none: check that the labels number the classes as the model does{mapping}",
    )


def _check_activations(acts: np.ndarray, layer: str, n_neurons: int) -> None:
    """Refuse activations that cannot be clustered (NaN or infinite: the model's fault, said before clustering
    would call it a value error) or that make IDC meaningless (a layer constant on every input)."""
    broken = ~np.isfinite(acts).all(axis=1) if len(acts) else np.zeros(0, bool)
    if broken.any():
        raise InputError(
            f"the model gives NaN or infinite values at layer {layer!r} for {int(broken.sum())} of "
            f"{len(acts)} training inputs: its activations cannot be clustered; check the model's "
            "weights and the inputs' scale (--scale, --value-range, --preprocess)"
        )
    if len(acts) and np.all(np.ptp(acts, axis=0) == 0):
        # each neuron would get one cluster and every input the one combination: IDC 100 % that means nothing
        raise LayerError(
            f"layer {layer!r} is constant on the {len(acts)} training inputs: each of its {n_neurons} "
            "most important neurons takes one value (a dead or collapsed layer), so IDC would be "
            "100 % for any input; choose another layer (see `idcgen layers`) or retrain the model"
        )


def _data_record(network, x, y, sharded: bool, span: tuple[float, float], data: dict) -> dict:
    """What the analysis records of its training inputs: ``data`` with their count, observed range (``span``) and
    (a regression model with labels) the model's error on them."""
    data.update(n_inputs=int(len(x)), observed_range=[float(span[0]), float(span[1])])
    if network.task == "regression" and y is not None:  # the model's error on the labels, in the output's units
        outputs = x.predict() if sharded else network.predict(x)
        data.update(mse=float(np.mean((outputs.astype(np.float64) - y) ** 2)))
    return data


def _config(network, layer: str, m: int, clustering: Clustering, relevance: RelevanceSettings, random_state) -> dict:
    """The settings an analysis records (and a saved one is matched on)."""
    return dict(
        task=network.task,
        layer=layer,
        m=int(m),
        clusters=[int(k) for k in clustering.ks],
        cluster_method=clustering.method,
        relevance_of=relevance.of,
        correct_only=bool(relevance.correct_only),
        only_class=relevance.only_class,
        aggregate=relevance.aggregate,
        eps=float(relevance.eps),
        random_state=random_state,
        rule="LRP-epsilon",
        neuron="channel (spatial mean)" if len(network.output_shape(layer)) > 2 else "unit",
    )


def _check_options(width: int, m, relevance_of, aggregate, cluster_method, random_state) -> None:
    """The analysis' own options, each refused in one line before any pass."""
    top_neurons(np.zeros(width), m)  # validates m against the layer before any work
    if relevance_of not in ("predicted", "label"):
        raise ParameterError(Param("relevance_of"), f" must be 'predicted' or 'label'. Got {relevance_of!r} instead.")
    if aggregate not in AGGREGATES:
        raise ParameterError(f"The 'aggregate' parameter must be one of {AGGREGATES}. Got {aggregate!r} instead.")
    check_cluster_method(cluster_method)
    check_int("random_state", random_state, 0)


def _training_inputs(network, convention, x, y, sharded: bool, *, selecting: bool):
    """(x, y, their (min, max)) checked: in the model's input shape and value range, labels that fit the task;
    sharded inputs bring their own labels. ``selecting``: an option needs the labels (relevance of the label, correct-only,
    one class)."""
    if sharded:
        if y is not None:
            raise ParameterError("sharded inputs carry their own labels (each shard's y); pass y=None")
        y = x.load()
    else:
        if isinstance(x, Dataset) and y is None:  # a loaded dataset brings its labels
            y = x.y
        x = fit_to_model(x, network.input_shape)
    span = _span(x, sharded)  # one pass over the inputs for the scale check and the record
    check_scale(np.asarray(span), convention, what="the training inputs")
    regression = network.task == "regression"
    if regression and selecting:
        raise InputError(
            Param("relevance_of", "label"),
            ", correct_only and only_class are for classifiers; a regression model's relevance starts from its one "
            "output, and its inputs have no class",
        )
    if y is not None:
        y = check_labels(x, y, task="regression") if regression else check_class_labels(x, y, network.n_classes)
    elif selecting:
        raise InputError("labels are needed for ", Param("relevance_of", "label"), ", correct_only or only_class")
    return x, y, span


def _span(x, sharded: bool) -> tuple[float, float]:
    """The inputs' (min, max): sharded ones report it from their workers."""
    return x.observed_range if sharded else extent(x)


def _unreached(layer: str, scores: np.ndarray, neurons: np.ndarray) -> list[str]:
    """A warning when important neurons have importance exactly 0: no relevance reached them, so they were
    chosen by index among ties, not by relevance. All are 0 behind a head of zeros (torchvision initialises
    its ViT's so); some where fewer than m neurons of the layer have positive importance."""
    zero = int((scores[neurons] == 0).sum())
    if not zero:
        return []
    if not scores.any():
        return [
            f"no relevance reached layer {layer!r} (every neuron's importance is 0: the logits do not depend on "
            f"it on these inputs, e.g. a head whose weights are all 0, as in an untrained model): the "
            f"important neurons {neurons.tolist()} are the first by index, not the most relevant"
        ]
    return [
        f"{zero} of the {len(neurons)} important neurons of layer {layer!r} have importance 0: no relevance reached "
        f"them, so they were chosen by index among ties ({int((scores > 0).sum())} of its {len(scores)} neurons "
        "have positive importance on these inputs)"
    ]


def _most_predicted(predictions) -> tuple[int, float]:
    """The class predicted most often and its share of the inputs."""
    counts = np.bincount(np.asarray(predictions, dtype=np.int64))
    return int(counts.argmax()), float(counts.max() / max(len(predictions), 1))


def _diagnostics(network, convention, data: dict, y, predictions, accuracy) -> list[str]:
    """Warnings about the training inputs as the model sees them: accuracy near chance (labels mapped to other
    classes, or inputs scaled twice), or a regression no better than the labels' mean."""
    warnings = []
    low, high = data["observed_range"]
    n_classes = network.n_classes
    lo, hi = convention.value_range
    scaled = (
        f"the inputs are likely scaled twice or not at all (they span [{low:g}, {high:g}]; the model is taken "
        f"to want images in [{lo:g}, {hi:g}], {convention.source}); check --scale, --value-range and --preprocess"
    )
    remapped = (
        None if accuracy is None or n_classes <= 2 or accuracy >= 1.5 / n_classes else label_mapping(y, predictions)
    )
    if remapped is not None:  # consistent predictions under other names: the labels, not the scale
        share, pairs = remapped
        warnings.append(
            f"the model classifies {accuracy:.1%} of the training inputs correctly, near chance for "
            f"{n_classes} classes, but predicts one class per label for {share:.0%} of them "
            f"({', '.join(f'label {a} -> predicted {b}' for a, b in pairs[:3])}, ...): the labels are "
            "likely mapped to other classes than the model's (class folders with word names are "
            "numbered in sorted order); name the folders by class index or give --class-names in "
            "the model's label order"
        )
    elif accuracy is not None and n_classes > 2 and accuracy < 1.5 / n_classes:
        top, share = _most_predicted(predictions)
        # an untrained model (keras.applications' weights=None) is near chance too, with the right inputs: it
        # often predicts one class for most of them, as a trained model fed inputs scaled twice may
        collapsed = f" (it predicts class {top} for {share:.0%} of them)" if share >= 0.5 else ""
        warnings.append(
            f"the model classifies {accuracy:.1%} of the training inputs correctly, near chance for "
            f"{n_classes} classes{collapsed}: either the model is untrained (random weights, e.g. "
            f"keras.applications with weights=None) or {scaled}"
        )
    if data.get("mse") is not None and len(y) > 1 and data["mse"] >= np.var(y.astype(np.float64)) > 0:
        # the regression counterpart of near chance: no better than always predicting the labels' mean
        warnings.append(
            f"the model's MSE on the training labels, {data['mse']:.4g}, is not below their variance "
            f"{np.var(y.astype(np.float64)):.4g} (predicting their mean would do as well): {scaled}"
        )
    return warnings
