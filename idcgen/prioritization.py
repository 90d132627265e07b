"""Test prioritisation: which inputs of a large unlabelled set to label first (docs/design.md, "Prioritisation").

    ranking = idcgen.prioritize(model, x_test, by="gini")            # Ranking: order, scores
    ranking = idcgen.prioritize(model, x_test, by="lsa", x_train=x_train, y=y_test)
    ranking.evaluation                                               # APFD and the share found early
    ranking.to_csv("ranking.csv")                                    # rank, input, score

Every ordering gives each input a *priority* score, higher looked at first; ties keep the inputs' own
order (a stable sort), and inputs without a score (NaN: a surprise with no density for its class) go
last. The orderings:

- from the softmax (classifiers only): ``gini`` (DeepGini, 1 - sum p_c^2), ``max-softmax`` (1 - max p),
  ``margin`` (1 - (p_(1) - p_(2)): the smallest margin first), ``entropy`` (-sum p log p);
- surprise adequacy on one layer (default the last hidden layer before the logits), against the training
  inputs: ``lsa``, ``dsa`` (classifiers only: it needs two classes), ``mdsa`` (the Mahalanobis distance to
  the training activations of the predicted class, Kim et al. 2020; one group for a regression model);
- ``mc-dropout``: the spread of the outputs over ``passes`` forward passes with the model's dropout layers
  on (the standard deviation of the output for a regression model, the mean standard deviation of the
  class probabilities for a classifier); only for models with dropout;
- coverage: ``<criterion>-total`` (CTM: the number of items of the criterion the input covers on its own)
  and ``<criterion>-additional`` (CAM: greedily the input covering the most items not yet covered, until
  no input adds one; the rest then by their total), for every criterion of idcgen.criteria with items;
  ``tknp-additional`` and ``cc-additional`` put first the inputs with a new pattern or a kept vector, in the
  set's order (NLC gives no ordering: one input has no covariance);
- IDC, from an analysis (given, or made from the training inputs): ``idc-rarity`` (how rare the input's
  combination is among the training inputs: -log((count + 1) / (n_train + |INCC|))) and
  ``idc-additional`` (CAM on combinations: the first input of every combination the set reaches, then the
  rest in their own order);
- ``random``: a random permutation from ``random_state``.

With labels, a *failure* is a misclassified input (classifier) or, for a regression model, an input whose
absolute error exceeds ``tolerance`` (default: twice the root mean squared error over the set, DeepTest's
relation ``error^2 <= lambda * MSE`` with lambda = 4). APFD = 1 - (TF_1 + ... + TF_m) / (n m) + 1 / (2 n)
with TF_i the rank of the i-th failure; the best possible ordering gets 1 - m / (2 n).

The numpy parts (APFD, the orderings from scores, the greedy additional ordering) need no TensorFlow;
the model is imported only where an ordering runs it.
"""

from __future__ import annotations

import csv
import heapq
import io
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from .checks import check_int, check_real
from .criteria import CRITERIA, NEEDS_DATA
from .errors import InputError, Param, ParameterError

__all__ = [
    "ORDERINGS",
    "CLASSIFICATION_ONLY",
    "Evaluation",
    "Ranking",
    "additional_order",
    "apfd",
    "check_ordering",
    "evaluate",
    "failures_of",
    "found_at",
    "orderings",
    "prioritize",
    "rank_by",
    "softmax_priority",
]

SOFTMAX = ("gini", "max-softmax", "margin", "entropy")
SURPRISE = ("lsa", "dsa", "mdsa")
#: the orderings that need no criterion name; ``orderings()`` adds <criterion>-total and -additional
ORDERINGS = SOFTMAX + SURPRISE + ("mc-dropout", "idc-rarity", "idc-additional", "random")
#: orderings a regression model cannot take: they need class probabilities (or, DSA and DSC, two classes)
CLASSIFICATION_ONLY = SOFTMAX + ("dsa", "dsc-total", "dsc-additional")
#: the share of the ranking the evaluation looks at first, in percent
FIRST = (1, 5, 10)


