"""The paper's Dave-2 subject: RQ1-RQ3 on the Udacity frames in one recipe.

    python recipes/udacity_rq.py [--models dave2] [--layer fc3] [--m 8] [--pixels 200] [--repetitions 3]
                                 [--rq1-inputs 500] [--attack-inputs 300] [--criteria nc,kmnc,nbc,snac,tknc]

The paper's Dave-2 setting: subject layer the 50-unit dense layer (``fc3`` in idcgen.framework.keras_zoo.dave2), m = 8,
relevance-targeted noise on 200 pixels (1.5 % of a 66x200 frame; N(0, 0.75) as on MNIST). The analysis
runs on the training blocks of the drive, the sets are built from the test blocks (the blocked split of
recipes/kit/data.py):

- RQ1 (Table 2): L2 distance of the important vs m random neurons of the layer when the 200 most relevant
  pixels get noise (and the control: 200 random pixels), on ``--rq1-inputs`` test frames.
- RQ2 (Table 3): IDC of U_O (the test frames), U_O+S (plus a copy with noise on 200 random pixels) and
  U_O+DI (plus a copy with noise on the 200 most relevant pixels), mean ± std over ``--repetitions`` draws.
- RQ3 (Table 4): IDC and the other criteria of U_O plus Gaussian noise (std 0.3), FGSM (eps 0.3) and BIM
  (eps 0.3, step 0.05, 10 iterations) copies of the first ``--attack-inputs`` test frames, the paper's
  MNIST parameters. The attacks push the steering output away from the label (docs/design.md, "Regression
  models"); JSMA and C&W are for classifiers and are left out.

The labels are checked before anything runs: the recipe prints how much neighbouring frames' angles
agree (real steering at 20 frames per second changes slowly) and says when they look like noise.
Writes ``outputs/udacity_rq/{rq1,rq2,rq3}.{md,csv}``.
"""

from __future__ import annotations

import argparse

import numpy as np

from kit import OUTPUTS, UDACITY_MODELS, Timer, command_line, load_model, mean_std, udacity, write_table
from kit.probes import distances, summary_row
from kit.sets import PERTURBATIONS, perturbed
from kit.stats import label_check

RECIPE = "udacity_rq"
ATTACKS = ("U_O+noise", "U_O+FGSM", "U_O+BIM")


def pixel_specs(pixels: int, shape) -> dict:
    """RQ2's two perturbations with ``pixels`` pixel positions of a frame of ``shape`` (h, w, c)."""
    fraction = pixels / (shape[0] * shape[1])
    return {
        "U_O+DI": f"relevant_pixels(fraction={fraction!r}, std=0.75)",
        "U_O+S": f"random_pixels(fraction={fraction!r}, std=0.75)",
    }


def rq2_row(name, analysis, x_test, y_test, specs, repetitions) -> dict:
    network = analysis.network
    values = {s: [] for s in ("U_O", "U_O+S", "U_O+DI")}
    for rep in range(repetitions):
        values["U_O"].append(100 * analysis.coverage(x_test).score)
        for s in ("U_O+S", "U_O+DI"):
            copies = perturbed(network, x_test, y_test, specs[s], random_state=rep, batch=256)
            values[s].append(100 * analysis.coverage(np.concatenate([x_test, copies])).score)
    means = [np.mean(values[s]) for s in values]
    return {
        "model": name,
        "layer": analysis.layer,
        "m": analysis.m,
        "clusters": "/".join(str(c.k) for c in analysis.clusters),
        "combinations": analysis.total,
        **{f"IDC {s} %": mean_std(v) for s, v in values.items()},
        "U_O < +S < +DI": "yes" if means[0] < means[1] < means[2] else "no",
    }


