"""The recipes' data: idcgen's named datasets (MNIST-like and CIFAR-10, idcgen/data/named.py) as float32
channels-last arrays, and the Udacity frames with real steering angles, split by time, registered here as
the named dataset ``udacity`` so that any idcgen call in a recipe's process can read ``udacity:test``.

The Udacity frames are one drive (Udacity challenge 2, HMB_3, 20 frames per second). Their real recorded
angles (radians, positive = left) are in ``CH2_final_evaluation.csv``; ``final_example.csv`` beside it holds
placeholder values (Udacity's README calls it a template with false steering values) and is refused.

The split (docs/results.md, "Dave-2 on Udacity"): frames sorted by ``frame_id`` (timestamps), the drive cut
into 10 equal consecutive blocks (block b holds frames ``(b-1)*n//10`` to ``b*n//10``); blocks 2 and 7
(1-based, both with curves) are the test set, 1,122 frames; the 20 frames (1 s) on each side of each test
block are left out, since neighbouring frames are near-duplicates; the remaining 4,412 frames train.
A chronological 80/20 split is not used: the drive's last fifth is almost straight (angle variance 0.003),
so a constant predicts it.
"""

from __future__ import annotations

import csv
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np

from idcgen.data import register_dataset
from idcgen.errors import InputError

from .paths import OUTPUTS, UDACITY, UDACITY_CROP, UDACITY_RESIZE, WORKSPACE_DATA
from .stats import label_check

LABELS = UDACITY / "CH2_final_evaluation.csv"
BLOCKS, TEST_BLOCKS, GAP = 10, (2, 7), 20
FOLDER = OUTPUTS / "data" / "udacity" / "blocked"


def load_data(split: str, dataset: str = "mnist", limit: int | None = None):
    """(x, y) of the named dataset's "train" or "test" split, float32 in [0, 1], channels-last (MNIST-like
    images get one channel); the first ``limit`` inputs only if given."""
    from idcgen.data import fit_to_model, load_inputs

    try:
        ds = load_inputs(f"{dataset}:{split}", limit=limit)
    except InputError as err:
        variable, folder = WORKSPACE_DATA.get(dataset, (None, None))
        if variable is None or Path(os.environ.get(variable, folder)).expanduser().exists():
            raise
        raise InputError(
            f"{err}. The recipes read {dataset} from {folder} (the workspace's data beside the repository) "
            f"when {variable} is unset: fetch {dataset} there, or set {variable} to a copy"
        ) from None
    return (ds.x if ds.x.ndim == 4 else fit_to_model(ds, ds.x.shape[1:] + (1,))), ds.y


def cifar10(split: str, limit: int | None = None):
    """(x, y) of CIFAR-10's ``split`` (idcgen's ``cifar10`` dataset, in its fixed mixed order)."""
    return load_data(split, "cifar10", limit)


def blocked_split(n: int, *, blocks: int = BLOCKS, test_blocks=TEST_BLOCKS, gap: int = GAP):
    """(train, test) index arrays of ``n`` time-ordered frames: ``test_blocks`` (1-based) of ``blocks``
    equal consecutive blocks test; ``gap`` frames on each side of each test block are in neither set."""
    if not all(1 <= b <= blocks for b in test_blocks):
        raise ValueError(f"test_blocks must lie in 1..{blocks}; got {tuple(test_blocks)}")
    test, left_out = np.zeros(n, bool), np.zeros(n, bool)
    for b in test_blocks:
        start, stop = (b - 1) * n // blocks, b * n // blocks
        test[start:stop] = True
        left_out[max(0, start - gap) : min(n, stop + gap)] = True
    return np.flatnonzero(~left_out), np.flatnonzero(test)


def read_angles(path: Path = LABELS) -> tuple[np.ndarray, np.ndarray]:
    """(frame ids as int, angles) of a ``frame_id,steering_angle`` file, sorted by frame id (time)."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    ids = np.array([int(r["frame_id"]) for r in rows], dtype=np.int64)
    angles = np.array([float(r["steering_angle"]) for r in rows])
    order = np.argsort(ids, kind="stable")
    return ids[order], angles[order]


def check_labels(path: Path = LABELS) -> dict:
    """The labels' check (``kit.stats.label_check``); stops the recipe when they look like noise, as the
    placeholder angles of ``final_example.csv`` do (lag-1 autocorrelation 0.02)."""
    found = label_check(read_angles(path)[1])
    if abs(found["lag1_autocorrelation"]) < 0.3:
        raise SystemExit(
            f"{path.name}: {found['verdict']} (lag-1 autocorrelation {found['lag1_autocorrelation']}); "
            f"use {LABELS.name}"
        )
    return found


def udacity_folder(split: str) -> Path:
    """``outputs/data/udacity/blocked/<split>/``: the JPEG frames of one split of the blocked split (extracted
    once from ../shared's zip); their labels are ``LABELS``."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be train or test; got {split!r}")
    archive = UDACITY / "udacity_test_center_160x120.zip"
    if not archive.exists():
        raise SystemExit(f"{archive} not found: the Udacity recipes need ../shared/data/udacity")
    folder = FOLDER / split
    if folder.is_dir():
        return folder
    ids = read_angles()[0]
    with zipfile.ZipFile(archive) as z:
        names = {int(Path(n).stem): n for n in z.namelist() if n.endswith(".jpg")}
        if sorted(names) != ids.tolist():
            raise SystemExit(f"{archive}: its frames are not the {len(ids)} frames of {LABELS.name}")
        stems = {len(str(i)) for i in ids}
        if len(stems) != 1:  # the loader reads a folder in name order: equal lengths make it time order
            raise SystemExit(f"{archive}: frame ids of different lengths; name order would not be time order")
        train, test = blocked_split(len(ids))
        tmp = folder.with_name(f"{split}.partial{os.getpid()}")  # another run may extract at the same time
        tmp.mkdir(parents=True, exist_ok=True)
        for i in train if split == "train" else test:
            (tmp / f"{ids[i]}.jpg").write_bytes(z.read(names[int(ids[i])]))
    try:
        tmp.rename(folder)
    except OSError:  # another run finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def udacity(split: str, limit: int | None = None):
    """(x, y) of the blocked split's ``split``: float32 (n, 66, 200, 3) in [0, 1] (the top 40 rows, sky,
    cropped), the real steering angles in radians (float64), in time order."""
    from idcgen.data import load_inputs

    check_labels()
    ds = load_inputs(
        udacity_folder(split),
        labels=str(LABELS),
        crop=UDACITY_CROP,
        resize=UDACITY_RESIZE,
        task="regression",
        limit=limit,
    )
    return ds.x, ds.y


@register_dataset("udacity")
def _udacity(split: str):
    if split == "all":
        raise InputError("udacity has a train and a test split only (the blocked split of one drive)")
    x, y = udacity(split)
    return x, y, f"udacity:{split} (blocked split of {LABELS.name})"
