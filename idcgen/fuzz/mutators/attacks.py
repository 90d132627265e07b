"""Adversarial attacks as mutators: cleverhans 4.0.0 (TF2) FGSM, BIM, PGD and C&W-L2; ART's JSMA.

Each attack runs once on the whole batch against the logits of the model under test. The untargeted
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

import contextlib
import logging
import warnings
from typing import ClassVar

import numpy as np

from ...errors import InputError
from .base import Mutator, Param, bad_parameter


# ---- shared -------------------------------------------------------------------------------------
def logits_fn(network):
    """The network's logits as a callable ``f(x, training=False)``, traced once per network."""
    return network.logits_model()


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


def _directional_loss(labels, logits):
    """cleverhans' ``loss_fn`` for regression: ``labels`` holds the directions, ``logits`` the (b, 1) output."""
    import tensorflow as tf
    return tf.reduce_sum(labels * logits[:, 0])


def attack_targets(x: np.ndarray, ctx):
    """(y, loss_fn) for cleverhans: class labels and its cross-entropy for a classifier; directions and the
    directional loss for a regression model."""
    import tensorflow as tf
    if ctx.network.task == "regression":
        return tf.constant(regression_directions(x, ctx)), _directional_loss
    return tf.constant(attack_labels(x, ctx)), None


class _Attack(Mutator):
    kind = "attack"
    needs_model = True
    stochastic = False
    regression: ClassVar[bool] = True   # False: built on class margins; refuses a regression model

    def mutate(self, x, rng, ctx):
        if not self.regression and ctx.network.task == "regression":
            raise InputError(f"{self.name} works on classifiers only (it is built on class scores); for a "
                             "regression model use fgsm, bim or pgd")
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
        import tensorflow as tf
        from cleverhans.tf2.attacks.fast_gradient_method import fast_gradient_method
        lo, hi = ctx.value_range
        y, loss_fn = attack_targets(x, ctx)
        adv = fast_gradient_method(logits_fn(ctx.network), tf.constant(x), self.eps * (hi - lo), np.inf,
                                   loss_fn=loss_fn, clip_min=lo, clip_max=hi, y=y, targeted=False)
        return adv.numpy()


class BIM(_IterativeAttack):
    """Basic iterative method (Kurakin et al.): nb_iter steps of eps_iter inside the L-inf eps ball."""

    name = "bim"
    parameters = {"eps": Param(0.15, float, 0.0, 1.0, closed="right"),
                  "eps_iter": Param(0.02, float, 0.0, 1.0, closed="right"),
                  "nb_iter": Param(10, int, 1, None)}

    def _mutate(self, x, rng, ctx):
        import tensorflow as tf
        from cleverhans.tf2.attacks.projected_gradient_descent import projected_gradient_descent
        lo, hi = ctx.value_range
        y, loss_fn = attack_targets(x, ctx)
        # cleverhans' basic_iterative_method is this call without a loss_fn argument (needed for regression);
        # sanity_checks=True ends in np.all over a list of differently shaped tensors: a NumPy error
        adv = projected_gradient_descent(logits_fn(ctx.network), tf.constant(x), self.eps * (hi - lo),
                                         self.eps_iter * (hi - lo), self.nb_iter, np.inf, loss_fn=loss_fn,
                                         clip_min=lo, clip_max=hi, y=y, targeted=False, rand_init=False,
                                         sanity_checks=False)
        return adv.numpy()


