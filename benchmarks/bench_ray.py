"""Benchmark scale-out on Ray: analysis, coverage and fuzzing with 1 and 2 local workers (a script, not a test).

    python benchmarks/bench_ray.py [--mnist-train 60000] [--cifar-train 10000] [--fuzz-budget 24000] [--fuzz-rounds 3]
        [--repeats 3] [--skip-cifar]

Measures in one run, and prints a Markdown table with the ratios:
- analysis (m = 8) of MNIST's training inputs on LeNet-5 and of CIFAR-10 training inputs on the CIFAR-10 CNN,
  and the IDC of each test set: in this process (TensorFlow's default threads), then on a pool of 1 and of 2
  Ray workers, each held to one TensorFlow intra-op thread; the pool's start (actors loading the model) is
  timed apart, and each pass runs 1 + `--repeats` times (the first includes each worker's tracing of its
  TensorFlow functions; the ratios are of the median of the others). Each Ray result is checked against
  the single-process one (same neurons and k, centroids within 1e-5, the same covered set);
- parallel fuzzing of the CIFAR-10 CNN (100 test seeds, transform mutators, batch 128) with 1 and 2 workers
  (one intra-op thread each) at the same total budget: execs/s (execs over the campaigns' own time, and over
  the wall time with the actors' start) and the merged IDC, in `--fuzz-rounds` rounds that alternate 1 and 2
  workers (each worker traces its forward pass before a start barrier; the median ratio is the figure);
- the machine's ceiling: the CIFAR-10 CNN's forward pass in one and in two plain processes (no Ray).
The load average (1 min) is printed beside each figure: on a shared machine the scaling shows the others' load.
Models: outputs/models/lenet5.keras and cifar10_cnn.keras (made by recipes/train_models.py);
data: MNIST via $IDCGEN_MNIST (set by recipes/kit/paths.py in the workspace), CIFAR-10 from ../shared/data/cifar10.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "recipes"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import kit as common  # noqa: E402  (recipes/kit: models and data of the recipes)
from record import record  # noqa: E402

RTOL = 1e-5
MUTATORS = "gauss,brightness,contrast,rotate,shift"


def load() -> float:
    return os.getloadavg()[0]


def timed(fn, *args, **kwargs):
    start, before = time.perf_counter(), load()
    out = fn(*args, **kwargs)
    return time.perf_counter() - start, out, max(before, load())


def same(a, b) -> bool:
    return (
        np.array_equal(a.neurons, b.neurons)
        and [c.k for c in a.clusters] == [c.k for c in b.clusters]
        and all(np.allclose(c.centroids, d.centroids, rtol=RTOL, atol=1e-7) for c, d in zip(a.clusters, b.clusters))
    )


def again(repeats: int, fn, *args, **kwargs) -> float:
    """The median time of ``repeats`` more calls (after a first one that traced the TensorFlow functions)."""
    return float(np.median([timed(fn, *args, **kwargs)[0] for _ in range(repeats)]))


def bench_analysis(name: str, dataset: str, n_train: int, rows: list, repeats: int) -> tuple:
    import idcgen
    from idcgen.distributed import Workers

    model = common.load_model(name, dataset)
    path = common.model_path(name, dataset)
    x, y = common.load_data("train", dataset, n_train)
    x_test, _ = common.load_data("test", dataset)
    t_a, single, l_a = timed(idcgen.analyze, model, x, y, m=8, progress=False)
    t_a2 = again(repeats, idcgen.analyze, model, x, y, m=8, progress=False)
    t_c, cov, l_c = timed(single.tracker, x_test)
    t_c2 = again(repeats, single.tracker, x_test)
    base = dict(subject=f"{name} / {dataset}", inputs=f"{len(x)} train, {len(x_test)} test")
    rows.append(
        dict(
            base,
            run="one process (TF default threads)",
            start=0.0,
            analysis=t_a,
            again=t_a2,
            coverage=t_c,
            coverage_again=t_c2,
            load=max(l_a, l_c),
            same="-",
        )
    )
    print(f"{name}: one process: analysis {t_a:.1f} s, coverage {t_c:.1f} s (load {max(l_a, l_c):.1f})", flush=True)
    by_workers = {}
    for workers in (1, 2):
        t_s, pool, l_s = timed(Workers, path, workers=workers, threads=1)
        with pool:
            t_a, sharded, l_a = timed(pool.analyze, x, y, m=8, progress=False)  # each worker traces first
            t_a2 = again(repeats, pool.analyze, x, y, m=8, progress=False)  # then reuses its trace
            t_c, tracker, l_c = timed(pool.tracker, single, x_test)
            t_c2 = again(repeats, pool.tracker, single, x_test)
        ok = same(single, sharded) and np.array_equal(tracker.covered_ids(), cov.covered_ids())
        by_workers[workers] = (t_a2, t_c2)
        rows.append(
            dict(
                base,
                run=f"Ray, {workers} worker(s) x 1 thread",
                start=t_s,
                analysis=t_a,
                again=t_a2,
                coverage=t_c,
                coverage_again=t_c2,
                load=max(l_s, l_a, l_c),
                same="yes" if ok else "NO",
            )
        )
        print(
            f"{name}: {workers} Ray worker(s): start {t_s:.1f} s, analysis {t_a:.1f} s, coverage {t_c:.1f} s, "
            f"same result: {ok} (load {max(l_s, l_a, l_c):.1f})",
            flush=True,
        )
    return single, x_test, by_workers


CEILING = """
import os, sys, time
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
import keras, numpy as np
model = keras.models.load_model(sys.argv[1], compile=False)
run = tf.function(lambda x: model(x, training=False))
x = np.random.default_rng(0).random((128, *model.input_shape[1:]), np.float32)
for _ in range(5):
    run(x)
