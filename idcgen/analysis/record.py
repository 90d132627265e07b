"""The analysis record: the important neurons of a layer and their activation clusters, saved once, reused.

An ``Analysis`` maps any input set to combinations and measures IDC (docs/design.md, "Coverage"); it is
read, written and summarised with numpy alone, and runs a model only through the framework protocol
(:class:`idcgen.framework.Network`) once bound to one. :func:`idcgen.analysis.analyze` makes it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import shutil
import sys
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import __version__
from ..clusters import NeuronClusters
from ..convention import InputConvention, check_scale
from ..coverage import Combinations, CoverageResult, CoverageTracker
from ..data import as_array, fit_to_model
from ..errors import AnalysisMismatchError, InputError, LayerError, Param, ParameterError
from ..framework import ForwardNetwork, network_with_convention
from ..threads import hash_into

FORMAT_VERSION = 1
#: What makes two saved analyses the same one (with the training data's fingerprint): see Analysis.matches_saved.
SAME_ANALYSIS_KEYS = (
    "format_version",
    "model_fingerprint",
    "layer",
    "important_neurons",
    "clusters",
    "combinations_total",
    "config",
)


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    def installed(name):
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    return {
        "idcgen": __version__,
        "python": platform.python_version(),
        "tensorflow": installed("tensorflow-cpu") or installed("tensorflow"),
        "keras": installed("keras"),
        "numpy": np.__version__,
        "scikit-learn": installed("scikit-learn"),
    }


#: the notes of analyses bound by layer to an export, said once per process (Analysis._bind_by_layer)
_SAID: set[str] = set()


@dataclass
class Analysis:
    """Important neurons of ``layer`` with their centroids, for one model (by weights fingerprint)."""

    layer: str
    neurons: np.ndarray  # (m,) indices of the important neurons, most important first
    importance: np.ndarray  # (layer neurons,) importance of every neuron of the layer
    clusters: list[NeuronClusters]  # one per important neuron, same order
    fingerprint: str
    config: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    network: ForwardNetwork | None = field(default=None, repr=False, compare=False)
    device: dict = field(default_factory=dict, compare=False)  # where it was made: information only
    #: (2, reached) int64: the combination ids the analysed (clustered) inputs reach, and how many reach each
    #: (idc-rarity's counts); None for an analysis saved before they were recorded
    training_counts: np.ndarray | None = field(default=None, repr=False, compare=False)
    #: the model's order-free weights digest (ForwardNetwork.weights_digest): the same weights held otherwise
    #: (the model's TorchScript file) take the analysis too; None for an analysis saved before it was recorded
    weights_digest: str | None = field(default=None, compare=False)

    def __post_init__(self):
        self.combinations = Combinations([c.centroids for c in self.clusters])

    def __repr__(self) -> str:  # a notebook shows this: what the analysis is, not its arrays
        bound = "unbound: pass model= or call bind(model)" if self.network is None else "bound to its model"
        return (
            f"Analysis(layer={self.layer!r}, m={self.m}, neurons={[int(n) for n in self.neurons]}, "
            f"clusters={[c.k for c in self.clusters]}, combinations={self.total}, {bound})"
        )

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
        if isinstance(model, ForwardNetwork):
            network = model
            wrapped = network.convention
            have = None if wrapped is None or wrapped.preprocess is None else wrapped.preprocess.spec
            want = None if recorded.preprocess is None else recorded.preprocess.spec
            if have != want:
                raise AnalysisMismatchError(
                    f"this analysis was made with preprocessing {want or 'none'} but the model is given with "
                    f"{have or 'none'}; pass --preprocess {want} (or the model wrapped with it)"
                    if want
                    else f"this analysis was made without preprocessing but the model is given with {have}; drop --preprocess"
                )
        else:  # a framework's model: put the recorded preprocessing in front of it (the image shape is the fuzzer's)
            network, _ = network_with_convention(model, recorded=dataclasses.replace(recorded, image_shape=None))
        got = network.fingerprint()
        if self.made_for(network, got):
            pass
        elif getattr(network, "analysis_by_layer", False):
            self._bind_by_layer(network)
        else:
            raise AnalysisMismatchError(
                f"this analysis was made for another model (weights fingerprint {self.fingerprint[:12]}, "
                f"this model {got[:12]}){self._other_weights(network)}; run `idcgen analyze` on this model first"
            )
        network.step(self.layer)  # LayerError for a layer the model lacks
        self.network = network
        return self

    def made_for(self, network: ForwardNetwork, fingerprint: str | None = None) -> bool:
        """Whether ``network`` holds the analysed model's weights: its fingerprint, or the same weights in
        another order (a traced TorchScript file of a ``.pt2``: its converter holds them in its own order)."""
        if (fingerprint or network.fingerprint()) == self.fingerprint:
            return True
        return self.weights_digest is not None and network.weights_digest() == self.weights_digest

    def _other_weights(self, network: ForwardNetwork) -> str:
        """Why a model is refused where its weights digest cannot tell: an analysis saved before it was recorded."""
        if self.weights_digest is None and network.weights_digest() is not None:
            return (
                " and records no order-free weights digest (saved before idcgen recorded one), so the same "
                "weights in another file format are not recognised"
            )
        return ""

    def _bind_by_layer(self, network: ForwardNetwork) -> None:
        """An export (ONNX) of the analysed model cannot carry its weights fingerprint (weights re-laid out,
        folded or quantised): it takes the source's analysis when it has the subject layer by name with the
        same neurons, said once on stderr (docs/models.md, "Deployed ONNX exports")."""
        width = len(self.importance)
        try:
            have = network.neuron_count(self.layer)
        except LayerError:
            raise AnalysisMismatchError(
                f"this analysis was made for another model (weights fingerprint {self.fingerprint[:12]}) and "
                f"this export has no layer {self.layer!r} to take it by name; analyse a model with that layer"
            ) from None
        if have != width:
            raise AnalysisMismatchError(
                f"this analysis was made for another model (weights fingerprint {self.fingerprint[:12]}): its "
                f"layer {self.layer!r} has {width} neurons, this export's {have}; it is not an export of that model"
            )
        note = (
            f"analysis of another model (fingerprint {self.fingerprint[:12]}) used on this export by layer "
            f"{self.layer!r} and its {width} neurons, not by weights"
        )
        if note not in _SAID:  # once per process, not per bind (a Ray worker, a campaign's resume bind again)
            _SAID.add(note)
            print(f"note: {note}", file=sys.stderr)

    def _network(self, model=None) -> ForwardNetwork:
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
        """(n, m) activations of the important neurons on ``x`` (any shape :func:`idcgen.fit_to_model` fits)."""
        network = self._network(model)
        _, (acts,) = network.forward(fit_to_model(x, network.input_shape), (self.layer,))
        return self.select(acts)

    def ids(self, x: np.ndarray, model=None) -> np.ndarray:
        """Combination id of each input (n,)."""
        return self.combinations.ids(self.activations(x, model))

    def tracker(self, x: np.ndarray | None = None, model=None) -> CoverageTracker:
        """A :class:`CoverageTracker` of this analysis' combinations, holding what ``x`` covers (empty without
        it); ``x`` is checked to be on the training inputs' scale."""
        tracker = CoverageTracker(self.total)
        if x is not None:
            x = as_array(x)  # a Dataset's inputs, a torch tensor
            self.check_inputs(x)
            tracker.update(self.ids(x, model))
        return tracker

    def coverage(self, x: np.ndarray, model=None) -> CoverageResult:
        """IDC of the input set ``x``: the share of combinations it reaches. ``x``: (n, *input_shape), (n, h, w)
        for one channel, a Dataset or a torch tensor, on the training inputs' scale; ``model``: binds first."""
        return self.tracker(x, model).result()

    # ---- persistence ------------------------------------------------------------------------
    def summary(self) -> dict:
        return {
            "format_version": FORMAT_VERSION,
            "layer": self.layer,
            "m": self.m,
            "important_neurons": [int(n) for n in self.neurons],
            "importance_of_important_neurons": [float(self.importance[n]) for n in self.neurons],
            "clusters": [
                {
                    "neuron": int(c.neuron),
                    "k": c.k,
                    "centroids": [float(v) for v in c.centroids],
                    "silhouette": c.silhouette,
                    "silhouette_per_k": {str(k): float(v) for k, v in c.scores.items()},
                    "note": c.note,
                }
                for c in self.clusters
            ],
            "combinations_total": int(self.total),
            "model_fingerprint": self.fingerprint,
            **({} if self.weights_digest is None else {"weights_digest": self.weights_digest}),
            "config": self.config,
            "data": self.data,
            "timings_seconds": self.timings,
            "versions": self.versions,
            "device": self.device,
            "notes": self.notes,
            "warnings": self.warnings,
        }

    def digest(self) -> str:
        """Digest of the saved record (analysis.json as read back, and the arrays): see content_digest."""
        counts = () if self.training_counts is None else (self.training_counts,)
        return content_digest(json.loads(json.dumps(self.summary())), self.neurons, self.importance, *counts)

    def matches_saved(self, folder: str | os.PathLike) -> bool:
        """Whether ``folder`` holds this same analysis: same model, training data, settings and result
        (timings and versions aside)."""
        try:
            meta = json.loads((Path(folder) / "analysis.json").read_text())
        except (OSError, ValueError):
            return False
        mine = json.loads(json.dumps(self.summary()))  # as it would read back from disk
        same = lambda a, b: json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # noqa: E731 (NaN == NaN)
        return (
            isinstance(meta, dict)
            and all(same(meta.get(k), mine[k]) for k in SAME_ANALYSIS_KEYS)
            and same((meta.get("data") or {}).get("fingerprint"), mine["data"].get("fingerprint"))
        )

    def save(self, folder: str | os.PathLike, *, overwrite: bool = False) -> Path:
        """Write ``analysis.json`` (for people) and ``arrays.npz`` into ``folder``, atomically.

        A folder already holding this same analysis is left as it is, unless ``overwrite=True`` (then it is
        rewritten, with this run's timings); one holding another analysis is replaced only with
        ``overwrite=True`` (work is never lost silently); any other non-empty folder is refused."""
        folder = Path(folder)
        if not overwrite and self.matches_saved(folder):
            return folder
        check_save_target(folder, overwrite=overwrite)
        folder.parent.mkdir(parents=True, exist_ok=True)
        # os.mkdir, not tempfile.mkdtemp (always 0700): the folder gets the permissions the umask gives
        tmp = folder.with_name(f".{folder.name}.tmp-{uuid.uuid4().hex[:8]}")
        tmp.mkdir()
        old = folder.with_name(f".{folder.name}.old")
        try:
            digest = self.digest()
            (tmp / "analysis.json").write_text(json.dumps(dict(self.summary(), digest=digest), indent=2) + "\n")
            # the digest twice: a record whose digest line was deleted is told from one saved before digests
            counts = {} if self.training_counts is None else {"training_counts": self.training_counts}
            np.savez(
                tmp / "arrays.npz",
                neurons=self.neurons,
                importance=self.importance,
                digest=np.array(digest),
                **counts,  # type: ignore[arg-type]  # numpy's stub: a key could be allow_pickle (it is not)
            )
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
        i = 0
        while True:  # not itertools.count: mypy sees that this loop only ends by a return
            i += 1
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
        return (
            f"{model_name}_{self.layer}_m{self.m}"
            + ("" if method == "silhouette" else f"_{method}")
            + ("" if fingerprint is None else f"_{fingerprint}")
        )

    @classmethod
    def load(cls, folder: str | os.PathLike, model=None) -> "Analysis":
        """The analysis saved in ``folder`` (by :meth:`save` or ``idcgen analyze``), checked against its digest.
        ``model`` (a framework's model, a model file's path or a Network) binds it for measuring, refused when
        its weights differ from the analysed model's; without it, call :meth:`bind` before :meth:`coverage`."""
        folder = Path(folder)
        meta_path = folder / "analysis.json"
        if not meta_path.is_file():
            raise InputError(f"not an analysis folder (no analysis.json): {folder}")
        try:
            meta = json.loads(meta_path.read_text())
            version = meta.get("format_version") if isinstance(meta, dict) else None
            if isinstance(version, int) and version > FORMAT_VERSION:
                raise InputError(
                    f"analysis {folder} was saved by a newer idcgen (format version {version}; this "
                    f"one reads {FORMAT_VERSION}): upgrade idcgen, or run `idcgen analyze` again"
                )
            with np.load(folder / "arrays.npz") as arrays:
                neurons, imp = arrays["neurons"], arrays["importance"]
                kept = str(arrays["digest"]) if "digest" in arrays.files else None
                counts = arrays["training_counts"] if "training_counts" in arrays.files else None
            clusters = [
                NeuronClusters(
                    neuron=c["neuron"],
                    centroids=np.asarray(c["centroids"], np.float64),
                    silhouette=c["silhouette"],
                    scores={int(k): v for k, v in c["silhouette_per_k"].items()},
                    note=c["note"],
                )
                for c in meta["clusters"]
            ]
            if meta.get("format_version") != FORMAT_VERSION:
                raise ValueError(f"format version {meta.get('format_version')!r}, expected {FORMAT_VERSION}")
            if len(clusters) != len(neurons):
                raise ValueError(f"{len(neurons)} important neurons but {len(clusters)} cluster sets")
            recorded = meta.pop("digest", None)  # analyses saved before digests were recorded have none
            if recorded is None and kept is not None:
                raise InputError(
                    f"analysis {folder} was edited or damaged since it was saved (the digest line of its "
                    "analysis.json is gone): run `idcgen analyze` again, or restore the folder"
                )
            if (
                recorded is not None
                and content_digest(meta, neurons, imp, *[a for a in [counts] if a is not None]) != recorded
            ):
                raise InputError(
                    f"analysis {folder} was edited or damaged since it was saved (its digest no "
                    "longer matches): run `idcgen analyze` again, or restore the folder"
                )
            analysis = cls(
                layer=meta["layer"],
                neurons=neurons,
                importance=imp,
                clusters=clusters,
                fingerprint=meta["model_fingerprint"],
                config=meta["config"],
                data=meta["data"],
                timings=meta["timings_seconds"],
                versions=meta["versions"],
                notes=meta["notes"],
                warnings=meta.get("warnings", []),
                device=meta.get("device", {}),
                training_counts=counts,
                weights_digest=meta.get("weights_digest"),
            )
        except (
            OSError,
            ValueError,
            KeyError,
            TypeError,
            EOFError,
            zipfile.BadZipFile,
        ) as exc:  # truncated or empty npz
            raise InputError(f"analysis folder {folder} is incomplete or corrupt: {exc}") from None
        return analysis.bind(model) if model is not None else analysis


