"""Tests for idcgen.data: every spec form on tiny files written here, every error message."""

import gzip
import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from idcgen import data
from idcgen.data import Dataset, check_labels, embedded_mnist, fit_to_model, load_inputs, named
from idcgen.errors import InputError, ParameterError


def write_idx(path: Path, array: np.ndarray, compress: bool = True) -> Path:
    """IDX: two zero bytes, type code 0x08 (uint8), number of dims, big-endian uint32 dims, data."""
    array = np.asarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    payload = header + array.tobytes()
    path.write_bytes(gzip.compress(payload) if compress else payload)
    return path


def write_png(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(array, dtype=np.uint8)).save(path)


@pytest.fixture
def digits():
    """Six 4x5 uint8 images whose pixels all differ, and labels 0..2."""
    x = (np.arange(6 * 4 * 5).reshape(6, 4, 5) * 2).astype(np.uint8)
    return x, np.array([0, 1, 2, 0, 1, 2], dtype=np.uint8)


# --- image folders -----------------------------------------------------------------------------------


def test_class_subfolders_give_sorted_labels(tmp_path, digits):
    x, _ = digits
    write_png(tmp_path / "dog" / "b.png", x[0])
    write_png(tmp_path / "dog" / "a.PNG", x[1])
    write_png(tmp_path / "cat" / "z.png", x[2])
    (tmp_path / "empty").mkdir()  # still a class, as in keras
    (tmp_path / ".hidden").mkdir()
    ds = load_inputs(tmp_path)
    assert ds.class_names == ("cat", "dog", "empty")
    assert ds.y.tolist() == [0, 1, 1] and ds.y.dtype == np.int64
    # cat/z, then dog/a.PNG before dog/b (name order)
    np.testing.assert_array_equal(ds.x, np.stack([x[2], x[1], x[0]]) / np.float32(255))
    assert ds.x.dtype == np.float32 and ds.x.shape == (3, 4, 5)
    assert ds.scaling == "uint8/255 -> [0, 1]"
    assert "3 classes" in ds.source
    assert load_inputs(tmp_path, limit=2).y.tolist() == [0, 1]


def test_flat_folder_has_no_labels_and_channels_convert(tmp_path):
    rgb = np.zeros((3, 2, 3), dtype=np.uint8)
    rgb[..., 0] = 255
    write_png(tmp_path / "1.png", rgb)
    write_png(tmp_path / "2.png", rgb)
    (tmp_path / "notes.txt").write_text("not an image")
    ds = load_inputs(tmp_path)
    assert ds.y is None and ds.class_names is None
    assert ds.x.shape == (2, 3, 2, 3)
    assert ds.x[0, 0, 0].tolist() == [1.0, 0.0, 0.0]
    gray = load_inputs(tmp_path, channels=1)
    assert gray.x.shape == (2, 3, 2)
    assert gray.x[0, 0, 0] == np.float32(76 / 255)  # PIL "L": 299/1000 of red, rounded


def test_grayscale_converts_to_rgb(tmp_path, digits):
    write_png(tmp_path / "a.png", digits[0][0])
    ds = load_inputs(tmp_path, channels=3)
    assert ds.x.shape == (1, 4, 5, 3)
    np.testing.assert_array_equal(ds.x[0, ..., 2], digits[0][0] / np.float32(255))


def test_empty_folder(tmp_path):
    with pytest.raises(InputError, match=r"no images \(\.png, \.jpg, \.jpeg, \.bmp, \.tif, \.tiff\) found in"):
        load_inputs(tmp_path)


def test_unreadable_image_is_named(tmp_path):
    (tmp_path / "bad.png").write_bytes(b"this is not a png")
    with pytest.raises(InputError, match=r"cannot read image .*bad\.png"):
        load_inputs(tmp_path)


def test_mixed_sizes_name_file_and_sizes(tmp_path):
    write_png(tmp_path / "a.png", np.zeros((4, 5)))
    write_png(tmp_path / "b.png", np.zeros((6, 5)))
    with pytest.raises(InputError, match=r"a\.png is 5x4 grayscale but .*b\.png is 5x6 grayscale"):
        load_inputs(tmp_path)


