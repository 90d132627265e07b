"""Schedulers: which corpus entries become parents of the next batch of mutants."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ParameterError


@dataclass(frozen=True)
class BatchPrioritization:
    """DeepHunter's batch prioritisation: entries fuzzed less often are picked more often.

    Weight ``1 - f / gamma`` while ``f < (1 - p_min) * gamma``, else ``p_min``, where f is how often the
    entry has been a parent.
    """

    gamma: float = 5.0
    p_min: float = 0.01
    name = "prioritized"

    def weights(self, fuzz_count: np.ndarray) -> np.ndarray:
        f = fuzz_count.astype(np.float64)
        return np.where(f < (1 - self.p_min) * self.gamma, 1 - f / self.gamma, self.p_min)

    def pick(self, fuzz_count: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        # inverse-CDF sampling (rng.choice(p=...) validates p on every call: ten times slower)
        cdf = np.cumsum(self.weights(fuzz_count))
        return np.minimum(np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right"), len(cdf) - 1)


@dataclass(frozen=True)
class Uniform:
    """Every corpus entry equally likely."""

    name = "uniform"

    def pick(self, fuzz_count: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, len(fuzz_count), size=n)


SCHEDULERS = {"prioritized": BatchPrioritization, "uniform": Uniform}


def make_scheduler(name: str):
    if name not in SCHEDULERS:
        raise ParameterError(f"The 'scheduler' parameter must be one of {sorted(SCHEDULERS)}. Got {name!r} instead.")
    return SCHEDULERS[name]()
