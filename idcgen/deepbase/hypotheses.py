"""Hypotheses for `idcgen affinity` (DeepBase): functions of the input that a hidden unit may encode.

A hypothesis is a plain function ``f(x, y) -> array (n,)``: ``x`` is a batch of inputs as the model takes
them, in image space (the model's value range, channels-last), and ``y`` the batch's labels, or the
model's predictions where the inputs have no labels. It returns one number per input: 0/1 for a yes/no
property (scored by accuracy in the ``linear`` measure), any real otherwise (scored by R^2).

The built-in library (docs/design.md, "Affinity (DeepBase)") covers images: each class one-vs-rest,
brightness, contrast, ink, centre of mass, edge density, left-right symmetry, the dominant colour channel
(3-channel inputs), and for a regression model the label itself. Every image hypothesis works on the grey
image (the channel mean) and is defined per image from its own darkest and brightest pixel, so it does not
depend on the value range.

A hypothesis may also return a mask per input, (n, H, W) for images (n, H, W, C): a per-pixel hypothesis,
compared with the activation maps of convolutional channels (`builtin_masks`: ink, edges, the left half,
the centre; `resize_mask` brings a mask to a map's size).

A user file (``--hypotheses my_hypotheses.py``) is Python code run as it is: trusted files only. Its
hypotheses are its ``HYPOTHESES`` dict (name -> function) when it defines one, else every public function
defined in the file itself (not imported into it, and not starting with ``_``).

numpy only.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import InputError, ParameterError

__all__ = [
    "Hypothesis",
    "builtin_hypotheses",
    "builtin_masks",
    "load_hypotheses",
    "evaluate",
    "describe_function",
    "grey",
    "brightness",
    "contrast",
    "ink",
    "centre_x",
    "centre_y",
    "edge_density",
    "symmetry",
    "ink_mask",
    "edges_mask",
    "left_mask",
    "centre_mask",
    "resize_mask",
]

#: an edge is a step between neighbouring pixels larger than this share of the image's own value span
EDGE_STEP = 0.25
#: names DeepBase's RGB order gives the channels of a 3-channel input
CHANNEL_NAMES = ("red", "green", "blue")


@dataclass(frozen=True)
class Hypothesis:
    """A named function of the input with a description in plain words."""

    name: str
    func: Callable
    description: str = ""

    @property
    def words(self) -> str:
        return self.description or self.name


# ---- image statistics (n, ...) -> (n,) ----------------------------------------------------------------


def grey(x) -> np.ndarray:
    """(n, h, w, c), (n, h, w) or flat (n, s*s[*c]) inputs -> (n, h, w) grey images (the channel mean)."""
    x = np.asarray(x, np.float64)
    if x.ndim == 4:
        return x.mean(axis=-1)
    if x.ndim == 3:
        return x
    if x.ndim == 2:
        d = x.shape[1]
        for c in (1, 3):
            s = int(round((d / c) ** 0.5))
            if s * s * c == d:
                return x.reshape(len(x), s, s, c).mean(axis=-1)
    raise InputError(
        f"image hypotheses need images (n, h, w[, c]) or flat square images; got inputs of shape "
        f"{x.shape}; give hypotheses of your own with --hypotheses"
    )


def _span(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per image: (darkest value (n, 1, 1), value span (n, 1, 1))."""
    lo = g.min(axis=(1, 2), keepdims=True)
    return lo, g.max(axis=(1, 2), keepdims=True) - lo


def brightness(x, y=None) -> np.ndarray:
    """Mean pixel value (in the input's own units)."""
    return grey(x).mean(axis=(1, 2))


def contrast(x, y=None) -> np.ndarray:
    """RMS contrast: the standard deviation of the grey image's pixels."""
    return grey(x).std(axis=(1, 2))


def ink(x, y=None) -> np.ndarray:
    """Foreground amount: the share of pixels brighter than the midpoint between the image's darkest and
    brightest pixel (0 for a flat image). Bright-on-dark, as MNIST's digits are."""
    g = grey(x)
    lo, span = _span(g)
    return ((g > lo + span / 2) & (span > 0)).mean(axis=(1, 2))


def _centre(x, axis: int) -> np.ndarray:
    g = grey(x)
    lo, _ = _span(g)
    w = g - lo  # the darkest pixel weighs nothing: background drops out
    size = g.shape[axis]
    coord = np.arange(size) / max(size - 1, 1)  # 0 at the left (top) edge, 1 at the right (bottom)
    mass = w.sum(axis=(1, 2))
    along = w.sum(axis=3 - axis) @ coord  # profile along the axis, weighted by the coordinate
    return np.where(mass > 0, along / np.where(mass > 0, mass, 1), 0.5)


