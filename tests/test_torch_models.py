"""PyTorch models as people write them (torchvision, timm, Hugging Face style, in plain PyTorch): in-place
operations take the rules of their out-of-place forms, every hidden layer of a ResNet-18 is a subject layer
and its relevance is the activation x gradient reference; the neuron axis is followed through permutes,
reshapes and hand-written normalisations; windowed layers are mapped back to their images; only floating-point
values are layers (docs/design.md, "PyTorch")."""

import re
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

sys.path.insert(0, str(Path(__file__).parent))
from conftest import measured  # noqa: E402
from torch_styles import IN_PLACE, ConvNeXt, InPlace, Masked, ResNet18, Squared, TutorialNet, Windows  # noqa: E402

from idcgen.errors import LayerError  # noqa: E402
from idcgen.framework import as_network  # noqa: E402
from torch_twins import images, randomise  # noqa: E402


@pytest.mark.parametrize("kind", sorted(IN_PLACE))
def test_an_in_place_operation_takes_the_rule_of_its_out_of_place_form(kind):
    """The same weights written with the in-place operation and without: the same layers, taps (each the
    value before a later in-place write), every hidden layer a subject layer, the same relevance (an in-place
    dropout too: a layer, as its out-of-place form, for MC dropout to sample)."""
    torch.manual_seed(0)
    ours = randomise(InPlace(kind, in_place=True), 3)
    theirs = InPlace(kind, in_place=False)
    theirs.load_state_dict(ours.state_dict())
    a, b = as_network(ours), as_network(theirs.eval())
    names = a.layer_names()
    hidden = [n for n in names if a.is_hidden(n)]
    assert names == b.layer_names()
    subject = a.subject_layers()
    assert subject == b.subject_layers()
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


def _nchw(x):
    """Images (n, H, W, C) as a DataLoader gives them to the model: (n, C, H, W) in that layout's own strides."""
    return torch.as_tensor(x).permute(0, 3, 1, 2).clone(memory_format=torch.contiguous_format)


def _activation_x_gradient(module, x, path):
    """(n, channels) activation x gradient of the top logit at the output of module ``path``, summed over
    positions: LRP-0's relevance on a ReLU network, computed on the plain module by autograd."""
    taps = {}

    def tap(_, __, out):
        taps["a"] = out.clone()  # a clone: the block's output is read by in-place code later
        return taps["a"]

    handle = module.get_submodule(path).register_forward_hook(tap)
    try:
        logits = module(_nchw(x))
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
        for g, e in zip(got, expected):  # the same most relevant neurons
            assert set(np.argsort(g)[-4:]) == set(np.argsort(e)[-4:])


@pytest.mark.parametrize("in_place", [True, False])
def test_mc_dropout_samples_the_dropout_of_a_model_with_in_place_operations(in_place):
    """torchvision's MobileNet classifier: Hardswish(inplace=True), Dropout(inplace=True). Functionalising the
    in-place operations made every inference-mode dropout the identity (an in-place one: nothing), and
    MC dropout refused the model as having none."""
    torch.manual_seed(0)
    module = nn.Sequential(
        nn.Conv2d(3, 4, 3),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 16),
        nn.Hardswish(inplace=True),
        nn.Dropout(0.5, inplace=in_place),
        nn.Linear(16, 3),
    ).eval()
    network = as_network(module, input_shape=(8, 8, 3))
    assert network.dropout_layers() == ["6"]
    x = images(5)
    np.testing.assert_allclose(network.forward(x)[0], module(_nchw(x)).detach().numpy(), atol=1e-6)
    runs = network.dropout_outputs(x, 4, np.random.default_rng(0))
    assert runs.shape == (4, 5, 3) and runs.std(axis=0).min() > 0  # the masks differ from pass to pass


