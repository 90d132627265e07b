"""RQ5 (paper Table 5): IDC layer by layer, for the test set U_O and for U_O plus relevant-pixel mutants (DI).

    python recipes/rq5_layers.py [--models lenet5] [--dataset mnist|fashion-mnist|embedded-mnist]
        [--layers block1_conv1 block2_conv1 fc1 fc2] [--m 6] [--clusters 2-5] [--inputs N] [--repetitions 3]

For each hidden layer (conv neurons are channels, with the spatial mean as activation): analyse on the
training set (all classes), then measure IDC of U_O (the test inputs, all of them by default: the paper's
size) and of U_O + DI, where DI holds one relevant-pixel mutant of every input of U_O (``relevant_pixels``:
top 2 % pixels by |relevance|, N(0, 0.75) noise). Repetition r uses random_state + r for the k-means
seeding and for the noise. Writes ``outputs/rq5_layers/table5*.{md,csv}``, the per-repetition values
(``runs*``) and a plot of IDC per layer (``idc_by_layer*.png``).
"""

from __future__ import annotations

import argparse

import numpy as np
from tqdm.auto import tqdm

from kit import DATASETS, MODELS, OUTPUTS, Timer, command_line, load_data, load_model, mean_std, write_table
from kit.sets import PERTURBATIONS, perturbed

RECIPE = "rq5_layers"
#: The hidden layers of the zoo's LeNets studied by default, shallow to deep (those the model has).
LAYERS = ("block1_conv1", "block2_conv1", "fc1", "fc2")


def suffix(dataset: str) -> str:
    return "" if dataset == "mnist" else "_" + dataset.replace("-", "_")


def run_model(name: str, args, x_train, y_train, x_test, y_test) -> list[dict]:
    """Per-repetition rows (one per layer and repetition) for one model."""
    from idcgen.analysis import analyze
    from idcgen.clusters import parse_cluster_range
    from idcgen.framework import Network

    network = Network(load_model(name, args.dataset))
    layers = args.layers or [layer for layer in LAYERS if layer in network.layer_names()]
    for layer in layers:
        network.check_subject_layer(layer)  # an unknown or non-hidden layer fails before any work
    clusters = parse_cluster_range(args.clusters)
    rows = []
    for r in tqdm(range(args.repetitions), desc=f"{name} repetitions", leave=False):
        state = args.random_state + r
        x_di = perturbed(network, x_test, y_test, PERTURBATIONS["U_O+DI"], random_state=state)
        both = np.concatenate([x_test, x_di])
        for layer in tqdm(layers, desc="layers", leave=False):
            width = network.neuron_count(layer)
            m = min(args.m, width)
            analysis = analyze(
                network, x_train, y_train, layer=layer, m=m, clusters=clusters, random_state=state, progress=False
            )
            original, grown = analysis.coverage(x_test), analysis.coverage(both)
            rows.append(
                {
                    "model": name,
                    "layer": layer,
                    "repetition": r,
                    "random_state": state,
                    "neurons": width,
                    "kind": "channels" if len(network.layer(layer).output.shape) > 2 else "units",
                    "m": m,
                    "k": "/".join(str(c.k) for c in analysis.clusters),
                    "combinations": analysis.total,
                    "covered U_O": original.covered,
                    "covered U_O+DI": grown.covered,
                    "IDC U_O": original.score,
                    "IDC U_O+DI": grown.score,
                }
            )
    return rows


def summarise(runs: list[dict]) -> list[dict]:
    """One row per (model, layer): mean ± std over repetitions, IDC in percent."""
    rows = []
    for key in dict.fromkeys((r["model"], r["layer"]) for r in runs):
        mine = [r for r in runs if (r["model"], r["layer"]) == key]
        first = mine[0]
        o = 100 * np.array([r["IDC U_O"] for r in mine])
        g = 100 * np.array([r["IDC U_O+DI"] for r in mine])
        rows.append(
            {
                "model": key[0],
                "layer": key[1],
                "neurons": f"{first['neurons']} {first['kind']}",
                "m": first["m"],
                "k per neuron": " ".join(dict.fromkeys(r["k"] for r in mine)),
                "|INCC|": " ".join(dict.fromkeys(str(r["combinations"]) for r in mine)),
                "IDC U_O %": mean_std(o),
                "IDC U_O+DI %": mean_std(g),
                "gap (points)": mean_std(g - o),
            }
        )
    return rows