def test_images_beside_class_subfolders(tmp_path):
    write_png(tmp_path / "a.png", np.zeros((4, 5)))
    write_png(tmp_path / "cls" / "b.png", np.zeros((4, 5)))
    with pytest.raises(InputError, match="both images and class subfolders"):
        load_inputs(tmp_path)


def test_integer_subfolders_are_those_classes(tmp_path, digits):
    x, _ = digits
    write_png(tmp_path / "7" / "a.png", x[0])
    write_png(tmp_path / "3" / "a.png", x[1])
    write_png(tmp_path / "3" / "b.png", x[2])
    write_png(tmp_path / "10" / "a.png", x[3])  # sorts before "3" as text; still class 10
    ds = load_inputs(tmp_path)
    assert ds.y.tolist() == [10, 3, 3, 7]  # folders in name order: 10, 3, 7
    assert ds.class_names is None
    assert ds.notes == ("labels: 3=3, 7=7, 10=10 (integer folder names)",)
    assert ds.summary()["notes"] == list(ds.notes)


def test_sorted_names_are_said(tmp_path, digits):
    x, _ = digits
    write_png(tmp_path / "dog" / "a.png", x[0])
    write_png(tmp_path / "cat" / "a.png", x[1])
    ds = load_inputs(tmp_path)
    assert ds.y.tolist() == [0, 1] and ds.notes == ("labels: cat=0, dog=1 (sorted folder names)",)


@pytest.mark.parametrize("as_file", [False, True])
def test_class_names_give_the_order(tmp_path, digits, as_file):
    x, _ = digits
    write_png(tmp_path / "imgs" / "dog" / "a.png", x[0])
    write_png(tmp_path / "imgs" / "cat" / "a.png", x[1])
    write_png(tmp_path / "imgs" / "cat" / "b.png", x[2])
    names = "bird, dog,cat"
    if as_file:
        (tmp_path / "names.txt").write_text("bird\ndog\n\ncat\n")
        names = str(tmp_path / "names.txt")
    ds = load_inputs(tmp_path / "imgs", class_names=names)
    assert ds.y.tolist() == [2, 2, 1]  # cat/a, cat/b, dog/a
    assert ds.class_names == ("bird", "dog", "cat")
    assert ds.notes == ("labels: dog=1, cat=2 (class names given)",)
    assert load_inputs(tmp_path / "imgs", class_names=["cat", "dog"]).y.tolist() == [0, 0, 1]


def test_class_names_refusals(tmp_path, digits):
    x, _ = digits
    write_png(tmp_path / "dog" / "a.png", x[0])
    write_png(tmp_path / "cow" / "a.png", x[1])
    with pytest.raises(InputError, match=r"class subfolder .*cow is not among the class names \(cat, dog\)"):
        load_inputs(tmp_path, class_names="cat,dog")
    with pytest.raises(ParameterError, match="class names repeat dog"):
        load_inputs(tmp_path, class_names="dog,cow,dog")
    with pytest.raises(ParameterError, match="class names are empty"):
        load_inputs(tmp_path, class_names=" , ")


def test_mixed_integer_and_named_subfolders_are_refused(tmp_path, digits):
    x, _ = digits
    write_png(tmp_path / "3" / "a.png", x[0])
    write_png(tmp_path / "cat" / "a.png", x[1])
    with pytest.raises(InputError, match=r"mix integers \(3\) and other names \(cat\).*--class-names"):
        load_inputs(tmp_path)
    assert load_inputs(tmp_path, class_names="cat,x,y,3").y.tolist() == [3, 0]


