"""PyTorch models as people write them (torchvision, timm, Hugging Face style, in plain PyTorch): in-place
operations take the rules of their out-of-place forms, every hidden layer of a ResNet-18 is a subject layer
and its relevance is the activation x gradient reference (docs/design.md, "PyTorch")."""

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent))
from torch_styles import IN_PLACE, InPlace, ResNet18  # noqa: E402
from torch_twins import images, randomise  # noqa: E402

from idcgen.framework import as_network  # noqa: E402


@pytest.mark.parametrize("kind", sorted(IN_PLACE))
def test_an_in_place_operation_takes_the_rule_of_its_out_of_place_form(kind):
    """The same weights written with the in-place operation and without: the same layers, taps (each the
    value before a later in-place write), every hidden layer a subject layer, the same relevance. (An
    in-place dropout at inference is no operation at all once functionalised: no layer.)"""
    torch.manual_seed(0)
    ours = randomise(InPlace(kind, in_place=True), 3)
    theirs = InPlace(kind, in_place=False)
    theirs.load_state_dict(ours.state_dict())
    a, b = as_network(ours), as_network(theirs.eval())
    names = a.layer_names()
    hidden = [n for n in names if a.is_hidden(n)]
    dropped = ["dropout"] if kind == "dropout_" else []
    assert names == [n for n in b.layer_names() if n not in dropped]
    subject = a.subject_layers()
    assert subject == [n for n in b.subject_layers() if n not in dropped]
    # every hidden layer, but a squeeze-excitation's gate branch (the gate rule gives it no relevance)
    assert subject == [n for n in hidden if kind != "mul_ gate" or n not in ("mean", "sigmoid")]
    x = images(6)
    out_a, taps_a = a.forward(x, tuple(names))
    out_b, taps_b = b.forward(x, tuple(names))
    np.testing.assert_allclose(out_a, out_b, atol=1e-6)
    for name, ta, tb in zip(names, taps_a, taps_b):
        np.testing.assert_allclose(ta, tb, atol=1e-6, err_msg=name)
    for layer in subject[:3] + [None]:
        ra = a.relevance(layer)(x)[0] if layer else a.relevance(None).maps(x)
        rb = b.relevance(layer)(x)[0] if layer else b.relevance(None).maps(x)
        np.testing.assert_allclose(ra, rb, atol=1e-6 * max(1.0, np.abs(rb).max()), err_msg=str(layer))


def _activation_x_gradient(module, x, path):
    """(n, channels) activation x gradient of the top logit at the output of module ``path``, summed over
    positions: LRP-0's relevance on a ReLU network, computed on the plain module by autograd."""
    taps = {}

    def tap(_, __, out):
        taps["a"] = out.clone()   # a clone: the block's output is read by in-place code later
        return taps["a"]

    handle = module.get_submodule(path).register_forward_hook(tap)
    try:
        logits = module(torch.as_tensor(x).permute(0, 3, 1, 2))
    finally:
        handle.remove()
    top = logits.gather(1, logits.argmax(1)[:, None]).sum()
    (grad,) = torch.autograd.grad(top, taps["a"])
    return (taps["a"] * grad).sum(dim=(2, 3)).detach().numpy()


def test_a_torchvision_style_resnet18_has_every_hidden_layer_a_subject_layer_with_exact_relevance():
    module = randomise(ResNet18(), 4)
    network = as_network(module)
    names = network.layer_names()
    hidden = [n for n in names if network.is_hidden(n)]
    assert len(hidden) == len(names) - 1 == 68 and network.subject_layers() == hidden
    assert network.check_layer("layer2.1") == "layer2.1.relu.relu_8" and "layer1.0.add" in names
    assert network.neuron_count("layer3") == 32 and network.default_layer() == "avgpool"
    x = np.random.default_rng(0).random((4, 32, 32, 3), dtype=np.float32)
    for path in ("layer1.1", "layer2.0", "layer3.1.bn1", "layer4.0.downsample"):
        layer = network.check_layer(path)
        expected = _activation_x_gradient(module, x, path)
        got = network.relevance(layer, eps=1e-12)(x)[0]
        assert np.abs(got - expected).max() <= 1e-4 * np.abs(expected).max(), path
        for g, e in zip(got, expected):   # the same most relevant neurons
            assert set(np.argsort(g)[-4:]) == set(np.argsort(e)[-4:])
