"""The mutator contract: parameters as data, the base class, and what a mutator may use besides its inputs.

Every mutator keeps the contract of :meth:`Mutator.mutate`: a new float32 array of the input's shape,
finite, clipped to the valid range; the input untouched; randomness only from the ``rng`` passed in
(same generator state, same mutants). Magnitudes (noise std, attack eps and theta) are fractions of the
width of the valid input range, so on the usual [0, 1] range they are absolute pixel values.
"""

from __future__ import annotations

import inspect
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ...errors import InputError, ParameterError
from ...threads import extent, rows_of, run_parts

if TYPE_CHECKING:
    from ...framework import Network

logger = logging.getLogger(__name__)


# ---- parameters as data -------------------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    """One mutator parameter: default, type (``int``, ``float`` or ``bool``) and valid interval.

    ``closed`` says which ends of ``[low, high]`` are allowed: "both", "left", "right" or "neither".
    A float parameter also accepts an int; only a bool parameter accepts a bool.
    """

    default: int | float | bool | str
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
        if self.type is float and (
            not isinstance(value, (int, float, np.integer, np.floating)) or not math.isfinite(value)
        ):
            return False
        if self.low is not None and (value < self.low or value == self.low and self.closed in ("right", "neither")):
            return False
        if self.high is not None and (value > self.high or value == self.high and self.closed in ("left", "neither")):
            return False
        return True


def bad_parameter(mutator: str, name: str, expected: str, value) -> ParameterError:
    """The error for a mutator's parameter ``name`` whose ``value`` is not ``expected``."""
    return ParameterError(f"The {name!r} parameter of {mutator} must be {expected}. Got {value!r} instead.")


def parameter_names(cls: type[Mutator]) -> list[str]:
    """The parameters a mutator's spec may set, by name."""
    if cls.parameters:
        return list(cls.parameters)
    signature = inspect.signature(cls.__init__)  # a mutator with its own __init__ (e.g. directed)
    return [p.name for p in signature.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]


# ---- the base class -----------------------------------------------------------------------------
@dataclass(frozen=True)
class MutationContext:
    """What a mutator may use besides the inputs.

    network : the model under test (:class:`idcgen.framework.Network`)
    labels : (b,) int labels of the batch's root seeds, -1 where unknown
    value_range : valid input range; mutants are clipped to it
    """

    network: Network
    labels: np.ndarray
    value_range: tuple[float, float] = (0.0, 1.0)

    def __post_init__(self):
        lo, hi = self.value_range
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ParameterError(
                f"value_range must be two finite numbers (low, high) with low < high. Got {self.value_range!r} instead."
            )


