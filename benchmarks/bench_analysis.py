"""Benchmark the analysis and coverage core on LeNet-5 and full MNIST (a script, not a test).

    python benchmarks/bench_analysis.py [--shared ../shared] [--m 6 8]

Measures in one run:
- the whole analysis of the 60,000 training inputs (LRP + importance + clustering), against the floor:
  one plain batched forward+backward pass over the same inputs (gradient of the top logit);
- IDC of the 10,000 test inputs, against one plain batched forward pass;
- the exact 1-D silhouette against scikit-learn's at 20,000 points;
- peak memory (max resident set size of the process).
Uses DeepXplore's LeNet-5 weights (MNIST_Model3.h5) and MNIST from ../shared.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lenet5_mnist import lenet5_mnist, raw_forward  # noqa: E402
from record import record  # noqa: E402


def timed(fn, *args, repeat=1, **kw):
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn(*args, **kw)
        best = min(best, time.perf_counter() - start)
    return best, out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    parser.add_argument("--m", type=int, nargs="+", default=[6, 8])
    args = parser.parse_args()

    import tensorflow as tf
    from sklearn.metrics import silhouette_score

    from idcgen.analysis import analyze
    from idcgen.clusters import kmeans_1d, silhouette_1d

    network, train, test, x_train, x_test = lenet5_mnist(args.shared)
    model = network.model
    accuracy = float((network.predict(x_test) == test.y).mean())
    print(
        f"LeNet-5 (DeepXplore weights), MNIST test accuracy {accuracy:.2%}; "
        f"{len(x_train)} training, {len(x_test)} test inputs"
    )

    # The floor: one plain forward+backward pass (gradient of the top logit w.r.t. the input), batched.
    @tf.function(reduce_retracing=True)
    def forward_backward(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            top = tf.reduce_max(network.logits(x), axis=1)
        return tape.gradient(top, x)

    def floor_pass(x, batch=512):
        for i in range(0, len(x), batch):
            forward_backward(tf.convert_to_tensor(x[i : i + batch])).numpy()

    _, forward_pass = raw_forward(model)

    floor_pass(x_train[:1024])
    forward_pass(x_test[:2048])
    t_floor, _ = timed(floor_pass, x_train, repeat=3)
    t_forward, _ = timed(forward_pass, x_test, repeat=3)
    print(f"floor: forward+backward over 60,000 inputs {t_floor:.2f} s; forward over 10,000 inputs {t_forward:.3f} s")
    record("floor: forward+backward over the training inputs", t_floor, unit="s", inputs=len(x_train))
    record("forward over the test inputs", t_forward, unit="s", inputs=len(x_test))

    rows = []
    for m in args.m:
        t_analysis, analysis = timed(
            analyze, network, x_train, train.y, layer="fc2", m=m, random_state=0, progress=False
        )
        analysis.coverage(x_test[:1000])  # trace the tap once, as a fuzz campaign or CLI would have
        t_cov, cov = timed(analysis.coverage, x_test, repeat=3)
        rows.append((m, t_analysis, analysis, t_cov, cov))
        print(
            f"m={m}: analysis {t_analysis:.2f} s (relevance {analysis.timings['relevance']:.2f} s, "
            f"clusters {analysis.timings['clusters']:.2f} s) = {t_analysis / t_floor:.2f}x the floor; "
            f"clusters per neuron {[c.k for c in analysis.clusters]}; "
            f"IDC of the test set {cov} in {t_cov:.3f} s = {t_cov / t_forward:.2f}x a forward pass"
        )
        record(
            "analysis",
            t_analysis,
            unit="s",
            m=m,
            relevance=analysis.timings["relevance"],
            clusters=analysis.timings["clusters"],
        )
        record("analysis / floor", t_analysis / t_floor, unit="x", m=m)
        record("IDC of the test set", t_cov, unit="s", m=m, idc=float(cov.score))
        record("IDC of the test set / forward", t_cov / t_forward, unit="x", m=m)

    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(mu, 1.0, 20_000 // 3 + 1) for mu in (0, 4, 9)])[:20_000]
    labels = kmeans_1d(values, 3, rng=np.random.default_rng(0)).labels
    t_ours, ours = timed(silhouette_1d, values, labels, repeat=5)
    t_sk, theirs = timed(silhouette_score, values.reshape(-1, 1), labels)
    print(
        f"silhouette at 20,000 points: ours {t_ours * 1e3:.2f} ms, scikit-learn {t_sk:.2f} s, "
        f"{t_sk / t_ours:.0f}x faster, |difference| {abs(ours - theirs):.1e}"
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory (max RSS of this process, TensorFlow included): {peak:.0f} MiB")
    record("silhouette_1d at 20,000 points", t_ours, unit="s")
    record("sklearn silhouette_score at 20,000 points", t_sk, unit="s")
    record("peak memory (max RSS)", peak, unit="MiB")


if __name__ == "__main__":
    main()
