"""Input conventions: value ranges read from the model or given, preprocessing between image and model,
flat and channel-less models fuzzed as images, scale mistakes caught, image folders resized."""

import json

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from idcgen.cli import app
from idcgen.convention import InputConvention, infer_image_shape, parse_image_shape, parse_preprocess, parse_value_range
from idcgen.errors import InputError, ParameterError
from idcgen.framework.keras_convention import from_model, prepare

runner = CliRunner()
TORCH_MEAN, TORCH_STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def _train(model, x, y, epochs=2):
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(x, y, epochs=epochs, batch_size=64, verbose=0)
    return model


@pytest.fixture(scope="module")
def raw_digits():
    """Embedded MNIST as uint8 (n, 28, 28) with labels: train (4,000) and test (1,000)."""
    from idcgen.data import embedded_mnist

    return embedded_mnist("train") + embedded_mnist("test")


@pytest.fixture(scope="module")
def rescaling_model(raw_digits, tmp_path_factory):
    """A CNN that starts with Rescaling(1/255) and takes 0..255, trained 2 epochs: (model, path)."""
    import keras

    keras.utils.set_random_seed(0)
    L = keras.layers
    model = keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            L.Rescaling(1 / 255, name="scale"),
            L.Conv2D(4, 3, activation="relu", name="conv"),
            L.MaxPooling2D(2, name="pool"),
            L.Flatten(name="flat"),
            L.Dense(16, activation="relu", name="fc"),
            L.Dense(10, activation="softmax", name="out"),
        ]
    )
    x_train, y_train = raw_digits[0], raw_digits[1]
    _train(model, x_train[..., None].astype(np.float32), y_train)
    path = tmp_path_factory.mktemp("rescaling") / "rescaling.keras"
    model.save(path)
    return model, path