class Mutator:
    """One kind of mutation with its parameters; a batch in, a batch of mutants out.

    Subclasses set ``name``, ``kind``, ``parameters`` (name -> :class:`Param`) and implement
    ``_mutate(x, rng, ctx)``; the base class validates parameters and inputs and clips the result.
    """

    name: ClassVar[str]
    kind: ClassVar[str]  # "noise" | "attack" | "transform"
    affine: ClassVar[bool] = False  # rotate/shift/scale/shear: at most one per chain (DeepHunter)
    needs_model: ClassVar[bool] = False
    stochastic: ClassVar[bool] = True  # False: the output does not depend on rng (fgsm, bim, cw)
    #: which validity rule judges its mutants (docs/design.md, "Mutations"; idcgen.fuzz.validity):
    #: "pixel" = DeepHunter's L0/L-inf bounds, "scene" = an SSIM floor (weather, light, camera transforms)
    validity: ClassVar[str] = "pixel"
    #: the models' tasks it can mutate for: an attack built on class scores has nothing to push on a
    #: regression model's one output, and a campaign of it would only fail step after step
    tasks: ClassVar[tuple[str, ...]] = ("classification", "regression")
    #: said when it cannot run on a model: what to use instead
    instead: ClassVar[str] = ""
    #: said only when the model's task is what it cannot run on (not, say, a backend without gradients)
    task_instead: ClassVar[str] = ""
    #: the network capability it needs (idcgen.framework.ForwardNetwork.capabilities): "forward", or
    #: "differentiable" for what takes gradients or relevance
    needs: ClassVar[str] = "forward"
    parameters: ClassVar[dict[str, Param]] = {}

    def __init__(self, **params):
        unknown = [key for key in params if key not in self.parameters]
        if unknown:
            raise ParameterError(
                f"{self.name} has no parameter {unknown[0]!r}; its parameters are: "
                f"{', '.join(self.parameters) or '(none)'}."
            )
        for key, spec in self.parameters.items():
            value = params.get(key, spec.default)
            if not spec.accepts(value):
                raise bad_parameter(self.name, key, spec.describe(), value)
            setattr(self, key, value)
        self._check_params()

    @property
    def moves_reference(self) -> bool:
        """Whether the chain's reference image changes with this mutator: an affine transform moves the
        reference with the same transform (DeepHunter), and a scene change (weather, light, camera) becomes
        the reference, so the pixel mutations after it are judged against the changed scene. A chain holds
        at most one such mutator (docs/design.md, "Mutations")."""
        return self.affine or self.validity == "scene"

    def check_model(self, network) -> None:
        """Raise a one-line error when this mutator cannot run on ``network`` at all (its backend lacks the
        capability it needs, or the model does not suit it), so a campaign refuses it before starting rather
        than failing every batch."""
        if self.capability_gap(network) is not None:
            raise ParameterError(
                f"mutator {self.name} takes the model's gradients, which this model's backend "
                "cannot give (it runs the model forward only): leave it out of the mutators"
            )
        reason = self.cannot_run(network)
        if reason is not None:
            raise ParameterError(
                f"mutator {self.name} cannot run on this model: {reason}; leave it out of the "
                "mutators" + (f" ({self.instead})" if self.instead else "")
            )

    def cannot_run(self, network) -> str | None:
        """Why this mutator cannot run on ``network`` at all, or None (override)."""
        return None

    def capability_gap(self, network) -> str | None:
        """Why ``network`` cannot run this mutator by what its backend can do (a forward-only backend takes no
        gradients), or None."""
        if self.needs not in getattr(network, "capabilities", ("forward", "differentiable")):
            return "it takes the model's gradients, which this model's backend cannot give (it runs the model forward only)"
        return None

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

    def mutate_with_reference(
        self, x: np.ndarray, reference: np.ndarray, rng: np.random.Generator, ctx: MutationContext
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(mutate(x), reference moved by the same transforms)``: what the loop calls on an ``affine`` mutator,
        which implements it (the affine transforms of idcgen.fuzz.mutators.image)."""
        raise NotImplementedError(f"{self.name} is not affine: it does not move the references with its mutants")

    def _finish(self, x: np.ndarray, out: np.ndarray, ctx: MutationContext) -> np.ndarray:
        """The contract's end: float32 of x's shape, finite, clipped to the value range."""
        out = np.asarray(out, dtype=np.float32)
        if out.shape != x.shape:
            raise RuntimeError(f"{self!r} returned shape {out.shape} for inputs of shape {x.shape}")
        if np.may_share_memory(out, x) or not out.flags.writeable:  # clipped below in place: never the input
            out = out.copy()
        lo, hi = ctx.value_range

        def part(rows: slice) -> int:  # rows at a time, in parts on the pool, in place; the non-finite count
            block = out[rows]
            bad = 0
            # all finite iff the extremes are (a NaN or an inf is one of them): two reductions, no mask to build
            if not (np.isfinite(block.min()) and np.isfinite(block.max())):
                finite = np.isfinite(block)  # keep the parent's pixel rather than hand a NaN to the model
                bad = int((~finite).sum())
                np.copyto(block, x[rows], where=~finite)
            np.clip(block, lo, hi, out=block)
            return bad

        bad = sum(run_parts(part, rows_of(out)))
        if bad:
            logger.warning("%r produced %d non-finite values; they keep the input's value", self, bad)
        return out

    def _mutate(self, x: np.ndarray, rng: np.random.Generator, ctx: MutationContext) -> np.ndarray:
        raise NotImplementedError

    def _check_batch(self, x, rng, ctx) -> np.ndarray:
        if not isinstance(rng, np.random.Generator):
            raise ParameterError(
                f"{self.name}: rng must be a numpy Generator (np.random.default_rng(...)). "
                f"Got {type(rng).__name__} instead."
            )
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 4:
            raise InputError(f"{self.name}: expected a batch of images (b, h, w, c); got shape {x.shape}")
        if len(x) == 0:
            return x
        lo, hi = ctx.value_range
        tol = 1e-6 * (hi - lo)
        low, high = extent(x)  # rows at a time on the pool (exact: a NaN stays a NaN)
        if not (lo - tol <= low and high <= hi + tol):  # NaN fails both comparisons
            raise InputError(
                f"{self.name}: inputs must be finite and inside value_range {ctx.value_range}; got "
                f"values in [{np.nanmin(x):g}, {np.nanmax(x):g}]"
            )
        if low < lo or high > hi:  # rounding error only: clip (on a copy), as cleverhans' C&W insists
            x = np.clip(x, lo, hi)
        if self.needs_model and len(ctx.labels) != len(x):
            raise InputError(f"{self.name}: got {len(ctx.labels)} labels for {len(x)} inputs")
        return x


def check_tasks(mutators, task: str) -> None:
    """Refuse, before a campaign starts, a mutator that cannot run on a model of ``task``."""
    for mutator in mutators:
        if task not in mutator.tasks:
            hint = mutator.task_instead or mutator.instead
            instead = f"; {hint}" if hint else ""
            raise ParameterError(
                f"{mutator.name} cannot run on a {task} model (it works on "
                f"{' and '.join(mutator.tasks)} models only){instead}"
            )
