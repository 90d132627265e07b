"""DeepTest's metamorphic oracle for steering models (Tian et al., ICSE 2018; docs/design.md, "Regression
and driving").

A transformed frame should still be steered about as the frame's recorded angle says: the relation holds
when ``(theta_t - theta_label)^2 <= lam * MSE``, with ``theta_t`` the model's angle on the transformed frame,
``theta_label`` the original frame's label and ``MSE`` the model's mean squared error on the original
(untransformed) test frames. A transformed frame that breaks it is an *erroneous behaviour*.

The oracle itself is :class:`idcgen.fuzz.oracle.DeepTest` (registered with the others); this module measures
its MSE. ``deeptest(lam=5)`` leaves the MSE to be measured on the campaign's seeds when the campaign starts
(:func:`calibrate`); the campaign then records ``deeptest(lam=5, mse=<measured>)`` as its oracle, so the
report states both and a resumed campaign or an export re-check uses the same bound. ``mse=`` may also be
given outright.

DeepTest's second threshold, epsilon (its Eq. 3; docs/results.md, "DeepTest's own standard"), judges a
transformation at one parameter value as a whole: its frames count as erroneous behaviours only when the
MSE over all the frames it transformed stays within ``eps`` of the original MSE,
``|MSE(transformed) - MSE(original)| <= eps`` (:func:`within_eps`, :func:`erroneous_behaviours`). A
transformation that moves the whole set's error by more than ``eps`` is left out: it changes the scene
too much for the original angles to hold. Numpy only.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..checks import check_real
from ..errors import InputError
from .oracle import Combined, DeepTest, Execution, Not, Oracle

__all__ = ["DeepTest", "calibrate", "erroneous_behaviours", "keep_calibration", "seed_mse", "within_eps"]


def seed_mse(predictions, labels) -> float:
    """The model's mean squared error on the labelled seeds (DeepTest's MSE of the original test frames)."""
    predictions, labels = np.asarray(predictions, np.float64).ravel(), np.asarray(labels, np.float64).ravel()
    if predictions.dtype.kind != "f" or len(labels) == 0 or np.any(np.isnan(labels)):
        raise InputError(
            "the deeptest oracle measures the model's MSE on labelled seeds: give every seed its "
            "angle (e.g. --labels FILE.csv)"
        )
    return float(np.mean((predictions - labels) ** 2))


def within_eps(mse_transformed: float, mse: float, eps: float) -> bool:
    """DeepTest's Eq. 3: whether a transformation at one parameter value keeps the MSE over the frames it
    transformed within ``eps`` (rad^2) of the model's MSE on the original frames (equality passes)."""
    check_real("eps", eps, 0.0, None)
    return abs(float(mse_transformed) - float(mse)) <= eps


def erroneous_behaviours(predictions, labels, *, mse: float, lam: float, eps: float | None = None) -> int:
    """How many erroneous behaviours one transformation at one parameter value shows: of its transformed
    frames (the model's ``predictions`` on them, the original frames' ``labels``), those breaking the relation
    ``(prediction - label)^2 > lam * mse``; none at all when the transformation fails the ``eps`` filter
    (:func:`within_eps`: the MSE over these frames against ``mse``). ``eps`` None: no filter."""
    squared = (np.asarray(predictions, np.float64).ravel() - np.asarray(labels, np.float64).ravel()) ** 2
    if eps is not None and not within_eps(float(np.mean(squared)) if len(squared) else mse, mse, eps):
        return 0
    return int(np.count_nonzero(squared > DeepTest(lam=lam, mse=mse).bound))


def calibrate(oracle: Oracle, predictions, labels, *, regression: bool) -> Oracle:
    """``oracle`` with every DeepTest term that has no MSE given the MSE measured on the seeds (their
    ``predictions`` and ``labels``); other oracles come back as they are. A classifier is refused."""
    if isinstance(oracle, DeepTest):
        if not regression:  # the oracle's own one-line refusal of a classifier
            oracle(Execution(np.empty(0), np.empty((0, 2)), np.empty(0, np.int64), np.empty(0), np.empty(0)))
        return oracle if oracle.mse is not None else dataclasses.replace(oracle, mse=seed_mse(predictions, labels))
    if isinstance(oracle, Combined):
        return dataclasses.replace(
            oracle,
            left=calibrate(oracle.left, predictions, labels, regression=regression),
            right=calibrate(oracle.right, predictions, labels, regression=regression),
        )
    if isinstance(oracle, Not):
        return dataclasses.replace(oracle, inner=calibrate(oracle.inner, predictions, labels, regression=regression))
    return oracle


def keep_calibration(oracle: Oracle, recorded: Oracle) -> Oracle:
    """``recorded`` (a campaign's oracle) where it is ``oracle`` with the seeds' MSE filled in, so that a
    campaign resumed with the spec as typed (``deeptest(lam=5)``, what a parallel run gives its workers)
    keeps the bound it measured when it started; else ``oracle`` unchanged (and the resume sees the
    difference)."""

    def calibrated(mine, theirs) -> bool:
        if type(mine) is not type(theirs):
            return False
        if isinstance(mine, DeepTest):
            return mine.lam == theirs.lam and mine.mse in (None, theirs.mse)
        if isinstance(mine, Combined):
            return mine.op == theirs.op and calibrated(mine.left, theirs.left) and calibrated(mine.right, theirs.right)
        if isinstance(mine, Not):
            return calibrated(mine.inner, theirs.inner)
        return mine == theirs

    return recorded if calibrated(oracle, recorded) else oracle
