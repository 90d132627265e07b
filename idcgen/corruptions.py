"""The 15 common corruptions of CIFAR-10-C / ImageNet-C (Hendrycks & Dietterich, ICLR 2019), 5 severities each,
built locally and deterministically from a test set (``harden``'s corruption suite).

The definitions and per-severity constants are those of CIFAR-10-C (``make_cifar_c.py``, made for 32 x 32
images; its constants are ``SEVERITY``, checked against the published script, hendrycks/robustness
``ImageNet-C/create_c/make_cifar_c.py``), with the helpers of the ``imagecorruptions`` package (Michaelis et
al., 2019: the numpy motion blur that replaces ImageMagick's in motion blur and snow). The corrupted images
are truncated to 8 bits as the script stores them (``np.uint8``). That package is not
imported: its release 1.1.2 needs ``pkg_resources`` and scikit-image's removed ``multichannel`` argument, so
it does not import on this stack. Differences, all deliberate:

- every random draw comes from one ``numpy.random.Generator`` seeded by (random_state, corruption,
  severity), so a suite is the same on every run and for every model measured on it;
- sizes follow the image: ``elastic_transform``'s constants are fractions of the image side (CIFAR's 32),
  fog's fractal is the next power of two above the side, glass blur shuffles the whole image;
- grayscale images (one channel) go through every corruption as three equal channels and come back as
  their mean: all 15 apply (none is about colour; ``saturate``, which is, is a validation corruption and
  not in the suite). Brightness then adds to the value, and frost's picture is greyed by the mean;
- ``frost`` overlays photographs of frost that ship only with the ``imagecorruptions`` distribution: they
  are read from it where it is installed (``pip install --no-deps imagecorruptions==1.1.2``; nothing is
  downloaded at run time), and frost is left out of the suite, and said, where it is not.
"""

from __future__ import annotations

import importlib.util
import math
import zlib
from io import BytesIO
from pathlib import Path

import cv2
import numpy as np
from PIL import Image
from scipy.ndimage import gaussian_filter, map_coordinates
from scipy.ndimage import zoom as scizoom

from .errors import InputError

CORRUPTIONS = (
    "gaussian_noise",
    "shot_noise",
    "impulse_noise",
    "defocus_blur",
    "glass_blur",
    "motion_blur",
    "zoom_blur",
    "snow",
    "frost",
    "fog",
    "brightness",
    "contrast",
    "elastic_transform",
    "pixelate",
    "jpeg_compression",
)
SEVERITIES = (1, 2, 3, 4, 5)

#: The per-severity constants of make_cifar_c.py (hendrycks/robustness, ImageNet-C/create_c/, the CIFAR-10-C
#: script, for 32 x 32 images), checked against it value by value; severity s is entry s - 1.
#: zoom_blur: the end of np.arange(1, end, 0.01), the zoom factors averaged; elastic_transform: fractions of the
#: image side (the script multiplies them by IMSIZE = 32).
SEVERITY: dict[str, tuple] = {
    "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),  # the noise's standard deviation
    "shot_noise": (500, 250, 100, 75, 50),  # Poisson rate per unit of intensity
    "impulse_noise": (0.01, 0.02, 0.03, 0.05, 0.07),  # fraction of values set to 0 or 1
    "defocus_blur": ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)),  # disk radius, alias blur
    "glass_blur": ((0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2)),  # sigma, delta, passes
    "motion_blur": ((6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)),  # radius, sigma
    "zoom_blur": (1.06, 1.11, 1.16, 1.21, 1.26),
    "snow": (
        (0.1, 0.2, 1, 0.6, 8, 3, 0.95),
        (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
        (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9),
        (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
        (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8),
    ),  # mean, std, zoom, threshold, blur radius, blur sigma, weight of the image
    "frost": ((1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45)),  # weight of the image, of the frost
    "fog": ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)),  # fog's weight, the fractal's wibble decay
    "brightness": (0.05, 0.1, 0.15, 0.2, 0.3),  # added to HSV value
    "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),  # factor on the distance from the channel mean
    "elastic_transform": (
        (0, 0, 0.08),
        (0.05, 0.2, 0.07),
        (0.08, 0.06, 0.06),
        (0.1, 0.04, 0.05),
        (0.1, 0.03, 0.03),
    ),  # displacement scale, its smoothing sigma, the affine jitter
    "pixelate": (0.95, 0.9, 0.85, 0.75, 0.65),  # side of the box-downsampled image, a fraction
    "jpeg_compression": (80, 65, 58, 50, 40),  # JPEG quality
}


