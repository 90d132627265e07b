"""The input convention on a Keras model: read from its leading layers, and put in front of it.

``wrap`` builds a new functional model, image -> [Reshape to the model's input] -> [preprocessing layers] ->
the original model (docs/design.md, "Input conventions"); the numpy side of the convention is
:mod:`idcgen.convention`.
"""

from __future__ import annotations

import numpy as np

from ..convention import PREPROCESSING_KINDS, WRAPPER_PREFIX, InputConvention, Preprocess
from ..errors import ParameterError

__all__ = ["preprocess_layers", "wrap", "leading_preprocessing", "from_model", "prepare"]


def preprocess_layers(preprocess: Preprocess, channels: int) -> list:
    """Keras layers computing ``preprocess``: a fixed 1x1 convolution for the channel flip, then a Rescaling."""
    import keras

    preprocess.check_channels(channels)
    out = []
    if preprocess.bgr:
        out.append(_channel_flip())
    mean, std = np.asarray(preprocess.mean, np.float64), np.asarray(preprocess.std, np.float64)
    scale, offset = 1.0 / std, -mean / std
    scalar = len(scale) == 1
    out.append(
        keras.layers.Rescaling(
            scale=float(scale[0]) if scalar else scale.tolist(),
            offset=float(offset[0]) if scalar else offset.tolist(),
            name=f"{WRAPPER_PREFIX}_preprocess",
        )
    )
    return out


def _channel_flip():
    """RGB -> BGR as a 1x1 convolution with fixed weights (a built-in layer: serialises, and LRP treats
    it as the linear layer it is)."""
    import keras

    return keras.layers.Conv2D(
        3,
        1,
        use_bias=False,
        trainable=False,
        name=f"{WRAPPER_PREFIX}_bgr",
        kernel_initializer=keras.initializers.Constant(np.eye(3)[::-1].reshape(1, 1, 3, 3)),
    )


def wrap(model, convention: InputConvention):
    """``model`` with what ``convention`` puts in front of it (the model itself if nothing): a functional
    model image -> [Reshape] -> [preprocessing layers] -> ``model``."""
    import keras

    want = tuple(model.inputs[0].shape[1:])
    if not convention.needs_wrapper(want):
        return model
    image = tuple(convention.image_shape) if convention.image_shape is not None else want
    if convention.image_shape is not None and None not in want and int(np.prod(image)) != int(np.prod(want)):
        raise ParameterError(
            f"image shape {image} holds {int(np.prod(image))} values but the model takes "
            f"{want} ({int(np.prod(want))} values); give a matching --image-shape"
        )
    inputs = keras.Input(image, name=f"{WRAPPER_PREFIX}_image")
    x = inputs
    if convention.preprocess is not None:
        for layer in preprocess_layers(convention.preprocess, image[-1]):
            x = layer(x)
    if image != want:
        x = keras.layers.Reshape(want, name=f"{WRAPPER_PREFIX}_reshape")(x)
    return keras.Model(inputs, model(x), name=f"{WRAPPER_PREFIX}_{model.name}")


def _user_model(model):
    """The user's Keras model under a Network."""
    return getattr(model, "inner", model)


def leading_preprocessing(model) -> list:
    """The layers a model starts with that prepare its input (Rescaling, Normalization, Resizing,
    CenterCrop), looking into a nested model that comes first."""
    found, model = [], _user_model(model)
    for layer in model.layers:
        kind = type(layer).__name__
        if kind == "InputLayer":
            continue
        if hasattr(layer, "layers") and hasattr(layer, "inputs"):  # a nested model: its own first layers
            found += leading_preprocessing(layer)
            break
        if kind not in PREPROCESSING_KINDS:
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


def _normalization_range(layer) -> tuple[tuple[float, float], str] | None:
    """((0, 255), how) when a Normalization layer's mean and standard deviation are in 0..255 units
    (ConvNeXt's ImageNet statistics 123.675, 116.28, 103.53 and 58.4, 57.1, 57.4): every mean above 1 and at
    most 255, every deviation above 1; statistics in 0..1 units (EfficientNet's, after its Rescaling)
    are not. None otherwise, or for an inverting Normalization."""
    if getattr(layer, "invert", False) or getattr(layer, "mean", None) is None:
        return None
    mean = np.ravel(np.asarray(layer.mean, np.float64))
    std = np.sqrt(np.ravel(np.asarray(layer.variance, np.float64)))
    if mean.size and np.all((mean > 1) & (mean <= 255)) and np.all(std > 1):
        shown = lambda v: ", ".join(f"{a:.6g}" for a in v[:3]) + (" ..." if v.size > 3 else "")  # noqa: E731
        return (0.0, 255.0), f"mean {shown(mean)}, std {shown(std)}: 0..255 units"
    return None


def from_model(model) -> InputConvention:
    """The convention read from the model: 0..255 when it starts with a Rescaling that maps 0..255 to a
    unit-size range, or with a Normalization whose mean and variance are in 0..255 units (also inside a
    nested model), else [0, 1]."""
    leading = leading_preprocessing(model)
    names = tuple(f"{type(layer).__name__} {layer.name!r}" for layer in leading)
    for layer in leading:
        if type(layer).__name__ == "Normalization":
            found = _normalization_range(layer)
            if found is not None:
                return InputConvention(
                    found[0],
                    source=f"read from the model's Normalization layer {layer.name!r}, {found[1]}",
                    model_layers=names,
                )
            break
        if type(layer).__name__ == "Rescaling":
            found = _rescaling_range(layer)
            if found is not None:
                scale = np.atleast_1d(np.asarray(layer.scale, np.float64))
                offset = np.atleast_1d(np.asarray(layer.offset, np.float64))
                how = f"scale {scale[0]:.6g}" + (f", offset {offset[0]:g}" if np.any(offset != 0) else "")
                return InputConvention(
                    found, source=f"read from the model's Rescaling layer {layer.name!r}, {how}", model_layers=names
                )
            break
    return InputConvention(model_layers=names)


def prepare(model, *, value_range=None, preprocess=None, image_shape=None, recorded: InputConvention | None = None):
    """(Keras model to measure, its convention): :func:`idcgen.framework.network_with_convention` on a Keras
    model or a Network, as the Keras model it runs."""
    from . import network_with_convention

    network, convention = network_with_convention(
        model, value_range=value_range, preprocess=preprocess, image_shape=image_shape, recorded=recorded
    )
    return network.model, convention