@pytest.mark.parametrize("channels", [3, 1])
def test_a_model_viewing_its_feature_maps_runs_on_images_in_their_own_layout(channels):
    """x.view(...) after convolutions needs NCHW strides: idcgen's images (n, H, W, C) moved channels first
    as a view are channels-last in memory, which convolutions keep and view refuses (a traceback before)."""
    module = randomise(TutorialNet(channels), 5)
    network = as_network(module)
    x = np.random.default_rng(0).random((4, 32, 32, channels), dtype=np.float32)
    logits, (fc1,) = network.forward(x, ("fc1",))
    expected = module(_nchw(x)).detach().numpy()  # on the CPU: a GPU's convolutions sum in their own order
    scale = 1e-5 if network.device.type == "cpu" else 1e-6 * np.abs(expected).max()
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=scale)
    assert fc1.shape == (4, 32)
    relevance = network.relevance("conv2", eps=1e-12)(x)[0]
    np.testing.assert_allclose(relevance, _activation_x_gradient(module, x, "conv2"), rtol=1e-4, atol=1e-5)


def test_a_view_runs_on_values_laid_out_otherwise_than_in_the_trace():
    """Export keeps a view where the traced value's strides allowed one; a GPU's kernels may return the same
    values in another memory order (attention's heads, a channels-last convolution), and the view refused them:
    torchvision's ViT failed on CUDA. Every view runs as a reshape: the same values in any layout."""
    module = randomise(TutorialNet(3), 5)
    network = as_network(module, device="cpu")
    pool = network.graph.layer("conv2").node.next.next  # the pool before x.view(-1, 16 * 5 * 5)
    assert "max_pool2d" in str(pool.target)

    def channels_last(node, args, value):
        return value.contiguous(memory_format=torch.channels_last) if node is pool else value

    x = torch.rand((4, 3, 32, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = network.graph.output_value(network.graph.run(x, after=channels_last))
        np.testing.assert_allclose(out.numpy(), module(x).numpy(), rtol=1e-5, atol=1e-5)


def _copy(src, dst):
    """``src``'s weights into ``dst`` where names and shapes agree (the two ConvNeXt norms' included)."""
    theirs = dst.state_dict()
    dst.load_state_dict(
        {k: v for k, v in src.state_dict().items() if k in theirs and theirs[k].shape == v.shape}, strict=False
    )
    return dst.eval()


def test_channels_last_sections_and_hand_written_norms_keep_their_channels():
    """timm's LayerNorm2d (permute, layer norm, permute back) and Hugging Face's channels-first LayerNorm
    written by hand (mean and variance over axis 1): 16 channels at every layer of the stem and block (the
    statistics over channels: 1), taps equal to the module's channel means, every layer on the value path a
    subject layer, and the two give the same relevance (the hand-written norm's std held constant as the
    built-in norm's)."""
    timm = randomise(ConvNeXt("timm"), 5)
    with torch.no_grad():
        timm.stem_norm.weight.uniform_(0.5, 1.5)
    hf = _copy(timm, ConvNeXt("hf"))
    hf.stem_norm.weight.data, hf.stem_norm.bias.data = timm.stem_norm.weight.data, timm.stem_norm.bias.data
    a, b = as_network(timm), as_network(hf)
    assert {i.neurons for i in a.layers_info()} == {16, 32, 5}
    assert {i.neurons for i in b.layers_info()} == {1, 16, 32, 5}
    assert [i.neurons for i in b.layers_info() if i.neurons == 1] == [1] * 4  # mean, var, + eps, sqrt
    assert a.subject_layers() == [n for n in a.layer_names() if a.is_hidden(n)]
    assert not {"stem_norm.sqrt", "stem_norm.add", "stem_norm.pow_1"} & set(b.subject_layers())
    x = np.random.default_rng(1).random((4, 16, 16, 3), dtype=np.float32)
    np.testing.assert_allclose(a.forward(x)[0], b.forward(x)[0], atol=1e-5)
    with torch.no_grad():
        stem = timm.stem_norm(timm.stem(torch.as_tensor(x).permute(0, 3, 1, 2)))
    for network in (a, b):
        np.testing.assert_allclose(network.forward(x, ("stem_norm",))[1][0], stem.mean((2, 3)).numpy(), atol=1e-5)
    for layer in ("stem", "dwconv", "norm", "pwconv1", None):
        ra = a.relevance(layer, eps=1e-9)(x)[0] if layer else a.relevance(None, eps=1e-9).maps(x)
        rb = b.relevance(layer, eps=1e-9)(x)[0] if layer else b.relevance(None, eps=1e-9).maps(x)
        assert np.abs(ra - rb).max() <= 1e-4 * np.abs(ra).max(), layer


def test_windowed_layers_are_mapped_back_to_their_images():
    """A Swin-style stage: layers whose first axis is batch x windows have per-image neurons (the windows one
    more position axis), equal to the module's values regrouped by hand and the same run alone or in a
    batch; relevance through torch.roll and the windows is conserved at every cut without biases."""
    torch.manual_seed(3)
    module = Windows().eval()
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.zero_()
    network = as_network(module)
    assert network.step("fc1").windows == 4 and network.neuron_count("fc1") == 12
    assert network.step("roll").windows == 1 and network.subject_layers() == [
        n for n in network.layer_names() if network.is_hidden(n)
    ]
    x = np.random.default_rng(2).random((3, 8, 8, 3), dtype=np.float32)
    taps = {}
    handle = module.fc1.register_forward_hook(lambda _, __, out: taps.setdefault("fc1", out.detach()))
    with torch.no_grad():
        module(torch.as_tensor(x).permute(0, 3, 1, 2))
    handle.remove()
    expected = taps["fc1"].reshape(3, 4 * 16, 12).mean(1).numpy()
    _, (got,) = network.forward(x, ("fc1",))
    np.testing.assert_allclose(got, expected, atol=1e-6)
    np.testing.assert_allclose(network.forward(x[1:2], ("fc1",))[1][0], expected[1:2], atol=1e-6)
    _, (span,) = network.forward(x, ("fc1@range",))
    assert span.shape == (3, 2)
    logit = network.forward(x)[0].max(axis=1)
    for layer in ("permute", "roll", "reshape", "add", "roll_1", None):  # every cut of the graph
        rel = network.relevance(layer, eps=1e-9)
        total = rel.maps(x).reshape(len(x), -1).sum(axis=1) if layer is None else rel(x)[0].sum(axis=1)
        np.testing.assert_allclose(total, logit, rtol=1e-3, atol=1e-6, err_msg=str(layer))


def test_only_floating_point_values_are_layers():
    """A boolean mask and int64 indices inside the forward pass are no layers: every layer taps, every
    criterion runs, relevance passes the mask-as-product (the mask is the gate) and the gather (routing)."""
    from idcgen.criteria import CRITERIA, make_criterion

    network = as_network(randomise(Masked(), 6))
    assert not {"gt", "argmax"} & set(network.layer_names())
    assert all(network.graph.layer(n).node.meta["val"].is_floating_point() for n in network.layer_names())
    x, y = images(40, seed=4), np.arange(40) % 3
    network.forward(x, tuple(network.layer_names()))
    for name in CRITERIA:
        params = {"group": "label"} if name in ("lsc", "dsc") else {}
        result = make_criterion(name, **params).fit(network, x, y).coverage(network, images(10, seed=5))
        assert measured(result), name
    assert network.subject_layers()[0] == "conv"
    with pytest.raises(LayerError, match="^cannot propagate relevance through layer 'pow"):  # one space
        as_network(randomise(Squared(), 1)).relevance("conv")
    assert network.relevance("conv")(x)[0].shape == (40, 4)


def test_the_default_mutators_leave_out_what_cannot_run_on_the_model_with_a_note(tmp_path):
    """relevant_pixels needs relevance at the input; behind an operation without a rule the default set
    leaves it out with one note naming it and why, and `fuzz` runs on with the others."""
    from typer.testing import CliRunner

    from idcgen.cli import app
    from idcgen.framework.torch_load import save_program
    from idcgen.fuzz.mutators import DEFAULT_MUTATORS, default_mutators

    network = as_network(randomise(Squared(), 7))
    kept, notes = default_mutators(network)
    assert [m.name for m in kept] == [n for n in DEFAULT_MUTATORS.split(",") if n != "relevant_pixels"]
    assert len(notes) == 1 and re.match(
        r"default mutator relevant_pixels left out: cannot propagate relevance to the "
        r"input through layer 'pow\w*' \(pow\): idcgen's LRP has no rule",
        notes[0],
    )
    assert len(default_mutators(as_network(randomise(ResNet18(), 1)))[0]) == len(DEFAULT_MUTATORS.split(","))
    save_program(network.source.program, tmp_path / "squared.pt2")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "train.npz", x=rng.integers(0, 256, (60, 8, 8, 3), dtype=np.uint8), y=np.arange(60) % 3)
    np.savez(tmp_path / "seeds.npz", x=rng.integers(0, 256, (12, 8, 8, 3), dtype=np.uint8), y=np.arange(12) % 3)
    done = CliRunner().invoke(
        app,
        [
            str(a)
            for a in (
                "fuzz",
                "--model",
                tmp_path / "squared.pt2",
                "--seeds",
                tmp_path / "seeds.npz",
                "--train",
                tmp_path / "train.npz",
                "--layer",
                "relu",
                "--m",
                2,
                "--budget",
                48,
                "--batch-size",
                16,
                "--out",
                tmp_path / "fz",
            )
        ],
    )
    assert done.exit_code == 0, done.output
    assert done.output.count("note: default mutator relevant_pixels left out") == 1
    used = next(line for line in done.output.splitlines() if line.startswith("mutators: "))
    assert "relevant_pixels" not in used and "random_pixels" in used


class _FcRelu(torch.nn.Module):
    input_shape = (8, 8, 3)

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.fc_relu = torch.nn.ReLU()
        self.block = torch.nn.Sequential(torch.nn.Conv2d(4, 4, 1), torch.nn.ReLU(inplace=True))
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x):
        x = self.fc_relu(self.conv(x))
        return self.fc(torch.relu(self.block(x) + x).mean((2, 3)))