def test_labels_beyond_the_model_are_refused(tmp_path, digits):
    x, y = digits
    write_png(tmp_path / "ints" / "3" / "a.png", x[0])
    write_png(tmp_path / "ints" / "12" / "a.png", x[1])
    assert load_inputs(tmp_path / "ints", n_classes=13).y.tolist() == [12, 3]
    with pytest.raises(
        InputError,
        match=r"class subfolder .*ints/12 has label 12 \(integer folder names\) but the "
        r"model has 10 classes \(0\.\.9\)",
    ):
        load_inputs(tmp_path / "ints", n_classes=10)
    for i, name in enumerate("abc"):
        write_png(tmp_path / "names" / name / "a.png", x[i])
    with pytest.raises(
        InputError, match=r"subfolder .*names/c has label 2 \(sorted folder names\) but the model has 2"
    ):
        load_inputs(tmp_path / "names", n_classes=2)
    np.savez(tmp_path / "d.npz", x=x, y=np.array([0, 1, 2, 0, 5, 2]))
    with pytest.raises(
        InputError, match=r"labels from .*d\.npz\[x,y\] reach 5 \(input 4\) but the model has 3 classes"
    ):
        load_inputs(tmp_path / "d.npz", n_classes=3)
    assert load_inputs(tmp_path / "d.npz", n_classes=1).y.max() == 5  # one output: not a classifier, no check


def test_colour_conversion_is_said(tmp_path, digits):
    rgb = np.zeros((4, 5, 3), dtype=np.uint8)
    rgb[..., 1] = 200
    write_png(tmp_path / "rgb" / "a.png", rgb)
    write_png(tmp_path / "rgb" / "b.png", digits[0][0])  # already grayscale: not converted
    assert load_inputs(tmp_path / "rgb", channels=1).notes == (
        "1 of 2 images converted from colour to grayscale (1 channel wanted)",
    )
    write_png(tmp_path / "gray" / "a.png", digits[0][0])
    assert load_inputs(tmp_path / "gray", channels=3).notes == (
        "1 of 1 images converted from grayscale to RGB (3 channels wanted)",
    )
    assert load_inputs(tmp_path / "gray", channels=1).notes == ()


# --- arrays ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "keys, split, expected_source",
    [
        (("x", "y"), None, "[x,y]"),
        (("images", "labels"), None, "[images,labels]"),
        (("x_test", "y_test"), None, "[x_test,y_test] (no split given: used test)"),
        (("x_train", "y_train"), None, "[x_train,y_train] (no split given: used train)"),
        (("x_train", "y_train"), "train", "[x_train,y_train]"),
    ],
    ids=repr,
)
def test_npz_key_layouts(tmp_path, digits, keys, split, expected_source):
    x, y = digits
    np.savez(tmp_path / "d.npz", **{keys[0]: x, keys[1]: y})
    ds = load_inputs(tmp_path / "d.npz", split=split)
    np.testing.assert_array_equal(ds.x, x / np.float32(255))
    assert ds.y.tolist() == y.tolist() and ds.y.dtype == np.int64
    assert ds.source == str(tmp_path / "d.npz") + expected_source


def test_npz_keras_layout_splits(tmp_path, digits):
    x, y = digits
    np.savez(tmp_path / "d.npz", x_train=x[:4], y_train=y[:4], x_test=x[4:], y_test=y[4:])
    assert len(load_inputs(tmp_path / "d.npz")) == 2  # test preferred
    assert len(load_inputs(tmp_path / "d.npz", split="train")) == 4
    assert load_inputs(tmp_path / "d.npz", split="all").y.tolist() == y.tolist()
    # the README's form: the part after a colon, as for a named dataset, and it wins over `split`
    assert len(load_inputs(f"{tmp_path / 'd.npz'}:train", split="test")) == 4
    assert load_inputs(f"{tmp_path / 'd.npz'}:all").y.tolist() == y.tolist()
    with pytest.raises(InputError, match="no such file"):
        load_inputs(f"{tmp_path / 'd.npz'}:validation")


def test_npz_without_labels(tmp_path, digits):
    np.savez(tmp_path / "d.npz", x=digits[0])
    ds = load_inputs(tmp_path / "d.npz")
    assert ds.y is None and ds.source.endswith("[x]")


def test_npz_unknown_keys(tmp_path, digits):
    np.savez(tmp_path / "d.npz", data=digits[0], target=digits[1])
    with pytest.raises(InputError, match=r"has keys data, target; expected x \(optional y\), x_test/y_test"):
        load_inputs(tmp_path / "d.npz")