def orderings() -> list[str]:
    """Every ordering ``prioritize`` accepts, in a fixed order."""
    coverage = [f"{name}-{kind}" for name, c in CRITERIA.items() for kind in c.orderings]
    return list(ORDERINGS[:-1]) + coverage + ["random"]


def orderings_help() -> str:
    """The orderings in words, as ``--by``'s help gives them: the coverage orderings by criterion, from the
    registry (a criterion with both orderings as <criterion>-total and -additional, any other by its own, and
    the criteria without an ordering)."""
    both = [name for name, c in CRITERIA.items() if set(c.orderings) == {"total", "additional"}]
    others = [f"{name}-{kind}" for name, c in CRITERIA.items() if name not in both for kind in c.orderings]
    idc = [o for o in ORDERINGS if o.startswith("idc-")]
    words = [o for o in ORDERINGS if o not in idc and o != "random"]
    words += [f"<criterion>-total, <criterion>-additional (criterion: {', '.join(both)})", *others, *idc]
    none = [name for name, c in CRITERIA.items() if not c.orderings]
    gives = f"; {', '.join(none)} give{'s' if len(none) == 1 else ''} none" if none else ""
    return f"{', '.join(words)} or random{gives}."


def check_ordering(by, task: str = "classification") -> str:
    """``by`` as a known ordering for a model of ``task``; a ParameterError (one line) otherwise."""
    known = orderings()
    if not isinstance(by, str) or by.strip().lower() not in known:
        raise ParameterError(Param("by"), f" must be one of {', '.join(known)}. Got {by!r} instead.")
    by = by.strip().lower()
    if task == "regression" and by in CLASSIFICATION_ONLY:
        why = "needs two classes" if by.startswith("ds") else "needs class probabilities"
        raise ParameterError(
            Param("by", by),
            f" {why} and this is a regression model: use lsa, mdsa, mc-dropout, random, "
            "idc-rarity, idc-additional or a <criterion>-total/-additional ordering (not dsc)",
        )
    return by


# ---- the numpy core ---------------------------------------------------------------------------------------


def class_probabilities(outputs) -> np.ndarray:
    """A classifier's outputs (..., classes) as class probabilities: rows that already are (non-negative,
    summing to 1: a softmax head) stay; logits, from a model without a softmax at its end (most PyTorch models,
    Keras models trained with from_logits=True), and log-probabilities get their softmax here. Told from the
    values, row by row, not from the model's head: a Keras softmax may be a layer of its own after the logits.
    Orderings on logits as if they were probabilities rank the most confident inputs first (DeepGini on
    logits is negative)."""
    z = np.asarray(outputs, dtype=np.float64)
    if z.ndim < 2 or z.shape[-1] < 2 or not z.size:
        return z
    logits = ~((z >= 0).all(axis=-1) & (np.abs(z.sum(axis=-1) - 1.0) <= 1e-2))
    if not logits.any():
        return z
    e = np.exp(z[logits] - z[logits].max(axis=-1, keepdims=True))
    z = z.copy()
    z[logits] = e / e.sum(axis=-1, keepdims=True)
    return z


def softmax_priority(probs, by: str) -> np.ndarray:
    """(n,) priority (higher first) of each input from its class probabilities (n, classes)."""
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] < 2:
        raise InputError(
            f"class probabilities must be an (n, classes) array with at least two classes; got shape {p.shape}"
        )
    if by == "gini":
        return 1.0 - np.einsum("ij,ij->i", p, p)
    if by == "max-softmax":
        return 1.0 - p.max(axis=1)
    if by == "margin":
        top = np.sort(p, axis=1)[:, -2:]
        return 1.0 - (top[:, 1] - top[:, 0])
    if by == "entropy":
        with np.errstate(divide="ignore", invalid="ignore"):
            return -np.where(p > 0, p * np.log(p), 0.0).sum(axis=1)
    raise ParameterError(f"{by!r} is not an ordering from class probabilities ({', '.join(SOFTMAX)})")


