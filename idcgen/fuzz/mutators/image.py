"""Image transforms: affine and photometric transforms computed as albumentations 2.0.8 does (whole
batches at once, :mod:`idcgen.fuzz.mutators.geometry`), blur and elastic through albumentations itself."""

from __future__ import annotations

from typing import Callable, ClassVar

import numpy as np

from ...errors import InputError
from ...threads import rows_of, run_parts
from .base import MutationContext, Mutator, Param, bad_parameter
from .geometry import affine_matrices, per_image, warp_affine
from .noise import standard_normal


class BatchedTransform(Mutator):
    """A transform with its own random parameters for every image, applied to the whole batch at once
    (:mod:`idcgen.fuzz.mutators.geometry`). Works on [0, 1]: images are rescaled around the call."""

    kind = "transform"

    def _mutate(self, x, rng, ctx):
        return in_unit_range(lambda unit: self._transform(unit, rng), x, ctx)

    def _transform(self, unit: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError


def in_unit_range(transform, x: np.ndarray, ctx: MutationContext, out: np.ndarray | None = None) -> np.ndarray:
    """``transform`` applied to x rescaled to [0, 1], its result clipped and scaled back: into ``out`` when
    given (float32), else in place when the transform made a new array (a fresh array's first writes cost more
    than the arithmetic), never in ``x``."""
    lo, hi = ctx.value_range
    unit = x if (lo, hi) == (0.0, 1.0) else (x - np.float32(lo)) / np.float32(hi - lo)
    made = transform(unit)
    if out is None:
        if not (
            isinstance(made, np.ndarray)
            and made.dtype in (np.float32, np.float64)  # in place: the dtype the expression below would give
            and made.flags.writeable
            and not np.may_share_memory(made, x)
        ):
            made = np.clip(made, 0.0, 1.0)
            return made if (lo, hi) == (0.0, 1.0) else made * np.float32(hi - lo) + np.float32(lo)
        out = made
    np.clip(made, 0.0, 1.0, out=out)
    if (lo, hi) != (0.0, 1.0):
        out *= np.float32(hi - lo)
        out += np.float32(lo)
    return out


class RowwiseTransform(BatchedTransform):
    """A transform whose random parameters are all drawn first (:meth:`_draw`, arrays with a row per image),
    then applied to the rows in parts on the mutators' pool (:meth:`_apply`). Every value goes through the same
    arithmetic as in one whole-batch pass, so the mutants are those of :func:`in_unit_range` over the batch."""

    #: ``_apply(unit, *drawn)``: the transformed rows of ``unit`` from the same rows of each drawn array, a new
    #: float32 array (the parts write it into a float32 batch); each subclass names its drawn arrays
    _apply: Callable[..., np.ndarray]

    def _draw(self, shape: tuple, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        raise NotImplementedError

    def _transform(self, unit, rng):  # the whole batch in one pass: what the parts equal
        return self._apply(unit, *self._draw(unit.shape, rng))

    def _mutate(self, x, rng, ctx):
        drawn = self._draw(x.shape, rng)
        parts = rows_of(x)
        if len(parts) < 2:
            return in_unit_range(lambda unit: self._apply(unit, *drawn), x, ctx)
        out = np.empty(x.shape, np.float32)

        def part(rows: slice) -> None:  # these rows, written into theirs
            in_unit_range(lambda unit: self._apply(unit, *(d[rows] for d in drawn)), x[rows], ctx, out=out[rows])

        run_parts(part, parts)
        return out


class _AffineTransform(BatchedTransform):
    """An affine transform (zero fill outside the image). DeepHunter allows one per chain, and moves the
    chain's reference image with it: :meth:`mutate_with_reference` applies each image's draw to both."""

    affine = True

    def _matrices(self, n: int, height: int, width: int, rng: np.random.Generator) -> np.ndarray:
        """(n, 2, 3) matrices, one random draw per image."""
        raise NotImplementedError

    def _transform(self, unit, rng):
        return warp_affine(unit, self._matrices(len(unit), unit.shape[1], unit.shape[2], rng))

    def mutate_with_reference(
        self, x: np.ndarray, reference: np.ndarray, rng: np.random.Generator, ctx: MutationContext
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(mutate(x), reference moved by the same transforms)``, drawing from ``rng`` exactly as
        :meth:`mutate` does, in one warp (references equal to their image are not warped twice)."""
        x, reference = self._check_batch(x, rng, ctx), self._check_batch(reference, rng, ctx)
        if x.shape != reference.shape:
            raise InputError(f"{self.name}: references of shape {reference.shape} for inputs of shape {x.shape}")
        if len(x) == 0:
            return x.copy(), reference.copy()
        matrices = self._matrices(len(x), x.shape[1], x.shape[2], rng)
        differ = np.flatnonzero((x != reference).reshape(len(x), -1).any(axis=1))
        both = np.concatenate([x, reference[differ]])
        warped = in_unit_range(lambda unit: warp_affine(unit, np.concatenate([matrices, matrices[differ]])), both, ctx)
        warped = self._finish(both, warped, ctx)
        mutants = warped[: len(x)]
        moved = mutants.copy()
        moved[differ] = warped[len(x) :]
        return mutants, moved


class Rotate(_AffineTransform):
    """Rotation by an angle drawn from [-limit, limit] degrees about the centre."""

    name = "rotate"
    parameters = {"limit": Param(30.0, float, 0.0, 180.0, closed="right")}

    def _matrices(self, n, height, width, rng):
        return affine_matrices(height, width, rotate=rng.uniform(-self.limit, self.limit, n))


class Shift(_AffineTransform):
    """Translation by a whole number of pixels drawn uniformly from [-limit, limit] times the width
    (and, independently, the height), rounded: up to 3 pixels each way on 28x28 at limit 0.1."""

    name = "shift"
    parameters = {"limit": Param(0.1, float, 0.0, 1.0, closed="neither")}

    def _matrices(self, n, height, width, rng):
        dx, dy = max(1, round(self.limit * width)), max(1, round(self.limit * height))
        return affine_matrices(
            height, width, translate_x=rng.integers(-dx, dx + 1, n), translate_y=rng.integers(-dy, dy + 1, n)
        )


class Scale(_AffineTransform):
    """Zoom about the centre by a factor drawn from [low, high], the same on both axes."""

    name = "scale"
    parameters = {
        "low": Param(0.8, float, 0.0, None, closed="neither"),
        "high": Param(1.2, float, 0.0, None, closed="neither"),
    }

    def _check_params(self):
        if self.high < self.low:
            raise bad_parameter(self.name, "high", f">= low ({self.low!r})", self.high)

    def _matrices(self, n, height, width, rng):
        return affine_matrices(height, width, scale=rng.uniform(self.low, self.high, n))


class Shear(_AffineTransform):
    """Horizontal shear by an angle drawn from [-limit, limit] degrees (as DeepHunter's shear)."""

    name = "shear"
    parameters = {"limit": Param(20.0, float, 0.0, 90.0, closed="neither")}

    def _matrices(self, n, height, width, rng):
        return affine_matrices(height, width, shear_x=rng.uniform(-self.limit, self.limit, n))


class Brightness(RowwiseTransform):
    """Add a brightness offset drawn from [-limit, limit] (of the value range) per image."""

    name = "brightness"
    parameters = {"limit": Param(0.2, float, 0.0, 1.0, closed="right")}

    def _draw(self, shape, rng):
        return (per_image(rng.uniform(-self.limit, self.limit, shape[0])),)

    def _apply(self, unit, offset):
        return unit + offset


class Contrast(RowwiseTransform):
    """Multiply by a contrast factor drawn from [1 - limit, 1 + limit] per image."""

    name = "contrast"
    parameters = {"limit": Param(0.2, float, 0.0, 1.0, closed="right")}

    def _draw(self, shape, rng):
        return (per_image(rng.uniform(1.0 - self.limit, 1.0 + self.limit, shape[0])),)

    def _apply(self, unit, factor):
        return unit * factor


class Noise(RowwiseTransform):
    """albumentations' GaussNoise: per image a std drawn from [std_low, std_high] (of the value range),
    then independent N(0, std) noise on every pixel and channel."""

    name = "noise"
    parameters = {"std_low": Param(0.02, float, 0.0, 1.0), "std_high": Param(0.08, float, 0.0, 1.0)}

    def _check_params(self):
        if self.std_high < self.std_low:
            raise bad_parameter(self.name, "std_high", f">= std_low ({self.std_low!r})", self.std_high)

    def _draw(self, shape, rng):
        std = per_image(rng.uniform(self.std_low, self.std_high, shape[0]))
        return std, standard_normal(rng, shape)

    def _apply(self, unit, std, noise):
        return unit + noise * std


class _Albumentations(Mutator):
    """An albumentations transform applied to groups of ``group`` consecutive images, each group with
    its own random parameters (one seed drawn from ``rng`` per group).

    albumentations called with ``images=`` gives the whole call the same parameters; calling it image
    by image costs about 0.1-0.2 ms of Python per image. Images are rescaled to [0, 1] around the call;
    albumentations keeps float32 HxWxC as it is.
    """

    kind = "transform"
    group: ClassVar[int] = 16

    def _build(self, height: int, width: int):
        """The albumentations transform for images of this size."""
        raise NotImplementedError

    def _mutate(self, x, rng, ctx):
        cache = self.__dict__.setdefault("_transforms", {})
        if x.shape[1:3] not in cache:
            cache[x.shape[1:3]] = self._build(*x.shape[1:3])
        transform = cache[x.shape[1:3]]

        def in_groups(unit):
            out = np.empty_like(unit)
            starts = range(0, len(unit), self.group)
            for start, seed in zip(starts, rng.integers(0, 2**32, size=len(starts), dtype=np.uint64)):
                transform.set_random_seed(int(seed))
                chunk = np.ascontiguousarray(unit[start : start + self.group])
                out[start : start + self.group] = transform(images=chunk)["images"].reshape(chunk.shape)
            return out

        return in_unit_range(in_groups, x, ctx)


class Blur(_Albumentations):
    """Box blur with an odd kernel size drawn from 3..max_kernel."""

    name = "blur"
    parameters = {"max_kernel": Param(5, int, 3, 31)}

    def _build(self, height, width):
        import albumentations as A

        return A.Blur(blur_limit=(3, self.max_kernel), p=1.0)


class Elastic(_Albumentations):
    """Elastic deformation (Simard et al.): displacement fields scaled by alpha, smoothed by sigma pixels.

    Applied image by image: in a group call every image would get the same displacement field."""

    name = "elastic"
    group = 1
    parameters = {
        "alpha": Param(8.0, float, 0.0, None, closed="neither"),
        "sigma": Param(4.0, float, 0.0, None, closed="neither"),
    }

    def _build(self, height, width):
        import albumentations as A
        import cv2

        return A.ElasticTransform(alpha=self.alpha, sigma=self.sigma, border_mode=cv2.BORDER_CONSTANT, fill=0, p=1.0)
