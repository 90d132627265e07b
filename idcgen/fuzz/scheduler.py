"""Schedulers: which corpus entries become parents of the next batch of mutants."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields

import numpy as np

from ..errors import Param, ParameterError
from ..spec import format_spec, parse


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


#: every scheduler by its spec name; a new one is a class with ``name`` and ``pick`` added here
SCHEDULERS = {"prioritized": BatchPrioritization, "uniform": Uniform}


def make_scheduler(spec):
    """A scheduler object (returned as it is: anything with ``name`` and ``pick(fuzz_count, n, rng)``) or a
    spec (:mod:`idcgen.spec`): ``"prioritized"``, ``"prioritized(gamma=5, p_min=0.01)"``, ``"uniform"``."""
    if not isinstance(spec, str):
        if callable(getattr(spec, "pick", None)) and isinstance(getattr(spec, "name", None), str):
            return spec
        raise ParameterError(
            Param("scheduler"),
            f" must be a scheduler (with name and pick) or one of {sorted(SCHEDULERS)}. Got {spec!r} instead.",
        )
    parsed = parse(spec, "scheduler", positional=False)
    if parsed.name not in SCHEDULERS:
        raise ParameterError(Param("scheduler"), f" must be one of {sorted(SCHEDULERS)}. Got {spec!r} instead.")
    cls = SCHEDULERS[parsed.name]
    unknown = sorted(set(parsed.kwargs) - {f.name for f in fields(cls)})
    if unknown:
        known = ", ".join(f.name for f in fields(cls)) or "none"
        raise ParameterError(f"the {parsed.name} scheduler has no parameter {unknown[0]!r}; its parameters: {known}")
    return cls(**parsed.kwargs)


def scheduler_spec(scheduler) -> str:
    """The spec that makes ``scheduler`` again: its name, with the parameters that differ from the defaults."""
    name: str = scheduler.name
    if not dataclasses.is_dataclass(scheduler):
        return name
    changed = {f.name: getattr(scheduler, f.name) for f in fields(scheduler) if getattr(scheduler, f.name) != f.default}
    return format_spec(name, changed)