def notes(runs: list[dict], args, inputs: int) -> str:
    lines = [
        f"U_O: {inputs} test inputs; DI: one relevant-pixel mutant of each. IDC in percent, mean ± std over "
        f"{args.repetitions} repetitions (random_state {args.random_state}..{args.random_state + args.repetitions - 1}: "
        f"k-means seeding and noise). Clusters per neuron chosen by silhouette from {args.clusters}; "
        "'k per neuron' lists the choice of each important neuron (distinct choices across repetitions "
        "separated by spaces). Conv neurons are channels (activation: spatial mean); when m is at least "
        "the number of channels, every channel is 'important'.",
        "",
        "A layer whose neurons get more clusters has more combinations (|INCC|) to cover, so IDC across "
        "layers compares fractions of different totals (`--clusters 2` compares them at equal |INCC|). "
        "The importance ranking does not depend on the "
        "random_state, and 1-D k-means on the whole training set rarely does: the spread comes mostly "
        "from the noise of DI.",
        "",
        "Paper (Table 5): deeper layers give higher IDC and a larger gap between U_O and U_O+DI.",
        "",
    ]
    for name in dict.fromkeys(r["model"] for r in runs):
        layers = list(dict.fromkeys(r["layer"] for r in runs if r["model"] == name))
        idc = [np.mean([r["IDC U_O"] for r in runs if r["model"] == name and r["layer"] == layer]) for layer in layers]
        gap = [
            np.mean([r["IDC U_O+DI"] - r["IDC U_O"] for r in runs if r["model"] == name and r["layer"] == layer])
            for layer in layers
        ]
        deeper_idc = all(b >= a for a, b in zip(idc, idc[1:]))
        deeper_gap = all(b >= a for a, b in zip(gap, gap[1:]))
        lines.append(
            f"- {name}: IDC U_O by layer (shallow to deep) {', '.join(f'{100 * v:.1f}' for v in idc)} % -> "
            f"{'rises with depth, as in the paper' if deeper_idc else 'does not rise monotonically with depth'}; "
            f"gap {', '.join(f'{100 * v:.1f}' for v in gap)} points -> "
            f"{'grows with depth, as in the paper' if deeper_gap else 'does not grow monotonically with depth'}."
        )
    return "\n".join(lines)


def plot(runs: list[dict], path) -> None:
    from idcgen.plots import pyplot

    plt = pyplot()
    models = list(dict.fromkeys(r["model"] for r in runs))
    fig, axes = plt.subplots(1, len(models), figsize=(4.5 * len(models), 3.6), squeeze=False)
    for ax, name in zip(axes[0], models):
        layers = list(dict.fromkeys(r["layer"] for r in runs if r["model"] == name))
        for key, label, marker in (("IDC U_O", "U_O", "o"), ("IDC U_O+DI", "U_O + DI", "s")):
            values = [[100 * r[key] for r in runs if r["model"] == name and r["layer"] == layer] for layer in layers]
            ax.errorbar(
                np.arange(len(layers)),
                [np.mean(v) for v in values],
                capsize=3,
                marker=marker,
                label=label,
                yerr=[np.std(v, ddof=1) if len(v) > 1 else 0 for v in values],
            )
        ax.set_xticks(np.arange(len(layers)), layers, rotation=15)
        ax.set_ylabel("IDC %")
        ax.set_ylim(0, 105)
        ax.set_title(f"RQ5: IDC per layer, {name}")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["lenet5"], choices=MODELS)
    parser.add_argument("--dataset", default="mnist", choices=DATASETS)
    parser.add_argument(
        "--layers",
        nargs="+",
        default=None,
        help=f"hidden layers, shallow to deep (default: those of {', '.join(LAYERS)} the model has)",
    )
    parser.add_argument("--m", type=int, default=6, help="important neurons per layer (capped at the layer width)")
    parser.add_argument("--clusters", default="2-5", help="k values tried per neuron, e.g. 2-5 or 2,3,4")
    parser.add_argument(
        "--inputs", type=int, default=None, help="test inputs (U_O), drawn at random (default: all, the paper's size)"
    )
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--random-state", type=int, default=0)
    args = parser.parse_args(argv)
    if args.m < 1 or args.repetitions < 1 or (args.inputs is not None and args.inputs < 1):
        parser.error("--m, --repetitions and --inputs must be positive")

    x_train, y_train = load_data("train", args.dataset)
    x_test, y_test = load_data("test", args.dataset)
    if args.inputs is not None and args.inputs < len(x_test):
        pick = np.sort(np.random.default_rng(args.random_state).choice(len(x_test), size=args.inputs, replace=False))
        x_test, y_test = x_test[pick], y_test[pick]

    runs = []
    with Timer() as timer:
        for name in tqdm(args.models, desc="models"):
            runs += run_model(name, args, x_train, y_train, x_test, y_test)
    print(f"RQ5 measured in {timer.seconds:.0f} s")

    folder = OUTPUTS / RECIPE
    tag = suffix(args.dataset)
    summary = summarise(runs)
    write_table(
        folder,
        f"table5{tag}",
        summary,
        command=command_line(),
        notes=notes(runs, args, len(x_test)),
        title=f"RQ5: IDC per layer, U_O vs U_O + relevant-pixel mutants ({args.dataset})",
    )
    write_table(
        folder,
        f"runs{tag}",
        runs,
        command=command_line(),
        title=f"RQ5 per repetition ({args.dataset})",
        notes="IDC as a fraction in [0, 1].",
    )
    plot(runs, folder / f"idc_by_layer{tag}.png")
    return summary


if __name__ == "__main__":
    main()
