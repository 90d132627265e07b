"""RQ2 (paper Table 3): IDC for m in {6, 8, 10, 12} on U_O, U_O+S and U_O+DI, beside the other criteria.

    python recipes/rq2_idc_by_m.py [--models lenet1 lenet4 lenet5] [--m 6 8 10 12] [--repetitions 3]
                                   [--limit N] [--train-limit N] [--per-class] [--criteria nc,kmnc,nbc,snac,tknc,lsc,dsc]
    python recipes/rq2_idc_by_m.py --dataset cifar10 [--models cifar10_cnn]   # the paper's CIFAR-10 network

U_O is the test set; U_O+S adds a copy of every input with noise on 2 % random pixels, U_O+DI a copy
with the same noise on the 2 % most relevant pixels. The paper's ordering: IDC(U_O) < IDC(U_O+S) <
IDC(U_O+DI) for every model and m, and IDC falls as m grows. 2 % of the pixel positions is 15 of 784
on MNIST, 20 of 1,024 on CIFAR-10 (all three channels of a position get noise). The analysis uses the
whole training set, or its first ``--train-limit`` inputs (CIFAR-10 default: 10,000 of the 50,000, in
the fixed mixed order of idcgen's cifar10 dataset). Writes ``outputs/rq2_idc_by_m/`` (``idc.md`` on MNIST,
``idc_<dataset>.md`` otherwise).
"""

from __future__ import annotations

import argparse

import numpy as np
from tqdm.auto import tqdm

from kit import (
    CIFAR10_MODELS,
    DATASETS,
    MODELS,
    OUTPUTS,
    Timer,
    command_line,
    load_data,
    load_model,
    mean_std,
    models_for,
    write_table,
)
from kit.sets import PERTURBATIONS, perturbed

SETS = ("U_O", "U_O+S", "U_O+DI")
#: the paper's Table 3 values we can vouch for: (model, m) -> U_O, U_O+S, U_O+DI (%)
PAPER = {("lenet5", 6): (47.0, 51.1, 52.1), ("lenet5", 8): (28.0, 33.7, 34.5)}
#: CIFAR-10 training inputs analysed by default: 10,000 keeps one analysis near a minute on 2 cores
CIFAR10_TRAIN_LIMIT = 10_000


def idc_rows(network, analyses, x_test, y_test, sets, per_class):
    """IDC (%) of each set for each analysis; per class: the mean over classes of the per-class IDC."""
    out = {}
    for name, x in sets.items():
        if per_class:
            out[name] = 100 * np.mean(
                [a.coverage(x[cls_mask(name, y_test, c, len(x))]).score for c, a in analyses.items()]
            )
        else:
            out[name] = 100 * analyses[None].coverage(x).score
    return out


