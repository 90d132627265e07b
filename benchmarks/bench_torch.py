"""PyTorch speed, one run, ratios against plain PyTorch (issue 21):

1. analysis (relevance, activations, clusters) of CIFAR-10 images on the CIFAR ResNet-18 at an inner layer
   (``layer3``), against a plain forward + backward pass of the module over the same images, same batch;
2. fuzz execs/s at batch 256 (noise and image transforms: the mutators that cost one forward pass each),
   against the module's raw forward rate at batch 256, alternating in blocks;
3. the Keras LeNet-5 and its PyTorch twin (same weights) side by side: analysis of 4,000 digits and
   fuzz execs/s.

    python benchmarks/bench_torch.py [--n 50000] [--model outputs/models/resnet18_cifar10.pt2] [--width 16]

Without ``--model`` (or when the file is missing) the ResNet-18 has random weights (the speed is the same).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "recipes"))

CHEAP = "gauss,random_pixels,shift,rotate,brightness,contrast"


def floor_seconds(module, x, batch: int) -> float:
    """A plain forward + backward (of the logit sum, w.r.t. the input) over ``x``: the floor of a relevance pass."""
    import torch

    start = time.perf_counter()
    for i in range(0, len(x), batch):
        images = torch.as_tensor(x[i : i + batch]).permute(0, 3, 1, 2).requires_grad_(True)
        (g,) = torch.autograd.grad(module(images).max(dim=1).values.sum(), images)
    return time.perf_counter() - start


def fuzz_rates(network, analysis, x_seeds, y_seeds, forward, batch, execs: int, block: int = 8):
    """(loop execs/s, raw forward inputs/s), alternating blocks of the loop and of raw passes."""
    from idcgen.fuzz.fuzzer import Fuzzer

    loop_s = raw_s = 0.0
    loop_n = raw_n = 0
    with tempfile.TemporaryDirectory() as tmp:
        fuzzer = Fuzzer(analysis, mutators=CHEAP.split(","), batch_size=len(batch), random_state=0)
        campaign = fuzzer.start(x_seeds, y_seeds, Path(tmp) / "c", budget=1)
        while loop_n < execs:
            t0, e0 = campaign.elapsed, campaign.execs
            fuzzer.run(campaign, budget=campaign.execs + block * len(batch), progress=False)
            loop_s += campaign.elapsed - t0
            loop_n += campaign.execs - e0
            forward(batch)
            start = time.perf_counter()
            for _ in range(block):
                forward(batch)
            raw_s += time.perf_counter() - start
            raw_n += block * len(batch)
    return loop_n / loop_s, raw_n / raw_s


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000, help="CIFAR-10 training images analysed")
    parser.add_argument("--model", type=Path, default=ROOT / "outputs" / "models" / "resnet18_cifar10.pt2")
    parser.add_argument(
        "--width",
        type=int,
        default=8,
        help="ResNet-18 width when no model file is given (8: as recipes/train_torch.py trains it)",
    )
    parser.add_argument("--execs", type=int, default=4096)
    args = parser.parse_args()

    import torch

    from idcgen.analysis import analyze
    from idcgen.framework import as_network, load_network
    from idcgen.framework.torch_zoo import ResNet18, from_keras
    from kit import cifar10, load_data
    from record import record

    x, y = cifar10("train", args.n)
    if args.model.is_file():
        network = load_network(args.model)
        module = network.graph.module
        what = f"{args.model.name}"
    else:
        module = ResNet18(width=args.width).eval()
        network = as_network(module)
        what = f"ResNet-18 width {args.width}, random weights"
    batch = network.relevance_batch_size()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; {what}; {len(x):,} CIFAR-10 images, "
        f"relevance batch {batch}"
    )

    # 1. analysis vs forward+backward floor; the floor is timed before and after (this shared machine's speed
    # drifts) and their mean is the reference
    floor_seconds(module, x[:batch], batch)  # warm-up
    before = floor_seconds(module, x, batch)
    start = time.perf_counter()
    analysis = analyze(network, x, y, layer="layer3", m=8, progress=False)
    seconds = time.perf_counter() - start
    after = floor_seconds(module, x, batch)
    floor = (before + after) / 2
    print(
        f"analysis at layer3 ({analysis.layer}): {seconds:.1f} s; forward+backward floor {floor:.1f} s "
        f"(before {before:.1f} s, after {after:.1f} s); ratio {seconds / floor:.2f}x (goal <= 1.5x)"
    )
    record("analysis", seconds, unit="s", model=what, layer="layer3", inputs=len(x))
    record("forward+backward floor", floor, unit="s", model=what, before=before, after=after)
    record("analysis / floor", seconds / floor, unit="x", model=what)

    # 2. fuzz execs/s vs raw forward at batch 256
    x_test, y_test = cifar10("test", 256)
    images = torch.as_tensor(x_test).permute(0, 3, 1, 2).contiguous()

    def forward(b):
        with torch.inference_mode():
            return module(b)

    loop, raw = fuzz_rates(network, analysis, x_test[:100], y_test[:100], forward, images, args.execs)
    print(
        f"fuzz at batch 256 ({CHEAP}): loop {loop:,.0f} execs/s, raw forward {raw:,.0f} inputs/s; ratio "
        f"{loop / raw:.2f}x (goal >= 0.8x)"
    )
    record("fuzz loop throughput", loop, unit="execs/s", model=what, batch=256)
    record("loop / raw forward", loop / raw, unit="x", model=what, batch=256, raw=raw)

    # 3. Keras and PyTorch twins, the same work
    import keras

    from idcgen.framework.keras_zoo import lenet5

    k_model = lenet5(random_state=0)
    twin = from_keras(k_model)
    xm, ym = load_data("train", "embedded-mnist")
    xt, yt = load_data("test", "embedded-mnist")
    rows = []
    for label, net in (("Keras", as_network(k_model)), ("PyTorch", as_network(twin))):
        layer = "fc2" if label == "Keras" else "relu_3"
        analyze(net, xm[:256], ym[:256], layer=layer, m=8, progress=False)  # warm-up
        start = time.perf_counter()
        a = analyze(net, xm, ym, layer=layer, m=8, progress=False)
        seconds = time.perf_counter() - start
        if label == "Keras":
            import tensorflow as tf

            fn = tf.function(lambda b: k_model(b, training=False))
            batch_in = tf.constant(xt[:256])
            fwd = lambda b: fn(b).numpy()  # noqa: E731
        else:
            batch_in = torch.as_tensor(xt[:256]).permute(0, 3, 1, 2).contiguous()

            def fwd(b):
                with torch.inference_mode():
                    return twin(b)

        loop, raw = fuzz_rates(net, a, xt[:100], yt[:100], fwd, batch_in, args.execs)
        rows.append((label, seconds, [int(n) for n in a.neurons], loop, raw))
        print(
            f"LeNet-5 {label}: analysis of {len(xm):,} digits {seconds:.2f} s, important neurons "
            f"{rows[-1][2]}; fuzz {loop:,.0f} execs/s (raw forward {raw:,.0f}/s, {loop / raw:.2f}x)"
        )
        record("twin analysis", seconds, unit="s", model=f"LeNet-5 {label}", inputs=len(xm))
        record("twin fuzz loop throughput", loop, unit="execs/s", model=f"LeNet-5 {label}", raw=raw)
    print(
        f"twins: the same important neurons: {rows[0][2] == rows[1][2]}; PyTorch/Keras analysis time "
        f"{rows[1][1] / rows[0][1]:.2f}x, fuzz rate {rows[1][3] / rows[0][3]:.2f}x"
    )
    del keras


if __name__ == "__main__":
    main()
