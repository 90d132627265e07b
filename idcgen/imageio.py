"""Rounding inputs to what an 8-bit image file holds, and writing previews."""

from __future__ import annotations

import numpy as np
from PIL import Image


def to_uint8(x: np.ndarray, value_range=(0.0, 1.0)) -> np.ndarray:
    lo, hi = value_range
    return np.clip(np.rint((np.asarray(x) - lo) / (hi - lo) * 255), 0, 255).astype(np.uint8)


def quantise(x: np.ndarray, value_range=(0.0, 1.0)) -> np.ndarray:
    """Round to the 256 levels a uint8 image can hold, back in the same value range (float32)."""
    lo, hi = value_range
    return (to_uint8(x, value_range).astype(np.float32) / 255 * (hi - lo) + lo).astype(np.float32)


def to_png(x: np.ndarray, value_range=(0.0, 1.0)) -> Image.Image:
    img = to_uint8(x, value_range)
    return Image.fromarray(img[..., 0] if img.shape[-1] == 1 else img)