def rank_by(priority) -> np.ndarray:
    """Indices of the inputs, highest priority first; ties keep the inputs' order, NaN goes last."""
    p = np.asarray(priority, dtype=np.float64)
    key = np.where(np.isnan(p), np.inf, -p)
    return np.argsort(key, kind="stable")


def additional_order(items: Sequence[np.ndarray], total: int) -> tuple[np.ndarray, np.ndarray]:
    """The additional-coverage ordering (CAM) of inputs covering sets of items.

    ``items[i]`` holds the item ids input i covers (ints in [0, total), repeats allowed, -1 ignored).
    Greedy: take the input that covers the most items not yet covered (ties: the earlier input) until no
    remaining input adds an item; the rest follow by the number of items each covers on its own (the
    total ordering, ties in their own order). Returns (order (n,), score (n,) by input: the new items it
    added when taken, or for the rest its own item count as a fraction below 1, so that a score says which
    part of the ordering an input is in). Lazy evaluation: a gain can only fall while the covered set
    grows, so a stale gain on the heap is an upper bound and only the top needs recomputing.
    """
    sets = [np.unique(np.asarray(s, dtype=np.int64)) for s in items]
    sets = [s[s >= 0] for s in sets]
    n = len(sets)
    sizes = np.array([s.size for s in sets], dtype=np.float64)
    score = np.zeros(n, dtype=np.float64)
    covered = np.zeros(max(int(total), 1), dtype=bool)
    heap = [(-int(sizes[i]), i) for i in range(n) if sizes[i]]
    heapq.heapify(heap)
    taken = []
    while heap:
        _, i = heapq.heappop(heap)
        now = int((~covered[sets[i]]).sum())
        if now == 0:
            continue  # adds nothing now, nor later: ordered with the rest
        if heap and (now < -heap[0][0] or (now == -heap[0][0] and heap[0][1] < i)):
            heapq.heappush(heap, (-now, i))
            continue
        covered[sets[i]] = True
        score[i] = now
        taken.append(i)
    rest = np.setdiff1d(np.arange(n), taken)
    rest = rest[np.argsort(-sizes[rest], kind="stable")]
    score[rest] = sizes[rest] / (sizes.max() + 1.0) if n else 0.0
    return np.array(taken + rest.tolist(), dtype=np.int64), score


def _check_failures(order: np.ndarray, failures) -> tuple[np.ndarray, np.ndarray]:
    order = np.asarray(order)
    failed = np.asarray(failures)
    if failed.dtype != bool or failed.ndim != 1:
        raise InputError(
            f"failures must be a 1-D boolean array (one per input); got dtype {failed.dtype}, shape {failed.shape}"
        )
    n = len(failed)
    if order.ndim != 1 or len(order) != n or not np.array_equal(np.sort(order), np.arange(n)):
        raise InputError(
            f"the ordering must be a permutation of the {n} input indices; got {len(order)} indices"
            + ("" if len(order) != n else " with repeats or values outside 0..n-1")
        )
    return order, failed


def apfd(order, failures) -> float:
    """Average Percentage of Faults Detected of ``order`` (indices, first looked at first) given the boolean
    ``failures`` per input: 1 - sum(TF_i) / (n m) + 1 / (2 n), TF_i the 1-based rank of the i-th failure.
    NaN when no input fails."""
    order, failed = _check_failures(order, failures)
    n, m = len(failed), int(failed.sum())
    if n == 0 or m == 0:
        return float("nan")
    ranks = np.flatnonzero(failed[order]) + 1
    return float(1.0 - ranks.sum() / (n * m) + 1.0 / (2 * n))