@pytest.fixture(scope="module")
def data_files(raw_digits, tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    x_train, y_train, x_test, y_test = raw_digits
    np.savez(folder / "train.npz", x=x_train[:1000], y=y_train[:1000])
    np.savez(folder / "test.npz", x=x_test, y=y_test)
    return folder


# ---- parsing and reading the model ----------------------------------------------------------------
def test_range_read_from_a_leading_rescaling_layer_also_nested():
    import keras

    L = keras.layers

    def model(*first):
        return keras.Sequential([keras.Input((8, 8, 3)), *first, L.Flatten(), L.Dense(3, activation="softmax")])

    assert from_model(model(L.Rescaling(1 / 255))).value_range == (0.0, 255.0)
    assert from_model(model(L.Rescaling(1 / 127.5, offset=-1))).value_range == (0.0, 255.0)
    assert from_model(model()).value_range == (0.0, 1.0)
    assert from_model(model(L.Rescaling(2.0))).value_range == (0.0, 1.0)  # not a 0..255 -> unit map
    inner = model(L.Rescaling(1 / 255, name="inner_scale"))
    outer = keras.Sequential([keras.Input((8, 8, 3)), inner])
    found = from_model(outer)
    assert found.value_range == (0.0, 255.0) and "inner_scale" in found.source


@pytest.mark.parametrize(
    "spec, mean, std, bgr",
    [
        ("tf", (127.5,), (127.5,), False),
        ("imagenet-torch", tuple(TORCH_MEAN * 255), tuple(TORCH_STD * 255), False),
        ("imagenet-caffe", (103.939, 116.779, 123.68), (1.0, 1.0, 1.0), True),
        ("mean=0.1307,std=0.3081", (0.1307,), (0.3081,), False),
        ("mean=0.485,0.456,0.406,std=0.229,0.224,0.225", tuple(TORCH_MEAN), tuple(TORCH_STD), False),
        ("mean=[1, 2], std=[3, 4]", (1.0, 2.0), (3.0, 4.0), False),
    ],
)
def test_parse_preprocess(spec, mean, std, bgr):
    pre = parse_preprocess(spec)
    assert np.allclose(pre.mean, mean) and np.allclose(pre.std, std) and pre.bgr == bgr
    assert parse_preprocess(pre.spec) == pre  # the canonical spec round-trips


@pytest.mark.parametrize(
    "spec, message",
    [
        ("caffe", "unknown --preprocess 'caffe'; expected one of imagenet-caffe"),
        ("mean=0.5", "unknown --preprocess"),
        ("mean=0.5,std=0", "std must be > 0"),
        ("mean=x,std=1", "mean must be numbers"),
        ("mean=1,2,std=1,2,3", "2 mean values but 3 std values"),
    ],
)
def test_bad_preprocess_specs(spec, message):
    with pytest.raises(ParameterError, match=message):
        parse_preprocess(spec)


def test_parse_value_range_and_image_shape():
    assert parse_value_range("0,255") == (0.0, 255.0) and parse_value_range("-1, 1") == (-1.0, 1.0)
    for bad in ("255,0", "0", "a,b", "0,inf"):
        with pytest.raises(ParameterError, match="value range must be LO,HI"):
            parse_value_range(bad)
    assert parse_image_shape("28,28,1") == (28, 28, 1) and parse_image_shape("28x28") == (28, 28, 1)
    with pytest.raises(ParameterError, match="image shape must be H,W,C"):
        parse_image_shape("28,0,1")


def test_infer_image_shape():
    assert infer_image_shape((28, 28, 1)) == (28, 28, 1)
    assert infer_image_shape((28, 28)) == (28, 28, 1)
    assert infer_image_shape((784,)) == (28, 28, 1)
    assert infer_image_shape((3072,)) == (32, 32, 3)
    assert infer_image_shape((200,), item_shape=(10, 20)) == (10, 20, 1)  # the data's own shape wins
    with pytest.raises(ParameterError, match="--image-shape H,W,C"):
        infer_image_shape((10,))


def test_preprocess_conflicts_are_refused(rescaling_model):
    import keras

    plain = keras.Sequential([keras.Input((4, 4, 3)), keras.layers.Flatten(), keras.layers.Dense(2)])
    with pytest.raises(ParameterError, match="takes images in \\[0, 255\\]; --value-range 0,1 contradicts it"):
        prepare(plain, preprocess="tf", value_range="0,1")
    with pytest.raises(ParameterError, match="starts with its own preprocessing .*would scale the inputs twice"):
        prepare(rescaling_model[0], preprocess="tf")
    with pytest.raises(ParameterError, match="flips RGB to BGR and needs 3 channels"):
        gray = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten(), keras.layers.Dense(2)])
        prepare(gray, preprocess="imagenet-caffe")


# ---- preprocessing between image and model --------------------------------------------------------
@pytest.mark.parametrize(
    "spec, by_hand",
    [
        ("tf", lambda x: x / 127.5 - 1.0),
        ("imagenet-torch", lambda x: (x / 255.0 - TORCH_MEAN) / TORCH_STD),
        ("imagenet-caffe", lambda x: x[..., ::-1] - np.array([103.939, 116.779, 123.68])),
        ("mean=0.485,0.456,0.406,std=0.229,0.224,0.225", lambda x: (x / 255.0 - TORCH_MEAN) / TORCH_STD),
    ],
)
def test_preprocess_wrapper_equals_the_arithmetic_by_hand(spec, by_hand):
    import keras

    from idcgen.framework import Network

    keras.utils.set_random_seed(1)
    L = keras.layers
    raw = keras.Sequential(
        [
            keras.Input((6, 6, 3)),
            L.Conv2D(4, 3, activation="relu", name="conv"),
            L.Flatten(name="flat"),
            L.Dense(5, activation="relu", name="fc"),
            L.Dense(3, activation="softmax", name="out"),
        ]
    )
    x = np.random.default_rng(0).uniform(0, 255, (7, 6, 6, 3)).astype(np.float32)
    if spec.startswith("mean="):  # mean/std apply in the images' own range: give them in [0, 1]
        x = x / 255.0
        by_hand_unit = by_hand
        by_hand = lambda v: by_hand_unit(v * 255.0)  # noqa: E731
    wrapped, convention = prepare(raw, preprocess=spec)
    expected = raw.predict(by_hand(x.astype(np.float64)).astype(np.float32), verbose=0)
    assert np.allclose(wrapped.predict(x, verbose=0), expected, atol=1e-5)
    network = Network(wrapped)  # the relevance, taps and attacks see image space
    probs, (fc,) = network.forward(x, ("fc",))
    tap = keras.Model(raw.inputs[0], raw.get_layer("fc").output)
    assert np.allclose(probs, expected, atol=1e-5)
    assert np.allclose(fc, tap.predict(by_hand(x.astype(np.float64)).astype(np.float32), verbose=0), atol=1e-4)
    assert convention.value_range == ((0.0, 1.0) if spec.startswith("mean=") else (0.0, 255.0))


