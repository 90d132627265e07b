"""DeepTest's transforms that the other mutator modules lack (Tian et al., ICSE 2018; docs/design.md,
"Regression models").

DeepTest transformed each frame with one of: translation, scale, shear, rotation, contrast, brightness,
blur (averaging, Gaussian, median, bilateral), fog and rain. Its parameter ranges (frames of 640x480,
8-bit values): translation 10..100 pixels, scale 1.5..6, horizontal shear factor 0.1..1.0, rotation
3..30 degrees, contrast gain 1.2..3.0, brightness bias 10..100 (of 255), and ten blur settings (averaging
3x3, 4x4, 5x5, 6x6; Gaussian 3x3, 5x5, 7x7; median 3 and 5; bilateral, diameter 9, sigmas 75).

The affine ones are ``shift``, ``scale``, ``shear`` and ``rotate`` (:mod:`.image`), fog and rain are in
:mod:`.driving`. Here: ``gain`` and ``bias`` (contrast and brightness drawn from DeepTest's one-sided
ranges: :mod:`.image`'s ``contrast`` and ``brightness`` draw symmetric ones), ``median_blur``,
``bilateral_blur``, and ``deeptest_blur``, which gives each image one of DeepTest's ten blur settings.

They change the whole frame, so they are judged by the *scene* validity rule (an SSIM floor), as the
driving transforms are. OpenCV (installed with albumentations) does the filtering, image by image on
float32 values in [0, 1]; 66x200 frames cost well under a millisecond each.
"""

from __future__ import annotations

import numpy as np

from .base import Mutator, Param, bad_parameter
from .geometry import per_image
from .image import RowwiseTransform, in_unit_range

#: DeepTest's ten blur settings: (kind, kernel size)
DEEPTEST_BLURS = (
    ("average", 3),
    ("average", 4),
    ("average", 5),
    ("average", 6),
    ("gaussian", 3),
    ("gaussian", 5),
    ("gaussian", 7),
    ("median", 3),
    ("median", 5),
    ("bilateral", 9),
)


def _low_high(mutator: Mutator) -> None:
    if mutator.high < mutator.low:
        raise bad_parameter(mutator.name, "high", f">= low ({mutator.low!r})", mutator.high)


class Gain(RowwiseTransform):
    """Contrast as DeepTest changed it: every value multiplied by a gain drawn from [low, high] per image
    (DeepTest: 1.2 to 3.0), clipped to the range. Validity: scene."""

    name = "gain"
    validity = "scene"
    parameters = {
        "low": Param(1.2, float, 0.0, 10.0, closed="right"),
        "high": Param(3.0, float, 0.0, 10.0, closed="right"),
    }

    def _check_params(self):
        _low_high(self)

    def _draw(self, shape, rng):
        return (per_image(rng.uniform(self.low, self.high, shape[0])),)

    def _apply(self, unit, gain):
        return unit * gain


class Bias(RowwiseTransform):
    """Brightness as DeepTest changed it: a bias drawn from [low, high] (of the value range) added per
    image (DeepTest: 10 to 100 of 255, i.e. 0.039 to 0.392), clipped to the range. Validity: scene."""

    name = "bias"
    validity = "scene"
    parameters = {"low": Param(10 / 255, float, -1.0, 1.0), "high": Param(100 / 255, float, -1.0, 1.0)}

    def _check_params(self):
        _low_high(self)

    def _draw(self, shape, rng):
        return (per_image(rng.uniform(self.low, self.high, shape[0])),)

    def _apply(self, unit, bias):
        return unit + bias


def blur_image(
    image: np.ndarray, kind: str, size: int, *, sigma_color: float = 75.0, sigma_space: float = 75.0
) -> np.ndarray:
    """One float32 (h, w, c) image in [0, 1] blurred as OpenCV's ``blur`` ("average", any size),
    ``GaussianBlur`` ("gaussian", odd size, sigma from the size), ``medianBlur`` ("median", 3 or 5) or
    ``bilateralFilter`` ("bilateral", diameter ``size``; ``sigma_color`` in 8-bit units, as DeepTest
    gave it, so divided by 255 here)."""
    import cv2

    image = np.ascontiguousarray(image, dtype=np.float32)
    if kind == "average":
        out = cv2.blur(image, (size, size))
    elif kind == "gaussian":
        out = cv2.GaussianBlur(image, (size, size), 0)
    elif kind == "median":
        out = cv2.medianBlur(image, size)
    elif kind == "bilateral":
        out = cv2.bilateralFilter(image, size, sigma_color / 255.0, sigma_space)
    else:
        raise ValueError(f"kind must be average, gaussian, median or bilateral; got {kind!r}")
    return out.reshape(image.shape)  # OpenCV drops a single channel's axis


class _PerImageBlur(Mutator):
    kind = "transform"
    validity = "scene"

    def _settings(self, n: int, rng: np.random.Generator) -> list[tuple[str, int]]:
        raise NotImplementedError

    def _mutate(self, x, rng, ctx):
        settings = self._settings(len(x), rng)
        options = {"sigma_color": getattr(self, "sigma_color", 75.0), "sigma_space": getattr(self, "sigma_space", 75.0)}

        def each(unit):
            return np.stack([blur_image(image, kind, size, **options) for image, (kind, size) in zip(unit, settings)])

        return in_unit_range(each, x, ctx)


class MedianBlur(_PerImageBlur):
    """Median blur (DeepTest's kernels 3 and 5) with an odd kernel drawn from 3..max_kernel per image
    (OpenCV takes float images up to 5). Validity: scene."""

    name = "median_blur"
    parameters = {"max_kernel": Param(5, int, 3, 5)}

    def _settings(self, n, rng):
        sizes = rng.choice(np.arange(3, self.max_kernel + 1, 2), size=n)
        return [("median", int(s)) for s in sizes]


class BilateralBlur(_PerImageBlur):
    """Bilateral filter (edge-preserving smoothing) of ``diameter`` pixels, ``sigma_color`` in 8-bit units
    and ``sigma_space`` pixels; DeepTest's: 9, 75, 75. Deterministic. Validity: scene."""

    name = "bilateral_blur"
    stochastic = False
    parameters = {
        "diameter": Param(9, int, 1, 31),
        "sigma_color": Param(75.0, float, 0.0, 255.0, closed="right"),
        "sigma_space": Param(75.0, float, 0.0, None, closed="neither"),
    }

    def _settings(self, n, rng):
        return [("bilateral", self.diameter)] * n


class DeepTestBlur(_PerImageBlur):
    """One of DeepTest's ten blur settings per image, drawn uniformly: averaging 3x3, 4x4, 5x5, 6x6;
    Gaussian 3x3, 5x5, 7x7; median 3, 5; bilateral (9, 75, 75). Validity: scene."""

    name = "deeptest_blur"

    def _settings(self, n, rng):
        return [DEEPTEST_BLURS[i] for i in rng.integers(0, len(DEEPTEST_BLURS), size=n)]
