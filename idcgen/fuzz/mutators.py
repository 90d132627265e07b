"""Mutators: one kind of mutation with its parameters; a batch of inputs in, a batch of mutants out.

Three kinds (docs/design.md, "Mutations"): *noise* (Gaussian noise on all pixels, on the most relevant pixels, on random
pixels), *transform* (affine and photometric transforms computed as albumentations 2.0.8 does, blur
and elastic through it) and *attack* (cleverhans and ART, in :mod:`idcgen.fuzz.attacks`). A mutator is written as a spec string, ``"gauss"`` or
``"gauss(std=0.1)"``; its ``repr`` is the canonical spec and round-trips through :func:`make_mutator`.

Magnitudes (noise std, attack eps and theta) are fractions of the width of the valid input range, so on
the usual [0, 1] range they are absolute pixel values.

Every mutator keeps the contract of :meth:`Mutator.mutate`: a new float32 array of the input's shape,
finite, clipped to the valid range; the input untouched; randomness only from the ``rng`` passed in
(same generator state, same mutants). Noise, attacks, affine and photometric transforms draw their
parameters per image; blur per group of 16 images (see ``_Albumentations``).
"""

from __future__ import annotations

import ast
import inspect
import logging
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..errors import InputError, ParameterError
from .parallel import run_parts
from .transforms import affine_matrices, per_image, warp_affine

if TYPE_CHECKING:
    from ..models import Network

logger = logging.getLogger(__name__)

#: Every mutator class with a ``name``, registered as it is defined (name -> class).
REGISTRY: dict[str, type[Mutator]] = {}

#: The fuzz default: every cheap mutator. ``cw`` (10-20 s per 100 MNIST images) and ``jsma`` (0.3-0.5 s
#: per image) are left out for cost; add them explicitly.
#: ``blur`` and ``elastic`` are left out too: on MNIST almost none of their mutants pass DeepHunter's
#: default L-inf bound (they move stroke edges by more than 0.2); use them with a larger ``--beta``.
DEFAULT_MUTATORS = ("gauss,relevant_pixels,random_pixels,rotate,shift,scale,shear,brightness,contrast,"
                    "noise,fgsm,bim,pgd,directed")


