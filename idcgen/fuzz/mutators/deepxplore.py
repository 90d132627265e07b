"""DeepXplore's generator as a mutator: gradient ascent on its joint objective under a domain constraint.

DeepXplore (Pei et al., SOSP 2017) searches for inputs on which several models disagree. Each step raises

    obj = sum_others F_o(x)[c] - lambda1 * F(x)[c]  +  lambda2 * coverage(x)

where F is the model under test, c the class the models gave the seed, F_o the other models (logits,
before the softmax), and ``coverage`` the activation of one neuron of F that the parent leaves inactive
(DeepXplore's neuron coverage). For a regression model (a steering angle) the output is pushed away from
the others' mean (or from the seed's label / the parent's output with one model) and the others' outputs the
other way. With one model the first term alone maximises the deviation from the seed's prediction.
``coverage="idc"`` replaces the NC term by the pull of the important neurons towards an uncovered IDC
combination, as the ``directed`` mutator does; ``coverage="none"`` drops it. See docs/design.md, "Mutations".

The gradient, scaled to unit RMS per image, is applied under one of DeepXplore's constraints:

- ``light``: every pixel moves by the same amount, ``step`` along the sign of the mean gradient;
- ``occl``: only one ``rect`` x ``rect`` rectangle at a random position changes, by the gradient in it;
- ``blackout``: at each iteration ``patches`` random ``patch`` x ``patch`` squares are tried, and those whose
  mean gradient is negative (darker raises the objective) are set to the low end of the range.

Differences from DeepXplore's code, on purpose: the neuron for NC is drawn among those inactive on the
parent (the mutator keeps no coverage table between calls, so the same rng gives the same mutants), and
an input stops moving once its models disagree (``stop``), as DeepXplore stops a seed.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .base import Mutator, Param, bad_parameter

CONSTRAINTS = ("light", "occl", "blackout")
COVERAGE = ("nc", "idc", "none")


def nc_layers(network) -> tuple[str, ...]:
    """The layers whose neurons DeepXplore's NC term may raise: every layer with weights below the logits."""
    return network.weighted_layers()


