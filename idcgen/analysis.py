"""The analysis: important neurons of a layer and their activation clusters, saved once, reused.

``analyze`` runs one batched relevance pass over the training inputs (which also yields every
neuron's activations), ranks neurons by importance, and clusters the top m (docs/design.md, "Relevance" to "Clusters"). An
``Analysis`` maps any input set to combinations and measures IDC (docs/design.md, "Coverage").
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import platform
import shutil
import time
import uuid
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
from tqdm.auto import tqdm

from . import __version__
from .clusters import NeuronClusters, check_cluster_method, cluster_neuron
from .convention import InputConvention, check_scale, convention_of, prepare, resolve
from .coverage import Combinations, CoverageResult, CoverageTracker
from .data import check_labels, fit_to_model
from .checks import check_int
from .errors import AnalysisMismatchError, InputError, ParameterError
from .importance import AGGREGATES, top_neurons
from .models import Network
from .relevance import Relevance, batch_size_for, relevance_totals

FORMAT_VERSION = 1
#: What makes two saved analyses the same one (with the training data's fingerprint): see Analysis.matches_saved.
SAME_ANALYSIS_KEYS = ("format_version", "model_fingerprint", "layer", "important_neurons", "clusters",
                      "combinations_total", "config")
#: Bytes of subject-layer activations kept during the relevance pass; wider layers get a second, forward pass.
ACTIVATIONS_IN_ONE_PASS = 64 * 2**20


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    def installed(name):
        try:
            return version(name)
        except PackageNotFoundError:
            return None
    return {"idcgen": __version__, "python": platform.python_version(),
            "tensorflow": installed("tensorflow-cpu") or installed("tensorflow"), "keras": installed("keras"),
            "numpy": np.__version__, "scikit-learn": installed("scikit-learn")}


def as_network(model) -> Network:
    return model if isinstance(model, Network) else Network(model)


def network_with_convention(model, *, value_range=None, preprocess=None, image_shape=None,
                            recorded: InputConvention | None = None) -> tuple[Network, InputConvention]:
    """The Network to measure (the model wrapped with what its input convention puts in front of it,
    see :mod:`idcgen.convention`) and that convention. A Network passed with no choices is kept."""
    if isinstance(model, Network) and value_range is None and preprocess is None and image_shape is None \
            and recorded is None:
        known = model.__dict__.get("_idcgen_convention") or convention_of(model.model) or resolve(model.model)
        return model, known
    wrapped, convention = prepare(model, value_range=value_range, preprocess=preprocess, image_shape=image_shape,
                                  recorded=recorded)
    network = model if isinstance(model, Network) and wrapped is model.model else \
        Network(wrapped, task=model.task if isinstance(model, Network) else None)  # keep a --task override
    network.__dict__["_idcgen_convention"] = convention  # what later calls with this Network fall back to
    return network, convention


@dataclass
class Analysis:
    """Important neurons of ``layer`` with their centroids, for one model (by weights fingerprint)."""

    layer: str
    neurons: np.ndarray                     # (m,) indices of the important neurons, most important first
    importance: np.ndarray                  # (layer neurons,) importance of every neuron of the layer
    clusters: list[NeuronClusters]          # one per important neuron, same order
    fingerprint: str
    config: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    network: Network | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        self.combinations = Combinations([c.centroids for c in self.clusters])

    @property
    def m(self) -> int:
        return len(self.neurons)

    @property
    def convention(self) -> InputConvention:
        """The input convention the analysis was made with (value range, preprocessing)."""
        return InputConvention.from_dict(self.config.get("input_convention"))

    @property
    def observed_range(self) -> tuple[float, float] | None:
        """(min, max) of the training inputs' values, as analysed."""
        seen = self.data.get("observed_range")
        return None if seen is None else (float(seen[0]), float(seen[1]))

    def check_inputs(self, x: np.ndarray, what: str = "the inputs") -> None:
        """Refuse inputs clearly on another scale than the training inputs (one line naming the fix)."""
        check_scale(x, self.convention, self.observed_range, what)

    @property
    def total(self) -> int:
        """|INCC|: the number of combinations."""
        return self.combinations.total

    # ---- the model it belongs to ------------------------------------------------------------
    def bind(self, model) -> "Analysis":
        """Attach the model to measure with; refuse a model whose weights differ from the analysed one."""
        if self.network is not None and model in (self.network, self.network.model):
            return self  # already bound: hashing every weight again would cost more than the measurement
        recorded = self.convention
        if isinstance(model, Network):
            network = model
            have = convention_of(network.model)
            have = None if have is None or have.preprocess is None else have.preprocess.spec
            want = None if recorded.preprocess is None else recorded.preprocess.spec
            if have != want:
                raise AnalysisMismatchError(
                    f"this analysis was made with preprocessing {want or 'none'} but the model is given with "
                    f"{have or 'none'}; pass --preprocess {want} (or the model wrapped with it)" if want else
                    f"this analysis was made without preprocessing but the model is given with {have}; drop --preprocess")
        else:  # a Keras model: put the recorded preprocessing in front of it (the image shape is the fuzzer's)
            network, _ = network_with_convention(model, recorded=dataclasses.replace(recorded, image_shape=None))
        got = network.fingerprint()
        if got != self.fingerprint:
            raise AnalysisMismatchError(
                f"this analysis was made for another model (weights fingerprint {self.fingerprint[:12]}, "
                f"this model {got[:12]}); run `idcgen analyze` on this model first")
        network.layer(self.layer)
        self.network = network
        return self

    def _network(self, model=None) -> Network:
        if model is not None:
            self.bind(model)
        if self.network is None:
            raise ParameterError("no model bound to this analysis: pass model=... or call analysis.bind(model)")
        return self.network

    # ---- measuring --------------------------------------------------------------------------
    def select(self, layer_activations: np.ndarray) -> np.ndarray:
        """(n, layer neurons) -> (n, m) activations of the important neurons."""
        return layer_activations[:, self.neurons]

    def activations(self, x: np.ndarray, model=None) -> np.ndarray:
        network = self._network(model)
        _, (acts,) = network.forward(fit_to_model(x, network.input_shape), (self.layer,))
        return self.select(acts)

    def ids(self, x: np.ndarray, model=None) -> np.ndarray:
        """Combination id of each input (n,)."""
        return self.combinations.ids(self.activations(x, model))

    def tracker(self, x: np.ndarray | None = None, model=None) -> CoverageTracker:
        tracker = CoverageTracker(self.total)
        if x is not None:
            self.check_inputs(np.asarray(x))
            tracker.update(self.ids(x, model))
        return tracker

    def coverage(self, x: np.ndarray, model=None) -> CoverageResult:
        """IDC of the input set ``x``: the share of combinations it reaches."""
        return self.tracker(x, model).result()

    # ---- persistence ------------------------------------------------------------------------
    def summary(self) -> dict:
        return {
            "format_version": FORMAT_VERSION,
            "layer": self.layer,
            "m": self.m,
            "important_neurons": [int(n) for n in self.neurons],
            "importance_of_important_neurons": [float(self.importance[n]) for n in self.neurons],
            "clusters": [{"neuron": int(c.neuron), "k": c.k, "centroids": [float(v) for v in c.centroids],
                          "silhouette": c.silhouette,
                          "silhouette_per_k": {str(k): float(v) for k, v in c.scores.items()},
                          "note": c.note} for c in self.clusters],
            "combinations_total": int(self.total),
            "model_fingerprint": self.fingerprint,
            "config": self.config,
            "data": self.data,
            "timings_seconds": self.timings,
            "versions": self.versions,
            "notes": self.notes,
            "warnings": self.warnings,
        }

    def matches_saved(self, folder: str | os.PathLike) -> bool:
        """Whether ``folder`` holds this same analysis: same model, training data, settings and result
        (timings and versions aside)."""
        try:
            meta = json.loads((Path(folder) / "analysis.json").read_text())
        except (OSError, ValueError):
            return False
        mine = json.loads(json.dumps(self.summary()))  # as it would read back from disk
        same = lambda a, b: json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # noqa: E731 (NaN == NaN)
        return isinstance(meta, dict) and all(same(meta.get(k), mine[k]) for k in SAME_ANALYSIS_KEYS) \
            and same((meta.get("data") or {}).get("fingerprint"), mine["data"].get("fingerprint"))

    def save(self, folder: str | os.PathLike, *, overwrite: bool = False) -> Path:
        """Write ``analysis.json`` (for people) and ``arrays.npz`` into ``folder``, atomically.

        A folder already holding this same analysis is left as it is; one holding another analysis is
        replaced only with ``overwrite=True`` (work is never lost silently); any other non-empty folder
        is refused."""
        folder = Path(folder)
        if self.matches_saved(folder):
            return folder
        check_save_target(folder, overwrite=overwrite)
        folder.parent.mkdir(parents=True, exist_ok=True)
        # os.mkdir, not tempfile.mkdtemp (always 0700): the folder gets the permissions the umask gives
        tmp = folder.with_name(f".{folder.name}.tmp-{uuid.uuid4().hex[:8]}")
        tmp.mkdir()
        old = folder.with_name(f".{folder.name}.old")
        try:
            (tmp / "analysis.json").write_text(json.dumps(self.summary(), indent=2) + "\n")
            np.savez(tmp / "arrays.npz", neurons=self.neurons, importance=self.importance)
            if folder.exists():  # swap: the old analysis stays whole until the new one is in place
                shutil.rmtree(old, ignore_errors=True)
                os.replace(folder, old)
            os.replace(tmp, folder)
            shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return folder

    def save_unique(self, folder: str | os.PathLike) -> tuple[Path, bool]:
        """Save into ``folder``, or ``folder-2``, ``-3``, ... when it holds another analysis: (the folder
        used, whether it was written; False when it already held this same analysis)."""
        folder = Path(folder)
        for i in itertools.count(1):
            candidate = folder if i == 1 else folder.with_name(f"{folder.name}-{i}")
            if self.matches_saved(candidate):
                return candidate, False
            if not candidate.exists():
                return self.save(candidate), True

    def default_name(self, model_name: str) -> str:
        """``<model>_<layer>_m<m>[_<cluster method>]_<data fingerprint>``: what tells analyses apart, so
        two of one model made on different data or settings do not share a folder."""
        method = self.config.get("cluster_method", "silhouette")
        fingerprint = self.data.get("fingerprint")
        return (f"{model_name}_{self.layer}_m{self.m}" + ("" if method == "silhouette" else f"_{method}")
                + ("" if fingerprint is None else f"_{fingerprint}"))

    @classmethod
    def load(cls, folder: str | os.PathLike, model=None) -> "Analysis":
        folder = Path(folder)
        meta_path = folder / "analysis.json"
        if not meta_path.is_file():
            raise InputError(f"not an analysis folder (no analysis.json): {folder}")
        try:
            meta = json.loads(meta_path.read_text())
            with np.load(folder / "arrays.npz") as arrays:
                neurons, imp = arrays["neurons"], arrays["importance"]
            clusters = [NeuronClusters(neuron=c["neuron"], centroids=np.asarray(c["centroids"], np.float64),
                                       silhouette=c["silhouette"],
                                       scores={int(k): v for k, v in c["silhouette_per_k"].items()},
                                       note=c["note"]) for c in meta["clusters"]]
            if meta.get("format_version") != FORMAT_VERSION:
                raise ValueError(f"format version {meta.get('format_version')!r}, expected {FORMAT_VERSION}")
            if len(clusters) != len(neurons):
                raise ValueError(f"{len(neurons)} important neurons but {len(clusters)} cluster sets")
            analysis = cls(layer=meta["layer"], neurons=neurons, importance=imp, clusters=clusters,
                           fingerprint=meta["model_fingerprint"], config=meta["config"], data=meta["data"],
                           timings=meta["timings_seconds"], versions=meta["versions"], notes=meta["notes"],
                           warnings=meta.get("warnings", []))
        except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as exc:  # truncated or empty npz
            raise InputError(f"analysis folder {folder} is incomplete or corrupt: {exc}") from None
        return analysis.bind(model) if model is not None else analysis


