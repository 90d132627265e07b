"""DeepTest's metamorphic oracle for steering models (Tian et al., ICSE 2018; docs/design.md, "Regression
and driving").

A transformed frame should still be steered about as the frame's recorded angle says: the relation holds
when ``(theta_t - theta_label)^2 <= lam * MSE``, with ``theta_t`` the model's angle on the transformed frame,
``theta_label`` the original frame's label and ``MSE`` the model's mean squared error on the original
(untransformed) test frames. A transformed frame that breaks it is an *erroneous behaviour*.

``deeptest(lam=5)`` leaves the MSE to be measured on the campaign's seeds when the campaign starts
(:func:`calibrate`); the campaign then records ``deeptest(lam=5, mse=<measured>)`` as its oracle, so the
report states both and a resumed campaign or an export re-check uses the same bound. ``mse=`` may also be
given outright. Numpy only.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import numpy as np

from ..errors import InputError, ParameterError
from .oracle import Combined, Execution, Not, Oracle

#: DeepTest's spec: deeptest(lam=L) or deeptest(lam=L, mse=M)
_ARGS = re.compile(r"\s*lam\s*=\s*([^,]+?)\s*(?:,\s*mse\s*=\s*([^,]+?)\s*)?")


def _number(name: str, value, *, positive: bool) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = float("nan")
    if not np.isfinite(value) or value < 0 or (positive and value == 0):
        raise ParameterError(f"The '{name}' parameter of the deeptest oracle must be a number "
                             f"{'> 0' if positive else '>= 0'}. Got {value!r} instead.")
    return value


@dataclass(frozen=True)
class DeepTest(Oracle):
    """``(prediction - root seed's label)^2 > lam * mse``: DeepTest's erroneous behaviour (regression only,
    labels needed). ``mse`` None: measured on the seeds when the campaign starts (:func:`calibrate`)."""

    lam: float = 5.0
    mse: float | None = None
    needs_labels = True

    def __post_init__(self):
        object.__setattr__(self, "lam", _number("lam", self.lam, positive=True))
        if self.mse is not None:
            object.__setattr__(self, "mse", _number("mse", self.mse, positive=False))

    @property
    def name(self) -> str:
        # repr keeps every digit of the measured MSE: the recorded spec gives back the same bound
        return f"deeptest(lam={self.lam:g})" if self.mse is None else f"deeptest(lam={self.lam:g}, mse={self.mse!r})"

    @property
    def bound(self) -> float:
        """The largest squared error that is not an erroneous behaviour: lam * mse."""
        if self.mse is None:
            raise ParameterError("the deeptest oracle has no MSE yet: give deeptest(lam=L, mse=M), or let the fuzzer "
                                 "measure it on the labelled seeds when the campaign starts")
        return self.lam * self.mse

    def __call__(self, run: Execution) -> np.ndarray:
        _check_regression(run)
        labels = np.asarray(run.root_labels, np.float64)
        if np.any(np.isnan(labels)):
            raise InputError("the deeptest oracle compares angles with their labels: give labelled seeds "
                             "(e.g. --labels FILE.csv)")
        return (np.asarray(run.predictions, np.float64) - labels) ** 2 > self.bound


def _check_regression(run) -> None:
    if not run.regression:
        raise InputError("the deeptest oracle compares steering angles with their labels and is for regression "
                         "models (one output unit); for a classifier use misclassification")


def parse_deeptest(argument: str | None, text: str) -> DeepTest:
    """``DeepTest`` from the text between the parentheses of ``deeptest(...)`` (None: the defaults)."""
    if argument is None or not argument.strip():
        return DeepTest()
    match = _ARGS.fullmatch(argument)
    if match is None:
        raise ParameterError(f"the deeptest oracle takes lam=L and optionally mse=M, e.g. deeptest(lam=5); got "
                             f"{text.strip()!r}")
    return DeepTest(lam=match.group(1), mse=match.group(2))


def seed_mse(predictions, labels) -> float:
    """The model's mean squared error on the labelled seeds (DeepTest's MSE of the original test frames)."""
    predictions, labels = np.asarray(predictions, np.float64).ravel(), np.asarray(labels, np.float64).ravel()
    if predictions.dtype.kind != "f" or len(labels) == 0 or np.any(np.isnan(labels)):
        raise InputError("the deeptest oracle measures the model's MSE on labelled seeds: give every seed its "
                         "angle (e.g. --labels FILE.csv)")
    return float(np.mean((predictions - labels) ** 2))


def calibrate(oracle: Oracle, predictions, labels, *, regression: bool) -> Oracle:
    """``oracle`` with every DeepTest term that has no MSE given the MSE measured on the seeds (their
    ``predictions`` and ``labels``); other oracles come back as they are. A classifier is refused."""
    if isinstance(oracle, DeepTest):
        if not regression:
            _check_regression(Execution(np.empty(0), np.empty((0, 2)), np.empty(0, np.int64), np.empty(0), np.empty(0)))
        return oracle if oracle.mse is not None else dataclasses.replace(oracle, mse=seed_mse(predictions, labels))
    if isinstance(oracle, Combined):
        return dataclasses.replace(oracle, left=calibrate(oracle.left, predictions, labels, regression=regression),
                                   right=calibrate(oracle.right, predictions, labels, regression=regression))
    if isinstance(oracle, Not):
        return dataclasses.replace(oracle, inner=calibrate(oracle.inner, predictions, labels, regression=regression))
    return oracle
