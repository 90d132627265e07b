"""Gaussian noise's normals drawn in two parts (as before 2026-11-27) and in parts fixed by the size
(idcgen/fuzz/mutators/noise.py), alternating in one process (a script, not a test).

    python benchmarks/bench_noise.py [--rounds 7] [--images 256 1024 4096]

Prints, for (n, 32, 32, 3) batches, the median milliseconds of each and their ratio (and records them,
benchmarks/record.py); the pool's thread count (threads.WORKERS) and the load average are printed first, since
both decide what more parts can gain.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from idcgen import threads  # noqa: E402
from idcgen.fuzz.mutators import noise  # noqa: E402
from record import record  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--images", type=int, nargs="+", default=[256, 1024, 4096])
    args = parser.parse_args()
    print(f"pool threads {threads.WORKERS}, load average {' '.join(open('/proc/loadavg').read().split()[:3])}")
    by_size = noise.noise_parts
    schemes = {"two parts": lambda size: 2, "parts by size": by_size}
    try:
        for images in args.images:
            shape = (images, 32, 32, 3)
            seconds: dict[str, list[float]] = {name: [] for name in schemes}
            for r in range(args.rounds):
                for name, parts in schemes.items():
                    noise.noise_parts = parts
                    start = time.perf_counter()
                    noise.standard_normal(np.random.default_rng(r), shape)
                    seconds[name].append(time.perf_counter() - start)
            before, after = (statistics.median(seconds[name]) * 1e3 for name in schemes)
            for name, ms in (("two parts", before), ("parts by size", after)):
                record(
                    "median ms to draw a batch's noise",
                    ms,
                    unit="ms",
                    scheme=name,
                    images=images,
                    parts=by_size(images * 3072) if name == "parts by size" else 2,
                    rounds=args.rounds,
                    pool_threads=threads.WORKERS,
                )
            print(
                f"{images} images ({by_size(images * 3072)} parts by size): two parts {before:.1f} ms, "
                f"parts by size {after:.1f} ms, ratio {after / before:.2f}"
            )
    finally:
        noise.noise_parts = by_size


if __name__ == "__main__":
    main()
