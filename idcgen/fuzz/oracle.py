"""Oracles: which mutants are findings (misbehaviours).

Each oracle takes the batch's predictions and what the corpus knows of the root seeds and returns a
boolean mask; ``runs_models`` says whether it runs models of its own to decide.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError, ParameterError


@dataclass(frozen=True)
class Misclassification:
    """The prediction differs from the root seed's label (the default).

    Only mutants of seeds the model classifies correctly count: every mutant of a seed that is already
    misclassified would otherwise be a "finding".
    """

    name = "misclassification"
    runs_models = False

    def __call__(self, x, predictions, root_labels, root_predictions) -> np.ndarray:
        if np.any(root_labels < 0):
            raise InputError("the misclassification oracle needs labelled seeds; use --oracle prediction-change")
        return (predictions != root_labels) & (root_predictions == root_labels)


@dataclass(frozen=True)
class PredictionChange:
    """The prediction differs from the root seed's prediction (no labels needed)."""

    name = "prediction-change"
    runs_models = False

    def __call__(self, x, predictions, root_labels, root_predictions) -> np.ndarray:
        return predictions != root_predictions


@dataclass(frozen=True)
class Disagreement:
    """The models disagree on the mutant (DeepXplore's differential oracle)."""

    others: tuple = field(default=())   # Network objects of the other models
    name = "disagreement"
    runs_models = True                  # the other models, on the main thread

    def __call__(self, x, predictions, root_labels, root_predictions) -> np.ndarray:
        if not self.others:
            raise ParameterError("the disagreement oracle needs at least two models (repeat --model)")
        flagged = np.zeros(len(x), bool)
        for network in self.others:
            flagged |= network.predict(x) != predictions
        return flagged


ORACLES = ("misclassification", "prediction-change", "disagreement")


def make_oracle(name: str, others=()):
    if name == "disagreement" and not others:
        raise ParameterError("the disagreement oracle needs at least two models (repeat --model)")
    if name == "misclassification":
        return Misclassification()
    if name == "prediction-change":
        return PredictionChange()
    if name == "disagreement":
        return Disagreement(tuple(others))
    raise ParameterError(f"The 'oracle' parameter must be one of {ORACLES}. Got {name!r} instead.")
