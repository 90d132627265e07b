"""Old and partial model files: weights-only files, --architecture, and `idcgen convert` (idcgen.framework.keras_legacy)."""

import json
import subprocess
import sys
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import small_cnn
from typer.testing import CliRunner

from idcgen.cli import app
from idcgen.errors import ModelError
from idcgen.framework import load_model

SHARED = Path(__file__).resolve().parents[2] / "shared"
DEEPXPLORE = SHARED / "models/deepxplore/MNIST_Model3.h5"
MNIST2 = SHARED / "models/deepconcolic/mnist2.h5"
MNIST = SHARED / "data/mnist/mnist.npz"
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def _has_tf_keras() -> bool:
    try:
        import tf_keras  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def weights_and_json(tmp_path_factory):
    """small_cnn saved as a Keras 3 weights file, a Keras 2 style weights-only .h5, and its JSON architecture."""
    folder = tmp_path_factory.mktemp("legacy")
    model = small_cnn(random_state=3)
    model.save_weights(folder / "w.weights.h5")
    (folder / "arch.json").write_text(model.to_json())
    # A Keras 2 save_weights file has the layout of a full .h5's model_weights group, at the root.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save(folder / "full.h5")
    with h5py.File(folder / "full.h5", "r") as src, h5py.File(folder / "k2.h5", "w") as dst:
        for name in src["model_weights"]:
            src.copy(src["model_weights"][name], dst, name)
        for key, value in src["model_weights"].attrs.items():
            dst.attrs[key] = value
        dst.attrs["keras_version"] = "2.0.8"
    return model, folder


def _mnist_test():
    data = np.load(MNIST)
    return data["x_test"][..., None].astype("float32") / 255, data["y_test"]


def _correct(model, x, y) -> int:
    return int((model.predict(x, batch_size=1000, verbose=0).argmax(1) == y).sum())


def test_weights_only_message_names_layers_shapes_and_the_fix(weights_and_json):
    _, folder = weights_and_json
    for name, kind in [("w.weights.h5", "Keras 3 .weights.h5 format"), ("k2.h5", "Keras 2.0.8 save_weights format")]:
        with pytest.raises(ModelError) as err:
            load_model(folder / name)
        text = str(err.value)
        assert "holds weights only" in text and kind in text, text
        # small_cnn on 12x12: conv 3x3 -> 10, pool -> 5, conv 3x3 -> 3, so fc takes 3 * 3 * 6 = 54 inputs
        for part in [
            "4 layers with weights",
            "conv1 [3x3x1x4, 4]",
            "conv2 [3x3x4x6, 6]",
            "fc [54x16, 16]",
            "before_softmax [16x10, 10]",
            "--architecture model.json",
            "model.to_json()",
            "load_weights",
        ]:
            assert part in text, (part, text)
    result = invoke("layers", "--model", folder / "w.weights.h5")
    assert result.exit_code == 1
    assert (
        result.output.startswith("error: ") and result.output.count("\n") == 1 and "holds weights only" in result.output
    )


@pytest.mark.skipif(
    not DEEPXPLORE.exists(),
    reason="needs DeepXplore's MNIST_Model3.h5 in ../shared/models/deepxplore "
    "(the development workspace's third-party models; not shipped)",
)
def test_weights_only_message_on_deepxplore_file():
    with pytest.raises(ModelError) as err:
        load_model(DEEPXPLORE)
    text = str(err.value)
    assert "Keras 2.0.8 save_weights format, 5 layers with weights" in text
    assert "fc1 [784x120, 120]" in text and "fc2 [120x84, 84]" in text and "before_softmax [84x10, 10]" in text


@pytest.mark.parametrize("name", ["w.weights.h5", "k2.h5", "full.h5"])
def test_architecture_round_trip_gives_identical_predictions(weights_and_json, name):
    model, folder = weights_and_json
    loaded = load_model(folder / name, architecture=folder / "arch.json")
    x = np.random.default_rng(0).uniform(0, 1, (16, 12, 12, 1)).astype("float32")
    assert np.array_equal(model.predict(x, verbose=0), loaded.predict(x, verbose=0))


