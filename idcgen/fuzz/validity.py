"""Validity rules: a mutant must stay close to its reference image, by the rule of the mutator that made it.

The reference is the root seed, the root seed moved by the one affine transform a chain may contain, or
the mutant of the one scene change (fog, rain, ...) a chain may contain instead (``Mutator.moves_reference``).
Each mutator says its rule (``Mutator.validity``; docs/design.md, "Mutations"):

- "pixel" (every mutator but the driving transforms), DeepHunter's bounds: valid when few pixels
  changed (L0 < alpha * size, then any L-inf) or every change is small (L-inf <= beta * value range).
  Defaults alpha = 0.02, beta = 0.2 (DeepHunter, ISSTA 2019).
- "scene" (rain, fog, sun_flare, shadow, motion_blur, gaussian_blur): a changed weather, light or camera
  changes most pixels by more than beta by design, so these are judged by structure instead: SSIM
  against the reference >= ``ssim`` (default 0.3; :func:`idcgen.quality.ssim`). Images smaller than
  SSIM's 11x11 window are only held to the value range (every mutant already is).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ParameterError
from ..quality import ssim as _ssim
from ..threads import row_parts, run_parts

#: SSIM's window side (idcgen.quality): smaller images cannot be scored
_WINDOW = 11


@dataclass(frozen=True)
class Validity:
    alpha: float = 0.02
    beta: float = 0.2
    enabled: bool = True
    value_range: tuple[float, float] = (0.0, 1.0)
    ssim: float = 0.3

    def __post_init__(self):
        for name in ("alpha", "beta", "ssim"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ParameterError(f"The '{name}' validity bound must be in (0, 1]. Got {value!r} instead.")

    def describe(self, mutators=()) -> str:
        """One line; with ``mutators`` given, the scene rule is named when one of them uses it."""
        if not self.enabled:
            return "validity bounds: off (every mutant inside the value range is accepted)"
        text = (
            f"validity bounds (DeepHunter): L0 < {self.alpha:g} x pixels, or else L-inf <= {self.beta:g} x "
            f"value range ({self.beta * 255:.0f}/255), measured against the reference image"
        )
        scene = [m.name for m in mutators if getattr(m, "validity", "pixel") == "scene"]
        if scene:
            text += f"; {', '.join(scene)}: SSIM >= {self.ssim:g} against the reference instead"
        return text

    def check(self, mutants: np.ndarray, references: np.ndarray, mutator=None) -> np.ndarray:
        """Boolean mask (n,) of the mutants that are valid against their references, by the rule of the
        ``mutator`` that made them (DeepHunter's bounds when it is None)."""
        if not self.enabled:
            return np.ones(len(mutants), bool)
        rule = getattr(mutator, "validity", "pixel")
        if rule == "scene":
            if len(mutants) == 0 or min(np.shape(mutants)[1:3]) < _WINDOW:
                return np.ones(len(mutants), bool)
            return _ssim(mutants, references, self.value_range) >= self.ssim
        if rule != "pixel":
            raise ParameterError(f"{mutator!r} asks for the validity rule {rule!r}; the rules are 'pixel' and 'scene'.")
        span = self.value_range[1] - self.value_range[0]
        n = len(mutants)
        if n == 0:
            return np.ones(0, bool)
        mutants, references = np.reshape(mutants, (n, -1)), np.reshape(references, (n, -1))
        dtype = np.result_type(mutants, references)
        l0, linf = np.zeros(n, np.int64), np.zeros(n, dtype)

        def part(rows: slice) -> None:  # rows at a time, in parts on the pool: the differences stay in cache
            diff = np.subtract(mutants[rows], references[rows])
            np.abs(diff, out=diff)
            # a change below half a uint8 step is rounding, not a pixel change
            l0[rows] = np.count_nonzero(diff > 0.5 / 255 * span, axis=1)
            linf[rows] = diff.max(axis=1, initial=0.0)

        run_parts(part, row_parts(n, mutants.shape[1] * dtype.itemsize))
        return (l0 < self.alpha * mutants.shape[1]) | (linf <= self.beta * span + 1e-6)
