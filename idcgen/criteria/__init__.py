"""Coverage criteria to compare IDC with (docs/design.md, "Other criteria"): NC (DeepXplore; unscaled with
``scaling=none``), KMNC, NBC, SNAC, TKNC, TKNP (DeepGauge), LSC, DSC and MDSC (surprise adequacy), NLC
(NeuraL-Coverage) and CC (TensorFuzz), with the parameters of the papers that defined them.

    crit = make_criterion("kmnc").fit(network, x_train)      # one batched pass over the training data
    crit.coverage(network, x_test)                           # CriterionResult: KMNC 12.3 % (... sections)
    tracker = crit.tracker(); tracker.update(crit.features(network, batch))   # bool mask: new items
    make_criterion("nc:scaling=channel-means:threshold=0.5")   # a spec, as the CLI's --criteria takes

Every criterion but three counts *items* (neurons, sections, corners or buckets); a tracker holds the covered
ones, monotone, order-independent and mergeable, like IDC's. NLC, TKNP and CC have no total: their result
is a value (NLC's sum of covariance norms) or a count (patterns, vectors kept), and their trackers
(idcgen.criteria.values) keep the state that value needs. IDC itself comes from an analysis
(:func:`idcgen.analyze`): ``parse_criteria`` accepts "idc", ``make_criterion`` does not.
"""

from __future__ import annotations

from typing import Any

from idcgen.errors import Param, ParameterError
from idcgen.spec import parse, split_specs

from .base import Criterion, CriterionResult, CriterionTracker, default_neuron_layers
from .cc import ClusterCoverage
from .neurons import (
    KMultisectionCoverage,
    NeuronBoundaryCoverage,
    NeuronCoverage,
    StrongNeuronActivationCoverage,
    TopKNeuronCoverage,
)
from .nlc import NeuraLCoverage
from .surprise import DistanceSurpriseCoverage, LikelihoodSurpriseCoverage, MahalanobisSurpriseCoverage
from .tknp import TopKNeuronPatterns
from .values import ValueResult, ValueTracker

__all__ = [
    "CRITERIA",
    "ClusterCoverage",
    "Criterion",
    "CriterionResult",
    "CriterionTracker",
    "DistanceSurpriseCoverage",
    "KMultisectionCoverage",
    "LikelihoodSurpriseCoverage",
    "MahalanobisSurpriseCoverage",
    "NEEDS_DATA",
    "NeuraLCoverage",
    "NeuronBoundaryCoverage",
    "NeuronCoverage",
    "StrongNeuronActivationCoverage",
    "TopKNeuronCoverage",
    "TopKNeuronPatterns",
    "ValueResult",
    "ValueTracker",
    "default_neuron_layers",
    "make_criterion",
    "parse_criteria",
    "parse_spec",
]

CRITERIA: dict[str, type[Criterion]] = {
    cls.name: cls
    for cls in (
        NeuronCoverage,
        KMultisectionCoverage,
        NeuronBoundaryCoverage,
        StrongNeuronActivationCoverage,
        TopKNeuronCoverage,
        LikelihoodSurpriseCoverage,
        DistanceSurpriseCoverage,
        MahalanobisSurpriseCoverage,
        NeuraLCoverage,
        TopKNeuronPatterns,
        ClusterCoverage,
    )
}

#: every name ``parse_criteria`` accepts: IDC first, then those ``make_criterion`` builds
ALL_NAMES = ("idc",) + tuple(CRITERIA)
#: the criteria fitted on training data (``Criterion.needs_data``): the command line reads --train for them
NEEDS_DATA = tuple(name for name, cls in CRITERIA.items() if cls.needs_data)


