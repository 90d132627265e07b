"""What a campaign measures, and which criterion decides that a mutant joins the corpus.

A *measure* turns one forward pass (probabilities and the activations of the layers it names) into the
items a tracker counts: IDC's cluster combinations (from the analysis), or any other criterion's items
(:mod:`idcgen.criteria`). A campaign measures IDC always, and every criterion it is given besides.
*Guidance* picks one measure: a valid mutant joins the corpus when it covers an item of that measure
not covered yet; guidance ``"none"`` keeps every valid mutant (the unguided baseline) and ``"keep-none"``
none (the seeds alone are fuzzed for the whole budget: in the fourth guidance study no guide found more
failures per model call or more distinct faults at equal counts, docs/results.md). Every tracker counts what
the corpus covers, so the coverage figures always describe the grown test set.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import Param, ParameterError


def guide_names() -> tuple[str, ...]:
    """Every guidance name: IDC, each registered criterion (idcgen.criteria.CRITERIA), "none" and "keep-none"."""
    from ..criteria import CRITERIA

    return ("idc", *CRITERIA, "none", "keep-none")


class IDCMeasure:
    """IDC: the important neurons' cluster combination of each input."""

    name = "idc"

    def __init__(self, analysis):
        self.analysis = analysis
        self.layers = (analysis.layer,)

    def features(self, probabilities: np.ndarray, activations: Sequence[np.ndarray]) -> np.ndarray:
        return self.analysis.combinations.ids(self.analysis.select(activations[0]))

    def tracker(self):
        return self.analysis.tracker()


class CriterionMeasure:
    """Any fitted criterion of :mod:`idcgen.criteria` (NC, KMNC, NBC, SNAC, TKNC, LSC, DSC)."""

    def __init__(self, criterion):
        criterion._check_fitted()
        self.criterion = criterion
        self.name = criterion.name
        self.layers = tuple(criterion.forward_layers())

    def features(self, probabilities: np.ndarray, activations: Sequence[np.ndarray]) -> np.ndarray:
        return self.criterion.features_from(probabilities, list(activations))

    def tracker(self):
        return self.criterion.tracker()


def measures_of(analysis, criteria: Sequence = ()) -> list:
    """IDC first, then one measure per fitted criterion (each name once)."""
    measures: list[IDCMeasure | CriterionMeasure] = [IDCMeasure(analysis)]
    if isinstance(criteria, str) or any(isinstance(c, str) for c in criteria):
        name = criteria if isinstance(criteria, str) else next(c for c in criteria if isinstance(c, str))
        raise ParameterError(
            f"measure takes fitted criteria, not names: pass measure=[make_criterion({name!r}).fit(network, x_train)] "
            "(idcgen.criteria.make_criterion; the command line's --measure fits them on --train)"
        )
    for criterion in criteria:
        measure = criterion if isinstance(criterion, (IDCMeasure, CriterionMeasure)) else CriterionMeasure(criterion)
        if measure.name in (m.name for m in measures):
            raise ParameterError(f"criterion {measure.name} is measured twice; give each criterion once")
        measures.append(measure)
    return measures


def check_guide(guide: str, measures: Sequence) -> str:
    """The guiding measure's name: "none", "keep-none" or one of the measures'."""
    names = [m.name for m in measures]
    if guide in ("none", "keep-none") or guide in names:
        return guide
    if guide in guide_names():
        raise ParameterError(
            f"guidance by {guide} needs that criterion fitted: pass "
            f"measure=[make_criterion({guide!r}).fit(network, x_train)] (the command line fits it "
            "on --train)"
        )
    raise ParameterError(Param("guide"), f" must be one of {', '.join(guide_names())}. Got {guide!r} instead.")


def new_coverage(guide: str, trackers: dict, features: dict, valid: np.ndarray) -> np.ndarray:
    """Which mutants join the corpus: valid ones that cover a new item of the guiding measure (a new item
    counts for its first mutant only); every valid one without guidance ("none"), none with "keep-none"."""
    if guide == "none":
        return valid.copy()
    if guide == "keep-none":
        return np.zeros(len(valid), bool)
    keep = np.zeros(len(valid), bool)
    keep[valid] = trackers[guide].would_cover(features[guide][valid])
    return keep