def test_architecture_in_order_when_names_differ_and_mismatch_errors(weights_and_json, tmp_path):
    model, folder = weights_and_json
    renamed = small_cnn(random_state=9)
    for layer in renamed.layers:
        layer.name = f"other_{layer.name}"  # the same structure under other names: weights go in order
    (tmp_path / "renamed.json").write_text(renamed.to_json())
    loaded = load_model(folder / "k2.h5", architecture=tmp_path / "renamed.json")
    x = np.random.default_rng(1).uniform(0, 1, (8, 12, 12, 1)).astype("float32")
    assert np.array_equal(model.predict(x, verbose=0), loaded.predict(x, verbose=0))

    import keras

    inputs = keras.Input((12, 12, 1))
    h = keras.layers.Conv2D(4, 3, name="conv1")(inputs)
    h = keras.layers.Conv2D(5, 3, name="conv2")(h)  # 5 filters where the file has 6
    h = keras.layers.Dense(16, name="fc")(keras.layers.Flatten()(keras.layers.MaxPooling2D(2)(h)))
    out = keras.layers.Dense(10, name="before_softmax")(h)
    (tmp_path / "wrong.json").write_text(keras.Model(inputs, out).to_json())
    for name in ["k2.h5", "w.weights.h5"]:
        with pytest.raises(
            ModelError,
            match=r"does not fit the weights .*layer 'conv2' has weights \(3, 3, 4, 6\), "
            r"\(6,\) in the file \(layer 'conv2'\), \(3, 3, 4, 5\), \(5,\) in the",
        ):
            load_model(folder / name, architecture=tmp_path / "wrong.json")
    with pytest.raises(ModelError, match="is not JSON"):
        load_model(folder / "k2.h5", architecture=folder / "w.weights.h5")
    result = invoke("layers", "--model", folder / "k2.h5", "--architecture", tmp_path / "missing.json")
    assert result.exit_code == 1 and "architecture file not found" in result.output


def test_cli_architecture_and_convert_to_a_full_model(weights_and_json, tmp_path):
    model, folder = weights_and_json
    result = invoke("layers", "--model", folder / "k2.h5", "--architecture", folder / "arch.json")
    assert result.exit_code == 0, result.output
    assert "conv1" in result.output and "logits: before_softmax" in result.output
    result = invoke("convert", folder / "w.weights.h5", tmp_path / "m.keras", "--architecture", folder / "arch.json")
    assert result.exit_code == 0, result.output
    x = np.random.default_rng(2).uniform(0, 1, (8, 12, 12, 1)).astype("float32")
    assert np.array_equal(model.predict(x, verbose=0), load_model(tmp_path / "m.keras").predict(x, verbose=0))
    result = invoke("convert", folder / "w.weights.h5", tmp_path / "m.onnx", "--architecture", folder / "arch.json")
    assert result.exit_code == 1 and "must end with .keras or .h5" in result.output


@pytest.mark.skipif(
    not (DEEPXPLORE.exists() and MNIST.exists()),
    reason="needs DeepXplore's MNIST_Model3.h5 and ../shared/data/mnist/mnist.npz (the development "
    "workspace's third-party files; not shipped)",
)
def test_deepxplore_model3_with_lenet5_architecture_matches_its_stated_accuracy(tmp_path):
    from idcgen.framework.keras_zoo import lenet5

    (tmp_path / "lenet5.json").write_text(lenet5().to_json())
    model = load_model(DEEPXPLORE, architecture=tmp_path / "lenet5.json")
    x, y = _mnist_test()
    assert abs(_correct(model, x, y) - 9881) <= 2  # 98.81 % stated; a float tie may flip an input or two


@pytest.mark.skipif(
    not (MNIST2.exists() and MNIST.exists()),
    reason="needs DeepConcolic's mnist2.h5 and ../shared/data/mnist/mnist.npz (the development "
    "workspace's third-party files; not shipped)",
)
@pytest.mark.skipif(not _has_tf_keras(), reason="needs tf-keras (pip install --no-deps tf-keras==2.21.0)")
@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_convert_keras_2_1_file_with_tf_keras(tmp_path, suffix):
    with pytest.raises(ModelError, match="idcgen convert"):
        load_model(MNIST2)
    new = tmp_path / f"mnist2{suffix}"
    result = invoke("convert", MNIST2, new)
    assert result.exit_code == 0, result.output
    assert "Keras 2.1.5 file read with tf-keras" in result.output and "75,242 parameters" in result.output
    x, y = _mnist_test()
    assert abs(_correct(load_model(new), x, y) - 9795) <= 2  # 97.95 % stated


@pytest.fixture()
def keras_2_1_style_file(tmp_path):
    """A Sequential .h5 whose config lists its layers bare, as Keras 2.1 wrote it (Keras 3 cannot read it)."""
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(2)])
    path = tmp_path / "old.h5"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save(path)
    with h5py.File(path, "r+") as f:
        config = json.loads(f.attrs["model_config"])
        config["config"] = config["config"]["layers"]
        f.attrs["model_config"] = json.dumps(config)
        f.attrs["keras_version"] = "2.1.5"
    return path