@pytest.mark.parametrize("model", ["resnet18", "fc_relu"])
def test_a_traced_torchscript_file_names_its_layers_by_module_path(tmp_path, model):
    """torch.jit.save of a traced module (no shape recorded): its layers are the module's own, named by
    the module paths the file keeps (``fc_relu``, ``layer1.0.conv1``), with the same values and relevance."""
    from idcgen.framework import load_network

    module = randomise(ResNet18(), 2) if model == "resnet18" else randomise(_FcRelu(), 2)
    shape = module.input_shape
    torch.jit.trace(module, torch.zeros(1, shape[2], *shape[:2])).save(str(tmp_path / "traced.pt"))
    ours, theirs = load_network(tmp_path / "traced.pt", input_shape=shape), as_network(module)
    assert ours.layer_names() == theirs.layer_names()
    assert ("fc_relu" if model == "fc_relu" else "layer1.0.conv1") in ours.layer_names()
    x = np.random.default_rng(3).random((3, *shape), dtype=np.float32)
    np.testing.assert_allclose(ours.forward(x)[0], theirs.forward(x)[0], atol=1e-5)
    layer = "fc_relu" if model == "fc_relu" else "layer2"
    np.testing.assert_allclose(ours.relevance(layer)(x)[0], theirs.relevance(layer)(x)[0], atol=1e-5)


