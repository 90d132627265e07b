"""The input convention of a model: the value range of the images it takes, an optional preprocessing
step between image and model, and the shape of the images the fuzzer mutates.

idcgen works in *image space*: inputs are loaded, mutated, checked for validity and exported as images
whose pixel values lie in ``value_range``. What the model does not do itself is put in front of it by the
framework (:meth:`idcgen.framework.Network.measured_as`; for Keras a functional model image -> [Reshape to
the model's input] -> [preprocessing layers] -> the original model), so that the relevance pass, forward
taps, attacks and the weights fingerprint all see images (the preprocessing layers have no weights, except
the fixed channel flip of ``imagenet-caffe``). The convention a network is measured with is its
``convention`` field.

Where the range comes from, first match wins: ``--value-range``; the range a ``--preprocess`` preset
expects; the model's own first layer when it is a ``Rescaling`` that maps 0..255 to a unit-size range
(``Rescaling(1/255)``, ``Rescaling(1/127.5, offset=-1)``), also inside a nested model (read by the
framework: :meth:`idcgen.framework.Network.own_convention`); else [0, 1].

numpy only: the framework builds the layers.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

import numpy as np

from .errors import InputError, ParameterError
from .threads import extent

__all__ = [
    "InputConvention",
    "Preprocess",
    "parse_preprocess",
    "parse_value_range",
    "parse_image_shape",
    "infer_image_shape",
    "resolve",
    "check_scale",
    "check_unscaled",
    "WRAPPER_PREFIX",
    "PREPROCESSING_KINDS",
]

#: name prefix of the layers and models the framework puts in front of a model (idcgen.framework)
WRAPPER_PREFIX = "idcgen_input"
#: Keras' ``imagenet_utils.preprocess_input`` modes, for images in 0..255 (RGB):
#: name -> (mean, std, channels flipped to BGR first); the model sees (x[, ::-1] - mean) / std
PRESETS = {
    "imagenet-caffe": ((103.939, 116.779, 123.68), (1.0, 1.0, 1.0), True),
    "imagenet-torch": ((0.485 * 255, 0.456 * 255, 0.406 * 255), (0.229 * 255, 0.224 * 255, 0.225 * 255), False),
    "tf": ((127.5,), (127.5,), False),
}
_PRESET_RANGE = (0.0, 255.0)
PREPROCESSING_KINDS = ("Rescaling", "Normalization", "Resizing", "CenterCrop", "InputLayer")


@dataclass(frozen=True)
class Preprocess:
    """``(x - mean) / std`` per channel (after flipping RGB to BGR when ``bgr``), between image and model.

    ``value_range`` is the image range a preset expects (None for ``mean=...,std=...``, which applies
    in whatever range the images are given).
    """

    spec: str
    mean: tuple[float, ...]
    std: tuple[float, ...]
    bgr: bool = False
    value_range: tuple[float, float] | None = None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The arithmetic itself, in numpy: what the wrapper's layers compute."""
        x = np.asarray(x, np.float32)
        if self.bgr:
            x = x[..., ::-1]
        return ((x - np.float32(self.mean)) / np.float32(self.std)).astype(np.float32)

    def check_channels(self, channels: int) -> None:
        if self.bgr and channels != 3:
            raise ParameterError(
                f"--preprocess {self.spec} flips RGB to BGR and needs 3 channels; the images have {channels}"
            )
        for name, values in (("mean", self.mean), ("std", self.std)):
            if len(values) not in (1, channels):
                raise ParameterError(
                    f"--preprocess {self.spec}: {len(values)} {name} values for images with "
                    f"{channels} channels; give 1 or {channels}"
                )

    def to_dict(self) -> dict:
        return {
            "spec": self.spec,
            "mean": list(self.mean),
            "std": list(self.std),
            "bgr": self.bgr,
            "value_range": None if self.value_range is None else list(self.value_range),
        }


