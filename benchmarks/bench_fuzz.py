"""Benchmark the fuzz loop on LeNet-5 / MNIST (a script, not a test).

    python benchmarks/bench_fuzz.py [--shared ../shared] [--budget 10000] [--seeds 100] [--m 6 8]

Measures in one run:
1. throughput: the loop with cheap mutators (noise and transforms; noise only) in execs/s, against the
   raw batched forward throughput (a tf.function forward pass at the same batch size, 256 and 1024),
   timed alternately in blocks of 32 steps and 32 back-to-back passes (the machine's speed drifts by
   10-30 % between seconds); the ratio of each of --rounds runs, and their median;
2. a budget-N campaign with the default mutators from the first S MNIST test inputs, for each m:
   wall time, IDC of the seeds and of the grown set, findings, and the per-mutator table.
Uses DeepXplore's LeNet-5 weights and full MNIST from ../shared (the analysis runs on the 60,000
training inputs).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lenet5_mnist import lenet5_mnist, raw_forward  # noqa: E402
from record import record  # noqa: E402

CHEAP = "gauss,random_pixels,brightness,contrast,noise,rotate,shift"
NOISE = "gauss,random_pixels"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    parser.add_argument("--budget", type=int, default=10_000)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--m", type=int, nargs="+", default=[6, 8])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--throughput-execs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5, help="throughput runs per setting")
    args = parser.parse_args()

    import tensorflow as tf

    from idcgen.analysis import analyze
    from idcgen.fuzz.fuzzer import Fuzzer
    from idcgen.fuzz.mutators import DEFAULT_MUTATORS, parse_mutators
    from idcgen.report import mutator_table

    network, train, test, x_train, x_test = lenet5_mnist(args.shared)
    model = network.model
    analyses = {m: analyze(network, x_train, train.y, layer="fc2", m=m, random_state=0, progress=False) for m in args.m}

    # 1. throughput. This (shared, virtual) machine's speed drifts by 10-30 % from one second to the
    # next, so the loop and raw forward passes alternate in blocks: BLOCK steps of the loop (one run()
    # call), then BLOCK
    # back-to-back passes over a fixed batch of the same size, timed after one untimed pass (the raw
    # figure is the hot, best case). Rounds of that give a ratio each; the median round is reported.
    forward, _ = raw_forward(model)
    analysis = analyses[max(args.m)]
    block = 32

    def throughputs(mutators: str, batch) -> tuple[float, float, float]:
        """(loop execs/s, raw forward inputs/s, the loop's own CPU microseconds per mutant: its process CPU
        time per exec less the raw forward pass' per input), timed alternately in blocks."""
        raw_seconds = loop_seconds = raw_cpu = loop_cpu = 0.0
        loop_execs = raw_inputs = 0
        with tempfile.TemporaryDirectory() as tmp:
            fuzzer = Fuzzer(analysis, mutators=mutators.split(","), batch_size=len(batch), random_state=0)
            campaign = fuzzer.start(x_test[: args.seeds], test.y[: args.seeds], Path(tmp) / "c", budget=1)
            while loop_execs < args.throughput_execs:
                t0, e0, c0 = campaign.elapsed, campaign.execs, time.process_time()
                fuzzer.run(campaign, budget=campaign.execs + block * len(batch), progress=False)
                loop_cpu += time.process_time() - c0
                loop_seconds += campaign.elapsed - t0
                loop_execs += campaign.execs - e0
                forward(batch).numpy()
                start, c0 = time.perf_counter(), time.process_time()
                for _ in range(block):
                    forward(batch).numpy()
                raw_seconds += time.perf_counter() - start
                raw_cpu += time.process_time() - c0
                raw_inputs += block * len(batch)
        own = 1e6 * (loop_cpu / loop_execs - raw_cpu / raw_inputs)
        return loop_execs / loop_seconds, raw_inputs / raw_seconds, own

    for batch_size in sorted({args.batch_size, 1024}):
        batch = tf.constant(x_test[:batch_size])
        for mutators in (CHEAP, NOISE):  # warm up imports, traces and thread pools
            throughputs(mutators, batch)
        for label, mutators in (("noise and transforms", CHEAP), ("noise only", NOISE)):
            rounds = np.array([throughputs(mutators, batch) for _ in range(args.rounds)])
            ratio = rounds[:, 0] / rounds[:, 1]
            print(
                f"batch {batch_size}, {label} ({mutators}): loop {np.median(rounds[:, 0]):,.0f} execs/s, raw "
                f"forward {np.median(rounds[:, 1]):,.0f} inputs/s; ratio per round "
                f"{', '.join(f'{r:.2f}' for r in ratio)}: median {np.median(ratio):.2f}x; the loop's own CPU "
                f"per mutant {np.median(rounds[:, 2]):.0f} us"
            )
            setting = {"batch": batch_size, "mutators": label, "rounds": args.rounds, "m": max(args.m)}
            record("loop throughput", float(np.median(rounds[:, 0])), unit="execs/s", **setting)
            record("raw forward throughput", float(np.median(rounds[:, 1])), unit="inputs/s", **setting)
            record("loop / raw forward", float(np.median(ratio)), unit="x", per_round=ratio.tolist(), **setting)
            record("loop's own CPU per mutant", float(np.median(rounds[:, 2])), unit="us", **setting)

    # 2. budget-N campaigns with the default mutators
    for m in args.m:
        with tempfile.TemporaryDirectory() as tmp:
            fuzzer = Fuzzer(
                analyses[m], mutators=parse_mutators(DEFAULT_MUTATORS), batch_size=args.batch_size, random_state=0
            )
            start = time.perf_counter()
            campaign = fuzzer.start(x_test[: args.seeds], test.y[: args.seeds], Path(tmp) / "c", budget=args.budget)
            seeds_cov = campaign.tracker.result()
            fuzzer.run(campaign, progress=False)
            wall = time.perf_counter() - start
            print(
                f"\nm={m}: budget {args.budget} from {args.seeds} seeds in {wall:.1f} s; IDC seeds {seeds_cov} -> "
                f"grown set {campaign.tracker.result()} ({len(campaign.corpus)} inputs); "
                f"{campaign.n_findings} findings; full test set (10,000) reaches {analyses[m].coverage(x_test)}"
            )
            setting = {"m": m, "budget": args.budget, "seeds": args.seeds, "batch": args.batch_size}
            record("campaign wall time", wall, unit="s", **setting)
            record("campaign findings", campaign.n_findings, **setting)
            record("IDC of the grown set", float(campaign.tracker.result().score), **setting)
            print("| mutator | execs | valid | kept | findings | seconds | IDC gain per 1,000 execs | errors |")
            print("|---|---|---|---|---|---|---|---|")
            for r in mutator_table(campaign):
                print(
                    f"| `{r['mutator']}` | {r['execs']} | {r['valid']} | {r['kept']} | {r['findings']} | "
                    f"{r['seconds']:.1f} | {100 * r['idc_gain_per_1000_execs']:+.2f} pp | {r['errors']} |"
                )


if __name__ == "__main__":
    main()
