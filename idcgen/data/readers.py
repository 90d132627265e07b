"""File readers: the formats `load_inputs` reads (npz, npy, IDX files and folders, image folders), each
registered with the paths it takes. A new format is one `register_reader` (docs/design.md, "How to add a
data source")."""

from __future__ import annotations

import gzip
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

from idcgen.errors import InputError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
SPLITS = ("train", "test", "all")
IDX_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
# IDX type codes (the third header byte); multi-byte values are big-endian.
_IDX_DTYPES = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_GRAY_MODES = ("1", "L", "LA", "I", "I;16", "F")  # PIL modes kept as one channel when channels is None
# 16-bit greyscale: PIL's convert("L") clips these at 255, so every non-zero pixel read as white
_DEEP_MODES = ("I", "I;16", "I;16B", "I;16L", "I;16N")


# --- the registry ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadOptions:
    """What `load_inputs` asks of a reader; each reader takes the options that apply to its format."""

    split: str | None = None
    channels: int | None = None
    limit: int | None = None
    resize: tuple[int, int] | None = None
    class_names: tuple[str, ...] | None = None
    n_classes: int | None = None
    labels: object = None
    crop: tuple[int, int, int, int] | None = None


@dataclass(frozen=True)
class Reader:
    """One file format: the paths it takes, and ``read(path, options) -> (x, y, source, class_names, notes)``."""

    kind: str
    matches: Callable[[Path], bool]
    read: Callable[[Path, ReadOptions], tuple]
    splits: bool = False  # it has train/test parts; the other formats refuse a split
    images: bool = False  # resize, crop and a labels file apply to it


#: the readers, tried in order: the first whose ``matches`` takes an existing path reads it
READERS: list[Reader] = []


def register_reader(kind: str, matches: Callable[[Path], bool], *, splits: bool = False, images: bool = False):
    """Decorator registering ``read(path, options)`` for the existing paths ``matches`` takes, after the
    readers registered before it."""

    def register(read):
        READERS.append(Reader(kind, matches, read, splits, images))
        return read

    return register


def reader_for(path: Path) -> Reader | None:
    """The reader of an existing file or folder, or None."""
    return next((r for r in READERS if r.matches(path)), None)


def read_path(path: Path, options: ReadOptions):
    """(x, y, source, class_names, notes) from an existing file or folder."""
    reader = reader_for(path)
    if reader is None or not reader.splits:
        no_split(options.split, path)
    if reader is None:
        raise InputError(
            f"unsupported file type: {path}; expected a folder of images, .npz, .npy or an IDX file (*-ubyte.gz)"
        )
    return reader.read(path, options)


def is_image_folder(spec) -> bool:
    """Whether ``spec`` names an existing folder that an image reader takes (resize, crop and labels apply)."""
    path = Path(os.fspath(spec)).expanduser() if isinstance(spec, (str, os.PathLike)) else None
    if path is None or not path.exists():
        return False
    reader = reader_for(path)
    return reader is not None and reader.images


# --- splits ------------------------------------------------------------------------------------------


def split_parts(load_one, split: str):
    """Load one split, or "all" as train followed by test."""
    if split != "all":
        return load_one(split)
    (x1, y1, s1), (x2, y2, s2) = load_one("train"), load_one("test")
    y = None if y1 is None or y2 is None else np.concatenate([y1, y2])
    return np.concatenate([x1, x2]), y, f"{s1} + {s2}"


def no_split(split, path):
    """InputError for a split asked of a source that has none."""
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
        where = f"{path}{'' if key is None else f'[{key}]'}"
        if "allow_pickle" in str(err):  # numpy's advice (allow_pickle=True) would run code from the file
            raise InputError(
                f"cannot read {where}: it holds Python objects (text or mixed values, stored pickled), not "
                "numbers; save the inputs as a numeric array (e.g. np.asarray(x, dtype=np.float32))"
            ) from err
        raise InputError(f"cannot read {where}: {err}") from err