@pytest.mark.parametrize("model", ["resnet18", "fc_relu"])
def test_a_scripted_torchscript_file_names_its_layers_by_module_path_too(tmp_path, model):
    """A scripted module's graphs also hold branches (every one listed, the converter keeps one) and calls of
    TorchScript functions (F.relu, F.batch_norm, counted as the operation they are named for): its layers
    are named as the module's own, batch norms included (``bn1``, not ``getitem``), with the same values."""
    from idcgen.framework import load_network

    module = randomise(ResNet18(), 2) if model == "resnet18" else randomise(_FcRelu(), 2)
    shape = module.input_shape
    torch.jit.script(module).save(str(tmp_path / "scripted.pt"))
    ours, theirs = load_network(tmp_path / "scripted.pt", input_shape=shape), as_network(module)
    assert ours.layer_names() == theirs.layer_names()
    x = np.random.default_rng(3).random((3, *shape), dtype=np.float32)
    names = tuple(theirs.layer_names())
    for name, a, b in zip(names, ours.forward(x, names)[1], theirs.forward(x, names)[1]):
        np.testing.assert_allclose(a, b, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("returns", ["model_output", "dict", "tuple"])
def test_convert_writes_a_program_returning_the_logits_and_reads_it_back(tmp_path, monkeypatch, returns):
    """A classifier whose forward returns a Hugging Face style ModelOutput (an OrderedDict registered with
    torch's pytree, which a .pt2 reader without that class cannot rebuild), a dict or a tuple: `convert`
    writes a program returning the logits tensor alone."""
    (tmp_path / "structured.py").write_text(f"""
import collections, sys
import torch
sys.path.insert(0, {str(Path(__file__).parent)!r})
from torch_twins import Residual, randomise

class Output(collections.OrderedDict):
    pass

torch.utils._pytree.register_pytree_node(
    Output, lambda o: (list(o.values()), list(o.keys())), lambda v, k: Output(zip(k, v)),
    serialized_type_name="structured.Output")

class Structured(Residual):
    def forward(self, x):
        logits = super().forward(x)
        if {returns!r} == "model_output":
            return Output(logits=logits, pooled=x.mean((2, 3)))
        if {returns!r} == "dict":
            return {{"pooled": x.mean((2, 3)), "logits": logits}}
        return logits, x.mean((2, 3))

def make():
    return randomise(Structured(), 3)
""")
    monkeypatch.syspath_prepend(str(tmp_path))
    from idcgen.framework import convert, load_network
    from torch_twins import Residual

    line = convert("structured:make", tmp_path / "m.pt2")
    assert "its logits" in line and line.startswith("converted structured:make")
    assert torch.export.load(str(tmp_path / "m.pt2")).call_spec.out_spec.is_leaf()
    x = images(4)
    reference = randomise(Residual(), 3)
    np.testing.assert_allclose(
        load_network(tmp_path / "m.pt2").forward(x)[0], as_network(reference).forward(x)[0], atol=1e-5
    )


def test_a_layer_without_the_images_on_its_first_axis_is_no_subject_and_refused_by_name():
    """nn.MultiheadAttention works on (tokens, batch, dims) and (tokens x batch, dims) inside. The first are read
    per image, (batch, tokens, dims), equal to the projection computed by hand; the others have no per-image
    neurons: they are no subject layers, and tapping one says why in one line."""
    import torch.nn.functional as F

    from torch_twins import TinyViT

    model = TinyViT().eval()
    network = as_network(model)
    projection = network.graph.layer("blocks.0.attn.linear")  # the input projection, on (tokens, batch, dims)
    assert (projection.batch_axis, projection.shape) == (1, (4, 48))
    xs = images(3)
    with torch.no_grad():
        tokens = model.embed(torch.from_numpy(xs).permute(0, 3, 1, 2)).flatten(2).transpose(1, 2) + model.pos
        attn = model.blocks[0].attn
        by_hand = F.linear(model.blocks[0].ln1(tokens), attn.in_proj_weight, attn.in_proj_bias).mean(1)
    np.testing.assert_allclose(network.forward(xs, ("blocks.0.attn.linear",))[1][0], by_hand.numpy(), atol=1e-5)
    inner = [layer.name for layer in network.graph.layers if layer.windows == 0]
    assert inner and not set(inner) & (set(network.subject_layers()) | set(network.neuron_layers()))
    with pytest.raises(LayerError, match=f"layer '{inner[0]}' .* does not keep the images on its first axis"):
        network.forward(images(2), (inner[0],))
    from idcgen.criteria import CRITERIA, make_criterion

    x, y = images(40, seed=4), np.arange(40) % 10
    for name in CRITERIA:  # every criterion on its default layers
        params = {"group": "label"} if name in ("lsc", "dsc") else {}
        assert measured(make_criterion(name, **params).fit(network, x, y).coverage(network, images(10, seed=5)))


def test_analyze_a_torch_jit_save_file_takes_the_input_shape_from_the_training_inputs(tmp_path):
    """`idcgen analyze --model traced.pt --train x.npz --layer <module path>` on a file torch.jit.save wrote
    (no input shape recorded): the shape comes from the training inputs; `layers`, given no inputs, still
    says how to record it."""
    from typer.testing import CliRunner

    from idcgen.cli import app

    module = randomise(ResNet18(), 5)
    torch.jit.trace(module, torch.zeros(1, 3, 32, 32)).save(str(tmp_path / "traced.pt"))
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "x.npz", x=rng.integers(0, 256, (40, 32, 32, 3), dtype=np.uint8), y=np.arange(40) % 10)
    runner = CliRunner()
    done = runner.invoke(
        app,
        [
            str(a)
            for a in (
                "analyze",
                "--model",
                tmp_path / "traced.pt",
                "--train",
                tmp_path / "x.npz",
                "--layer",
                "layer2",
                "--m",
                2,
                "--out",
                tmp_path / "an",
            )
        ],
    )
    assert done.exit_code == 0, done.output
    assert "layer layer2.1.relu.relu_8: important neurons" in done.output
    done = runner.invoke(app, ["layers", "--model", str(tmp_path / "traced.pt")])
    assert done.exit_code == 1 and "does not record the shape of its input" in done.output