start_at, seconds = float(sys.argv[2]), float(sys.argv[3])
if time.time() > start_at:
    sys.exit("not ready at the start time")
time.sleep(start_at - time.time())   # the processes' windows coincide
start, n = time.perf_counter(), 0
while time.perf_counter() - start < seconds:
    run(x)
    n += 1
print(n * len(x) / (time.perf_counter() - start))
"""


def bench_ceiling(seconds: float = 20.0) -> float:
    """What the machine allows: the CIFAR-10 CNN's forward pass (batch 128, one TensorFlow thread) in one
    plain process, then in two at once, no Ray; returns two against one (inputs/s summed)."""
    import subprocess

    path = str(common.model_path("cifar10_cnn", "cifar10"))

    def run(n):
        start_at = time.time() + 30  # after every process has imported TensorFlow and traced its pass
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", CEILING, path, str(start_at), str(seconds)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(n)
        ]
        outs = [p.communicate() for p in procs]
        failed = [err.strip().splitlines()[-1:] for p, (_, err) in zip(procs, outs) if p.returncode]
        if failed:
            raise SystemExit(f"the ceiling's forward-pass process failed: {failed[0]}")
        return sum(float(out) for out, _ in outs)

    one, two = run(1), run(2)
    print(
        f"ceiling: forward pass in plain processes, one TF thread each: 1 process {one:.0f} inputs/s, 2 processes "
        f"{two:.0f} inputs/s: {two / one:.2f}x (load {load():.1f})",
        flush=True,
    )
    return two / one


def bench_fuzz(analysis, x_test, budget: int, rounds: int) -> list[dict]:
    """``rounds`` rounds of a campaign with 1 worker, then one with 2, at the same total budget; per round
    {workers: figures}. Alternating the two spreads the machine's drift over both."""
    from idcgen.distributed import fuzz
    from idcgen.fuzz.campaign import Campaign
    from idcgen.fuzz.fuzzer import Fuzzer
    from idcgen.fuzz.mutators import parse_mutators

    path = common.model_path("cifar10_cnn", "cifar10")
    _, y_test = common.load_data("test", "cifar10")
    seeds, labels = x_test[:100], y_test[:100]
    found = []
    for round_ in range(rounds):
        out = {}
        for workers in (1, 2):
            folder = Path(tempfile.mkdtemp(prefix=f"bench_ray_fuzz{workers}_"))
            wall, result, l_f = timed(
                fuzz,
                path,
                analysis,
                seeds,
                labels,
                budget=budget,
                out=folder / "c",
                workers=workers,
                settings=Fuzzer(analysis, mutators=parse_mutators(MUTATORS), batch_size=128).settings(budget),
            )
            merged = Campaign.load(folder / "c" / "merged")
            own = max(w["elapsed_seconds"] for w in result["workers"])
            each = [(w["execs"], w["elapsed_seconds"], w["sync_wait_seconds"]) for w in result["workers"]]
            out[workers] = dict(
                execs=result["execs"],
                own=own,
                wall=wall,
                idc=merged.tracker.score,
                load=l_f,
                imports=sum(w["imports"] for w in result["workers"]),
                each=each,
            )
            print(
                f"round {round_ + 1}, fuzz {workers} worker(s): {result['execs']} execs, "
                f"{result['execs'] / own:.0f} execs/s over the campaigns' time ({own:.1f} s), "
                f"{result['execs'] / wall:.0f} execs/s over the wall time ({wall:.1f} s with the start), merged IDC "
                f"{merged.tracker.score:.1%}, {out[workers]['imports']} imported (load {l_f:.1f}); each worker "
                f"(execs, seconds, of them waiting on syncs): "
                f"{', '.join(f'({e}, {t:.1f}, {w:.2f})' for e, t, w in each)}",
                flush=True,
            )
            shutil.rmtree(folder, ignore_errors=True)
        found.append(out)
    return found


