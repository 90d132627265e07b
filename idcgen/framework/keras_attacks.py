"""White-box attacks on a Keras network's logits, for the attack mutators (idcgen/fuzz/mutators/attacks.py):
cleverhans' FGSM, BIM, PGD steps and C&W-L2, and ART's JSMA. The mutators choose labels, directions, random
starts and parameters in numpy; here they become TensorFlow calls (docs/design.md, "Mutations").
"""

from __future__ import annotations

import contextlib
import logging

import keras
import numpy as np
import tensorflow as tf

from .quiet import import_art


def _directional_loss(labels, logits):
    """cleverhans' ``loss_fn`` for regression: ``labels`` holds the directions, ``logits`` the (b, 1) output."""
    return tf.reduce_sum(labels * logits[:, 0])


def _targets(network, y: np.ndarray):
    """(y, loss_fn) for cleverhans: class labels and its cross-entropy for a classifier; directions and the
    directional loss for a regression model."""
    return tf.constant(y), (_directional_loss if network.task == "regression" else None)


def fgsm(network, x: np.ndarray, y: np.ndarray, *, eps: float, clip: tuple, norm=np.inf) -> np.ndarray:
    """cleverhans' FGSM, L-inf (the sign of the gradient) or, with ``norm`` 2, L2 (the gradient scaled to eps)."""
    from cleverhans.tf2.attacks.fast_gradient_method import fast_gradient_method

    y, loss_fn = _targets(network, y)
    adv = fast_gradient_method(
        network.logits_model(),
        tf.constant(x),
        eps,
        norm,
        loss_fn=loss_fn,
        clip_min=clip[0],
        clip_max=clip[1],
        y=y,
        targeted=False,
    )
    return adv.numpy()


def bim(network, x: np.ndarray, y: np.ndarray, *, eps: float, eps_iter: float, nb_iter: int, clip: tuple) -> np.ndarray:
    from cleverhans.tf2.attacks.projected_gradient_descent import projected_gradient_descent

    y, loss_fn = _targets(network, y)
    # cleverhans' basic_iterative_method is this call without a loss_fn argument (needed for regression);
    # sanity_checks=True ends in np.all over a list of differently shaped tensors: a NumPy error
    adv = projected_gradient_descent(
        network.logits_model(),
        tf.constant(x),
        eps,
        eps_iter,
        nb_iter,
        np.inf,
        loss_fn=loss_fn,
        clip_min=clip[0],
        clip_max=clip[1],
        y=y,
        targeted=False,
        rand_init=False,
        sanity_checks=False,
    )
    return adv.numpy()


def pgd(
    network,
    x: np.ndarray,
    y: np.ndarray,
    *,
    start: np.ndarray,
    eps: float,
    eps_iter: float,
    nb_iter: int,
    clip: tuple,
    norm=np.inf,
) -> np.ndarray:
    """cleverhans' own PGD steps (an FGSM step, then projection onto the ball and the value range) from
    ``start``, which the caller draws; in the L-inf ball or, with ``norm`` 2, the L2 ball."""
    from cleverhans.tf2.attacks.fast_gradient_method import fast_gradient_method
    from cleverhans.tf2.utils import clip_eta

    lo, hi = clip
    model, (y, loss_fn) = network.logits_model(), _targets(network, y)
    x_t, adv = tf.constant(x), tf.constant(start)
    for _ in range(nb_iter):
        adv = fast_gradient_method(
            model, adv, eps_iter, norm, loss_fn=loss_fn, clip_min=lo, clip_max=hi, y=y, targeted=False
        )
        adv = tf.clip_by_value(x_t + clip_eta(adv - x_t, norm, eps), lo, hi)
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
    from cleverhans.tf2.attacks.carlini_wagner_l2 import CarliniWagnerL2

    class PerExampleConstCW(CarliniWagnerL2):
        def gradient(self, x, y, modifier, const):
            per_example = tf.broadcast_to(tf.reshape(const, (-1, tf.shape(const)[-1]))[0], tf.shape(x)[:1])
            return super().gradient(x, y, modifier, per_example)

    return PerExampleConstCW


def cw(
    network,
    x: np.ndarray,
    labels: np.ndarray,
    *,
    chunk: int,
    clip: tuple,
    lr: float,
    binary_search_steps: int,
    max_iterations: int,
    abort_early: bool,
    confidence: float,
    initial_const: float,
) -> np.ndarray:
    """Untargeted C&W-L2 in chunks of ``chunk`` inputs (see the CW mutator for why chunks)."""
    b, shape = len(x), x.shape[1:]
    d = int(np.prod(shape))
    model = network.logits_model()
    attack = _carlini_wagner_class()(
        lambda t: model(tf.reshape(t, (-1, *shape))),
        y=labels,
        batch_size=chunk,
        clip_min=clip[0],
        clip_max=clip[1],
        binary_search_steps=binary_search_steps,
        max_iterations=max_iterations,
        abort_early=abort_early,
        confidence=confidence,
        initial_const=initial_const,
        learning_rate=lr,
    )
    attack.targeted = False  # cleverhans sets targeted = (y is not None), ignoring its argument
    flat, out = x.reshape(b, d, 1, 1), np.empty((b, d, 1, 1), np.float32)
    for start in range(0, b, chunk):
        part = slice(start, start + chunk)
        attack.y = labels[part]
        # a fresh Adam per chunk: Keras 3 optimizers stay bound to the variables they first saw
        attack.optimizer = _Keras3Adam(keras.optimizers.Adam(lr))
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


def art_classifier(network, value_range):
    """ART's TensorFlowV2Classifier over the network's logits, built once per network and value range."""
    clip = tuple(float(v) for v in value_range)

    def build():
        _, TensorFlowV2Classifier = import_art("TensorFlowV2Classifier")
        return TensorFlowV2Classifier(
            model=network.logits_model(),
            nb_classes=network.n_classes,
            input_shape=tuple(network.input_shape),
            clip_values=clip,
        )

    return network.cached(("art", clip), build)


def jsma(network, x: np.ndarray, targets: np.ndarray, *, theta: float, gamma: float, clip: tuple) -> np.ndarray:
    """Targeted JSMA towards ``targets`` (one class per input)."""
    SaliencyMapMethod, _ = import_art("TensorFlowV2Classifier")
    attack = SaliencyMapMethod(
        art_classifier(network, clip), theta=theta, gamma=gamma, batch_size=len(x), verbose=False
    )
    with _quiet_tensorflow():
        return attack.generate(x, y=np.eye(network.n_classes, dtype=np.float32)[targets])


ATTACKS = {"fgsm": fgsm, "bim": bim, "pgd": pgd, "cw": cw, "jsma": jsma}


def attack(network, name: str, x: np.ndarray, y: np.ndarray, **params) -> np.ndarray:
    return ATTACKS[name](network, x, y, **params)