def check_save_target(folder: str | os.PathLike, *, overwrite: bool = False) -> None:
    """Refuse to save an analysis into ``folder`` when that would lose something: a folder holding other
    files, or (unless ``overwrite``) one holding an analysis. Callers check before a long analysis."""
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or (any(folder.iterdir())
                                                    and not (folder / "analysis.json").exists())):
        raise InputError(f"{folder} exists and is not an analysis folder: refusing to replace it; "
                         "choose another --out")
    if (folder / "analysis.json").exists() and not overwrite:
        raise InputError(f"{folder} already holds an analysis: refusing to replace it; pass overwrite=True to "
                         "replace it, or save elsewhere")


def data_fingerprint(x: np.ndarray, y: np.ndarray | None = None) -> str:
    """8 hex digits identifying the inputs (and labels) analysed: their shapes, dtypes and bytes."""
    digest = hashlib.blake2b(digest_size=4)
    for a in (x,) if y is None else (x, y):
        a = np.ascontiguousarray(a)
        digest.update(f"{a.shape}{a.dtype}".encode())
        digest.update(memoryview(a).cast("B"))
    return digest.hexdigest()


def check_class_labels(x: np.ndarray, y, n_classes: int) -> np.ndarray:
    """Labels as int64, one per input, each a class of the model (0 .. n_classes - 1)."""
    y = check_labels(x, y)
    if len(y) and y.max() >= n_classes:
        raise InputError(f"labels go up to {int(y.max())} but the model has {n_classes} classes (0 .. {n_classes - 1})")
    return y