class DeepXplore(Mutator):
    """Gradient ascent on DeepXplore's differential + coverage objective, under a lighting, occlusion or
    blackout constraint. ``step`` is a fraction of the value range's width per iteration; ``rect`` and
    ``patch`` are sides in pixels (cut to the image). Defaults: on DeepXplore's MNIST LeNets, 10 steps of
    0.02 turned almost no seed into a difference; 20 of 0.1 did (docs/results.md, "DeepXplore's generator")."""

    name: ClassVar[str] = "deepxplore"
    kind: ClassVar[str] = "attack"
    needs_model: ClassVar[bool] = True
    needs: ClassVar[str] = "differentiable"
    validity: ClassVar[str] = "scene"  # a lighting change or a black box is not a small L-inf change
    #: the generator's output is a test input made from the seed, not a new scene: another pass on it
    #: searches further and stays judged against the chain's reference, so the total change is bounded
    moves_reference: ClassVar[bool] = False
    parameters: ClassVar[dict] = {
        "constraint": Param("occl", str),
        "coverage": Param("nc", str),
        "step": Param(0.1, float, 0.0, 1.0, closed="right"),
        "iterations": Param(20, int, 1, 1000),
        "lambda1": Param(1.0, float, 0.0, None),
        "lambda2": Param(0.1, float, 0.0, None),
        "threshold": Param(0.0, float, 0.0, 1.0),
        "rect": Param(10, int, 1, 4096),
        "patch": Param(6, int, 1, 4096),
        "patches": Param(2, int, 1, 1000),
        "stop": Param(True, bool),
    }

    def _check_params(self):
        for key, choices in (("constraint", CONSTRAINTS), ("coverage", COVERAGE)):
            if getattr(self, key) not in choices:
                raise bad_parameter(self.name, key, "one of " + ", ".join(repr(c) for c in choices), getattr(self, key))

    # ---- the objective ---------------------------------------------------------------------------
    def _weights(self, x, rng, ctx, others):
        """Per-input weights on each model's logits (model under test first) and a function telling which
        inputs already show a difference (None: never stop)."""
        net = ctx.network
        labels = np.asarray(ctx.labels, np.float64)
        if net.task == "regression":  # compare outputs (a squashed head's label is in output units)
            y0 = net.predict(x).astype(np.float64)
            if others:
                ref = np.mean([o.predict(x) for o in others], axis=0)
            else:  # the seed's label where known (NaN: unknown), else the parent's own output
                ref = np.where(np.isfinite(labels), labels, y0)
            d = np.sign(y0 - ref)
            ties = d == 0
            d[ties] = rng.choice([-1.0, 1.0], size=int(ties.sum()))
            w0 = (self.lambda1 * d)[:, None]
            return [w0] + [-d[:, None] for _ in others], None
        k = net.n_classes
        known = (labels >= 0) & (labels < k)
        mine = net.predict(x)
        if others:  # the seed's label, else the class most of the other models give the parent
            votes = np.stack([o.predict(x) for o in others], axis=1)
            guess = np.array([np.bincount(v, minlength=k).argmax() for v in votes])
            c = np.where(known, labels, guess).astype(np.int64)
        else:  # one model: move away from the parent's own class
            c = mine.astype(np.int64)
        onehot = np.eye(k, dtype=np.float32)[c]

        def differs(z_under, z_others):
            mine = z_under.argmax(1)
            if not z_others:
                return mine != c
            return np.any([z.argmax(1) != mine for z in z_others], axis=0)

        return [-self.lambda1 * onehot] + [onehot for _ in others], differs

    def _coverage_setup(self, x, rng, ctx):
        """A function x -> gradient of the coverage term, or None."""
        if self.lambda2 == 0 or self.coverage == "none":
            return None
        analysis, tracker = getattr(ctx, "analysis", None), getattr(ctx, "tracker", None)
        if self.coverage == "idc":
            if analysis is None or tracker is None:  # a plain context: no combinations to aim at
                return None
            from .directed import CoverageDirected

            combos = analysis.combinations
            current = getattr(ctx, "parent_combinations", None)
            if current is None:
                current = analysis.ids(x, ctx.network)
            target_ids = CoverageDirected().targets(np.asarray(current), combos, tracker, rng)
            target = np.stack([combos.centroid_vector(t) for t in target_ids]).astype(np.float32)
            spread = np.array([max(float(np.ptp(c.centroids)), 1e-3) for c in analysis.clusters], np.float32)
            pull = CoverageDirected()._gradient_fn(ctx.network, analysis.layer, analysis.neurons)
            return lambda v: -pull(v, target, spread)  # ascent on minus the squared distance
        layers = nc_layers(ctx.network)
        if not layers:
            return None
        grad = ctx.network.gradients("neuron-sum", layers=layers)
        widths = [ctx.network.neuron_count(n) for n in layers]
        _, acts = grad(x, np.zeros((len(x), sum(widths)), np.float32))
        inactive = np.zeros_like(acts, bool)
        start = 0
        for width in widths:  # DeepXplore scales each layer's activations to [0, 1] per input
            part = acts[:, start : start + width]
            low, high = part.min(1, keepdims=True), part.max(1, keepdims=True)
            inactive[:, start : start + width] = (part - low) / np.where(high > low, high - low, 1.0) <= self.threshold
            start += width
        mask = np.zeros_like(acts, np.float32)
        for i in range(len(x)):
            pool = np.flatnonzero(inactive[i])
            if len(pool):
                mask[i, pool[rng.integers(len(pool))]] = 1.0
        return lambda v: grad(v, mask)[0]

    def objective_gradient(self, x, weights, coverage, others, ctx):
        """The joint objective's gradient (b, h, w, c), each image scaled to unit RMS, and the logits."""
        v = np.asarray(x, np.float32)
        g, z0 = ctx.network.gradients("logit-sum")(v, weights[0])
        zs = []
        for other, w in zip(others, weights[1:]):
            go, zo = other.gradients("logit-sum")(v, w)
            g = g + go
            zs.append(zo)
        if coverage is not None:
            g = g + self.lambda2 * coverage(v)
        rms = np.sqrt(np.mean(np.square(g), axis=(1, 2, 3), keepdims=True))
        return g / (rms + 1e-5), z0, zs

    # ---- the generator ---------------------------------------------------------------------------
    def _mutate(self, x, rng, ctx):
        others = tuple(getattr(ctx, "others", ()) or ())
        lo, hi = ctx.value_range
        b, h, w, _ = x.shape
        step = self.step * (hi - lo)
        weights, differs = self._weights(x, rng, ctx, others)
        coverage = self._coverage_setup(x, rng, ctx)
        region = None
        if self.constraint == "occl":  # one rectangle per image, placed once
            rh, rw = min(self.rect, h), min(self.rect, w)
            top, left = rng.integers(0, h - rh + 1, size=b), rng.integers(0, w - rw + 1, size=b)
            region = np.zeros(x.shape, bool)
            for i in range(b):
                region[i, top[i] : top[i] + rh, left[i] : left[i] + rw] = True
        out = np.array(x, np.float32, copy=True)
        active, started = np.ones(b, bool), None
        for _ in range(self.iterations):
            g, z0, zs = self.objective_gradient(out, weights, coverage, others, ctx)
            if self.stop and differs is not None:  # a parent that already differs is not held back
                now = differs(z0, zs)
                started = now if started is None else started
                active &= ~(now & ~started)
            if not active.any():
                break
            move = active[:, None, None, None]
            if self.constraint == "light":
                delta = step * np.sign(g.mean(axis=(1, 2, 3), keepdims=True)) * np.ones_like(g)
                out = np.where(move, out + delta, out)
            elif self.constraint == "occl":
                out = np.where(move & region, out + step * g, out)
            else:
                ph, pw = min(self.patch, h), min(self.patch, w)
                for i in np.flatnonzero(active).tolist():
                    for _p in range(self.patches):
                        top, left = int(rng.integers(0, h - ph + 1)), int(rng.integers(0, w - pw + 1))
                        if g[i, top : top + ph, left : left + pw].mean() < 0:
                            out[i, top : top + ph, left : left + pw] = lo
            out = np.clip(out, lo, hi)
        return out