def centre_x(x, y=None) -> np.ndarray:
    """Horizontal centre of mass of (pixel - darkest pixel), 0 = left edge, 1 = right edge; 0.5 if flat."""
    return _centre(x, 2)


def centre_y(x, y=None) -> np.ndarray:
    """Vertical centre of mass of (pixel - darkest pixel), 0 = top, 1 = bottom; 0.5 if flat."""
    return _centre(x, 1)


def edge_density(x, y=None) -> np.ndarray:
    """Share of pixel positions (all but the last row and column) whose gradient magnitude, from forward
    differences to the right and downwards, exceeds EDGE_STEP times the image's value span."""
    g = grey(x)
    _, span = _span(g)
    dx = g[:, :-1, 1:] - g[:, :-1, :-1]
    dy = g[:, 1:, :-1] - g[:, :-1, :-1]
    return ((np.hypot(dx, dy) > EDGE_STEP * span) & (span > 0)).mean(axis=(1, 2))


def symmetry(x, y=None) -> np.ndarray:
    """Left-right symmetry: 1 - mean |image - its mirror image| / value span (1 for a flat image)."""
    g = grey(x)
    _, span = _span(g)
    diff = np.abs(g - g[:, :, ::-1]).mean(axis=(1, 2))
    span = span[:, 0, 0]
    return 1.0 - np.where(span > 0, diff / np.where(span > 0, span, 1), 0.0)


def _one_vs_rest(k: int):
    def f(x, y):
        return (np.asarray(y) == k).astype(np.float64)

    return f


def _dominant(c: int):
    def f(x, y=None):
        x = np.asarray(x, np.float64)
        means = x.reshape(len(x), -1, x.shape[-1]).mean(axis=1)
        return (means.argmax(axis=1) == c).astype(np.float64)

    return f


def _label(x, y):
    return np.asarray(y, np.float64).reshape(len(x))


def builtin_hypotheses(*, task: str = "classification", n_classes: int = 0, channels: int = 1) -> list[Hypothesis]:
    """The built-in library for a model: classes one-vs-rest (classification) or the label (regression),
    then the image statistics, then the dominant colour channel for 3-channel inputs."""
    out = []
    if task == "regression":
        out.append(Hypothesis("label", _label, "the label (regression target)"))
    else:
        out += [Hypothesis(f"class_{k}", _one_vs_rest(k), f"class {k} one-vs-rest") for k in range(n_classes)]
    out += [
        Hypothesis("brightness", brightness, "brightness"),
        Hypothesis("contrast", contrast, "contrast"),
        Hypothesis("ink", ink, "ink (foreground amount)"),
        Hypothesis("centre_x", centre_x, "centre of mass x"),
        Hypothesis("centre_y", centre_y, "centre of mass y"),
        Hypothesis("edges", edge_density, "edge density"),
        Hypothesis("symmetry", symmetry, "left-right symmetry"),
    ]
    if channels == 3:
        out += [
            Hypothesis(f"{name}_dominant", _dominant(c), f"{name} channel dominant")
            for c, name in enumerate(CHANNEL_NAMES)
        ]
    return out


# ---- masks (n, ...) -> (n, h, w): per-pixel hypotheses for spatial units ----------------------------------


def ink_mask(x, y=None) -> np.ndarray:
    """Foreground pixels: brighter than the midpoint of the image's darkest and brightest pixel (1), else 0."""
    g = grey(x)
    lo, span = _span(g)
    return ((g > lo + span / 2) & (span > 0)).astype(np.float64)


def edges_mask(x, y=None) -> np.ndarray:
    """Edge pixels: forward-difference gradient magnitude above EDGE_STEP times the image's value span (the
    last row and column, which have no forward difference, are 0)."""
    g = grey(x)
    _, span = _span(g)
    out = np.zeros(g.shape)
    dx = g[:, :-1, 1:] - g[:, :-1, :-1]
    dy = g[:, 1:, :-1] - g[:, :-1, :-1]
    out[:, :-1, :-1] = (np.hypot(dx, dy) > EDGE_STEP * span) & (span > 0)
    return out