class _Head(torch.nn.Module):
    """A hidden layer of 8 units and a head reading only the first ``read`` of them (all 0: none)."""

    def __init__(self, read: int):
        super().__init__()
        self.input_shape = (6, 6, 1)
        self.hidden = torch.nn.Linear(36, 8)
        self.act = torch.nn.ReLU()
        self.head = torch.nn.Linear(8, 3)
        with torch.no_grad():
            self.head.weight.abs_()  # positive: every unit the head reads gets positive relevance
            self.head.weight[:, read:] = 0  # torchvision's ViT initialises its whole head to zeros

    def forward(self, x):
        return self.head(self.act(self.hidden(torch.flatten(x, 1))))


@pytest.mark.parametrize("read", [0, 3, 8])
def test_important_neurons_no_relevance_reached_are_said_not_passed_off_as_important(read):
    """Relevance reaches only the units the head reads: an important neuron of importance 0 was chosen by
    index among ties, and the analysis says so (an untrained torchvision ViT's zero head gave neurons
    [0, 1, 2, 3] without a word)."""
    from idcgen.analysis import analyze

    torch.manual_seed(0)
    with torch.no_grad():
        model = _Head(read).eval()
        model.hidden.bias.fill_(1.0)  # every unit active: relevance is 0 only where the head does not read
    x = np.random.default_rng(0).random((60, 6, 6, 1), dtype=np.float32)
    found = analyze(as_network(model), x, layer="act", m=5, clusters=[2, 3], progress=False)
    said = [w for w in found.warnings if "importance 0" in w or "no relevance reached" in w]
    zero = int((found.importance[found.neurons] == 0).sum())
    if read == 8:
        assert zero == 0 and not said, said
    elif read == 0:
        assert not found.importance.any() and found.neurons.tolist() == [0, 1, 2, 3, 4]
        assert len(said) == 1 and "no relevance reached layer 'act'" in said[0], said
    else:
        assert zero == 2 and set(found.neurons.tolist()[:3]) == {0, 1, 2}
        assert len(said) == 1 and said[0].startswith("2 of the 5 important neurons of layer 'act' have importance 0")
        assert "(3 of its 8 neurons have positive importance" in said[0]


