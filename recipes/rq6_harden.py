"""RQ6 (project page): does retraining with inputs that raise IDC make the model more robust?

    python recipes/rq6_harden.py [--model lenet5] [--seeds 500] [--budget 10000] [--m 8] [--repeats 3]

Grows a test set with ``idcgen fuzz`` from the first ``--seeds`` MNIST test inputs (the analysis on the
training set), then runs ``idcgen harden``: fine-tunes the model on the training data plus the kept
mutants, and, as the control, on the training data plus as many random perturbations of the same
seeds, and measures accuracy on the REST of the test set (never used as seeds), clean and perturbed.
Writes ``outputs/rq6_harden/`` (the campaign, ``harden.{md,csv,png}``).
"""

from __future__ import annotations

import argparse
import shutil

from kit import DATASETS, OUTPUTS, Timer, command_line, load_data, load_model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="lenet5")
    parser.add_argument("--dataset", default="mnist", choices=DATASETS)
    parser.add_argument("--seeds", type=int, default=500, help="first N test inputs are the seeds")
    parser.add_argument("--budget", type=int, default=10_000)
    parser.add_argument("--m", type=int, default=8)
    parser.add_argument("--mode", default="finetune", choices=["finetune", "scratch"])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit-train", type=int, default=None, help="use the first N training inputs")
    parser.add_argument("--random-state", type=int, default=0)
    args = parser.parse_args(argv)

    from idcgen.analysis import analyze
    from idcgen.framework import Network
    from idcgen.fuzz.fuzzer import Fuzzer
    from idcgen.fuzz.mutators import DEFAULT_MUTATORS, parse_mutators
    from idcgen.fuzz.settings import Sources
    from idcgen.hardening import Retraining, format_table, harden

    out = OUTPUTS / "rq6_harden"
    model = load_model(args.model, args.dataset)
    network = Network(model)
    x_train, y_train = load_data("train", args.dataset)
    if args.limit_train:
        x_train, y_train = x_train[: args.limit_train], y_train[: args.limit_train]
    x_test, y_test = load_data("test", args.dataset)
    rng_order = __import__("numpy").random.default_rng(args.random_state).permutation(len(x_test))
    seeds, rest = rng_order[: args.seeds], rng_order[args.seeds :]  # seeds never used for evaluation
    with Timer() as t:
        analysis = analyze(network, x_train, y_train, m=args.m, random_state=args.random_state)
        fuzzer = Fuzzer(analysis, mutators=parse_mutators(DEFAULT_MUTATORS), random_state=args.random_state)
        if (out / "campaign").exists():
            shutil.rmtree(out / "campaign")
        campaign = fuzzer.start(
            x_test[seeds],
            y_test[seeds],
            out / "campaign",
            budget=args.budget,
            sources=Sources(model=args.model, seeds=f"{args.dataset} test, {args.seeds} random"),
        )
        fuzzer.run(campaign)
        print(
            f"campaign: IDC {campaign.stats_rows()[0]['idc']:.1%} -> {campaign.tracker.score:.1%}, "
            f"{int((campaign.corpus.parent >= 0).sum())} kept mutants, {campaign.n_findings} findings"
        )
        summary = harden(
            model,
            x_train,
            y_train,
            campaign,
            x_test[rest],
            y_test[rest],
            retraining=Retraining(mode=args.mode, epochs=args.epochs, repeats=args.repeats),
            baselines=["one-step"],  # RQ6's control: one mutation of each root seed (the hardening study has the rest)
            random_state=args.random_state,
            out=out,
        )
    md = (out / "harden.md").read_text()
    (out / "harden.md").write_text(md.replace("\n\n", f"\n\nCommand: `{command_line()}` ({t.seconds:.0f} s)\n\n", 1))
    print(format_table(summary))


if __name__ == "__main__":
    main()
