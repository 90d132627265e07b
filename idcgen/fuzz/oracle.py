"""Oracles: which mutants are findings (misbehaviours).

An oracle takes a batch's :class:`Execution` (the mutants, the model's answers, what the corpus knows of
their root seeds) and returns a boolean mask. Oracles compose: ``Misclassification() & ~Uncertain(0.5)``
flags confident misclassifications; on the command line the same is ``misclassification & ~uncertain``
(see :func:`make_oracle`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError, ParameterError


@dataclass(frozen=True)
class Execution:
    """One batch as the oracle sees it (one row per mutant)."""

    x: np.ndarray                  # the mutants as run
    probabilities: np.ndarray      # (n, classes)
    predictions: np.ndarray
    root_labels: np.ndarray        # the root seeds' labels, -1 where unknown
    root_predictions: np.ndarray   # the model's predictions on the root seeds


class Oracle:
    """Base class: ``oracle(execution) -> bool mask``; ``&``, ``|`` and ``~`` compose oracles."""

    name = "oracle"
    runs_models = False            # it runs models of its own to decide

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

    def __call__(self, run: Execution) -> np.ndarray:
        if np.any(run.root_labels < 0):
            raise InputError("the misclassification oracle needs labelled seeds; use --oracle prediction-change")
        return (run.predictions != run.root_labels) & (run.root_predictions == run.root_labels)


@dataclass(frozen=True)
class PredictionChange(Oracle):
    """The prediction differs from the root seed's prediction (no labels needed)."""

    name = "prediction-change"

    def __call__(self, run: Execution) -> np.ndarray:
        return run.predictions != run.root_predictions


@dataclass(frozen=True)
class Uncertain(Oracle):
    """The model's top probability is below ``threshold``: it hesitates (``~Uncertain`` keeps the
    confident answers)."""

    threshold: float = 0.5

    def __post_init__(self):
        if not 0 < self.threshold <= 1:
            raise ParameterError(f"The 'threshold' of the uncertain oracle must be in (0, 1]. Got {self.threshold!r} instead.")

    @property
    def name(self) -> str:
        return "uncertain" if self.threshold == 0.5 else f"uncertain({self.threshold:g})"

    def __call__(self, run: Execution) -> np.ndarray:
        return run.probabilities.max(axis=1) < self.threshold


@dataclass(frozen=True)
class Disagreement(Oracle):
    """The models disagree on the mutant (DeepXplore's differential oracle)."""

    others: tuple = field(default=())   # Network objects of the other models
    name = "disagreement"
    runs_models = True

    def __post_init__(self):
        if not self.others:
            raise ParameterError("the disagreement oracle needs at least two models (repeat --model)")

    def __call__(self, run: Execution) -> np.ndarray:
        flagged = np.zeros(len(run.x), bool)
        for network in self.others:
            flagged |= network.predict(run.x) != run.predictions
        return flagged


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

    def __call__(self, run: Execution) -> np.ndarray:
        return ~self.inner(run)


ORACLES = ("misclassification", "prediction-change", "disagreement", "uncertain")
_TERM = re.compile(r"\s*(~?)\s*([a-z-]+)(?:\(([^)]*)\))?\s*")


def make_oracle(spec, others=()) -> Oracle:
    """An oracle from its spec: a name (``misclassification``, ``prediction-change``, ``disagreement``,
    ``uncertain`` or ``uncertain(0.7)``), or names joined by ``&`` and ``|`` (evaluated left to right),
    each optionally negated with ``~``. An :class:`Oracle` is returned as it is."""
    if isinstance(spec, Oracle):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise ParameterError(f"The 'oracle' parameter must be an Oracle or a spec such as 'misclassification'. "
                             f"Got {spec!r} instead.")
    parts = re.split(r"([&|])", spec)
    oracle = _term(parts[0], spec, others)
    for op, text in zip(parts[1::2], parts[2::2]):
        term = _term(text, spec, others)
        oracle = oracle & term if op == "&" else oracle | term
    return oracle


def _term(text: str, spec: str, others) -> Oracle:
    match = _TERM.fullmatch(text)
    if match is None or match.group(2) not in ORACLES:
        raise ParameterError(f"The 'oracle' parameter must be one of {', '.join(ORACLES)}, or names joined by & "
                             f"and | with ~ for not. Got {spec!r} instead.")
    negate, name, argument = match.groups()
    if argument is not None and name != "uncertain":
        raise ParameterError(f"the {name} oracle takes no parameter; got {text.strip()!r} in {spec!r}")
    if name == "misclassification":
        oracle = Misclassification()
    elif name == "prediction-change":
        oracle = PredictionChange()
    elif name == "disagreement":
        oracle = Disagreement(tuple(others))
    else:
        try:
            threshold = 0.5 if argument is None else float(argument.split("=")[-1])
        except ValueError:
            raise ParameterError(f"the uncertain oracle takes a probability, e.g. uncertain(0.7); got {text.strip()!r}") from None
        oracle = Uncertain(threshold)
    return ~oracle if negate else oracle


def needs_labels(oracle: Oracle) -> bool:
    """Whether the oracle reads the seeds' labels."""
    if isinstance(oracle, Misclassification):
        return True
    return any(needs_labels(getattr(oracle, part)) for part in ("left", "right", "inner") if hasattr(oracle, part))