class LocalPasses:
    """The two passes of an analysis over its inputs, in this process: the relevance pass (per-neuron
    totals, :func:`idcgen.relevance.relevance_totals`) and the gathering of the important neurons'
    activations. ``idcgen.distributed`` runs the same two steps on Ray workers (docs/design.md,
    "Scale-out on Ray")."""

    def __init__(self, network: Network, layer: str, eps: float, x: np.ndarray):
        self.network, self.layer, self.x = network, layer, x
        self.rel = Relevance(network, layer=layer, eps=eps, batch_size=batch_size_for(network))
        self.kept = None

    def totals(self, target, *, labels, keep_activations, progress):
        """(signed sums, absolute sums, inputs used, predictions); keeps the layer's activations if asked."""
        signed, absolute, n_used, predictions, self.kept = relevance_totals(
            self.rel, self.x, target, labels=labels, keep_activations=keep_activations, progress=progress)
        return signed, absolute, n_used, predictions

    def activations(self, neurons: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """(inputs used, m) activations of the important neurons: those kept by the relevance pass, else a
        forward pass over ``rows``."""
        if self.kept is not None:
            return self.kept[:, neurons]
        return self.network.activations(self.x, self.layer, neurons, rows=rows)

    def clusters(self, acts: np.ndarray, neurons: np.ndarray, ks: tuple[int, ...], method: str, random_state: int,
                 progress: bool) -> list:
        """Each important neuron's clusters, one after the other here (Ray workers cluster them side by side)."""
        return cluster_neurons(acts, neurons, ks, method, random_state, progress)


def cluster_neurons(acts: np.ndarray, neurons: np.ndarray, ks: tuple[int, ...], method: str, random_state: int,
                    progress: bool = False) -> list:
    """:func:`idcgen.clusters.cluster_neuron` of each column of ``acts`` (neuron ``neurons[i]``), each from
    its own stream (:func:`neuron_streams`)."""
    streams = neuron_streams(random_state, len(neurons))
    return [cluster_neuron(acts[:, i], neuron=int(n), ks=ks, rng=np.random.default_rng(streams[i]), method=method)
            for i, n in tqdm(list(enumerate(neurons)), desc="clusters", unit="neuron", disable=not progress,
                             leave=False)]


def neuron_streams(random_state: int, m: int) -> list[np.random.SeedSequence]:
    """One independent random stream per important neuron (by its rank): a neuron's clusters depend on its
    own activations and rank only, not on how many draws the neurons before it took, so they can be
    computed in any order and on any machine with the same result."""
    return np.random.SeedSequence(int(random_state)).spawn(int(m))


def analyze(model, x: np.ndarray, y: np.ndarray | None = None, *, layer: str | None = None, m: int = 8,
            clusters: Sequence[int] = (2, 3, 4, 5), cluster_method: str = "silhouette",
            relevance_of: str = "predicted", correct_only: bool = False,
            only_class: int | None = None, aggregate: str = "sum", eps: float = 1e-7, random_state: int = 0,
            value_range=None, preprocess=None, image_shape=None, data_summary: dict | None = None,
            progress: bool = True, passes=None) -> Analysis:
    """Find the m most important neurons of ``layer`` over ``x`` and cluster their activations.

    Parameters
    ----------
    model : keras.Model or Network
    x : array (n, *input_shape)
        Training inputs: images in the model's value range (see ``value_range``). Or shards that Ray workers
        read and hold themselves (``idcgen.distributed.Workers.shards``; labels are the shards' own, y=None).
    y : array (n,), optional
        Labels; needed for ``relevance_of="label"``, ``correct_only`` and ``only_class``.
    layer : str, default: the last hidden layer before the logits
    m : int, default 8
    clusters : the k values tried per neuron, default 2..5; the silhouette picks one
    cluster_method : "silhouette" (DeepImportance's, default) or "zero-aware" (a ReLU's exact zeros form
        their own cluster, k is chosen on the positive values; :func:`idcgen.clusters.cluster_neuron`)
    relevance_of : "predicted" (default) or "label": which logit the relevance starts from
    correct_only : keep only inputs the model classifies correctly
    only_class : keep only inputs of this label (the paper's per-class setting)
    aggregate : "sum" (cumulative relevance, default), "abs" or "mean"
    value_range : (low, high) of the images the model takes; default: read from the model (0..255 when
        it starts with ``Rescaling(1/255)``), else [0, 1]. Recorded, with the inputs' observed range.
    preprocess : a spec such as "tf" or "mean=0.5,std=0.25" applied between image and model
        (:func:`idcgen.convention.parse_preprocess`); recorded and re-applied when the analysis is loaded.
    image_shape : (h, w, c) images for a model taking flat or channel-less inputs (for the fuzzer)
    passes : what runs the passes over ``x``: :class:`LocalPasses` (default) or, from
        :func:`idcgen.distributed.analyze`, Ray workers; called as ``passes(network, layer, eps, x)``, giving an
        object with ``totals``, ``activations`` and ``clusters`` (as :class:`LocalPasses`)
    """
    network, convention = network_with_convention(model, value_range=value_range, preprocess=preprocess,
                                                  image_shape=image_shape)
    layer = network.check_subject_layer(layer or network.default_layer())
    width = network.neuron_count(layer)
    top_neurons(np.zeros(width), m)  # validates m against the layer before any work
    if relevance_of not in ("predicted", "label"):
        raise ParameterError(f"The 'relevance_of' parameter must be 'predicted' or 'label'. Got {relevance_of!r} instead.")
    if aggregate not in AGGREGATES:
        raise ParameterError(f"The 'aggregate' parameter must be one of {AGGREGATES}. Got {aggregate!r} instead.")
    check_cluster_method(cluster_method)
    sharded = getattr(x, "read_by_workers", False)   # shards Ray workers read and hold (idcgen.distributed.shards)
    if sharded:
        if y is not None:
            raise ParameterError("sharded inputs carry their own labels (each shard's y); pass y=None")
        y = x.load()
    else:
        x = fit_to_model(x, network.input_shape)
    check_scale(np.asarray(x.observed_range) if sharded else x, convention, what="the training inputs")
    check_int("random_state", random_state, 0)
    regression = network.task == "regression"
    if regression and (relevance_of == "label" or correct_only or only_class is not None):
        raise InputError("relevance_of='label', correct_only and only_class are for classifiers; a regression "
                         "model's relevance starts from its one output, and its inputs have no class")
    if y is not None:
        y = check_labels(x, y, task="regression") if regression else check_class_labels(x, y, network.n_classes)
    elif relevance_of == "label" or correct_only or only_class is not None:
        raise InputError("labels are needed for relevance_of='label', correct_only or only_class")
    # of the inputs as given, before correct_only / only_class select (sharded: of the shards' own fingerprints)
    # hashed on a thread while the passes run (hashlib lets go of the GIL): 0.3 s for 60,000 MNIST images,
    # which the driver would otherwise add to a sharded pass's time
    hashing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="idcgen-fingerprint")
    fingerprint = hashing.submit(str, x.fingerprint) if sharded else hashing.submit(data_fingerprint, x, y)
    hashing.shutdown(wait=False)
    if only_class is not None:
        keep = y == only_class
        if not keep.any():
            raise InputError(f"no inputs of class {only_class} (classes present: {sorted(set(y.tolist()))})")
        if sharded:
            x.select(keep)
            y = y[keep]
        else:
            x, y = x[keep], y[keep]

    timings = {}
    start = time.perf_counter()
    # Streamed: the relevance pass keeps per-neuron totals (and the layer's activations when they are small),
    # else a forward pass then keeps only the m important neurons' activations, so memory holds a batch and
    # at most max(ACTIVATIONS_IN_ONE_PASS, inputs x m floats), whatever the layer's width.
    passes = (passes or (x.passes if sharded else LocalPasses))(network, layer, eps, x)
    one_pass = len(x) * width * 4 <= ACTIVATIONS_IN_ONE_PASS
    with tqdm(total=len(x), desc="relevance", unit="input", disable=not progress, leave=False) as bar:
        signed, absolute, n_used, predictions = passes.totals(
            y if relevance_of == "label" else None, labels=y if correct_only else None,
            keep_activations=one_pass, progress=bar)
    timings["relevance"] = time.perf_counter() - start
    if n_used == 0:
        raise InputError("no input is classified correctly; cannot use correct_only")
    scores = {"sum": signed, "abs": absolute, "mean": signed / n_used}[aggregate]
    neurons = top_neurons(scores, m)
    start = time.perf_counter()
    acts = passes.activations(neurons, np.flatnonzero(predictions == y) if correct_only else np.arange(len(x)))
    timings["activations"] = time.perf_counter() - start

    start = time.perf_counter()
    found = passes.clusters(acts, neurons, tuple(clusters), cluster_method, random_state, progress)
    timings["clusters"] = time.perf_counter() - start
    notes = [f"neuron {c.neuron}: {c.note}" for c in found if c.note] + \
        ([network.head_note] if getattr(network, "head_note", None) else [])

    data = dict(data_summary or {})
    accuracy = None if y is None or regression else float((predictions == y).mean())
    low, high = x.observed_range if sharded else (float(x.min()), float(x.max()))
    data.update(n_inputs=int(len(x)), n_used=n_used, accuracy=accuracy, fingerprint=fingerprint.result(),
                observed_range=[low, high])
    if regression and y is not None:  # the model's error on the labels, in the output's units
        outputs = x.predict() if sharded else network.predict(x)
        data.update(mse=float(np.mean((outputs.astype(np.float64) - y) ** 2)))
    warnings = []
    n_classes = network.n_classes
    if accuracy is not None and n_classes > 2 and accuracy < 1.5 / n_classes:
        lo, hi = convention.value_range
        warnings.append(f"the model classifies {accuracy:.1%} of the training inputs correctly, near chance for "
                        f"{n_classes} classes: the inputs are likely scaled twice or not at all (they span "
                        f"[{low:g}, {high:g}]; the model is taken to want images in [{lo:g}, {hi:g}], "
                        f"{convention.source}); check --scale, --value-range and --preprocess")
    config = dict(task=network.task, layer=layer, m=int(m), clusters=[int(k) for k in clusters], cluster_method=cluster_method,
                  relevance_of=relevance_of,
                  correct_only=correct_only, only_class=only_class, aggregate=aggregate, eps=eps,
                  random_state=random_state, rule="LRP-epsilon", neuron="channel (spatial mean)"
                  if len(network.output_shape(layer)) > 2 else "unit",
                  input_convention=convention.to_dict())
    return Analysis(layer=layer, neurons=neurons, importance=scores, clusters=found,
                    fingerprint=network.fingerprint(), config=config, data=data, timings=timings,
                    versions=versions(), notes=notes + warnings, warnings=warnings, network=network)


