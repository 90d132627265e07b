"""Fitting loaded inputs to a model: their shape (`fit_to_model`), their scale (`scale_inputs`), their
labels (`check_labels`), and the parsing of the options that say how (resize, crop, class names)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from idcgen.errors import InputError, Param, ParameterError
from idcgen.threads import extent

from .dataset import Dataset

SCALES = ("auto", "255", "none")


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
    x = as_array(ds_or_x)
    want = tuple(None if d is None else int(d) for d in input_shape)
    if x.ndim < 2 or len(x) == 0:
        raise InputError(
            f"no inputs to feed the model: got an array of shape {x.shape}, expected (n, {_dims(want)}) with n >= 1"
        )
    if x.dtype.kind not in "biuf":
        raise InputError(f"inputs must be numbers (an array of ints or floats); got dtype {x.dtype}")
    # a NaN input would be covered, ranked and fuzzed silently; the extent is NaN or infinite where one is
    if x.dtype.kind == "f" and not np.isfinite(extent(x)).all():
        i = int(np.argmin(np.isfinite(x.reshape(len(x), -1)).all(axis=1)))
        raise InputError(f"inputs must be finite numbers; input {i} holds NaN or infinity")
    item = x.shape[1:]
    if _shape_matches(item, want):
        return x.astype(np.float32, copy=False)
    if len(want) == len(item) + 1 and want[-1] in (1, None) and _shape_matches(item, want[:-1]):
        return x[..., np.newaxis].astype(np.float32, copy=False)
    if len(item) == len(want) + 1 and item[-1] == 1 and _shape_matches(item[:-1], want):
        return x[..., 0].astype(np.float32, copy=False)
    known = [d for d in want if d is not None]
    size, want_size = int(np.prod(item)), (int(np.prod(known)) if len(known) == len(want) else None)
    if len(want) == 1 and len(item) > 1 and (want_size is None or size == want_size):
        return x.reshape(len(x), size).astype(np.float32, copy=False)
    if len(item) == 1 and len(want) > 1 and size == want_size:
        return x.reshape((len(x),) + want).astype(np.float32, copy=False)
    if _shape_matches(x.shape, want) or (want[-1:] == (1,) and _shape_matches(x.shape, want[:-1])):
        raise InputError(
            f"got one image of shape {x.shape} without the batch axis; idcgen takes a batch (n, {_dims(want)}): "
            "pass x[None]"
        )
    if len(want) == 3 and len(item) == 3 and _shape_matches((item[1], item[2], item[0]), want):
        raise InputError(
            f"inputs have shape {item} per item, channels first; idcgen takes images channels last "
            f"{want} (H, W, C), PyTorch models included (it moves the channels itself): pass "
            "x.transpose(0, 2, 3, 1)"
        )
    raise InputError(f"inputs have shape {item} per item but the model expects {want}: {_shape_difference(item, want)}")


def as_array(value) -> np.ndarray:
    """``value`` as a numpy array: a Dataset's inputs, a torch tensor detached and on the CPU (one that
    requires grad, or lives on a GPU, does not convert by itself), anything else through ``np.asarray``."""
    if isinstance(value, Dataset):
        return value.x
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without importing torch
        return value.detach().cpu().numpy()
    return np.asarray(value)


def check_labels(x, y, task: str = "classification") -> np.ndarray:
    """Validate labels for inputs `x`: returns y as int64 of shape (n,), or float64 for ``task="regression"``.

    Accepts integer labels, whole-number floats, (n, 1) columns and one-hot (n, K) rows (argmax); for
    regression any finite numbers, (n,) or (n, 1).
    """
    y = as_array(y)
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
            raise InputError(
                f"labels must be whole numbers; got {y[i]} at index {i} (a classifier takes class "
                "indices; float labels are for regression models: one output unit, or --task regression)"
            )
    elif y.dtype.kind not in "iu":
        raise InputError(
            f"labels must be integers; got dtype {y.dtype}: a classifier takes class indices 0..K-1, so map "
            "class names to indices first, e.g. [names.index(v) for v in y]"
        )
    if len(y) and y.min() < 0:
        i = int(np.argmin(y))
        raise InputError(f"labels must be non-negative class indices; got {y[i]} at index {i}")
    return y.astype(np.int64)


def check_option(name, value, choices, allow_none=False):
    """ParameterError unless ``value`` is one of ``choices`` (or None, with ``allow_none``)."""
    if (value is None and allow_none) or (value is not None and value in choices):
        return
    expected = ", ".join(repr(c) for c in choices) + (" or None" if allow_none else "")
    raise ParameterError(Param(name), f" must be one of {expected}. Got {value!r} instead.")


def check_raw(x: np.ndarray, source: str) -> None:
    """InputError for raw inputs a model cannot take: not numbers, not (n, h, w[, c]) or (n, d), or none."""
    if x.dtype.kind not in "uif":
        raise InputError(f"inputs from {source} have dtype {x.dtype}; expected integers or floats")
    if x.ndim not in (2, 3, 4):
        raise InputError(f"inputs from {source} have shape {x.shape}; expected (n, h, w), (n, h, w, c) or (n, d)")
    if len(x) == 0:
        raise InputError(f"no inputs in {source}")
    if x.size == 0:
        raise InputError(
            f"inputs from {source} have shape {x.shape}: each input is empty (0 values); "
            "expected images or vectors of at least one value"
        )


def _ints(value, n: int) -> bool:
    return isinstance(value, tuple) and len(value) == n and all(type(v) is int for v in value)


def as_resize(value) -> tuple[int, int] | None:
    """A resize as parsed at the command line's edge (None or a pair of ints) taken as it is; anything else
    (text, a list) goes through :func:`parse_resize`, so that an option is parsed once."""
    return value if value is None or (_ints(value, 2) and min(value) >= 1) else parse_resize(value)


def as_crop(value) -> tuple[int, int, int, int] | None:
    """A crop as parsed (None or four ints) taken as it is, anything else through :func:`parse_crop`."""
    return value if value is None or (_ints(value, 4) and min(value) >= 0) else parse_crop(value)


def as_class_names(value) -> tuple[str, ...] | None:
    """Class names as parsed (None or a non-empty tuple of strings) taken as they are, anything else (a comma
    list, a file, a list) through :func:`parse_class_names`."""
    parsed = isinstance(value, tuple) and len(value) > 0 and all(type(v) is str and v.strip() == v for v in value)
    return value if value is None or parsed else parse_class_names(value)


def parse_resize(resize) -> tuple[int, int] | None:
    """ "66x200" (height x width) or (66, 200) -> (66, 200); None stays None."""
    if resize is None:
        return None
    try:
        dims = (
            [int(v) for v in re.split(r"[x,\s]+", resize.strip().lower())]
            if isinstance(resize, str)
            else [int(v) for v in resize]
        )
    except (TypeError, ValueError, AttributeError):
        dims = []
    if len(dims) != 2 or min(dims) < 1:
        raise ParameterError(f"resize must be HxW (height x width, e.g. 66x200). Got {resize!r} instead.")
    return dims[0], dims[1]


def parse_crop(crop) -> tuple[int, int, int, int] | None:
    """ "60,25,0,0" or (60, 25, 0, 0): pixels cut from the top, bottom, left and right; None stays None."""
    if crop is None:
        return None
    try:
        values = (
            [int(v) for v in re.split(r"[,\s]+", crop.strip())] if isinstance(crop, str) else [int(v) for v in crop]
        )
    except (TypeError, ValueError, AttributeError):
        values = []
    if len(values) != 4 or min(values) < 0:
        raise ParameterError(
            f"crop must be TOP,BOTTOM,LEFT,RIGHT (pixels cut from each side, e.g. 60,25,0,0). Got {crop!r} instead."
        )
    return values[0], values[1], values[2], values[3]


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
        raise ParameterError(
            f"class names{where} are empty; give them in label order, e.g. cat,dog or a file with one name per line"
        )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ParameterError(f"class names{where} repeat {', '.join(repeated)}; each class needs one name")
    return tuple(names)


def check_value_range(value_range) -> tuple[float, float]:
    """(low, high) as floats; ParameterError unless both are finite and low < high."""
    try:
        lo, hi = (float(v) for v in value_range)
    except (TypeError, ValueError):
        lo = hi = float("nan")
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ParameterError(
            Param("value_range"), f" must be (low, high) with low < high. Got {value_range!r} instead."
        )
    return lo, hi


def scale_inputs(x: np.ndarray, scale: str, value_range=(0.0, 1.0), *, top: int = 255) -> tuple[np.ndarray, str]:
    """Float32 inputs in ``value_range`` and a description of the scaling; refuses NaN, Inf and
    out-of-range values. ``top``: the white of integer inputs under "auto" (65535 for 16-bit images)."""
    vlo, vhi = value_range
    target = f"[{vlo:g}, {vhi:g}]"
    if scale == "none":
        out, how = x.astype(np.float32), "none (scale='none': values kept as float32)"
    elif scale == "255":
        out, how = _divided_by_255(x), f"{x.dtype}/255 -> [0, 1] (scale='255')"
    elif x.dtype.kind in "ui":
        least, most = int(x.min()), int(x.max())
        if least < 0 or most > top:
            raise InputError(
                f"integer inputs range over [{least}, {most}], beyond 0..{top}, so ",
                Param("scale", "auto"),
                f" cannot map them to {target}; pass ",
                Param("scale", "none"),
                " to keep them unscaled",
            )
        if (vlo, vhi) == (0.0, 255.0) and top == 255:
            out, how = x.astype(np.float32), f"{x.dtype} kept in 0..255 (the model takes [0, 255])"
        elif (vlo, vhi) == (0.0, 1.0):
            out, how = _divided_by_255(x, top=top), f"{x.dtype}/{top} -> [0, 1]"
        else:  # down to 0..255 first (/257, exact), so 16-bit v * 257 gives just what 8-bit v gives
            out = _divided_by_255(x, top=top // 255) * np.float32((vhi - vlo) / 255) + np.float32(vlo)
            how = f"{x.dtype} 0..{top} -> {target} (linear)"
    else:
        out, how = x.astype(np.float32), f"none (float input already in {target})"
    lo, hi = float(out.min()), float(out.max())  # NaN and Inf show in the extremes: no mask unless needed
    if not (np.isfinite(lo) and np.isfinite(hi)):
        bad = ~np.isfinite(out)
        n_nan = int(np.isnan(out).sum())
        first = np.unravel_index(int(np.argmax(bad)), out.shape)
        raise InputError(
            f"inputs contain {n_nan} NaN and {int(bad.sum()) - n_nan} Inf values; the first is in "
            f"input {first[0]} at index {tuple(int(i) for i in first)}; fix or drop those inputs"
        )
    if scale == "auto" and x.dtype.kind == "f" and (lo < vlo or hi > vhi):
        hint = (
            ("pass ", Param("scale", "255"), " to divide them by 255")
            if hi > vhi and (vlo, vhi) == (0.0, 1.0)
            else ("give the value range the model takes (--value-range LO,HI)",)
        )
        raise InputError(
            f"float inputs lie in [{lo:g}, {hi:g}], outside {target}; ",
            *hint,
            ", or pass ",
            Param("scale", "none"),
            " to keep them as they are",
        )
    if scale == "255" and (lo < vlo or hi > vhi):
        raise InputError(
            f"inputs lie in [{lo:g}, {hi:g}] after dividing by 255, outside the value range {target}; pass ",
            Param("scale", "none"),
            " to keep them as they are",
        )
    return out, how


def _divided_by_255(x: np.ndarray, rows: int = 4096, top: int = 255) -> np.ndarray:
    """x / 255 (or `top`) as a new float32 array, converted a block of rows at a time: memory holds the
    input and the result, never a second float32 temporary (614 MB for CIFAR-10's training set)."""
    out = np.empty(x.shape, np.float32)
    for start in range(0, len(x), rows):
        block = out[start : start + rows]
        block[...] = x[start : start + rows]
        block /= np.float32(top)
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
            problems.append(
                f"spatial size differs ({have[0]}x{have[1]} vs {_dims(want[:2]).replace(', ', 'x')}); resize the inputs"
                + (f" (--resize {want[0]}x{want[1]})" if None not in want[:2] else "")
            )
        if want[2] is not None and have[2] != want[2]:
            problems.append(
                f"channel count differs ({have[2]} vs {want[2]}); load images with channels={want[2]} "
                "or convert the arrays"
            )
        if problems:
            return "; ".join(problems)
    return f"{int(np.prod(item))} values per item cannot be reshaped to {want}; give inputs of the model's input shape"


def fit_array_images(x: np.ndarray, channels: int | None, resize: tuple[int, int] | None) -> tuple[np.ndarray, list]:
    """Image arrays ((n, h, w) grayscale or (n, h, w, 1|3)) given `channels` and size `resize` as an image
    folder's images are (PIL: grayscale repeated into RGB, RGB to luma "L", bilinear resizing), before
    scaling, so uint8 levels stay uint8; returns the images and a note for each change (docs/design.md,
    "Input conventions"). Other arrays come back unchanged, and a resize of them is refused."""
    from PIL import Image

    image = x.ndim == 3 or (x.ndim == 4 and x.shape[-1] in (1, 3))
    if not image:
        if resize is not None:
            raise InputError(f"--resize applies to images; these inputs have shape {x.shape[1:]} per item")
        return x, []
    have = 1 if x.ndim == 3 else x.shape[-1]
    notes = []
    if channels is not None and channels != have:
        kind = ("grayscale", "RGB") if channels == 3 else ("colour", "grayscale")
        if channels == 3:
            x = np.repeat(x.reshape(x.shape[:3] + (1,)), 3, axis=-1)
        elif x.dtype == np.uint8:
            x = np.stack([np.asarray(Image.fromarray(a, "RGB").convert("L")) for a in x])
        else:  # PIL's "L" weights (ITU-R 601-2 luma), on floats
            x = (x @ np.array([0.299, 0.587, 0.114], dtype=np.float32)).astype(np.float32)
        notes.append(f"{len(x)} of {len(x)} images converted from {kind[0]} to {kind[1]} ({channels} channels wanted)")
    if resize is not None and x.shape[1:3] != tuple(resize):
        x = np.stack([_resized(a, resize) for a in x])
        notes.append(f"{len(x)} of {len(x)} images resized to {resize[0]}x{resize[1]} (HxW, PIL bilinear)")
    return x, notes


def _resized(a: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """One image (h, w[, c]) resized to size (h, w) with PIL bilinear: uint8 as PIL's own images (as an image
    folder's), other values channel by channel in 32-bit float mode."""
    from PIL import Image

    wh = (size[1], size[0])
    if a.dtype == np.uint8 and (a.ndim == 2 or a.shape[-1] in (1, 3)):
        plain = a[..., 0] if a.ndim == 3 and a.shape[-1] == 1 else a
        out = np.asarray(Image.fromarray(plain).resize(wh, Image.Resampling.BILINEAR))
        return out.reshape(size + a.shape[2:])
    planes = a[..., np.newaxis] if a.ndim == 2 else a
    resized = [
        np.asarray(Image.fromarray(planes[..., c].astype(np.float32), "F").resize(wh, Image.Resampling.BILINEAR))
        for c in range(planes.shape[-1])
    ]
    return np.stack(resized, axis=-1).reshape(size + a.shape[2:]).astype(a.dtype if a.dtype.kind == "f" else np.float32)
