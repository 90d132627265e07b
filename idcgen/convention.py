"""The input convention of a model: the value range of the images it takes, an optional preprocessing
step between image and model, and the shape of the images the fuzzer mutates.

idcgen works in *image space*: inputs are loaded, mutated, checked for validity and exported as images
whose pixel values lie in ``value_range``. What the model does not do itself is added in front of it:
``InputConvention.wrap`` builds a new functional Keras model, image -> [Reshape to the model's input]
-> [preprocessing layers] -> the original model, so that the relevance pass, forward taps, attacks and
the weights fingerprint all see images (the preprocessing layers have no weights, except the fixed
channel flip of ``imagenet-caffe``).

Where the range comes from, first match wins: ``--value-range``; the range a ``--preprocess`` preset
expects; the model's own first layer when it is a ``Rescaling`` that maps 0..255 to a unit-size range
(``Rescaling(1/255)``, ``Rescaling(1/127.5, offset=-1)``), also inside a nested model; else [0, 1].

numpy only at import; Keras is imported inside the functions that build layers.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

import numpy as np

from .errors import InputError, ParameterError

__all__ = ["InputConvention", "Preprocess", "parse_preprocess", "parse_value_range", "parse_image_shape",
           "infer_image_shape", "from_model", "resolve", "prepare", "convention_of", "leading_preprocessing",
           "check_scale", "WRAPPER_PREFIX"]

#: name prefix of the models ``InputConvention.wrap`` builds
WRAPPER_PREFIX = "idcgen_input"
#: Keras' ``imagenet_utils.preprocess_input`` modes, for images in 0..255 (RGB):
#: name -> (mean, std, channels flipped to BGR first); the model sees (x[, ::-1] - mean) / std
PRESETS = {
    "imagenet-caffe": ((103.939, 116.779, 123.68), (1.0, 1.0, 1.0), True),
    "imagenet-torch": ((0.485 * 255, 0.456 * 255, 0.406 * 255), (0.229 * 255, 0.224 * 255, 0.225 * 255), False),
    "tf": ((127.5,), (127.5,), False),
}
_PRESET_RANGE = (0.0, 255.0)
_PREPROCESSING_KINDS = ("Rescaling", "Normalization", "Resizing", "CenterCrop", "InputLayer")


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
            raise ParameterError(f"--preprocess {self.spec} flips RGB to BGR and needs 3 channels; "
                                 f"the images have {channels}")
        for name, values in (("mean", self.mean), ("std", self.std)):
            if len(values) not in (1, channels):
                raise ParameterError(f"--preprocess {self.spec}: {len(values)} {name} values for images with "
                                     f"{channels} channels; give 1 or {channels}")

    def layers(self, channels: int) -> list:
        """Keras layers doing the same: a fixed 1x1 convolution for the channel flip, then a Rescaling."""
        import keras
        self.check_channels(channels)
        out = []
        if self.bgr:
            out.append(_ChannelFlip())
        mean, std = np.asarray(self.mean, np.float64), np.asarray(self.std, np.float64)
        scale, offset = 1.0 / std, -mean / std
        scalar = len(scale) == 1
        out.append(keras.layers.Rescaling(scale=float(scale[0]) if scalar else scale.tolist(),
                                          offset=float(offset[0]) if scalar else offset.tolist(),
                                          name=f"{WRAPPER_PREFIX}_preprocess"))
        return out

    def to_dict(self) -> dict:
        return {"spec": self.spec, "mean": list(self.mean), "std": list(self.std), "bgr": self.bgr,
                "value_range": None if self.value_range is None else list(self.value_range)}


def _ChannelFlip():
    """RGB -> BGR as a 1x1 convolution with fixed weights (a built-in layer: serialises, and LRP treats
    it as the linear layer it is)."""
    import keras
    return keras.layers.Conv2D(3, 1, use_bias=False, trainable=False, name=f"{WRAPPER_PREFIX}_bgr",
                               kernel_initializer=keras.initializers.Constant(np.eye(3)[::-1].reshape(1, 1, 3, 3)))


def parse_preprocess(spec: str | Preprocess | None) -> Preprocess | None:
    """``imagenet-caffe``, ``imagenet-torch``, ``tf`` or ``mean=M,std=S`` (M, S one number or one per
    channel: ``mean=0.485,0.456,0.406,std=0.229,0.224,0.225``); None or "" for no preprocessing."""
    if spec is None or isinstance(spec, Preprocess):
        return spec
    if not isinstance(spec, str):
        raise ParameterError(f"--preprocess must be a string such as 'tf' or 'mean=0.5,std=0.25'. Got {spec!r} instead.")
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
        raise ParameterError(f"--preprocess {spec!r}: {len(values['mean'])} mean values but "
                             f"{len(values['std'])} std values")
    canonical = "mean=" + ",".join(f"{v:g}" for v in values["mean"]) + ",std=" + ",".join(f"{v:g}" for v in values["std"])
    return Preprocess(canonical, values["mean"], values["std"])


def parse_value_range(text) -> tuple[float, float] | None:
    """``"0,255"`` -> (0.0, 255.0); a pair passes through (checked); None stays None."""
    if text is None:
        return None
    try:
        parts = [float(v) for v in text.replace(" ", "").split(",")] if isinstance(text, str) else [float(v) for v in text]
    except (TypeError, ValueError):
        parts = []
    if len(parts) != 2 or not all(math.isfinite(v) for v in parts) or parts[0] >= parts[1]:
        raise ParameterError(f"value range must be LO,HI with LO < HI (e.g. 0,255). Got {text!r} instead.")
    return float(parts[0]), float(parts[1])


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
    return tuple(dims)


def infer_image_shape(input_shape: tuple, item_shape: tuple | None = None) -> tuple[int, int, int]:
    """The image shape to mutate for a model taking ``input_shape``: the shape itself for (h, w, c);
    (h, w, 1) for (h, w); for flat (d,) the loaded inputs' own (h, w[, c]) when sizes agree, else
    (s, s, 1) when d = s * s, else (s, s, 3) when d = 3 * s * s."""
    shape = tuple(input_shape)
    if None in shape:
        raise ParameterError(f"the model takes inputs of shape {shape} with free dimensions; "
                             "give the image shape (--image-shape H,W,C)")
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
    raise ParameterError(f"cannot tell the image shape of inputs of shape {shape}; give it with --image-shape H,W,C "
                         "(H*W*C must equal the model's input size)")


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
        return {"value_range": list(self.value_range),
                "preprocess": None if self.preprocess is None else self.preprocess.spec,
                "image_shape": None if self.image_shape is None else list(self.image_shape),
                "source": self.source}

    @classmethod
    def from_dict(cls, data: dict | None) -> InputConvention:
        if not data:
            return cls()
        return cls(value_range=tuple(float(v) for v in data["value_range"]),
                   preprocess=parse_preprocess(data.get("preprocess")),
                   image_shape=None if data.get("image_shape") is None else tuple(data["image_shape"]),
                   source=data.get("source", "recorded"))

    def describe(self) -> str:
        lo, hi = self.value_range
        text = f"images in [{lo:g}, {hi:g}] ({self.source})"
        if self.preprocess is not None:
            text += f", preprocessed by {self.preprocess.spec} before the model"
        if self.image_shape is not None:
            text += f", image shape {'x'.join(map(str, self.image_shape))}"
        return text

    def needs_wrapper(self, model_input_shape: tuple) -> bool:
        return self.preprocess is not None or (self.image_shape is not None
                                               and tuple(self.image_shape) != tuple(model_input_shape))

    def wrap(self, model):
        """``model`` with what this convention puts in front of it (the model itself if nothing): a
        functional model image -> [Reshape] -> [preprocessing layers] -> ``model``."""
        import keras
        model = _inner(model)
        want = tuple(model.inputs[0].shape[1:])
        if not self.needs_wrapper(want):
            return model
        image = tuple(self.image_shape) if self.image_shape is not None else want
        if self.image_shape is not None and None not in want and int(np.prod(image)) != int(np.prod(want)):
            raise ParameterError(f"image shape {image} holds {int(np.prod(image))} values but the model takes "
                                 f"{want} ({int(np.prod(want))} values); give a matching --image-shape")
        inputs = keras.Input(image, name=f"{WRAPPER_PREFIX}_image")
        x = inputs
        if self.preprocess is not None:
            for layer in self.preprocess.layers(image[-1]):
                x = layer(x)
        if image != want:
            x = keras.layers.Reshape(want, name=f"{WRAPPER_PREFIX}_reshape")(x)
        wrapped = keras.Model(inputs, model(x), name=f"{WRAPPER_PREFIX}_{model.name}")
        wrapped._idcgen_convention = self
        wrapped._idcgen_inner = model
        return wrapped


def _inner(model):
    """The user's Keras model under a Network and under idcgen's own wrapper."""
    model = getattr(model, "model", model) if not _is_keras_model(model) else model
    return getattr(model, "_idcgen_inner", model)


def _is_keras_model(obj) -> bool:
    return hasattr(obj, "inputs") and hasattr(obj, "layers")


def convention_of(model) -> InputConvention | None:
    """The convention a model was wrapped with by ``InputConvention.wrap`` (None for any other model)."""
    model = getattr(model, "model", model) if not _is_keras_model(model) else model
    return getattr(model, "_idcgen_convention", None)


def leading_preprocessing(model) -> list:
    """The layers a model starts with that prepare its input (Rescaling, Normalization, Resizing,
    CenterCrop), looking into a nested model that comes first."""
    found, model = [], _inner(model)
    for layer in model.layers:
        kind = type(layer).__name__
        if kind == "InputLayer":
            continue
        if hasattr(layer, "layers") and hasattr(layer, "inputs"):  # a nested model: its own first layers
            found += leading_preprocessing(layer)
            break
        if kind not in _PREPROCESSING_KINDS:
            break
        found.append(layer)
    return found


def _rescaling_range(layer) -> tuple[float, float] | None:
    """(0, 255) when a Rescaling layer maps 0..255 onto a span of about 1 or 2 (1/255, 1/127.5 with
    offset -1, or per-channel alike); None otherwise."""
    scale = np.atleast_1d(np.asarray(layer.scale, np.float64))
    span = 255.0 * scale
    if np.all((np.abs(span - 1) < 0.02) | (np.abs(span - 2) < 0.04)):
        return (0.0, 255.0)
    return None


def from_model(model) -> InputConvention:
    """The convention read from the model: 0..255 when it starts with a Rescaling that maps 0..255 to a
    unit-size range (also inside a nested model), else [0, 1]."""
    leading = leading_preprocessing(model)
    names = tuple(f"{type(layer).__name__} {layer.name!r}" for layer in leading)
    for layer in leading:
        if type(layer).__name__ == "Rescaling":
            found = _rescaling_range(layer)
            if found is not None:
                scale = np.atleast_1d(np.asarray(layer.scale, np.float64))
                offset = np.atleast_1d(np.asarray(layer.offset, np.float64))
                how = f"scale {scale[0]:.6g}" + (f", offset {offset[0]:g}" if np.any(offset != 0) else "")
                return InputConvention(found, source=f"read from the model's Rescaling layer {layer.name!r}, {how}",
                                       model_layers=names)
            break
    return InputConvention(model_layers=names)


def resolve(model, *, value_range=None, preprocess=None, image_shape=None, recorded: InputConvention | None = None
            ) -> InputConvention:
    """The convention for ``model`` from explicit choices, else a recorded one (an analysis'), else the
    model's own layers. An explicit choice that contradicts ``recorded`` is refused."""
    value_range = parse_value_range(value_range)
    pre = parse_preprocess(preprocess)
    image_shape = parse_image_shape(image_shape)
    if recorded is not None:
        if value_range is not None and value_range != tuple(recorded.value_range):
            raise ParameterError(f"--value-range {value_range[0]:g},{value_range[1]:g} differs from the analysis' "
                                 f"[{recorded.value_range[0]:g}, {recorded.value_range[1]:g}]; drop it or analyse again")
        if pre is not None and (recorded.preprocess is None or pre.spec != recorded.preprocess.spec):
            raise ParameterError(f"--preprocess {pre.spec} differs from the analysis' "
                                 f"({recorded.preprocess.spec if recorded.preprocess else 'none'}); drop it or analyse again")
        return replace(recorded, image_shape=image_shape or recorded.image_shape)
    own = from_model(model)
    if pre is not None:
        if any(type(layer).__name__ in ("Rescaling", "Normalization") for layer in leading_preprocessing(model)):
            raise ParameterError(f"the model starts with its own preprocessing ({', '.join(own.model_layers)}); "
                                 f"--preprocess {pre.spec} would scale the inputs twice: drop it")
        if pre.value_range is not None:
            if value_range is not None and value_range != pre.value_range:
                raise ParameterError(f"--preprocess {pre.spec} takes images in [{pre.value_range[0]:g}, "
                                     f"{pre.value_range[1]:g}]; --value-range {value_range[0]:g},{value_range[1]:g} "
                                     "contradicts it: drop one")
            return InputConvention(pre.value_range, pre, image_shape, f"--preprocess {pre.spec}", own.model_layers)
    if value_range is not None:
        return InputConvention(value_range, pre, image_shape, "--value-range", own.model_layers)
    return replace(own, preprocess=pre, image_shape=image_shape)


def prepare(model, *, value_range=None, preprocess=None, image_shape=None,
            recorded: InputConvention | None = None):
    """(Keras model to measure, its convention): ``model`` (a Keras model or a Network) wrapped with
    what the resolved convention puts in front of it. A model idcgen already wrapped keeps its convention
    unless a choice given here changes it."""
    current = convention_of(model)
    if current is not None and recorded is None:
        recorded = current
    convention = resolve(_inner(model), value_range=value_range, preprocess=preprocess, image_shape=image_shape,
                         recorded=recorded)
    if current is not None and current == convention:
        return getattr(model, "model", model) if not _is_keras_model(model) else model, convention
    return convention.wrap(_inner(model)), convention


def check_scale(x: np.ndarray, convention: InputConvention, observed: tuple[float, float] | None = None,
                what: str = "the inputs") -> None:
    """Refuse inputs whose values are clearly on another scale than the analysis': outside its value
    range, or spanning less than a twentieth of what its training inputs spanned (e.g. values up to 1.0
    where training went to 255). One line naming the fix."""
    if x.size == 0:
        return
    lo, hi = (float(v) for v in convention.value_range)
    got_lo, got_hi = float(np.min(x)), float(np.max(x))
    span = hi - lo
    fix = (f"load them with the analysis' scale (--scale auto with --value-range {lo:g},{hi:g}, "
           f"or --scale none for floats already in that range)")
    if got_lo < lo - 0.01 * span or got_hi > hi + 0.01 * span:
        raise InputError(f"{what} span [{got_lo:g}, {got_hi:g}] but the analysis takes images in [{lo:g}, {hi:g}]; "
                         + ("divide them by 255 (--scale 255)" if got_hi > 2 and hi <= 1 else fix))
    if observed is not None:
        seen = float(observed[1]) - float(observed[0])
        if seen > 0.5 * span and 0 < got_hi - got_lo < seen / 20:
            raise InputError(f"{what} span [{got_lo:g}, {got_hi:g}] but the analysis' training inputs spanned "
                             f"[{observed[0]:g}, {observed[1]:g}] (images in [{lo:g}, {hi:g}]): scaled differently; "
                             + fix)