def found_at(order, failures, percent: float) -> float:
    """The share of the failures among the first ``ceil(percent / 100 * n)`` inputs of ``order``; NaN
    without failures."""
    order, failed = _check_failures(order, failures)
    check_real("percent", percent, 0.0, 100.0, closed="right")
    m = int(failed.sum())
    if m == 0:
        return float("nan")
    k = int(math.ceil(percent / 100.0 * len(failed) - 1e-9))
    return float(failed[order[:k]].sum() / m)


@dataclass(frozen=True)
class Evaluation:
    """How soon an ordering reaches the failures: APFD and the share of failures in the first 1, 5, 10 %."""

    apfd: float
    found_at_1: float
    found_at_5: float
    found_at_10: float
    failures: int
    inputs: int

    def to_dict(self) -> dict:
        return {
            "apfd": self.apfd,
            "found_at_1": self.found_at_1,
            "found_at_5": self.found_at_5,
            "found_at_10": self.found_at_10,
            "failures": self.failures,
            "inputs": self.inputs,
        }

    def __str__(self) -> str:
        if not self.failures:
            return f"no failures among the {self.inputs} inputs: APFD undefined"
        return (
            f"APFD {self.apfd:.4f} ({self.failures} failures in {self.inputs} inputs; the best ordering gets "
            f"{1 - self.failures / (2 * self.inputs):.4f}); failures found in the first 1 % "
            f"{self.found_at_1:.1%}, 5 % {self.found_at_5:.1%}, 10 % {self.found_at_10:.1%}"
        )


def evaluate(order, failures) -> Evaluation:
    """APFD and the share of failures found in the first 1, 5 and 10 % of ``order``."""
    order, failed = _check_failures(order, failures)
    shares = [found_at(order, failed, p) for p in FIRST]
    return Evaluation(apfd(order, failed), *shares, failures=int(failed.sum()), inputs=len(failed))


@dataclass(frozen=True)
class Ranking:
    """An ordering of a set of inputs: ``order`` (indices, the first to look at first) and ``scores``
    (priority per input, in the inputs' order; for additional orderings the items each input added when
    taken). ``evaluation`` when labels were given."""

    by: str
    order: np.ndarray
    scores: np.ndarray
    evaluation: Evaluation | None = None
    notes: tuple[str, ...] = field(default=())

    def __len__(self) -> int:
        return len(self.order)

    def __repr__(self) -> str:
        extra = "" if self.evaluation is None else f", apfd={self.evaluation.apfd:.4f}"
        return f"Ranking(by={self.by!r}, inputs={len(self)}{extra})"

    def summary_lines(self, path=None) -> list[str]:
        """What ``idcgen prioritize`` prints: the notes, the ordering (written to ``path``) and its score."""
        return [
            *(f"note: {note}" for note in self.notes),
            f"{len(self)} inputs ordered by {self.by} -> {path}",
            str(self.evaluation)
            if self.evaluation is not None
            else "no labels: the ordering is not scored (give labels for APFD)",
        ]

    def rows(self, names: Sequence[str] | None = None) -> list[dict]:
        """One row per rank: rank (1 = look first), input (index, or ``names[index]``), score."""
        if names is not None and len(names) != len(self.order):
            raise InputError(f"{len(names)} names for {len(self.order)} inputs")
        return [
            {"rank": r, "input": int(i) if names is None else names[i], "score": float(self.scores[i])}
            for r, i in enumerate(self.order, 1)
        ]

    def to_csv(self, path: str | os.PathLike, names: Sequence[str] | None = None) -> Path:
        """Write the ranking as CSV with columns rank, input, score (see :meth:`rows`)."""
        path = check_ranking_target(path)
        if path.parent and not path.parent.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=["rank", "input", "score"])
        writer.writeheader()
        for row in self.rows(names):
            writer.writerow(dict(row, score=repr(row["score"])))
        from .files import atomic_text

        atomic_text(path, text.getvalue())  # whole or not at all, and no temporary file left behind
        return path


# ---- the model's side (TensorFlow imported on use) ------------------------------------------------------