def rq3_rows(name, analysis, x_train, y_train, x_test, y_test, n_attack, criteria, random_state) -> list[dict]:
    network = analysis.network
    sets, moved = {"U_O": x_test}, {"U_O": ""}
    before = network.predict(x_test[:n_attack]).astype(np.float64)
    for s in ATTACKS:
        with Timer() as t:
            copies = perturbed(
                network, x_test[:n_attack], y_test[:n_attack], PERTURBATIONS[s], random_state=random_state, batch=100
            )
        change = np.abs(network.predict(copies).astype(np.float64) - before)
        moved[s] = (
            f"median |output change| {np.median(change):.3g} rad, {100 * (change > 0.2).mean():.0f} % > 0.2 rad, "
            f"{t.seconds:.0f} s"
        )
        sets[s] = np.concatenate([x_test, copies])
    rows = [
        {
            "model": name,
            "criterion": f"IDC m={analysis.m}",
            **{s: round(100 * analysis.coverage(x).score, 2) for s, x in sets.items()},
        }
    ]
    if criteria:
        from idcgen.criteria import make_criterion, parse_criteria

        for crit in [c for c in parse_criteria(criteria) if c != "idc"]:
            criterion = make_criterion(crit).fit(network, x_train, y_train)
            rows.append(
                {
                    "model": name,
                    "criterion": crit.upper(),
                    **{s: round(100 * criterion.coverage(network, x).score, 2) for s, x in sets.items()},
                }
            )
    rows.append({"model": name, "criterion": "attack effect", **moved})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["dave2"], choices=UDACITY_MODELS)
    parser.add_argument("--layer", default="fc3", help="subject layer (the paper: the 50-unit dense layer, fc3)")
    parser.add_argument("--m", type=int, default=8, help="important neurons (the paper's Dave-2: 8)")
    parser.add_argument("--pixels", type=int, default=200, help="pixels perturbed in RQ1/RQ2 (the paper: 200)")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--rq1-inputs", type=int, default=500, help="test frames measured in RQ1")
    parser.add_argument("--attack-inputs", type=int, default=300, help="test frames attacked in RQ3")
    parser.add_argument("--criteria", default="nc,kmnc,nbc,snac,tknc", help="other criteria in RQ3 ('' for none)")
    parser.add_argument("--limit", type=int, default=None, help="first N frames of each split (for a quick run)")
    parser.add_argument("--random-state", type=int, default=0)
    args = parser.parse_args(argv)
    if min(args.m, args.pixels, args.repetitions, args.rq1_inputs, args.attack_inputs) < 1:
        parser.error("--m, --pixels, --repetitions, --rq1-inputs and --attack-inputs must be positive")

    from idcgen.analysis import analyze
    from idcgen.framework import Network

    x_train, y_train = udacity("train", args.limit)
    x_test, y_test = udacity("test", args.limit)
    labels = label_check(np.concatenate([y_train, y_test]))
    print(
        f"labels: lag-1 autocorrelation {labels['lag1_autocorrelation']}, excess kurtosis "
        f"{labels['excess_kurtosis']}, range [{labels['min']}, {labels['max']}]: {labels['verdict']}"
    )
    specs = pixel_specs(args.pixels, x_test.shape[1:])
    rng = np.random.default_rng(args.random_state)
    rq1, rq2, rq3 = [], [], []
    with Timer() as t:
        for name in args.models:
            network = Network(load_model(name, "udacity"))
            with Timer() as ta:
                analysis = analyze(
                    network,
                    x_train,
                    y_train,
                    layer=args.layer,
                    m=args.m,
                    random_state=args.random_state,
                    progress=False,
                )
            print(
                f"{name}: analysis of {len(x_train)} frames in {ta.seconds:.0f} s; important neurons "
                f"{analysis.neurons.tolist()} of {analysis.layer}"
            )
            n1 = min(args.rq1_inputs, len(x_test))
            runs = distances(
                network,
                analysis.layer,
                analysis.neurons,
                x_test[:n1],
                y_test[:n1],
                repetitions=args.repetitions,
                rng=rng,
                specs=specs,
            )
            rq1.append(summary_row(name, analysis.layer, args.m, runs))
            rq2.append(rq2_row(name, analysis, x_test, y_test, specs, args.repetitions))
            rq3 += rq3_rows(
                name,
                analysis,
                x_train,
                y_train,
                x_test,
                y_test,
                min(args.attack_inputs, len(x_test)),
                args.criteria,
                args.random_state,
            )
    folder = OUTPUTS / RECIPE
    common = (
        f"{len(x_train)} training frames analysed, {len(x_test)} test frames (Udacity, split by time); "
        f"labels: lag-1 autocorrelation {labels['lag1_autocorrelation']} ({labels['verdict']}). {t.seconds:.0f} s."
    )
    write_table(
        folder,
        "rq1",
        rq1,
        command=command_line(),
        title="RQ1 on Udacity: L2 distance of the important vs "
        f"random neurons under noise on {args.pixels} relevant pixels",
        notes=common,
    )
    write_table(
        folder,
        "rq2",
        rq2,
        command=command_line(),
        title=f"RQ2 on Udacity: IDC on U_O, U_O+S, U_O+DI ({args.pixels} pixels)",
        notes=common + f" Mean ± std over {args.repetitions} draws.",
    )
    write_table(
        folder,
        "rq3",
        rq3,
        command=command_line(),
        title="RQ3 on Udacity: coverage (%) of U_O plus noise and adversarial frames",
        notes=common + f" The attacked sets add copies of the first "
        f"{min(args.attack_inputs, len(x_test))} test frames.",
    )
    for rows in (rq1, rq2, rq3):
        for row in rows:
            print(row)
    return rq1, rq2, rq3


if __name__ == "__main__":
    main()
