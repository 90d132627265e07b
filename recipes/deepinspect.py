"""DeepInspect on the recipe models: do NAPVDs predict the class pairs a model confuses, and do IDC's
important neurons predict them better or worse than all neurons?

    python recipes/deepinspect.py [--runs mnist:lenet5 fashion-mnist:lenet5 cifar10:cifar10_cnn]
        [--m 8] [--train 10000] [--random-draws 20] [--threshold 0.5] [--random-state 0]

For each (dataset, model): ``idcgen.inspect`` over the whole test set (10,000 inputs, labels used only
for the ground truth) with the default layers (every hidden layer a neuron criterion uses); an analysis of
the model's default subject layer on the first ``--train`` training inputs gives the m important neurons.
Four neuron sets are evaluated on the same per-class activation probabilities: all neurons, the
important ones, the analysis layer's every neuron, and m random neurons of that layer (mean over
``--random-draws`` draws, a control for "few neurons"). Figures: precision and recall of the predicted
confusion pairs at both cut-offs (NAPVD below mean - 1 std; the lowest 1 %), Spearman between NAPVD and
type-1 confusion, AUCEC gain over random order, and the same for bias (avg_bias against avg_cd).
Writes ``outputs/deepinspect/{confusion,bias}.{md,csv}`` and one inspect report per model.
"""

from __future__ import annotations

import argparse

import numpy as np

from kit import CIFAR10_CLASSES, OUTPUTS, Timer, command_line, load_data, load_model, write_table

RECIPE = "deepinspect"
#: The paper's CIFAR-10 figures we can state (robust CIFAR-10 models, mean - 1 std cut-off; see
#: docs/design.md, "Confusion and bias (DeepInspect)"): precision 0.40-0.63, recall 0.6-1.0, Spearman about -0.86.
PAPER_CIFAR10 = {"precision_std": "0.40-0.63", "recall_std": "0.6-1.0", "spearman": "about -0.86"}


def view_rows(result, analysis, m: int, draws: int, rng) -> dict[str, dict]:
    """metrics per neuron set: all, important, the analysis layer, m random neurons of that layer (mean)."""
    from idcgen.deepinspect import confusion_matrix, evaluate, type1_confusion

    conf = type1_confusion(confusion_matrix(result.labels, result.predictions, result.n_classes))
    offset = sum(result.widths[: result.layers.index(analysis.layer)])
    width = result.widths[result.layers.index(analysis.layer)]
    layer_rows = offset + np.arange(width)
    views = {
        "all": result.metrics["all"],
        "important": result.metrics["important"],
        "layer": evaluate(result.napv[layer_rows], conf)[1],
    }
    randoms = [evaluate(result.napv[offset + rng.choice(width, m, replace=False)], conf)[1] for _ in range(draws)]
    views["random"] = {
        "neurons": m,
        "confusion": _mean_metrics([r["confusion"] for r in randoms]),
        "bias": _mean_metrics([r["bias"] for r in randoms]),
    }
    return views


