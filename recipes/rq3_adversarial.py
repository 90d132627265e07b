"""RQ3/RQ4 (paper Table 4): IDC and the other criteria on U_O plus noise and adversarial inputs.

    python recipes/rq3_adversarial.py [--models lenet5] [--m 6 8] [--attack-inputs 1000] [--full]
                                      [--train-limit N] [--criteria nc,kmnc,nbc,snac,tknc,lsc,dsc]
    python recipes/rq3_adversarial.py --dataset cifar10 [--models cifar10_cnn]   # the paper's CIFAR-10 network

U_O is the whole test set; each other set adds perturbed copies of the first ``--attack-inputs`` test
inputs (default 1,000; ``--full`` uses all 10,000, which takes hours for JSMA): Gaussian noise
(std 0.3), FGSM (eps 0.3), BIM (eps 0.3, step 0.05, 10 iterations), JSMA (theta 1, gamma 1) and
C&W-L2 (100 iterations at lr 0.1 instead of the paper's 1,000 at 5e-3: as successful, ten times
cheaper). The paper's finding: adversarial sets raise IDC more than Gaussian noise. The same parameters
serve CIFAR-10 (inputs in [0, 1] there too); its network costs about 100 times LeNet-5's per input, so
the CIFAR-10 defaults (CIFAR10_DEFAULTS) attack 500 inputs, leave out JSMA (ART's JSMA took 26 s per
CIFAR-10 image on 2 shared cores, against 0.75 s for C&W; add it with ``--sets``) and analyse 10,000
of the 50,000 training inputs. Writes ``outputs/rq3_adversarial/`` (``coverage.md`` on MNIST, ``coverage_<dataset>.md``
otherwise).
"""

from __future__ import annotations

import argparse

import numpy as np

from kit import DATASETS, OUTPUTS, Timer, command_line, load_data, load_model, models_for, write_table
from kit.sets import PERTURBATIONS, perturbed

SETS = ("U_O", "U_O+noise", "U_O+FGSM", "U_O+BIM", "U_O+JSMA", "U_O+CW")
PAPER_LENET5_M6 = {"U_O": 47.0, "U_O+noise": 48.1, "U_O+FGSM": 51.6, "U_O+BIM": 51.6, "U_O+JSMA": 49.8, "U_O+CW": 49.8}
#: --dataset cifar10 defaults, sized to finish in about half an hour on 2 cores
CIFAR10_DEFAULTS = {
    "models": ["cifar10_cnn"],
    "attack_inputs": 500,
    "train_limit": 10_000,
    "sets": ["U_O+noise", "U_O+FGSM", "U_O+BIM", "U_O+CW"],
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", nargs="+", default=None, help="default lenet5, or cifar10_cnn with --dataset cifar10"
    )
    parser.add_argument("--dataset", default="mnist", choices=DATASETS)
    parser.add_argument("--m", type=int, nargs="+", default=[6, 8])
    parser.add_argument(
        "--attack-inputs",
        type=int,
        default=None,
        help=f"first N test inputs perturbed (default 1000; cifar10: {CIFAR10_DEFAULTS['attack_inputs']})",
    )
    parser.add_argument(
        "--train-limit",
        type=int,
        default=None,
        help=f"first N training inputs analysed (default all; cifar10: {CIFAR10_DEFAULTS['train_limit']})",
    )
    parser.add_argument("--full", action="store_true", help="perturb all test inputs")
    parser.add_argument(
        "--sets", nargs="+", default=None, choices=SETS[1:], help="default: all (cifar10: all but U_O+JSMA)"
    )
    parser.add_argument("--criteria", default="nc,kmnc,nbc,snac,tknc,lsc,dsc", help="other criteria ('' for none)")
    parser.add_argument("--random-state", type=int, default=0)
    args = parser.parse_args(argv)
    cifar = args.dataset == "cifar10"
    models = args.models or (CIFAR10_DEFAULTS["models"] if cifar else ["lenet5"])
    wrong = [m for m in models if m not in models_for(args.dataset)]
    if wrong:
        parser.error(
            f"models {', '.join(wrong)} do not fit --dataset {args.dataset}; it takes "
            f"{', '.join(models_for(args.dataset))}"
        )
    attack_inputs = args.attack_inputs or (CIFAR10_DEFAULTS["attack_inputs"] if cifar else 1000)
    train_limit = args.train_limit or (CIFAR10_DEFAULTS["train_limit"] if cifar else None)

    from idcgen.analysis import analyze
    from idcgen.framework import Network

    x_train, y_train = load_data("train", args.dataset, limit=train_limit)
    x_test, y_test = load_data("test", args.dataset)
    n_attack = len(x_test) if args.full else min(attack_inputs, len(x_test))
    rows = []
    with Timer() as t:
        for name in models:
            network = Network(load_model(name, args.dataset))
            sets, success = {"U_O": x_test}, {"U_O": ""}
            for set_name in args.sets or (CIFAR10_DEFAULTS["sets"] if cifar else SETS[1:]):
                with Timer() as ts:
                    copies = perturbed(
                        network,
                        x_test[:n_attack],
                        y_test[:n_attack],
                        PERTURBATIONS[set_name],
                        random_state=args.random_state,
                        batch=100,
                    )
                fooled = float((network.predict(copies) != y_test[:n_attack]).mean())
                success[set_name] = f"{100 * fooled:.1f} % misclassified, {ts.seconds:.0f} s"
                sets[set_name] = np.concatenate([x_test, copies])
            names = list(sets)
            for m in args.m:
                analysis = analyze(network, x_train, y_train, m=m, random_state=args.random_state, progress=False)
                row = {"model": name, "criterion": f"IDC m={m}"}
                row.update({s: round(100 * analysis.coverage(sets[s]).score, 2) for s in names})
                rows.append(row)
                if name == "lenet5" and m == 6 and args.dataset == "mnist":
                    rows.append(
                        {
                            "model": "paper LeNet-5",
                            "criterion": "IDC m=6",
                            **{s: PAPER_LENET5_M6.get(s, "") for s in names},
                        }
                    )
            if args.criteria:
                from idcgen.criteria import make_criterion, parse_criteria

                for crit in [c for c in parse_criteria(args.criteria) if c != "idc"]:
                    criterion = make_criterion(crit).fit(network, x_train, y_train)
                    row = {"model": name, "criterion": crit.upper()}
                    row.update({s: round(100 * criterion.coverage(network, sets[s]).score, 2) for s in names})
                    rows.append(row)
            rows.append({"model": name, "criterion": "attack success", **success})
    suffix = "" if args.dataset == "mnist" else "_" + args.dataset.replace("-", "_")
    write_table(
        OUTPUTS / "rq3_adversarial",
        f"coverage{suffix}",
        rows,
        title=f"RQ3/RQ4: coverage (%) of U_O plus noise and adversarial inputs ({args.dataset})",
        command=command_line(),
        notes=f"U_O = {len(x_test)} test inputs; each other set adds perturbed copies of the first "
        f"{n_attack}; analyses of {len(x_train)} training inputs. {t.seconds:.0f} s.",
    )


if __name__ == "__main__":
    main()
