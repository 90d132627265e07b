"""Benchmark the other coverage criteria on LeNet-5 and full MNIST (a script, not a test).

    python benchmarks/bench_criteria.py [--shared ../shared] [--criteria nc,kmnc,nbc,snac,tknc,lsc,dsc]

Measures in one run:
- T, one plain batched forward pass (tf.function, batch 1024) over the 60,000 training inputs;
- for each criterion with the paper's parameters: fit on the training inputs, coverage of the 10,000
  test inputs, and (fit + coverage) / (10 T): the goal is below 1, i.e. a criterion computes on the
  full test set in less time than ten forward passes over the training data;
- memory: the peak of the numpy arrays a criterion allocates (tracemalloc, in a second, untimed run),
  and the max resident set size of the process (TensorFlow included).
Uses DeepXplore's LeNet-5 weights (MNIST_Model3.h5) and MNIST from ../shared.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lenet5_mnist import lenet5_mnist, raw_forward  # noqa: E402
from record import record  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    parser.add_argument("--criteria", default="nc,kmnc,nbc,snac,tknc,lsc,dsc")
    args = parser.parse_args()

    from idcgen.criteria import default_neuron_layers, make_criterion, parse_criteria

    names = [n for n in parse_criteria(args.criteria) if n != "idc"]
    network, train, test, x_train, x_test = lenet5_mnist(args.shared)
    model = network.model
    print(
        f"LeNet-5 (DeepXplore weights), {len(x_train)} training and {len(x_test)} test inputs; "
        f"neuron layers {default_neuron_layers(network)}, surprise layer {network.default_layer()!r}"
    )

    _, forward_pass = raw_forward(model)

    forward_pass(x_train[:2048])
    t_forward = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        forward_pass(x_train)
        t_forward = min(t_forward, time.perf_counter() - start)
    print(f"T = forward pass over the 60,000 training inputs: {t_forward:.2f} s; 10 T = {10 * t_forward:.1f} s\n")

    rows = []
    for name in names:
        params = {}
        make_criterion(name, **params).fit(network, x_train[:2048], train.y[:2048])  # trace the taps once
        criterion = make_criterion(name, **params)
        start = time.perf_counter()
        criterion.fit(network, x_train, train.y)
        t_fit = time.perf_counter() - start
        start = time.perf_counter()
        result = criterion.coverage(network, x_test)
        t_cov = time.perf_counter() - start

        tracemalloc.start()
        again = make_criterion(name, **params).fit(network, x_train, train.y)
        again.coverage(network, x_test)
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        rows.append((name, criterion, result, t_fit, t_cov, peak))
        print(f"{name}: {result}; fit {t_fit:.2f} s, coverage {t_cov:.2f} s", flush=True)
        record("fit", t_fit, unit="s", criterion=name)
        record("coverage of the test set", t_cov, unit="s", criterion=name, score=float(result.score))
        record("(fit + coverage) / 10 T", (t_fit + t_cov) / (10 * t_forward), unit="x", criterion=name)
        record("peak numpy memory", peak, unit="MiB", criterion=name)

    print(
        "\n| criterion | parameters | coverage of the test set | fit (s) | coverage (s) | (fit + coverage) / 10 T "
        "| peak numpy memory (MiB) |"
    )
    print("|---|---|---|---:|---:|---:|---:|")
    for name, criterion, result, t_fit, t_cov, peak in rows:
        params = ", ".join(f"{k}={v}" for k, v in criterion.get_params().items() if v is not None)
        print(
            f"| {name.upper()} | {params} | {100 * result.score:.2f} % ({result.covered} of {result.total}) "
            f"| {t_fit:.2f} | {t_cov:.2f} | {(t_fit + t_cov) / (10 * t_forward):.2f} | {peak:.0f} |"
        )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    record("T: forward over the training inputs", t_forward, unit="s")
    record("max RSS", rss, unit="MiB")
    print(f"\nT = {t_forward:.2f} s. Max RSS of the process (TensorFlow and MNIST included): {rss:.0f} MiB")


if __name__ == "__main__":
    main()
