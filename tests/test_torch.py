"""PyTorch models behind the framework boundary: twins equal to Keras, loading, layers, gradients, attacks,
retraining and shipping (docs/design.md, "PyTorch")."""

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent))
from idcgen.errors import LayerError, ModelError  # noqa: E402
from idcgen.framework import as_network, load_network  # noqa: E402
from torch_twins import Branches, Residual, TinyViT, detached_vit_taps, images, keras_vit_twin, randomise, twins  # noqa: E402

#: (torch layer, Keras layer) pairs cut at the same place, per twin
CUTS = {
    "residual": [("relu", "stem_relu"), ("bn1", "bn1"), ("add", "add"), ("mean", "gap")],
    "branches": [("a", "a"), ("cat", "cat"), ("relu_2", "relu")],
}


@pytest.fixture(scope="module", params=["residual", "branches"])
def pair(request):
    module, model = twins(request.param)
    return request.param, as_network(module), as_network(model)


def test_twins_give_equal_outputs(pair):
    _, tn, kn = pair
    x = images()
    np.testing.assert_allclose(tn.forward(x)[0], kn.forward(x)[0], atol=1e-5)
    assert tn.task == kn.task == "classification" and tn.n_classes == kn.n_classes == 10
    assert tn.input_shape == kn.input_shape == (8, 8, 3)


@pytest.mark.parametrize("eps", [1e-7, 0.05])  # 0.05: every layer's stabiliser (and BN folding) matters
def test_twins_give_equal_relevance_at_three_layers_and_the_input(pair, eps):
    kind, tn, kn = pair
    x = images()
    for t, k in CUTS[kind]:
        rt, at, zt = tn.relevance(t, eps=eps)(x)
        rk, ak, zk = kn.relevance(k, eps=eps)(x)
        assert np.abs(rt - rk).max() <= 1e-4 * np.abs(rk).max(), (t, k)
        np.testing.assert_allclose(at, ak, atol=1e-5)
    rt, rk = tn.relevance(None, eps=eps).maps(x), kn.relevance(None, eps=eps).maps(x)
    assert rt.shape == rk.shape == x.shape  # input relevance in image layout (n, h, w, c)
    assert np.abs(rt - rk).max() <= 1e-4 * np.abs(rk).max()


def test_twins_measured_with_preprocessing_give_equal_input_relevance():
    from idcgen.framework import network_with_convention

    module, model = twins("residual", seed=7)
    tn, _ = network_with_convention(module, preprocess="mean=0.5,std=0.25")
    kn, _ = network_with_convention(model, preprocess="mean=0.5,std=0.25")
    x = images(8)
    np.testing.assert_allclose(tn.forward(x)[0], kn.forward(x)[0], atol=1e-4)
    for eps in (1e-7, 0.05):  # a large epsilon makes every stabiliser matter, the preprocessing's included
        rt, rk = tn.relevance(None, eps=eps).maps(x), kn.relevance(None, eps=eps).maps(x)
        assert np.abs(rt - rk).max() <= 1e-4 * np.abs(rk).max()


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch's own pytree deprecation inside run_decompositions
def test_a_decomposed_program_gives_the_same_layers_and_relevance(tmp_path):
    """torch.export's decomposed programs (as deployment tools save them) compute linear layers as addmm with
    a transposed weight, max pooling and batch norm as tuple-valued operations: the same relevance."""
    module = randomise(Residual(), 8)
    program = torch.export.export(module, (torch.zeros(2, 3, 8, 8),)).run_decompositions()
    torch.export.save(program, str(tmp_path / "decomposed.pt2"))
    plain, decomposed = as_network(module), load_network(tmp_path / "decomposed.pt2")
    assert len(decomposed.layer_names()) == len(plain.layer_names())
    assert [i.neurons for i in decomposed.layers_info()] == [i.neurons for i in plain.layers_info()]
    assert decomposed.default_layer() == "mean" and decomposed.weighted_layers() == plain.weighted_layers()
    x = images(8)
    for layer in ("relu", "add", "pool", None):
        for eps in (1e-7, 0.05):
            a, b = plain.relevance(layer, eps=eps), decomposed.relevance(layer, eps=eps)
            ra, rb = (a.maps(x), b.maps(x)) if layer is None else (a(x)[0], b(x)[0])
            assert np.abs(ra - rb).max() <= 1e-4 * np.abs(ra).max(), (layer, eps)


