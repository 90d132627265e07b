"""The Keras relevance pass traced by ``keras_graph.AnyBatch`` (once, the batch axis unknown) against a plain
``tf.function(reduce_retracing=True)`` (again for the first batch of another size), alternating in one process
(a script, not a test).

    python benchmarks/bench_keras_trace.py [--rounds 2]

On keras.applications.ResNet50 (weights=None, 32x32x3, 10 classes) at ``conv3_block2_add``: seconds of calls on
53, 53, 35 and 35 random images (the first traces; with reduce_retracing the third traces again), printed and
recorded (benchmarks/record.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from record import record  # noqa: E402

SIZES = (53, 53, 35, 35)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    import keras
    import tensorflow as tf

    from idcgen.framework.keras_graph import AnyBatch
    from idcgen.framework.keras_network import KerasNetwork

    keras.utils.set_random_seed(0)
    model = keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)
    x = np.random.default_rng(0).random((max(SIZES), 32, 32, 3), dtype=np.float32)
    for r in range(args.rounds):
        for scheme in ("reduce_retracing", "AnyBatch"):
            relevance = KerasNetwork(model).relevance("conv3_block2_add")
            fn = relevance._pass
            relevance._fn = AnyBatch(fn) if scheme == "AnyBatch" else tf.function(fn, reduce_retracing=True)
            seconds = []
            for n in SIZES:
                start = time.perf_counter()
                relevance.raw(x[:n])
                seconds.append(time.perf_counter() - start)
            record("relevance call seconds", seconds, unit="s", scheme=scheme, sizes=SIZES, round=r)
            print(f"round {r} {scheme:<16} " + " / ".join(f"{s:.1f}" for s in seconds) + f"  sum {sum(seconds):.1f} s")


if __name__ == "__main__":
    main()