def _gaussian(x: np.ndarray, sigma: float) -> np.ndarray:
    """skimage.filters.gaussian(x, sigma, channel_axis=-1) on float images: per channel, mode 'nearest', truncate 4."""
    if x.ndim == 3:
        return gaussian_filter(x, sigma=(sigma, sigma, 0), mode="nearest", truncate=4.0)
    return gaussian_filter(x, sigma=sigma, mode="nearest", truncate=4.0)


def _disk(radius: float, alias_blur: float = 0.1) -> np.ndarray:
    size = np.arange(-8, 9) if radius <= 8 else np.arange(-radius, radius + 1)
    ksize = (3, 3) if radius <= 8 else (5, 5)
    xx, yy = np.meshgrid(size, size)
    disk = np.array((xx**2 + yy**2) <= radius**2, dtype=np.float32)
    disk /= disk.sum()
    return cv2.GaussianBlur(disk, ksize=ksize, sigmaX=alias_blur)


def _plasma_fractal(rng: np.random.Generator, mapsize: int, wibbledecay: float) -> np.ndarray:
    """Diamond-square heightmap in [0, 1], ``mapsize`` a power of two."""
    maparray = np.zeros((mapsize, mapsize), dtype=np.float64)
    stepsize, wibble = mapsize, 100.0

    def wibbledmean(array):
        return array / 4 + wibble * rng.uniform(-wibble, wibble, array.shape)

    while stepsize >= 2:
        corners = maparray[0:mapsize:stepsize, 0:mapsize:stepsize]
        square = corners + np.roll(corners, shift=-1, axis=0)
        square += np.roll(square, shift=-1, axis=1)
        half = stepsize // 2
        maparray[half:mapsize:stepsize, half:mapsize:stepsize] = wibbledmean(square)
        dr = maparray[half:mapsize:stepsize, half:mapsize:stepsize]
        ul = maparray[0:mapsize:stepsize, 0:mapsize:stepsize]
        maparray[0:mapsize:stepsize, half:mapsize:stepsize] = wibbledmean(
            dr + np.roll(dr, 1, axis=0) + ul + np.roll(ul, -1, axis=1)
        )
        maparray[half:mapsize:stepsize, 0:mapsize:stepsize] = wibbledmean(
            dr + np.roll(dr, 1, axis=1) + ul + np.roll(ul, -1, axis=0)
        )
        stepsize //= 2
        wibble /= wibbledecay
    maparray -= maparray.min()
    return maparray / maparray.max()


def _clipped_zoom(img: np.ndarray, factor: float) -> np.ndarray:
    h, w = img.shape[:2]
    ch, cw = int(np.ceil(h / factor)), int(np.ceil(w / factor))
    top, left = (h - ch) // 2, (w - cw) // 2
    zoomed = scizoom(img[top : top + ch, left : left + cw], (factor, factor, 1), order=1)
    trim_top, trim_left = (zoomed.shape[0] - h) // 2, (zoomed.shape[1] - w) // 2
    return zoomed[trim_top : trim_top + h, trim_left : trim_left + w]


def _shift(image: np.ndarray, dx: int, dy: int) -> np.ndarray:
    shifted = image
    if dx < 0:
        shifted = np.roll(image, shift=image.shape[1] + dx, axis=1)
        shifted[:, dx:] = shifted[:, dx - 1 : dx]
    elif dx > 0:
        shifted = np.roll(image, shift=dx, axis=1)
        shifted[:, :dx] = shifted[:, dx : dx + 1]
    if dy < 0:
        shifted = np.roll(shifted, shift=image.shape[0] + dy, axis=0)
        shifted[dy:, :] = shifted[dy - 1 : dy, :]
    elif dy > 0:
        shifted = np.roll(shifted, shift=dy, axis=0)
        shifted[:dy, :] = shifted[dy : dy + 1, :]
    return shifted