def test_relevance_is_conserved_without_biases():
    """With zero biases and BN without shift the epsilon rule conserves: relevance at every cut of the graph
    (the residual skip included) sums to the explained logit (LRP-0, eps -> 0)."""
    module = randomise(Residual(), 3)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.zero_()
        module.bn1.running_mean.zero_()
    network = as_network(module)
    x = images(8)
    logit = network.forward(x)[0].max(axis=1)
    for layer in ("relu", "add", "relu_2", "pool", "mean", None):
        rel = network.relevance(layer, eps=1e-9)
        total = rel.maps(x).reshape(len(x), -1).sum(axis=1) if layer is None else rel(x)[0].sum(axis=1)
        np.testing.assert_allclose(total, logit, rtol=1e-3, atol=1e-5)


def test_twins_give_the_same_analysis_and_idc(pair):
    import idcgen

    kind, tn, kn = pair
    x, test = images(200, seed=2), images(60, seed=3)
    t_layer, k_layer = CUTS[kind][-1]
    ta = idcgen.analyze(tn, x, layer=t_layer, m=4, progress=False)
    ka = idcgen.analyze(kn, x, layer=k_layer, m=4, progress=False)
    np.testing.assert_array_equal(ta.neurons, ka.neurons)
    assert [c.k for c in ta.clusters] == [c.k for c in ka.clusters]
    for tc, kc in zip(ta.clusters, ka.clusters):
        np.testing.assert_allclose(tc.centroids, kc.centroids, atol=1e-4)
    assert ta.coverage(test).score == ka.coverage(test).score
    assert ta.coverage(test).covered == ka.coverage(test).covered


def test_twins_give_the_same_coverage_for_every_criterion(pair):
    from idcgen.criteria import CRITERIA, make_criterion

    _, tn, kn = pair
    x, y = images(120, seed=4), np.arange(120) % 10
    test = images(40, seed=5)
    for name in CRITERIA:  # random twins predict few classes: surprise grouped by the labels
        params = {"group": "label"} if name in ("lsc", "dsc") else {}
        t = make_criterion(name, **params).fit(tn, x, y).coverage(tn, test)
        k = make_criterion(name, **params).fit(kn, x, y).coverage(kn, test)
        assert (t.covered, t.total) == (k.covered, k.total), name


def test_gradients_and_deepxplore_objectives_equal_keras(pair):
    _, tn, kn = pair
    x = images(6)
    w = np.random.default_rng(0).normal(size=(6, 10)).astype(np.float32)
    gt, zt = tn.gradients("logit-sum")(x, w)
    gk, zk = kn.gradients("logit-sum")(x, w)
    np.testing.assert_allclose(gt, gk, atol=1e-4 * np.abs(gk).max())
    np.testing.assert_allclose(zt, zk, atol=1e-5)
    assert len(tn.weighted_layers()) == len(kn.weighted_layers())
    assert [tn.neuron_count(n) for n in tn.neuron_layers()] == [
        kn.neuron_count(n) for n in kn.neuron_layers()
    ] or sorted(tn.neuron_count(n) for n in tn.neuron_layers()) == sorted(
        kn.neuron_count(n) for n in kn.neuron_layers()
    )


@pytest.mark.parametrize("name", ["fgsm", "bim", "pgd"])
def test_gradient_attacks_stay_in_the_ball_and_lower_the_true_class(name):
    network = as_network(randomise(Residual(), 1))
    x = images(16)
    labels = network.predict(x)
    params = {"eps": 0.1, "clip": (0.0, 1.0)}
    if name != "fgsm":
        params.update(eps_iter=0.02, nb_iter=10)
    if name == "pgd":
        params["start"] = x
    adv = network.attack(name, x, labels, **params)
    assert adv.shape == x.shape and adv.dtype == np.float32
    assert np.abs(adv - x).max() <= 0.1 + 1e-6 and adv.min() >= 0 and adv.max() <= 1
    before = network.forward(x)[0][np.arange(16), labels] - network.forward(x)[0].max(axis=1)
    after = network.forward(adv)[0][np.arange(16), labels] - network.forward(adv)[0].max(axis=1)
    assert after.mean() < before.mean()


