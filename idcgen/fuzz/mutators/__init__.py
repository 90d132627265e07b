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

import ast
import re

from ...errors import ParameterError
from .attacks import BIM, CW, FGSM, JSMA, PGD
from .base import MutationContext, Mutator, Param, _parameter_names
from .deeptest import BilateralBlur, Bias, DeepTestBlur, Gain, MedianBlur
from .deepxplore import DeepXplore
from .directed import CoverageDirected
from .driving import Fog, GaussianBlur, MotionBlur, Rain, Shadow, SunFlare
from .image import Blur, Brightness, Contrast, Elastic, Noise, Rotate, Scale, Shear, Shift
from .noise import Gauss, RandomPixels, RelevantPixels

__all__ = ["DEFAULT_MUTATORS", "REGISTRY", "MutationContext", "Mutator", "Param", "describe_mutators",
           "make_mutator", "parse_mutators", "split_specs"]

#: Every mutator by its spec name, in listing order.
REGISTRY: dict[str, type[Mutator]] = {cls.name: cls for cls in (
    Gauss, RelevantPixels, RandomPixels, Rotate, Shift, Scale, Shear, Brightness, Contrast, Noise, Blur, Elastic,
    Rain, Fog, SunFlare, Shadow, MotionBlur, GaussianBlur, Gain, Bias, MedianBlur, BilateralBlur, DeepTestBlur,
    FGSM, BIM, PGD, CW, JSMA, CoverageDirected, DeepXplore)}

#: The fuzz default: every cheap mutator. ``cw`` (10-20 s per 100 MNIST images) and ``jsma`` (0.3-0.5 s
#: per image) are left out for cost; add them explicitly.
#: ``blur`` and ``elastic`` are left out too: on MNIST almost none of their mutants pass DeepHunter's
#: default L-inf bound (they move stroke edges by more than 0.2); use them with a larger ``--beta``.
DEFAULT_MUTATORS = ("gauss,relevant_pixels,random_pixels,rotate,shift,scale,shear,brightness,contrast,"
                    "noise,fgsm,bim,pgd,directed")



_SPEC = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\((.*)\))?\s*", re.DOTALL)


def make_mutator(spec: str) -> Mutator:
    """A mutator from its spec: ``"gauss"`` or ``"gauss(std=0.1)"``; values are Python literals."""
    if not isinstance(spec, str):
        raise ParameterError(f"a mutator spec must be a string such as 'gauss(std=0.1)'. Got {spec!r} instead.")
    match = _SPEC.fullmatch(spec)
    if not match:
        raise ParameterError(f"malformed mutator spec {spec!r}: expected name or name(param=value, ...)")
    name, args = match.group(1), match.group(2)
    if name not in REGISTRY:
        raise ParameterError(f"unknown mutator {name!r}; known mutators: {', '.join(REGISTRY)}")
    cls = REGISTRY[name]
    kwargs = _parse_args(spec, args or "")
    known = _parameter_names(cls)
    unknown = [key for key in kwargs if key not in known]
    if unknown:
        raise ParameterError(f"{name} has no parameter {unknown[0]!r}; its parameters are: "
                             f"{', '.join(known) or '(none)'}.")
    return cls(**kwargs)


def _parse_args(spec: str, args: str) -> dict:
    try:  # ast.parse only builds a syntax tree; literal_eval below accepts literals only
        call = ast.parse(f"f({args})", mode="eval").body
    except SyntaxError as exc:
        raise ParameterError(f"malformed mutator spec {spec!r}: {exc.msg}; expected name(param=value, ...)") from None
    if not isinstance(call, ast.Call) or call.args or any(kw.arg is None for kw in call.keywords):
        raise ParameterError(f"malformed mutator spec {spec!r}: give parameters by name, as name(param=value, ...)")
    kwargs = {}
    for kw in call.keywords:
        if kw.arg in kwargs:
            raise ParameterError(f"malformed mutator spec {spec!r}: parameter {kw.arg!r} given twice")
        try:
            kwargs[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, SyntaxError, TypeError):
            raise ParameterError(f"malformed mutator spec {spec!r}: the value of {kw.arg!r} must be a Python "
                                 f"literal (number, bool, string or tuple). Got {ast.unparse(kw.value)!r}") from None
    return kwargs


def split_specs(text: str) -> list[str]:
    """Split at commas outside parentheses, brackets and quotes."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [part.strip() for part in parts]


def parse_mutators(text: str) -> list[Mutator]:
    """Mutators from a comma-separated list of specs, e.g. ``"gauss(std=0.05),rotate,fgsm(eps=0.1)"``."""
    specs = split_specs(text)
    if any(not spec for spec in specs):
        raise ParameterError(f"empty mutator spec in {text!r}; expected a comma-separated list such as "
                             f"'gauss(std=0.05),rotate'")
    return [make_mutator(spec) for spec in specs]


def describe_mutators() -> list[tuple[str, str, dict]]:
    """(name, kind, default parameters) of every registered mutator, for listings."""
    return [(name, cls.kind, cls().params()) for name, cls in REGISTRY.items()]

