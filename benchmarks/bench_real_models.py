"""Benchmark idcgen on real models: ResNet-20 on CIFAR-10 and LeNet-5 on MNIST (a script, not a test).

    python benchmarks/bench_real_models.py [--shared ../shared] [--model outputs/models/resnet20.keras]
                                           [--parts analysis memory fuzz]

Measures in one run:
1. analysis: the whole analysis (relevance pass, activations of the important neurons, clusters) of
   ResNet-20 over CIFAR-10's 50,000 training images, against the forward+backward floor (the gradient
   of the top logit with respect to the input, batched) timed in the same run; the ratio. The relevance
   pass goes back only from the logits to the subject layer: at the default `avg_pool` that is one dense
   layer, so a layer inside the network (`stage2_block1_out`: seven residual blocks back) is timed too;
2. memory: peak resident memory of `idcgen analyze` in a fresh process, on MNIST's 60,000 training
   images (LeNet-5, DeepXplore's weights) and on CIFAR-10's 50,000 (ResNet-20), as the CLI prints it;
3. fuzz: execs/s of the loop on ResNet-20 with noise and transform mutators at batch 256, against raw
   forward passes of the same batch size, timed alternately in blocks (the machine's speed drifts).
Without a trained ResNet-20 file a freshly initialised one is used (timing does not depend on the
weights; the IDC figures then mean nothing and are not printed).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "recipes"))

from record import record  # noqa: E402

CHEAP = "gauss,random_pixels,brightness,contrast,noise,rotate,shift"


def cifar10_train() -> tuple[np.ndarray, np.ndarray]:
    """The 50,000 CIFAR-10 training images, float32 in [0, 1], and labels (idcgen's named dataset cifar10,
    found through the recipes' kit)."""
    import kit

    return kit.cifar10("train")


def resnet20(path: Path | None):
    import keras

    from idcgen.framework.keras_zoo import resnet20 as build

    if path is not None and path.exists():
        return keras.models.load_model(path, compile=False), True
    return build(), False


def floor_seconds(network, x, batch: int) -> float:
    """Forward+backward to the input over ``x`` at ``batch`` inputs per call (the least any relevance
    pass must do), best of two."""
    import tensorflow as tf

    @tf.function(reduce_retracing=True)
    def forward_backward(inputs):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            top = tf.reduce_max(network.model(inputs, training=False), axis=1)
        return tape.gradient(top, inputs)

    forward_backward(tf.constant(x[:batch])).numpy()
    best = np.inf
    for _ in range(2):
        start = time.perf_counter()
        for i in range(0, len(x), batch):
            forward_backward(tf.constant(x[i : i + batch])).numpy()
        best = min(best, time.perf_counter() - start)
    return best


def bench_analysis(model, trained: bool, x: np.ndarray, y: np.ndarray, layers) -> None:
    from idcgen.analysis import analyze
    from idcgen.framework import Network
    from idcgen.relevance import batch_size_for

    network = Network(model)
    batch = batch_size_for(network)
    floors = {b: floor_seconds(network, x, b) for b in sorted({batch, 256})}
    floor = min(floors.values())  # the floor is the best the plain pass does, at either batch size
    shown = ", ".join(f"{t:.1f} s at batch {b}" for b, t in floors.items())
    print(f"forward+backward floor over {len(x):,} CIFAR-10 training images: {shown}")
    for b, t in floors.items():
        record("forward+backward floor", t, unit="s", model=model.name, batch=b, inputs=len(x))
    for layer in layers:  # the relevance pass goes back from the logits to the subject layer only
        start = time.perf_counter()
        analysis = analyze(network, x, y, layer=layer, m=8, random_state=0, progress=False)
        whole = time.perf_counter() - start
        parts = ", ".join(f"{k} {v:.1f} s" for k, v in analysis.timings.items())
        print(
            f"analysis, {model.name} layer {analysis.layer}, m=8, relevance batch {batch}: {whole:.1f} s ({parts}); "
            f"ratio to the floor {whole / floor:.2f}x"
        )
        record(
            "analysis",
            whole,
            unit="s",
            model=model.name,
            layer=analysis.layer,
            m=8,
            batch=batch,
            **{k: float(v) for k, v in analysis.timings.items()},
        )
        record("analysis / floor", whole / floor, unit="x", model=model.name, layer=analysis.layer)
        if trained:
            print(
                f"  important neurons {analysis.neurons.tolist()}, clusters {[c.k for c in analysis.clusters]}, "
                f"training accuracy {analysis.data['accuracy']:.1%}"
            )


def bench_memory(shared: Path, model_path: Path | None, tmp: Path) -> None:
    """Peak memory of `idcgen analyze` in a fresh process, read from the line it prints."""
    from idcgen.framework.keras_zoo import lenet5
    from idcgen.framework.keras_zoo import resnet20 as build

    lenet = lenet5()
    lenet.load_weights(shared / "models/deepxplore/MNIST_Model3.h5")
    lenet.save(tmp / "lenet5.keras")
    if model_path is None or not model_path.exists():
        build().save(tmp / "resnet20.keras")
        model_path = tmp / "resnet20.keras"
    import kit  # noqa: F401  (sets IDCGEN_CIFAR10, which the analyze process below inherits)

    cifar = "cifar10:train"
    runs = [
        ("MNIST, 60,000, LeNet-5 fc2", tmp / "lenet5.keras", f"{shared / 'data/mnist/mnist.npz'}:train"),
        ("CIFAR-10, 50,000, ResNet-20", model_path, str(cifar)),
    ]
    for label, model, data in runs:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "idcgen.cli",
                "analyze",
                "--model",
                str(model),
                "--train",
                data,
                "--m",
                "8",
                "--out",
                str(tmp / f"analysis_{model.stem}"),
            ],
            capture_output=True,
            text=True,
        )
        line = [ln for ln in out.stdout.splitlines() if "peak memory" in ln]
        print(f"peak memory, {label}: {line[0].split('peak memory')[1].strip(' )') if line else out.stderr[-300:]}")
        if line:
            record("peak memory of idcgen analyze", line[0].split("peak memory")[1].strip(" )"), run=label)