def test_npz_missing_split(tmp_path, digits):
    np.savez(tmp_path / "d.npz", x_train=digits[0])
    with pytest.raises(InputError, match="has no x_test"):
        load_inputs(tmp_path / "d.npz", split="test")


def test_split_on_source_without_splits(tmp_path, digits):
    np.save(tmp_path / "d.npy", digits[0])
    with pytest.raises(InputError, match="has no train/test split"):
        load_inputs(tmp_path / "d.npy", split="train")


def test_npy_and_limit(tmp_path, digits):
    np.save(tmp_path / "d.npy", digits[0])
    ds = load_inputs(tmp_path / "d.npy", limit=2)
    assert ds.y is None and ds.x.shape == (2, 4, 5)
    np.testing.assert_array_equal(ds.x, digits[0][:2] / np.float32(255))


# --- IDX ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("compress", [True, False], ids=["gz", "plain"])
def test_idx_round_trip_with_labels_beside(tmp_path, digits, compress):
    x, y = digits
    suffix = ".gz" if compress else ""
    images = write_idx(tmp_path / f"train-images-idx3-ubyte{suffix}", x, compress)
    write_idx(tmp_path / f"train-labels-idx1-ubyte{suffix}", y, compress)
    ds = load_inputs(images, scale="none")
    np.testing.assert_array_equal(ds.x, x.astype(np.float32))
    assert ds.y.tolist() == y.tolist()


def test_idx_without_labels(tmp_path, digits):
    ds = load_inputs(write_idx(tmp_path / "my.idx3.gz", digits[0]))
    assert ds.y is None and ds.x.shape == (6, 4, 5)


def test_idx_folder_splits(tmp_path, digits):
    x, y = digits
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", x[:4])
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", y[:4])
    write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", x[4:])
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", y[4:])
    assert load_inputs(tmp_path).y.tolist() == [1, 2]  # test by default
    assert load_inputs(tmp_path, split="train").y.tolist() == [0, 1, 2, 0]
    assert load_inputs(tmp_path, split="all").y.tolist() == y.tolist()
    assert load_inputs(f"{tmp_path}:train").y.tolist() == [0, 1, 2, 0]


def test_idx_truncated(tmp_path, digits):
    path = write_idx(tmp_path / "x-ubyte", digits[0], compress=False)
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(InputError, match=r"truncated or padded: header says shape \(6, 4, 5\)"):
        load_inputs(path)


def test_idx_bad_magic(tmp_path):
    (tmp_path / "x-ubyte").write_bytes(b"\x01\x02\x03\x04rest")
    with pytest.raises(InputError, match="is not an IDX file"):
        load_inputs(tmp_path / "x-ubyte")


# --- named datasets ----------------------------------------------------------------------------------


def test_embedded_mnist_test_split():
    ds = load_inputs("embedded-mnist")
    assert ds.source == "embedded-mnist:test"
    assert ds.x.shape == (1000, 28, 28) and ds.x.dtype == np.float32
    assert 0.0 == ds.x.min() and ds.x.max() == 1.0
    assert np.bincount(ds.y).tolist() == [100] * 10


def test_embedded_mnist_splits_are_disjoint_and_deterministic():
    x_all, y_all = embedded_mnist("all")
    x_train, y_train = embedded_mnist("train")
    x_test, _ = embedded_mnist("test")
    assert x_all.dtype == np.uint8 and x_all.shape == (5000, 28, 28) and y_all.dtype == np.int64
    assert np.bincount(y_train).tolist() == [400] * 10
    np.testing.assert_array_equal(x_train, embedded_mnist("train")[0])
    # per class the first 400 in file order go to train, the rest to test
    zeros = np.flatnonzero(y_all == 0)
    np.testing.assert_array_equal(x_train[y_train == 0], x_all[zeros[:400]])
    # together, train and test are the 5,000 images again
    assert sorted(image.tobytes() for image in np.concatenate([x_train, x_test])) == sorted(
        image.tobytes() for image in x_all
    )


def test_named_split_after_colon_wins():
    ds = load_inputs("mnist-embedded:train", split="test", limit=5)
    assert ds.source == "embedded-mnist:train" and len(ds) == 5