# ---- parameters as data -------------------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    """One mutator parameter: default, type (``int``, ``float`` or ``bool``) and valid interval.

    ``closed`` says which ends of ``[low, high]`` are allowed: "both", "left", "right" or "neither".
    A float parameter also accepts an int; only a bool parameter accepts a bool.
    """

    default: int | float | bool
    type: type = float
    low: float | None = None
    high: float | None = None
    closed: str = "both"

    def describe(self) -> str:
        if self.type is bool:
            return "a bool (True or False)"
        left = "[" if self.closed in ("both", "left") and self.low is not None else "("
        right = "]" if self.closed in ("both", "right") and self.high is not None else ")"
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf" if self.high is None else f"{self.high:g}"
        return f"{'an int' if self.type is int else 'a float'} in the range {left}{low}, {high}{right}"

    def accepts(self, value) -> bool:
        if isinstance(value, bool) or self.type is bool:
            return isinstance(value, bool) and self.type is bool
        if self.type is int and not isinstance(value, (int, np.integer)):
            return False
        if self.type is float and (not isinstance(value, (int, float, np.integer, np.floating))
                                   or not math.isfinite(value)):
            return False
        if self.low is not None and (value < self.low or value == self.low and self.closed in ("right", "neither")):
            return False
        if self.high is not None and (value > self.high or value == self.high and self.closed in ("left", "neither")):
            return False
        return True


def _bad(mutator: str, name: str, expected: str, value) -> ParameterError:
    return ParameterError(f"The {name!r} parameter of {mutator} must be {expected}. Got {value!r} instead.")


def _parameter_names(cls: type[Mutator]) -> list[str]:
    if cls.parameters:
        return list(cls.parameters)
    signature = inspect.signature(cls.__init__)  # a mutator with its own __init__ (e.g. directed)
    return [p.name for p in signature.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]


# ---- the base class -----------------------------------------------------------------------------
@dataclass(frozen=True)
class MutationContext:
    """What a mutator may use besides the inputs.

    network : the model under test (:class:`idcgen.models.Network`)
    labels : (b,) int labels of the batch's root seeds, -1 where unknown
    value_range : valid input range; mutants are clipped to it
    """

    network: Network
    labels: np.ndarray
    value_range: tuple[float, float] = (0.0, 1.0)

    def __post_init__(self):
        lo, hi = self.value_range
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ParameterError(f"value_range must be two finite numbers (low, high) with low < high. "
                                 f"Got {self.value_range!r} instead.")


class Mutator:
    """One kind of mutation with its parameters; a batch in, a batch of mutants out.

    Subclasses set ``name``, ``kind``, ``parameters`` (name -> :class:`Param`) and implement
    ``_mutate(x, rng, ctx)``; the base class validates parameters and inputs and clips the result.
    """

    name: ClassVar[str]
    kind: ClassVar[str]                 # "noise" | "attack" | "transform"
    affine: ClassVar[bool] = False      # rotate/shift/scale/shear: at most one per chain (DeepHunter)
    needs_model: ClassVar[bool] = False
    stochastic: ClassVar[bool] = True   # False: the output does not depend on rng (fgsm, bim, cw)
    parameters: ClassVar[dict[str, Param]] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            REGISTRY[cls.name] = cls

    def __init__(self, **params):
        unknown = [key for key in params if key not in self.parameters]
        if unknown:
            raise ParameterError(f"{self.name} has no parameter {unknown[0]!r}; its parameters are: "
                                 f"{', '.join(self.parameters) or '(none)'}.")
        for key, spec in self.parameters.items():
            value = params.get(key, spec.default)
            if not spec.accepts(value):
                raise _bad(self.name, key, spec.describe(), value)
            setattr(self, key, value)
        self._check_params()

    def _check_params(self) -> None:
        """Constraints between parameters (override)."""

    def params(self) -> dict:
        """The parameters, JSON-able, in declaration order."""
        return {key: getattr(self, key) for key in self.parameters}

    def __repr__(self) -> str:
        return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in self.params().items())})"

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self.params() == other.params()

    def __hash__(self) -> int:
        return hash(repr(self))

    def mutate(self, x: np.ndarray, rng: np.random.Generator, ctx: MutationContext) -> np.ndarray:
        """Mutants of the batch ``x``.

        x : (b, h, w, c) float32 inside ``ctx.value_range``; never modified.
        rng : the only source of randomness (same state, same mutants).
        Returns a new (b, h, w, c) float32 array, finite and clipped to ``ctx.value_range``.
        """
        x = self._check_batch(x, rng, ctx)
        if len(x) == 0:
            return x.copy()
        return self._finish(x, self._mutate(x, rng, ctx), ctx)

    def _finish(self, x: np.ndarray, out: np.ndarray, ctx: MutationContext) -> np.ndarray:
        """The contract's end: float32 of x's shape, finite, clipped to the value range."""
        out = np.asarray(out, dtype=np.float32)
        if out.shape != x.shape:
            raise RuntimeError(f"{self!r} returned shape {out.shape} for inputs of shape {x.shape}")
        finite = np.isfinite(out)
        if not finite.all():  # keep the parent's pixel rather than hand a NaN to the model
            logger.warning("%r produced %d non-finite values; they keep the input's value", self, (~finite).sum())
            out = np.where(finite, out, x)
        return np.clip(out, *ctx.value_range).astype(np.float32, copy=False)

    def _mutate(self, x: np.ndarray, rng: np.random.Generator, ctx: MutationContext) -> np.ndarray:
        raise NotImplementedError

    def _check_batch(self, x, rng, ctx) -> np.ndarray:
        if not isinstance(rng, np.random.Generator):
            raise ParameterError(f"{self.name}: rng must be a numpy Generator (np.random.default_rng(...)). "
                                 f"Got {type(rng).__name__} instead.")
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 4:
            raise InputError(f"{self.name}: expected a batch of images (b, h, w, c); got shape {x.shape}")
        if len(x) == 0:
            return x
        lo, hi = ctx.value_range
        tol = 1e-6 * (hi - lo)
        low, high = x.min(), x.max()
        if not (lo - tol <= low and high <= hi + tol):  # NaN fails both comparisons
            raise InputError(f"{self.name}: inputs must be finite and inside value_range {ctx.value_range}; got "
                             f"values in [{np.nanmin(x):g}, {np.nanmax(x):g}]")
        if low < lo or high > hi:  # rounding error only: clip (on a copy), as cleverhans' C&W insists
            x = np.clip(x, lo, hi)
        if self.needs_model and len(ctx.labels) != len(x):
            raise InputError(f"{self.name}: got {len(ctx.labels)} labels for {len(x)} inputs")
        return x


# ---- noise --------------------------------------------------------------------------------------
def pixel_count(fraction: float, height: int, width: int) -> int:
    """Pixel positions perturbed: ``floor(fraction * h * w)``, at least one.

    Floor, not round, gives the paper's counts: 15 of 784 on MNIST, 20 of 1,024 on CIFAR-10.
    """
    return max(1, int(math.floor(fraction * height * width + 1e-9)))


def distinct_positions(rng: np.random.Generator, b: int, n: int, k: int) -> np.ndarray:
    """(b, k) positions in range(n), distinct within each row, every k-subset equally likely."""
    if k * k > 4 * n:  # dense: the k smallest of n random keys (a partition, not a sort)
        keys = rng.random((b, n))  # float64: ties (which would favour lower positions) practically never
        return keys.argpartition(k - 1, axis=1)[:, :k] if k < n else np.argsort(keys, axis=1)
    # sparse: draw k positions and redraw the rows that repeat one (accepted with probability > e^-2)
    positions = rng.integers(0, n, (b, k))
    while True:
        ordered = np.sort(positions, axis=1)
        repeats = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
        if len(repeats) == 0:
            return positions
        positions[repeats] = rng.integers(0, n, (len(repeats), k))


#: the noise of a batch is drawn in two halves, each from its own child generator (see parallel.py)
_NOISE_PARTS = 2


def standard_normal(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """float32 N(0, 1) samples of ``shape``. Drawing them is most of the cost of Gaussian noise, so
    large arrays are filled in two parts on two threads."""
    out = np.empty(shape, np.float32)
    flat = out.reshape(-1)
    seeds = rng.integers(0, 2**63, size=_NOISE_PARTS)
    bounds = np.linspace(0, flat.size, _NOISE_PARTS + 1).astype(int)

    def fill(i):
        np.random.default_rng(seeds[i]).standard_normal(dtype=np.float32, out=flat[bounds[i]:bounds[i + 1]])

    if flat.size < 65_536:
        for i in range(_NOISE_PARTS):
            fill(i)
    else:
        run_parts(fill, range(_NOISE_PARTS))
    return out


def noise_at(x: np.ndarray, positions: np.ndarray, std: float, rng: np.random.Generator) -> np.ndarray:
    """Add N(0, std) to every channel of the given flat pixel positions (b, k) of each image."""
    b, h, w, c = x.shape
    out = x.reshape(b, h * w, c).copy()
    noise = rng.standard_normal((b, positions.shape[1], c), dtype=np.float32) * np.float32(std)
    out[np.arange(b)[:, None], positions] += noise
    return out.reshape(x.shape)


class Gauss(Mutator):
    """Gaussian noise N(0, std) on every pixel.

    The paper's U_S used std 0.3; the default 0.05 keeps most mutants inside DeepHunter's validity
    bound (L-inf <= 0.2), so the fuzzer keeps them.
    """

    name = "gauss"
    kind = "noise"
    parameters = {"std": Param(0.05, float, 0.0, 1.0, closed="right")}

    def _mutate(self, x, rng, ctx):
        lo, hi = ctx.value_range
        noise = standard_normal(rng, x.shape)
        noise *= np.float32(self.std * (hi - lo))
        noise += x
        return noise


class RelevantPixels(Mutator):
    """The paper's "DI" inputs: N(0, std) noise on the top ``fraction`` of pixel positions by
    |input relevance| of the predicted logit (all channels of a chosen position).

    On multi-channel images a position's relevance is the sum over its channels (ties: lower index first).
    """

    name = "relevant_pixels"
    kind = "noise"
    needs_model = True
    stochastic = True
    parameters = {"fraction": Param(0.02, float, 0.0, 1.0, closed="right"),
                  "std": Param(0.75, float, 0.0, None, closed="neither")}

    def positions(self, x: np.ndarray, network: Network) -> np.ndarray:
        """(b, k) flat indices of the most relevant pixel positions, most relevant first."""
        from ..relevance import input_relevance
        b, h, w, _ = x.shape
        score = np.abs(input_relevance(network, x).sum(axis=-1)).reshape(b, h * w)
        return np.argsort(-score, axis=1, kind="stable")[:, :pixel_count(self.fraction, h, w)]

    def _mutate(self, x, rng, ctx):
        lo, hi = ctx.value_range
        return noise_at(x, self.positions(x, ctx.network), self.std * (hi - lo), rng)


class RandomPixels(Mutator):
    """The RQ2 control: the same number of pixel positions as ``relevant_pixels``, chosen uniformly."""

    name = "random_pixels"
    kind = "noise"
    parameters = {"fraction": Param(0.02, float, 0.0, 1.0, closed="right"),
                  "std": Param(0.75, float, 0.0, None, closed="neither")}

    def _mutate(self, x, rng, ctx):
        b, h, w, _ = x.shape
        k = pixel_count(self.fraction, h, w)
        lo, hi = ctx.value_range
        return noise_at(x, distinct_positions(rng, b, h * w, k), self.std * (hi - lo), rng)


# ---- transforms -------------------------------------------------------------------------------
class _BatchedTransform(Mutator):
    """A transform with its own random parameters for every image, applied to the whole batch at once
    (:mod:`idcgen.fuzz.transforms`). Works on [0, 1]: images are rescaled around the call."""

    kind = "transform"

    def _mutate(self, x, rng, ctx):
        return _in_unit_range(lambda unit: self._transform(unit, rng), x, ctx)

    def _transform(self, unit: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError


def _in_unit_range(transform, x: np.ndarray, ctx: MutationContext) -> np.ndarray:
    """``transform`` applied to x rescaled to [0, 1], its result clipped and scaled back."""
    lo, hi = ctx.value_range
    unit = x if (lo, hi) == (0.0, 1.0) else (x - np.float32(lo)) / np.float32(hi - lo)
    out = np.clip(transform(unit), 0.0, 1.0)
    return out if (lo, hi) == (0.0, 1.0) else out * np.float32(hi - lo) + np.float32(lo)


class _AffineTransform(_BatchedTransform):
    """An affine transform (zero fill outside the image). DeepHunter allows one per chain, and moves the
    chain's reference image with it: :meth:`mutate_with_reference` applies each image's draw to both."""

    affine = True

    def _matrices(self, n: int, height: int, width: int, rng: np.random.Generator) -> np.ndarray:
        """(n, 2, 3) matrices, one random draw per image."""
        raise NotImplementedError

    def _transform(self, unit, rng):
        return warp_affine(unit, self._matrices(len(unit), unit.shape[1], unit.shape[2], rng))

    def mutate_with_reference(self, x: np.ndarray, reference: np.ndarray, rng: np.random.Generator,
                              ctx: MutationContext) -> tuple[np.ndarray, np.ndarray]:
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
        warped = _in_unit_range(lambda unit: warp_affine(unit, np.concatenate([matrices, matrices[differ]])),
                                both, ctx)
        warped = self._finish(both, warped, ctx)
        mutants = warped[:len(x)]
        moved = mutants.copy()
        moved[differ] = warped[len(x):]
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
        return affine_matrices(height, width, translate_x=rng.integers(-dx, dx + 1, n),
                               translate_y=rng.integers(-dy, dy + 1, n))


class Scale(_AffineTransform):
    """Zoom about the centre by a factor drawn from [low, high], the same on both axes."""

    name = "scale"
    parameters = {"low": Param(0.8, float, 0.0, None, closed="neither"),
                  "high": Param(1.2, float, 0.0, None, closed="neither")}

    def _check_params(self):
        if self.high < self.low:
            raise _bad(self.name, "high", f">= low ({self.low!r})", self.high)

    def _matrices(self, n, height, width, rng):
        return affine_matrices(height, width, scale=rng.uniform(self.low, self.high, n))


class Shear(_AffineTransform):
    """Horizontal shear by an angle drawn from [-limit, limit] degrees (as DeepHunter's shear)."""

    name = "shear"
    parameters = {"limit": Param(20.0, float, 0.0, 90.0, closed="neither")}

    def _matrices(self, n, height, width, rng):
        return affine_matrices(height, width, shear_x=rng.uniform(-self.limit, self.limit, n))


class Brightness(_BatchedTransform):
    """Add a brightness offset drawn from [-limit, limit] (of the value range) per image."""

    name = "brightness"
    parameters = {"limit": Param(0.2, float, 0.0, 1.0, closed="right")}

    def _transform(self, unit, rng):
        return unit + per_image(rng.uniform(-self.limit, self.limit, len(unit)))


class Contrast(_BatchedTransform):
    """Multiply by a contrast factor drawn from [1 - limit, 1 + limit] per image."""

    name = "contrast"
    parameters = {"limit": Param(0.2, float, 0.0, 1.0, closed="right")}

    def _transform(self, unit, rng):
        return unit * per_image(rng.uniform(1.0 - self.limit, 1.0 + self.limit, len(unit)))


class Noise(_BatchedTransform):
    """albumentations' GaussNoise: per image a std drawn from [std_low, std_high] (of the value range),
    then independent N(0, std) noise on every pixel and channel."""

    name = "noise"
    parameters = {"std_low": Param(0.02, float, 0.0, 1.0),
                  "std_high": Param(0.08, float, 0.0, 1.0)}

    def _check_params(self):
        if self.std_high < self.std_low:
            raise _bad(self.name, "std_high", f">= std_low ({self.std_low!r})", self.std_high)

    def _transform(self, unit, rng):
        std = per_image(rng.uniform(self.std_low, self.std_high, len(unit)))
        return unit + standard_normal(rng, unit.shape) * std


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
                chunk = np.ascontiguousarray(unit[start:start + self.group])
                out[start:start + self.group] = transform(images=chunk)["images"].reshape(chunk.shape)
            return out

        return _in_unit_range(in_groups, x, ctx)


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
    parameters = {"alpha": Param(8.0, float, 0.0, None, closed="neither"),
                  "sigma": Param(4.0, float, 0.0, None, closed="neither")}

    def _build(self, height, width):
        import albumentations as A
        import cv2
        return A.ElasticTransform(alpha=self.alpha, sigma=self.sigma, border_mode=cv2.BORDER_CONSTANT, fill=0,
                                  p=1.0)


# ---- specs --------------------------------------------------------------------------------------
_SPEC = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\((.*)\))?\s*", re.DOTALL)