def test_softmax_orderings_and_mc_dropout_rank_a_model_returning_logits_by_its_probabilities():
    """A PyTorch classifier returns logits: gini and the other softmax orderings, and MC dropout's spread, are
    of the class probabilities (computed as 1 - sum(logit^2), DeepGini was negative and put the most confident
    inputs first)."""
    from idcgen.prioritization import prioritize

    torch.manual_seed(0)
    module = nn.Sequential(
        nn.Conv2d(3, 4, 3),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 16),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Linear(16, 3),
    )
    network = as_network(randomise(module, 2), input_shape=(8, 8, 3))
    x = images(12)
    probs = torch.softmax(module(_nchw(x)), dim=1).detach().numpy().astype(np.float64)
    gini = prioritize(network, x, by="gini")
    np.testing.assert_allclose(gini.scores, 1 - (probs**2).sum(axis=1), rtol=1e-5)
    margin = prioritize(network, x, by="max-softmax")
    np.testing.assert_allclose(margin.scores, 1 - probs.max(axis=1), rtol=1e-5)
    spread = prioritize(network, x, by="mc-dropout", random_state=0).scores
    runs = network.dropout_outputs(x, 20, np.random.default_rng(0))
    runs = np.exp(runs - runs.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(spread, (runs / runs.sum(axis=-1, keepdims=True)).std(axis=0).mean(axis=1), rtol=1e-5)
    assert spread.max() <= 0.5


def test_the_subject_layer_line_names_the_usable_layers_as_usable():
    """A squeeze-excitation's gate branch gets no relevance: `idcgen layers` says so, and the layers it lists
    after are the usable ones (they read as the ones left out, and the reason named only attention)."""
    from idcgen.cli import _subject_line

    network = as_network(randomise(InPlace("mul_ gate", in_place=False), 3))
    line = _subject_line(network)
    usable = network.subject_layers()
    assert "mean" not in usable and "a gate's branch" in line, line
    assert line.endswith(f"; usable: {', '.join(usable[:5])} ... {usable[-1]}"), line


def test_an_input_shape_other_than_a_programs_own_is_refused_not_ignored(tmp_path):
    """`--input-shape 32,32,3` on a .pt2 recording (8, 8, 3) was dropped without a word (the listing then showed
    the program's shapes); the same shape given stays accepted."""
    from idcgen.errors import ModelError
    from idcgen.framework import load_model
    from idcgen.framework.torch_load import export, save_program

    path = save_program(export(randomise(InPlace("relu_", in_place=True), 1), None).program, tmp_path / "m.pt2")
    with pytest.raises(ModelError, match=r"recording its input shape \(8, 8, 3\); --input-shape 32,32,3 is for"):
        load_model(path, input_shape=(32, 32, 3))
    assert as_network(load_model(path, input_shape=(8, 8, 3))).input_shape == (8, 8, 3)


class _SequenceFirst(nn.Module):
    """Patches -> nn.TransformerEncoder(batch_first=False) on (tokens, batch, d) -> mean token -> dense."""

    input_shape = (8, 8, 3)

    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 8, 4, 4)
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0), 1, enable_nested_tensor=False
        )
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        x = self.encoder(self.patch(x).flatten(2).permute(2, 0, 1))  # (tokens, batch, d)
        return self.head(x.mean(0))


