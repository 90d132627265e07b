"""Coverage criteria to compare IDC with (docs/design.md, "Other criteria"): NC (DeepXplore), KMNC, NBC, SNAC, TKNC
(DeepGauge), LSC and DSC (surprise adequacy), with the DeepImportance paper's parameters.

    crit = make_criterion("kmnc").fit(network, x_train)      # one batched pass over the training data
    crit.coverage(network, x_test)                           # CriterionResult: KMNC 12.3 % (... sections)
    tracker = crit.tracker(); tracker.update(crit.features(network, batch))   # bool mask: new items

Every criterion counts *items* (neurons, sections, corners or buckets); a tracker holds the covered
ones, monotone, order-independent and mergeable, like IDC's. IDC itself comes from an analysis
(:func:`idcgen.analyze`): ``parse_criteria`` accepts "idc", ``make_criterion`` does not.
"""

from __future__ import annotations

from typing import Any

from idcgen.errors import ParameterError

from .base import Criterion, CriterionResult, CriterionTracker, default_neuron_layers
from .neurons import (KMultisectionCoverage, NeuronBoundaryCoverage, NeuronCoverage,
                      StrongNeuronActivationCoverage, TopKNeuronCoverage)
from .surprise import DistanceSurpriseCoverage, LikelihoodSurpriseCoverage

__all__ = ["CRITERIA", "Criterion", "CriterionResult", "CriterionTracker", "DistanceSurpriseCoverage",
           "KMultisectionCoverage", "LikelihoodSurpriseCoverage", "NeuronBoundaryCoverage", "NeuronCoverage",
           "StrongNeuronActivationCoverage", "TopKNeuronCoverage", "default_neuron_layers", "make_criterion",
           "parse_criteria"]

CRITERIA: dict[str, type[Criterion]] = {cls.name: cls for cls in (
    NeuronCoverage, KMultisectionCoverage, NeuronBoundaryCoverage, StrongNeuronActivationCoverage,
    TopKNeuronCoverage, LikelihoodSurpriseCoverage, DistanceSurpriseCoverage)}

#: every name ``parse_criteria`` accepts: IDC first, then those ``make_criterion`` builds
ALL_NAMES = ("idc",) + tuple(CRITERIA)


def make_criterion(name: str, **params: Any) -> Criterion:
    """A criterion by its short name ("nc", "kmnc", "nbc", "snac", "tknc", "lsc", "dsc"), with its
    parameters validated now rather than at fit."""
    key = name.strip().lower() if isinstance(name, str) else None
    if key not in CRITERIA:
        hint = " (IDC is measured by an analysis: idcgen.analyze)" if key == "idc" else ""
        raise ParameterError(f"unknown criterion {name!r}{hint}; known criteria: {', '.join(CRITERIA)}.")
    cls = CRITERIA[key]
    valid = cls._param_names()
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise ParameterError(f"{cls.__name__} ({key}) got unknown parameter(s) {', '.join(map(repr, unknown))}; "
                             f"valid parameters: {', '.join(valid)}.")
    criterion = cls(**params)
    criterion._validate_params()
    return criterion


def parse_criteria(text: str) -> list[str]:
    """Comma-separated criterion names -> validated lower-case names, in order, without repeats.

    ``"idc,nc,kmnc"`` -> ``["idc", "nc", "kmnc"]``. "idc" is accepted (the caller measures it).
    """
    if not isinstance(text, str):
        raise ParameterError(f"The 'criteria' parameter must be a comma-separated string such as 'idc,nc,kmnc'. "
                             f"Got {text!r} instead.")
    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    if not names:
        raise ParameterError(f"The 'criteria' parameter must name at least one of {', '.join(ALL_NAMES)}. "
                             f"Got {text!r} instead.")
    unknown = [n for n in names if n not in ALL_NAMES]
    if unknown:
        raise ParameterError(f"unknown criteria {', '.join(map(repr, unknown))} in {text!r}; "
                             f"known criteria: {', '.join(ALL_NAMES)}.")
    return list(dict.fromkeys(names))