def failures_of(network, x, y, *, tolerance: float | None = None, outputs=None) -> np.ndarray:
    """Boolean (n,): misclassified inputs, or for a regression model inputs whose absolute error exceeds
    ``tolerance`` (default: twice the root mean squared error over these inputs). ``outputs``: the model's
    outputs (probabilities or values) if already computed."""
    out = network.forward(x)[0] if outputs is None else np.asarray(outputs)
    if network.task == "regression":
        error = np.abs(out.reshape(len(out), -1)[:, 0].astype(np.float64) - np.asarray(y, np.float64))
        if tolerance is None:
            tolerance = 2.0 * float(np.sqrt(np.mean(error**2))) if len(error) else 0.0
        else:
            check_real("tolerance", tolerance, 0.0, None)
        return error > tolerance
    return out.argmax(axis=1) != np.asarray(y)


def _mahalanobis(
    train_acts: np.ndarray, train_groups: np.ndarray, acts: np.ndarray, groups: np.ndarray, var_threshold: float = 1e-5
) -> np.ndarray:
    """MDSA: the Mahalanobis distance of each activation to the training activations of its group (the
    pseudo-inverse of the group's covariance, neurons of (near) zero variance left out); NaN for a group
    with fewer than two training inputs. The MDSC criterion buckets the same distance."""
    from .criteria.surprise import ClassMahalanobis

    return ClassMahalanobis(train_acts, train_groups, var_threshold).distance(acts, groups)


def _mc_dropout(network, x: np.ndarray, passes: int, rng: np.random.Generator, progress) -> np.ndarray:
    """(n,) spread of the outputs over ``passes`` passes with every Dropout layer dropping (masks drawn
    from ``rng``, so the same random state gives the same scores); the other layers run in inference mode."""
    spread = []
    for start in range(0, len(x), network.batch_size):
        out = network.dropout_outputs(x[start : start + network.batch_size], passes, rng)  # (passes, batch, outputs)
        out = out if network.task == "regression" else class_probabilities(out)  # the spread of probabilities
        spread.append(out.std(axis=0).mean(axis=1))
        if progress is not None:
            progress.update(out.shape[1])
    return np.concatenate(spread) if spread else np.zeros(0)


def _training_groups(network, probs: np.ndarray) -> np.ndarray:
    return np.zeros(len(probs), np.int64) if network.task == "regression" else probs.argmax(axis=1)


@dataclass(frozen=True)
class OrderingParameters:
    """The parameters particular to some orderings: ``layer`` of the surprise orderings (default: the last hidden
    layer before the logits), the forward ``passes`` of mc-dropout, and a regression model's failure
    ``tolerance`` on the absolute error (default: twice the RMSE, see :func:`failures_of`)."""

    layer: str | None = None
    passes: int = 20
    tolerance: float | None = None

    def checked(self) -> tuple[str | None, int, float | None]:
        return self.layer, check_int("passes", self.passes, 2), self.tolerance


