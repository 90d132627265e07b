"""Oracles: which mutants are findings (misbehaviours).

An oracle takes a batch's :class:`Execution` (the mutants, the model's answers, what the corpus knows of
their root seeds) and returns a boolean mask. Oracles compose: ``Misclassification() & ~Uncertain(0.5)``
flags confident misclassifications; on the command line the same is ``misclassification & ~uncertain``
(see :func:`make_oracle`).

For a regression model (one output unit, docs/design.md "Regression models") ``predictions`` are the
output values (floats), ``root_labels`` are NaN where unknown, and the oracles that read numbers take a
threshold in the output's units: ``deviation`` (DeepTest: the mutant's output moved away from its root
seed's), ``error`` (the output is further than the threshold from the seed's label) and
``disagreement`` (DeepXplore: the models' outputs differ by more than the threshold).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Callable

import numpy as np

from ..errors import InputError, Param, ParameterError
from ..prioritization import class_probabilities
from ..spec import parse


@dataclass(frozen=True)
class Execution:
    """One batch as the oracle sees it (one row per mutant)."""

    x: np.ndarray  # the mutants as run
    probabilities: np.ndarray  # (n, classes): the outputs (probabilities, or logits); a regression model's (n, 1)
    predictions: np.ndarray  # classes (int); a regression model's output values (float)
    root_labels: np.ndarray  # the root seeds' labels, -1 where unknown (NaN for regression)
    root_predictions: np.ndarray  # the model's predictions on the root seeds

    @property
    def regression(self) -> bool:
        return np.asarray(self.predictions).dtype.kind == "f"


def _regression_only(name: str, run: Execution) -> None:
    if not run.regression:
        raise InputError(
            f"the {name} oracle compares output values and is for regression models (one output "
            "unit); for a classifier use misclassification or prediction-change"
        )


def _threshold(name: str, value) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = float("nan")
    if not (np.isfinite(value) and value >= 0):
        raise ParameterError(
            f"The 'threshold' of the {name} oracle must be a number >= 0 (in the model's output "
            f"units). Got {value!r} instead."
        )
    return value


class Oracle:
    """Base class: ``oracle(execution) -> bool mask``; ``&``, ``|`` and ``~`` compose oracles."""

    positional: tuple = ()  # what an unnamed value in its spec sets, e.g. uncertain(0.7)
    usage = "no parameter"  # what its spec takes, for messages

    # what an oracle says of itself: a subclass sets each as a class attribute, or a property where it depends on
    # its parameters or parts
    @property
    def name(self) -> str:
        return "oracle"

    @property
    def runs_models(self) -> bool:
        """It runs models of its own to decide."""
        return False

    @property
    def needs_labels(self) -> bool:
        """It reads the seeds' labels."""
        return False

    def __call__(self, run: Execution) -> np.ndarray:
        raise NotImplementedError

    def __and__(self, other: "Oracle") -> "Oracle":
        return Combined(self, _oracle(other), "&")

    def __or__(self, other: "Oracle") -> "Oracle":
        return Combined(self, _oracle(other), "|")

    def __invert__(self) -> "Oracle":
        return Not(self)

    def __str__(self) -> str:
        return self.name


def _oracle(value) -> Oracle:
    if not isinstance(value, Oracle):
        raise ParameterError(f"oracles compose with oracles; got {value!r}")
    return value


@dataclass(frozen=True)
class Misclassification(Oracle):
    """The prediction differs from the root seed's label (the default).

    Only mutants of seeds the model classifies correctly count: every mutant of a seed that is already
    misclassified would otherwise be a "finding".
    """

    name = "misclassification"
    needs_labels = True

    def __call__(self, run: Execution) -> np.ndarray:
        if run.regression:
            raise InputError(
                "the misclassification oracle is for classifiers; for a regression model use "
                "deviation(threshold=...) or error(threshold=...)"
            )
        if np.any(run.root_labels < 0):
            raise InputError("the misclassification oracle needs labelled seeds; use --oracle prediction-change")
        return (run.predictions != run.root_labels) & (run.root_predictions == run.root_labels)


@dataclass(frozen=True)
class PredictionChange(Oracle):
    """The prediction differs from the root seed's prediction (no labels needed)."""

    name = "prediction-change"

    def __call__(self, run: Execution) -> np.ndarray:
        if run.regression:
            raise InputError(
                "the prediction-change oracle never fires on a regression model's output; use "
                "deviation(threshold=...) (the output moved by more than the threshold)"
            )
        return run.predictions != run.root_predictions