def _spec_value(key: str, text: str) -> Any:
    """A parameter value written in a spec: layer names stay strings ("a+b" lists several), numbers
    become int or float, "none" None."""
    if key == "layers":
        return [part for part in text.split("+")] if text.lower() != "none" else None
    if key == "scaling":  # "none" is one of NC's scalings, not a missing value
        return text
    if key == "layer" or not text:
        return None if text.lower() == "none" else text
    if text.lower() == "none":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_spec(spec: str) -> tuple[str, dict]:
    """A criterion spec (:mod:`idcgen.spec`) -> (lower-case name, parameters).

    ``"nc"`` -> ``("nc", {})``; ``"nc(threshold=0.5, scaling=channel-means)"`` and the older
    ``"nc:threshold=0.5:scaling=channel-means"`` -> ``("nc", {"threshold": 0.5, "scaling": "channel-means"})``;
    ``layers=conv1+fc`` gives ``layers=["conv1", "fc"]``. The CLI's ``--criteria`` takes comma-separated specs.
    """
    parsed = parse(spec, "criterion", words=True, positional=False)
    params = {
        key: _spec_value(key, value)
        if isinstance(value, str)
        else (str(value) if key == "layer" and value is not None else value)
        for key, value in parsed.kwargs.items()
    }
    return parsed.name.strip().lower(), params


def make_criterion(name: str, **params: Any) -> Criterion:
    """A criterion by its short name (a key of :data:`CRITERIA`: "nc", "kmnc", ...) or spec
    ("nc:scaling=channel-means", see :func:`parse_spec`), with its parameters validated now rather than
    at fit. Keyword parameters override those of the spec."""
    spec_params: dict = {}
    if isinstance(name, str) and (":" in name or "(" in name):
        name, spec_params = parse_spec(name)
    params = {**spec_params, **params}
    key = name.strip().lower() if isinstance(name, str) else None
    if key not in CRITERIA:
        hint = " (IDC is measured by an analysis: idcgen.analyze)" if key == "idc" else ""
        raise ParameterError(f"unknown criterion {name!r}{hint}; known criteria: {', '.join(CRITERIA)}.")
    cls = CRITERIA[key]
    valid = cls._param_names()
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise ParameterError(
            f"{cls.__name__} ({key}) got unknown parameter(s) {', '.join(map(repr, unknown))}; "
            f"valid parameters: {', '.join(valid)}."
        )
    criterion = cls(**params)
    criterion._validate_params()
    return criterion


def parse_criteria(text: str) -> list[str]:
    """Comma-separated criterion specs -> validated specs with lower-case names, in order, without repeats.

    ``"idc,NC,kmnc:k=100"`` -> ``["idc", "nc", "kmnc:k=100"]``. "idc" is accepted (the caller measures
    it, without parameters); every other spec is checked by building it (:func:`make_criterion`).
    """
    if not isinstance(text, str):
        raise ParameterError(
            Param("criteria"), f" must be a comma-separated string such as 'idc,nc,kmnc'. Got {text!r} instead."
        )
    specs = [part for part in split_specs(text) if part]
    if not specs:
        raise ParameterError(
            Param("criteria"), f" must name at least one of {', '.join(ALL_NAMES)}. Got {text!r} instead."
        )
    names = [spec_name(spec) for spec in specs]
    unknown = [n for n in names if n not in ALL_NAMES]
    if unknown:
        raise ParameterError(
            f"unknown criteria {', '.join(map(repr, unknown))} in {text!r}; known criteria: {', '.join(ALL_NAMES)}."
        )
    out = []
    for name, spec in zip(names, specs):
        rest = spec.strip()[len(spec.strip().split(":")[0].split("(")[0]) :]
        if name == "idc" and rest:
            raise ParameterError(f"criterion spec {spec!r}: IDC takes no parameters here (its analysis sets them).")
        if name != "idc":
            make_criterion(spec)  # ParameterError for a bad parameter, before any work
        out.append(name + rest)
    return list(dict.fromkeys(out))


def spec_name(spec: str) -> str:
    """The lower-case criterion name of a spec, in either spelling: ``"KMNC(k=10)"``, ``"kmnc:k=10"`` -> "kmnc"."""
    return spec.strip().split(":")[0].split("(")[0].strip().lower()