class PGD(_IterativeAttack):
    """Projected gradient descent (Madry et al.): BIM from a uniformly random start in the eps ball.

    cleverhans draws the random start from TensorFlow's global generator; here it comes from ``rng``
    and the steps are cleverhans' own (an FGSM step, then projection onto the ball and the value range),
    exactly as in its ``projected_gradient_descent``.
    """

    name = "pgd"
    stochastic = True
    parameters = {"eps": Param(0.15, float, 0.0, 1.0, closed="right"),
                  "eps_iter": Param(0.02, float, 0.0, 1.0, closed="right"),
                  "nb_iter": Param(10, int, 1, None)}

    def _mutate(self, x, rng, ctx):
        import tensorflow as tf
        from cleverhans.tf2.attacks.fast_gradient_method import fast_gradient_method
        from cleverhans.tf2.utils import clip_eta
        lo, hi = ctx.value_range
        eps, eps_iter = self.eps * (hi - lo), self.eps_iter * (hi - lo)
        model, (y, loss_fn) = logits_fn(ctx.network), attack_targets(x, ctx)
        start = x + rng.uniform(-eps, eps, size=x.shape).astype(np.float32)
        x_t, adv = tf.constant(x), tf.constant(np.clip(start, lo, hi))
        for _ in range(self.nb_iter):
            adv = fast_gradient_method(model, adv, eps_iter, np.inf, loss_fn=loss_fn, clip_min=lo, clip_max=hi, y=y,
                                       targeted=False)
            adv = tf.clip_by_value(x_t + clip_eta(adv - x_t, np.inf, eps), lo, hi)
        return adv.numpy()


# ---- Carlini & Wagner L2 ------------------------------------------------------------------------
class _Keras3Adam:
    """The optimizer interface cleverhans 4.0.0's C&W-L2 expects, over a Keras 3 optimizer.

    Before each binary-search step cleverhans resets the optimizer with
    ``for var in self.optimizer.variables(): var.assign(zeros)``. That was a method in Keras 2; in Keras 3
    ``variables`` is a list property, so the call raises ``TypeError: 'list' object is not callable``.
    Making it callable is not enough: Keras 3 keeps the learning rate as one of those variables, and
    zeroing it freezes the attack (every mutant equals its input). ``variables()`` therefore returns the
    optimizer's state without the learning rate: the step counter and Adam's moments.
    """

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def variables(self):
        return [v for v in self.optimizer.variables if v.name != "learning_rate"]

    def apply_gradients(self, grads_and_vars):
        return self.optimizer.apply_gradients(grads_and_vars)


def _carlini_wagner_class():
    """cleverhans' CarliniWagnerL2 with the trade-off constant reduced to one value per example.

    cleverhans keeps the constant as an array of the input's shape, (b, h, w, c), updates it with
    per-example (b,) masks and multiplies it by the per-example loss (b,): broadcasting pairs the batch
    axis of those with the last (channel) axis. With three channels that raises unless b == 3; with one,
    every example's loss is weighted by the constant summed over b*h*w entries, so results depend on the
    batch size. We hand cleverhans the batch as (b, d, 1, 1): the constant then becomes (b, d, 1, b)
    after the first update, and its last axis holds each example's constant (one shared value before);
    ``gradient`` receives exactly that (b,) vector, so each example's loss gets its own constant.
    """
    import tensorflow as tf
    from cleverhans.tf2.attacks.carlini_wagner_l2 import CarliniWagnerL2

    class PerExampleConstCW(CarliniWagnerL2):
        def gradient(self, x, y, modifier, const):
            per_example = tf.broadcast_to(tf.reshape(const, (-1, tf.shape(const)[-1]))[0], tf.shape(x)[:1])
            return super().gradient(x, y, modifier, per_example)

    return PerExampleConstCW


