"""Parameter checks, one per kind of parameter, each failing with one line in the same words.

Messages name the Python parameter (``The 'batch_size' parameter must be an int >= 1. Got 0 instead.``) as
a :class:`~idcgen.errors.Param`, which the command line spells as its flag (``--batch-size must ...``).
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any, Sequence

import numpy as np

from .errors import Param, ParameterError


def _subject(name: str, owner: str | None) -> tuple:
    """The parts naming the parameter: an owner's own (a mutator's 'std') is no option, so it stays words."""
    return (f"The '{name}' parameter of {owner}",) if owner else (Param(name),)


def check_int(
    name: str, value: Any, low: int, high: int | None = None, *, owner: str | None = None, why: str = ""
) -> int:
    """An int (not a bool) in ``[low, high]``; returned as a Python int. ``why`` says what it counts."""
    if (
        isinstance(value, (bool, np.bool_))
        or not isinstance(value, Integral)
        or value < low
        or (high is not None and value > high)
    ):
        span = f">= {low}" if high is None else f"in the range [{low}, {high}]"
        raise ParameterError(
            *_subject(name, owner), f" must be an int {span}{f' ({why})' if why else ''}. Got {value!r} instead."
        )
    return int(value)


def check_real(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    closed: str = "both",
    *,
    owner: str | None = None,
) -> float:
    """A finite real in the interval from ``low`` to ``high``; ``closed`` says which ends belong to it
    ("both", "left", "right" or "neither")."""
    ok = not isinstance(value, (bool, np.bool_)) and isinstance(value, Real) and bool(np.isfinite(value))
    if ok and low is not None:
        ok = value >= low if closed in ("both", "left") else value > low
    if ok and high is not None:
        ok = value <= high if closed in ("both", "right") else value < high
    if not ok:
        span = ""
        if low is not None or high is not None:
            left = "[" if low is not None and closed in ("both", "left") else "("
            right = "]" if high is not None and closed in ("both", "right") else ")"
            span = f" in the range {left}{'-inf' if low is None else low}, {'inf' if high is None else high}{right}"
        raise ParameterError(*_subject(name, owner), f" must be a finite float{span}. Got {value!r} instead.")
    return float(value)


def check_choice(name: str, value: Any, choices: Sequence[str], *, owner: str | None = None) -> str:
    """One of ``choices`` (strings)."""
    if not isinstance(value, str) or value not in choices:
        raise ParameterError(
            *_subject(name, owner),
            f" must be a str among {{{', '.join(map(repr, choices))}}}. Got {value!r} instead.",
        )
    return value
