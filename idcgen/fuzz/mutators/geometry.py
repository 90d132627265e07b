"""Batched image transforms with their own parameters for every image.

albumentations applies one parameter draw to a whole call, and calling it image by image costs
0.1-0.3 ms of Python per image, ten times a LeNet-5 forward pass. The affine and photometric mutators
therefore do albumentations' arithmetic for the whole batch at once:

- affine matrices by albumentations' ``Affine`` formula (about the centre ``(w/2 - 0.5, h/2 - 0.5)``:
  scale, then rotate, shear, translate), applied as ``cv2.warpAffine`` would (bilinear, zero fill) by
  one ``cv2.remap`` over the batch laid out as one tall image;
- brightness ``x + beta``, contrast ``x * alpha`` and Gaussian noise, as albumentations'
  ``RandomBrightnessContrast`` and ``GaussNoise`` compute them on float images.

The tests compare every transform with albumentations given the same parameters.
"""

from __future__ import annotations

import numpy as np

from ...threads import run_parts

#: zero border around each image in the remap canvas; source points further out are clamped into it
_PAD = 2
#: rows per canvas: float32 coordinates below 1,024 resolve 1/8,000 of a pixel (and OpenCV's remap
#: needs fewer than 32,767)
_MAX_ROWS = 1_024


def affine_matrices(
    height: int, width: int, *, rotate=0.0, scale=1.0, shear_x=0.0, shear_y=0.0, translate_x=0.0, translate_y=0.0
) -> np.ndarray:
    """(b, 2, 3) forward matrices (source -> destination pixel), as albumentations' ``Affine`` builds
    them: angles in degrees (rotation counter-clockwise on screen, as in albumentations), translations
    in pixels. Each argument is a scalar or a (b,) array."""
    args = np.broadcast_arrays(
        *(np.asarray(a, np.float64) for a in (rotate, scale, shear_x, shear_y, translate_x, translate_y))
    )
    rotate, scale, shear_x, shear_y, tx, ty = (np.atleast_1d(a) for a in args)
    angle = np.deg2rad(rotate % 360)
    cos, sin = np.cos(angle), np.sin(angle)
    tan_x, tan_y = np.tan(np.deg2rad(shear_x)), np.tan(np.deg2rad(shear_y))
    # linear part: shear @ rotation @ scale
    linear = np.empty((len(cos), 2, 2))
    linear[:, 0, 0] = (cos - tan_x * sin) * scale
    linear[:, 0, 1] = (sin + tan_x * cos) * scale
    linear[:, 1, 0] = (tan_y * cos - sin) * scale
    linear[:, 1, 1] = (tan_y * sin + cos) * scale
    centre = np.array([width / 2 - 0.5, height / 2 - 0.5])
    shift = np.stack([tx, ty], axis=1) + centre - linear @ centre
    return np.concatenate([linear, shift[:, :, None]], axis=2)


def _invert(matrices: np.ndarray) -> np.ndarray:
    """Inverses of (b, 2, 3) affine matrices (destination -> source)."""
    a, b, c, d = (matrices[:, i, j] for i, j in ((0, 0), (0, 1), (1, 0), (1, 1)))
    det = a * d - b * c
    inv = np.empty_like(matrices)
    inv[:, 0, 0], inv[:, 0, 1], inv[:, 1, 0], inv[:, 1, 1] = d / det, -b / det, -c / det, a / det
    inv[:, :, 2] = -np.einsum("bij,bj->bi", inv[:, :, :2], matrices[:, :, 2])
    return inv


def warp_affine(images: np.ndarray, matrices: np.ndarray) -> np.ndarray:
    """Warp each image (b, h, w, c) float32 by its own matrix (b, 2, 3): bilinear, zero outside, as
    ``cv2.warpAffine(image, matrix, (w, h), INTER_LINEAR, BORDER_CONSTANT, 0)``.

    The images are stacked, each inside a zero border, into tall canvases of up to ``_MAX_ROWS`` rows;
    one remap per canvas reads every output pixel from its own image's source point. Canvases are
    spread over two threads."""
    b, h, w, c = images.shape
    per_canvas = max(1, _MAX_ROWS // (h + 2 * _PAD))
    inverse = _invert(np.asarray(matrices, np.float64)).astype(np.float32)
    out = np.empty_like(images)
    run_parts(lambda start: _warp_canvas(images, inverse, out, start, per_canvas), range(0, b, per_canvas))
    return out


def _warp_canvas(images: np.ndarray, inverse: np.ndarray, out: np.ndarray, start: int, size: int) -> None:
    """Warp images[start:start + size] by their inverse matrices into out, as one canvas."""
    import cv2

    images, inverse = images[start : start + size], inverse[start : start + size]
    n, h, w, c = images.shape
    rows, cols = h + 2 * _PAD, w + 2 * _PAD
    xs, ys = np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32)
    # source point of every output pixel; points beyond the image are clamped into its zero border
    sx = (inverse[:, 0, 0, None] * xs + inverse[:, 0, 2, None])[:, None, :] + (inverse[:, 0, 1, None] * ys)[:, :, None]
    sy = (inverse[:, 1, 0, None] * xs)[:, None, :] + (inverse[:, 1, 1, None] * ys + inverse[:, 1, 2, None])[:, :, None]
    np.clip(sx, -1.5, w + 0.5, out=sx)
    np.clip(sy, -1.5, h + 0.5, out=sy)
    sx += _PAD
    sy += (_PAD + rows * np.arange(n, dtype=np.float32))[:, None, None]  # image i's block of the canvas
    map_x, map_y = sx.reshape(n * h, w), sy.reshape(n * h, w)
    c0 = 0
    for k in _channel_groups(c):
        canvas = np.zeros((n, rows, cols, k), np.float32)
        canvas[:, _PAD : _PAD + h, _PAD : _PAD + w] = images[..., c0 : c0 + k]
        warped = cv2.remap(
            canvas.reshape(n * rows, cols, k),
            map_x,
            map_y,
            cv2.INTER_LINEAR,
            borderMode=cv2.BORDER_CONSTANT,
            borderValue=0,
        )
        out[start : start + n, :, :, c0 : c0 + k] = warped.reshape(n, h, w, k)
        c0 += k


def _channel_groups(channels: int) -> list[int]:
    """Split channels into remap calls of 4, 3 or 1: OpenCV takes at most 4, and OpenCV 5 interpolates
    2-channel images in fixed point (to 1/32 pixel), the others in floating point."""
    groups = []
    while channels > 0:
        k = 4 if channels >= 4 and channels != 6 else 3 if channels >= 3 else 1
        groups.append(k)
        channels -= k
    return groups


def per_image(values: np.ndarray) -> np.ndarray:
    """(b,) values shaped (b, 1, 1, 1) to broadcast over images."""
    return np.asarray(values, np.float32).reshape(-1, 1, 1, 1)