def _motion_blur(x: np.ndarray, radius: int, sigma: float, angle: float) -> np.ndarray:
    """imagecorruptions' numpy stand-in for ImageMagick's motion blur: a one-sided Gaussian along ``angle``."""
    width = radius * 2 + 1
    kernel = np.exp(-(np.arange(width) ** 2) / (2 * sigma**2))
    kernel /= kernel.sum()
    point = (width * np.sin(np.deg2rad(angle)), width * np.cos(np.deg2rad(angle)))
    hypot = math.hypot(*point)
    blurred = np.zeros_like(x, dtype=np.float32)
    for i in range(width):
        dy = -math.ceil(((i * point[0]) / hypot) - 0.5)
        dx = -math.ceil(((i * point[1]) / hypot) - 0.5)
        if abs(dy) >= x.shape[0] or abs(dx) >= x.shape[1]:
            break
        blurred = blurred + kernel[i] * _shift(x, dx, dy)
    return blurred


def _to_pil(x: np.ndarray) -> Image.Image:
    return Image.fromarray(np.uint8(np.clip(x, 0, 1) * 255 + 0.5))


def _rgb2gray(x: np.ndarray) -> np.ndarray:
    """cv2.cvtColor(x, cv2.COLOR_RGB2GRAY) on a float image (ITU-R BT.601 weights), as make_cifar_c.py's snow."""
    return x @ np.array([0.299, 0.587, 0.114], dtype=x.dtype)


# Each corruption takes one (h, w, 3) float image in [0, 1] and returns it corrupted, in [0, 1] (before clipping).
def gaussian_noise(x, s, rng):
    c = SEVERITY["gaussian_noise"][s - 1]
    return x + rng.normal(size=x.shape, scale=c)


def shot_noise(x, s, rng):
    c = SEVERITY["shot_noise"][s - 1]
    return rng.poisson(x * c) / c


def impulse_noise(x, s, rng):
    """Salt and pepper on each value, as skimage.util.random_noise(mode='s&p', amount=c) draws it."""
    c = SEVERITY["impulse_noise"][s - 1]
    flipped = rng.random(x.shape) < c
    salted = rng.random(x.shape) < 0.5
    out = x.copy()
    out[flipped & salted] = 1.0
    out[flipped & ~salted] = 0.0
    return out


def defocus_blur(x, s, rng):
    c = SEVERITY["defocus_blur"][s - 1]
    kernel = _disk(radius=c[0], alias_blur=c[1])
    return np.stack([cv2.filter2D(x[:, :, d].astype(np.float32), -1, kernel) for d in range(3)], axis=-1)


def glass_blur(x, s, rng):
    c = SEVERITY["glass_blur"][s - 1]
    h, w = x.shape[:2]
    img = np.uint8(np.clip(_gaussian(x, c[0]), 0, 1) * 255)
    rows, cols = range(h - c[1], c[1], -1), range(w - c[1], c[1], -1)
    steps = rng.integers(-c[1], c[1], size=(c[2], len(rows), len(cols), 2))
    for it in range(c[2]):
        for i, hh in enumerate(rows):
            for j, ww in enumerate(cols):
                dx, dy = steps[it, i, j]
                # the published "swap" (x[h, w], x[h', w'] = x[h', w'], x[h, w] on numpy views) copies the
                # neighbour into (h, w) and leaves the neighbour as it was: kept, as CIFAR-10-C was made so
                img[hh, ww] = img[hh + dy, ww + dx]
    return _gaussian(img / 255.0, c[0])


def motion_blur(x, s, rng):
    c = SEVERITY["motion_blur"][s - 1]  # make_cifar_c.py's ImageMagick radius and sigma
    return _motion_blur(x, radius=c[0], sigma=c[1], angle=rng.uniform(-45, 45))


def zoom_blur(x, s, rng):
    factors = np.arange(1, SEVERITY["zoom_blur"][s - 1], 0.01)
    x = x.astype(np.float32)
    out = np.zeros_like(x)
    for factor in factors:
        out += _clipped_zoom(x, factor)
    return (x + out) / (len(factors) + 1)