def prioritize(
    model,
    x,
    *,
    by: str,
    x_train=None,
    y_train=None,
    y=None,
    analysis=None,
    m: int = 8,
    parameters: OrderingParameters | None = None,
    random_state: int = 0,
    cache: dict | None = None,
    progress: bool = False,
) -> Ranking:
    """Order the inputs ``x`` so that the ones most likely to reveal a failure come first.

    Parameters
    ----------
    model : a framework's model (keras.Model, torch.nn.Module), a model file's path, or a Network (classifier
        or regression model).
    x : array (n, *input_shape), scaled as the model expects.
    by : the ordering (see the module's docstring and :func:`orderings`).
    x_train, y_train : training inputs (and labels): needed by lsa, dsa, mdsa, the coverage orderings of
        criteria fitted on training data (``NEEDS_DATA``), idc-rarity (unless the ``analysis`` records how often
        the inputs it was made on reach each combination, as analyses made by this version do), and the IDC
        orderings when no ``analysis`` is given (it is then made with ``m`` important neurons).
    y : labels (or targets) of ``x``: with them the ranking is evaluated (APFD, share found early); a Dataset
        ``x`` (or ``x_train``) brings its own labels.
    analysis : an Analysis for the IDC orderings.
    parameters : the parameters of some orderings (an :class:`OrderingParameters`): the surprise orderings'
        layer, mc-dropout's passes, a regression model's failure tolerance.
    random_state : for ``random`` and ``mc-dropout``.
    cache : a dict to keep between calls on the same model and training inputs (and layer, m): fitted
        criteria, surprise densities, training activations and the analysis made from x_train are kept in
        it and reused, so that many orderings of several sets fit each only once.
    """
    from .convention import check_unscaled
    from .criteria.base import raw_inputs
    from .data import Dataset, fit_to_model
    from .framework import as_network

    network = as_network(model)
    by = check_ordering(by, network.task)
    if isinstance(x, Dataset) and y is None:  # a loaded dataset brings its labels: the ranking is evaluated
        y = x.y
    if isinstance(x_train, Dataset) and y_train is None:
        y_train = x_train.y
    layer, passes, tolerance = (parameters or OrderingParameters()).checked()
    check_int("random_state", random_state, 0)
    x = fit_to_model(raw_inputs(x, network), network.input_shape)  # InputError when empty or mis-shaped
    check_unscaled(x, network)
    base = _criterion_of(by)
    recorded = analysis is not None and analysis.training_counts is not None  # idc-rarity's counts, saved with it
    needs_train = base in NEEDS_TRAIN and not (by == "idc-rarity" and recorded)
    if x_train is None and (needs_train or (by.startswith("idc-") and analysis is None)):
        older = " (the analysis was saved before analyses recorded them)" if by == "idc-rarity" and analysis else ""
        raise ParameterError(Param("by", by), f" needs the training inputs{older}: pass x_train (--train)")
    if x_train is not None:
        x_train = fit_to_model(raw_inputs(x_train, network), network.input_shape)
        check_unscaled(x_train, network, "the training inputs")
    job = _Job(
        network,
        x,
        x_train,
        y_train,
        analysis,
        layer,
        m,
        passes,
        np.random.default_rng(random_state),
        {} if cache is None else cache,
        progress,
    )
    scores, order = _ordering_of(by)(job, by)
    # the model's outputs on x, checked finite (a NaN model would rank and score nothing): once, where the ordering
    # did not compute them
    outputs = job.outputs if job.outputs is not None else network.forward(x)[0]
    check_finite_outputs(outputs)
    evaluation = None
    if y is not None:
        from .data import check_labels

        y = check_labels(x, y, network.task)
        failed = failures_of(network, x, y, tolerance=tolerance, outputs=outputs)
        evaluation = evaluate(order, failed)
    return Ranking(
        by=by,
        order=np.asarray(order, np.int64),
        scores=np.asarray(scores, np.float64),
        evaluation=evaluation,
        notes=tuple(job.notes),
    )


# ---- the orderings: one function each, registered by name (as criteria are) ----------------------------
@dataclass
class _Job:
    """What an ordering works with; ``outputs``: the model's outputs on ``x`` where the ordering computed them
    (the evaluation reuses them), ``notes``: what the ranking should say."""

    network: object
    x: np.ndarray
    x_train: np.ndarray | None
    y_train: np.ndarray | None
    analysis: object
    layer: str | None
    m: int
    passes: int
    rng: np.random.Generator
    cache: dict
    progress: bool
    outputs: np.ndarray | None = None
    notes: list = field(default_factory=list)

    def kept(self, key, build):
        """``build()``, kept in the cache across calls (fitted criteria, densities, training activations)."""
        if key not in self.cache:
            self.cache[key] = build()
        return self.cache[key]


#: ordering name -> function (job, by) -> (scores, order); the coverage orderings are found by their criterion
_REGISTRY: dict = {}
#: the orderings fitted on the training inputs, as registered
_TRAINED: list[str] = []