def left_mask(x, y=None) -> np.ndarray:
    """The left half of the image (the same region for every input)."""
    g = grey(x)
    out = np.zeros(g.shape)
    out[:, :, : g.shape[2] // 2] = 1.0
    return out


def centre_mask(x, y=None) -> np.ndarray:
    """The central region: the middle half of the rows and of the columns (the same for every input)."""
    g = grey(x)
    h, w = g.shape[1:]
    out = np.zeros(g.shape)
    out[:, h // 4 : h - h // 4, w // 4 : w - w // 4] = 1.0
    return out


def builtin_masks() -> list[Hypothesis]:
    """The built-in per-pixel hypotheses for images: ink, edges, the left half, the centre."""
    return [
        Hypothesis("ink_mask", ink_mask, "ink pixels"),
        Hypothesis("edges_mask", edges_mask, "edge pixels"),
        Hypothesis("left_mask", left_mask, "left half"),
        Hypothesis("centre_mask", centre_mask, "centre region"),
    ]


def resize_mask(mask: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """(n, H, W) masks -> (n, h, w) by area averaging: each output pixel is the mean of the input pixels
    under it, weighted by their overlap (exact for any sizes, H/h need not be whole)."""

    def weights(big: int, small: int) -> np.ndarray:
        edges = np.arange(small + 1) * big / small  # output cell i covers [edges[i], edges[i+1])
        lo = np.maximum(edges[:-1, None], np.arange(big)[None, :])
        hi = np.minimum(edges[1:, None], np.arange(big)[None, :] + 1)
        return np.clip(hi - lo, 0, None) * small / big  # each row sums to 1

    rows, cols = weights(mask.shape[1], shape[0]), weights(mask.shape[2], shape[1])
    return rows @ np.asarray(mask, np.float64) @ cols.T  # (h, H) @ (n, H, W) @ (W, w), batched


def describe_function(func, name: str) -> str:
    """The first line of ``func``'s docstring (without its full stop), else ``name``."""
    doc = inspect.getdoc(func) or ""
    return doc.splitlines()[0].rstrip(".") if doc else name


def load_hypotheses(path) -> list[Hypothesis]:
    """The hypotheses of a user file: its ``HYPOTHESES`` dict (name -> function) if it has one, else its
    public functions. The file is executed: trusted code only."""
    path = Path(path)
    if not path.is_file():
        raise ParameterError(f"hypotheses file not found: {path}; expected a Python file defining functions f(x, y)")
    spec = importlib.util.spec_from_file_location(f"idcgen_user_hypotheses_{abs(hash(str(path.resolve())))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # while it runs: dataclasses and the like look their module up there
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # user code: any error is reported as one line naming the file
        raise ParameterError(f"could not run hypotheses file {path}: {type(exc).__name__}: {exc}") from None
    finally:
        sys.modules.pop(spec.name, None)
    table = getattr(module, "HYPOTHESES", None)
    if table is not None:
        if not isinstance(table, dict) or not all(isinstance(k, str) and callable(v) for k, v in table.items()):
            raise ParameterError(f"HYPOTHESES in {path} must be a dict from names (str) to functions f(x, y)")
        found = list(table.items())
    else:
        found = [
            (name, obj)
            for name, obj in vars(module).items()
            if not name.startswith("_") and inspect.isfunction(obj) and obj.__module__ == module.__name__
        ]
    if not found:
        raise ParameterError(
            f"{path} defines no hypotheses: expected public functions f(x, y) -> array (n,) or a HYPOTHESES dict"
        )
    return [Hypothesis(name, func, describe_function(func, name)) for name, func in found]


def evaluate(hypothesis: Hypothesis, x: np.ndarray, y, *, masks: bool = False) -> np.ndarray:
    """``hypothesis(x, y)`` as float64 (n,), or with ``masks`` and images x (n, H, W, C) also (n, H, W) (a
    per-pixel hypothesis); a function that raises or returns another shape or a non-finite value is refused
    in one line naming it."""
    n = len(x)
    try:
        value = hypothesis.func(x, y)
    except Exception as exc:  # user code
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise InputError(
            f"hypothesis {hypothesis.name!r} raised {type(exc).__name__}"
            f"{': ' + first if first else ''} on a batch of {n} inputs of shape {tuple(x.shape)}; "
            "it must take (x, y) and return one number per input"
        ) from None
    try:
        value = np.asarray(value, np.float64)
    except (TypeError, ValueError):
        raise InputError(
            f"hypothesis {hypothesis.name!r} returned {type(value).__name__}, not numbers; "
            f"expected an array of shape ({n},)"
        ) from None
    mask_shape = (n, *x.shape[1:3]) if masks and np.ndim(x) == 4 else None  # images (n, H, W, C): H x W masks
    if value.shape != (n,) and value.shape != mask_shape:
        raise InputError(
            f"hypothesis {hypothesis.name!r} returned shape {value.shape} for a batch of {n} inputs; "
            f"expected ({n},): one number per input" + (f", or {mask_shape}: a mask per input" if mask_shape else "")
        )
    if not np.isfinite(value).all():
        raise InputError(
            f"hypothesis {hypothesis.name!r} returned NaN or inf for {int((~np.isfinite(value)).sum())} "
            f"of {n} inputs; expected finite numbers"
        )
    return value