def test_fashion_mnist():
    if not named.FASHION_MNIST_DIR.is_dir():
        pytest.skip(
            f"Debian's dataset-fashion-mnist is not installed ({named.FASHION_MNIST_DIR} is missing): "
            "apt-get install dataset-fashion-mnist"
        )
    ds = load_inputs("fashion-mnist:test", limit=10)
    assert ds.x.shape == (10, 28, 28) and ds.y.shape == (10,)


def test_fashion_mnist_missing(monkeypatch, tmp_path):
    monkeypatch.setattr(named, "FASHION_MNIST_DIR", tmp_path / "nowhere")
    with pytest.raises(InputError, match="apt-get install dataset-fashion-mnist"):
        load_inputs("fashion-mnist")


def test_mnist_from_env_var(monkeypatch, tmp_path, digits):
    x, y = digits
    np.savez(tmp_path / "m.npz", x_train=x[:4], y_train=y[:4], x_test=x[4:], y_test=y[4:])
    monkeypatch.setenv("IDCGEN_MNIST", str(tmp_path / "m.npz"))
    ds = load_inputs("mnist:train")
    assert len(ds) == 4 and ds.source == f"mnist:train from {tmp_path / 'm.npz'}"


def test_mnist_env_var_missing_file(monkeypatch, tmp_path):
    monkeypatch.setenv("IDCGEN_MNIST", str(tmp_path / "none.npz"))
    with pytest.raises(InputError, match="IDCGEN_MNIST points to .*none.npz, which does not exist"):
        load_inputs("mnist")