def _registered(*names, trained: bool = False):
    """Register an ordering function under ``names``; ``trained``: it reads the training inputs."""

    def register(function):
        for name in names:
            _REGISTRY[name] = function
        _TRAINED.extend(names if trained else ())
        return function

    return register


def _criterion_of(by: str) -> str:
    """The criterion of a coverage ordering ('nc' of 'nc-total'); other orderings are their own name."""
    return by.rsplit("-", 1)[0] if by.endswith(("-total", "-additional")) and not by.startswith("idc-") else by


def _ordering_of(by: str):
    return _REGISTRY.get(by) or _coverage


@_registered(*SOFTMAX)
def _softmax(job: _Job, by: str):
    job.outputs = job.network.forward(job.x)[0]
    scores = softmax_priority(class_probabilities(job.outputs), by)
    return scores, rank_by(scores)


@_registered("lsa", "dsa", trained=True)
def _surprise(job: _Job, by: str):
    from .criteria import make_criterion

    criterion = job.kept(
        (by, job.layer),
        lambda: make_criterion(by[:2] + "c", layer=job.layer).fit(job.network, job.x_train, progress=job.progress),
    )
    scores = criterion.surprise(job.network, job.x)
    job.notes += list(getattr(criterion, "notes_", ()))
    return scores, rank_by(scores)


@_registered("mdsa", trained=True)
def _mdsa(job: _Job, by: str):
    network = job.network
    name = network.default_layer() if job.layer is None else network.layer(job.layer).name
    train_probs, (train_acts,) = job.kept(("train activations", name), lambda: network.forward(job.x_train, (name,)))
    outputs, (acts,) = network.forward(job.x, (name,))
    scores = _mahalanobis(
        train_acts.astype(np.float64),
        _training_groups(network, train_probs),
        acts.astype(np.float64),
        _training_groups(network, outputs),
    )
    return scores, rank_by(scores)


@_registered("mc-dropout")
def _dropout(job: _Job, by: str):
    if not job.network.dropout_layers():
        raise ParameterError(
            Param("by", "mc-dropout"), " needs a model with Dropout layers; this model has none: use lsa or mdsa"
        )
    from tqdm.auto import tqdm

    with tqdm(total=len(job.x), desc="mc-dropout", unit="input", disable=not job.progress, leave=False) as bar:
        scores = _mc_dropout(job.network, job.x, job.passes, job.rng, bar)
    return scores, rank_by(scores)


@_registered("random")
def _random(job: _Job, by: str):
    order = job.rng.permutation(len(job.x))
    scores = np.empty(len(job.x))
    scores[order] = np.arange(len(job.x), 0, -1, dtype=np.float64)  # the priority is the reversed position
    return scores, order


@_registered("idc-rarity", trained=True)  # the combinations' counts (recorded with an analysis since)
@_registered("idc-additional")
def _idc(job: _Job, by: str):
    analysis = _job_analysis(job)
    ids = analysis.ids(job.x)
    if by == "idc-additional":
        order, scores = additional_order([np.array([i]) for i in ids], analysis.total)
        return scores, order
    if job.x_train is None:  # the counts of the inputs the analysis was made on, recorded with it
        values, counts = analysis.training_counts
        job.notes.append(f"idc-rarity counts the {counts.sum()} training inputs recorded with the analysis")
    else:
        train_ids = job.kept(("training combinations", id(analysis)), lambda: analysis.ids(job.x_train))
        values, counts = np.unique(train_ids, return_counts=True)
    count = np.zeros(len(ids))
    where = np.searchsorted(values, ids)
    hit = (where < len(values)) & (values[np.minimum(where, len(values) - 1)] == ids)
    count[hit] = counts[where[hit]]
    scores = -np.log((count + 1.0) / (counts.sum() + analysis.total))
    return scores, rank_by(scores)