def cls_mask(name, y_test, c, n):
    labels = y_test if n == len(y_test) else np.concatenate([y_test] * (n // len(y_test)))
    return labels == c


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        nargs="+",
        default=None,
        choices=MODELS + CIFAR10_MODELS,
        help="default: the LeNets, or cifar10_cnn with --dataset cifar10",
    )
    parser.add_argument("--dataset", default="mnist", choices=DATASETS)
    parser.add_argument("--m", type=int, nargs="+", default=[6, 8, 10, 12])
    parser.add_argument("--repetitions", type=int, default=3, help="perturbation draws (mean ± std)")
    parser.add_argument("--limit", type=int, default=None, help="first N test inputs (default all)")
    parser.add_argument(
        "--train-limit",
        type=int,
        default=None,
        help=f"first N training inputs analysed (default all; cifar10: {CIFAR10_TRAIN_LIMIT})",
    )
    parser.add_argument("--per-class", action="store_true", help="analyse each class apart (the paper's setting)")
    parser.add_argument("--criteria", default="nc,kmnc,nbc,snac,tknc,lsc,dsc", help="other criteria ('' for none)")
    args = parser.parse_args(argv)
    models = args.models or (["cifar10_cnn"] if args.dataset == "cifar10" else list(MODELS))
    wrong = [m for m in models if m not in models_for(args.dataset)]
    if wrong:
        parser.error(
            f"models {', '.join(wrong)} do not fit --dataset {args.dataset}; it takes "
            f"{', '.join(models_for(args.dataset))}"
        )
    train_limit = args.train_limit or (CIFAR10_TRAIN_LIMIT if args.dataset == "cifar10" else None)

    from idcgen.analysis import RelevanceSettings, analyze
    from idcgen.framework import Network

    x_train, y_train = load_data("train", args.dataset, limit=train_limit)
    x_test, y_test = load_data("test", args.dataset)
    if args.limit:
        x_test, y_test = x_test[: args.limit], y_test[: args.limit]
    rows, crit_rows = [], []
    with Timer() as t:
        for name in models:
            network = Network(load_model(name, args.dataset))
            sets_by_rep = []
            for rep in range(args.repetitions):
                sets = {"U_O": x_test}
                for set_name in ("U_O+S", "U_O+DI"):
                    copies = perturbed(network, x_test, y_test, PERTURBATIONS[set_name], random_state=rep)
                    sets[set_name] = np.concatenate([x_test, copies])
                sets_by_rep.append(sets)
            for m in tqdm(args.m, desc=f"{name}: m"):
                if args.per_class:
                    analyses = {
                        c: analyze(
                            network, x_train, y_train, m=m, relevance=RelevanceSettings(only_class=c), progress=False
                        )
                        for c in np.unique(y_train)
                    }
                else:
                    analyses = {None: analyze(network, x_train, y_train, m=m, progress=False)}
                values = [idc_rows(network, analyses, x_test, y_test, sets, args.per_class) for sets in sets_by_rep]
                a = next(iter(analyses.values()))
                row = {
                    "model": name,
                    "layer": a.layer,
                    "m": m,
                    "clusters": "/".join(str(c.k) for c in a.clusters) if not args.per_class else "per class",
                }
                for s in SETS:
                    row[f"IDC {s} %"] = mean_std([v[s] for v in values])
                ordered = [np.mean([v[s] for v in values]) for s in SETS]
                row["U_O < +S < +DI"] = "yes" if ordered[0] < ordered[1] < ordered[2] else "no"
                paper = PAPER.get((name, m)) if args.dataset == "mnist" else None
                row["paper"] = " / ".join(f"{p:.1f}" for p in paper) if paper else ""
                rows.append(row)
            if args.criteria:
                crit_rows += criteria_rows(name, network, x_train, y_train, y_test, sets_by_rep[0], args.criteria)
    folder = OUTPUTS / "rq2_idc_by_m"
    suffix = "" if args.dataset == "mnist" else "_" + args.dataset.replace("-", "_")
    write_table(
        folder,
        f"idc{suffix}",
        rows,
        title=f"RQ2: IDC by m on U_O, U_O+S, U_O+DI ({args.dataset})",
        command=command_line(),
        notes=f"{len(x_test)} test inputs; analyses of {len(x_train)} training inputs; "
        f"{args.repetitions} perturbation draws (mean ± std); "
        f"{'per-class analyses, IDC averaged over classes' if args.per_class else 'all classes'}; "
        f"{t.seconds:.0f} s. Paper values (Table 3, where we have them): U_O / U_O+S / U_O+DI.",
    )
    if crit_rows:
        write_table(
            folder,
            f"criteria{suffix}",
            crit_rows,
            title="RQ2: other criteria on the same sets (%)",
            command=command_line(),
            notes="First perturbation draw. NC threshold 0.75, KMNC k=1000, "
            "TKNC k=3, LSC/DSC 1000 buckets with upper bounds 2000 and 2 on the last hidden layer.",
        )


def criteria_rows(model_name, network, x_train, y_train, y_test, sets, names):
    from idcgen.criteria import make_criterion, parse_criteria

    rows = []
    for crit in [c for c in parse_criteria(names) if c != "idc"]:
        criterion = make_criterion(crit).fit(network, x_train, y_train)
        row = {"model": model_name, "criterion": crit}
        for s in SETS:
            row[f"{s} %"] = round(100 * criterion.coverage(network, sets[s]).score, 2)
        rows.append(row)
    return rows


if __name__ == "__main__":
    main()
