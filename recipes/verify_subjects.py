"""Check the committed CIFAR-10 subjects with a plain loop outside idcgen: each ``.pt2`` of
``recipes/subjects/cifar10/subjects.csv`` loaded with ``torch.export.load(path).module()``, run on the 10,000
JPEG round-tripped test images read straight from their ``.npz`` (uint8 -> [0, 1], NHWC -> NCHW), top-1
accuracy without test-time augmentation, set beside what ``subjects.csv`` recorded at training time.

    python recipes/verify_subjects.py [--min-subject 92.0] [--min-extractor 90.0]

Exits 1 when a file's accuracy differs from its row by more than 0.05 points or falls below its threshold.
"""

from __future__ import annotations

import argparse
import csv
import sys

import numpy as np

from kit import ROOT, SHARED

FOLDER = ROOT / "recipes" / "subjects" / "cifar10"
TEST = SHARED / "data" / "cifar10" / "yoongikim_cifar10_test_jpeg_decoded.npz"


def plain_accuracy(path, x: np.ndarray, y: np.ndarray, batch_size: int = 500) -> float:
    """Top-1 accuracy of the exported program at ``path`` on uint8 NHWC images ``x`` with labels ``y``."""
    import torch

    model = torch.export.load(str(path)).module()
    right = 0
    with torch.no_grad():
        for start in range(0, len(x), batch_size):
            batch = torch.from_numpy(x[start : start + batch_size].astype(np.float32) / 255).permute(0, 3, 1, 2)
            right += int((model(batch.contiguous()).argmax(1).numpy() == y[start : start + batch_size]).sum())
    return 100 * right / len(x)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-subject", type=float, default=92.0, help="least accuracy of a copy, in %%")
    parser.add_argument("--min-extractor", type=float, default=90.0, help="least accuracy of the extractor, in %%")
    args = parser.parse_args(argv)
    table = FOLDER / "subjects.csv"
    if not table.exists():
        raise SystemExit(f"{table} not found: train the subjects with `python recipes/subjects.py --dataset cifar10`")
    if not TEST.exists():
        raise SystemExit(f"{TEST} not found: the shared data folder must sit beside the repository")
    with np.load(TEST) as data:
        x, y = data["x"], data["y"].astype(np.int64)
    with open(table, newline="") as handle:
        rows = list(csv.DictReader(handle))
    failed = False
    print(f"{'file':<28} {'recorded %':>10} {'plain loop %':>12}  verdict")
    for row in rows:
        measured = plain_accuracy(FOLDER / row["file"], x, y)
        least = args.min_extractor if row["role"] == "extractor" else args.min_subject
        problems = []
        if abs(measured - float(row["test accuracy %"])) > 0.05:
            problems.append("differs from its row")
        if measured < least:
            problems.append(f"below {least} %")
        failed |= bool(problems)
        verdict = "; ".join(problems) or f"ok (>= {least} %)"
        print(f"{row['file']:<28} {float(row['test accuracy %']):>10.2f} {measured:>12.2f}  {verdict}", flush=True)
    print(f"on {len(x):,} test images of {TEST.name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