@dataclass(frozen=True)
class Deviation(Oracle):
    """|prediction - root seed's prediction| > ``threshold`` on the raw output (DeepTest's metamorphic
    relation for steering models; default 0.2, in the output's units: radians for a steering angle).
    With ``lam`` and ``mse`` (the model's test MSE) the bound is DeepTest's own: a finding when
    ``(prediction - root prediction)^2 > lam * mse``, i.e. threshold ``sqrt(lam * mse)``."""

    threshold: float = 0.2
    lam: float | None = None
    mse: float | None = None
    positional = ("threshold",)
    usage = "one number, e.g. deviation(threshold=0.3), or lam=L, mse=M (DeepTest's bound)"

    def __post_init__(self):
        if (self.lam is None) != (self.mse is None):
            raise ParameterError(
                "the deviation oracle takes lam=L, mse=M together (DeepTest's bound lam x test MSE), "
                "e.g. deviation(lam=5, mse=0.1), or a threshold alone"
            )
        if self.lam is not None:
            lam, mse = _threshold("deviation", self.lam), _threshold("deviation", self.mse)
            object.__setattr__(self, "lam", lam)
            object.__setattr__(self, "mse", mse)
            object.__setattr__(self, "threshold", float(np.sqrt(lam * mse)))
        object.__setattr__(self, "threshold", _threshold("deviation", self.threshold))

    @property
    def name(self) -> str:
        if self.lam is not None:
            return f"deviation(lam={self.lam:g}, mse={self.mse:g})"
        return f"deviation(threshold={self.threshold:g})"

    def __call__(self, run: Execution) -> np.ndarray:
        _regression_only("deviation", run)
        return np.abs(np.asarray(run.predictions, np.float64) - run.root_predictions) > self.threshold


@dataclass(frozen=True)
class Error(Oracle):
    """|prediction - root seed's label| > ``threshold`` (needs labels). As for misclassification, only
    mutants of seeds the model gets right (within the threshold) count."""

    threshold: float = 0.2
    needs_labels = True
    positional = ("threshold",)
    usage = "one number, e.g. error(threshold=0.3)"

    def __post_init__(self):
        object.__setattr__(self, "threshold", _threshold("error", self.threshold))

    @property
    def name(self) -> str:
        return f"error(threshold={self.threshold:g})"

    def __call__(self, run: Execution) -> np.ndarray:
        _regression_only("error", run)
        labels = np.asarray(run.root_labels, np.float64)
        if np.any(np.isnan(labels)):
            raise InputError(
                "the error oracle needs labelled seeds (e.g. --labels FILE.csv); "
                "use deviation(threshold=...) without labels"
            )
        right = np.abs(np.asarray(run.root_predictions, np.float64) - labels) <= self.threshold
        return (np.abs(np.asarray(run.predictions, np.float64) - labels) > self.threshold) & right


@dataclass(frozen=True)
class Uncertain(Oracle):
    """The model's top probability is below ``threshold``: it hesitates (``~Uncertain`` keeps the
    confident answers)."""

    threshold: float = 0.5
    positional = ("threshold",)
    usage = "one number, e.g. uncertain(threshold=0.7)"
    aliases = {"p": "threshold"}  # uncertain(p=0.7), an earlier spelling

    def __post_init__(self):
        if not 0 < self.threshold <= 1:
            raise ParameterError(
                f"The 'threshold' of the uncertain oracle must be in (0, 1]. Got {self.threshold!r} instead."
            )

    @property
    def name(self) -> str:
        return "uncertain" if self.threshold == 0.5 else f"uncertain({self.threshold:g})"

    def __call__(self, run: Execution) -> np.ndarray:
        if run.regression:  # its output is a value, not a probability: every output below the threshold would do
            raise InputError(
                "the uncertain oracle reads class probabilities and is for classifiers; for a regression "
                "model use deviation(threshold=...)"
            )
        # the one oracle reading probabilities: a model ending in logits (most PyTorch models) gives their softmax
        return class_probabilities(run.probabilities).max(axis=1) < self.threshold


@dataclass(frozen=True)
class Disagreement(Oracle):
    """The models disagree on the mutant (DeepXplore's differential oracle): another class, or for
    regression models outputs further apart than ``threshold`` (default 0.2, in the output's units)."""

    others: tuple = field(default=())  # Network objects of the other models
    threshold: float | None = None  # regression only; None: 0.2
    runs_models = True
    positional = ("threshold",)
    usage = "one number for regression models, e.g. disagreement(threshold=0.3)"

    def __post_init__(self):
        if not self.others:
            raise ParameterError("the disagreement oracle needs at least two models (repeat --model)")
        if self.threshold is not None:
            object.__setattr__(self, "threshold", _threshold("disagreement", self.threshold))

    @property
    def name(self) -> str:
        return "disagreement" if self.threshold is None else f"disagreement(threshold={self.threshold:g})"

    def __call__(self, run: Execution) -> np.ndarray:
        flagged = np.zeros(len(run.x), bool)
        if not run.regression and self.threshold is not None:
            raise InputError(
                "the disagreement oracle's threshold is for regression models; classifiers disagree "
                "on the class: give disagreement without a threshold"
            )
        limit = 0.2 if self.threshold is None else self.threshold
        for network in self.others:
            theirs = network.predict(run.x)
            if run.regression:
                flagged |= np.abs(np.asarray(theirs, np.float64) - run.predictions) > limit
            else:
                flagged |= theirs != run.predictions
        return flagged