def test_mnist_not_found(monkeypatch, tmp_path):
    monkeypatch.delenv("IDCGEN_MNIST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(named, "__file__", str(tmp_path / "repo" / "idcgen" / "data" / "named.py"))
    with pytest.raises(InputError, match=r"mnist not found; searched .*mnist\.npz\. Set IDCGEN_MNIST"):
        load_inputs("mnist")


def test_mnist_local_copy(monkeypatch):
    shared = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mnist"
    if shared.is_dir() and "IDCGEN_MNIST" not in os.environ:  # the development workspace's copy
        monkeypatch.setenv("IDCGEN_MNIST", str(shared))
    try:
        ds = load_inputs("mnist", limit=3)
    except InputError:
        pytest.skip(
            "no local copy of MNIST: set IDCGEN_MNIST to a folder holding it (the development "
            "workspace has ../shared/data/mnist); idcgen downloads nothing"
        )
    assert ds.x.shape == (3, 28, 28) and ds.y.shape == (3,)


def test_missing_path_or_name():
    # the built-in datasets first (a recipe's kit, imported by other tests in this process, adds its own after)
    known = r"\(known datasets: embedded-mnist, mnist, fashion-mnist, cifar10[,)]"
    with pytest.raises(InputError, match=r"no such file, folder or dataset: nope\.npz " + known):
        load_inputs("nope.npz")


def test_bad_split_after_colon():
    with pytest.raises(InputError, match="unknown split 'val'"):
        load_inputs("mnist:val")


@pytest.mark.parametrize("kwargs", [{"scale": "auto255"}, {"split": "val"}, {"limit": 0}, {"channels": 2}], ids=repr)
def test_bad_parameters(tmp_path, kwargs):
    with pytest.raises(ParameterError, match=f"The '{next(iter(kwargs))}' parameter must be"):
        load_inputs(tmp_path, **kwargs)


# --- scaling -----------------------------------------------------------------------------------------


def test_scaling_recorded(tmp_path):
    floats = np.array([[[0.0, 0.5], [0.25, 1.0]]], dtype=np.float64)
    np.save(tmp_path / "f.npy", floats)
    ds = load_inputs(tmp_path / "f.npy")
    assert ds.scaling == "none (float input already in [0, 1])"
    np.testing.assert_array_equal(ds.x, floats.astype(np.float32))
    np.save(tmp_path / "g.npy", floats * 255)
    assert load_inputs(tmp_path / "g.npy", scale="255").x.tolist() == floats.tolist()
    assert load_inputs(tmp_path / "g.npy", scale="255").scaling == "float64/255 -> [0, 1] (scale='255')"
    kept = load_inputs(tmp_path / "g.npy", scale="none")
    assert kept.x.max() == 255.0 and kept.scaling.startswith("none (scale='none'")


@pytest.mark.parametrize(
    "bad, message",
    [
        (np.nan, r"1 NaN and 0 Inf values; the first is in input 1 at index \(1, 0, 1\)"),
        (np.inf, r"0 NaN and 1 Inf values; the first is in input 1"),
    ],
    ids=["nan", "inf"],
)
def test_nan_and_inf(tmp_path, bad, message):
    x = np.zeros((2, 2, 2))
    x[1, 0, 1] = bad
    np.save(tmp_path / "x.npy", x)
    for scale in ("auto", "255", "none"):
        with pytest.raises(InputError, match=message):
            load_inputs(tmp_path / "x.npy", scale=scale)


def test_float_out_of_range_with_auto(tmp_path):
    np.save(tmp_path / "x.npy", np.array([[[0.0, 2.5]]]))
    with pytest.raises(InputError, match=r"float inputs lie in \[0, 2.5\], outside \[0, 1\]; pass scale='255'"):
        load_inputs(tmp_path / "x.npy")


def test_out_of_range_after_255(tmp_path):
    np.save(tmp_path / "x.npy", np.array([[[0, 510]]], dtype=np.int32))
    with pytest.raises(InputError, match=r"inputs lie in \[0, 2\] after dividing by 255"):
        load_inputs(tmp_path / "x.npy", scale="255")
    with pytest.raises(InputError, match=r"integer inputs range over \[0, 510\], beyond 0..255"):
        load_inputs(tmp_path / "x.npy")


def test_label_count_mismatch_in_file(tmp_path, digits):
    np.savez(tmp_path / "d.npz", x=digits[0], y=digits[1][:5])
    with pytest.raises(InputError, match="got 5 labels for 6 inputs"):
        load_inputs(tmp_path / "d.npz")


# --- Dataset -----------------------------------------------------------------------------------------


def test_subset_and_summary():
    ds = Dataset(
        x=np.array([[[0.0]], [[0.5]], [[1.0]]], dtype=np.float32), y=np.array([2, 0, 2]), source="s", scaling="none"
    )
    sub = ds.subset([2, 0])
    assert sub.y.tolist() == [2, 2] and sub.x[:, 0, 0].tolist() == [1.0, 0.0] and sub.source == "s"
    assert len(ds.subset(1)) == 1 and len(ds.subset(ds.y == 2)) == 2
    summary = ds.summary()
    assert json.loads(json.dumps(summary)) == summary
    assert summary == {
        "source": "s",
        "n": 3,
        "shape": [1, 1],
        "dtype": "float32",
        "scaling": "none",
        "min": 0.0,
        "max": 1.0,
        "n_labels": 3,
        "class_counts": {"0": 1, "2": 2},
        "class_names": None,
        "notes": [],
    }


# --- check_labels ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "y, expected",
    [
        ([1, 0, 3], [1, 0, 3]),
        (np.array([1.0, 0.0, 3.0]), [1, 0, 3]),
        (np.array([[1], [0], [3]]), [1, 0, 3]),
        (np.eye(4)[[1, 0, 3]], [1, 0, 3]),
    ],
    ids=["ints", "whole floats", "column", "one-hot"],
)
def test_check_labels_accepts(y, expected):
    out = check_labels(np.zeros((3, 2)), y)
    assert out.tolist() == expected and out.dtype == np.int64


@pytest.mark.parametrize(
    "y, message",
    [
        ([0, 1], "got 2 labels for 3 inputs"),
        ([0, -1, 2], "labels must be non-negative class indices; got -1 at index 1"),
        ([0.0, 0.5, 1.0], "labels must be whole numbers; got 0.5 at index 1"),
        (["a", "b", "c"], "labels must be integers; got dtype <U1"),
        (np.zeros((3, 2, 2)), r"labels must be 1-D \(n,\) or one-hot \(n, K\); got shape \(3, 2, 2\)"),
    ],
    ids=["count", "negative", "fraction", "strings", "3-D"],
)
def test_check_labels_refuses(y, message):
    with pytest.raises(InputError, match=message):
        check_labels(np.zeros((3, 2)), y)


