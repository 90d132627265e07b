"""How far bf16 and fp16 forward passes agree with fp32 (issue 31, item 4): the share of equal predictions and
of equal combinations, and the covered combinations, on real test images of the study's trained subjects.

    python recipes/precision.py                      # prepare (Keras + ../shared) and measure on this machine
    python recipes/precision.py --measure-only --device cuda    # on a GPU machine: torch, numpy, idcgen only

Two steps. *Prepare* (needs TensorFlow and the datasets): for each dataset, copy 0 of the study's subject
(recipes/subjects/<dataset>/) as its PyTorch twin (``torch_zoo.from_keras``) in ``<folder>/<dataset>/model.pt2``,
its IDC analysis in fp32 (m = 8, 10,000 images of the subject's training half, random state 0) in
``analysis/``, and the first ``--limit`` test images and labels as uint8 in ``test.npz``. An analysis is the
same on every device (docs/design.md, "Devices"), so it is made once. *Measure* (torch, numpy and idcgen's
PyTorch path only): the twin on ``--device`` in fp32, bf16 and fp16; per precision, against fp32 on the same
device: predictions equal, combination ids equal, combinations covered, covered by only one of the two,
top-1 accuracy and the largest logit difference. The prepared folder is small enough to travel to a GPU
machine (about 20 MB at --limit 5000).

Writes ``docs/data/precision/<device kind>.csv`` (with ``--out``, elsewhere) and prints a table.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import numpy as np

from kit import ROOT, load_data, write_csv
from kit.subjects import TORCH_DATASETS, load_subject, training_sets

DATASETS = ("mnist", "fashion-mnist", "cifar10")
PRECISIONS = ("fp32", "bf16", "fp16")


def prepare(folder: Path, dataset: str, limit: int, fit: int) -> None:
    """The twin, its fp32 analysis and the test images of ``dataset`` in ``folder`` (made once)."""
    from idcgen.analysis import analyze
    from idcgen.framework import Network
    from idcgen.framework.torch_zoo import from_keras

    if (folder / "test.npz").exists() and len(np.load(folder / "test.npz")["y"]) == limit:
        return  # made before, for the same number of test images
    subject = load_subject(dataset, 0)  # CIFAR-10's is a PyTorch program already: it runs as it is
    twin = subject if dataset in TORCH_DATASETS else from_keras(subject)
    x, y = load_data("test", dataset, limit)
    pixels = np.round(x * 255).astype(np.uint8)
    if not np.array_equal(pixels.astype(np.float32) / 255, x):  # the stored images are the images measured
        raise SystemExit(f"{dataset}: the test images are not n/255 values; store them as float32 instead")
    network = Network(twin, device="cpu")
    logits = network.forward(x[:500])[0]
    probabilities = np.exp(logits - logits.max(1, keepdims=True))
    probabilities /= probabilities.sum(1, keepdims=True)
    apart = 0.0 if dataset in TORCH_DATASETS else np.abs(probabilities - subject.predict(x[:500], verbose=0)).max()
    if apart > 1e-4:  # the Keras subject ends in a softmax, its twin in the logits
        raise SystemExit(f"{dataset}: the PyTorch twin's probabilities differ from the Keras subject's by {apart:.2g}")
    (x_fit, y_fit), _ = training_sets(dataset)
    analysis = analyze(network, x_fit[:fit], y_fit[:fit], m=8, random_state=0, progress=False)
    write_prepared(folder, twin, analysis, pixels, y)
    print(f"{dataset}: prepared in {folder} (layer {analysis.layer}, {analysis.total} combinations)")


def write_prepared(folder: Path, module, analysis, pixels: np.ndarray, y: np.ndarray) -> None:
    """What :func:`measure` reads: the module as a ``.pt2`` program, its analysis, the test images (uint8)."""
    from idcgen.framework.torch_zoo import export_program

    folder.mkdir(parents=True, exist_ok=True)
    analysis.save(folder / "analysis")
    export_program(module, folder / "model.pt2")
    np.savez_compressed(folder / "test.npz", x=pixels, y=y)


def measure(folder: Path, dataset: str, device: str) -> list[dict]:
    """One row per precision: its agreement with fp32 on the same device."""
    from idcgen.analysis import Analysis
    from idcgen.framework import load_network

    data = np.load(folder / "test.npz")
    x, y = data["x"].astype(np.float32) / 255, data["y"]
    analysis, found = Analysis.load(folder / "analysis"), {}  # read once, bound to each precision's network
    for precision in PRECISIONS:
        network = load_network(folder / "model.pt2", device=device, precision=precision)
        bound = analysis.bind(network)
        bound.ids(x[:64])  # warm-up
        start = time.perf_counter()
        logits = network.forward(x)[0]
        ids = bound.ids(x)
        seconds = time.perf_counter() - start
        found[precision] = (logits, ids, seconds, network.device_info())
    rows = []
    logits32, ids32, _, _ = found["fp32"]
    covered32 = set(np.unique(ids32).tolist())
    for precision, (logits, ids, seconds, info) in found.items():
        covered = set(np.unique(ids).tolist())
        rows.append(
            {
                "dataset": dataset,
                "device": info["device"],
                "card": info.get("name", ""),
                "framework": info.get("framework", ""),
                "precision": precision,
                "inputs": len(x),
                "predictions_equal_pct": round(100 * float((logits.argmax(1) == logits32.argmax(1)).mean()), 2),
                "combinations_equal_pct": round(100 * float((ids == ids32).mean()), 2),
                "covered": len(covered),
                "covered_fp32": len(covered32),
                "total": analysis.total,
                "only_this": len(covered - covered32),
                "only_fp32": len(covered32 - covered),
                "accuracy_pct": round(100 * float((logits.argmax(1) == y).mean()), 2),
                "max_logit_diff": float(f"{np.abs(logits - logits32).max():.3g}"),
                "seconds": round(seconds, 3),
            }
        )
    return rows


def with_earlier_rows(path: Path, rows: list[dict]) -> list[dict]:
    """``rows`` with the rows ``path`` holds for the datasets not measured now (an earlier run's), by dataset."""
    kept = []
    if path.exists():
        measured = {row["dataset"] for row in rows}
        with open(path, newline="") as handle:
            kept = [r for r in csv.DictReader(handle) if r["dataset"] not in measured and list(r) == list(rows[0])]
    order = {dataset: i for i, dataset in enumerate(DATASETS)}
    return sorted(kept + rows, key=lambda row: order.get(row["dataset"], len(order)))  # stable: precisions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--folder", type=Path, default=ROOT / "outputs" / "precision", help="the prepared twins")
    parser.add_argument("--limit", type=int, default=5000, help="test images measured")
    parser.add_argument("--fit", type=int, default=10_000, help="training images the analysis is made on")
    parser.add_argument("--device", default="auto", help="auto|cpu|cuda|cuda:N")
    parser.add_argument("--measure-only", action="store_true", help="the prepared folder only (no TensorFlow)")
    parser.add_argument("--out", type=Path, default=None, help="the CSV (default docs/data/precision/<kind>.csv)")
    args = parser.parse_args()

    from idcgen.errors import IdcgenError

    rows = []
    for dataset in args.datasets:
        if not args.measure_only:
            prepare(args.folder / dataset, dataset, args.limit, args.fit)
        if not (args.folder / dataset / "test.npz").exists():
            raise SystemExit(f"{args.folder / dataset} is not prepared: run `python recipes/precision.py` first")
        try:
            rows += measure(args.folder / dataset, dataset, args.device)
        except IdcgenError as exc:  # a GPU asked for and not seen: one line
            raise SystemExit(f"error: {exc}") from None
    kind = "cuda" if rows and rows[0]["device"].startswith("cuda") else "cpu"
    out = args.out or ROOT / "docs" / "data" / "precision" / f"{kind}.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(out, with_earlier_rows(out, rows))
    keys = ("dataset", "precision", "predictions_equal_pct", "combinations_equal_pct", "covered", "covered_fp32")
    keys += ("only_this", "only_fp32", "accuracy_pct", "max_logit_diff", "seconds")
    print("| " + " | ".join(keys) + " |")
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")
    print(f"written: {out} ({rows[0]['device']}, {rows[0]['card'] or 'no card name'}, {rows[0]['framework']})")


if __name__ == "__main__":
    main()