def load_npz(path: Path, split):
    """(x, y, source) of a .npz: ``x``/``y``, the keras ``x_test``/``x_train`` layout (``split`` chooses), or
    ``images``/``labels``."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            keys = list(archive.files)
    except (OSError, ValueError, EOFError) as err:
        raise InputError(f"cannot read {path}: {err}") from err
    note = ""
    if "x" in keys or "images" in keys:
        x_key, y_key = ("x", "y") if "x" in keys else ("images", "labels")
        no_split(split, path)
    elif "x_test" in keys or "x_train" in keys:
        if split == "all":
            return split_parts(lambda s: load_npz(path, s), "all")
        part = split or ("test" if "x_test" in keys else "train")
        if f"x_{part}" not in keys:
            raise InputError(f"{path} has no x_{part} (keys found: {', '.join(keys)})")
        note = "" if split else f" (no split given: used {part})"
        x_key, y_key = f"x_{part}", f"y_{part}"
    else:
        raise InputError(
            f"{path} has keys {', '.join(keys) or '(none)'}; expected x (optional y), "
            "x_test/y_test and x_train/y_train, or images (optional labels)"
        )
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
        raise InputError(
            f"IDX file {path} is truncated or padded: header says shape {shape} "
            f"({expected} bytes), file holds {len(data)} bytes"
        )
    return np.frombuffer(data, dtype=dtype, offset=offset).reshape(shape).astype(dtype.newbyteorder("="))


def _load_idx_images(path: Path):
    x = _read_idx(path)
    if x.ndim < 2:
        raise InputError(f"{path} holds a 1-D array of shape {x.shape} (a labels file?); expected images (n, h, w)")
    label_path = path.with_name(path.name.replace("images-idx3", "labels-idx1"))
    if label_path == path or not label_path.is_file():
        return x, None, str(path)
    return x, _read_idx(label_path), f"{path} + {label_path.name}"


def idx_folder_files(folder: Path) -> dict[str, tuple[Path, Path]]:
    """The split -> (images, labels) paths of the MNIST-style IDX files in `folder` (gzipped or not)."""
    found = {}
    for split, (images, labels) in IDX_FILES.items():
        for suffix in (".gz", ""):
            if (folder / (images.removesuffix(".gz") + suffix)).is_file():
                found[split] = (
                    folder / (images.removesuffix(".gz") + suffix),
                    folder / (labels.removesuffix(".gz") + suffix),
                )
                break
    return found


def load_idx_folder(folder: Path, split: str):
    """(x, y, source) of one split of a folder of MNIST-style IDX files."""
    files = idx_folder_files(folder)
    if split not in files:
        raise InputError(f"{folder} has no {split} images: expected {IDX_FILES[split][0]} (with or without .gz)")
    x, y, _ = _load_idx_images(files[split][0])
    return x, y, f"{folder}[{files[split][0].name}{', ' + files[split][1].name if y is not None else ''}]"


# --- image folders -----------------------------------------------------------------------------------


def _image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def image_names(folder) -> list[str]:
    """The names of an image folder's inputs in the order they are read: file names, or ``class/name`` for
    class subfolders."""
    folder = Path(folder).expanduser()
    direct = _image_files(folder)
    if direct:
        return [p.name for p in direct]
    subfolders = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    return [f"{d.name}/{p.name}" for d in subfolders for p in _image_files(d)]


def _folder_labels(folder: Path, names: list[str], class_names, n_classes):
    """(label per subfolder name, class names by label or None, the line saying the mapping)."""
    integer = [n for n in names if re.fullmatch(r"\d+", n)]
    if class_names is not None:
        index = {n: i for i, n in enumerate(class_names)}
        unknown = [n for n in names if n not in index]
        if unknown:
            raise InputError(
                f"class subfolder {folder / unknown[0]} is not among the class names "
                f"({', '.join(class_names)}); add its name or remove the folder"
            )
        labels, by_label, how = {n: index[n] for n in names}, tuple(class_names), "class names given"
    elif integer and len(integer) == len(names):
        labels, by_label, how = {n: int(n) for n in names}, None, "integer folder names"
    elif integer:
        other = [n for n in names if n not in integer]
        raise InputError(
            f"class subfolders of {folder} mix integers ({integer[0]}) and other names ({other[0]}); "
            "name every folder by its class index, or give the class names in label order "
            "(--class-names)"
        )
    else:
        labels, by_label, how = {n: i for i, n in enumerate(names)}, tuple(names), "sorted folder names"
    if n_classes is not None and n_classes >= 2:
        beyond = [n for n in names if labels[n] >= n_classes]
        if beyond:
            raise InputError(
                f"class subfolder {folder / beyond[0]} has label {labels[beyond[0]]} ({how}) but the "
                f"model has {n_classes} classes (0..{n_classes - 1}); name folders by class index "
                "or give the class names in label order (--class-names)"
            )
    shown = ", ".join(f"{n}={labels[n]}" for n in sorted(names, key=lambda n: (labels[n], n)))
    return labels, by_label, f"labels: {shown} ({how})"


def _load_image_folder(
    folder: Path, channels, limit, resize=None, class_names=None, n_classes=None, labels=None, crop=None
):
    direct = _image_files(folder)
    subfolders = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    per_class = [_image_files(d) for d in subfolders]
    if direct and any(per_class):
        raise InputError(
            f"{folder} holds both images and class subfolders with images; "
            "move the images into class subfolders or point at a folder with one kind"
        )
    notes = []
    label_file, labels = labels, None
    if label_file is not None and any(per_class):
        raise InputError(
            f"{folder} has class subfolders, which give the labels; --labels takes a folder with the "
            "images directly in it"
        )
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
    deep = sum(image.dtype == np.uint16 for image in images)
    if deep:  # one depth for the stack: 8-bit levels v as 16-bit v * 257 (65535 / 255), exactly
        images = [image if image.dtype == np.uint16 else image.astype(np.uint16) * 257 for image in images]
        notes.append(f"{deep} of {len(files)} images are 16-bit: read at their depth (0..65535)")
    converted = sum(changed for _, changed, _ in read)
    resized = sum(sized for _, _, sized in read)
    if resized:
        notes.append(
            f"{resized} of {len(files)} images resized to {resize[0]}x{resize[1]} (HxW, PIL bilinear"
            + (f", after cropping by {crop}" if crop else "")
            + "); --resize HxW chooses the size"
        )
    if converted:
        kind = ("colour", "grayscale") if channels == 1 else ("grayscale", "RGB")
        notes.append(
            f"{converted} of {len(files)} images converted from {kind[0]} to {kind[1]} "
            f"({channels} channel{'s' if channels > 1 else ''} wanted)"
        )
    for f, image in zip(files, images):
        if image.shape != images[0].shape:
            raise InputError(
                f"images differ in size: {files[0]} is {_image_size(images[0])} but {f} is "
                f"{_image_size(image)}; resize them to one size (--resize HxW)"
                + ("" if channels else " (or pass channels=1 or 3 to convert them to one mode)")
            )
    source = f"{folder} (image folder" + (
        f", {len(subfolders)} classes" if labels is not None and label_file is None else ""
    )
    source += f", cropped by {crop} (top, bottom, left, right)" if crop else ""
    source += f", resized to {resize[0]}x{resize[1]} (HxW) with PIL bilinear)" if resized else ")"
    return np.stack(images), None if labels is None else labels[:limit], source, by_label, tuple(notes)


def _read_image(path: Path, channels, resize=None, crop=None) -> tuple[np.ndarray, bool, bool]:
    """(uint8 image, or uint16 for a 16-bit greyscale one; whether it was converted between grayscale and
    colour to give `channels`; whether it was resized)."""
    try:
        with Image.open(path) as image:
            natural = "L" if image.mode in _GRAY_MODES else "RGB"
            mode = {1: "L", 3: "RGB"}.get(channels) or natural
            deep = image.mode in _DEEP_MODES
            image = image.convert("I" if deep else mode)  # "I" (32-bit) crops and resizes at full depth
            if crop is not None:
                top, bottom, left, right = crop
                width, height = image.size
                if top + bottom >= height or left + right >= width:
                    raise InputError(
                        f"crop {crop} (top, bottom, left, right) leaves nothing of {path} "
                        f"({width}x{height}); crop fewer pixels"
                    )
                image = image.crop((left, top, width - right, height - bottom))
            resized = resize is not None and image.size != (resize[1], resize[0])
            if resized:
                image = image.resize((resize[1], resize[0]), Image.Resampling.BILINEAR)
            if not deep:
                return np.asarray(image, dtype=np.uint8), mode != natural, resized
            array = np.asarray(image)
            if array.min() < 0 or array.max() > 65535:
                raise InputError(
                    f"cannot read image {path}: its 32-bit values range over [{array.min()}, {array.max()}], "
                    "beyond 16 bits (0..65535); save it as an 8- or 16-bit image"
                )
            array = array.astype(np.uint16)
            return (np.repeat(array[..., None], 3, -1) if mode == "RGB" else array), mode != natural, resized
    except (OSError, ValueError, Image.DecompressionBombError) as err:
        raise InputError(f"cannot read image {path}: {err}") from err


def _image_size(image: np.ndarray) -> str:
    h, w = image.shape[:2]
    return f"{w}x{h} " + ("grayscale" if image.ndim == 2 else f"with {image.shape[2]} channels")


# --- the formats, in the order they are tried ---------------------------------------------------------


@register_reader("IDX folder", lambda path: path.is_dir() and bool(idx_folder_files(path)), splits=True)
def _idx_folder(path: Path, options: ReadOptions):
    x, y, source = split_parts(lambda s: load_idx_folder(path, s), options.split or "test")
    return x, y, source, None, ()


@register_reader("image folder", Path.is_dir, images=True)
def _image_folder(path: Path, options: ReadOptions):
    return _load_image_folder(
        path,
        options.channels,
        options.limit,
        options.resize,
        options.class_names,
        options.n_classes,
        options.labels,
        options.crop,
    )


@register_reader("npz", lambda path: path.name.lower().endswith(".npz"), splits=True)
def _npz(path: Path, options: ReadOptions):
    x, y, source = load_npz(path, options.split)
    return x, y, source, None, ()


@register_reader("npy", lambda path: path.name.lower().endswith(".npy"))
def _npy(path: Path, options: ReadOptions):
    return _read_array(path), None, str(path), None, ()


@register_reader("IDX file", lambda path: _is_idx_name(path.name.lower()))
def _idx_file(path: Path, options: ReadOptions):
    x, y, source = _load_idx_images(path)
    return x, y, source, None, ()
