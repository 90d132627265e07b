"""Benchmark the analysis over shard files the Ray workers read themselves (a script, not a test).

    python benchmarks/bench_ray_shards.py [--train 60000] [--shards 12]

MNIST's training inputs are written as ``--shards`` ``.npz`` files (uint8 images and labels, as a data
pipeline would leave them), then LeNet-5's analysis (m = 8) runs in one run:
- in this process on the inputs in memory (TensorFlow's default threads);
- on a pool of 1 and of 2 Ray workers (one intra-op thread each) with the inputs in the driver's memory
  (sent through the object store), and with the shard files, which each worker reads itself
  (``Workers.analyze('shards/*.npz')``: reading and scaling are inside the timed pass).
Each pass runs twice; the figures are of the second (the first includes each worker's tracing). Every Ray
result is checked against the single-process one (same important neurons and k, centroids within 1e-5).
The load average (1 min) is printed beside each figure: the machine's 2 cores are shared.
Model: outputs/models/lenet5.keras (recipes/train_models.py trains it if absent); data: MNIST via
$IDCGEN_MNIST (set by recipes/kit/paths.py in the workspace).
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


def load() -> float:
    return os.getloadavg()[0]


def twice(fn, *args, **kwargs):
    """(seconds of the second call, its result, the highest 1-min load average seen)."""
    loads = [load()]
    fn(*args, **kwargs)
    loads.append(load())
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    seconds = time.perf_counter() - start
    return seconds, out, max(loads + [load()])


def same(a, b) -> bool:
    return (
        np.array_equal(a.neurons, b.neurons)
        and [c.k for c in a.clusters] == [c.k for c in b.clusters]
        and all(np.allclose(c.centroids, d.centroids, rtol=RTOL, atol=1e-7) for c, d in zip(a.clusters, b.clusters))
    )


def write_shards(x: np.ndarray, y: np.ndarray, folder: Path, shards: int) -> str:
    """``shards`` .npz files of uint8 images (x in [0, 1] was uint8 / 255: exact) and labels."""
    images = np.rint(x * 255).astype(np.uint8)
    assert np.array_equal(images.astype(np.float32) / np.float32(255), x.astype(np.float32)), "not uint8 / 255"
    for i, rows in enumerate(np.array_split(np.arange(len(x)), shards)):
        np.savez(folder / f"train-{i:03d}.npz", x=images[rows], y=y[rows])
    return str(folder / "train-*.npz")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=60000)
    parser.add_argument("--shards", type=int, default=12)
    args = parser.parse_args()
    import ray

    import idcgen
    from idcgen.distributed import Workers

    model = common.load_model("lenet5", "mnist")
    path = common.model_path("lenet5", "mnist")
    x, y = common.load_data("train", "mnist", args.train)
    folder = Path(tempfile.mkdtemp(prefix="bench_ray_shards_"))
    rows = []
    try:
        pattern = write_shards(x, y, folder, args.shards)
        size = sum(f.stat().st_size for f in folder.iterdir())
        print(f"{len(x)} inputs in {args.shards} shards, {size / 2**20:.1f} MiB on disk", flush=True)
        t, single, l1 = twice(idcgen.analyze, model, x, y, m=8, progress=False)
        rows.append(("one process (TF default threads), in memory", "-", t, "-", l1))
        print(f"one process: {t:.1f} s (load {l1:.1f})", flush=True)
        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
        for workers in (1, 2):
            start = time.perf_counter()
            with Workers(path, workers=workers, threads=1) as pool:
                t_start = time.perf_counter() - start
                t_mem, in_memory, l_mem = twice(pool.analyze, x, y, m=8, progress=False)
                t_sh, sharded, l_sh = twice(pool.analyze, pattern, m=8, progress=False)
            for what, t, found, l in (("in memory", t_mem, in_memory, l_mem), ("shard files", t_sh, sharded, l_sh)):
                ok = "yes" if same(single, found) else "NO"
                rows.append((f"Ray, {workers} worker(s) x 1 thread, {what}", f"{t_start:.1f}", t, ok, l))
                print(f"{workers} worker(s), {what}: {t:.1f} s, same result: {ok} (load {l:.1f})", flush=True)
        ray.shutdown()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print("\n| run | pool start (s) | analysis (s) | same result | load (1 min) |\n|---|---|---|---|---|")
    for run, t_start, t, ok, l in rows:
        print(f"| {run} | {t_start} | {t:.1f} | {ok} | {l:.1f} |")
        record("analysis", t, unit="s", run=run, pool_start=t_start, same_result=ok, inputs=len(x), shards=args.shards)
    by = {r[0]: r[2] for r in rows}
    for what in ("in memory", "shard files"):
        one, two = by[f"Ray, 1 worker(s) x 1 thread, {what}"], by[f"Ray, 2 worker(s) x 1 thread, {what}"]
        print(f"2 workers against 1, {what}: {one / two:.2f}x")
        record("2 workers against 1", one / two, unit="x", data=what)


if __name__ == "__main__":
    main()
