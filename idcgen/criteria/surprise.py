"""Surprise adequacy (Kim, Feldt, Yoo, ICSE 2019): LSC and DSC on the activations of one layer.

The surprise of an input is measured against the training activations of its **predicted** class;
the training activations are grouped by the class the model predicts for them (``group="predicted"``,
as SA's authors do) or by their labels (``group="label"``). Surprise coverage cuts [lower, upper] into
``n_buckets`` equal buckets and reports the share hit. Values outside [lower, upper] (and undefined
ones) hit **no** bucket: an input more surprising than the upper bound adds nothing, and the bucket
count never exceeds ``n_buckets`` (docs/design.md, "Other criteria", says how this differs from SA's
own script).

Both criteria compare each input with thousands of training points; the work is done in blocks of
at most ``_BLOCK_ELEMENTS`` float64 distances (64 MiB), with matrix products.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from idcgen.data import fit_to_model
from idcgen.errors import InputError, ParameterError

from ..checks import check_choice, check_int, check_real
from .base import Criterion, as_network, check_batch_size, raw_inputs

__all__ = ["LikelihoodSurpriseCoverage", "DistanceSurpriseCoverage", "MahalanobisSurpriseCoverage", "ClassMahalanobis"]

logger = logging.getLogger(__name__)

_BLOCK_ELEMENTS = 1 << 23


def _row_blocks(n_rows: int, n_ref: int):
    rows = max(1, _BLOCK_ELEMENTS // max(1, n_ref))
    for start in range(0, n_rows, rows):
        yield slice(start, min(start + rows, n_rows))


def _augment(points: np.ndarray, last: np.ndarray | float) -> np.ndarray:
    """(n, d) -> (n, d + 1) C-contiguous float64 with ``last`` as the extra column."""
    out = np.empty((len(points), points.shape[1] + 1), dtype=np.float64)
    out[:, :-1] = points
    out[:, -1] = last
    return out


def search_keys(ref: np.ndarray) -> np.ndarray:
    """The (n, d + 1) rows [-2 r, |r|^2] that :func:`nearest` ranks reference points with."""
    return _augment(-2.0 * ref, np.einsum("ij,ij->i", ref, ref))


def nearest(
    queries: np.ndarray, ref: np.ndarray, keys: np.ndarray | None = None, exclude: slice | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Nearest reference point of each query: (index (n,) int64, Euclidean distance (n,) float64).

    ``keys``: ``search_keys(ref)`` if already made. ``exclude``: a slice of reference points not to
    consider. The search ranks by |r|^2 - 2 q.r (that is |q - r|^2 less the row constant |q|^2): one
    matrix product per block, with the |r|^2 column folded in. The distance is then recomputed
    directly from the chosen pair, so it carries no cancellation error.
    """
    keys = search_keys(ref) if keys is None else keys
    index = np.empty(len(queries), dtype=np.int64)
    dist = np.empty(len(queries), dtype=np.float64)
    for block in _row_blocks(len(queries), len(ref)):
        q = queries[block]
        key = _augment(q, 1.0) @ keys.T
        if exclude is not None:
            key[:, exclude] = np.inf
        j = key.argmin(axis=1)
        index[block] = j
        diff = q - ref[j]
        dist[block] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    return index, dist


#: scipy's reasons for refusing a KDE, in a user's words (its own go on with advice on calling gaussian_kde)
_KDE_FAILURES = {
    "Number of dimensions is greater than number of samples": "fewer inputs than dimensions",
    "lower-dimensional subspace": "the activations lie in a lower-dimensional subspace",
    "not positive definite": "the kernel covariance is not positive definite",
}