# ---- a model that takes 0..255 ---------------------------------------------------------------------
def test_rescaling_model_is_analysed_measured_and_fuzzed_in_0_255(rescaling_model, raw_digits, tmp_path):
    import idcgen
    from idcgen.data import load_for_model

    model, _ = rescaling_model
    convention = from_model(model)
    assert convention.value_range == (0.0, 255.0)
    train, x_train = load_for_model("embedded-mnist:train", (28, 28, 1), value_range=convention.value_range, limit=1000)
    assert x_train.max() == 255.0 and "kept in 0..255" in train.scaling  # uint8 not divided by 255
    analysis = idcgen.analyze(model, x_train, train.y, layer="fc", m=4, clusters=(2, 3), progress=False)
    assert analysis.convention.value_range == (0.0, 255.0) and analysis.observed_range == (0.0, 255.0)
    assert analysis.data["accuracy"] > 0.7 and not analysis.warnings
    test = raw_digits[2][:, :, :, None].astype(np.float32)
    assert analysis.coverage(test).covered >= 1

    class Recording(idcgen.Fuzzer):  # keeps every batch of mutants beside its parents
        def _mutate(self, c, mutator, parents):
            mutants, references = super()._mutate(c, mutator, parents)
            self.batches.append((repr(mutator), c.corpus.x[parents], mutants))
            return mutants, references

    fuzzer = Recording(analysis, mutators=["gauss(std=0.05)", "rotate"], batch_size=50, random_state=0)
    fuzzer.batches = []
    assert fuzzer.value_range == (0.0, 255.0)
    campaign = fuzzer.start(test[:60], raw_digits[3][:60], tmp_path / "c", budget=300)
    fuzzer.run(campaign, progress=False)
    assert campaign.execs == 300 and len(campaign.corpus) > 60
    mutants = np.concatenate([m for _, _, m in fuzzer.batches])
    assert mutants.min() >= 0.0 and mutants.max() <= 255.0 and mutants.max() > 250
    # gauss noise std 0.05 of the range is 12.75 grey levels: measured at the pixels whose parent lies
    # 4 std away from either bound (where clipping practically never acts)
    parents = np.concatenate([p for name, p, _ in fuzzer.batches if name.startswith("gauss")])
    noisy = np.concatenate([m for name, _, m in fuzzer.batches if name.startswith("gauss")])
    interior = (parents > 51) & (parents < 204)
    assert interior.sum() >= 1000
    assert abs((noisy - parents)[interior].std() - 0.05 * 255) < 0.05 * 0.05 * 255


