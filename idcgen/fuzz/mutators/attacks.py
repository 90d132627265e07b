"""Adversarial attacks as mutators: cleverhans 4.0.0 (TF2) FGSM, BIM, PGD and C&W-L2; ART's JSMA.

Each attack runs once on the whole batch against the logits of the model under test, through the network
(:meth:`idcgen.framework.Network.attack`; for Keras idcgen/framework/keras_attacks.py). The untargeted
attacks push away from the root seed's label where it is known (``ctx.labels >= 0``), else from the
model's current prediction; JSMA aims at a random other class drawn from ``rng``. ``eps``, ``eps_iter``
and ``theta`` are fractions of the width of the value range (absolute on [0, 1]).

Defaults differ from the paper's settings (docs/design.md, "Mutations") where validity or cost matters: FGSM/BIM eps 0.3
(BIM eps_iter 0.05) in the paper, eps 0.15 and eps_iter 0.02 here, inside DeepHunter's L-inf <= 0.2
validity bound; C&W 1000 iterations at lr 5e-3 in the paper, 100 at lr 0.1 here; JSMA gamma 1 in the
paper, 0.1 here (at most about 10 % of the pixels changed).
A failing attack raises: the fuzz loop reports the error per mutator and goes on.

On a regression model (docs/design.md, "Regression models") FGSM, BIM and PGD ascend a loss that pushes
the output unit's pre-activation away from its value on the input, in one direction per input (see
``regression_directions``); C&W and JSMA, built on class margins, refuse such a model in one line.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ...errors import InputError
from .base import Mutator, Param, bad_parameter


# ---- shared -------------------------------------------------------------------------------------
def attack_labels(x: np.ndarray, ctx) -> np.ndarray:
    """(b,) int32: the root seed's label where known, else the model's prediction."""
    labels = np.asarray(ctx.labels).astype(np.int64)
    n = ctx.network.n_classes
    if labels.size and labels.max() >= n:
        raise InputError(f"labels must be < {n} (the model's classes) or -1 for unknown; got {labels.max()}")
    unknown = labels < 0
    if unknown.any():
        labels = labels.copy()
        labels[unknown] = ctx.network.predict(x[unknown])
    return labels.astype(np.int32)


def regression_directions(x: np.ndarray, ctx) -> np.ndarray:
    """(b,) float32 in {-1, +1}: which way each input's output is pushed by a regression attack.

    The loss (f(adv) - f(x))^2 of "move away from the prediction" has a zero gradient at adv = x, so a
    first FGSM step would not move; its gradient's sign is d * sign(grad f) once f(adv) - f(x) has the
    sign d, so the attacks ascend d * f(adv) with d fixed per input: away from the root seed's label
    where it is known (the error grows), else away from zero (a steering model steers harder).
    """
    pred = ctx.network.predict(x).astype(np.float64)
    labels = np.asarray(ctx.labels, dtype=np.float64)
    ref = np.where(np.isfinite(labels), labels, 0.0)
    return np.where(pred >= ref, 1.0, -1.0).astype(np.float32)


def attack_targets(x: np.ndarray, ctx) -> np.ndarray:
    """What an attack moves each input away from: its class label for a classifier; for a regression model
    the direction its output is pushed (the network's attack uses the directional loss then)."""
    if ctx.network.task == "regression":
        return regression_directions(x, ctx)
    return attack_labels(x, ctx)


class _Attack(Mutator):
    kind = "attack"
    needs = "differentiable"
    needs_model = True
    stochastic = False
    task_instead = "for a regression model use fgsm, bim or pgd"

    def mutate(self, x, rng, ctx):
        if ctx.network.task not in self.tasks:  # a campaign refuses it before starting (check_tasks)
            raise InputError(
                f"{self.name} works on classifiers only (it is built on class scores); {self.task_instead}"
            )
        return super().mutate(x, rng, ctx)


class _IterativeAttack(_Attack):
    def _check_params(self):
        if self.eps_iter > self.eps:  # cleverhans asserts this
            raise bad_parameter(self.name, "eps_iter", f"<= eps ({self.eps!r})", self.eps_iter)


# ---- cleverhans L-inf attacks -------------------------------------------------------------------
class FGSM(_Attack):
    """Fast gradient sign method (Goodfellow et al.): one step of size eps, L-inf."""

    name = "fgsm"
    parameters = {"eps": Param(0.15, float, 0.0, 1.0, closed="right")}

    def _mutate(self, x, rng, ctx):
        lo, hi = ctx.value_range
        return ctx.network.attack("fgsm", x, attack_targets(x, ctx), eps=self.eps * (hi - lo), clip=(lo, hi))


class BIM(_IterativeAttack):
    """Basic iterative method (Kurakin et al.): nb_iter steps of eps_iter inside the L-inf eps ball."""

    name = "bim"
    parameters = {
        "eps": Param(0.15, float, 0.0, 1.0, closed="right"),
        "eps_iter": Param(0.02, float, 0.0, 1.0, closed="right"),
        "nb_iter": Param(10, int, 1, None),
    }

    def _mutate(self, x, rng, ctx):
        lo, hi = ctx.value_range
        return ctx.network.attack(
            "bim",
            x,
            attack_targets(x, ctx),
            eps=self.eps * (hi - lo),
            eps_iter=self.eps_iter * (hi - lo),
            nb_iter=self.nb_iter,
            clip=(lo, hi),
        )


class PGD(_IterativeAttack):
    """Projected gradient descent (Madry et al.): BIM from a uniformly random start in the eps ball.

    cleverhans draws the random start from TensorFlow's global generator; here it comes from ``rng``
    and the steps are cleverhans' own (an FGSM step, then projection onto the ball and the value range),
    exactly as in its ``projected_gradient_descent``.
    """

    name = "pgd"
    stochastic = True
    parameters = {
        "eps": Param(0.15, float, 0.0, 1.0, closed="right"),
        "eps_iter": Param(0.02, float, 0.0, 1.0, closed="right"),
        "nb_iter": Param(10, int, 1, None),
    }

    def _mutate(self, x, rng, ctx):
        lo, hi = ctx.value_range
        eps, eps_iter = self.eps * (hi - lo), self.eps_iter * (hi - lo)
        y = attack_targets(x, ctx)
        start = x + rng.uniform(-eps, eps, size=x.shape).astype(np.float32)
        return ctx.network.attack(
            "pgd", x, y, start=np.clip(start, lo, hi), eps=eps, eps_iter=eps_iter, nb_iter=self.nb_iter, clip=(lo, hi)
        )


# ---- Carlini & Wagner L2 ------------------------------------------------------------------------
class CW(_Attack):
    """Carlini & Wagner's L2 attack (cleverhans), untargeted.

    ``abort_early`` (the paper's setting) stops a binary-search step once the loss summed over the
    batch stalls, so a mutant can depend on the rest of its batch; ``abort_early=False`` runs every
    iteration and makes each mutant depend on its own input only.

    The paper ran 1000 iterations at lr 5e-3 (about 100 s per 100 MNIST images on 2 cores). At 100
    iterations lr 5e-3 moves almost nothing (2 % of LeNet-5 mutants change class): lr 0.1 makes 100
    iterations succeed on every image with about the paper setting's L2 distortion.
    The batch is attacked in chunks of b images with b * b * d <= ``chunk_values`` (100 MNIST images):
    cleverhans' bookkeeping of the constant (see idcgen/framework/keras_attacks.py) holds arrays of
    b * b * d values between binary-search steps.
    """

    name = "cw"
    tasks = ("classification",)  # built on class margins
    parameters = {
        "confidence": Param(0.0, float, 0.0, None),
        "lr": Param(0.1, float, 0.0, None, closed="neither"),
        "binary_search_steps": Param(5, int, 1, None),
        "max_iterations": Param(100, int, 1, None),
        "initial_const": Param(1e-2, float, 0.0, None, closed="neither"),
        "abort_early": Param(True, bool),
    }
    chunk_values: ClassVar[int] = 8_000_000  # at most b * b * d values per chunk (32 MB as float32)

    def _mutate(self, x, rng, ctx):
        lo, hi = ctx.value_range
        d = int(np.prod(x.shape[1:]))
        chunk = max(1, min(len(x), int(np.sqrt(self.chunk_values / d))))
        return ctx.network.attack(
            "cw",
            x,
            attack_labels(x, ctx),
            chunk=chunk,
            clip=(lo, hi),
            lr=self.lr,
            binary_search_steps=self.binary_search_steps,
            max_iterations=self.max_iterations,
            abort_early=self.abort_early,
            confidence=self.confidence,
            initial_const=self.initial_const,
        )


# ---- ART's JSMA ---------------------------------------------------------------------------------
class JSMA(_Attack):
    """Jacobian saliency map attack (Papernot et al., ART): raise pixel pairs by theta towards a random
    other class until it is predicted or a fraction gamma of the pixels has changed.

    The paper used gamma 1; 0.1 changes at most about 10 % of the pixels and stops sooner on the
    inputs that resist (about 0.3 s per MNIST image on 2 cores either way).
    """

    name = "jsma"
    stochastic = True
    tasks = ("classification",)  # built on class margins
    parameters = {
        "theta": Param(1.0, float, 0.0, 1.0, closed="right"),
        "gamma": Param(0.1, float, 0.0, 1.0, closed="right"),
    }

    def _mutate(self, x, rng, ctx):
        lo, hi = ctx.value_range
        n = ctx.network.n_classes
        target = (ctx.network.predict(x) + rng.integers(1, n, size=len(x))) % n
        return ctx.network.attack(
            "jsma", x, target, theta=self.theta * (hi - lo), gamma=self.gamma, clip=tuple(ctx.value_range)
        )
