"""DeepXplore's MNIST setting with the ``deepxplore`` mutator: differences per second, each constraint.

    python recipes/deepxplore_mnist.py [--seeds 200] [--budget 2048] [--specs "deepxplore(...)" ...]

The three LeNets of DeepXplore's MNIST experiment (its weight files in ../shared/models/deepxplore, Keras 2
weights only: the architectures are rebuilt here), LeNet-5 (Model3) under test, LeNet-1 and LeNet-4 the
others. Seeds: MNIST test digits all three classify correctly (drawn with --random-state). Two figures per
mutator spec: (1) the generator alone, DeepXplore's way: every seed mutated once, the seeds turned into a
disagreement per second; (2) a fuzz campaign (IDC guidance, disagreement oracle, the mutator's validity
rule) of --budget execs: valid mutants flagged, unique findings and their rates per second.
Prints one JSON line per spec and writes ``outputs/deepxplore_mnist/results.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
DEFAULT_SPECS = ["deepxplore(constraint='light', step=0.1, iterations=20)",
                 "deepxplore(constraint='occl', step=0.1, iterations=20)",
                 "deepxplore(constraint='blackout', patches=2, iterations=20)"]


def lenet(which: int):
    """DeepXplore's MNIST Model1 (LeNet-1), Model2 (LeNet-4) or Model3 (LeNet-5), with its weights."""
    import keras
    L = keras.layers
    inputs = keras.Input((28, 28, 1))
    filters = (4, 12) if which == 1 else (6, 16)
    x = L.Conv2D(filters[0], 5, padding="same", activation="relu", name="block1_conv1")(inputs)
    x = L.MaxPooling2D(2, name="block1_pool1")(x)
    x = L.Conv2D(filters[1], 5, padding="same", activation="relu", name="block2_conv1")(x)
    x = L.MaxPooling2D(2, name="block2_pool1")(x)
    x = L.Flatten(name="flatten")(x)
    for i, units in enumerate({1: (), 2: (84,), 3: (120, 84)}[which]):
        x = L.Dense(units, activation="relu", name=f"fc{i + 1}")(x)
    x = L.Dense(10, name="before_softmax")(x)
    model = keras.Model(inputs, L.Activation("softmax", name="predictions")(x))
    model.load_weights(SHARED / "models" / "deepxplore" / f"MNIST_Model{which}.h5")
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--budget", type=int, default=2048)
    parser.add_argument("--specs", nargs="+", default=DEFAULT_SPECS)
    parser.add_argument("--random-state", type=int, default=0)
    args = parser.parse_args()
    from idcgen.analysis import analyze
    from idcgen.fuzz.fuzzer import Fuzzer, FuzzContext
    from idcgen.fuzz.mutators import make_mutator
    from idcgen.models import Network
    data = np.load(SHARED / "data" / "mnist" / "mnist.npz")
    x_train, y_train = (data["x_train"][..., None] / 255.0).astype(np.float32), data["y_train"]
    x_test, y_test = (data["x_test"][..., None] / 255.0).astype(np.float32), data["y_test"]
    nets = [Network(lenet(k)) for k in (3, 1, 2)]
    under, others = nets[0], nets[1:]
    correct = np.all([n.predict(x_test) == y_test for n in nets], axis=0)
    pick = np.sort(np.random.default_rng(args.random_state).choice(np.flatnonzero(correct), args.seeds, replace=False))
    x, y = x_test[pick], y_test[pick]
    analysis = analyze(under.model, x_train[:2000], y_train[:2000], layer="fc2", m=6, progress=False)
    out = ROOT / "outputs" / "deepxplore_mnist"
    out.mkdir(parents=True, exist_ok=True)
    for spec in args.specs:
        mutator = make_mutator(spec)
        start = time.perf_counter()
        mutants = mutator.mutate(x, np.random.default_rng(args.random_state),
                                 FuzzContext(network=under, labels=y, others=tuple(others)))
        seconds = time.perf_counter() - start
        mine = under.predict(mutants)
        differ = np.any([o.predict(mutants) != mine for o in others], axis=0)
        fuzzer = Fuzzer(analysis, mutators=[spec], others=others, oracle="disagreement", batch_size=64,
                        random_state=args.random_state)
        start = time.perf_counter()
        campaign = fuzzer.run(x, y, budget=args.budget, progress=False)
        fuzz_seconds = time.perf_counter() - start
        row = {"spec": repr(mutator), "seeds": len(x), "generator_differences": int(differ.sum()),
               "generator_seconds": round(seconds, 2), "generator_differences_per_s": round(differ.sum() / seconds, 1),
               "execs": campaign.execs, "flagged": int(campaign.flagged), "findings": campaign.n_findings,
               "fuzz_seconds": round(fuzz_seconds, 1), "flagged_per_s": round(campaign.flagged / fuzz_seconds, 1),
               "findings_per_s": round(campaign.n_findings / fuzz_seconds, 2), "idc": round(campaign.tracker.score, 4)}
        print(json.dumps(row), flush=True)
        with open(out / "results.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