def test_keras_2_1_hint_names_convert(keras_2_1_style_file):
    with pytest.raises(
        ModelError,
        match=r"a Keras 2\.1\.5 file, which Keras 3 cannot read: re-save it with "
        r"`idcgen convert .*old\.h5 NEW\.keras`, which needs tf-keras",
    ):
        load_model(keras_2_1_style_file)


def test_convert_without_tf_keras_says_what_to_install(keras_2_1_style_file, tmp_path):
    # A fresh interpreter where `import tf_keras` fails as it does when the package is absent.
    code = (
        "import sys; sys.modules['tf_keras'] = None; from idcgen.cli import main; "
        f"sys.argv = ['idcgen', 'convert', {str(keras_2_1_style_file)!r}, {str(tmp_path / 'new.keras')!r}]; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[1],
    )
    import tensorflow as tf

    major, minor = tf.__version__.split(".")[:2]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 1, done.stderr
    assert errors == [
        f"error: converting a Keras 2.1-era file needs tf-keras, which is not installed: run pip install "
        f'--no-deps "tf-keras=={major}.{minor}.*" (the version matching TensorFlow {tf.__version__}; '
        "--no-deps stops pip from adding the full tensorflow package)"
    ]
    assert not (tmp_path / "new.keras").exists()


def test_convert_refuses_to_overwrite_an_existing_file_without_force(weights_and_json, tmp_path):
    _, folder = weights_and_json
    target = tmp_path / "existing.keras"
    target.write_bytes(b"precious")
    result = invoke("convert", folder / "w.weights.h5", target, "--architecture", folder / "arch.json")
    assert result.exit_code == 1 and "already exists" in result.output and "--force" in result.output
    assert target.read_bytes() == b"precious"  # nothing lost
    result = invoke("convert", folder / "w.weights.h5", target, "--architecture", folder / "arch.json", "--force")
    assert result.exit_code == 0, result.output
    assert load_model(target) is not None


def test_weights_of_a_trained_model_and_keras_3_weights_under_an_h5_name(tmp_path):
    """save_weights of a compiled, trained model holds its optimizer state too (not a layer); and a Keras 3
    .weights.h5 file renamed .h5 is the same file: both load with --architecture, and convert."""
    import shutil

    model = small_cnn(random_state=4)
    model.compile("adam", "sparse_categorical_crossentropy")
    x = np.random.default_rng(0).uniform(0, 1, (16, 12, 12, 1)).astype("float32")
    model.fit(x, np.arange(16) % 10, epochs=1, verbose=0)
    model.save_weights(tmp_path / "trained.weights.h5")
    shutil.copy(tmp_path / "trained.weights.h5", tmp_path / "trained.h5")
    (tmp_path / "arch.json").write_text(model.to_json())
    want = model.predict(x, verbose=0)
    for name in ("trained.weights.h5", "trained.h5"):
        loaded = load_model(tmp_path / name, architecture=tmp_path / "arch.json")
        np.testing.assert_array_equal(loaded.predict(x, verbose=0), want)
    result = invoke("convert", tmp_path / "trained.h5", tmp_path / "m.keras", "--architecture", tmp_path / "arch.json")
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(load_model(tmp_path / "m.keras").predict(x, verbose=0), want)


def test_a_keras_2_sequential_with_input_shape_on_its_first_layer_loads_without_keras_warning(tmp_path):
    # Keras 2 files (DeepConcolic's mnist_tiny.h5) give the first layer input_shape: Keras 3 warned "Do not
    # pass an `input_shape`/`input_dim` argument to a layer" on every command that read one
    import keras

    path = tmp_path / "seq.h5"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layers = [
            keras.layers.Conv2D(2, 3, name="c"),
            keras.layers.Flatten(),
            keras.layers.Dense(3, activation="softmax"),
        ]
        keras.Sequential([keras.Input((8, 8, 1))] + layers).save(path)
    with h5py.File(path, "r+") as f:  # the layout Keras 2 wrote: no InputLayer, the shape on the first layer
        config = json.loads(f.attrs["model_config"])
        config["config"]["layers"] = config["config"]["layers"][1:]
        config["config"]["layers"][0]["config"]["input_shape"] = [8, 8, 1]
        f.attrs["model_config"] = json.dumps(config)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load_model(path)
    assert model.input_shape == (None, 8, 8, 1)
    assert not [w for w in caught if "input_shape" in str(w.message)], [str(w.message) for w in caught]


def test_an_architecture_given_as_the_model_says_where_it_goes(weights_and_json):
    # Keras said "File format not supported ... use keras.layers.TFSMLayer(...)" of a JSON architecture
    _, folder = weights_and_json
    with pytest.raises(
        ModelError, match=r"arch.json is a JSON architecture, which holds no weights: .* --architecture"
    ):
        load_model(folder / "arch.json")
