"""The passes an analysis makes over its training inputs besides the model's (a script, not a test).

    python benchmarks/bench_data_passes.py [--images 2000] [--rounds 5] [--only passes,analysis]

``passes``: on (n, 224, 224, 3) float32 images (2,000: 1.2 GB), the median seconds of each check the
analysis runs, as one pass of numpy or hashlib over the whole array (before 2026-11-27) and in parts on the
pool (idcgen/threads.py): whether every value is finite, the extent (min and max), the fingerprint's hash;
with their ratios, measured alternately in one process. ``analysis``: ``idcgen.analyze`` of the same images
with a PyTorch model that costs next to nothing (one 16x16 convolution of stride 16 to 8 channels, a dense
layer), its seconds and the part outside its relevance, activation and cluster passes; run it in two trees
for a before and after (it uses only the public API). Prints and records (benchmarks/record.py) each figure
with the pool's thread count and the load average.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from record import record  # noqa: E402

SHAPE = (224, 224, 3)


def median_seconds(work, rounds: int) -> float:
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def whole_hash(x) -> str:
    digest = hashlib.blake2b(digest_size=4)
    digest.update(memoryview(np.ascontiguousarray(x)).cast("B"))
    return digest.hexdigest()


def bench_passes(x, rounds: int, context: dict) -> None:
    from idcgen import threads

    def parts_hash(a) -> str:
        digest = hashlib.blake2b(digest_size=4)
        threads.hash_into(digest, a)
        return digest.hexdigest()

    pairs = {
        "finite": (lambda: bool(np.isfinite(x).all()), lambda: bool(np.isfinite(threads.extent(x)).all())),
        "extent": (lambda: (float(x.min()), float(x.max())), lambda: threads.extent(x)),
        "hash": (lambda: whole_hash(x), lambda: parts_hash(x)),
    }
    for name, (one_pass, in_parts) in pairs.items():
        assert name == "hash" or one_pass() == in_parts()
        seconds = {"one pass": [], "in parts": []}
        for _ in range(rounds):  # alternating, so that a change of load meets both
            for scheme, work in (("one pass", one_pass), ("in parts", in_parts)):
                seconds[scheme].append(median_seconds(work, 1))
        before, after = (statistics.median(seconds[s]) for s in ("one pass", "in parts"))
        for scheme, value in (("one pass", before), ("in parts", after)):
            record(f"median s of the {name} pass", value, unit="s", scheme=scheme, **context)
        print(f"{name:>7}: one pass {before:.3f} s, in parts {after:.3f} s, ratio {after / before:.2f}")


def bench_analysis(x, rounds: int, context: dict) -> None:
    import torch
    from torch import nn

    from idcgen import Network
    from idcgen.analysis import analyze

    class Free(nn.Module):
        input_shape = SHAPE

        def __init__(self):
            super().__init__()
            self.conv, self.fc = nn.Conv2d(3, 8, 16, stride=16), nn.Linear(8, 10)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x)).mean((2, 3)))

    torch.manual_seed(0)
    network = Network(Free().eval(), device="cpu")
    analyze(network, x[:64], layer="conv", m=4, clusters=[2, 3], progress=False)  # warm-up
    totals, outside = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        found = analyze(network, x, layer="conv", m=4, progress=False)
        totals.append(time.perf_counter() - start)
        outside.append(totals[-1] - sum(found.timings.values()))
    total, rest = statistics.median(totals), statistics.median(outside)
    record("median s of an analysis with a free model", total, unit="s", outside_the_passes=rest, **context)
    print(f"analysis: {total:.3f} s, of it outside the relevance, activation and cluster passes {rest:.3f} s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default="passes,analysis")
    args = parser.parse_args()
    x = np.random.default_rng(0).random((args.images, *SHAPE), dtype=np.float32)
    try:
        from idcgen.threads import WORKERS
    except ImportError:  # a tree from before idcgen/threads.py (idcgen/parallel.py), or before that
        try:
            from idcgen.parallel import WORKERS
        except ImportError:
            from idcgen.fuzz.mutators.parallel import WORKERS
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    context = dict(images=args.images, gigabytes=round(x.nbytes / 1e9, 2), pool_threads=WORKERS, load=load)
    print(f"{args.images} images of {SHAPE} ({x.nbytes / 1e9:.2f} GB), pool threads {WORKERS}, load average {load}")
    if "passes" in args.only:
        bench_passes(x, args.rounds, context)
    if "analysis" in args.only:
        bench_analysis(x, args.rounds, context)


if __name__ == "__main__":
    main()
