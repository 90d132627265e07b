import numpy as np
import pytest
from conftest import hand_dense, small_cnn

from idcgen.errors import LayerError, ModelError

SHARED = __import__("pathlib").Path(__file__).resolve().parents[2] / "shared"


def test_load_keras_and_h5_round_trip(tmp_path):
    from idcgen.framework import Network, load_model

    model = small_cnn()
    x = np.random.default_rng(0).random((5, 12, 12, 1), dtype=np.float32)
    for name in ("m.keras", "m.h5"):
        model.save(tmp_path / name)
        loaded = Network(load_model(tmp_path / name))
        np.testing.assert_allclose(loaded.forward(x)[0], model(x).numpy(), atol=1e-6)
        assert loaded.fingerprint() == Network(model).fingerprint()


@pytest.mark.skipif(
    not (SHARED / "models/deepconcolic/mnist_tiny.h5").exists(),
    reason="needs DeepConcolic's mnist_tiny.h5 in ../shared/models/deepconcolic (the development "
    "workspace's third-party models; not shipped)",
)
def test_load_keras2_h5_with_separate_softmax():
    from idcgen.framework import Network, load_model

    net = Network(load_model(SHARED / "models/deepconcolic/mnist_tiny.h5"))
    assert net.logits_layer == "dense_1"
    assert net.default_layer() == "activation_1"  # post-ReLU Dense32: the layer before the logits


def test_missing_and_corrupt_model_files(tmp_path):
    from idcgen.framework import load_model

    with pytest.raises(ModelError, match="model file not found"):
        load_model(tmp_path / "nope.h5")
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"this is not an HDF5 file")
    with pytest.raises(ModelError, match=r"bad.h5 is not a Keras model file, or is damaged: .* not \(cut short"):
        load_model(bad)
    with pytest.raises(ModelError, match="is a folder"):
        load_model(tmp_path)


def test_layers_info_and_default_layer():
    from idcgen.framework import Network

    net = Network(small_cnn())
    info = {i.name: i for i in net.layers_info()}
    assert info["conv2"].neurons == 6 and info["conv2"].output_shape == (None, 3, 3, 6)
    assert info["fc"].neurons == 16
    assert net.logits_layer == "before_softmax"
    assert net.default_layer() == "fc"  # dropout skipped
    assert Network(hand_dense(False)).logits_layer == "logits"


def test_unknown_layer_lists_valid_names():
    from idcgen.framework import Network

    net = Network(small_cnn())
    with pytest.raises(LayerError, match=r"unknown layer 'fc9'; valid layers: conv1, pool1, conv2"):
        net.layer("fc9")
    with pytest.raises(LayerError, match="is the logits or after them"):
        net.check_subject_layer("predictions")


def test_logits_model_gives_pre_softmax_values():
    from idcgen.framework import Network

    x = np.array([[1.0, 2.0]], np.float32)
    for as_layer in (True, False):
        logits = Network(hand_dense(as_layer)).logits_model()(x).numpy()
        np.testing.assert_allclose(logits, [[5.0, -3.0]], atol=1e-6)


def test_non_softmax_non_linear_output_rejected():
    import keras

    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(2, activation="sigmoid")(inputs))
    from idcgen.framework import Network

    with pytest.raises(ModelError, match="cannot find the logits"):
        Network(model)


def test_fingerprint_changes_with_weights():
    from idcgen.framework import Network

    a, b = hand_dense(), hand_dense(b2=(0.5, 0.0))
    assert Network(a).fingerprint() != Network(b).fingerprint()
    assert Network(a).fingerprint() == Network(hand_dense()).fingerprint()


def test_forward_taps_channels_as_spatial_mean():
    import keras

    from idcgen.framework import Network

    model = small_cnn()
    net = Network(model, batch_size=4)
    x = np.random.default_rng(0).random((10, 12, 12, 1), dtype=np.float32)
    probs, (conv2, fc) = net.forward(x, ("conv2", "fc"))
    raw = keras.Model(model.inputs[0], model.get_layer("conv2").output)(x).numpy()
    np.testing.assert_allclose(conv2, raw.mean(axis=(1, 2)), atol=1e-6)
    assert probs.shape == (10, 10) and fc.shape == (10, 16)


def test_zoo_models_are_seeded_without_touching_the_global_generator():
    import numpy as np

    from idcgen.framework.keras_zoo import lenet5

    np.random.seed(7)
    expected = np.random.rand()
    np.random.seed(7)
    a, b, c = lenet5(random_state=0), lenet5(random_state=0), lenet5(random_state=1)
    assert np.random.rand() == expected  # building a model left numpy's global generator alone
    for wa, wb, wc in zip(a.get_weights(), b.get_weights(), c.get_weights()):
        assert np.array_equal(wa, wb)
        assert wa.ndim == 1 or not np.array_equal(wa, wc)  # kernels differ with the seed; biases start at 0
    kernels = [w for w in a.get_weights() if w.ndim > 1]
    assert len({float(w.ravel()[0]) for w in kernels}) == len(kernels)  # each layer has its own draw


def test_output_that_is_not_a_head_is_refused():
    # a model cut after its Flatten would be taken as 196 "classes"; a Dense(1) regression head stays usable
    import keras

    from idcgen.framework import Network

    inputs = keras.Input((28, 28, 1))
    x = keras.layers.Conv2D(4, 3, activation="relu", name="conv")(inputs)
    x = keras.layers.MaxPooling2D(4, name="pool")(x)
    flat = keras.layers.Flatten(name="flatten")(x)
    with pytest.raises(
        ModelError,
        match=r"^the model's output comes from Flatten 'flatten' \(144 values, shape "
        r"\(None, 144\)\), not a classifier or regression head",
    ):
        Network(keras.Model(inputs, flat))
    with pytest.raises(ModelError, match=r"output comes from MaxPooling2D 'pool' \(144 values"):
        Network(keras.Model(inputs, x))
    dense_on_maps = keras.layers.Dense(3, name="per_pixel")(x)  # (None, 6, 6, 3): not one score per class
    with pytest.raises(ModelError, match=r"logits come from Dense 'per_pixel' \(108 values, shape \(None, 6, 6, 3\)\)"):
        Network(keras.Model(inputs, dense_on_maps))
    regression = Network(keras.Model(inputs, keras.layers.Dense(1, name="steer")(flat)))
    assert regression.logits_layer == "steer" and regression.n_classes == 1
    softmax_on_pooling = keras.layers.Softmax(name="sm")(keras.layers.GlobalAveragePooling2D(name="gap")(x))
    assert Network(keras.Model(inputs, softmax_on_pooling)).n_classes == 4  # a softmax makes it a classifier
