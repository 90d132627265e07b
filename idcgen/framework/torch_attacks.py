"""Gradients and white-box attacks on a PyTorch network, numpy in and out: the gradient mutators' objectives
(as idcgen/framework/keras_gradients.py), cleverhans' PyTorch FGSM/BIM/PGD steps and C&W-L2, and ART's JSMA
(as idcgen/framework/keras_attacks.py; the parameters as the attack mutators pass them). Every tensor is
made on the network's device by ``network.to_device`` and comes back by ``network.to_host``, once per batch."""

from __future__ import annotations

import numpy as np
import torch

from ..errors import ParameterError
from .quiet import import_art


def _tensors(network, *arrays):
    return [network.to_device(a) for a in arrays]


def logit_sum(network):
    """(x, weights) -> (gradient of sum(weights * logits) w.r.t. x, logits)."""

    def run(x, weights):
        x, weights = _tensors(network, x, weights)
        with torch.enable_grad():
            x.requires_grad_(True)
            z = network.logits(x)
            (g,) = torch.autograd.grad((weights * z).sum(), x)
        return network.to_host(g), network.to_host(z)

    return run


def neuron_sum(network, *, layers: tuple[str, ...]):
    """(x, mask) -> (gradient of sum(mask * neuron activations) w.r.t. x, activations), side by side."""
    chosen = [network.step(name) for name in layers]

    def run(x, mask):
        x, mask = _tensors(network, x, mask)
        with torch.enable_grad():
            x.requires_grad_(True)
            env = network.run(x, keep=tuple(layer.node for layer in chosen))
            acts = torch.cat([layer.neurons_of(env[layer.node]) for layer in chosen], dim=1)
            (g,) = torch.autograd.grad((mask * acts).sum(), x)
        return network.to_host(g), network.to_host(acts)

    return run


def centroid_pull(network, *, layer: str, neurons):
    """(x, target, scale) -> gradient w.r.t. x of sum(((activations of ``neurons`` - target) / scale)^2)."""
    chosen, index = network.step(layer), network.to_device([int(n) for n in neurons], np.int64)

    def run(x, target, scale):
        x, target, scale = _tensors(network, x, target, scale)
        with torch.enable_grad():
            x.requires_grad_(True)
            env = network.run(x, keep=(chosen.node,), until=chosen.node)
            acts = chosen.neurons_of(env[chosen.node])[:, index]
            (g,) = torch.autograd.grad((((acts - target) / scale) ** 2).sum(), x)
        return network.to_host(g)

    return run


GRADIENTS = {"logit-sum": logit_sum, "neuron-sum": neuron_sum, "centroid-pull": centroid_pull}


def gradient_function(network, kind: str, **spec):
    if kind not in GRADIENTS:
        raise ParameterError(f"unknown gradient {kind!r}; expected one of {', '.join(GRADIENTS)}")
    return network.cached(("gradient", kind, repr(sorted(spec.items()))), lambda: GRADIENTS[kind](network, **spec))


# ---- attacks ------------------------------------------------------------------------------------
class LogitsModule(torch.nn.Module):
    """The network's logits as an ``nn.Module`` of images (n, H, W, C): what cleverhans and ART call."""

    def __init__(self, network):
        super().__init__()
        self.network = network

    def forward(self, x):
        # ART's estimator puts its inputs on torch's current GPU (cuda:0), not necessarily the network's cuda:N
        return self.network.logits(x.to(self.network.device))


def _fgsm_step(network, x, y, eps, lo, hi, norm=np.inf):
    """One FGSM step away from ``y`` (L-inf, or L2 with ``norm`` 2): cleverhans' step for a classifier; for a
    regression model the same step on the directional loss ``sum(y * output)`` (``y`` the directions), which
    cleverhans' PyTorch FGSM has no argument for."""
    from cleverhans.torch.attacks.fast_gradient_method import fast_gradient_method
    from cleverhans.torch.utils import optimize_linear

    if network.task != "regression":
        return fast_gradient_method(LogitsModule(network), x, eps, norm, clip_min=lo, clip_max=hi, y=y, targeted=False)
    x = x.clone().detach().requires_grad_(True)
    with torch.enable_grad():
        (g,) = torch.autograd.grad((y * network.logits(x)[:, 0]).sum(), x)
    return torch.clamp(x.detach() + optimize_linear(g, eps, norm), lo, hi)