def test_loads_torchscript_and_pt2_and_converts_torchscript_without_a_shape(tmp_path):
    from idcgen.framework import convert
    from idcgen.framework.torch_load import save_torchscript

    module = randomise(Residual(), 2)
    x = images(4)
    expected = as_network(module).forward(x)[0]
    save_torchscript(module, tmp_path / "ours.pt", input_shape=(8, 8, 3))
    torch.export.save(torch.export.export(module, (torch.zeros(2, 3, 8, 8),)), str(tmp_path / "m.pt2"))
    torch.jit.trace(module, torch.zeros(1, 3, 8, 8)).save(str(tmp_path / "traced.pt"))
    torch.jit.script(module).save(str(tmp_path / "scripted.pt"))
    for name in ("traced.pt", "scripted.pt"):  # TorchScript records no input shape: refused, with the way out
        with pytest.raises(ModelError, match=f"idcgen convert .*{name} .*--input-shape H,W,C"):
            load_network(tmp_path / name)
        line = convert(tmp_path / name, tmp_path / f"{name}2", input_shape=(8, 8, 3))
        assert "torch.export program" in line
    for name in ("ours.pt", "m.pt2", "traced.pt2", "scripted.pt2"):
        network = load_network(tmp_path / name)
        assert network.input_shape == (8, 8, 3), name
        np.testing.assert_allclose(network.forward(x)[0], expected, atol=1e-5)
        assert network.relevance(network.default_layer())(x)[0].shape == (4, 8)
    with pytest.raises(ModelError, match="already exists"):
        convert(tmp_path / "traced.pt", tmp_path / "traced.pt2", input_shape=(8, 8, 3))


