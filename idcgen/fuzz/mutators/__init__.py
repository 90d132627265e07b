"""Mutators: one kind of mutation with its parameters; a batch of inputs in, a batch of mutants out.

Three kinds (docs/design.md, "Mutations"): *noise* (:mod:`.noise`: Gaussian noise on all pixels, on the most
relevant pixels, on random pixels), *transform* (:mod:`.image`: affine and photometric transforms, blur and
elastic; :mod:`.driving`: DeepTest's rain, fog, sun flare, shadow and camera blurs; :mod:`.deeptest`: DeepTest's
gain, bias and blur kinds) and *attack*
(:mod:`.attacks`: cleverhans and ART; :mod:`.directed`: towards uncovered IDC combinations;
:mod:`.deepxplore`: DeepXplore's differential gradient ascent). A mutator
is written as a spec string, ``"gauss"`` or ``"gauss(std=0.1)"``; its ``repr`` is the canonical spec and
round-trips through :func:`make_mutator`. The contract every mutator keeps is in :mod:`.base`.
"""

from __future__ import annotations

import importlib

from ...errors import ParameterError
from ...spec import parse, split_specs
from .base import MutationContext, Mutator, Param, check_tasks, parameter_names

__all__ = [
    "DEFAULT_MUTATORS",
    "MUTATORS",
    "REGISTRY",
    "MutationContext",
    "Mutator",
    "Param",
    "check_tasks",
    "default_mutators",
    "describe_mutators",
    "make_mutator",
    "mutator_class",
    "parse_mutators",
    "split_specs",
]

#: Every mutator by its spec name, in listing order: the module under idcgen.fuzz.mutators that defines it and
#: its class. A mutator's module is imported when a mutator of it is made (:func:`mutator_class`), not the
#: thirty of them for the two a campaign names; ``REGISTRY`` (the classes themselves) imports them all.
MUTATORS: dict[str, tuple[str, str]] = {
    "gauss": ("noise", "Gauss"),
    "relevant_pixels": ("noise", "RelevantPixels"),
    "random_pixels": ("noise", "RandomPixels"),
    "rotate": ("image", "Rotate"),
    "shift": ("image", "Shift"),
    "scale": ("image", "Scale"),
    "shear": ("image", "Shear"),
    "brightness": ("image", "Brightness"),
    "contrast": ("image", "Contrast"),
    "noise": ("image", "Noise"),
    "blur": ("image", "Blur"),
    "elastic": ("image", "Elastic"),
    "rain": ("driving", "Rain"),
    "fog": ("driving", "Fog"),
    "sun_flare": ("driving", "SunFlare"),
    "shadow": ("driving", "Shadow"),
    "motion_blur": ("driving", "MotionBlur"),
    "gaussian_blur": ("driving", "GaussianBlur"),
    "gain": ("deeptest", "Gain"),
    "bias": ("deeptest", "Bias"),
    "median_blur": ("deeptest", "MedianBlur"),
    "bilateral_blur": ("deeptest", "BilateralBlur"),
    "deeptest_blur": ("deeptest", "DeepTestBlur"),
    "fgsm": ("attacks", "FGSM"),
    "bim": ("attacks", "BIM"),
    "pgd": ("attacks", "PGD"),
    "cw": ("attacks", "CW"),
    "jsma": ("attacks", "JSMA"),
    "directed": ("directed", "CoverageDirected"),
    "deepxplore": ("deepxplore", "DeepXplore"),
}


def mutator_class(name: str) -> type[Mutator]:
    """The class of the mutator named ``name`` (a key of :data:`MUTATORS`), its module imported on first use."""
    module, cls = MUTATORS[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)


def __getattr__(name: str) -> dict[str, type[Mutator]]:
    """``REGISTRY``: every mutator class by its spec name, in listing order (for listings and tests)."""
    if name == "REGISTRY":
        return {key: mutator_class(key) for key in MUTATORS}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: The fuzz default: every cheap mutator. ``cw`` (10-20 s per 100 MNIST images) and ``jsma`` (0.3-0.5 s
#: per image) are left out for cost; add them explicitly.
#: ``blur`` and ``elastic`` are left out too: on MNIST almost none of their mutants pass DeepHunter's
#: default L-inf bound (they move stroke edges by more than 0.2); use them with a larger ``--beta``.
DEFAULT_MUTATORS = (
    "gauss,relevant_pixels,random_pixels,rotate,shift,scale,shear,brightness,contrast,noise,fgsm,bim,pgd,directed"
)


def make_mutator(spec: str) -> Mutator:
    """A mutator from its spec (:mod:`idcgen.spec`): ``"gauss"`` or ``"gauss(std=0.1)"``; values are Python
    literals, given by name."""
    parsed = parse(spec, "mutator", positional=False)
    if parsed.name not in MUTATORS:
        raise ParameterError(f"unknown mutator {parsed.name!r}; known mutators: {', '.join(MUTATORS)}")
    cls = mutator_class(parsed.name)
    known = parameter_names(cls)
    unknown = [key for key in parsed.kwargs if key not in known]
    if unknown:
        raise ParameterError(
            f"{parsed.name} has no parameter {unknown[0]!r}; its parameters are: {', '.join(known) or '(none)'}."
        )
    return cls(**parsed.kwargs)


def parse_mutators(text: str) -> list[Mutator]:
    """Mutators from a comma-separated list of specs, e.g. ``"gauss(std=0.05),rotate,fgsm(eps=0.1)"``."""
    specs = split_specs(text)
    if any(not spec for spec in specs):
        raise ParameterError(
            f"empty mutator spec in {text!r}; expected a comma-separated list such as 'gauss(std=0.05),rotate'"
        )
    return [make_mutator(spec) for spec in specs]


def default_mutators(network) -> tuple[list[Mutator], list[str]]:
    """The fuzz default (DEFAULT_MUTATORS) for ``network``: the mutators that can run on it, and one note for
    each left out saying why (``relevant_pixels`` where relevance cannot reach the input, a class-margin
    attack on a regression model); mutators the user lists are refused instead (Fuzzer, check_tasks)."""
    kept, notes = [], []
    for mutator in parse_mutators(DEFAULT_MUTATORS):
        for_task = network.task in mutator.tasks
        reason = (
            mutator.capability_gap(network) or mutator.cannot_run(network)
            if for_task
            else f"it works on {' and '.join(mutator.tasks)} models only, and this one is a {network.task} model"
        )
        hint = mutator.instead if for_task else mutator.task_instead or mutator.instead
        if reason is None:
            kept.append(mutator)
        else:
            notes.append(f"default mutator {mutator.name} left out: {reason}" + (f" ({hint})" if hint else ""))
    return kept, notes


def describe_mutators() -> list[tuple[str, str, dict]]:
    """(name, kind, default parameters) of every registered mutator, for listings."""
    classes = {name: mutator_class(name) for name in MUTATORS}
    return [(name, cls.kind, cls().params()) for name, cls in classes.items()]