def test_double_scaling_warns(rescaling_model, data_files, tmp_path):
    import idcgen
    from idcgen.data import load_for_model

    model, path = rescaling_model
    ds, x = load_for_model(data_files / "train.npz", (28, 28, 1), scale="255", value_range=(0.0, 255.0))
    analysis = idcgen.analyze(model, x, ds.y, layer="fc", m=3, clusters=(2,), progress=False)
    assert analysis.data["accuracy"] < 0.15
    assert len(analysis.warnings) == 1 and "scaled twice or not at all" in analysis.warnings[0]
    assert analysis.warnings[0] in analysis.notes
    out = tmp_path / "a"
    result = invoke(
        "analyze",
        "--model",
        path,
        "--train",
        data_files / "train.npz",
        "--scale",
        "255",
        "--layer",
        "fc",
        "--m",
        3,
        "--clusters",
        "2",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    assert "warning: the model classifies" in result.output and "near chance" in result.output
    assert json.loads((out / "analysis.json").read_text())["warnings"]
    # the default scale keeps 0..255 for this model: no warning, and the accuracy of a trained model
    result = invoke(
        "analyze",
        "--model",
        path,
        "--train",
        data_files / "train.npz",
        "--layer",
        "fc",
        "--m",
        3,
        "--clusters",
        "2",
        "--out",
        tmp_path / "b",
    )
    assert result.exit_code == 0, result.output
    assert (
        "warning" not in result.output and "images in [0, 255] (read from the model's Rescaling layer" in result.output
    )
    meta = json.loads((tmp_path / "b" / "analysis.json").read_text())
    assert meta["data"]["accuracy"] > 0.7 and meta["config"]["input_convention"]["value_range"] == [0, 255]


def test_coverage_refuses_inputs_on_another_scale(rescaling_model, data_files, tmp_path):
    model, path = rescaling_model
    out = tmp_path / "a"
    assert (
        invoke(
            "analyze",
            "--model",
            path,
            "--train",
            data_files / "train.npz",
            "--layer",
            "fc",
            "--m",
            3,
            "--clusters",
            "2",
            "--out",
            out,
        ).exit_code
        == 0
    )
    result = invoke(
        "coverage", "--analysis", out, "--model", path, "--inputs", data_files / "test.npz", "--scale", "255"
    )
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the inputs span [0, 1]") and "--scale" in lines[0]
    assert invoke("coverage", "--analysis", out, "--model", path, "--inputs", data_files / "test.npz").exit_code == 0
    result = invoke(
        "coverage", "--analysis", out, "--model", path, "--inputs", data_files / "test.npz", "--value-range", "0,1"
    )
    assert result.exit_code == 1 and "differs from the analysis' [0, 255]" in result.output

    from idcgen.analysis import Analysis
    from idcgen.framework import load_model

    analysis = Analysis.load(out, model=load_model(path))
    test = np.load(data_files / "test.npz")["x"][..., None].astype(np.float32)
    with pytest.raises(InputError, match=r"scaled differently; load them with the analysis' scale"):
        analysis.coverage(test / 255)


def test_coverage_refuses_0_255_inputs_against_a_unit_range_analysis(trained_lenet, digits):
    import idcgen

    model, _ = trained_lenet
    x_train, y_train, x_test, _ = digits
    analysis = idcgen.analyze(model, x_train[:500], y_train[:500], m=3, clusters=(2,), progress=False)
    assert analysis.convention.value_range == (0.0, 1.0)
    with pytest.raises(
        InputError, match=r"span \[0, 255\] but the analysis takes images in \[0, 1\]; divide them by 255"
    ):
        analysis.coverage(x_test * 255)


def test_layers_prints_what_the_model_expects(rescaling_model, trained_lenet):
    result = invoke("layers", "--model", rescaling_model[1])
    assert result.exit_code == 0, result.output
    assert "expects: images in [0, 255]" in result.output
    assert "preprocessing layers: Rescaling 'scale' (scale=0.00392" in result.output
    result = invoke("layers", "--model", trained_lenet[1])
    assert (
        "expects: images in [0, 1] (default [0, 1])" in result.output and "preprocessing layers: none" in result.output
    )


def test_cli_preprocess_analyses_a_model_trained_on_normalised_inputs(raw_digits, data_files, tmp_path):
    import keras

    keras.utils.set_random_seed(0)
    L = keras.layers
    model = keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            L.Flatten(),
            L.Dense(16, activation="relu", name="fc"),
            L.Dense(10, activation="softmax", name="out"),
        ]
    )
    x = raw_digits[0][..., None].astype(np.float32) / 127.5 - 1.0  # what `tf` computes, by hand
    _train(model, x, raw_digits[1])
    model.save(tmp_path / "m.keras")
    common = ["--model", tmp_path / "m.keras", "--train", data_files / "train.npz", "--m", 3, "--clusters", "2"]
    result = invoke("analyze", *common, "--preprocess", "tf", "--out", tmp_path / "a")
    assert result.exit_code == 0, result.output
    meta = json.loads((tmp_path / "a" / "analysis.json").read_text())
    assert meta["config"]["input_convention"]["preprocess"] == "tf" and meta["data"]["accuracy"] > 0.7
    assert meta["data"]["observed_range"] == [0, 255]
    # coverage takes the preprocessing from the analysis; the same inputs unpreprocessed measure otherwise
    result = invoke(
        "coverage",
        "--analysis",
        tmp_path / "a",
        "--model",
        tmp_path / "m.keras",
        "--inputs",
        data_files / "test.npz",
        "--json",
    )
    assert result.exit_code == 0, result.output
    from idcgen.analysis import Analysis

    analysis = Analysis.load(tmp_path / "a", model=keras.models.load_model(tmp_path / "m.keras"))
    test = np.load(data_files / "test.npz")["x"][..., None].astype(np.float32)
    assert json.loads(result.output.strip().splitlines()[-1])["covered"] == analysis.coverage(test).covered
    result = invoke(
        "coverage",
        "--analysis",
        tmp_path / "a",
        "--model",
        tmp_path / "m.keras",
        "--inputs",
        data_files / "test.npz",
        "--preprocess",
        "imagenet-torch",
    )
    assert result.exit_code == 1 and "differs from the analysis' (tf)" in result.output