def find_analysis(network: Network, folders: Sequence[str | os.PathLike], *, layer: str | None = None,
                  m: int | None = None, cluster_method: str | None = None,
                  clusters: Sequence[int] | None = None) -> tuple[Analysis | None, Path | None, list[Path]]:
    """Look for a saved analysis of this model (same weights fingerprint) in ``folders`` and their
    subfolders (with ``layer``, ``m``, ``cluster_method`` and the k values tried, ``clusters``, if given);
    returns the newest match and its folder (or None, None) and the folders searched."""
    fingerprint = network.fingerprint()
    wrapped_with = network.__dict__.get("_idcgen_convention") or convention_of(network.model)
    preprocess = None if wrapped_with is None or wrapped_with.preprocess is None else wrapped_with.preprocess.spec
    value_range = None if wrapped_with is None else [float(v) for v in wrapped_with.value_range]
    searched, matches = [], []
    for folder in map(Path, folders):
        searched.append(folder)
        if not folder.is_dir():
            continue
        for meta_path in list(folder.glob("analysis.json")) + list(folder.glob("*/analysis.json")):
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                continue
            if meta.get("model_fingerprint") != fingerprint:
                continue
            if (layer and meta.get("layer") != layer) or (m is not None and meta.get("m") != m):
                continue
            config = meta.get("config", {})
            if cluster_method and config.get("cluster_method", "silhouette") != cluster_method:
                continue
            if clusters is not None and config.get("clusters") != [int(k) for k in clusters]:
                continue
            if config.get("only_class") is not None or config.get("correct_only"):
                continue  # only an all-classes analysis stands in for the model's
            recorded = config.get("input_convention") or {}
            if recorded.get("preprocess") != preprocess:
                continue  # made with other preprocessing between image and model
            if value_range is not None and [float(v) for v in recorded.get("value_range", (0, 1))] != value_range:
                continue  # made for images in another range
            matches.append(meta_path.parent)
    if not matches:
        return None, None, searched
    newest = max(matches, key=lambda p: (p / "analysis.json").stat().st_mtime)
    return Analysis.load(newest, model=network), newest, searched
