"""`load_inputs`: a file, a folder or a named dataset, read by its registered reader or dataset, then
checked and scaled; `load_for_model`: the same for a given model, fitted to its input shape."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from idcgen.errors import InputError, Param, ParameterError

from .dataset import Dataset
from .fitting import (
    SCALES,
    as_class_names,
    as_crop,
    as_resize,
    check_labels,
    check_option,
    check_raw,
    check_value_range,
    fit_array_images,
    fit_to_model,
    scale_inputs,
)
from .named import DATASETS, find_dataset
from .readers import SPLITS, ReadOptions, is_image_folder, read_path


def check_source(
    spec: str | os.PathLike, *, scale: str = "auto", limit=None, resize=None, crop=None, class_names=None
) -> None:
    """Refuse an input spec naming no file, folder or dataset (or an unknown split), or a loading option
    that does not parse, in one line, before a command spends seconds importing the framework and loading
    its model. Shard patterns are the workers'."""
    check_option("scale", scale, SCALES)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1):
        raise ParameterError(Param("limit"), f" must be a positive int or None. Got {limit!r} instead.")
    as_resize(resize)
    as_crop(crop)
    as_class_names(class_names)
    text = os.fspath(spec)
    if any(c in text for c in "*?["):
        return
    head, _, tail = text.rpartition(":")
    if Path(text).expanduser().exists() or (tail in SPLITS and Path(head).expanduser().exists()):
        return
    name, _, colon_split = text.partition(":")
    if find_dataset(name) is None:
        raise InputError(f"no such file, folder or dataset: {text} (known datasets: {', '.join(DATASETS)})")
    if colon_split and colon_split not in SPLITS:
        raise InputError(f"unknown split {colon_split!r} in {text!r}; expected one of {', '.join(SPLITS)}")


def load_inputs(
    spec: str | os.PathLike,
    *,
    split: str | None = None,
    scale: str = "auto",
    channels: int | None = None,
    limit: int | None = None,
    value_range=(0.0, 1.0),
    resize: tuple[int, int] | str | None = None,
    class_names=None,
    n_classes: int | None = None,
    labels=None,
    crop=None,
    task: str | None = None,
) -> Dataset:
    """Load inputs and optional labels from `spec` (see :mod:`idcgen.data` for the forms).

    Args:
        spec: a file, a folder, or a dataset name with an optional ":split".
        split: "train", "test" or "all" for sources that have splits; None means the source's default.
        scale: "auto", "255" or "none" (see :mod:`idcgen.data`).
        channels: 1 or 3 to convert images (an image folder's, or image arrays (n, h, w[, 1|3])) to
            grayscale or RGB; None keeps each image's own (grayscale or RGB).
        limit: keep only the first `limit` inputs.
        value_range: (low, high) of the images the model takes; "auto" scaling maps 0..255 onto it.
        resize: (height, width) or "HxW": resize images (an image folder's, or image arrays), PIL bilinear.
        class_names: the classes in label order (a sequence, or the text `parse_class_names` reads):
            labels of an image folder's non-integer subfolder names.
        n_classes: the model's class count, if known: labels at or beyond it are refused.
        labels: a CSV giving the labels of an image folder's images, ``FILE.csv`` or
            ``FILE.csv:id_column,target_column`` (:mod:`idcgen.data.labelfile`).
        crop: (top, bottom, left, right) or "T,B,L,R": pixels cut from each image of an image folder
            before any resize (a driving frame's sky and bonnet).
        task: "regression" takes the labels as numbers (float64); "classification" as class indices;
            None: class indices, except float labels from a ``labels`` file.

    Returns:
        A `Dataset` with float32 inputs and int64 labels (float64 for regression, or None).
    """
    check_option("split", split, SPLITS, allow_none=True)
    check_option("scale", scale, SCALES)
    check_option("channels", channels, (1, 3), allow_none=True)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1):
        raise ParameterError(Param("limit"), f" must be a positive int or None. Got {limit!r} instead.")

    value_range = check_value_range(value_range)
    resize = as_resize(resize)
    crop = as_crop(crop)
    class_names = as_class_names(class_names)
    text = os.fspath(spec)
    path = Path(text).expanduser()
    head, _, tail = text.rpartition(":")
    if not path.exists() and tail in SPLITS and Path(head).expanduser().exists():
        path, split = Path(head).expanduser(), tail  # "train.npz:train": a file's part, as for a named dataset
    image_folder = is_image_folder(path)
    for name, given in (("crop", crop), ("labels", labels)):
        if given is not None and not image_folder:
            raise InputError(f"--{name} applies to folders of images; {text} is not one")
    notes: tuple[str, ...] = ()
    if path.exists():
        x, y, source, found_names, notes = read_path(
            path,
            ReadOptions(
                split=split,
                channels=channels,
                limit=limit,
                resize=resize,
                class_names=class_names,
                n_classes=n_classes,
                labels=labels,
                crop=crop,
            ),
        )
    else:
        name, _, colon_split = text.partition(":")
        load = find_dataset(name)
        if load is None:
            raise InputError(f"no such file, folder or dataset: {text} (known datasets: {', '.join(DATASETS)})")
        if colon_split and colon_split not in SPLITS:
            raise InputError(f"unknown split {colon_split!r} in {text!r}; expected one of {', '.join(SPLITS)}")
        x, y, source = load(colon_split or split or "test")
        found_names = None
    if class_names is not None and found_names is None and not notes:
        notes = (f"class names not used: {source} is not an image folder with class subfolders",)

    x = np.asarray(x)
    check_raw(x, source)
    if y is not None:
        task = task or ("regression" if labels is not None and np.asarray(y).dtype.kind == "f" else "classification")
        y_all = check_labels(x, y, task=task)
        y = y_all[:limit]
        if task == "classification" and limit is not None:
            notes = (*notes, *_classes_cut_off(y_all, y, limit, source))
        if task == "classification" and n_classes is not None and n_classes >= 2 and len(y) and y.max() >= n_classes:
            i = int(np.argmax(y))
            raise InputError(
                f"labels from {source} reach {y[i]} (input {i}) but the model has {n_classes} classes "
                f"(0..{n_classes - 1}); give labels the model's class indices"
            )
    x = x[:limit]
    if not image_folder:  # arrays: converted and resized as a folder's images are
        x, fitted = fit_array_images(x, channels, resize)
        notes = (*notes, *fitted)
    # 16-bit images (the folder reader's only uint16) are scaled from their white, 65535
    top = 65535 if image_folder and x.dtype == np.uint16 else 255
    x, scaling = scale_inputs(x, scale, value_range, top=top)
    return Dataset(x=x, y=y, source=source, scaling=scaling, class_names=found_names, notes=tuple(notes))