def snow(x, s, rng):
    c = SEVERITY["snow"][s - 1]
    x = x.astype(np.float32)
    layer = rng.normal(size=x.shape[:2], loc=c[0], scale=c[1])
    layer = _clipped_zoom(layer[..., np.newaxis], c[2])
    layer[layer < c[3]] = 0
    layer = _motion_blur(np.clip(layer.squeeze(-1), 0, 1), radius=c[4], sigma=c[5], angle=rng.uniform(-135, -45))
    layer = (np.round(layer * 255) / 255.0)[..., np.newaxis]
    gray = _rgb2gray(x)[..., np.newaxis]
    x = c[6] * x + (1 - c[6]) * np.maximum(x, gray * 1.5 + 0.5)
    return x + layer + np.rot90(layer, k=2)


_FROST: list[np.ndarray] | None = None


def frost_pictures() -> list[np.ndarray]:
    """The six frost photographs (RGB, [0, 1]) from an installed ``imagecorruptions`` distribution, found
    without importing it; [] where it is not installed."""
    global _FROST
    if _FROST is None:
        spec = importlib.util.find_spec("imagecorruptions")
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        names = ["frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg", "frost6.jpg"]
        paths = [Path(folders[0]) / "frost" / n for n in names] if folders else []
        found = [cv2.imread(str(p)) for p in paths if p.exists()]
        _FROST = [f[..., ::-1].astype(np.float32) / 255.0 for f in found if f is not None]
    return _FROST


def frost(x, s, rng):
    c = SEVERITY["frost"][s - 1]
    pictures = frost_pictures()
    picture = pictures[int(rng.integers(min(5, len(pictures))))]
    h, w = x.shape[:2]
    # CIFAR-10-C shrinks the pictures to a fifth for 32-pixel images; the same fraction of the image side here
    scale = 0.2 * max(h, w) / 32
    small = cv2.resize(picture, (0, 0), fx=scale, fy=scale)  # cv2's default (bilinear), as published
    if small.shape[0] <= h or small.shape[1] <= w:
        small = cv2.resize(picture, (max(w + 1, small.shape[1]), max(h + 1, small.shape[0])))
    top, left = int(rng.integers(0, small.shape[0] - h)), int(rng.integers(0, small.shape[1] - w))
    return c[0] * x + c[1] * small[top : top + h, left : left + w]


def fog(x, s, rng):
    c = SEVERITY["fog"][s - 1]
    h, w = x.shape[:2]
    max_val = x.max()
    mapsize = 1 << (max(h, w) - 1).bit_length()
    x = x + c[0] * _plasma_fractal(rng, mapsize, c[1])[:h, :w][..., np.newaxis]
    return x * max_val / (max_val + c[0])


def brightness(x, s, rng):
    c = SEVERITY["brightness"][s - 1]
    hsv = cv2.cvtColor(x.astype(np.float32), cv2.COLOR_RGB2HSV)
    hsv[:, :, 2] = np.clip(hsv[:, :, 2] + c, 0, 1)
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)


def contrast(x, s, rng):
    c = SEVERITY["contrast"][s - 1]
    means = x.mean(axis=(0, 1), keepdims=True)
    return (x - means) * c + means


def elastic_transform(x, s, rng):
    h, w = x.shape[:2]
    side = min(h, w)  # CIFAR-10-C's IMSIZE (32)
    c = tuple(side * v for v in SEVERITY["elastic_transform"][s - 1])
    image = x.astype(np.float32)
    center = np.float32((h, w)) // 2
    square = side // 3
    pts1 = np.float32([center + square, [center[0] + square, center[1] - square], center - square])
    pts2 = pts1 + rng.uniform(-c[2], c[2], size=pts1.shape).astype(np.float32)
    matrix = cv2.getAffineTransform(pts1, pts2)
    image = cv2.warpAffine(image, matrix, (w, h), borderMode=cv2.BORDER_REFLECT_101)
    dx = (gaussian_filter(rng.uniform(-1, 1, size=(h, w)), c[1], mode="reflect", truncate=3) * c[0]).astype(np.float32)
    dy = (gaussian_filter(rng.uniform(-1, 1, size=(h, w)), c[1], mode="reflect", truncate=3) * c[0]).astype(np.float32)
    gx, gy, gz = np.meshgrid(np.arange(w), np.arange(h), np.arange(3))
    indices = (
        np.reshape(gy + dy[..., None], (-1, 1)),
        np.reshape(gx + dx[..., None], (-1, 1)),
        np.reshape(gz, (-1, 1)),
    )
    return map_coordinates(image, indices, order=1, mode="reflect").reshape(image.shape)