def bench_fuzz(model, x: np.ndarray, y: np.ndarray, rounds: int = 3) -> None:
    import tensorflow as tf

    from idcgen.analysis import analyze
    from idcgen.framework import Network
    from idcgen.fuzz.fuzzer import Fuzzer

    network = Network(model)
    analysis = analyze(network, x[:5000], y[:5000], m=8, random_state=0, progress=False)

    @tf.function(reduce_retracing=True)
    def forward(inputs):
        return model(inputs, training=False)

    batch = tf.constant(x[:256])
    block = 8
    ratios, loops, raws = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        fuzzer = Fuzzer(analysis, mutators=CHEAP.split(","), batch_size=256, random_state=0)
        campaign = fuzzer.start(x[-100:], y[-100:], Path(tmp) / "c", budget=1)
        fuzzer.run(campaign, budget=campaign.execs + block * 256, progress=False)  # warm up
        forward(batch).numpy()
        for _ in range(rounds):
            t0, e0 = campaign.elapsed, campaign.execs
            fuzzer.run(campaign, budget=campaign.execs + block * 256, progress=False)
            loop = (campaign.execs - e0) / (campaign.elapsed - t0)
            start = time.perf_counter()
            for _ in range(block):
                forward(batch).numpy()
            raw = block * 256 / (time.perf_counter() - start)
            loops.append(loop), raws.append(raw), ratios.append(loop / raw)
    print(
        f"fuzz on ResNet-20, noise and transforms ({CHEAP}), batch 256: loop {np.median(loops):,.0f} execs/s, "
        f"raw forward {np.median(raws):,.0f} inputs/s; ratio per round {', '.join(f'{r:.2f}' for r in ratios)}: "
        f"median {np.median(ratios):.2f}x"
    )
    record("fuzz loop throughput", float(np.median(loops)), unit="execs/s", model="resnet20", batch=256)
    record("raw forward throughput", float(np.median(raws)), unit="inputs/s", model="resnet20", batch=256)
    record(
        "loop / raw forward", float(np.median(ratios)), unit="x", model="resnet20", per_round=list(map(float, ratios))
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    parser.add_argument("--model", type=Path, default=ROOT / "outputs/models/resnet20.keras")
    parser.add_argument(
        "--layers",
        nargs="+",
        default=["avg_pool", "stage2_block1_out"],
        help="subject layers to analyse: the default and one whose relevance crosses 7 residual blocks",
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="analyse only the first N training images (a quick check)"
    )
    parser.add_argument(
        "--parts", nargs="+", default=["analysis", "memory", "fuzz"], choices=["analysis", "memory", "fuzz"]
    )
    args = parser.parse_args()
    if not (args.shared / "data/cifar10").exists():
        sys.exit(f"needs {args.shared}/data/cifar10 (the ../shared folder of the development workspace)")
    model, trained = resnet20(args.model)
    print(f"{model.name}: {'trained, ' + str(args.model) if trained else 'freshly initialised (no trained file)'}")
    if "memory" in args.parts:  # first: a child forked from a process holding CIFAR-10 would start big
        with tempfile.TemporaryDirectory() as tmp:
            bench_memory(args.shared, args.model, Path(tmp))
    if "analysis" in args.parts or "fuzz" in args.parts:
        x, y = cifar10_train()
        x, y = x[: args.limit], y[: args.limit]
    if "analysis" in args.parts:
        bench_analysis(model, trained, x, y, args.layers)
    if "fuzz" in args.parts:
        bench_fuzz(model, x, y)


if __name__ == "__main__":
    main()
