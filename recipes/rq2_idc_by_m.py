"""RQ2 (paper Table 3): IDC for m in {6, 8, 10, 12} on U_O, U_O+S and U_O+DI, beside the other criteria.

    python recipes/rq2_idc_by_m.py [--models lenet1 lenet4 lenet5] [--m 6 8 10 12] [--repetitions 3]
                                   [--limit N] [--per-class] [--criteria nc,kmnc,nbc,snac,tknc,lsc,dsc]

U_O is the test set; U_O+S adds a copy of every input with noise on 2 % random pixels, U_O+DI a copy
with the same noise on the 2 % most relevant pixels. The paper's ordering: IDC(U_O) < IDC(U_O+S) <
IDC(U_O+DI) for every model and m, and IDC falls as m grows. Writes ``outputs/rq2_idc_by_m/``.
"""

from __future__ import annotations

import argparse

import numpy as np
from tqdm.auto import tqdm

from common import DATASETS, MODELS, OUTPUTS, Timer, command_line, load_model, mean_std, load_data, write_table
from sets import PERTURBATIONS, perturbed

SETS = ("U_O", "U_O+S", "U_O+DI")
PAPER_LENET5 = {6: (47.0, 51.1, 52.1), 8: (28.0, 33.7, 34.5)}


def idc_rows(network, analyses, x_test, y_test, sets, per_class):
    """IDC (%) of each set for each analysis; per class: the mean over classes of the per-class IDC."""
    out = {}
    for name, x in sets.items():
        if per_class:
            out[name] = 100 * np.mean([a.coverage(x[cls_mask(name, y_test, c, len(x))]).score
                                       for c, a in analyses.items()])
        else:
            out[name] = 100 * analyses[None].coverage(x).score
    return out


def cls_mask(name, y_test, c, n):
    labels = y_test if n == len(y_test) else np.concatenate([y_test] * (n // len(y_test)))
    return labels == c


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--dataset", default="mnist", choices=DATASETS)
    parser.add_argument("--m", type=int, nargs="+", default=[6, 8, 10, 12])
    parser.add_argument("--repetitions", type=int, default=3, help="perturbation draws (mean ± std)")
    parser.add_argument("--limit", type=int, default=None, help="first N test inputs (default all)")
    parser.add_argument("--per-class", action="store_true", help="analyse each class apart (the paper's setting)")
    parser.add_argument("--criteria", default="nc,kmnc,nbc,snac,tknc,lsc,dsc", help="other criteria ('' for none)")
    args = parser.parse_args(argv)

    from idcgen.analysis import analyze
    from idcgen.models import Network

    x_train, y_train = load_data("train", args.dataset)
    x_test, y_test = load_data("test", args.dataset)
    if args.limit:
        x_test, y_test = x_test[:args.limit], y_test[:args.limit]
    rows, crit_rows = [], []
    with Timer() as t:
        for name in args.models:
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
                    analyses = {c: analyze(network, x_train, y_train, m=m, only_class=c, progress=False)
                                for c in np.unique(y_train)}
                else:
                    analyses = {None: analyze(network, x_train, y_train, m=m, progress=False)}
                values = [idc_rows(network, analyses, x_test, y_test, sets, args.per_class) for sets in sets_by_rep]
                a = next(iter(analyses.values()))
                row = {"model": name, "layer": a.layer, "m": m,
                       "clusters": "/".join(str(c.k) for c in a.clusters) if not args.per_class else "per class"}
                for s in SETS:
                    row[f"IDC {s} %"] = mean_std([v[s] for v in values])
                ordered = [np.mean([v[s] for v in values]) for s in SETS]
                row["U_O < +S < +DI"] = "yes" if ordered[0] < ordered[1] < ordered[2] else "no"
                if name == "lenet5" and m in PAPER_LENET5:
                    row["paper (LeNet-5)"] = " / ".join(f"{p:.1f}" for p in PAPER_LENET5[m])
                else:
                    row["paper (LeNet-5)"] = ""
                rows.append(row)
            if args.criteria:
                crit_rows += criteria_rows(name, network, x_train, y_train, y_test, sets_by_rep[0], args.criteria)
    folder = OUTPUTS / "rq2_idc_by_m"
    write_table(folder, "idc", rows, title="RQ2: IDC by m on U_O, U_O+S, U_O+DI", command=command_line(),
                notes=f"{len(x_test)} test inputs; {args.repetitions} perturbation draws (mean ± std); "
                      f"{'per-class analyses, IDC averaged over classes' if args.per_class else 'all classes'}; "
                      f"{t.seconds:.0f} s. Paper values (LeNet-5): U_O / U_O+S / U_O+DI.")
    if crit_rows:
        write_table(folder, "criteria", crit_rows, title="RQ2: other criteria on the same sets (%)",
                    command=command_line(), notes="First perturbation draw. NC threshold 0.75, KMNC k=1000, "
                    "TKNC k=3, LSC/DSC 1000 buckets with upper bounds 2000 and 2 on the last hidden layer.")


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