def rate(run: dict) -> float:
    return run["execs"] / run["own"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mnist-train", type=int, default=60000)
    parser.add_argument("--cifar-train", type=int, default=10000)
    parser.add_argument("--fuzz-budget", type=int, default=24000)
    parser.add_argument("--fuzz-rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="timed analyses and coverages after the first")
    parser.add_argument("--skip-cifar", action="store_true")
    args = parser.parse_args()
    import ray

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    print(f"{os.cpu_count()} cores; load average at start {os.getloadavg()}", flush=True)
    rows = []
    ratios = {}
    _, _, mnist = bench_analysis("lenet5", "mnist", args.mnist_train, rows, args.repeats)
    ratios["lenet5"] = mnist
    if not args.skip_cifar:
        analysis, x_test, cifar = bench_analysis("cifar10_cnn", "cifar10", args.cifar_train, rows, args.repeats)
        ratios["cifar10_cnn"] = cifar
        ceiling = bench_ceiling()
        fz = bench_fuzz(analysis, x_test, args.fuzz_budget, args.fuzz_rounds)

    print(
        "\n| subject | inputs | run | start (s) | analysis (s): first, median after | coverage (s): first, "
        "median after | "
        "same result | load (1 min) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['subject']} | {r['inputs']} | {r['run']} | {r['start']:.1f} | {r['analysis']:.1f}, "
            f"{r['again']:.1f} | {r['coverage']:.1f}, {r['coverage_again']:.1f} | {r['same']} | {r['load']:.1f} |"
        )
        setting = {"subject": r["subject"], "inputs": r["inputs"], "run": r["run"], "same_result": r["same"]}
        record("pool start", r["start"], unit="s", **setting)
        record("analysis, median after the first", r["again"], unit="s", first=r["analysis"], **setting)
        record("coverage, median after the first", r["coverage_again"], unit="s", first=r["coverage"], **setting)
    print("\nscaling, 2 workers against 1, medians after the first runs (the workers' functions traced; ideal 2.00x):")
    for name, w in ratios.items():
        print(f"- {name}: analysis {w[1][0] / w[2][0]:.2f}x, coverage {w[1][1] / w[2][1]:.2f}x")
        record("analysis, 2 workers against 1", w[1][0] / w[2][0], unit="x", subject=name)
        record("coverage, 2 workers against 1", w[1][1] / w[2][1], unit="x", subject=name)
    if not args.skip_cifar:
        ratios_fz = [rate(r[2]) / rate(r[1]) for r in fz]
        for i, r in enumerate(fz):
            print(
                f"- cifar10_cnn fuzz, round {i + 1}: {rate(r[1]):.0f} -> {rate(r[2]):.0f} execs/s over the campaigns' "
                f"time: {ratios_fz[i]:.2f}x; over the wall time with the actors' start "
                f"{(r[2]['execs'] / r[2]['wall']) / (r[1]['execs'] / r[1]['wall']):.2f}x; merged IDC "
                f"{r[1]['idc']:.1%} (1 worker) vs {r[2]['idc']:.1%} (2 workers) at {args.fuzz_budget} execs in all"
            )
        print(f"- cifar10_cnn fuzz, median of {len(fz)} rounds: {float(np.median(ratios_fz)):.2f}x")
        print(f"- the machine's ceiling (two plain processes running the forward pass against one): {ceiling:.2f}x")
        record(
            "fuzz, 2 workers against 1",
            float(np.median(ratios_fz)),
            unit="x",
            subject="cifar10_cnn",
            per_round=list(map(float, ratios_fz)),
            budget=args.fuzz_budget,
        )
        record("ceiling: 2 plain processes against 1", ceiling, unit="x")
    print(f"load average at the end {os.getloadavg()}")
    ray.shutdown()


if __name__ == "__main__":
    main()