def pixelate(x, s, rng):
    c = SEVERITY["pixelate"][s - 1]
    h, w = x.shape[:2]
    img = _to_pil(x).resize((int(w * c), int(h * c)), Image.Resampling.BOX).resize((w, h), Image.Resampling.BOX)
    return np.asarray(img, dtype=np.float32) / 255.0


def jpeg_compression(x, s, rng):
    c = SEVERITY["jpeg_compression"][s - 1]
    buffer = BytesIO()
    _to_pil(x).save(buffer, "JPEG", quality=c)
    return np.asarray(Image.open(buffer).convert("RGB"), dtype=np.float32) / 255.0


_FUNCTIONS = {f.__name__: f for f in (gaussian_noise, shot_noise, impulse_noise, defocus_blur, glass_blur)}
_FUNCTIONS.update({f.__name__: f for f in (motion_blur, zoom_blur, snow, frost, fog, brightness, contrast)})
_FUNCTIONS.update({f.__name__: f for f in (elastic_transform, pixelate, jpeg_compression)})


def available(names=CORRUPTIONS) -> tuple[list[str], list[str]]:
    """(the corruptions of ``names`` that can run here, notes on those left out)."""
    names = list(names)
    unknown = [n for n in names if n not in _FUNCTIONS]
    if unknown:
        from .errors import ParameterError

        raise ParameterError(f"unknown corruption(s) {', '.join(unknown)}; the suite's are {', '.join(CORRUPTIONS)}")
    if "frost" in names and not frost_pictures():
        return [n for n in names if n != "frost"], [
            "frost left out: its frost photographs ship with the imagecorruptions distribution, which is not "
            "installed (pip install --no-deps imagecorruptions==1.1.2)"
        ]
    return names, []


def corrupt(x: np.ndarray, name: str, severity: int, *, random_state: int = 0, value_range=(0.0, 1.0)) -> np.ndarray:
    """Images ``x`` (n, h, w, c), c 1 or 3, on ``value_range``, with ``name`` at ``severity`` (1..5), on the same
    range and dtype. Truncated to 8 bits as the published sets are; deterministic in (random_state, name, severity)."""
    if name not in _FUNCTIONS:
        available([name])
    if severity not in SEVERITIES:
        from .errors import ParameterError

        raise ParameterError(f"The 'severity' parameter must be one of 1..5. Got {severity!r} instead.")
    lo, hi = (float(v) for v in value_range)
    x = np.asarray(x)
    channels = x.shape[-1]
    if x.ndim != 4 or channels not in (1, 3):
        raise InputError(f"corrupt takes (n, h, w, 1|3) images; got shape {x.shape}")
    rng = np.random.default_rng([random_state, zlib.crc32(name.encode()), severity])
    unit = np.round(np.clip((x.astype(np.float64) - lo) / (hi - lo), 0, 1) * 255) / 255.0  # 8-bit, as the sets
    function = _FUNCTIONS[name]
    out = np.empty(x.shape, dtype=np.float64)
    for i, image in enumerate(unit):
        rgb = np.repeat(image, 3, axis=-1) if channels == 1 else image
        done = np.clip(np.asarray(function(rgb, severity, rng), dtype=np.float64), 0, 1)
        out[i] = done.mean(axis=-1, keepdims=True) if channels == 1 else done
    # make_cifar_c.py stores np.uint8(image * 255), which truncates; 1e-6 keeps a whole level that float error
    # put a hair below it (k / 255 * 255) on its level
    out = np.floor(out * 255 + 1e-6) / 255.0
    return (lo + out * (hi - lo)).astype(x.dtype if np.issubdtype(x.dtype, np.floating) else np.float32)
