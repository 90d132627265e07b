"""Benchmark DeepBase's two optimisations in `idcgen.affinity` (a script, not a test).

    python benchmarks/bench_affinity.py [--inputs 10000] [--tol 0.05] [--repeat 2]

On LeNet-5 (outputs/models/lenet5_mnist.keras, made by recipes/train_models.py) and the 10,000 MNIST test
inputs ($IDCGEN_MNIST, or ../shared/data/mnist through recipes/kit/paths.py):

1. early stopping: 8 units (the m = 8 important neurons of fc2, analysed on 10,000 training inputs) x 20
   hypotheses (the 17 built-in ones for MNIST and 3 more below), with ``--tol`` against every score on
   all inputs (tol 0): wall time, inputs streamed, and the largest difference between the two runs'
   scores, per measure; with the four measures, without mutual information, and correlations only; then
   the same differences and speed-ups for ``--orders`` other random orders of the inputs;
2. the shared pass: three unit groups (fc2's important neurons, 8 units of fc1, 8 channels of
   block2_conv1) in one call against one call per group, every score on all inputs.

Each configuration runs ``--repeat`` times (after one warm-up call that traces the model); the best time
counts. Writes outputs/bench_affinity/results.json and prints Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "recipes"))

from kit import OUTPUTS, load_data, load_model  # noqa: E402  (the recipes' kit: models and data)
from record import record  # noqa: E402


def ink_top(x, y):
    """Ink in the top half."""
    return x[:, : x.shape[1] // 2].mean(axis=(1, 2, 3))


def ink_left(x, y):
    """Ink in the left half."""
    return x[:, :, : x.shape[2] // 2].mean(axis=(1, 2, 3))


def height(x, y):
    """Height of the rows holding ink (share of the image)."""
    rows = (x > 0.5).any(axis=(2, 3))
    first = rows.argmax(axis=1)
    last = rows.shape[1] - 1 - rows[:, ::-1].argmax(axis=1)
    return np.where(rows.any(axis=1), (last - first + 1) / rows.shape[1], 0.0)


def best_of(repeat, fn):
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=10_000)
    parser.add_argument("--tol", type=float, default=0.05)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--orders", type=int, default=3, help="other random orders checked for the differences")
    args = parser.parse_args()

    from idcgen.analysis import analyze
    from idcgen.deepbase import UnitGroup, affinity
    from idcgen.deepbase.hypotheses import Hypothesis, builtin_hypotheses
    from idcgen.framework import Network

    network = Network(load_model("lenet5", "mnist"))
    x_train, y_train = load_data("train", "mnist", limit=10_000)
    x, y = load_data("test", "mnist", limit=args.inputs)
    analysis = analyze(network, x_train, y_train, layer="fc2", m=8, random_state=0, progress=False)
    hyps = builtin_hypotheses(n_classes=10, channels=1) + [
        Hypothesis(f.__name__, f, f.__doc__.rstrip(".")) for f in (ink_top, ink_left, height)
    ]
    assert len(hyps) == 20
    affinity(network, x[:512], y[:512], analysis=analysis, hypotheses=hyps, progress=False)  # trace the model
    results = {
        "inputs": len(x),
        "units": 8,
        "hypotheses": len(hyps),
        "tol": args.tol,
        "early_stopping": [],
        "shared_pass": {},
        "load_average_start": os.getloadavg(),
    }
    print(f"load average at the start: {' '.join(f'{v:.1f}' for v in os.getloadavg())}\n")

    print(f"## Early stopping ({len(x)} inputs, 8 units of fc2, {len(hyps)} hypotheses, tol {args.tol})\n")
    print(
        "| measures | without (s) | with (s) | speed-up | inputs streamed | largest difference per measure "
        "(share within tol) | other orders: largest difference (scores beyond tol); speed-ups (inputs streamed) |\n"
        "|---|---:|---:|---:|---:|---|---|"
    )
    for measures in ("pearson,spearman,mi,linear", "pearson,spearman,linear", "pearson,spearman"):
        t_full, full = best_of(
            args.repeat,
            lambda: affinity(
                network, x, y, analysis=analysis, hypotheses=hyps, measures=measures, tol=0, progress=False
            ),
        )
        t_early, early = best_of(
            args.repeat,
            lambda: affinity(
                network, x, y, analysis=analysis, hypotheses=hyps, measures=measures, tol=args.tol, progress=False
            ),
        )
        diffs = {}
        for m in early.measures:
            d = np.abs(early.scores[m] - full.scores[m])
            d = d[~np.isnan(d)]
            diffs[m] = {
                "max": float(d.max()),
                "within_tol": float((d <= args.tol).mean()),
                "inputs_used_median": float(np.median(early.n_used[m])),
            }
        others = {m: {"max": 0.0, "beyond_tol": 0, "scores": 0} for m in early.measures}
        order_times = []
        for order in range(1, args.orders + 1):  # is the rule right on other prefixes too? how fast there?
            kw = dict(analysis=analysis, hypotheses=hyps, measures=measures, progress=False, random_state=order)
            o_full, a_full = best_of(args.repeat, lambda: affinity(network, x, y, tol=0, **kw))
            o_early, a_early = best_of(args.repeat, lambda: affinity(network, x, y, tol=args.tol, **kw))
            order_times.append(
                {
                    "order": order,
                    "seconds_without": o_full,
                    "seconds_with": o_early,
                    "speedup": o_full / o_early,
                    "inputs_streamed": a_early.n_seen,
                }
            )
            for m in early.measures:
                d = np.abs(a_early.scores[m] - a_full.scores[m])
                d = d[~np.isnan(d)]
                others[m]["max"] = max(others[m]["max"], float(d.max()))
                others[m]["beyond_tol"] += int((d > args.tol).sum())
                others[m]["scores"] += int(d.size)
        row = {
            "measures": measures,
            "seconds_without": t_full,
            "seconds_with": t_early,
            "speedup": t_full / t_early,
            "inputs_streamed": early.n_seen,
            "checks": early.checks,
            "differences": diffs,
            "other_orders": others,
            "other_orders_times": order_times,
            "timings_without": full.timings,
            "timings_with": early.timings,
        }
        results["early_stopping"].append(row)
        said = ", ".join(f"{m} {v['max']:.3f} ({v['within_tol']:.0%})" for m, v in diffs.items())
        said_others = ", ".join(f"{m} {v['max']:.3f} ({v['beyond_tol']} of {v['scores']})" for m, v in others.items())
        said_others += "; speed-ups " + ", ".join(f"{o['speedup']:.1f}x ({o['inputs_streamed']})" for o in order_times)
        record("affinity without early stopping", t_full, unit="s", measures=measures, inputs=len(x))
        record("affinity with early stopping", t_early, unit="s", measures=measures, inputs_streamed=early.n_seen)
        print(
            f"| {measures} | {t_full:.2f} | {t_early:.2f} | {t_full / t_early:.1f}x | {early.n_seen} "
            f"(checks at {', '.join(map(str, early.checks))}) | {said} | {said_others} |",
            flush=True,
        )

    groups = [
        UnitGroup("fc2 important", "fc2", tuple(int(i) for i in analysis.neurons)),
        UnitGroup("fc1:0-7", "fc1", tuple(range(8))),
        UnitGroup("block2_conv1:0-7", "block2_conv1", tuple(range(8))),
    ]
    print(
        f"\n## Shared pass ({len(x)} inputs, 3 groups of 8 units, {len(hyps)} hypotheses, every score on all inputs)\n"
    )
    print("| measures | one call for the 3 groups (s) | one call per group (s) | speed-up |\n|---|---:|---:|---:|")
    for measures in ("pearson,spearman", "pearson,spearman,mi,linear"):
        t_shared, shared = best_of(
            args.repeat,
            lambda: affinity(network, x, y, units=groups, hypotheses=hyps, measures=measures, tol=0, progress=False),
        )
        t_apart, _ = best_of(
            args.repeat,
            lambda: [
                affinity(network, x, y, units=[g], hypotheses=hyps, measures=measures, tol=0, progress=False)
                for g in groups
            ],
        )
        results["shared_pass"][measures] = {
            "seconds_shared": t_shared,
            "seconds_per_group": t_apart,
            "timings_shared": shared.timings,
        }
        print(f"| {measures} | {t_shared:.2f} | {t_apart:.2f} | {t_apart / t_shared:.1f}x |")
        record("affinity, one call for 3 groups", t_shared, unit="s", measures=measures)
        record("affinity, one call per group", t_apart, unit="s", measures=measures)
    results["load_average_end"] = os.getloadavg()
    print(f"\nload average at the end: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    folder = OUTPUTS / "bench_affinity"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwritten to {folder / 'results.json'}")


if __name__ == "__main__":
    main()
