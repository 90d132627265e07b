"""Noise mutators: Gaussian noise on all pixels, on the most relevant pixels, on random pixels."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ...threads import PART_BYTES, run_parts
from .base import Mutator, Param

if TYPE_CHECKING:
    from ...framework import Network


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


#: float32 normals in one part of a batch's noise: 4 MB, the size of the pool's other parts (threads.py)
NOISE_PART = PART_BYTES // 4


def noise_parts(size: int) -> int:
    """Parts a batch's ``size`` normals are drawn in, each from its own child generator: one per
    :data:`NOISE_PART`, and never fewer than two (the count before parts followed the size, so batches of up
    to two parts draw the same noise as then). Fixed by the size, never by the core count: the same
    campaign draws the same mutants on every machine, and a big batch spreads over as many threads as the
    pool has."""
    return max(2, -(-size // NOISE_PART))


def standard_normal(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """float32 N(0, 1) samples of ``shape``. Drawing them is most of the cost of Gaussian noise, so
    large arrays are filled in parts (:func:`noise_parts`) on the pool's threads."""
    out = np.empty(shape, np.float32)
    flat = out.reshape(-1)
    parts = noise_parts(flat.size)
    seeds = rng.integers(0, 2**63, size=parts)
    bounds = np.linspace(0, flat.size, parts + 1).astype(int)

    def fill(i):
        np.random.default_rng(seeds[i]).standard_normal(dtype=np.float32, out=flat[bounds[i] : bounds[i + 1]])

    if flat.size < 65_536:
        for i in range(parts):
            fill(i)
    else:
        run_parts(fill, range(parts))
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
    needs = "differentiable"  # the input relevance
    stochastic = True
    parameters = {
        "fraction": Param(0.02, float, 0.0, 1.0, closed="right"),
        "std": Param(0.75, float, 0.0, None, closed="neither"),
    }

    instead = "random_pixels perturbs as many pixels without relevance"

    def cannot_run(self, network) -> str | None:
        from ...errors import LayerError
        from ...relevance import input_relevance_pass

        try:
            input_relevance_pass(network)
        except LayerError as error:  # a layer without an LRP rule between the pixels and the logits
            return str(error)
        return None

    def positions(self, x: np.ndarray, network: Network) -> np.ndarray:
        """(b, k) flat indices of the most relevant pixel positions, most relevant first."""
        from ...relevance import input_relevance

        b, h, w, _ = x.shape
        score = np.abs(input_relevance(network, x).sum(axis=-1)).reshape(b, h * w)
        # the type ignore: numpy 2.4's stubs refuse a (slice, slice) index whose stop is an int (numpy accepts it)
        return np.argsort(-score, axis=1, kind="stable")[:, : pixel_count(self.fraction, h, w)]  # type: ignore[index]

    def _mutate(self, x, rng, ctx):
        lo, hi = ctx.value_range
        return noise_at(x, self.positions(x, ctx.network), self.std * (hi - lo), rng)


class RandomPixels(Mutator):
    """The RQ2 control: the same number of pixel positions as ``relevant_pixels``, chosen uniformly."""

    name = "random_pixels"
    kind = "noise"
    parameters = {
        "fraction": Param(0.02, float, 0.0, 1.0, closed="right"),
        "std": Param(0.75, float, 0.0, None, closed="neither"),
    }

    def _mutate(self, x, rng, ctx):
        b, h, w, _ = x.shape
        k = pixel_count(self.fraction, h, w)
        lo, hi = ctx.value_range
        return noise_at(x, distinct_positions(rng, b, h * w, k), self.std * (hi - lo), rng)
