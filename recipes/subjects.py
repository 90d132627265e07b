"""Train the study subjects: five independently trained copies of the model under test and a fault extractor
of another architecture trained on the half of the training set the copies never saw (recipes/kit/subjects.py).

    python recipes/subjects.py --dataset mnist|fashion-mnist|cifar10 [--copies 5] [--epochs N] [--only-missing]

MNIST-like: LeNet-5 copies (seeds 0-4) and a LeNet-4 extractor, the paper's settings (Adadelta lr 1.0, rho 0.95,
batch 256, 10 epochs) on 30,000 images each. CIFAR-10: the CIFAR-10 network copies and a ResNet-20 extractor,
Adam with a cosine-decayed rate, batch 128, random flips and shifts of up to 4 pixels, on 25,000 images each
(``--epochs``, default 10, for the copies; ``--extractor-epochs`` for the extractor). Every model is scored on the whole test set.
Writes ``recipes/subjects/<dataset>/<name>.keras`` (without optimizer state: a few MB each, committed) and
``subjects.csv`` there (accuracy, training seconds, the command and the commit that made them).
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import time

import numpy as np

from kit import ROOT, command_line, load_data, write_csv
from kit.subjects import ARCHITECTURES, halves, subject_path
from kit.training import flips_and_shifts, keras_epoch

CIFAR10_LR = {"cifar10_cnn": 1e-3, "resnet20": 2e-3}  # recipes/train_models.py's CIFAR10_SETTINGS


def fit(architecture: str, dataset: str, x, y, *, seed: int, epochs: int):
    """A freshly built zoo model trained on (x, y) with random state ``seed``."""
    import keras

    from idcgen.framework.keras_zoo import MODELS as ZOO
    from idcgen.framework.keras_zoo import train

    keras.utils.set_random_seed(seed)
    model = ZOO[architecture](input_shape=x.shape[1:], random_state=seed)
    if dataset != "cifar10":
        train(model, x, y, epochs=epochs, batch_size=256, optimizer="adadelta", random_state=seed)
        return model
    steps = epochs * -(-len(x) // 128)
    rate = keras.optimizers.schedules.CosineDecay(CIFAR10_LR[architecture], steps)
    model.compile(optimizer=keras.optimizers.Adam(rate), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    one_epoch = keras_epoch(model, x, y, 128, flips_and_shifts, np.random.default_rng(seed))
    for epoch in range(epochs):
        one_epoch(1.0)
        print(f"  epoch {epoch + 1}/{epochs}: train accuracy {one_epoch.history['accuracy'][-1]:.2%}", flush=True)
    return model


def save_weights_only(model, architecture: str, path) -> None:
    """The trained weights in a fresh, uncompiled build of the architecture: the file holds no optimizer state
    (a third of a LeNet's file with Adadelta's)."""
    from idcgen.framework.keras_zoo import MODELS as ZOO

    fresh = ZOO[architecture](input_shape=tuple(model.input_shape[1:]), random_state=0)
    fresh.set_weights(model.get_weights())
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh.save(path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, choices=tuple(ARCHITECTURES))
    parser.add_argument("--copies", type=int, default=5, help="copies of the model under test (seeds 0..N-1)")
    parser.add_argument("--epochs", type=int, default=10, help="epochs of the subject copies")
    parser.add_argument("--extractor-epochs", type=int, default=None, help="default: --epochs")
    parser.add_argument("--only-missing", action="store_true", help="train only the models without a file")
    args = parser.parse_args(argv)
    args.extractor_epochs = args.extractor_epochs or args.epochs
    if min(args.copies, args.epochs, args.extractor_epochs) < 1:
        parser.error("--copies, --epochs and --extractor-epochs must be at least 1")
    from idcgen.framework import Network

    subject, extractor = ARCHITECTURES[args.dataset]
    copies = [*range(args.copies), None]
    if args.only_missing and all(subject_path(args.dataset, copy).exists() for copy in copies):
        for copy in copies:  # nothing to train: no data read
            print(f"{subject_path(args.dataset, copy).name}: there already", flush=True)
        return
    (x_a, y_a), (x_b, y_b) = halves(args.dataset)
    x_test, y_test = load_data("test", args.dataset)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    table = subject_path(args.dataset, 0).parent / "subjects.csv"
    rows = {}
    if table.exists():
        with open(table, newline="") as handle:
            rows = {row["file"]: row for row in csv.DictReader(handle)}
    jobs = [(subject, copy, x_a, y_a) for copy in range(args.copies)] + [(extractor, None, x_b, y_b)]
    for architecture, copy, x, y in jobs:
        path = subject_path(args.dataset, copy)
        if args.only_missing and path.exists():
            print(f"{path.name}: there already", flush=True)
            continue
        started = time.perf_counter()
        print(f"{path.name}: {architecture} on half {'B' if copy is None else 'A'} ({len(x)} images)", flush=True)
        epochs = args.extractor_epochs if copy is None else args.epochs
        model = fit(architecture, args.dataset, x, y, seed=0 if copy is None else copy, epochs=epochs)
        seconds = time.perf_counter() - started
        accuracy = float((Network(model).predict(x_test) == y_test).mean())
        save_weights_only(model, architecture, path)
        print(f"{path.name}: test accuracy {accuracy:.2%} ({seconds:.0f} s) -> {path}", flush=True)
        rows[path.name] = {
            "file": path.name,
            "architecture": architecture,
            "role": "extractor" if copy is None else "subject",
            "seed": 0 if copy is None else copy,
            "training half": "B" if copy is None else "A",
            "train images": len(x),
            "epochs": epochs,
            "test accuracy %": round(100 * accuracy, 2),
            "train seconds": round(seconds, 1),
            "command": command_line(),
            "commit": commit.strip(),
        }
        write_csv(table, sorted(rows.values(), key=lambda r: r["file"]))  # after every model: nothing lost


if __name__ == "__main__":
    main()