def parse_preprocess(spec: str | Preprocess | None) -> Preprocess | None:
    """``imagenet-caffe``, ``imagenet-torch``, ``tf`` or ``mean=M,std=S`` (M, S one number or one per
    channel: ``mean=0.485,0.456,0.406,std=0.229,0.224,0.225``); None or "" for no preprocessing."""
    if spec is None or isinstance(spec, Preprocess):
        return spec
    if not isinstance(spec, str):
        raise ParameterError(
            f"--preprocess must be a string such as 'tf' or 'mean=0.5,std=0.25'. Got {spec!r} instead."
        )
    text = spec.strip()
    if not text or text.lower() == "none":
        return None
    if text.lower() in PRESETS:
        mean, std, bgr = PRESETS[text.lower()]
        return Preprocess(text.lower(), mean, std, bgr, _PRESET_RANGE)
    expected = f"one of {', '.join(PRESETS)}, or mean=M,std=S (one value or one per channel)"
    parts = re.split(r"[,;\s]*\b(mean|std)\s*=", text)
    if parts[0].strip() or len(parts) != 5 or sorted(parts[1::2]) != ["mean", "std"]:
        raise ParameterError(f"unknown --preprocess {spec!r}; expected {expected}")
    values = {}
    for key, raw in zip(parts[1::2], parts[2::2]):
        items = [v for v in re.split(r"[,;\s]+", raw.strip().strip("[]()")) if v]
        try:
            numbers = tuple(float(v) for v in items)
        except ValueError:
            raise ParameterError(f"--preprocess {spec!r}: {key} must be numbers, got {raw.strip()!r}") from None
        if not numbers or not all(math.isfinite(v) for v in numbers):
            raise ParameterError(f"--preprocess {spec!r}: {key} must be finite numbers, got {raw.strip()!r}")
        values[key] = numbers
    if min(values["std"]) <= 0:
        raise ParameterError(f"--preprocess {spec!r}: std must be > 0")
    if len(values["mean"]) != len(values["std"]) and 1 not in (len(values["mean"]), len(values["std"])):
        raise ParameterError(
            f"--preprocess {spec!r}: {len(values['mean'])} mean values but {len(values['std'])} std values"
        )
    canonical = (
        "mean=" + ",".join(f"{v:g}" for v in values["mean"]) + ",std=" + ",".join(f"{v:g}" for v in values["std"])
    )
    return Preprocess(canonical, values["mean"], values["std"])


def parse_value_range(text) -> tuple[float, float] | None:
    """``"0,255"`` -> (0.0, 255.0); a pair passes through (checked); None stays None."""
    if text is None:
        return None
    try:
        parts = (
            [float(v) for v in text.replace(" ", "").split(",")] if isinstance(text, str) else [float(v) for v in text]
        )
    except (TypeError, ValueError):
        parts = []
    if len(parts) != 2 or not all(math.isfinite(v) for v in parts) or parts[0] >= parts[1]:
        raise ParameterError(f"value range must be LO,HI with LO < HI (e.g. 0,255). Got {text!r} instead.")
    return float(parts[0]), float(parts[1])


def as_value_range(value) -> tuple[float, float] | None:
    """A value range as a pair of floats: one already parsed (at the command line's edge) is taken as it is,
    anything else (text, a list, ints) goes through :func:`parse_value_range`."""
    if isinstance(value, tuple) and len(value) == 2 and all(type(v) is float for v in value):
        return value
    return parse_value_range(value)


def as_image_shape(value) -> tuple[int, int, int] | None:
    """An image shape as parsed at the command line's edge (None, or H, W, C ints with C 1 or 3) taken as it is;
    anything else (text, a list) goes through :func:`parse_image_shape`, so that an option is parsed once."""
    parsed = isinstance(value, tuple) and len(value) == 3 and all(type(v) is int and v >= 1 for v in value)
    return value if value is None or (parsed and value[2] in (1, 3)) else parse_image_shape(value)


def as_preprocess(value) -> Preprocess | None:
    """A preprocessing as parsed (None or a :class:`Preprocess`) taken as it is, text through
    :func:`parse_preprocess`."""
    return value if value is None or isinstance(value, Preprocess) else parse_preprocess(value)