@dataclass(frozen=True)
class Confusion(Oracle):
    """A seed of class ``a`` becomes ``b``, or one of ``b`` becomes ``a``: findings for one class pair, e.g. a
    pair ``idcgen inspect`` predicts the model confuses (DeepInspect's directed augmentation). The seed's
    class is its label where known, and then, as for misclassification, only seeds the model gets right
    count; unlabelled seeds go by the model's prediction on them."""

    a: int = 0
    b: int = 1
    positional = ("a", "b")
    required = ("a", "b")
    usage = "two class numbers, e.g. confusion(3,5)"

    def __post_init__(self):
        for value in (self.a, self.b):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ParameterError(
                    f"the confusion oracle takes two class numbers >= 0, e.g. confusion(3,5); got {value!r}"
                )
        if self.a == self.b:
            raise ParameterError(f"the confusion oracle needs two different classes; got confusion({self.a},{self.b})")

    @property
    def name(self) -> str:
        return f"confusion({self.a},{self.b})"

    def __call__(self, run: Execution) -> np.ndarray:
        if run.regression:
            raise InputError(
                "the confusion oracle compares classes and is for classifiers; for a regression "
                "model use deviation(threshold=...)"
            )
        classes = np.asarray(run.probabilities).shape[1]
        if max(self.a, self.b) >= classes:
            raise ParameterError(f"{self.name}: the model has classes 0..{classes - 1} only")
        labels = np.asarray(run.root_labels)
        known = labels >= 0
        seed = np.where(known, labels, run.root_predictions)
        right = ~known | (run.root_predictions == labels)
        pred = np.asarray(run.predictions)
        return right & (((seed == self.a) & (pred == self.b)) | ((seed == self.b) & (pred == self.a)))


@dataclass(frozen=True)
class DeepTest(Oracle):
    """DeepTest's metamorphic relation for steering models (Tian et al., ICSE 2018): an erroneous behaviour is
    ``(prediction - root seed's label)^2 > lam * mse``, with ``mse`` the model's mean squared error on the
    original (untransformed) test frames. Regression only, labels needed. ``mse`` None: measured on the
    campaign's seeds when it starts (:func:`idcgen.fuzz.deeptest.calibrate`), and recorded in its spec."""

    lam: float = 5.0
    mse: float | None = None
    needs_labels = True
    positional = ("lam",)
    usage = "lam=L and optionally mse=M, e.g. deeptest(lam=5)"

    def __post_init__(self):
        object.__setattr__(self, "lam", _deeptest_number("lam", self.lam, positive=True))
        if self.mse is not None:
            object.__setattr__(self, "mse", _deeptest_number("mse", self.mse, positive=False))

    @property
    def name(self) -> str:
        # repr keeps every digit of the measured MSE: the recorded spec gives back the same bound
        return f"deeptest(lam={self.lam:g})" if self.mse is None else f"deeptest(lam={self.lam:g}, mse={self.mse!r})"

    @property
    def bound(self) -> float:
        """The largest squared error that is not an erroneous behaviour: lam * mse."""
        if self.mse is None:
            raise ParameterError(
                "the deeptest oracle has no MSE yet: give deeptest(lam=L, mse=M), or let the fuzzer "
                "measure it on the labelled seeds when the campaign starts"
            )
        return self.lam * self.mse

    def __call__(self, run: Execution) -> np.ndarray:
        if not run.regression:
            raise InputError(
                "the deeptest oracle compares steering angles with their labels and is for regression "
                "models (one output unit); for a classifier use misclassification"
            )
        labels = np.asarray(run.root_labels, np.float64)
        if np.any(np.isnan(labels)):
            raise InputError(
                "the deeptest oracle compares angles with their labels: give labelled seeds (e.g. --labels FILE.csv)"
            )
        return (np.asarray(run.predictions, np.float64) - labels) ** 2 > self.bound