class CW(_Attack):
    """Carlini & Wagner's L2 attack (cleverhans), untargeted.

    ``abort_early`` (the paper's setting) stops a binary-search step once the loss summed over the
    batch stalls, so a mutant can depend on the rest of its batch; ``abort_early=False`` runs every
    iteration and makes each mutant depend on its own input only.

    The paper ran 1000 iterations at lr 5e-3 (about 100 s per 100 MNIST images on 2 cores). At 100
    iterations lr 5e-3 moves almost nothing (2 % of LeNet-5 mutants change class): lr 0.1 makes 100
    iterations succeed on every image with about the paper setting's L2 distortion.
    The batch is attacked in chunks of b images with b * b * d <= ``chunk_values`` (100 MNIST images):
    cleverhans' bookkeeping of the constant (see ``_carlini_wagner_class``) holds arrays of b * b * d
    values between binary-search steps.
    """

    name = "cw"
    regression = False
    parameters = {"confidence": Param(0.0, float, 0.0, None),
                  "lr": Param(0.1, float, 0.0, None, closed="neither"),
                  "binary_search_steps": Param(5, int, 1, None),
                  "max_iterations": Param(100, int, 1, None),
                  "initial_const": Param(1e-2, float, 0.0, None, closed="neither"),
                  "abort_early": Param(True, bool)}
    chunk_values: ClassVar[int] = 8_000_000   # at most b * b * d values per chunk (32 MB as float32)

    def _mutate(self, x, rng, ctx):
        import keras
        import tensorflow as tf
        lo, hi = ctx.value_range
        b, shape = len(x), x.shape[1:]
        d = int(np.prod(shape))
        chunk = max(1, min(b, int(np.sqrt(self.chunk_values / d))))
        model, labels = logits_fn(ctx.network), attack_labels(x, ctx)
        attack = _carlini_wagner_class()(
            lambda t: model(tf.reshape(t, (-1, *shape))), y=labels, batch_size=chunk, clip_min=lo, clip_max=hi,
            binary_search_steps=self.binary_search_steps, max_iterations=self.max_iterations,
            abort_early=self.abort_early, confidence=self.confidence, initial_const=self.initial_const,
            learning_rate=self.lr)
        attack.targeted = False          # cleverhans sets targeted = (y is not None), ignoring its argument
        flat, out = x.reshape(b, d, 1, 1), np.empty((b, d, 1, 1), np.float32)
        for start in range(0, b, chunk):
            part = slice(start, start + chunk)
            attack.y = labels[part]
            # a fresh Adam per chunk: Keras 3 optimizers stay bound to the variables they first saw
            attack.optimizer = _Keras3Adam(keras.optimizers.Adam(self.lr))
            out[part] = attack.attack(flat[part])
        return out.reshape(x.shape)


# ---- ART's JSMA ---------------------------------------------------------------------------------
@contextlib.contextmanager
def _quiet_tensorflow():
    """Mute TensorFlow's warning about ART calling ``tape.gradient`` inside a persistent tape."""
    tf_logger = logging.getLogger("tensorflow")
    level = tf_logger.level
    tf_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        tf_logger.setLevel(level)


def _art():
    with warnings.catch_warnings():  # ART warns at import that PyTorch (for its certification tools) is missing
        warnings.filterwarnings("ignore", message="PyTorch not found")
        from art.attacks.evasion import SaliencyMapMethod
        from art.estimators.classification import TensorFlowV2Classifier
    logging.getLogger("art").setLevel(logging.ERROR)
    return SaliencyMapMethod, TensorFlowV2Classifier


def art_classifier(network, value_range):
    """ART's TensorFlowV2Classifier over the network's logits, built once per network and value range."""
    clip = tuple(float(v) for v in value_range)

    def build():
        _, TensorFlowV2Classifier = _art()
        return TensorFlowV2Classifier(model=logits_fn(network), nb_classes=network.n_classes,
                                      input_shape=tuple(network.input_shape), clip_values=clip)
    return network.cached(("art", clip), build)


class JSMA(_Attack):
    """Jacobian saliency map attack (Papernot et al., ART): raise pixel pairs by theta towards a random
    other class until it is predicted or a fraction gamma of the pixels has changed.

    The paper used gamma 1; 0.1 changes at most about 10 % of the pixels and stops sooner on the
    inputs that resist (about 0.3 s per MNIST image on 2 cores either way).
    """

    name = "jsma"
    stochastic = True
    regression = False
    parameters = {"theta": Param(1.0, float, 0.0, 1.0, closed="right"),
                  "gamma": Param(0.1, float, 0.0, 1.0, closed="right")}

    def _mutate(self, x, rng, ctx):
        SaliencyMapMethod, _ = _art()
        lo, hi = ctx.value_range
        n = ctx.network.n_classes
        target = (ctx.network.predict(x) + rng.integers(1, n, size=len(x))) % n
        attack = SaliencyMapMethod(art_classifier(ctx.network, ctx.value_range), theta=self.theta * (hi - lo),
                                   gamma=self.gamma, batch_size=len(x), verbose=False)
        with _quiet_tensorflow():
            return attack.generate(x, y=np.eye(n, dtype=np.float32)[target])
