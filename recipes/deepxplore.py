"""DeepXplore's settings with the ``deepxplore`` mutator: differences per second and NC, each constraint.

    python recipes/deepxplore.py [--dataset mnist|udacity] [--seeds N] [--budget 2048] [--specs "deepxplore(...)" ...]

``mnist``: the three LeNets of DeepXplore's MNIST experiment (its weight files in ../shared/models/deepxplore,
Keras 2 weights only: the architectures are rebuilt here), LeNet-5 (Model3) under test, LeNet-1 and LeNet-4
the others; seeds are MNIST test digits all three classify correctly (default 200, drawn with
--random-state); the oracle: the models predict different classes.
``udacity``: the three Daves of recipes/train_models.py --dataset udacity (dave2 under test, dave2_norminit
and dave2_dropout the others); seeds are the test frames on which the three agree within 0.2 rad (default
all of them, at most 2,000); the oracle: two models' angles differ by more than 0.2 rad.

Two figures per mutator spec: (1) the generator alone, DeepXplore's way: every seed mutated once, the seeds
turned into a difference per second, and the neuron coverage (NC, threshold 0.25 on per-input min-max scaled
activations as DeepXplore computes it) of the model under test on the seeds and on seeds plus mutants;
(2) a fuzz campaign (IDC guidance, the disagreement oracle, the mutator's validity rule) of --budget execs:
valid mutants flagged, unique findings, their rates per second, IDC and NC of the grown corpus.
Prints one JSON line per spec and writes ``outputs/deepxplore_<dataset>/results.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(Path(__file__).resolve().parent))
DEFAULT_SPECS = [
    "deepxplore(constraint='light', step=0.1, iterations=20)",
    "deepxplore(constraint='occl', step=0.1, iterations=20)",
    "deepxplore(constraint='blackout', patches=2, iterations=20)",
]
#: two steering angles differ when they are further apart than this (radians), as in DeepXplore's driving setting
ANGLE_THRESHOLD = 0.2
NC_THRESHOLD = 0.25


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


def mnist_setting(n_seeds: int, rng: np.random.Generator):
    """(model under test, others, seeds x, y, training x, y, subject layer, m, oracle)."""
    from idcgen.framework import Network

    data = np.load(SHARED / "data" / "mnist" / "mnist.npz")
    x_train, y_train = (data["x_train"][..., None] / 255.0).astype(np.float32), data["y_train"]
    x_test, y_test = (data["x_test"][..., None] / 255.0).astype(np.float32), data["y_test"]
    nets = [Network(lenet(k)) for k in (3, 1, 2)]
    correct = np.all([n.predict(x_test) == y_test for n in nets], axis=0)
    pick = np.sort(rng.choice(np.flatnonzero(correct), min(n_seeds, int(correct.sum())), replace=False))
    return nets[0], nets[1:], x_test[pick], y_test[pick], x_train[:2000], y_train[:2000], "fc2", 6, "disagreement"


def udacity_setting(n_seeds: int, rng: np.random.Generator):
    from idcgen.framework import Network
    from kit import load_model, udacity

    x_train, y_train = udacity("train")
    x_test, y_test = udacity("test")
    nets = [Network(load_model(name, "udacity")) for name in ("dave2", "dave2_norminit", "dave2_dropout")]
    angles = np.stack([n.predict(x_test) for n in nets])
    agree = (angles.max(0) - angles.min(0)) <= ANGLE_THRESHOLD
    print(f"seeds: the three Daves agree within {ANGLE_THRESHOLD} rad on {agree.sum()} of {len(x_test)} test frames")
    pick = np.sort(rng.choice(np.flatnonzero(agree), min(n_seeds, int(agree.sum())), replace=False))
    return (
        nets[0],
        nets[1:],
        x_test[pick],
        y_test[pick],
        x_train,
        y_train,
        "fc3",
        8,
        f"disagreement(threshold={ANGLE_THRESHOLD})",
    )


def differ(under, others, x, threshold: float | None) -> np.ndarray:
    mine = under.predict(x)
    if threshold is None:
        return np.any([o.predict(x) != mine for o in others], axis=0)
    return np.any([np.abs(o.predict(x) - mine) > threshold for o in others], axis=0)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist", choices=("mnist", "udacity"))
    parser.add_argument(
        "--seeds", type=int, default=None, help="default 200 on MNIST, 2,000 (all that agree) on Udacity"
    )
    parser.add_argument("--budget", type=int, default=2048)
    parser.add_argument("--specs", nargs="+", default=DEFAULT_SPECS)
    parser.add_argument("--random-state", type=int, default=0)
    args = parser.parse_args(argv)
    from idcgen.analysis import analyze
    from idcgen.criteria import make_criterion
    from idcgen.fuzz.fuzzer import FuzzContext, Fuzzer
    from idcgen.fuzz.mutators import make_mutator

    rng = np.random.default_rng(args.random_state)
    setting = mnist_setting if args.dataset == "mnist" else udacity_setting
    under, others, x, y, x_train, y_train, layer, m, oracle = setting(
        args.seeds or (200 if args.dataset == "mnist" else 2000), rng
    )
    threshold = None if args.dataset == "mnist" else ANGLE_THRESHOLD
    start = time.perf_counter()
    analysis = analyze(under.model, x_train, y_train, layer=layer, m=m, progress=False)
    print(f"analysis of {len(x_train)} training inputs in {time.perf_counter() - start:.0f} s")
    nc = make_criterion(f"nc:threshold={NC_THRESHOLD}").fit(under, x_train[:1])
    nc_seeds = nc.coverage(under, x).score
    from kit import OUTPUTS

    out = OUTPUTS / f"deepxplore_{args.dataset}"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for spec in args.specs:
        mutator = make_mutator(spec)
        start = time.perf_counter()
        mutants = mutator.mutate(
            x, np.random.default_rng(args.random_state), FuzzContext(network=under, labels=y, others=tuple(others))
        )
        seconds = time.perf_counter() - start
        found = differ(under, others, mutants, threshold)
        fuzzer = Fuzzer(
            analysis,
            mutators=[spec],
            others=others,
            oracle=oracle,
            batch_size=64,
            measure=[make_criterion(f"nc:threshold={NC_THRESHOLD}").fit(under, x_train[:1])],
            random_state=args.random_state,
        )
        start = time.perf_counter()
        campaign = fuzzer.run(x, y, budget=args.budget, progress=False)
        fuzz_seconds = time.perf_counter() - start
        row = {
            "dataset": args.dataset,
            "spec": repr(mutator),
            "seeds": len(x),
            "generator_differences": int(found.sum()),
            "generator_seconds": round(seconds, 2),
            "generator_differences_per_s": round(found.sum() / seconds, 1),
            "nc_seeds": round(nc_seeds, 4),
            "nc_seeds_and_mutants": round(nc.coverage(under, np.concatenate([x, mutants])).score, 4),
            "execs": campaign.execs,
            "flagged": int(campaign.flagged),
            "findings": campaign.n_findings,
            "fuzz_seconds": round(fuzz_seconds, 1),
            "flagged_per_s": round(campaign.flagged / fuzz_seconds, 1),
            "findings_per_s": round(campaign.n_findings / fuzz_seconds, 2),
            "idc": round(campaign.tracker.score, 4),
            "nc_campaign": round(campaign.coverage["nc"].score, 4),
        }
        print(json.dumps(row), flush=True)
        with open(out / "results.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        rows.append(row)
    return rows


if __name__ == "__main__":
    main()
