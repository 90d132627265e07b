"""The coverage-directed mutator: steer an input towards a combination not yet covered.

DeepXplore's gradient ascent, aimed at IDC instead of neuron coverage: for each parent pick an
uncovered combination near its own (one or two important neurons moved to another cluster), then take
signed-gradient steps that pull the important neurons' activations towards that combination's
centroids, staying within an L-inf ball around the parent (by default inside DeepHunter's bounds).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ...errors import ParameterError
from .base import Mutator, Param


class CoverageDirected(Mutator):
    """Signed-gradient steps that pull the important neurons towards an uncovered combination."""

    name: ClassVar[str] = "directed"
    kind: ClassVar[str] = "directed"
    needs: ClassVar[str] = "differentiable"
    needs_model: ClassVar[bool] = True
    parameters: ClassVar[dict] = {
        "steps": Param(5, int, 1, 100),
        "step_size": Param(0.03, float, 0.0, 1.0, closed="right"),
        "eps": Param(0.15, float, 0.0, 1.0, closed="right"),
        "tries": Param(16, int, 1, 1000),
    }

    def targets(self, current: np.ndarray, combinations, tracker, rng: np.random.Generator) -> np.ndarray:
        """An uncovered combination id per input, close to its current one where possible."""
        digits = combinations.decode(current)  # (n, m)
        n, m = digits.shape
        counts = np.asarray(combinations.cluster_counts)
        movable = np.flatnonzero(counts > 1)
        chosen = np.full(n, -1, np.int64)
        covered = tracker.covered_ids()
        if len(movable):
            for _ in range(self.tries):
                todo = np.flatnonzero(chosen < 0)
                if not len(todo):
                    break
                cand = digits[todo].copy()
                for _flip in range(1 + int(rng.integers(2))):  # move one or two neurons
                    j = movable[rng.integers(len(movable), size=len(todo))]
                    shift = rng.integers(1, counts[j])
                    cand[np.arange(len(todo)), j] = (cand[np.arange(len(todo)), j] + shift) % counts[j]
                ids = np.ravel_multi_index(tuple(cand.T), tuple(counts))  # neuron 0 most significant
                fresh = ~np.isin(ids, covered)
                chosen[todo[fresh]] = ids[fresh]
        left = np.flatnonzero(chosen < 0)
        if len(left):
            pool = tracker.uncovered_ids(limit=max(len(left), 1), rng=rng)
            if len(pool):
                chosen[left] = pool[rng.integers(len(pool), size=len(left))]
            else:
                chosen[left] = current[left]  # everything covered: stay put
        return chosen

    def _gradient_fn(self, network, layer: str, neurons: np.ndarray):
        """x, target, scale -> the gradient of the scaled squared distance to the target centroids."""
        return network.gradients("centroid-pull", layer=layer, neurons=neurons)

    def _mutate(self, x: np.ndarray, rng: np.random.Generator, ctx) -> np.ndarray:
        analysis, tracker = getattr(ctx, "analysis", None), getattr(ctx, "tracker", None)
        if analysis is None or tracker is None:
            raise ParameterError("the directed mutator needs the fuzzer's analysis and coverage (use it in a campaign)")
        combos = analysis.combinations
        current = ctx.parent_combinations
        if current is None:
            current = analysis.ids(x, ctx.network)
        target_ids = self.targets(np.asarray(current), combos, tracker, rng)
        target = np.stack([combos.centroid_vector(t) for t in target_ids]).astype(np.float32)
        # scale each neuron's pull by its centroid spread so wide and narrow neurons weigh alike
        spread = np.array([max(float(np.ptp(c.centroids)), 1e-3) for c in analysis.clusters], np.float32)
        grad = self._gradient_fn(ctx.network, analysis.layer, analysis.neurons)
        lo, hi = ctx.value_range
        eps = self.eps * (hi - lo)
        out = np.array(x, np.float32, copy=True)
        for _ in range(self.steps):
            g = grad(out, target, spread)
            out = out - self.step_size * (hi - lo) * np.sign(g)
            out = np.clip(np.clip(out, x - eps, x + eps), lo, hi)
        return out.astype(np.float32)