def _classes_cut_off(y_all: np.ndarray, y: np.ndarray, limit: int, source: str) -> tuple[str, ...]:
    """A warning when the first `limit` inputs hold fewer classes than the source (a source ordered by class,
    as embedded-mnist and class folders are, cut by --limit): coverage, an analysis or a prioritisation of one
    class is not the source's."""
    kept, every = np.unique(y), np.unique(y_all)
    if len(kept) >= len(every):
        return ()
    shown = ", ".join(str(c) for c in kept[:10]) + (" ..." if len(kept) > 10 else "")
    return (
        f"warning: the first {limit} inputs of {source} hold only {len(kept)} of its {len(every)} classes "
        f"({shown}): it is ordered by class, and --limit keeps the first inputs; give a larger --limit "
        "or shuffled inputs to cover every class",
    )


def load_for_model(
    spec,
    input_shape: tuple,
    *,
    scale: str = "auto",
    limit: int | None = None,
    value_range=(0.0, 1.0),
    resize=None,
    class_names=None,
    n_classes: int | None = None,
    labels=None,
    crop=None,
    task: str | None = None,
):
    """``load_inputs`` for a model taking ``input_shape`` and images in ``value_range``: images
    converted to its channel count (and resized to ``resize``, (h, w), for image folders; without it, the
    images of a folder that differ from the model's input size are resized to it), labels
    checked against its ``n_classes``, then shaped by ``fit_to_model``. Returns (Dataset, x); show
    ``Dataset.notes`` to the user."""
    channels = input_shape[-1] if len(input_shape) == 3 and input_shape[-1] in (1, 3) else None
    if resize is None and len(input_shape) == 3 and None not in input_shape[:2] and is_image_folder(spec):
        resize = tuple(input_shape[:2])  # frames of another size are resized to the model's input, said in a note
    ds = load_inputs(
        spec,
        scale=scale,
        channels=channels,
        limit=limit,
        value_range=value_range,
        resize=resize,
        class_names=class_names,
        n_classes=n_classes,
        labels=labels,
        crop=crop,
        task=task,
    )
    return ds, fit_to_model(ds, input_shape)