#: what needs the training inputs, by ordering or criterion (the ``nc`` of ``nc-total``): the orderings registered
#: as trained (the surprise orderings, idc-rarity) and every criterion fitted on training data (the registry's
#: ``Criterion.needs_data``); the IDC orderings need them too when no analysis is given
TRAINED_ORDERINGS = tuple(_TRAINED)
NEEDS_TRAIN = TRAINED_ORDERINGS + NEEDS_DATA


def _job_analysis(job: _Job):
    """The IDC orderings' analysis: the one given (bound to the model), or one made from the training inputs."""
    from .analysis import analyze

    if job.analysis is not None:
        return job.analysis.bind(job.network)
    analysis = job.kept(
        ("analysis", job.m),
        lambda: analyze(job.network, job.x_train, job.y_train, m=job.m, random_state=0, progress=job.progress),
    )
    job.notes.append(
        f"analysis made from the {len(job.x_train)} training inputs: layer {analysis.layer}, "
        f"m = {analysis.m}, {analysis.total} combinations"
    )
    return analysis


def _coverage(job: _Job, by: str):
    """``<criterion>-total`` (CTM) and ``<criterion>-additional`` (CAM) of any criterion."""
    from .criteria import make_criterion

    base, x, x_train = _criterion_of(by), job.x, job.x_train
    criterion = job.kept(
        base,
        lambda: make_criterion(base).fit(
            job.network,
            x_train if x_train is not None else x[:1],
            job.y_train if x_train is not None else None,
            progress=job.progress,
        ),
    )
    features = np.concatenate([criterion.features(job.network, x[s : s + 1024]) for s in range(0, len(x), 1024)])
    if criterion.total_ is None:  # TKNP, CC: the inputs the criterion finds new in the set's order, then the rest
        new = criterion.tracker().update(features)
        scores = new.astype(np.float64)
        return scores, rank_by(scores)
    items = [row[row >= 0] for row in features]
    if by.endswith("-total"):
        scores = np.array([np.unique(r).size for r in items], dtype=np.float64)
        return scores, rank_by(scores)
    order, scores = additional_order(items, criterion.total_)
    return scores, order


def check_finite_outputs(outputs: np.ndarray) -> None:
    """A model giving NaN or infinite outputs has no ordering to offer: every score computed from them (and
    the failures) would be meaningless, so refuse rather than rank."""
    bad = ~np.isfinite(np.asarray(outputs, np.float64).reshape(len(outputs), -1)).all(axis=1)
    if bad.any():
        raise InputError(
            f"the model's outputs are NaN or infinite for {int(bad.sum())} of {len(bad)} inputs (the "
            f"first: input {int(np.flatnonzero(bad)[0])}): no ordering can be scored on them; check the "
            "model's weights and the inputs' scale (--scale, --value-range, --preprocess)"
        )


def check_ranking_target(path: str | os.PathLike) -> Path:
    """Refuse an ``--out`` whose replacement would lose something: a folder, or an existing file that is not a
    ranking written before (its first line ``rank,input,score``), such as a model file given by mistake."""
    path = Path(path)
    if path.is_dir():
        raise InputError(
            f"{path} is a folder; the ranking is one CSV file: give a file name such as {path / 'ranking.csv'}"
        )
    if path.exists():
        try:
            with open(path, "rb") as handle:
                first = handle.readline(64)
        except OSError:
            first = b""
        if first.rstrip(b"\r\n") != b"rank,input,score":
            raise InputError(
                f"{path} exists and is not a ranking CSV (its first line is not rank,input,score): "
                "refusing to replace it; give another --out"
            )
    return path


def input_names(spec, limit: int | None = None) -> list[str] | None:
    """The file names of an image folder's inputs, in the order ``load_inputs`` reads them (``class/name``
    for class subfolders); None when ``spec`` is not an image folder."""
    from .data import image_names, is_image_folder

    if not is_image_folder(spec):
        return None
    names = image_names(Path(os.fspath(spec)))
    return names[:limit]