# ---- flat and channel-less models fuzzed as images --------------------------------------------------
def test_flat_784_model_is_fuzzed_as_images(raw_digits, tmp_path):
    import keras

    import idcgen

    keras.utils.set_random_seed(0)
    L = keras.layers
    model = keras.Sequential(
        [keras.Input((784,)), L.Dense(32, activation="relu", name="fc"), L.Dense(10, activation="softmax", name="out")]
    )
    x_train = raw_digits[0].reshape(-1, 784).astype(np.float32) / 255
    _train(model, x_train, raw_digits[1])
    analysis = idcgen.analyze(model, x_train[:1000], raw_digits[1][:1000], m=4, clusters=(2, 3), progress=False)
    fuzzer = idcgen.Fuzzer(analysis, mutators=["gauss", "rotate", "fgsm"], batch_size=32, random_state=0)
    assert fuzzer.network.input_shape == (28, 28, 1) and analysis.network.input_shape == (784,)
    seeds = raw_digits[2][:40].reshape(-1, 784).astype(np.float32) / 255
    campaign = fuzzer.start(seeds, raw_digits[3][:40], tmp_path / "c", budget=300)
    fuzzer.run(campaign, progress=False)
    assert campaign.execs == 300 and campaign.corpus.x.shape[1:] == (28, 28, 1)
    assert all(s.errors == 0 for s in campaign.mutator_stats.values()), campaign.mutator_stats
    kept = campaign.corpus.x[40:]
    # the mutants run through the wrapper are what the flat model gives on them flattened
    assert np.array_equal(campaign.corpus.prediction[40:], model.predict(kept.reshape(-1, 784), verbose=0).argmax(1))


def test_cli_fuzzes_a_28x28_model_without_channel_axis(raw_digits, data_files, tmp_path, monkeypatch):
    import keras

    keras.utils.set_random_seed(0)
    L = keras.layers
    model = keras.Sequential(
        [
            keras.Input((28, 28)),
            L.Flatten(name="flat"),
            L.Dense(32, activation="relu", name="fc"),
            L.Dense(10, activation="softmax", name="out"),
        ]
    )
    _train(model, raw_digits[0].astype(np.float32) / 255, raw_digits[1])
    model.save(tmp_path / "m.keras")
    monkeypatch.chdir(tmp_path)
    result = invoke(
        "fuzz",
        "--model",
        tmp_path / "m.keras",
        "--seeds",
        data_files / "test.npz",
        "--limit",
        40,
        "--train",
        data_files / "train.npz",
        "--m",
        3,
        "--clusters",
        "2",
        "--mutators",
        "gauss,shift",
        "--budget",
        200,
        "--batch-size",
        32,
        "--out",
        tmp_path / "c",
    )
    assert result.exit_code == 0, result.output
    with np.load(tmp_path / "c" / "exports" / "grown.npz") as grown:
        assert grown["x"].shape[1:] == (28, 28, 1) and len(grown["x"]) > 40
    config = json.loads((tmp_path / "c" / "campaign.json").read_text())["config"]
    assert config["input_convention"]["image_shape"] == [28, 28, 1] and config["input_shape"] == [28, 28, 1]
    result = invoke("fuzz", "--resume", tmp_path / "c", "--budget", 264)
    assert result.exit_code == 0, result.output