# --- fit_to_model ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x_shape, input_shape, out_shape",
    [
        ((2, 4, 5), (4, 5, 1), (2, 4, 5, 1)),
        ((2, 4, 5, 3), (4, 5, 3), (2, 4, 5, 3)),
        ((2, 4, 5), (None, None, 1), (2, 4, 5, 1)),
        ((2, 20), (4, 5, 1), (2, 4, 5, 1)),
        ((2, 4, 5), (20,), (2, 20)),
        ((2, 4, 5, 1), (4, 5), (2, 4, 5)),
    ],
    ids=repr,
)
def test_fit_to_model_shapes(x_shape, input_shape, out_shape):
    x = np.arange(np.prod(x_shape), dtype=np.uint8).reshape(x_shape)
    out = fit_to_model(x, input_shape)
    assert out.shape == out_shape and out.dtype == np.float32
    np.testing.assert_array_equal(out.ravel(), x.ravel())


def test_fit_to_model_takes_dataset():
    ds = Dataset(x=np.zeros((2, 3, 3), np.float32), y=None, source="s", scaling="none")
    assert fit_to_model(ds, (3, 3, 1)).shape == (2, 3, 3, 1)


@pytest.mark.parametrize(
    "x_shape, input_shape, message",
    [
        (
            (2, 28, 28, 3),
            (28, 28, 1),
            r"inputs have shape \(28, 28, 3\) per item but the model expects \(28, 28, 1\): "
            r"channel count differs \(3 vs 1\)",
        ),
        ((2, 28, 28), (28, 28, 3), r"channel count differs \(1 vs 3\)"),
        ((2, 32, 32, 1), (28, 28, 1), r"spatial size differs \(32x32 vs 28x28\)"),
        ((2, 21), (4, 5, 1), r"21 values per item cannot be reshaped to \(4, 5, 1\)"),
        ((0, 28, 28), (28, 28, 1), r"no inputs to feed the model: got an array of shape \(0, 28, 28\)"),
    ],
    ids=["channels", "gray for rgb", "spatial", "flat size", "empty"],
)
def test_fit_to_model_refuses(x_shape, input_shape, message):
    with pytest.raises(InputError, match=message):
        fit_to_model(np.zeros(x_shape, np.float32), input_shape)


def test_data_does_not_import_tensorflow():
    import ast

    files = sorted(Path(data.__file__).parent.glob("*.py"))  # every module of the package
    assert {f.name for f in files} >= {"__init__.py", "readers.py", "named.py", "fitting.py", "loading.py"}
    imported = set()
    for tree in (ast.parse(f.read_text()) for f in files):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
    assert not imported & {"tensorflow", "keras"}


def test_a_registered_dataset_is_loaded_by_name(digits):
    from idcgen.data import register_dataset

    x, y = digits

    @register_dataset("tiny-digits", aliases=("tiny",))
    def tiny(split):
        return (x[:4], y[:4], "tiny:train") if split == "train" else (x[4:], y[4:], f"tiny:{split}")

    try:
        assert load_inputs("TINY:train").source == "tiny:train" and len(load_inputs("tiny-digits")) == 2
        known = r"known datasets: embedded-mnist, mnist, fashion-mnist, cifar10, (.+, )?tiny-digits"
        with pytest.raises(InputError, match=known):
            load_inputs("no-such-set")
    finally:  # registered for this test only
        del named.DATASETS["tiny-digits"], named.ALIASES["tiny"]