def _deeptest_number(name: str, value, *, positive: bool) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = float("nan")
    if not np.isfinite(value) or value < 0 or (positive and value == 0):
        raise ParameterError(
            f"The '{name}' parameter of the deeptest oracle must be a number "
            f"{'> 0' if positive else '>= 0'}. Got {value!r} instead."
        )
    return value


@dataclass(frozen=True)
class Combined(Oracle):
    """Two oracles joined by ``&`` (both flag the mutant) or ``|`` (either does)."""

    left: Oracle
    right: Oracle
    op: str = "&"

    @property
    def name(self) -> str:
        return f"{self.left} & {self.right}" if self.op == "&" else f"({self.left} | {self.right})"

    @property
    def runs_models(self) -> bool:
        return self.left.runs_models or self.right.runs_models

    @property
    def needs_labels(self) -> bool:
        return self.left.needs_labels or self.right.needs_labels

    def __call__(self, run: Execution) -> np.ndarray:
        left, right = self.left(run), self.right(run)
        return left & right if self.op == "&" else left | right


@dataclass(frozen=True)
class Not(Oracle):
    inner: Oracle

    @property
    def name(self) -> str:
        return f"~{self.inner}"

    @property
    def runs_models(self) -> bool:
        return self.inner.runs_models

    @property
    def needs_labels(self) -> bool:
        return self.inner.needs_labels

    def __call__(self, run: Execution) -> np.ndarray:
        return ~self.inner(run)


#: every oracle by its spec name (:func:`make_oracle`); a new oracle is one class added here
ORACLES: dict[str, type[Oracle]] = {
    "misclassification": Misclassification,
    "prediction-change": PredictionChange,
    "disagreement": Disagreement,
    "uncertain": Uncertain,
    "deviation": Deviation,
    "error": Error,
    "confusion": Confusion,
    "deeptest": DeepTest,
}


def make_oracle(spec, others=()) -> Oracle:
    """An oracle from its spec (:mod:`idcgen.spec`): a name (``misclassification``, ``prediction-change``,
    ``disagreement``, ``uncertain`` or ``uncertain(threshold=0.7)``; for regression models ``deviation``,
    ``error`` and ``disagreement``, each with an optional ``(threshold=T)``, and ``deviation(lam=L, mse=M)``
    for DeepTest's bound; ``confusion(a=3, b=5)`` for one class pair; an unnamed value sets the first
    parameter, as in ``uncertain(0.7)`` or ``confusion(3,5)``), or names joined by ``&`` and ``|`` (evaluated
    left to right), each optionally negated with ``~``. An :class:`Oracle` is returned as it is."""
    if isinstance(spec, Oracle):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise ParameterError(
            Param("oracle"), f" must be an Oracle or a spec such as 'misclassification'. Got {spec!r} instead."
        )
    parts = re.split(r"([&|])", spec)
    oracle = _term(parts[0], spec, others)
    for op, text in zip(parts[1::2], parts[2::2]):
        term = _term(text, spec, others)
        oracle = oracle & term if op == "&" else oracle | term
    return oracle


def _term(text: str, spec: str, others) -> Oracle:
    negate = text.strip().startswith("~")
    try:
        parsed = parse(text.strip().lstrip("~"), "oracle")
    except ParameterError:
        parsed = None
    if parsed is None or parsed.name not in ORACLES:
        raise ParameterError(
            Param("oracle"),
            f" must be one of {', '.join(ORACLES)}, or names joined by & and | with ~ for not. Got {spec!r} instead.",
        )
    cls, name = ORACLES[parsed.name], parsed.name
    allowed: set[str] = {f.name for f in fields(cls)} if is_dataclass(cls) else set()
    takes_models = "others" in allowed  # the other models, as the first field (Disagreement)
    allowed -= {"others"}
    refused = f"the {name} oracle takes {cls.usage}; got {text.strip()!r}"
    if len(parsed.args) > len(cls.positional):
        raise ParameterError(refused)
    kwargs = dict(zip(cls.positional, parsed.args))
    for key, value in parsed.kwargs.items():
        key = getattr(cls, "aliases", {}).get(key, key)
        if key in kwargs or key not in allowed:
            raise ParameterError(refused)
        kwargs[key] = value
    if any(key not in kwargs for key in getattr(cls, "required", ())):
        raise ParameterError(refused)
    for key, value in kwargs.items():  # numbers where numbers are meant
        if key in ("threshold", "lam", "mse") and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ParameterError(refused)
    make: Callable[..., Oracle] = cls  # an oracle takes its fields as arguments
    oracle = make(tuple(others), **kwargs) if takes_models else make(**kwargs)
    return ~oracle if negate else oracle


def needs_labels(oracle: Oracle) -> bool:
    """Whether the oracle reads the seeds' labels (each oracle declares it)."""
    return bool(oracle.needs_labels)
