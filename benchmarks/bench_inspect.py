"""Benchmark idcgen.inspect (DeepInspect) against a forward pass (a script, not a test).

    python benchmarks/bench_inspect.py [--shared ../shared] [--repeats 3] [--cifar]

Over the 10,000 MNIST test inputs with LeNet-5 (DeepXplore's weights), the best of ``--repeats`` runs of:
- F: one batched forward pass (``Network.forward``) that also returns the activations of the layers
  inspect reads (every hidden layer with weights), and F_all, the same returning every layer's;
- inspect with labels (one pass, activations kept in memory), the goal being at most 2 F;
- inspect forced into two passes (``memory_budget=0``: the first pass finds each neuron's min and max,
  the second counts), and with per-input scaling (``scaling="input"``, one pass, nothing kept);
- the memory the one-pass run keeps: inputs x neurons x 4 bytes.
``--cifar`` repeats it with the CIFAR-10 network (outputs/models/cifar10_cnn.keras) on the 10,000
JPEG round-tripped CIFAR-10 test images.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lenet5_mnist import lenet5_mnist  # noqa: E402
from record import record  # noqa: E402


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(name: str, network, x, y, repeats: int) -> None:
    import idcgen
    from idcgen.criteria import default_neuron_layers

    layers = tuple(default_neuron_layers(network))
    every = tuple(network.layer_names())
    network.forward(x[:256], layers)  # trace once, outside the timings
    network.forward(x[:256], every)
    idcgen.inspect(network, x[:256], y[:256])
    f = best(lambda: network.forward(x, layers), repeats)
    f_all = best(lambda: network.forward(x, every), repeats)
    one = best(lambda: idcgen.inspect(network, x, y), repeats)
    two = best(lambda: idcgen.inspect(network, x, y, memory_budget=0), repeats)
    per_input = best(lambda: idcgen.inspect(network, x, y, scaling="input"), repeats)
    result = idcgen.inspect(network, x, y)
    neurons = sum(result.widths)
    print(f"{name}: {len(x)} inputs, {neurons} neurons in {len(layers)} layers, batch {network.batch_size}")
    print(
        f"  F (forward + the inspected layers' activations) {f:.3f} s; F_all (+ every layer's, {len(every)}) {f_all:.3f} s"
    )
    print(
        f"  inspect, one pass (kept {len(x) * neurons * 4 / 2**20:.1f} MiB): {one:.3f} s = {one / f:.2f}x F, "
        f"{one / f_all:.2f}x F_all"
    )
    print(
        f"  inspect, two passes: {two:.3f} s = {two / f:.2f}x F; scaling='input': {per_input:.3f} s = {per_input / f:.2f}x F"
    )
    for figure, value in (
        ("F: forward + the inspected layers' activations", f),
        ("F_all: forward + every layer's", f_all),
        ("inspect, one pass", one),
        ("inspect, two passes", two),
        ("inspect, scaling='input'", per_input),
    ):
        record(figure, value, unit="s", model=name, inputs=len(x), repeats=repeats)
    record("inspect, one pass / F", one / f, unit="x", model=name)
    c = result.metrics["all"]["confusion"]
    print(f"  (precision {c['std']['precision']}, recall {c['std']['recall']}, Spearman {c['spearman']:.3f})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cifar", action="store_true")
    args = parser.parse_args()
    network, _, test, _, x_test = lenet5_mnist(args.shared)
    measure("LeNet-5 (DeepXplore weights), MNIST test", network, x_test, test.y, args.repeats)
    if args.cifar:
        import idcgen

        os.environ.setdefault("IDCGEN_CIFAR10", str(args.shared / "data" / "cifar10"))
        test = idcgen.load_inputs("cifar10:test")
        x, y = test.x, test.y
        model = idcgen.load_model(ROOT / "outputs/models/cifar10_cnn.keras")
        measure("CIFAR-10 CNN, CIFAR-10 test", idcgen.Network(model), x, y, args.repeats)


if __name__ == "__main__":
    main()