def make_mutator(spec: str) -> Mutator:
    """A mutator from its spec: ``"gauss"`` or ``"gauss(std=0.1)"``; values are Python literals."""
    if not isinstance(spec, str):
        raise ParameterError(f"a mutator spec must be a string such as 'gauss(std=0.1)'. Got {spec!r} instead.")
    match = _SPEC.fullmatch(spec)
    if not match:
        raise ParameterError(f"malformed mutator spec {spec!r}: expected name or name(param=value, ...)")
    name, args = match.group(1), match.group(2)
    if name not in REGISTRY:
        raise ParameterError(f"unknown mutator {name!r}; known mutators: {', '.join(REGISTRY)}")
    cls = REGISTRY[name]
    kwargs = _parse_args(spec, args or "")
    known = _parameter_names(cls)
    unknown = [key for key in kwargs if key not in known]
    if unknown:
        raise ParameterError(f"{name} has no parameter {unknown[0]!r}; its parameters are: "
                             f"{', '.join(known) or '(none)'}.")
    return cls(**kwargs)


def _parse_args(spec: str, args: str) -> dict:
    try:  # ast.parse only builds a syntax tree; literal_eval below accepts literals only
        call = ast.parse(f"f({args})", mode="eval").body
    except SyntaxError as exc:
        raise ParameterError(f"malformed mutator spec {spec!r}: {exc.msg}; expected name(param=value, ...)") from None
    if not isinstance(call, ast.Call) or call.args or any(kw.arg is None for kw in call.keywords):
        raise ParameterError(f"malformed mutator spec {spec!r}: give parameters by name, as name(param=value, ...)")
    kwargs = {}
    for kw in call.keywords:
        if kw.arg in kwargs:
            raise ParameterError(f"malformed mutator spec {spec!r}: parameter {kw.arg!r} given twice")
        try:
            kwargs[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, SyntaxError, TypeError):
            raise ParameterError(f"malformed mutator spec {spec!r}: the value of {kw.arg!r} must be a Python "
                                 f"literal (number, bool, string or tuple). Got {ast.unparse(kw.value)!r}") from None
    return kwargs


def split_specs(text: str) -> list[str]:
    """Split at commas outside parentheses, brackets and quotes."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [part.strip() for part in parts]


def parse_mutators(text: str) -> list[Mutator]:
    """Mutators from a comma-separated list of specs, e.g. ``"gauss(std=0.05),rotate,fgsm(eps=0.1)"``."""
    specs = split_specs(text)
    if any(not spec for spec in specs):
        raise ParameterError(f"empty mutator spec in {text!r}; expected a comma-separated list such as "
                             f"'gauss(std=0.05),rotate'")
    return [make_mutator(spec) for spec in specs]


def describe_mutators() -> list[tuple[str, str, dict]]:
    """(name, kind, default parameters) of every registered mutator, for listings."""
    return [(name, cls.kind, cls().params()) for name, cls in REGISTRY.items()]


from . import attacks as _attacks  # noqa: E402,F401  (registers the attack mutators)
from . import directed as _directed  # noqa: E402,F401  (registers the coverage-directed mutator)