def test_loads_a_factory_with_weights_and_names_what_does_not_fit(tmp_path, monkeypatch):
    module = randomise(Branches(), 4)
    torch.save(module.state_dict(), tmp_path / "w.pt")
    (tmp_path / "twin_factory.py").write_text(
        "import sys\nsys.path.insert(0, %r)\nfrom torch_twins import Branches, Residual\n"
        "def make():\n    return Branches()\ndef make_residual():\n    return Residual()\n"
        "def not_a_model():\n    return 3\n" % str(Path(__file__).parent)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    x = images(4)
    for model, arch in (("twin_factory:make", tmp_path / "w.pt"), (tmp_path / "w.pt", "twin_factory:make")):
        network = load_network(model, architecture=arch)
        np.testing.assert_allclose(network.forward(x)[0], as_network(module).forward(x)[0], atol=1e-5)
    with pytest.raises(ModelError, match="do not fit the model of twin_factory:make_residual"):
        load_network("twin_factory:make_residual", architecture=tmp_path / "w.pt")
    with pytest.raises(ModelError, match="has no 'nothing'"):
        load_network("twin_factory:nothing")
    with pytest.raises(ModelError, match="cannot import 'no_such_module'"):
        load_network("no_such_module:make")
    with pytest.raises(ModelError, match="not a torch.nn.Module"):
        load_network("twin_factory:not_a_model")
    with pytest.raises(ModelError, match="holds PyTorch weights.*--model package.module:make_model"):
        load_network(tmp_path / "w.pt")
    (tmp_path / "junk.pt").write_text("not a model")
    with pytest.raises(ModelError, match="not a PyTorch model file"):
        load_network(tmp_path / "junk.pt")
    with pytest.raises(ModelError, match="model file not found"):
        load_network(tmp_path / "missing.pt2")


class Nested(torch.nn.Module):
    """A block module reused twice, with a shared ReLU: names by module path, aliases for module outputs."""

    input_shape = (6, 6, 2)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
            self.act = torch.nn.ReLU()

        def forward(self, x):
            return self.act(self.act(self.conv(x)) + x)

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(2, 4, 1)
        self.stage = torch.nn.Sequential(self.Block(), self.Block())
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.head(self.stage(self.stem(x)).mean(dim=(2, 3)))


def test_layers_are_named_by_module_path_with_module_aliases():
    network = as_network(Nested())
    names = network.layer_names()
    assert names[:2] == ["stem", "stage.0.conv"]
    assert "stage.0.add" in names and "stage.0.act.relu" in names
    assert network.check_layer("stage.0") == network.check_layer("stage.0.act.relu_1")  # the block's output
    assert network.check_layer("stage") == network.check_layer("stage.1.act.relu_3")
    assert network.default_layer() == "mean"
    assert [i.neurons for i in network.layers_info()][:2] == [4, 4]
    with pytest.raises(LayerError, match="unknown layer 'nope'; valid layers: stem, stage.0.conv"):
        network.check_layer("nope")
    with pytest.raises(LayerError, match="'head' is the logits"):
        network.check_subject_layer("head")
    rel, act, _ = network.relevance("stage")(images(3)[:, :6, :6, :2])
    assert rel.shape == act.shape == (3, 4)


def test_token_sequences_have_neurons_on_the_last_axis():
    class Tokens(torch.nn.Module):
        input_shape = (5, 6)  # 5 tokens of 6 dimensions

        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Linear(6, 4)
            self.head = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.head(torch.relu(self.embed(x)).mean(dim=1))

    network = as_network(Tokens())
    x = np.random.default_rng(0).random((3, 5, 6), dtype=np.float32)
    _, (acts,) = network.forward(x, ("relu",))
    with torch.no_grad():
        hidden = torch.relu(network.source.module.embed(torch.as_tensor(x)))
    np.testing.assert_allclose(acts, hidden.mean(dim=1).numpy(), atol=1e-6)
    assert network.neuron_count("relu") == 4


def test_retrained_copy_learns_and_keeps_the_original(tmp_path):
    network = as_network(randomise(Residual(), 5))
    x = images(64, seed=6)
    x[np.arange(64), :, :, np.arange(64) % 3] += 1.0  # a learnable task: the brightest channel
    x /= x.max()
    y = np.arange(64) % 3
    before = network.fingerprint()
    tuned = network.retrained(x, y, mode="finetune", epochs=3, batch_size=16)
    assert network.fingerprint() == before and tuned.fingerprint() != before
    assert tuned.layer_names() == network.layer_names()
    scratch = network.retrained(x, y, mode="scratch", epochs=20, batch_size=16)
    assert (network.predict(x) == y).mean() < 0.5 < (scratch.predict(x) == y).mean()
    program_only = load_network(tuned.save(tmp_path / "tuned.pt2"))
    with pytest.raises(ModelError, match="from scratch"):
        program_only.retrained(x, y, mode="scratch", epochs=1)


def test_recipe_ships_the_model_to_another_process_unchanged(tmp_path):
    from idcgen.framework import load_network as load

    network = as_network(randomise(Nested(), 6))
    suffix, data = network.recipe()
    (tmp_path / f"m{suffix}").write_bytes(data)
    shipped = load(tmp_path / f"m{suffix}")
    assert shipped.fingerprint() == network.fingerprint()
    assert shipped.layer_names() == network.layer_names()
    x = np.random.default_rng(1).random((3, 6, 6, 2), dtype=np.float32)
    np.testing.assert_allclose(shipped.forward(x)[0], network.forward(x)[0], atol=1e-6)


def test_mc_dropout_is_reproducible_and_varies():
    class Drop(torch.nn.Module):
        input_shape = (4,)

        def __init__(self):
            super().__init__()
            self.fc1, self.drop, self.fc2 = torch.nn.Linear(4, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1)

        def forward(self, x):
            return self.fc2(self.drop(torch.relu(self.fc1(x))))

    network = as_network(Drop())
    assert network.task == "regression" and network.dropout_layers() == ["drop"]
    x = np.random.default_rng(0).random((5, 4), dtype=np.float32)
    a = network.dropout_outputs(x, 4, np.random.default_rng(1))
    b = network.dropout_outputs(x, 4, np.random.default_rng(1))
    np.testing.assert_array_equal(a, b)
    assert a.shape == (4, 5, 1) and a.std(axis=0).mean() > 0


def test_zoo_lenet5_twin_of_the_keras_lenet5():
    import idcgen
    from idcgen.framework.keras_zoo import lenet5
    from idcgen.framework.torch_zoo import from_keras

    keras_model = lenet5(random_state=3)
    tn, kn = as_network(from_keras(keras_model)), as_network(keras_model)
    assert tn.default_layer() == "relu_3" and kn.default_layer() == "fc2"
    x = np.random.default_rng(0).random((300, 28, 28, 1), dtype=np.float32)
    kn_logits = kn.relevance("fc2")(x[:20])[2]  # the Keras model ends in a softmax: compare its logits
    np.testing.assert_allclose(tn.forward(x[:20])[0], kn_logits, atol=1e-4)
    ta = idcgen.analyze(tn, x, layer="relu_3", m=6, progress=False)
    ka = idcgen.analyze(kn, x, layer="fc2", m=6, progress=False)
    np.testing.assert_array_equal(ta.neurons, ka.neurons)
    assert [c.k for c in ta.clusters] == [c.k for c in ka.clusters]


def test_zoo_cifar10_cnn_twin_of_the_keras_cifar10_cnn():
    import idcgen
    from idcgen.framework.keras_zoo import cifar10_cnn
    from idcgen.framework.torch_zoo import Cifar10CNN, from_keras

    keras_model = cifar10_cnn(random_state=3)
    twin = from_keras(keras_model)
    tn, kn = as_network(twin), as_network(keras_model)
    assert isinstance(twin, Cifar10CNN) and kn.default_layer() == "fc1_relu"
    x = np.random.default_rng(0).random((200, 32, 32, 3), dtype=np.float32)
    np.testing.assert_allclose(tn.forward(x[:20])[0], kn.relevance("fc1_relu")(x[:20])[2], atol=1e-4)  # logits
    ta = idcgen.analyze(tn, x, layer=tn.default_layer(), m=6, progress=False)
    ka = idcgen.analyze(kn, x, layer="fc1_relu", m=6, progress=False)
    np.testing.assert_array_equal(ta.neurons, ka.neurons)
    assert [c.k for c in ta.clusters] == [c.k for c in ka.clusters]


# ---- transformers: CP-LRP's rules (LayerNorm's 1/std and the attention weights held constant) ----------


@pytest.mark.parametrize("need_weights", [False, True])  # fused attention, or bmm + softmax + bmm
def test_vit_relevance_is_conserved_at_every_cut_without_biases(need_weights):
    torch.manual_seed(0)
    model = TinyViT(need_weights=need_weights).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or name == "pos":
                p.zero_()
    network = as_network(model)
    x = images(6)
    logit = network.forward(x)[0].max(axis=1)
    for layer in ("blocks.0", "blocks.0.add_1", "blocks.1", "norm", None):
        rel = network.relevance(layer, eps=1e-9)
        total = rel.maps(x).reshape(len(x), -1).sum(axis=1) if layer is None else rel(x)[0].sum(axis=1)
        np.testing.assert_allclose(total, logit, rtol=1e-3, atol=1e-6)
    assert any("normalising factor held constant" in note for note in network.rule_notes(None))


@pytest.mark.parametrize("need_weights", [False, True])
def test_vit_lrp0_is_gradient_x_input_of_the_detached_model(need_weights):
    """With ReLU MLPs, LRP-0 equals gradient x input of the model whose LayerNorm 1/std and attention
    weights are detached (computed by hand), at three layers inside the blocks; a neuron of a token
    sequence is a unit of its last axis, summed over tokens."""
    torch.manual_seed(1)
    model = TinyViT(act=torch.relu, need_weights=need_weights).eval()
    network = as_network(model)
    x = images(4)
    logits, taps = detached_vit_taps(model, torch.as_tensor(x).permute(0, 3, 1, 2))
    np.testing.assert_allclose(logits.detach().numpy(), network.forward(x)[0], atol=1e-5)
    explained = logits.gather(1, logits.argmax(1)[:, None]).sum()
    for ours, theirs in (
        ("blocks.0.add_1", "blocks.0.add"),
        ("blocks.0.fc1", "blocks.0.fc1"),
        ("blocks.1.fc1", "blocks.1.fc1"),
    ):
        (grad,) = torch.autograd.grad(explained, taps[theirs], retain_graph=True)
        expected = (taps[theirs] * grad).sum(dim=1).detach().numpy()
        got = network.relevance(ours, eps=1e-12)(x)[0]
        assert np.abs(got - expected).max() <= 1e-4 * np.abs(expected).max(), ours


@pytest.mark.parametrize("need_weights", [False, True])
def test_vit_twins_give_equal_outputs_and_relevance(need_weights):
    """A PyTorch ViT (nn.MultiheadAttention, LayerNorm, GELU) and its Keras twin (MultiHeadAttention,
    LayerNormalization): the same logits and the same CP-LRP relevance inside the blocks and at the input,
    though the two implement the rules apart (a modified gradient on ATen ops; per Keras layer)."""
    torch.manual_seed(2)
    module = TinyViT(need_weights=need_weights, position=False).eval()
    with torch.no_grad():
        for name, p in module.named_parameters():  # LayerNorm gains and offsets away from 1 and 0
            if ".ln" in name or name.startswith("norm."):
                p.uniform_(0.5, 1.5) if name.endswith("weight") else p.normal_(0, 0.3)
    tn, kn = as_network(module), as_network(keras_vit_twin(module))
    x = images(16)
    np.testing.assert_allclose(tn.forward(x)[0], kn.forward(x)[0], atol=1e-5)
    cuts = [
        ("embed", "embed"),
        ("blocks.0.ln1", "block0_ln1"),
        ("blocks.0.add", "block0_add1"),
        ("blocks.0.ln2", "block0_ln2"),
        ("blocks.0.gelu", "block0_fc1"),
        ("blocks.1.add_2", "block1_add1"),
        ("norm", "norm"),
    ]
    for eps in (1e-7, 0.05):
        for t, k in cuts:
            rt, at, _ = tn.relevance(t, eps=eps)(x)
            rk, ak, _ = kn.relevance(k, eps=eps)(x)
            np.testing.assert_allclose(at, ak, atol=1e-4, err_msg=t)
            assert np.abs(rt - rk).max() <= 1e-4 * np.abs(rk).max(), (t, k, eps)
        rt, rk = tn.relevance(None, eps=eps).maps(x), kn.relevance(None, eps=eps).maps(x)
        assert np.abs(rt - rk).max() <= 1e-4 * np.abs(rk).max(), eps


def test_layers_feeding_only_attention_weights_are_no_subject():
    network = as_network(TinyViT(need_weights=True).eval())
    assert "blocks.0.attn.softmax" not in network.subject_layers()
    assert "blocks.0.attn.bmm" not in network.subject_layers()  # the query-key scores
    with pytest.raises(LayerError, match="feeds only attention weights"):
        network.relevance("blocks.0.attn.bmm")


def test_carlini_wagner_and_jsma_run_on_pytorch():
    network = as_network(randomise(Residual(), 9))
    x = images(4)
    labels = network.predict(x)
    adv = network.attack(
        "cw",
        x,
        labels,
        chunk=2,
        clip=(0.0, 1.0),
        lr=0.05,
        binary_search_steps=1,
        max_iterations=5,
        abort_early=False,
        confidence=0.0,
        initial_const=1.0,
    )
    assert adv.shape == x.shape and adv.min() >= 0 and adv.max() <= 1
    targets = (labels + 1) % 10
    adv = network.attack("jsma", x, targets, theta=1.0, gamma=0.1, clip=(0.0, 1.0))
    assert adv.shape == x.shape and adv.min() >= 0 and adv.max() <= 1
    assert (np.abs(adv - x).reshape(4, -1) > 0).sum(axis=1).max() <= 0.1 * x[0].size + 2  # sparse changes