def test_image_shape_must_hold_the_models_values(raw_digits):
    import keras

    import idcgen

    model = keras.Sequential(
        [
            keras.Input((784,)),
            keras.layers.Dense(4, activation="relu", name="fc"),
            keras.layers.Dense(10, activation="softmax", name="out"),
        ]
    )
    analysis = idcgen.analyze(model, raw_digits[0][:50].reshape(-1, 784) / 255, m=2, clusters=(2,), progress=False)
    with pytest.raises(
        ParameterError, match=r"image shape \(27, 28, 1\) holds 756 values but the model takes \(784,\)"
    ):
        idcgen.Fuzzer(analysis, mutators=["gauss"], convention=InputConvention(image_shape=(27, 28, 1)))


# ---- resizing image folders -----------------------------------------------------------------------
def test_resize_image_folder(tmp_path):
    from idcgen.data import load_inputs

    rng = np.random.default_rng(0)
    originals = []
    for label, size in (("a", (40, 30)), ("b", (50, 20))):  # PIL sizes are (width, height)
        (tmp_path / label).mkdir()
        image = Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
        image.save(tmp_path / label / "0.png")
        originals.append(image)
    with pytest.raises(InputError, match="images differ in size.*--resize HxW"):
        load_inputs(tmp_path)
    ds = load_inputs(tmp_path, resize="28x32", value_range=(0.0, 255.0))
    assert ds.x.shape == (2, 28, 32, 3) and list(ds.y) == [0, 1]
    assert "resized to 28x32 (HxW) with PIL bilinear" in ds.source
    expected = np.asarray(originals[1].resize((32, 28), Image.Resampling.BILINEAR), dtype=np.float32)
    assert np.array_equal(ds.x[1], expected)
    with pytest.raises(ParameterError, match="resize must be HxW"):
        load_inputs(tmp_path, resize="28")
    np.save(tmp_path.parent / "x.npy", np.zeros((2, 5, 5), np.uint8))  # image arrays are resized too, when asked
    assert load_inputs(tmp_path.parent / "x.npy", resize="4x4").x.shape == (2, 4, 4)


def test_cli_resize(tmp_path, trained_lenet):
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (60, 40), dtype=np.uint8)).save(tmp_path / f"{i}.png")
    result = invoke("coverage", "--model", trained_lenet[1], "--inputs", tmp_path, "--criteria", "nc")
    assert result.exit_code == 0, result.output  # a folder's images are resized to the model's input, said
    assert "3 of 3 images resized to 28x28 (HxW, PIL bilinear); --resize HxW chooses the size" in result.output
    np.save(tmp_path / "arrays.npy", rng.random((3, 60, 40, 1)).astype(np.float32))  # arrays are not resized
    result = invoke("coverage", "--model", trained_lenet[1], "--inputs", tmp_path / "arrays.npy", "--criteria", "nc")
    assert result.exit_code == 1 and "spatial size differs (60x40 vs 28x28)" in result.output
    result = invoke(
        "coverage", "--model", trained_lenet[1], "--inputs", tmp_path, "--criteria", "nc", "--resize", "28x28", "--json"
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["inputs"] == 3


def test_convention_round_trips():
    convention = InputConvention((0.0, 255.0), parse_preprocess("imagenet-torch"), (32, 32, 3), "--preprocess x")
    again = InputConvention.from_dict(json.loads(json.dumps(convention.to_dict())))
    assert again == convention
