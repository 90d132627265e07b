"""DeepHunter's validity bounds: a mutant must stay close to its reference image.

The reference is the root seed, or the root seed moved by the one affine transform a chain may contain.
A mutant is valid when few pixels changed (L0 < alpha * size, then any L-inf) or every change is small
(L-inf <= beta * value range). Defaults alpha = 0.02, beta = 0.2 (DeepHunter, ISSTA 2019).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ParameterError


@dataclass(frozen=True)
class Validity:
    alpha: float = 0.02
    beta: float = 0.2
    enabled: bool = True
    value_range: tuple[float, float] = (0.0, 1.0)

    def __post_init__(self):
        for name in ("alpha", "beta"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ParameterError(f"The '{name}' validity bound must be in (0, 1]. Got {value!r} instead.")

    def describe(self) -> str:
        if not self.enabled:
            return "validity bounds: off (every mutant inside the value range is accepted)"
        return (f"validity bounds (DeepHunter): L0 < {self.alpha:g} x pixels, or else L-inf <= {self.beta:g} x "
                f"value range ({self.beta * 255:.0f}/255), measured against the reference image")

    def check(self, mutants: np.ndarray, references: np.ndarray) -> np.ndarray:
        """Boolean mask (n,) of the mutants that are valid against their references."""
        if not self.enabled:
            return np.ones(len(mutants), bool)
        span = self.value_range[1] - self.value_range[0]
        diff = np.subtract(mutants, references).reshape(len(mutants), -1)
        np.abs(diff, out=diff)
        # a change below half a uint8 step is rounding, not a pixel change
        l0 = np.count_nonzero(diff > 0.5 / 255 * span, axis=1)
        linf = diff.max(axis=1, initial=0.0)
        return (l0 < self.alpha * diff.shape[1]) | (linf <= self.beta * span + 1e-6)
