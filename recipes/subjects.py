"""Train the study subjects: five independently trained copies of the model under test and a fault extractor
of another architecture, trained on the half of the training set the copies never saw, or for CIFAR-10 on the
whole set like the copies (recipes/kit/subjects.py).

    python recipes/subjects.py --dataset mnist|fashion-mnist|cifar10 [--copies 5] [--epochs N] [--only-missing]
                               [--only s0,extractor,...]

MNIST-like: LeNet-5 copies (seeds 0-4) and a LeNet-4 extractor, the paper's settings (Adadelta lr 1.0, rho 0.95,
batch 256, 10 epochs) on 30,000 images each, saved as ``.keras`` (without optimizer state: a few MB each).
CIFAR-10: PyTorch copies of an airbench-style network and a residual extractor (recipes/kit/fast_cifar.py) on
all 50,000 images, 15 epochs unless ``--epochs``/``--extractor-epochs`` say otherwise, saved as ``.pt2``
(``torch.export.load(path).module()`` runs one on NCHW images in [0, 1]). A CIFAR-10 model checkpoints after every
epoch (``outputs/subjects/checkpoints/<name>.ckpt``) and a rerun resumes it: a killed run loses at most one epoch.
Every model is scored on the whole test set, as it is (no test-time augmentation), by a plain loop. Writes
``recipes/subjects/<dataset>/`` (committed) and ``subjects.csv`` there (accuracy, training seconds, the machine,
the command and the commit that made them), after every model.
"""

from __future__ import annotations

import argparse
import csv
import platform
import subprocess
import time

from kit import OUTPUTS, ROOT, command_line, load_data, write_csv
from kit.subjects import ARCHITECTURES, TORCH_DATASETS, subject_path, training_sets, training_split


def fit(architecture: str, x, y, *, seed: int, epochs: int):
    """A freshly built Keras zoo model (MNIST-like) trained on (x, y) with random state ``seed``."""
    import keras

    from idcgen.framework.keras_zoo import MODELS as ZOO
    from idcgen.framework.keras_zoo import train

    keras.utils.set_random_seed(seed)
    model = ZOO[architecture](input_shape=x.shape[1:], random_state=seed)
    train(model, x, y, epochs=epochs, batch_size=256, optimizer="adadelta", random_state=seed)
    return model


def fit_torch(architecture: str, x, y, *, seed: int, epochs: int, path, x_test, y_test):
    """A CIFAR-10 network trained (resuming its checkpoint) and exported to ``path``; (accuracy, seconds)."""
    from kit.fast_cifar import accuracy, export, recipe_for, train

    checkpoint = OUTPUTS / "subjects" / "checkpoints" / path.with_suffix(".ckpt").name
    module, run = train(architecture, x, y, seed=seed, recipe=recipe_for(architecture, epochs), checkpoint=checkpoint)
    export(module, path)
    return accuracy(module, x_test, y_test), run["seconds"]


def read_rows(table) -> dict:
    """The rows of ``subjects.csv`` by file (none when it does not exist yet)."""
    if not table.exists():
        return {}
    with open(table, newline="") as handle:
        return {row["file"]: row for row in csv.DictReader(handle)}


def machine() -> str:
    import os

    return f"{platform.machine()} CPU, {os.cpu_count()} cores ({platform.processor() or platform.system()})"


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
    parser.add_argument("--epochs", type=int, default=None, help="epochs of the subject copies (10; CIFAR-10: 15)")
    parser.add_argument("--extractor-epochs", type=int, default=None, help="default: --epochs")
    parser.add_argument("--only-missing", action="store_true", help="train only the models without a file")
    parser.add_argument("--only", default=None, help="these models only, in this order: s0,s1,...,extractor")
    args = parser.parse_args(argv)
    args.epochs = args.epochs or (15 if args.dataset in TORCH_DATASETS else 10)
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
    (x_a, y_a), (x_b, y_b) = training_sets(args.dataset)
    x_test, y_test = load_data("test", args.dataset)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    table = subject_path(args.dataset, 0).parent / "subjects.csv"
    jobs = {f"s{copy}": (subject, copy, x_a, y_a) for copy in range(args.copies)}
    jobs["extractor"] = (extractor, None, x_b, y_b)
    names = args.only.split(",") if args.only else list(jobs)
    unknown = sorted(set(names) - set(jobs))
    if unknown:
        parser.error(f"--only: no model {', '.join(unknown)}; choose from {', '.join(jobs)}")
    for architecture, copy, x, y in (jobs[name] for name in names):
        path = subject_path(args.dataset, copy)
        if args.only_missing and path.exists():
            print(f"{path.name}: there already", flush=True)
            continue
        started = time.perf_counter()
        split = training_split(args.dataset, copy)
        where = "the whole training set" if split == "all" else f"half {split}"
        print(f"{path.name}: {architecture} on {where} ({len(x)} images)", flush=True)
        epochs = args.extractor_epochs if copy is None else args.epochs
        seed = 0 if copy is None else copy
        if args.dataset in TORCH_DATASETS:
            accuracy, seconds = fit_torch(
                architecture, x, y, seed=seed, epochs=epochs, path=path, x_test=x_test, y_test=y_test
            )
        else:
            model = fit(architecture, x, y, seed=seed, epochs=epochs)
            seconds = time.perf_counter() - started
            accuracy = float((Network(model).predict(x_test) == y_test).mean())
            save_weights_only(model, architecture, path)
        print(f"{path.name}: test accuracy {accuracy:.2%} ({seconds:.0f} s) -> {path}", flush=True)
        rows = read_rows(table)  # read again: another process may have added its models meanwhile
        rows[path.name] = {
            "file": path.name,
            "architecture": architecture,
            "role": "extractor" if copy is None else "subject",
            "seed": 0 if copy is None else copy,
            "training half": split,
            "train images": len(x),
            "epochs": epochs,
            "test accuracy %": round(100 * accuracy, 2),
            "train seconds": round(seconds, 1),
            "machine": machine(),
            "command": command_line(),
            "commit": commit.strip(),
        }
        write_csv(table, sorted(rows.values(), key=lambda r: r["file"]))  # after every model: nothing lost


if __name__ == "__main__":
    main()
