"""DeepBase on LeNet-5: what do the important neurons IDC is built on respond to?

    python recipes/deepbase.py [--dataset mnist|fashion-mnist|embedded-mnist] [--m 8] [--layer fc2]
        [--tol 0.05] [--train-limit N] [--inputs N]

Analyses LeNet-5 (recipes/train_models.py) on its training inputs (m important neurons of ``--layer``,
as `idcgen analyze` does), then measures the affinity of those neurons with the built-in hypotheses
(classes one-vs-rest, brightness, contrast, ink, centre of mass, edges, symmetry) on the test inputs with
Pearson, Spearman, mutual information and a linear model, twice: with early stopping (``--tol``) and on
every input (tol 0). Then the convolutional channels of ``--mask-layers`` against the built-in per-pixel
hypotheses (ink, edges, left half, centre), pixel by pixel on every input. Writes ``outputs/deepbase/``:
``top.md``/``.csv`` (each neuron's top hypotheses), ``timing.md``/``.csv`` (with and without early
stopping), ``masks.md``/``.csv`` (each channel's pixel Pearson and IoU with each mask) and the affinity
report of each run (``early/``, ``full/``, ``masks/``: report.md with heatmaps, affinity.csv).
"""

from __future__ import annotations

import argparse

import numpy as np

from kit import DATASETS, OUTPUTS, Timer, command_line, load_data, load_model, write_table

RECIPE = "deepbase"


def main(argv: list[str] | None = None) -> dict[str, list[dict]]:
    """Runs the recipe; returns the rows of ``top`` and ``timing``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist", choices=[d for d in DATASETS if d != "cifar10"])
    parser.add_argument("--layer", default="fc2")
    parser.add_argument("--m", type=int, default=8)
    parser.add_argument("--tol", type=float, default=0.05)
    parser.add_argument("--train-limit", type=int, default=None, help="analyse on the first N training inputs")
    parser.add_argument("--inputs", type=int, default=None, help="measure on the first N test inputs")
    parser.add_argument("--random-state", type=int, default=0)
    parser.add_argument(
        "--mask-layers",
        default="block1_conv1,block2_conv1",
        help="convolutional layers whose channels are scored against the masks ('' for none)",
    )
    args = parser.parse_args(argv)

    from idcgen.analysis import analyze
    from idcgen.deepbase import affinity
    from idcgen.framework import Network

    network = Network(load_model("lenet5", args.dataset))
    x_train, y_train = load_data("train", args.dataset, limit=args.train_limit)
    x_test, y_test = load_data("test", args.dataset, limit=args.inputs)
    with Timer() as t_analysis:
        analysis = analyze(network, x_train, y_train, layer=args.layer, m=args.m, random_state=args.random_state)
    folder = OUTPUTS / RECIPE / ("" if args.dataset == "mnist" else args.dataset.replace("-", "_"))
    analysis.save(folder / "analysis", overwrite=True)
    print(f"analysis: {args.layer}, important neurons {analysis.neurons.tolist()} ({t_analysis.seconds:.1f} s)")
    affinity(network, x_test[:256], y_test[:256], analysis=analysis, progress=False)  # trace the model once

    runs = {}
    for name, tol in (("early", args.tol), ("full", 0)):
        with Timer() as timer:
            result = affinity(network, x_test, y_test, analysis=analysis, tol=tol, random_state=args.random_state)
        result.save(folder / name)
        runs[name] = (result, timer.seconds)
    early, full = runs["early"][0], runs["full"][0]

    rows = []
    for u, best in early.top(3, "spearman"):
        row = {"neuron": early.unit_name(u)}
        for rank, (j, value) in enumerate(best, 1):
            row[f"hypothesis {rank}"] = early.hypotheses[j].words
            row[f"Spearman {rank}"] = round(value, 3)
            row[f"full-data Spearman {rank}"] = round(float(full.scores["spearman"][u, j]), 3)
        j_mi = int(np.nanargmax(early.scores["mi"][u]))
        row["top by MI"] = f"{early.hypotheses[j_mi].words} ({early.scores['mi'][u, j_mi]:.3f} nats)"
        rows.append(row)
    write_table(
        folder,
        "top",
        rows,
        title=f"DeepBase: top hypotheses of LeNet-5's {args.m} important {args.layer} "
        f"neurons ({args.dataset}, {len(x_test)} test inputs, early stopping at +-{args.tol})",
        command=command_line(),
        notes="Spearman of the early-stopped run beside the same score on every input. "
        + " ".join(f"Group: {line}." for line in early.describe(k=1)[len(early.units) :]),
    )

    timing = []
    for name, (result, seconds) in runs.items():
        diffs = {m: float(np.nanmax(np.abs(result.scores[m] - full.scores[m]))) for m in result.measures}
        timing.append(
            {
                "run": "early stopping" if name == "early" else "every input",
                "tol": args.tol if name == "early" else 0,
                "seconds": round(seconds, 2),
                "inputs streamed": result.n_seen,
                "checks": " ".join(map(str, result.checks)),
                "forward s": round(result.timings["forward"], 2),
                "hypotheses s": round(result.timings["hypotheses"], 2),
                "measures s": round(result.timings["measures"], 2),
                "largest difference to every input": " ".join(f"{m} {v:.3f}" for m, v in diffs.items()),
            }
        )
    speedup = runs["full"][1] / runs["early"][1]
    write_table(
        folder,
        "timing",
        timing,
        title=f"DeepBase on LeNet-5 ({args.dataset}): with and without early "
        f"stopping ({len(x_test)} inputs, {args.m} neurons, {len(early.hypotheses)} hypotheses, "
        "pearson, spearman, mi, linear)",
        command=command_line(),
        notes=f"Speed-up {speedup:.1f}x. Analysis {t_analysis.seconds:.1f} s (not counted).",
    )
    masks = []
    if args.mask_layers:
        from idcgen.deepbase.hypotheses import builtin_masks

        layers = [name.strip() for name in args.mask_layers.split(",") if name.strip()]
        with Timer() as t_masks:
            found = affinity(
                network,
                x_test,
                y_test,
                units=";".join(layers),
                hypotheses=builtin_masks(),
                measures="pearson",
                tol=0,
                random_state=args.random_state,
                progress=False,
            )
        found.save(folder / "masks")
        names = [h.name.removesuffix("_mask") for h in found.hypotheses]
        for u in range(len(found.units)):
            row = {"channel": found.unit_name(u)}
            row.update(
                {f"pixel Pearson {name}": round(float(found.scores["pixel"][u, j]), 3) for j, name in enumerate(names)}
            )
            row.update({f"IoU {name}": round(float(found.scores["iou"][u, j]), 3) for j, name in enumerate(names)})
            masks.append(row)
        write_table(
            folder,
            "masks",
            masks,
            title=f"DeepBase: LeNet-5's channels of {', '.join(layers)} against "
            f"per-pixel hypotheses ({args.dataset}, {len(x_test)} test inputs)",
            command=command_line(),
            notes=f"Pearson over every pixel of every input between the channel's activation map and the "
            f"mask resized to it; IoU of the channel's top 0.5 % region with the mask. "
            f"{t_masks.seconds:.1f} s.",
        )
    return {"top": rows, "timing": timing, "masks": masks}


if __name__ == "__main__":
    main()
