"""Benchmark NeuraL-Coverage's criteria (NLC, TKNP, CC), MDSC and unscaled NC against NC on LeNet-5 and MNIST
(a script, not a test).

    python benchmarks/bench_value_criteria.py [--shared ../shared] [--inputs 10000] [--direct 2000] [--rounds 5]

Measures in one run, on the same test inputs:
- coverage of the ``--inputs`` first test inputs (forward pass included, batches of 1,024) by NC and by each
  new criterion, and its ratio to NC's (the goal: at most 2): ``--rounds`` rounds, each timing every
  criterion once in turn, so that a change of the machine's load falls on all of them; the best time of
  each, and the median over the rounds of each round's ratio to NC's in that round;
- a fuzz step's decision: ``would_cover`` on a batch of 256 after 1,000 inputs were added, each criterion
  against NC's;
- each definition computed directly, on activations already computed: NLC as the covariance of every
  layer recomputed over all inputs after each batch of 256, TKNP and unscaled NC with a Python loop per
  input, CC with TensorFuzz's exact loop over every kept vector; the value must equal idcgen's.
Uses DeepXplore's LeNet-5 weights (MNIST_Model3.h5) and MNIST from the folder ``--shared`` names.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lenet5_mnist import lenet5_mnist  # noqa: E402
from record import record  # noqa: E402

SPECS = ("nc", "nc(scaling=none)", "nlc", "tknp", "cc", "mdsc")


def best_of(repeats: int, run) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = run()
        best = min(best, time.perf_counter() - start)
    return best, out


def direct_nlc(acts: list[np.ndarray]) -> float:
    """The definition as written: after every batch of 256, each layer's covariance over all inputs so far."""
    value = 0.0
    for stop in range(256, len(acts[0]) + 256, 256):
        value = 0.0
        for a in acts:
            seen = a[:stop]
            centred = seen - seen.mean(axis=0)
            value += float(np.abs(centred.T @ centred / len(seen)).sum())
    return value


def direct_tknp(acts: list[np.ndarray], k: int) -> int:
    patterns = set()
    for i in range(len(acts[0])):
        patterns.add(tuple(frozenset(sorted(range(a.shape[1]), key=lambda j: (-a[i, j], j))[:k]) for a in acts))
    return len(patterns)


def direct_cc(acts: list[np.ndarray], threshold: float) -> int:
    total = 0
    for a in acts:
        kept: list = []
        for v in a:
            if not kept or min(float(np.sum(np.square(v - u))) for u in kept) > threshold:
                kept.append(v)
        total += len(kept)
    return total


def direct_unscaled_nc(acts: list[np.ndarray], threshold: float) -> int:
    covered = set()
    for i in range(len(acts[0])):
        for layer, a in enumerate(acts):
            for j in range(a.shape[1]):
                if a[i, j] > threshold:
                    covered.add((layer, j))
    return len(covered)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    parser.add_argument("--inputs", type=int, default=10000)
    parser.add_argument(
        "--direct", type=int, default=2000, help="inputs for the direct definitions (CC's is quadratic)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds of coverage timings, criteria in turn")
    args = parser.parse_args()

    from idcgen.criteria import make_criterion

    network, train, _, x_train, x_test = lenet5_mnist(args.shared)
    x = x_test[: args.inputs]
    print(f"LeNet-5 (DeepXplore weights), {len(x)} test inputs; MDSC fitted on the 60,000 training inputs")
    fitted = {}
    for spec in SPECS:
        crit = make_criterion(spec)
        fitted[spec] = crit.fit(network, x_train if crit.needs_data else x[:1], train.y if crit.needs_data else None)
        fitted[spec].coverage(network, x[:2048])  # trace the taps once

    print(f"load average (1, 5, 15 min) at the start: {os.getloadavg()}")
    times: dict[str, list[float]] = {spec: [] for spec in fitted}
    results = {}
    for _ in range(args.rounds):  # every criterion in turn, each round
        for spec, crit in fitted.items():
            t_cov, results[spec] = best_of(1, lambda: crit.coverage(network, x))
            times[spec].append(t_cov)
    rows = {}
    for spec, crit in fitted.items():
        features = crit.features(network, x[:1256])
        tracker = crit.tracker()
        tracker.update(features[:1000])
        t_step, _ = best_of(5, lambda: tracker.would_cover(features[1000:1256]))
        ratio = statistics.median(t / nc for t, nc in zip(times[spec], times["nc"]))
        rows[spec] = (results[spec], min(times[spec]), t_step, ratio)
        print(
            f"{spec}: {results[spec]}; coverage {min(times[spec]):.3f} s (median ratio to NC {ratio:.2f}), "
            f"would_cover(256) {1000 * t_step:.2f} ms",
            flush=True,
        )
    nc_cov, nc_step = rows["nc"][1], rows["nc"][2]

    direct = {}
    n = min(args.direct, len(x))
    for spec, run in (
        ("nc(scaling=none)", lambda a: direct_unscaled_nc(a, 0.75)),
        ("nlc", direct_nlc),
        ("tknp", lambda a: direct_tknp(a, 3)),
        ("cc", lambda a: direct_cc(a, 1.0)),
    ):
        crit = fitted[spec]
        _, acts = network.forward(x[:n], crit.forward_layers())
        acts = [np.asarray(a, np.float64) for a in acts[: len(crit.layers_)]]
        t_direct, value = best_of(1, lambda: run(acts))
        t_ours, ours = best_of(3, lambda: crit.coverage(network, x[:n]))
        mine = ours.score if spec == "nlc" else ours.covered
        same = abs(mine - value) <= 1e-6 * max(1.0, abs(value))
        direct[spec] = (t_direct, t_ours, value, mine, same)
        print(
            f"{spec} direct on {n} inputs: {t_direct:.2f} s (value {value:.6g}) vs idcgen {t_ours:.3f} s ({mine:.6g})"
        )

    print(f"load average (1, 5, 15 min) at the end of the timings: {os.getloadavg()}")
    print(
        f"\n| criterion | coverage of {len(x)} test inputs | coverage, best of {args.rounds} (s) | / NC (bests) "
        "| / NC (median of the rounds) | would_cover(256) (ms) | / NC |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for spec, (result, t_cov, t_step, ratio) in rows.items():
        print(
            f"| {spec} | {result} | {t_cov:.3f} | {t_cov / nc_cov:.2f} | {ratio:.2f} | {1000 * t_step:.2f} "
            f"| {t_step / nc_step:.1f} |"
        )
        record("coverage", t_cov, unit="s", criterion=spec, inputs=len(x), score=float(result.score))
        record("coverage / NC's", t_cov / nc_cov, unit="x", criterion=spec, inputs=len(x))
        record("coverage / NC's, median of rounds", ratio, unit="x", criterion=spec, inputs=len(x))
        record("would_cover(256) after 1000", t_step, unit="s", criterion=spec)
    print(f"\n| criterion | direct definition on {n} inputs (s) | idcgen, forward pass included (s) | same value |")
    print("|---|---:|---:|---|")
    for spec, (t_direct, t_ours, value, mine, same) in direct.items():
        print(f"| {spec} | {t_direct:.2f} | {t_ours:.3f} | {'yes' if same else f'NO ({value} vs {mine})'} |")
        record("direct definition", t_direct, unit="s", criterion=spec, inputs=n)
        record("idcgen coverage", t_ours, unit="s", criterion=spec, inputs=n, same=bool(same))


if __name__ == "__main__":
    main()