def kde_failure(exc: Exception) -> str:
    """Why a class got no KDE, in one line: a known reason in a few words, any other one whole (a cut one read
    "... matrix, which cannot ")."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    for known, words in _KDE_FAILURES.items():
        if known in message:
            return f"{words}: their covariance matrix is singular" if "singular" in message else words
    return message


class ClassDensity:
    """A Gaussian KDE of one class's training activations, fitted by ``scipy.stats.gaussian_kde``
    (Scott's rule, as SA's authors) and evaluated with matrix products in blocks: scipy's own
    ``logpdf`` takes about 1 s per 1,000 points against 6,000 84-d training points, this a few tens
    of ms.

    With z = L^-1 x (L L^T the KDE's kernel covariance, n points, d dimensions):
    log p(x) = logsumexp_i(z.z_i - |z_i|^2 / 2) - |z|^2 / 2 - log n - d/2 log(2 pi) - log det L.
    """

    def __init__(self, points: np.ndarray):
        from scipy.linalg import solve_triangular  # here, not at import: scipy.stats costs a second to load
        from scipy.stats import gaussian_kde

        kde = gaussian_kde(points.T)  # ValueError / LinAlgError on too few points or a singular covariance
        chol = np.linalg.cholesky(kde.covariance)
        # z = x @ whiten, with whiten = L^-T: one small matrix product per batch instead of a solve
        self.whiten = solve_triangular(chol, np.eye(len(chol)), lower=True).T
        z = points @ self.whiten
        self.keys = _augment(z, -0.5 * np.einsum("ij,ij->i", z, z))
        n, d = points.shape
        self.log_norm = -np.log(n) - 0.5 * d * np.log(2 * np.pi) - np.log(np.diag(chol)).sum()

    def logpdf(self, x: np.ndarray) -> np.ndarray:
        """(m, d) -> (m,) log density."""
        z = np.asarray(x, dtype=np.float64) @ self.whiten
        out = np.empty(len(x), dtype=np.float64)
        for block in _row_blocks(len(x), len(self.keys)):
            e = _augment(z[block], 1.0) @ self.keys.T
            top = e.max(axis=1, keepdims=True)
            e -= top
            np.exp(e, out=e)
            out[block] = np.log(e.sum(axis=1)) + top[:, 0]
        return out - 0.5 * np.einsum("ij,ij->i", z, z) + self.log_norm


class ClassMahalanobis:
    """MDSA's model (Kim, Feldt and Yoo, TOSEM 2022): per group, the mean of its training activations and the
    pseudo-inverse of their covariance, over the neurons whose variance over all the training inputs is at
    least ``var_threshold``; a group of fewer than two inputs has none."""

    def __init__(self, acts: np.ndarray, groups: np.ndarray, var_threshold: float = 1e-5):
        acts = np.asarray(acts, dtype=np.float64)
        self.kept = acts.var(axis=0) >= var_threshold
        if not self.kept.any():
            raise InputError(
                "MDSA: every neuron of the layer is (nearly) constant over the training inputs; choose another layer"
            )
        self.models: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for g in np.unique(groups):
            own = acts[groups == g][:, self.kept]
            if len(own) < 2:
                continue
            mean = own.mean(axis=0)
            cov = np.cov(own, rowvar=False).reshape(len(mean), len(mean))
            self.models[int(g)] = (mean, np.linalg.pinv(cov, hermitian=True))

    def distance(self, acts: np.ndarray, groups: np.ndarray) -> np.ndarray:
        """(n,) the Mahalanobis distance of each activation to its group's mean; NaN for a group without one."""
        acts = np.asarray(acts, dtype=np.float64)
        out = np.full(len(acts), np.nan)
        for g in np.unique(groups):
            model = self.models.get(int(g))
            if model is None:
                continue
            rows = groups == g
            d = acts[rows][:, self.kept] - model[0]
            out[rows] = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", d, model[1], d), 0.0))
        return out


class _SurpriseCriterion(Criterion):
    """Surprise of each input on one layer, bucketed. Learns ``layer_``, ``width_``, ``classes_``."""

    unit = "buckets"
    GROUPS = ("predicted", "label")

    def _validate_params(self) -> None:
        owner = type(self).__name__
        if self.layer is not None and not isinstance(self.layer, str):
            raise ParameterError(
                f"The 'layer' parameter of {owner} must be a layer name or None. Got {self.layer!r} instead."
            )
        check_int("n_buckets", self.n_buckets, 1, owner=owner)
        check_real("lower", self.lower, owner=owner)
        check_real("upper", self.upper, self.lower, None, closed="neither", owner=owner)
        check_choice("group", self.group, self.GROUPS, owner=owner)

    def fit(self, network, x_train, y_train=None, **kwargs) -> "_SurpriseCriterion":
        """As :meth:`Criterion.fit`; ``y_train`` is needed with ``group="label"`` and unused otherwise."""
        self._validate_params()
        if self.group == "label" and y_train is None:
            raise ParameterError(
                f"{type(self).__name__} with group='label' groups the training inputs by "
                "their labels: pass y_train (or use group='predicted')."
            )
        if self.group == "label" and as_network(network).task == "regression":
            raise ParameterError(
                f"{type(self).__name__} with group='label' groups inputs by class, and a regression "
                "model has none: use group='predicted' (one group)"
            )
        return super().fit(network, x_train, y_train, **kwargs)

    def _fit_layers(self, network) -> tuple[str, ...]:
        name = network.default_layer() if self.layer is None else self.layer
        self.layer_ = network.layer(name).name  # LayerError for an unknown name
        self.width_ = network.neuron_count(self.layer_)
        return (self.layer_,)

    def forward_layers(self) -> tuple[str, ...]:
        return (self.layer_,)

    def _fit_start(self, network, layers):
        return {"acts": [], "classes": []}

    def _fit_batch(self, state, probs, acts, y) -> None:
        state["acts"].append(np.asarray(acts[0], dtype=np.float64))
        state["classes"].append(y if self.group == "label" else np.asarray(probs).argmax(axis=1))

    def _fit_end(self, state) -> None:
        self._fit_classes(np.concatenate(state["acts"]), np.concatenate(state["classes"]).astype(np.int64))
        self.total_ = int(self.n_buckets)

    def _fit_classes(self, acts: np.ndarray, classes: np.ndarray) -> None:
        raise NotImplementedError

    def _surprise(self, acts: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    # ---- measuring --------------------------------------------------------------------------------
    def surprise_from(self, probs: np.ndarray, acts) -> np.ndarray:
        """(n,) float64 surprise of each input from one forward pass on ``(self.layer_,)``; NaN where
        undefined (a predicted class with no fitted training data)."""
        self._check_fitted()
        self._check_widths(acts, (self.width_,), (self.layer_,))
        return self._surprise(np.asarray(acts[0], dtype=np.float64), np.asarray(probs).argmax(axis=1))

    def surprise(self, network, x, *, batch_size: int = 1024) -> np.ndarray:
        """(n,) float64 surprise (LSA or DSA) of each input, batched."""
        self._check_fitted()
        check_batch_size(type(self).__name__, batch_size)
        network = as_network(network)
        x = raw_inputs(x, network)
        out = []
        for start in range(0, len(x), batch_size):
            probs, acts = network.forward(
                fit_to_model(x[start : start + batch_size], network.input_shape), self.forward_layers()
            )
            out.append(self.surprise_from(probs, acts))
        return np.concatenate(out) if out else np.zeros(0)

    def buckets(self, values: Any) -> np.ndarray:
        """(n,) int64 bucket of each surprise value; -1 outside [lower, upper] or undefined."""
        self._validate_params()
        v = np.asarray(values, dtype=np.float64)
        span = self.upper - self.lower
        inside = np.isfinite(v) & (v >= self.lower) & (v <= self.upper)
        position = np.where(inside, (np.where(inside, v, self.lower) - self.lower) * self.n_buckets / span, 0.0)
        return np.where(inside, np.minimum(np.floor(position).astype(np.int64), self.n_buckets - 1), -1)

    def features_from(self, probs, acts) -> np.ndarray:
        return self.buckets(self.surprise_from(probs, acts)).reshape(-1, 1)


class LikelihoodSurpriseCoverage(_SurpriseCriterion):
    """LSC: likelihood-based surprise adequacy, LSA(x) = -log p_c(x), with p_c a Gaussian KDE of the
    training activations of x's predicted class c; coverage of ``n_buckets`` buckets on [lower, upper].

    Neurons whose variance within some class is below ``var_threshold`` are dropped before the KDEs
    are fitted (as SA's authors do: such neurons make the KDE covariance singular). A class whose KDE
    cannot be fitted (fewer inputs than kept neurons, singular covariance) is skipped with a warning
    and listed in ``notes_``; inputs predicted as a class without a KDE have no LSA and hit no bucket.
    LSA can be negative (density above 1): below ``lower`` it hits no bucket either.

    Parameters
    ----------
    layer : layer name, default the last hidden layer before the logits.
    n_buckets : int >= 1, default 1000.
    lower, upper : the bucketed range, default [0, 2000] (the paper's setting).
    var_threshold : float >= 0, default 1e-5 (SA's variance filter).
    group : "predicted" (default: training inputs grouped by the class the model predicts, as SA's
        authors do) or "label" (by their labels; fit then needs y_train).
    components : "auto" (default), an int >= 1, or "none". The kept neurons are projected onto this many
        principal components of the training activations before the KDEs: a KDE in d dimensions needs more
        than d inputs per class, so on a layer wider than the classes' inputs no class had one. "auto"
        projects only then, onto one fewer than the median class's inputs; "none" (None) never, as SA's authors.

    Learned: ``layer_``, ``width_``, ``kept_neurons_`` (indices into the layer), ``projection_`` (None, or
    (mean, basis) of the principal components), ``classes_`` (classes with a KDE), ``densities_`` (class ->
    ClassDensity), ``notes_``, ``total_``, ``n_inputs_``.
    """

    name = "lsc"

    def __init__(
        self,
        *,
        layer: str | None = None,
        n_buckets: int = 1000,
        lower: float = 0.0,
        upper: float = 2000.0,
        var_threshold: float = 1e-5,
        group: str = "predicted",
        components: int | str = "auto",
    ):
        self.layer = layer
        self.n_buckets = n_buckets
        self.lower = lower
        self.upper = upper
        self.var_threshold = var_threshold
        self.group = group
        self.components = components

    def _validate_params(self) -> None:
        super()._validate_params()
        owner = type(self).__name__
        check_real("var_threshold", self.var_threshold, 0.0, None, owner=owner)
        if not (
            self.components in ("auto", "none", None)
            or isinstance(self.components, (int, np.integer))
            and not isinstance(self.components, bool)
            and self.components >= 1
        ):
            raise ParameterError(
                f"The 'components' parameter of {owner} must be 'auto', 'none' (or None) or an int >= 1. "
                f"Got {self.components!r} instead."
            )

    def _projection(self, acts: np.ndarray, classes: np.ndarray, kept: np.ndarray, notes: list):
        """(mean, basis) of the principal components the kept neurons are projected onto, or None."""
        sizes = np.bincount(np.unique(classes, return_inverse=True)[1])
        sizes = sizes[sizes >= 2]
        if self.components in ("none", None) or not sizes.size:
            return None
        if self.components == "auto":
            want = int(np.median(sizes)) - 1
            if kept.size <= want or want < 1:  # the KDEs fit as they are (or cannot, however projected)
                return None
            why = f"more than the {int(np.median(sizes))} inputs of the median class"
        else:
            want, why = int(self.components), f"components={self.components}"
            if want >= kept.size:
                return None
        rows = acts[:, kept].astype(np.float64)
        mean = rows.mean(axis=0)
        _, vectors = np.linalg.eigh(np.cov(rows - mean, rowvar=False))
        basis = vectors[:, ::-1][:, :want]  # eigh: ascending eigenvalues
        notes.append(
            f"{kept.size} neurons projected onto their {want} principal components ({why}); "
            "components=none keeps them all"
        )
        return mean, basis

    def _features(self, acts: np.ndarray) -> np.ndarray:
        """The kept neurons' activations, projected when a projection was fitted."""
        kept = acts[:, self.kept_neurons_]
        if self.projection_ is None:
            return kept
        mean, basis = self.projection_
        return (kept.astype(np.float64) - mean) @ basis

    def _fit_classes(self, acts: np.ndarray, classes: np.ndarray) -> None:
        labels = np.unique(classes)
        low_variance = np.zeros(acts.shape[1], dtype=bool)
        for label in labels:
            rows = acts[classes == label]
            if len(rows) >= 2:
                low_variance |= rows.var(axis=0) < self.var_threshold
        kept = np.flatnonzero(~low_variance)
        if kept.size == 0:
            raise InputError(
                f"LSC: every neuron of layer {self.layer_!r} varies less than var_threshold="
                f"{self.var_threshold} within some class; choose another layer."
            )
        densities, notes = {}, []
        if low_variance.any():
            notes.append(
                f"{int(low_variance.sum())} of {acts.shape[1]} neurons dropped (variance below "
                f"{self.var_threshold} within some class)"
            )
        self.kept_neurons_ = kept
        self.projection_ = self._projection(acts, classes, kept, notes)
        features = self._features(acts)
        for label in labels:
            rows = features[classes == label]
            try:
                densities[int(label)] = ClassDensity(rows)
            except (np.linalg.LinAlgError, ValueError) as exc:
                note = (
                    f"class {int(label)}: no KDE from {len(rows)} inputs x {rows.shape[1]} dimensions "
                    f"({kde_failure(exc)}); its inputs get no LSA"
                )
                logger.warning("LSC: %s", note)
                notes.append(note)
        if not densities:
            raise InputError(
                f"LSC: no class of the training data gives a KDE on layer {self.layer_!r} "
                f"({notes[-1]}); give more training inputs or choose a narrower layer."
            )
        self.densities_ = densities
        self.classes_ = np.array(sorted(densities), dtype=np.int64)
        self.notes_ = notes

    def _surprise(self, acts: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        out = np.full(len(acts), np.nan)
        kept = self._features(acts)
        for label in np.unique(predicted):
            density = self.densities_.get(int(label))
            if density is not None:
                rows = predicted == label
                out[rows] = -density.logpdf(kept[rows])
        return out


class DistanceSurpriseCoverage(_SurpriseCriterion):
    """DSC: distance-based surprise adequacy, DSA(x) = a / b, where a is the distance from x to x_a,
    its nearest training activation of x's predicted class, and b the distance from x_a to the nearest
    training activation of any other class; coverage of ``n_buckets`` buckets on [lower, upper].

    b = 0 (x_a duplicated in another class) gives DSA = inf, above every bucket. The b of a training
    point is computed when first needed and kept (a memo, not part of the fit).

    Parameters
    ----------
    layer : layer name, default the last hidden layer before the logits.
    n_buckets : int >= 1, default 1000.
    lower, upper : the bucketed range, default [0, 2] (the paper's setting).
    group : "predicted" (default, as SA's authors) or "label": how the training inputs are grouped
        into classes (the nearest own-class and other-class points).

    Learned: ``layer_``, ``width_``, ``train_activations_`` (n, width) float64 sorted by class,
    ``train_classes_`` (n,) sorted, ``classes_``, ``total_``, ``n_inputs_``.
    """

    name = "dsc"

    def __init__(
        self,
        *,
        layer: str | None = None,
        n_buckets: int = 1000,
        lower: float = 0.0,
        upper: float = 2.0,
        group: str = "predicted",
    ):
        self.layer = layer
        self.n_buckets = n_buckets
        self.lower = lower
        self.upper = upper
        self.group = group

    def fit(self, network, x_train, y_train=None, **kwargs) -> "DistanceSurpriseCoverage":
        if as_network(network).task == "regression":  # one group by design, not a data set short of a class
            raise InputError(
                "DSC needs training inputs of at least two classes, and a regression model has none "
                "(its distance is to the nearest input of another class): use lsc"
            )
        return super().fit(network, x_train, y_train, **kwargs)

    def _fit_classes(self, acts: np.ndarray, classes: np.ndarray) -> None:
        order = np.argsort(classes, kind="stable")
        self.train_activations_ = acts[order]
        self.train_classes_ = classes[order]
        labels, starts = np.unique(self.train_classes_, return_index=True)
        if len(labels) < 2:
            raise InputError(f"DSC needs training inputs of at least two classes; got only class {labels[0]}.")
        ends = np.append(starts[1:], len(order))
        self.classes_ = labels.astype(np.int64)
        self._slices = {int(c): slice(int(s), int(e)) for c, s, e in zip(labels, starts, ends)}
        self._keys = search_keys(self.train_activations_)
        self._other_distance = np.full(len(order), np.nan)

    def _surprise(self, acts: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        train, keys = self.train_activations_, self._keys
        a = np.full(len(acts), np.nan)
        nearest_point = np.full(len(acts), -1, dtype=np.int64)
        for label in np.unique(predicted):
            own = self._slices.get(int(label))
            if own is None:
                continue
            rows = np.flatnonzero(predicted == label)
            index, a[rows] = nearest(acts[rows], train[own], keys[own])
            nearest_point[rows] = own.start + index
        found = nearest_point >= 0
        needed = np.unique(nearest_point[found])
        needed = needed[np.isnan(self._other_distance[needed])]
        for label in np.unique(self.train_classes_[needed]):
            points = needed[self.train_classes_[needed] == label]
            _, self._other_distance[points] = nearest(train[points], train, keys, exclude=self._slices[int(label)])
        out = np.full(len(acts), np.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[found] = a[found] / self._other_distance[nearest_point[found]]
        return out


class MahalanobisSurpriseCoverage(_SurpriseCriterion):
    """MDSC (Kim, Feldt and Yoo, TOSEM 2022): MDSA(x) is the Mahalanobis distance from x's activations to the
    mean of the training activations of x's predicted class, with the pseudo-inverse of that class's
    covariance (the ``mdsa`` ordering of idcgen.prioritize computes the same); coverage of ``n_buckets``
    buckets on [lower, upper]. Neurons whose variance over all the training inputs is below
    ``var_threshold`` are left out; a class with fewer than two training inputs has no MDSA.

    Parameters
    ----------
    layer : layer name, default the last hidden layer before the logits.
    n_buckets : int >= 1, default 1000.
    lower, upper : the bucketed range, default [0, 100] (docs/design.md, "Other criteria", says why).
    var_threshold : float >= 0, default 1e-5 (as LSC's).
    group : "predicted" (default) or "label": how the training inputs are grouped into classes.

    Learned: ``layer_``, ``width_``, ``model_`` (a ClassMahalanobis), ``classes_``, ``total_``, ``n_inputs_``.
    """

    name = "mdsc"

    def __init__(
        self,
        *,
        layer: str | None = None,
        n_buckets: int = 1000,
        lower: float = 0.0,
        upper: float = 100.0,
        var_threshold: float = 1e-5,
        group: str = "predicted",
    ):
        self.layer = layer
        self.n_buckets = n_buckets
        self.lower = lower
        self.upper = upper
        self.var_threshold = var_threshold
        self.group = group

    def _validate_params(self) -> None:
        super()._validate_params()
        check_real("var_threshold", self.var_threshold, 0.0, None, owner=type(self).__name__)

    def _fit_classes(self, acts: np.ndarray, classes: np.ndarray) -> None:
        self.model_ = ClassMahalanobis(acts, classes, self.var_threshold)
        self.classes_ = np.array(sorted(self.model_.models), dtype=np.int64)
        if not len(self.classes_):
            raise InputError("MDSC: no class has two training inputs; give more training inputs")

    def _surprise(self, acts: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        return self.model_.distance(acts, predicted)
