"""Driving transforms (DeepTest's weather, light and camera conditions): rain, sun flare, shadow, motion
blur and Gaussian blur through albumentations, fog in numpy (:class:`Fog` says why).

Each changes the conditions a whole frame was taken under, so its change is large on many pixels by
design: these mutators are judged by the *scene* validity rule (an SSIM floor against the reference
image), not by DeepHunter's pixel bounds (docs/design.md, "Mutations"; :mod:`idcgen.fuzz.validity`).

Every image gets its own random draw: one seed per batch from the ``rng`` passed in seeds the
albumentations transform, which then advances its own generator from image to image (these transforms
cost 0.2-4 ms per 66x200 frame, so the per-call overhead matters little). Images are rescaled to
[0, 1] around the call. Rain and sun flare exist in albumentations for RGB only: a grayscale
image is copied into three channels, transformed, and brought back as the mean of the three (their
drops and flare are grey or white, so the mean is the luminance they add). Shadow, the blurs and fog
work on any channel count directly.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .base import Mutator, Param, bad_parameter
from .image import in_unit_range


class _Driving(Mutator):
    """An albumentations transform with one random draw per image (see the module docstring)."""

    kind = "transform"
    validity = "scene"
    rgb_only: ClassVar[bool] = False  # albumentations refuses other channel counts

    def _build(self, height: int, width: int):
        """The albumentations transform for frames of this size."""
        raise NotImplementedError

    def _mutate(self, x, rng, ctx):
        cache = self.__dict__.setdefault("_transforms", {})
        size = x.shape[1:3]
        if size not in cache:
            cache[size] = self._build(*size)
        transform = cache[size]
        transform.set_random_seed(int(rng.integers(0, 2**32, dtype=np.uint64)))

        def each(unit):
            grey = self.rgb_only and unit.shape[-1] == 1
            out = np.empty_like(unit)
            for i, image in enumerate(unit):
                image = np.repeat(image, 3, axis=-1) if grey else np.ascontiguousarray(image)
                result = transform(image=image)["image"].reshape(image.shape)
                out[i] = result.mean(axis=-1, keepdims=True) if grey else result
            return out

        return in_unit_range(each, x, ctx)


def _range(mutator: Mutator, low: str, high: str) -> None:
    if getattr(mutator, high) < getattr(mutator, low):
        raise bad_parameter(mutator.name, high, f">= {low} ({getattr(mutator, low)!r})", getattr(mutator, high))


class Rain(_Driving):
    """Rain (albumentations' RandomRain): slanted grey streaks of ``drop_length`` (share of the height)
    and ``drop_width`` pixels at an angle drawn from [-slant, slant] degrees, about one per 600 pixels,
    the frame slightly blurred (``blur`` pixels) and dimmed to ``brightness`` times its value.
    Validity: scene."""

    name = "rain"
    rgb_only = True
    parameters = {
        "slant": Param(10.0, float, 0.0, 45.0),
        "drop_length": Param(0.15, float, 0.0, 1.0, closed="right"),
        "drop_width": Param(1, int, 1, 5),
        "blur": Param(3, int, 1, 15),
        "brightness": Param(0.8, float, 0.0, 1.0, closed="right"),
    }

    def _build(self, height, width):
        import albumentations as A

        return A.RandomRain(
            slant_range=(-self.slant, self.slant),
            drop_length=max(1, round(self.drop_length * height)),
            drop_width=self.drop_width,
            blur_value=self.blur,
            brightness_coefficient=self.brightness,
            p=1.0,
        )


class Fog(Mutator):
    """Fog by the atmospheric scattering model (Koschmieder): ``x * t + airlight * (1 - t)`` with
    transmission ``t = exp(-density * depth)``, the depth growing linearly from 0.5 at the bottom row to
    1 at the top (a road scene: the horizon is further away), the density drawn per image from
    [fog_low, fog_high] and the airlight a share of the value range. The frame gets brighter (below
    the airlight) and its contrast shrinks by ``t``. Written in numpy: albumentations' RandomFog
    blends hundreds of circles one at a time (7 ms per 66x200 frame) and moved the mean of Udacity
    frames by 0.004. Validity: scene."""

    name = "fog"
    kind = "transform"
    validity = "scene"
    parameters = {
        "fog_low": Param(0.3, float, 0.0, 10.0),
        "fog_high": Param(1.0, float, 0.0, 10.0),
        "airlight": Param(0.8, float, 0.0, 1.0),
    }

    def _check_params(self):
        _range(self, "fog_low", "fog_high")

    def _mutate(self, x, rng, ctx):
        density = rng.uniform(self.fog_low, self.fog_high, len(x)).astype(np.float32)
        depth = np.linspace(1.0, 0.5, x.shape[1], dtype=np.float32)  # top row furthest
        t = np.exp(-density[:, None, None, None] * depth[None, :, None, None])
        return in_unit_range(lambda unit: unit * t + np.float32(self.airlight) * (1 - t), x, ctx)


class SunFlare(_Driving):
    """Sun flare (albumentations' RandomSunFlare, overlay method): a white source of ``radius`` (share
    of the width) placed in the top ``top`` share of the frame, with 6-10 flare circles along a random
    line through it. Validity: scene."""

    name = "sun_flare"
    rgb_only = True
    parameters = {
        "radius": Param(0.25, float, 0.0, 1.0, closed="right"),
        "top": Param(0.5, float, 0.0, 1.0, closed="right"),
    }

    def _build(self, height, width):
        import albumentations as A

        return A.RandomSunFlare(
            flare_roi=(0.0, 0.0, 1.0, self.top), src_radius=max(1, round(self.radius * width)), p=1.0
        )


class Shadow(_Driving):
    """Shadow (albumentations' RandomShadow): 1 to ``max_shadows`` polygons of ``vertices`` corners in
    the bottom part of the frame below ``top`` (share of the height), darkened to 1 - intensity with an
    intensity drawn from [intensity_low, intensity_high]. Validity: scene."""

    name = "shadow"
    parameters = {
        "max_shadows": Param(2, int, 1, 5),
        "vertices": Param(5, int, 3, 10),
        "intensity_low": Param(0.3, float, 0.0, 1.0),
        "intensity_high": Param(0.7, float, 0.0, 1.0),
        "top": Param(0.5, float, 0.0, 1.0, closed="left"),
    }

    def _check_params(self):
        _range(self, "intensity_low", "intensity_high")

    def _build(self, height, width):
        import albumentations as A

        return A.RandomShadow(
            shadow_roi=(0.0, self.top, 1.0, 1.0),
            num_shadows_limit=(1, self.max_shadows),
            shadow_dimension=self.vertices,
            shadow_intensity_range=(self.intensity_low, self.intensity_high),
            p=1.0,
        )


class MotionBlur(_Driving):
    """Motion blur (albumentations' MotionBlur): a line kernel of odd length drawn from 3..max_kernel at
    any angle, as a moving camera takes it. Validity: scene."""

    name = "motion_blur"
    parameters = {"max_kernel": Param(7, int, 3, 31)}

    def _build(self, height, width):
        import albumentations as A

        return A.MotionBlur(blur_limit=(3, self.max_kernel | 1), p=1.0)


class GaussianBlur(_Driving):
    """Gaussian blur (albumentations' GaussianBlur) with sigma drawn from [sigma_low, sigma_high] pixels
    (kernel size from sigma), DeepTest's out-of-focus camera. Validity: scene (the box ``blur`` keeps
    DeepHunter's pixel bounds, as before)."""

    name = "gaussian_blur"
    parameters = {
        "sigma_low": Param(0.5, float, 0.0, 10.0, closed="right"),
        "sigma_high": Param(2.0, float, 0.0, 10.0, closed="right"),
    }

    def _check_params(self):
        _range(self, "sigma_low", "sigma_high")

    def _build(self, height, width):
        import albumentations as A

        return A.GaussianBlur(blur_limit=0, sigma_limit=(self.sigma_low, self.sigma_high), p=1.0)
