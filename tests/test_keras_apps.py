"""keras.applications models as people have them (weights=None, small inputs, saved to a file), used through
the CLI and the Python API with real data: embedded MNIST fitted to an RGB 32x32 model, --limit on a source
ordered by class, relevance conservation at the cuts of ReLU networks the suite did not cover (MobileNet,
MobileNetV3Large minimalistic; ResNet50 and DenseNet121 marked slow), and the same analysis and coverage when
re-run or batched differently (docs/design.md, "Relevance on graphs")."""

import json

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from idcgen.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def mobilenet_file(tmp_path_factory):
    """MobileNet v1 (alpha 0.25, 32x32 RGB, 10 classes), untrained, saved as .keras."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNet(weights=None, input_shape=(32, 32, 3), classes=10, alpha=0.25)
    path = tmp_path_factory.mktemp("apps") / "mobilenet.keras"
    model.save(path)
    return path


def _one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert "Traceback" not in output and len([line for line in lines if line.startswith("error:")]) == 1, output
    return next(line for line in lines if line.startswith("error:"))


def test_embedded_mnist_is_fitted_to_an_rgb_32x32_model(mobilenet_file):
    # Before: grayscale arrays were refused for an RGB model ("load images with channels=3", an option the CLI
    # does not have) and --resize was refused for anything but an image folder, so a named dataset could not
    # reach a CIFAR-sized model at all.
    result = invoke("coverage", "--model", mobilenet_file, "--inputs", "embedded-mnist:test", "--criteria", "nc")
    assert result.exit_code == 1
    assert "spatial size differs (28x28 vs 32x32); resize the inputs (--resize 32x32)" in _one_error_line(result.output)
    result = invoke(
        "coverage",
        "--model",
        mobilenet_file,
        "--inputs",
        "embedded-mnist:test",
        "--resize",
        "32x32",
        "--criteria",
        "nc",
        "--json",
    )
    assert result.exit_code == 0, result.output
    assert "note: 1000 of 1000 images converted from grayscale to RGB (3 channels wanted)" in result.output
    assert "note: 1000 of 1000 images resized to 32x32 (HxW, PIL bilinear)" in result.output
    assert json.loads(result.output.strip().splitlines()[-1])["inputs"] == 1000


def test_image_arrays_are_converted_and_resized_as_folder_images(tmp_path):
    from idcgen.data import embedded_mnist, load_inputs

    x, y = embedded_mnist("test")
    ds = load_inputs("embedded-mnist:test", channels=3, resize="32x32", limit=1000, value_range=(0.0, 255.0))
    expected = np.asarray(Image.fromarray(x[7]).convert("RGB").resize((32, 32), Image.Resampling.BILINEAR))
    assert ds.x.shape == (1000, 32, 32, 3) and np.array_equal(ds.x[7], expected)  # uint8 levels, as PIL gives
    rgb = np.stack([np.asarray(Image.fromarray(a).convert("RGB")) for a in x[:3]])
    np.savez(tmp_path / "rgb.npz", x=rgb, y=y[:3])
    gray = load_inputs(tmp_path / "rgb.npz", channels=1, value_range=(0.0, 255.0))
    assert gray.x.shape == (3, 28, 28) and np.array_equal(gray.x, x[:3])  # RGB -> PIL's luma, back to the digit
    assert gray.notes == ("3 of 3 images converted from colour to grayscale (1 channels wanted)",)
    floats = load_inputs(tmp_path / "rgb.npz", resize="14x14", scale="255").x  # float images: PIL's "F" mode
    assert floats.shape == (3, 14, 14, 3) and floats.dtype == np.float32 and 0.0 <= floats.min() <= floats.max() <= 1
    np.save(tmp_path / "flat.npy", np.zeros((2, 784), np.uint8))
    from idcgen.errors import InputError

    with pytest.raises(InputError, match=r"--resize applies to images; these inputs have shape \(784,\) per item"):
        load_inputs(tmp_path / "flat.npy", resize="4x4")


def test_limit_that_keeps_fewer_classes_is_said(mobilenet_file):
    # Before: --limit 300 on embedded-mnist:train (ordered by class) analysed 300 zeros without a word.
    from idcgen.data import load_inputs

    warning = (
        "warning: the first 300 inputs of embedded-mnist:train hold only 1 of its 10 classes (0): it is ordered "
        "by class, and --limit keeps the first inputs; give a larger --limit or shuffled inputs to cover every class"
    )
    assert load_inputs("embedded-mnist:train", limit=300).notes == (warning,)
    assert load_inputs("embedded-mnist:train", limit=3601).notes == ()  # 400 per class: the first 3,601 hold 10
    assert load_inputs("embedded-mnist:train").notes == ()
    result = invoke(
        "coverage", "--model", mobilenet_file, "--inputs", "embedded-mnist:test", "--resize", "32x32",
        "--limit", "150", "--criteria", "nc",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "warning: the first 150 inputs of embedded-mnist:test hold only 2 of its 10 classes (0, 1)" in result.output
    assert "note: warning" not in result.output


def _cuts(net):
    """Hidden layers whose output every input-to-logits path goes through, by counting paths on the graph."""
    steps = net.graph.steps
    paths_in: dict = {}
    for step in steps:  # in topological order; graph inputs count one path each
        for key in step.outputs:
            paths_in[key] = sum(paths_in.get(k, 1) for k in step.inputs)
    logits = net.key_of(net.logits_layer)
    paths_out = {logits: 1}
    for step in reversed(steps):
        for key in step.inputs:
            paths_out[key] = paths_out.get(key, 0) + sum(paths_out.get(o, 0) for o in step.outputs)
    key = lambda step: step.outputs[0]  # noqa: E731
    return [
        s.name
        for s in steps
        if net.is_hidden(s.name) and paths_in[key(s)] * paths_out.get(key(s), 0) == paths_in[logits]
    ]


def _conserves(model, size, picks):
    """With zero biases and BN calibrated to unit scale, the relevance summed at a cut equals the explained
    logit up to float32 rounding (docs/design.md, "Relevance on graphs"); `picks` chooses cuts by position
    among all cuts."""
    from test_graph import _zero_bias_bn_calibrated

    from idcgen.relevance import Relevance

    x = np.random.default_rng(3).random((2, size, size, 3), dtype=np.float32)
    net = _zero_bias_bn_calibrated(model, x)
    cuts = _cuts(net)
    assert net.default_layer() in cuts
    chosen = [cuts[int(p * (len(cuts) - 1))] for p in picks]
    for layer in chosen:
        r, _, z = Relevance(net, layer=layer, eps=1e-7).raw(x)
        r = r.numpy().reshape(len(x), -1).astype(np.float64)
        logit = z.numpy().max(axis=1)
        # float32 rounding grows with what cancels: at a random ResNet50's inner cuts sum |R| is 1e4-1e6 times
        # the logit (LRP-0 there equals activation x gradient to 2e-6, which misses the logit as much)
        slack = 2e-3 * np.abs(logit) + 1e-7 * np.abs(r).sum(axis=1)
        assert (np.abs(r.sum(axis=1) - logit) <= slack).all(), (layer, r.sum(axis=1), logit, slack)
    return net, chosen


def test_conservation_on_mobilenet_v1():
    import keras

    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNet(weights=None, input_shape=(32, 32, 3), classes=10, alpha=0.25)
    net, chosen = _conserves(model, 32, (0.3, 0.7))
    assert {net.graph.step(c).kind for c in chosen} <= {"ReLU", "BatchNormalization", "Conv2D", "DepthwiseConv2D"}


@pytest.mark.slow
def test_conservation_on_mobilenetv3large_minimalistic():
    # ReLU, Add and ZeroPadding2D only (minimalistic: no hard swish, no squeeze-excite)
    import keras

    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV3Large(
        weights=None, input_shape=(32, 32, 3), classes=10, minimalistic=True, include_preprocessing=False, alpha=0.75
    )
    net, chosen = _conserves(model, 32, (0.5,))
    assert any(net.graph.step(c).kind == "Add" for c in _cuts(net))


@pytest.mark.slow
def test_conservation_on_resnet50():
    import keras

    keras.utils.set_random_seed(0)
    net, _ = _conserves(keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10), 32, (0.5,))
    assert {"ZeroPadding2D", "MaxPooling2D", "Add"} <= {s.kind for s in net.graph.steps}


@pytest.mark.slow
def test_conservation_on_densenet121():
    import keras

    keras.utils.set_random_seed(0)
    model = keras.applications.DenseNet121(weights=None, input_shape=(32, 32, 3), classes=10)
    net, _ = _conserves(model, 32, (0.6,))
    assert {"Concatenate", "AveragePooling2D"} <= {s.kind for s in net.graph.steps}


def test_inner_layer_analysis_repeats_and_coverage_ignores_the_batch(mobilenet_file, tmp_path):
    # An inner block output of a keras.applications model: the same neurons and clusters when re-run, and the
    # same coverage at batch sizes 7 and 128 (CLI, real digits fitted to 32x32 RGB).
    common = ("--model", mobilenet_file, "--resize", "32x32")
    for out in ("a1", "a2"):
        result = invoke(
            "analyze", *common, "--train", "embedded-mnist:test", "--layer", "conv_pw_5_relu",
            "--m", "4", "--clusters", "2-3", "--out", tmp_path / out,
        )  # fmt: skip
        assert result.exit_code == 0, result.output
    first, second = (json.loads((tmp_path / out / "analysis.json").read_text()) for out in ("a1", "a2"))
    assert first["important_neurons"] == second["important_neurons"]
    assert [c["centroids"] for c in first["clusters"]] == [c["centroids"] for c in second["clusters"]]
    measured = []
    for batch in (7, 128):
        result = invoke(
            "coverage", *common, "--analysis", tmp_path / "a1", "--inputs", "embedded-mnist:test",
            "--batch-size", batch, "--json",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        measured.append(json.loads(result.output.strip().splitlines()[-1]))
    assert measured[0] == measured[1] and measured[0]["covered"] > 0


def test_an_untrained_model_is_not_only_blamed_on_the_scale():
    # Before: an untrained keras.applications model (weights=None) fed correctly scaled images was said to get
    # "inputs likely scaled twice or not at all", and nothing else, which sends the user to the wrong options.
    import keras

    from idcgen.analysis import analyze
    from idcgen.data import embedded_mnist

    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNet(weights=None, input_shape=(32, 32, 1), classes=10, alpha=0.25)
    x, y = embedded_mnist("test")
    x = np.stack([np.asarray(Image.fromarray(a).resize((32, 32), Image.Resampling.BILINEAR)) for a in x[::10]])
    analysis = analyze(model, x[..., None] / np.float32(255), y[::10], m=2, clusters=(2,), progress=False)
    (warning,) = [w for w in analysis.warnings if "near chance" in w]
    assert "either the model is untrained (random weights, e.g. keras.applications with weights=None) or" in warning
    assert "scaled twice or not at all" in warning  # still said: a trained model fed such inputs looks the same


def test_relevance_and_taps_are_traced_once_for_any_batch_size():
    # Before: a shorter last batch traced the relevance pass and each forward tap a second time (reduce_retracing
    # relaxes the shape only then); on ResNet50 a trace took 10-20 s, as long as its relevance on 300 images.
    import keras

    from idcgen.framework.keras_network import KerasNetwork

    L = keras.layers
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 3))
    x = L.Conv2D(4, 3, activation="relu", name="conv")(inputs)
    x = L.GlobalAveragePooling2D(name="gap")(x)
    net = KerasNetwork(keras.Model(inputs, L.Dense(3, activation="softmax", name="out")(x)))
    traces = []
    run = net.graph.run
    net.graph.run = lambda *a, **k: traces.append(1) or run(*a, **k)  # Python runs only when tracing
    images = np.random.default_rng(0).random((13, 8, 8, 3), dtype=np.float32)
    relevance = net.relevance("gap")
    for n in (5, 3, 13):
        relevance(images[:n])
    assert len(traces) == 1
    traces.clear()
    net.batch_size = 5
    net.forward(images, ("conv",))  # batches of 5, 5 and 3
    net.forward(images[:4], ("conv",))
    assert len(traces) == 1