def parse_image_shape(text) -> tuple[int, int, int] | None:
    """``"28,28,1"`` (or ``28x28x1``) -> (28, 28, 1); ``"28,28"`` -> (28, 28, 1)."""
    if text is None:
        return None
    try:
        dims = [int(v) for v in re.split(r"[,x\s]+", text.strip())] if isinstance(text, str) else [int(v) for v in text]
    except (TypeError, ValueError):
        dims = []
    if len(dims) == 2:
        dims.append(1)
    if len(dims) != 3 or min(dims) < 1:
        raise ParameterError(f"image shape must be H,W,C (e.g. 28,28,1). Got {text!r} instead.")
    if dims[2] not in (1, 3):  # mutated, drawn and saved as images: grey or RGB
        raise ParameterError(
            f"the image shape (--image-shape H,W,C) has C = 1 (grey) or 3 (RGB) channels: the inputs "
            f"are mutated and saved as images. Got {text!r} instead ({dims[2]} channels)"
        )
    return tuple(dims)


def infer_image_shape(input_shape: tuple, item_shape: tuple | None = None) -> tuple[int, int, int]:
    """The image shape to mutate for a model taking ``input_shape``: the shape itself for (h, w, c);
    (h, w, 1) for (h, w); for flat (d,) the loaded inputs' own (h, w[, c]) when sizes agree, else
    (s, s, 1) when d = s * s, else (s, s, 3) when d = 3 * s * s."""
    shape = tuple(input_shape)
    if None in shape:
        raise ParameterError(
            f"the model takes inputs of shape {shape} with free dimensions; give the image shape (--image-shape H,W,C)"
        )
    if len(shape) == 3:
        return shape
    if len(shape) == 2:
        return shape + (1,)
    if len(shape) == 1:
        d = shape[0]
        if item_shape is not None and len(item_shape) in (2, 3) and int(np.prod(item_shape)) == d:
            return tuple(int(v) for v in item_shape) + ((1,) if len(item_shape) == 2 else ())
        s = math.isqrt(d)
        if s * s == d:
            return (s, s, 1)
        s = math.isqrt(d // 3)
        if d % 3 == 0 and 3 * s * s == d:
            return (s, s, 3)
    raise ParameterError(
        f"cannot tell the image shape of inputs of shape {shape}; give it with --image-shape H,W,C "
        "(H*W*C must equal the model's input size)"
    )


@dataclass(frozen=True)
class InputConvention:
    """The value range of the images a model takes, the preprocessing between image and model, and the
    image shape (None: the model's own input shape).

    ``source`` says where the range came from, for messages and the analysis record.
    """

    value_range: tuple[float, float] = (0.0, 1.0)
    preprocess: Preprocess | None = None
    image_shape: tuple[int, ...] | None = None
    source: str = "default [0, 1]"
    model_layers: tuple[str, ...] = field(default=(), compare=False)

    def to_dict(self) -> dict:
        return {
            "value_range": list(self.value_range),
            "preprocess": None if self.preprocess is None else self.preprocess.spec,
            "image_shape": None if self.image_shape is None else list(self.image_shape),
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, data: dict | None) -> InputConvention:
        if not data:
            return cls()
        return cls(
            value_range=tuple(float(v) for v in data["value_range"]),
            preprocess=as_preprocess(data.get("preprocess")),
            image_shape=None if data.get("image_shape") is None else tuple(data["image_shape"]),
            source=data.get("source", "recorded"),
        )

    def describe(self) -> str:
        lo, hi = self.value_range
        text = f"images in [{lo:g}, {hi:g}] ({self.source})"
        if self.preprocess is not None:
            text += f", preprocessed by {self.preprocess.spec} before the model"
        if self.image_shape is not None:
            text += f", image shape {'x'.join(map(str, self.image_shape))}"
        return text

    def needs_wrapper(self, model_input_shape: tuple) -> bool:
        return self.preprocess is not None or (
            self.image_shape is not None and tuple(self.image_shape) != tuple(model_input_shape)
        )


def resolve(
    own: InputConvention,
    *,
    value_range=None,
    preprocess=None,
    image_shape=None,
    recorded: InputConvention | None = None,
) -> InputConvention:
    """The convention for a model from explicit choices, else a recorded one (an analysis'), else ``own``,
    the one read from the model's layers. An explicit choice that contradicts ``recorded`` is refused."""
    value_range = as_value_range(value_range)
    pre = as_preprocess(preprocess)
    image_shape = as_image_shape(image_shape)
    if recorded is not None:
        if value_range is not None and value_range != tuple(recorded.value_range):
            raise ParameterError(
                f"--value-range {value_range[0]:g},{value_range[1]:g} differs from the analysis' "
                f"[{recorded.value_range[0]:g}, {recorded.value_range[1]:g}]; drop it or analyse again"
            )
        if pre is not None and (recorded.preprocess is None or pre.spec != recorded.preprocess.spec):
            raise ParameterError(
                f"--preprocess {pre.spec} differs from the analysis' "
                f"({recorded.preprocess.spec if recorded.preprocess else 'none'}); drop it or analyse again"
            )
        return replace(recorded, image_shape=image_shape or recorded.image_shape)
    if pre is not None:
        if any(name.split(" ", 1)[0] in ("Rescaling", "Normalization") for name in own.model_layers):
            raise ParameterError(
                f"the model starts with its own preprocessing ({', '.join(own.model_layers)}); "
                f"--preprocess {pre.spec} would scale the inputs twice: drop it"
            )
        if pre.value_range is not None:
            if value_range is not None and value_range != pre.value_range:
                raise ParameterError(
                    f"--preprocess {pre.spec} takes images in [{pre.value_range[0]:g}, "
                    f"{pre.value_range[1]:g}]; --value-range {value_range[0]:g},{value_range[1]:g} "
                    "contradicts it: drop one"
                )
            return InputConvention(pre.value_range, pre, image_shape, f"--preprocess {pre.spec}", own.model_layers)
    if value_range is not None:
        return InputConvention(value_range, pre, image_shape, "--value-range", own.model_layers)
    return replace(own, preprocess=pre, image_shape=image_shape)


def check_unscaled(x: np.ndarray, network, what: str = "the inputs") -> None:
    """Refuse raw 0..255 pixel values given to a model that takes images in [0, 1] (its convention, or the one
    read from the model): where no analysis records a training range, the one scale mistake the values
    show (a uint8 array straight from an image file). Values below 0 are left alone: standardised inputs; so
    are float feature vectors of a model taking (d,) inputs, which need not be pixels."""
    if x.size == 0 or (x.dtype != np.uint8 and len(tuple(network.input_shape)) == 1):
        return
    convention = network.convention or resolve(network.own_convention())
    lo, hi = (float(v) for v in convention.value_range)
    got_lo, got_hi = extent(x)
    if hi <= 1 and got_lo >= 0 and got_hi > 2:
        raise InputError(
            f"{what} span [{got_lo:g}, {got_hi:g}] but the model takes images in [{lo:g}, {hi:g}]; "
            "divide them by 255 (--scale 255)"
        )


def check_scale(
    x: np.ndarray, convention: InputConvention, observed: tuple[float, float] | None = None, what: str = "the inputs"
) -> None:
    """Refuse inputs whose values are clearly on another scale than the analysis': outside its value
    range, or spanning less than a twentieth of what its training inputs spanned (e.g. values up to 1.0
    where training went to 255). One line naming the fix."""
    if x.size == 0:
        return
    lo, hi = (float(v) for v in convention.value_range)
    got_lo, got_hi = extent(x)
    span = hi - lo
    fix = (
        f"load them with the analysis' scale (--scale auto with --value-range {lo:g},{hi:g}, "
        f"or --scale none for floats already in that range)"
    )
    if got_lo < lo - 0.01 * span or got_hi > hi + 0.01 * span:
        raise InputError(
            f"{what} span [{got_lo:g}, {got_hi:g}] but the analysis takes images in [{lo:g}, {hi:g}]; "
            + ("divide them by 255 (--scale 255)" if got_hi > 2 and hi <= 1 else fix)
        )
    if observed is not None:
        seen = float(observed[1]) - float(observed[0])
        if seen > 0.5 * span and 0 < got_hi - got_lo < seen / 20:
            raise InputError(
                f"{what} span [{got_lo:g}, {got_hi:g}] but the analysis' training inputs spanned "
                f"[{observed[0]:g}, {observed[1]:g}] (images in [{lo:g}, {hi:g}]): scaled differently; " + fix
            )