class _BatchFirst(_SequenceFirst):
    """Its twin with batch_first=True: the same weights and outputs, on (batch, tokens, d)."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), 1, enable_nested_tensor=False
        )

    def forward(self, x):
        return self.head(self.encoder(self.patch(x).flatten(2).transpose(1, 2)).mean(1))


def test_a_sequence_first_transformer_is_measured_inside_its_blocks_as_its_batch_first_twin():
    """Every layer of a batch_first=False encoder is (tokens, batch, d): all were refused, so such a model (the
    PyTorch tutorials' way) was usable only after its encoder. Now each is read as (batch, tokens, d): its
    shape, activations, feature maps, relevance, analysis and coverage are its batch-first twin's."""
    import idcgen

    sequence_first = as_network(randomise(_SequenceFirst(), 3))
    twin = _BatchFirst()
    twin.load_state_dict(randomise(_SequenceFirst(), 3).state_dict())
    batch_first = as_network(twin.eval())
    x, layer = images(64), "encoder.layers.0"
    name = sequence_first.check_subject_layer(layer)  # the block's last operation, its norm2
    assert name == batch_first.check_subject_layer(layer) == "encoder.layers.0.norm2"
    assert name in sequence_first.subject_layers() and "encoder.layers.0.relu" in sequence_first.neuron_layers()
    info, twin_info = ({i.name: i for i in n.layers_info()}[name] for n in (sequence_first, batch_first))
    assert (info.output_shape, info.neurons) == (twin_info.output_shape, twin_info.neurons) == ((4, 8), 8)
    out, (acts,) = sequence_first.forward(x, (layer,))
    twin_out, (twin_acts,) = batch_first.forward(x, (layer,))
    np.testing.assert_allclose(out, twin_out, atol=1e-5)
    np.testing.assert_allclose(acts, twin_acts, atol=1e-5)
    (maps,) = sequence_first.feature_maps((layer,))(x)
    assert maps.shape == (64, 4, 8)
    np.testing.assert_allclose(maps, batch_first.feature_maps((layer,))(x)[0], atol=1e-5)
    a = idcgen.analyze(sequence_first, x, layer=layer, m=3, progress=False)
    b = idcgen.analyze(batch_first, x, layer=layer, m=3, progress=False)
    assert a.importance.max() > 0
    np.testing.assert_allclose(a.importance, b.importance, rtol=1e-4, atol=1e-6)
    assert list(a.neurons) == list(b.neurons) and [len(c.centroids) for c in a.clusters] == [
        len(c.centroids) for c in b.clusters
    ]
    assert a.coverage(x).covered == b.coverage(x).covered
    # inside nn.MultiheadAttention, (tokens x batch, d) rows are still no inputs: refused by name
    rows = [name for name in sequence_first.layer_graph.names() if name not in sequence_first._batch_first()]
    assert rows, "every layer has a row per input"
    with pytest.raises(LayerError, match="has no row per input"):
        sequence_first._check_rows(rows[0])


def test_a_program_exported_in_training_mode_is_refused_in_one_line(tmp_path):
    """torch.export.export(model, ...) before model.eval(): its batch norms use the batch's statistics, so an
    input's outputs depended on the others in its batch, without a word."""
    from idcgen.errors import ModelError
    from idcgen.framework import load_model

    module = randomise(InPlace("relu_", in_place=False), 1).train()
    program = torch.export.export(module, (torch.zeros(4, 3, 8, 8),), dynamic_shapes=({0: torch.export.Dim.AUTO},))
    torch.export.save(program, tmp_path / "train.pt2")
    with pytest.raises(ModelError, match=r"exported in training mode: .*batch_norm.* after model\.eval\(\)"):
        load_model(tmp_path / "train.pt2")
    torch.export.save(torch.export.export(module.eval(), (torch.zeros(4, 3, 8, 8),)), tmp_path / "eval.pt2")
    x = images(4)
    network = as_network(load_model(tmp_path / "eval.pt2"))
    np.testing.assert_allclose(network.forward(x[:1])[0], network.forward(x)[0][:1], atol=1e-5)


def test_a_torchscript_file_refusing_the_images_shape_does_not_blame_an_option_never_given(tmp_path):
    """A TorchScript file records no input shape: a command takes its images' shape, and where the model does
    not run on it the message named only --input-shape, which the user had not given."""
    from idcgen.errors import ModelError
    from idcgen.framework import load_model

    module = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))
    torch.jit.save(torch.jit.script(module.eval()), tmp_path / "m.pt")
    with pytest.raises(ModelError, match=r"does not run on images of \(8, 8, 1\), .*else that of the images given"):
        load_model(tmp_path / "m.pt", input_shape=(8, 8, 1))
