"""What the recipes share, and the only thing a recipe imports besides idcgen: no recipe script imports
another (tests/test_imports.py checks it).

Each recipe is one script run from the repository root, e.g. ``python recipes/rq2_idc_by_m.py``; it writes
Markdown and CSV tables (and plots) under ``outputs/<recipe>/``. Models come from
``outputs/models/<name>.keras``, made by ``recipes/train_models.py``; a recipe that does not find its model
stops and names that command (``kit.models.load_model``).

- ``kit.paths``: folders and the names of the recipe models and datasets
- ``kit.data``: the named datasets as arrays, and the Udacity frames (registered as the dataset ``udacity``)
- ``kit.models``: where each model is saved, loading it
- ``kit.tables``: Markdown/CSV tables, JSON files, the command line, timers, cells of repeated runs
- ``kit.stats``: A12, Holm, Mann-Whitney, Wilcoxon with the rank-biserial r, the steering scores, the label check
- ``kit.training``: the one Keras epoch loop and its augmentations
- ``kit.sets``, ``kit.probes``, ``kit.study``: the paper's input sets, RQ1's probe, the guidance study
"""

import sys
from pathlib import Path

# First: `python recipes/NAME.py` from a checkout imports this checkout's idcgen, installed or not.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from idcgen.data.named import CIFAR10_CLASSES
from idcgen.errors import IdcgenError


def _one_line(kind, error, traceback):
    """A recipe is a script users run: idcgen's errors on bad input (a dataset not there, a model file) end
    in one line, as at the command line, not in a traceback whose last line is all that matters."""
    if issubclass(kind, IdcgenError):
        print(f"error: {error}", file=sys.stderr)
    else:
        sys.__excepthook__(kind, error, traceback)


sys.excepthook = _one_line

from .data import cifar10, load_data, udacity
from .models import load_model, model_path, models_for
from .paths import (
    CIFAR10,
    CIFAR10_MODELS,
    DATASETS,
    MODELS,
    OUTPUTS,
    ROOT,
    SHARED,
    UDACITY,
    UDACITY_CROP,
    UDACITY_MODELS,
    UDACITY_RESIZE,
)
from .tables import Timer, cell, command_line, mean_std, save_json, write_csv, write_table

__all__ = [
    "CIFAR10_CLASSES",
    "cifar10",
    "load_data",
    "udacity",
    "load_model",
    "model_path",
    "models_for",
    "CIFAR10",
    "CIFAR10_MODELS",
    "DATASETS",
    "MODELS",
    "OUTPUTS",
    "ROOT",
    "SHARED",
    "UDACITY",
    "UDACITY_CROP",
    "UDACITY_MODELS",
    "UDACITY_RESIZE",
    "Timer",
    "cell",
    "command_line",
    "mean_std",
    "save_json",
    "write_csv",
    "write_table",
]
