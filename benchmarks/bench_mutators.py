"""Benchmark every mutator on LeNet-5 / MNIST (a script, not a test).

    python benchmarks/bench_mutators.py [--shared ../shared] [--extra "cw(lr=0.005)" ...]

For each registered mutator with its default parameters (then the --extra specs): one warm-up call,
then one timed call on a batch of 100 embedded MNIST test digits (jsma on 10). Warm-up runs on the
same batch, except for cw and jsma (2 images, to save minutes). Prints seconds per 100 images, the
fraction of mutants whose prediction differs from the input's (an attack's success rate), and the
mean L-inf and L2 distance to the input. Uses DeepXplore's LeNet-5 weights (MNIST_Model3.h5) if present.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from record import record  # noqa: E402

SMALL_BATCH = {"jsma": 10}
SHORT_WARMUP = {"cw", "jsma"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument(
        "--extra",
        nargs="*",
        default=["cw(lr=0.005)"],
        help="further specs to time (default: C&W at the paper's learning rate)",
    )
    args = parser.parse_args()

    from idcgen.data import fit_to_model, load_inputs
    from idcgen.framework import Network
    from idcgen.framework.keras_zoo import lenet5
    from idcgen.fuzz.mutators import REGISTRY, MutationContext, make_mutator

    model = lenet5()
    weights = args.shared / "models" / "deepxplore" / "MNIST_Model3.h5"
    if weights.exists():
        model.load_weights(weights)
        print(f"model: LeNet-5 with {weights}")
    else:
        print(f"model: LeNet-5 UNTRAINED ({weights} not found): success rates mean little")
    net = Network(model)
    ds = load_inputs("embedded-mnist:test")
    x_all, y_all = fit_to_model(ds, (28, 28, 1))[: args.n], ds.y[: args.n]
    pred_all = net.predict(x_all)
    print(f"inputs: {len(x_all)} embedded MNIST test digits, accuracy {np.mean(pred_all == y_all):.2%}")

    specs = [name for name in REGISTRY if REGISTRY[name].kind in ("noise", "transform", "attack")] + args.extra
    print(f"\n{'mutator':<58} {'kind':<9} {'batch':>5} {'s/100 img':>10} {'changed':>8} {'L-inf':>6} {'L2':>6}")
    for spec in specs:
        mutator = make_mutator(spec)
        n = min(SMALL_BATCH.get(mutator.name, len(x_all)), len(x_all))
        x, y, pred = x_all[:n], y_all[:n], pred_all[:n]
        warm = 2 if mutator.name in SHORT_WARMUP else n
        mutator.mutate(x[:warm], np.random.default_rng(1), MutationContext(net, y[:warm]))
        start = time.perf_counter()
        out = mutator.mutate(x, np.random.default_rng(0), MutationContext(net, y))
        seconds = time.perf_counter() - start
        diff = (out - x).reshape(n, -1)
        changed = np.mean(net.predict(out) != pred)
        record(
            "seconds per 100 images",
            seconds * 100 / n,
            unit="s",
            mutator=repr(mutator),
            kind=mutator.kind,
            batch=n,
            changed=float(changed),
            linf=float(np.abs(diff).max(axis=1).mean()),
            l2=float(np.linalg.norm(diff, axis=1).mean()),
        )
        print(
            f"{mutator!r:<58} {mutator.kind:<9} {n:>5} {seconds * 100 / n:>10.3f} {changed:>8.0%} "
            f"{np.abs(diff).max(axis=1).mean():>6.3f} {np.linalg.norm(diff, axis=1).mean():>6.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
