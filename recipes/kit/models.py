"""The recipe models: where each is saved and how a recipe loads it. Loading never trains: a missing model
stops the recipe with the command that makes it."""

from __future__ import annotations

from pathlib import Path

from .paths import CIFAR10_MODELS, MODELS, OUTPUTS, UDACITY_MODELS


def models_for(dataset: str) -> tuple[str, ...]:
    """The recipe models of a dataset: the LeNets for the MNIST-like ones, the CIFAR-10 pair for cifar10."""
    return CIFAR10_MODELS if dataset == "cifar10" else MODELS


def model_path(name: str, dataset: str = "mnist") -> Path:
    suffix = "" if dataset in ("mnist", "cifar10") else f"_{dataset.replace('-', '_')}"
    return OUTPUTS / "models" / f"{name}{suffix}.keras"


def training_command(name: str, dataset: str = "mnist") -> str:
    """The recipe command that trains model ``name`` on ``dataset``."""
    if name in ("vit_tiny", "convnext_micro", "efficientnet_b0", "mobilenet_v3_small"):
        return f"python recipes/train_transformers.py --models {name}"
    data = "udacity" if name in UDACITY_MODELS else dataset
    return f"python recipes/train_models.py --dataset {data} --models {name}"


def load_model(name: str, dataset: str = "mnist"):
    """The trained recipe model (a Keras model); SystemExit naming the command that trains it if it is missing."""
    path = model_path(name, dataset)
    if not path.exists():
        raise SystemExit(f"{path} not found: train it first with `{training_command(name, dataset)}`")
    from idcgen.framework import load_model as load

    return load(path)
