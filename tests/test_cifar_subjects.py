"""The CIFAR-10 study subjects' training (recipes/kit/fast_cifar.py) on tiny configurations: a run stopped after
an epoch and resumed ends where an uninterrupted run ends; the exported file keeps the file contract; the
whitening layer whitens; the committed subjects keep the file contract."""

import csv
from pathlib import Path

import numpy as np
import pytest

from test_recipes import outputs, recipe  # noqa: F401  (fixtures shared with test_recipes)

torch = pytest.importorskip("torch")

TINY = {"epochs": 3, "batch_size": 32, "whiten_bias_epochs": 1}


@pytest.fixture
def images():
    """96 images in [0, 1] with smooth structure (the whitening needs correlated neighbours) and labels."""
    rng = np.random.default_rng(0)
    base = rng.random((96, 8, 8, 3), dtype=np.float32)
    x = np.kron(base, np.ones((1, 4, 4, 1), np.float32)) * 0.8 + 0.2 * rng.random((96, 32, 32, 3), dtype=np.float32)
    return x, rng.integers(0, 10, 96)


def state_of(module):
    return {k: v.clone() for k, v in module.state_dict().items()}


@pytest.mark.parametrize("architecture", ["airbench", "resbench"])
def test_resumed_run_ends_where_an_uninterrupted_run_ends(recipe, images, tmp_path, architecture):
    fast = recipe("kit.fast_cifar")
    x, y = images
    settings = fast.Recipe(**TINY)
    whole, run = fast.train(architecture, x, y, seed=3, recipe=settings, progress=False, log=lambda _: None)
    assert run["epochs"] == 3
    checkpoint = tmp_path / "m.ckpt"
    # killed at any point of the second epoch: the checkpoint on disk is the first epoch's
    fast.train(architecture, x, y, seed=3, recipe=settings, checkpoint=checkpoint, stop_after=1, progress=False)
    assert torch.load(checkpoint, weights_only=False)["epoch"] == 1
    lines = []
    resumed, run = fast.train(
        architecture, x, y, seed=3, recipe=settings, checkpoint=checkpoint, progress=False, log=lines.append
    )
    assert run["epochs"] == 3 and "resumed" in lines[0] and "after epoch 1" in lines[0]
    a, b = state_of(whole), state_of(resumed)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name].float(), b[name].float(), atol=1e-5), name
    # another random state is another run: the comparison above can fail
    other, _ = fast.train(architecture, x, y, seed=4, recipe=settings, progress=False, log=lambda _: None)
    assert not torch.allclose(state_of(other)["head.weight"], a["head.weight"], atol=1e-3)


def test_resume_refuses_a_checkpoint_of_other_settings(recipe, images, tmp_path):
    fast = recipe("kit.fast_cifar")
    x, y = images
    checkpoint = tmp_path / "m.ckpt"
    fast.train("airbench", x, y, seed=0, recipe=fast.Recipe(**TINY), checkpoint=checkpoint, stop_after=1)
    with pytest.raises(SystemExit, match="other settings"):
        fast.train("airbench", x, y, seed=1, recipe=fast.Recipe(**TINY), checkpoint=checkpoint)


def test_export_keeps_the_file_contract(recipe, images, tmp_path):
    """Images in [0, 1], NCHW, normalisation inside: the exported program gives the trained module's logits,
    and idcgen reads it as a classifier whose predictions are the module's."""
    from idcgen.framework import Network, load_model

    fast = recipe("kit.fast_cifar")
    x, y = images
    module, _ = fast.train("airbench", x, y, seed=0, recipe=fast.Recipe(**TINY), progress=False)
    path = tmp_path / "s0.pt2"
    fast.export(module, path)
    program = torch.export.load(path).module()
    batch = torch.as_tensor(x[:5].transpose(0, 3, 1, 2).copy())
    with torch.no_grad():
        assert torch.allclose(program(batch), module(batch), atol=1e-5)
    network = Network(load_model(path))
    assert network.predict(x).tolist() == module(torch.as_tensor(x.transpose(0, 3, 1, 2).copy())).argmax(1).tolist()
    assert fast.accuracy(module, x, y) == pytest.approx(float((network.predict(x) == y).mean()))


def test_whitening_layer_whitens_the_patches(recipe, images):
    """The first 12 whitening filters give the 2x2 patches unit variance and no correlation (by definition of
    the PCA whitening); the other 12 are their negations."""
    fast = recipe("kit.fast_cifar")
    x, _ = images
    net = fast.AirBench()
    tensor = torch.as_tensor(x.transpose(0, 3, 1, 2).copy())
    net.init_whitening(tensor, eps=0.0)
    with torch.no_grad():
        out = torch.nn.functional.conv2d(net.normalise(tensor), net.whiten.weight)
    flat = out.permute(0, 2, 3, 1).reshape(-1, 24).double()
    covariance = torch.cov(flat[:, :12].T)
    assert torch.allclose(covariance, torch.eye(12, dtype=torch.float64), atol=1e-3)
    assert torch.equal(net.whiten.weight[12:], -net.whiten.weight[:12])


SUBJECTS = Path(__file__).resolve().parents[1] / "recipes" / "subjects" / "cifar10"
TEST_IMAGES = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10" / "yoongikim_cifar10_test_jpeg_decoded.npz"
)


def committed_rows():
    with open(SUBJECTS / "subjects.csv", newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.skipif(not TEST_IMAGES.exists(), reason="needs ../shared/data/cifar10 (the JPEG round-tripped test set)")
@pytest.mark.parametrize("row", committed_rows(), ids=lambda row: row["file"])
def test_committed_subject_keeps_the_file_contract(row):
    """Each committed CIFAR-10 subject loads with torch.export alone, takes NCHW images in [0, 1], and idcgen
    reads it as the classifier it is: the same predictions as the plain program on 300 test images, whose
    accuracy is in line with the full test set's recorded in subjects.csv."""
    from idcgen.framework import Network, load_model

    path = SUBJECTS / row["file"]
    assert {"role", "seed", "epochs", "test accuracy %", "train seconds", "machine", "command", "commit"} <= row.keys()
    with np.load(TEST_IMAGES) as data:
        pick = np.random.default_rng(0).choice(len(data["y"]), 300, replace=False)
        x, y = data["x"][pick].astype(np.float32) / 255, data["y"][pick]
    program = torch.export.load(str(path)).module()
    with torch.no_grad():
        plain = program(torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()).argmax(1).numpy()
    assert Network(load_model(path)).predict(x).tolist() == plain.tolist()
    # 300 images: the recorded accuracy within about 4 standard errors
    assert abs(100 * (plain == y).mean() - float(row["test accuracy %"])) < 7