def check_save_target(folder: str | os.PathLike, *, overwrite: bool = False) -> None:
    """Refuse to save an analysis into ``folder`` when that would lose something: a folder holding other
    files, or (unless ``overwrite``) one holding an analysis. Callers check before a long analysis."""
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or (any(folder.iterdir()) and not (folder / "analysis.json").exists())):
        raise InputError(f"{folder} exists and is not an analysis folder: refusing to replace it; choose another --out")
    if (folder / "analysis.json").exists() and not overwrite:
        raise InputError(
            f"{folder} already holds an analysis: refusing to replace it; pass ",
            Param("overwrite", True),
            " to replace it, or save elsewhere",
        )


def content_digest(meta: dict, neurons: np.ndarray, importance: np.ndarray, *more: np.ndarray) -> str:
    """16 hex digits over an analysis' record (every field but the digest) and arrays (``more``: the training
    counts, where recorded): a centroid edited by hand, or a damaged file, would otherwise be measured with
    silently."""
    digest = hashlib.blake2b(digest_size=8)
    digest.update(json.dumps(meta, sort_keys=True).encode())
    for a in (neurons, importance, *more):
        a = np.ascontiguousarray(a)
        digest.update(f"{a.shape}{a.dtype}".encode())
        digest.update(a.tobytes())  # small arrays; a memoryview cast refuses a zero in a shape of several axes
    return digest.hexdigest()


def data_fingerprint(x: np.ndarray, y: np.ndarray | None = None) -> str:
    """8 hex digits identifying the inputs (and labels) analysed: their shapes, dtypes and bytes."""
    digest = hashlib.blake2b(digest_size=4)
    for a in (x,) if y is None else (x, y):
        a = np.ascontiguousarray(a)
        digest.update(f"{a.shape}{a.dtype}".encode())
        hash_into(digest, a)  # above 256 MB in parts on the pool
    return digest.hexdigest()