def _labels(network, y):
    return network.to_device(y, np.float32 if network.task == "regression" else np.int64)


def fgsm(network, x, y, *, eps, clip, norm=np.inf):
    return network.to_host(_fgsm_step(network, *_tensors(network, x), _labels(network, y), eps, *clip, norm))


def pgd(network, x, y, *, start, eps, eps_iter, nb_iter, clip, norm=np.inf):
    """cleverhans' PGD steps (an FGSM step, then projection onto the ball and the value range) from ``start``;
    in the L-inf ball or, with ``norm`` 2, the L2 ball."""
    from cleverhans.torch.utils import clip_eta

    lo, hi = clip
    x_t, adv = _tensors(network, x, start)
    y = _labels(network, y)
    for _ in range(nb_iter):
        adv = _fgsm_step(network, adv, y, eps_iter, lo, hi, norm).detach()
        adv = torch.clamp(x_t + clip_eta(adv - x_t, norm, eps), lo, hi)
    return network.to_host(adv)


def bim(network, x, y, *, eps, eps_iter, nb_iter, clip):
    """BIM: PGD from the input itself (no random start)."""
    return pgd(network, x, y, start=x, eps=eps, eps_iter=eps_iter, nb_iter=nb_iter, clip=clip)


def cw(
    network, x, labels, *, chunk, clip, lr, binary_search_steps, max_iterations, abort_early, confidence, initial_const
):
    """Untargeted C&W-L2 (cleverhans' PyTorch implementation) in chunks of ``chunk`` inputs; cleverhans'
    PyTorch version always runs ``max_iterations`` (``abort_early`` does not apply)."""
    from cleverhans.torch.attacks.carlini_wagner_l2 import carlini_wagner_l2

    model = LogitsModule(network)
    out = np.empty_like(np.asarray(x, np.float32))
    for start in range(0, len(x), chunk):
        part = slice(start, start + chunk)
        with torch.enable_grad():
            adv = carlini_wagner_l2(
                model,
                *_tensors(network, x[part]),
                network.n_classes,
                y=network.to_device(labels[part], np.int64),
                targeted=False,
                lr=lr,
                confidence=confidence,
                clip_min=clip[0],
                clip_max=clip[1],
                initial_const=initial_const,
                binary_search_steps=binary_search_steps,
                max_iterations=max_iterations,
            )
        out[part] = network.to_host(adv)
    return out


def jsma(network, x, targets, *, theta, gamma, clip):
    """Targeted JSMA towards ``targets`` (ART's SaliencyMapMethod on a PyTorchClassifier)."""
    SaliencyMapMethod, PyTorchClassifier = import_art("PyTorchClassifier")
    clip = tuple(float(v) for v in clip)

    def build():
        return PyTorchClassifier(
            LogitsModule(network),
            loss=torch.nn.CrossEntropyLoss(),
            input_shape=tuple(network.input_shape),
            nb_classes=network.n_classes,
            clip_values=clip,
            channels_first=False,
            device_type="gpu" if network.device.type == "cuda" else "cpu",
        )

    classifier = network.cached(("art", clip), build)
    attack = SaliencyMapMethod(classifier, theta=theta, gamma=gamma, batch_size=len(x), verbose=False)
    return attack.generate(np.asarray(x, np.float32), y=np.eye(network.n_classes, dtype=np.float32)[targets])


ATTACKS = {"fgsm": fgsm, "bim": bim, "pgd": pgd, "cw": cw, "jsma": jsma}


def attack(network, name: str, x: np.ndarray, y: np.ndarray, **params) -> np.ndarray:
    return ATTACKS[name](network, x, y, **params)