def _mean_metrics(items: list[dict]) -> dict:
    def mean(values):
        values = [v for v in values if v is not None]
        return float(np.mean(values)) if values else None

    out = {"actual": items[0]["actual"]}
    for cut in ("std", "top"):
        out[cut] = {k: mean([i[cut][k] for i in items]) for k in ("predicted", "precision", "recall")}
    for k in ("spearman", "aucec", "gain"):
        out[k] = mean([i[k] for i in items])
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs",
        nargs="+",
        default=["mnist:lenet5", "fashion-mnist:lenet5", "cifar10:cifar10_cnn"],
        help="dataset:model pairs",
    )
    parser.add_argument("--m", type=int, default=8)
    parser.add_argument("--train", type=int, default=10000, help="training inputs for the analysis")
    parser.add_argument("--test", type=int, default=None, help="test inputs (default all)")
    parser.add_argument("--random-draws", type=int, default=20)
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--scaling", default="neuron", help="neuron, layer or input (idcgen.inspect)")
    parser.add_argument("--random-state", type=int, default=0)
    args = parser.parse_args(argv)
    import idcgen

    folder = OUTPUTS / RECIPE
    # the default settings write confusion.md and bias.md; others get their own names beside them
    suffix = "" if (args.threshold, args.scaling) == (0.5, "neuron") else f"_{args.scaling}_{args.threshold:g}"
    rows = {"confusion": [], "bias": []}
    for run in args.runs:
        dataset, name = run.split(":")
        model = load_model(name, dataset)
        network = idcgen.Network(model)
        x_train, y_train = load_data("train", dataset, limit=args.train)
        x_test, y_test = load_data("test", dataset, limit=args.test)
        with Timer() as t_analysis:
            analysis = idcgen.analyze(network, x_train, y_train, m=args.m, random_state=args.random_state)
        with Timer() as t_inspect:
            result = idcgen.inspect(
                network,
                x_test,
                y_test,
                analysis=analysis,
                threshold=args.threshold,
                scaling=args.scaling,
                progress=True,
                class_names=CIFAR10_CLASSES if dataset == "cifar10" else None,
            )
        accuracy = float(np.mean(result.predictions == y_test))
        print(
            f"{run}: accuracy {accuracy:.2%}, analysis {t_analysis.seconds:.1f} s (layer {analysis.layer}, "
            f"neurons {analysis.neurons.tolist()}), inspect {t_inspect.seconds:.1f} s, notes {result.notes}"
        )
        result.write_report(folder / f"{dataset}_{name}{suffix}", x_test, top=10, title=f"{name} on {dataset} test")
        views = view_rows(result, analysis, args.m, args.random_draws, np.random.default_rng(args.random_state))
        for what in ("confusion", "bias"):
            for view, vm in views.items():
                e = vm[what]
                label = {
                    "all": f"all ({vm['neurons']})",
                    "important": f"important ({vm['neurons']}, {analysis.layer})",
                    "layer": f"layer {analysis.layer} ({vm['neurons']})",
                    "random": f"random {args.m} of {analysis.layer} (mean of {args.random_draws})",
                }[view]
                rows[what].append(
                    {
                        "dataset": dataset,
                        "model": name,
                        "inputs": len(x_test),
                        "accuracy_%": round(100 * accuracy, 2),
                        "neurons": label,
                        "actual_pairs": e["actual"],
                        "predicted_std": e["std"]["predicted"],
                        "precision_std": _r(e["std"]["precision"]),
                        "recall_std": _r(e["std"]["recall"]),
                        "predicted_top1%": e["top"]["predicted"],
                        "precision_top1%": _r(e["top"]["precision"]),
                        "recall_top1%": _r(e["top"]["recall"]),
                        "spearman": _r(e["spearman"]),
                        "aucec": _r(e["aucec"]),
                        "aucec_gain": _r(e["gain"]),
                    }
                )
    notes = (
        f"Inputs: the test set (CIFAR-10's JPEG round-tripped), labels only for the ground truth. Threshold "
        f"{args.threshold} on activations min-max scaled per {args.scaling} ('input': each layer within each "
        "input); 45 class pairs, so the top 1 % is one pair; n/a = undefined (no pair predicted). "
        f"Analysis: m = {args.m} on the first {args.train} training inputs, random_state {args.random_state}. "
        f"Paper (robust CIFAR-10 models, mean - 1 std): precision {PAPER_CIFAR10['precision_std']}, recall "
        f"{PAPER_CIFAR10['recall_std']}, Spearman {PAPER_CIFAR10['spearman']}."
    )
    write_table(
        folder,
        f"confusion{suffix}",
        rows["confusion"],
        title="DeepInspect: predicted confusion pairs against type-1 confusion",
        notes=notes,
        command=command_line(),
    )
    write_table(
        folder,
        f"bias{suffix}",
        rows["bias"],
        title="DeepInspect: predicted bias pairs against avg_cd",
        notes=notes,
        command=command_line(),
    )
    return rows


def _r(value):
    return "n/a" if value is None else round(float(value), 3)


if __name__ == "__main__":
    main()