def test_a_registered_reader_reads_its_files(monkeypatch, tmp_path, digits):
    from idcgen.data import readers

    monkeypatch.setattr(readers, "READERS", list(readers.READERS))
    x, y = digits

    @readers.register_reader("raw bytes", lambda path: path.suffix == ".raw")
    def raw(path, options):
        return np.frombuffer(path.read_bytes(), np.uint8).reshape(-1, 4, 5), None, f"{path} (raw)", None, ()

    (tmp_path / "d.raw").write_bytes(x.tobytes())
    ds = load_inputs(tmp_path / "d.raw")
    assert ds.source.endswith("(raw)") and ds.x.shape == (6, 4, 5) and ds.y is None
    with pytest.raises(InputError, match="has no train/test split"):  # a reader without splits refuses one
        load_inputs(tmp_path / "d.raw", split="train")
    assert not data.is_image_folder(tmp_path / "d.raw") and data.is_image_folder(tmp_path)


def test_cifar10_reads_the_python_batches_and_the_jpeg_layout(tmp_path, monkeypatch):
    import io
    import pickle
    import zipfile

    from PIL import Image

    from idcgen.data.named import CIFAR10_CLASSES

    rng = np.random.default_rng(0)
    # the official python version: 5 training batches and a test batch of (n, 3072) rows, channels first
    batches = tmp_path / "batches"
    batches.mkdir()
    images = rng.integers(0, 256, (12, 32, 32, 3), dtype=np.uint8)
    for i, name in enumerate([f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]):
        part = images[2 * i : 2 * i + 2]
        rows = part.transpose(0, 3, 1, 2).reshape(2, -1)
        (batches / name).write_bytes(pickle.dumps({b"data": rows, b"labels": [i, 9 - i]}))
    monkeypatch.setenv("IDCGEN_CIFAR10", str(batches))
    train, test = load_inputs("cifar10:train", scale="none"), load_inputs("cifar10:test", scale="none")
    assert train.x.shape == (10, 32, 32, 3) and test.x.shape == (2, 32, 32, 3)
    np.testing.assert_array_equal(train.x, images[:10])
    np.testing.assert_array_equal(test.x, images[10:])
    assert train.y.tolist() == [0, 9, 1, 8, 2, 7, 3, 6, 4, 5] and test.y.tolist() == [5, 4]
    assert load_inputs("cifar-10:all", scale="none").x.shape == (12, 32, 32, 3)

    # the JPEG layout: a zip of train/<class>/*.jpg and an .npz of the test images, each put in one fixed order
    jpeg = tmp_path / "jpeg"
    jpeg.mkdir()
    flat = np.full((20, 32, 32, 3), 0, np.uint8)
    for i in range(20):
        flat[i] = 10 * i  # one flat grey level per image: JPEG keeps it exactly
    with zipfile.ZipFile(jpeg / "cifar10_train_jpg.zip", "w") as archive:
        for i in range(20):
            buffer = io.BytesIO()
            Image.fromarray(flat[i]).save(buffer, format="JPEG", quality=95)
            archive.writestr(f"train/{CIFAR10_CLASSES[i % 10]}/{i:04d}.jpg", buffer.getvalue())
    np.savez(jpeg / "cifar10_test.npz", x=flat[:6], y=np.arange(6))
    np.savez(jpeg / "other_test_first100.npz", x_test=flat[:1], y_test=np.arange(1))  # not the test split
    monkeypatch.setenv("IDCGEN_CIFAR10", str(jpeg))
    train = load_inputs("cifar10:train", scale="none")
    grey = train.x[:, 0, 0, 0].astype(int)
    assert sorted(np.rint(grey / 10).astype(int).tolist()) == list(range(20))  # every image, once
    assert grey.tolist() != sorted(grey.tolist())  # in a mixed order
    assert (train.y == np.rint(grey / 10).astype(int) % 10).all()  # labels: the class folders
    assert train.y.tolist() == load_inputs("cifar10:train", scale="none").y.tolist()  # the same order each time
    test = load_inputs("cifar10:test", scale="none")
    assert sorted(test.y.tolist()) == list(range(6)) and (test.x[:, 0, 0, 0] == 10 * test.y).all()

    monkeypatch.setenv("IDCGEN_CIFAR10", str(tmp_path / "nowhere"))
    with pytest.raises(InputError, match="IDCGEN_CIFAR10 points to .*nowhere, which is not a folder"):
        load_inputs("cifar10:test")
