"""The hardening study (issue 47): does fine-tuning on IDC-kept inputs make a model more robust than as many
inputs from the same seeds made any other way?

    python recipes/hardening_study.py [--dataset mnist] [--copies 5] [--seeds 500] [--budget 10000] [--dose 300]
                                      [--test 1000] [--severities 1 2 3 4 5] [--epochs 3] [--out DIR]
                                      [--summary-only]

Declared before the runs in docs/design.md, "The hardening study (declared before the runs)". Per subject copy
(the unit): an IDC-guided campaign, an unguided one (``--guide none``, same seeds, budget and random state) and
a held-out IDC campaign on other seeds; then ``idcgen.hardening.harden`` fine-tunes the copy once per arm on
its training half plus ``dose`` inputs: the first ``dose`` the IDC campaign kept (IDC-guided; all it kept if
fewer), or as many from the same seeds (random, pgd, fgsm, augment; clean adds none), or the first as many the
unguided campaign kept (unguided-kept). Every model is measured on the same test subset, never a seed: the
corruption suite (primary: its mean), clean accuracy, PGD robust accuracy, the held-out campaign's findings.

Writes ``<out>/copy<c>.json`` as each copy finishes (a rerun skips finished copies), then ``runs.csv`` (one row
per copy and arm), ``summary.csv`` (the family: IDC-guided against each arm, paired Wilcoxon over the copies,
Holm) and ``study.md`` (the tables and verdicts).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from kit import OUTPUTS, command_line, load_data, save_json, write_csv
from kit.stats import holm, rank_biserial, wilcoxon
from kit.subjects import ARCHITECTURES, TORCH_DATASETS, load_subject, training_sets

GUIDED = "IDC-guided"
UNGUIDED = "unguided-kept"
BASELINES = ("random", "pgd", "fgsm", "augment", "clean")
#: the family: IDC-guided against each (docs/design.md)
FAMILY = (*BASELINES, UNGUIDED)
ARMS = ("original", GUIDED, *FAMILY)
PRIMARY = "corruption mean"
#: the published endpoints: (column of runs.csv, name in the tables)
ENDPOINTS = (
    (PRIMARY, "mean corruption acc."),
    ("clean", "clean acc."),
    ("PGD eps 0.1", "PGD 0.1 acc."),
    ("PGD eps 0.3", "PGD 0.3 acc."),
    ("held-out findings", "held-out findings acc."),
)


def capped(campaign, n: int) -> int:
    """Keep only the first ``n`` labelled mutants the campaign kept (in the order kept) as its training additions:
    the later ones lose their label, so ``harden`` leaves them out. Returns how many remain (n, or fewer when the
    campaign kept fewer)."""
    c = campaign.corpus
    kept = np.flatnonzero((c.parent >= 0) & (c.label >= 0))
    c.label[kept[n:]] = -1
    return int(min(n, len(kept)))


def split(n_test: int, seeds: int, test: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(campaign seeds, held-out campaign seeds, measurement set): consecutive blocks of the test set's
    permutation with seed 0, the same for every copy."""
    order = np.random.default_rng(0).permutation(n_test)
    if 2 * seeds + test > n_test:
        raise SystemExit(f"error: {2 * seeds} seeds and {test} test inputs need more than the {n_test} test inputs")
    return order[:seeds], order[seeds : 2 * seeds], order[2 * seeds : 2 * seeds + test]


class Setting:
    """What every copy shares: the data, the split, and the corruption suite (built once, when first needed)."""

    def __init__(self, args):
        (self.x_train, self.y_train), _ = training_sets(args.dataset)
        self.x_test, self.y_test = load_data("test", args.dataset)
        self.seeds, self.held, self.measure = split(len(self.x_test), args.seeds, args.test)
        self.args = args
        self.suite = None

    def corruption_suite(self, campaign):
        from idcgen.hardening import CorruptionSuite

        if self.suite is None:
            x = self.x_test[self.measure].reshape((-1,) + campaign.corpus.x.shape[1:])
            started = time.perf_counter()
            self.suite = CorruptionSuite(
                x, self.args.corruptions, self.args.severities, value_range=campaign.value_range, random_state=0
            )
            print(
                f"corruption suite: {len(self.suite.names)} corruptions x {len(self.suite.severities)} severities "
                f"on {len(x)} inputs, {time.perf_counter() - started:.0f} s",
                flush=True,
            )
        return self.suite


def run_copy(args, setting: Setting, copy: int) -> dict:
    """One copy: its three campaigns, the two ``harden`` calls, one row per arm."""
    from idcgen.analysis import analyze
    from idcgen.framework import Network
    from idcgen.fuzz.fuzzer import Fuzzer
    from idcgen.fuzz.mutators import DEFAULT_MUTATORS, parse_mutators
    from idcgen.hardening import Assessment, Retraining, harden

    started = time.perf_counter()
    s = setting
    network = Network(load_subject(args.dataset, copy))
    fit = args.fit_train
    analysis = analyze(network, s.x_train[:fit], s.y_train[:fit], m=args.m, random_state=0, progress=False)
    mutators = ",".join(m for m in DEFAULT_MUTATORS.split(",") if m != "directed")

    def campaign(guide: str, seeds: np.ndarray, state: int):
        fuzzer = Fuzzer(
            analysis, mutators=parse_mutators(mutators), guide=guide, batch_size=args.batch_size, random_state=state
        )
        return fuzzer.run(s.x_test[seeds], s.y_test[seeds], budget=args.budget, progress=False)

    guided = campaign("idc", s.seeds, 1000 * copy)
    unguided = campaign("none", s.seeds, 1000 * copy)
    held_out = campaign("idc", s.held, 1000 * copy + 1)
    kept = {GUIDED: int((guided.corpus.parent >= 0).sum()), UNGUIDED: int((unguided.corpus.parent >= 0).sum())}
    dose = capped(guided, args.dose)
    unguided_dose = capped(unguided, dose)
    suite = s.corruption_suite(guided)
    common = dict(
        retraining=Retraining(mode="finetune", epochs=args.epochs, repeats=1),
        random_state=0,
        progress=False,
        assessment=Assessment(corruptions=suite, pgd_eps=args.pgd_eps, held_out=held_out),
    )
    x_m, y_m = s.x_test[s.measure], s.y_test[s.measure]
    first = harden(network, s.x_train, s.y_train, guided, x_m, y_m, baselines=list(BASELINES), **common)
    second = harden(network, s.x_train, s.y_train, unguided, x_m, y_m, baselines=[], **common)
    rows = []
    arms = [(r["arm"], r) for r in first["rows"]] + [(UNGUIDED, r) for r in second["rows"] if r["arm"] == GUIDED]
    for arm, row in arms:
        rows.append(
            {
                "dataset": args.dataset,
                "copy": copy,
                "arm": arm,
                "dose": row["extra_inputs"],
                "campaign_kept": kept.get(arm, ""),
                **{k: v for k, v in row.items() if k not in ("arm", "extra_inputs", "seed")},
            }
        )
    return {
        "rows": rows,
        "dose": dose,
        "unguided_dose": unguided_dose,
        "kept": kept,
        "held_out_findings": int(first["held_out_findings"] or 0),
        "attack_eps": first["attack_eps"],
        "corruptions": first["corruptions"],
        "severities": first["severities"],
        "notes": first["notes"],
        "seconds": round(time.perf_counter() - started, 1),
    }


def settings_of(args) -> dict:
    keys = ("dataset", "seeds", "budget", "dose", "test", "severities", "corruptions", "epochs", "fit_train", "m")
    return {k: getattr(args, k) for k in keys} | {"batch_size": args.batch_size, "pgd_eps": args.pgd_eps}


def run_all(args, out: Path) -> list[dict]:
    """Every copy, resumed from ``out/copy<c>.json``."""
    setting, copies = None, []
    for copy in range(args.copies):
        path = out / f"copy{copy}.json"
        if path.exists():
            saved = json.loads(path.read_text())
            if saved["settings"] != settings_of(args):
                raise SystemExit(f"error: {path} was made with other settings; remove it or give another --out")
            copies.append(saved["copy"])
            continue
        if args.summary_only:
            continue
        setting = setting or Setting(args)
        found = run_copy(args, setting, copy)
        save_json(path, {"settings": settings_of(args), "copy": found})
        copies.append(found)
        print(
            f"[copy {copy + 1}/{args.copies}] dose {found['dose']} (IDC kept {found['kept'][GUIDED]}), "
            f"{found['held_out_findings']} held-out findings, {found['seconds']:.0f} s",
            flush=True,
        )
    return copies


def paired_values(runs: list[dict], arm: str, key: str) -> tuple[np.ndarray, np.ndarray]:
    """IDC-guided's and ``arm``'s values of ``key`` on the copies both ran, copy by copy."""
    by = {(r["arm"], r["copy"]): float(r[key]) for r in runs}
    copies = sorted({c for (a, c) in by if a == GUIDED} & {c for (a, c) in by if a == arm})
    return np.array([by[(GUIDED, c)] for c in copies]), np.array([by[(arm, c)] for c in copies])


def comparisons(runs: list[dict], key: str = PRIMARY) -> list[dict]:
    """IDC-guided against each arm of the family on ``key``: means, paired difference, copies ahead, r, p, Holm."""
    tests = []
    for arm in FAMILY:
        a, b = paired_values(runs, arm, key)
        if not len(a):
            continue
        tests.append(
            {
                "comparison": f"{GUIDED} vs {arm}",
                "endpoint": key,
                "copies": len(a),
                "mean IDC-guided": float(a.mean()),
                "mean other": float(b.mean()),
                "mean difference": float((a - b).mean()),
                "copies IDC ahead": int((a > b).sum()),
                "r": rank_biserial(a, b),
                "p": wilcoxon(a, b),
            }
        )
    adjusted = holm({t["comparison"]: t["p"] for t in tests})
    for t in tests:
        t["Holm p"] = adjusted[t["comparison"]]
    return tests


def shown_p(p: float) -> str:
    return "" if np.isnan(p) else f"{p:.3f}"


def verdict(t: dict) -> str:
    ahead, n = t["copies IDC ahead"], t["copies"]
    if ahead == n:
        how = f"ahead on all {n} copies (consistent; p = {shown_p(t['p'])}, the design's floor with 5 copies)"
    elif ahead == 0:
        how = f"behind on all {n} copies (consistent; p = {shown_p(t['p'])})"
    else:
        how = f"ahead on {ahead}/{n} copies (mixed; p = {shown_p(t['p'])})"
    return (
        f"{t['comparison']}: IDC-guided {how}, mean difference {100 * t['mean difference']:+.2f} points, "
        f"r = {t['r']:+.2f}, Holm p = {shown_p(t['Holm p'])}: not significant"
    )


def primary_table(tests: list[dict]) -> list[str]:
    """The published table: IDC-guided against each arm on the primary endpoint."""
    return [
        "| IDC-guided vs | copies | IDC-guided (%) | other (%) | difference (points) | copies IDC ahead | r | p | Holm p |",
        "|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {t['comparison'].split(' vs ')[1]} | {t['copies']} | {100 * t['mean IDC-guided']:.2f} | "
            f"{100 * t['mean other']:.2f} | {100 * t['mean difference']:+.2f} | {t['copies IDC ahead']}/{t['copies']}"
            f" | {t['r']:+.2f} | {shown_p(t['p'])} | {shown_p(t['Holm p'])} |"
            for t in tests
        ),
    ]


def endpoints(runs: list[dict]) -> list[tuple[str, str]]:
    """The published endpoints the runs measured (PGD at the eps given)."""
    return [(k, name) for k, name in ENDPOINTS if k in runs[0]]


def arm_table(runs: list[dict]) -> list[str]:
    """Each arm's mean (%) of every published endpoint over the copies, and its dose."""
    arms = [a for a in ARMS if any(r["arm"] == a for r in runs)]
    shown = endpoints(runs)
    lines = [
        "| arm | copies | dose | " + " | ".join(name for _, name in shown) + " |",
        "|---|---|---|" + "---|" * len(shown),
    ]
    for arm in arms:
        mine = [r for r in runs if r["arm"] == arm]
        doses = sorted({int(r["dose"]) for r in mine})
        cells = [f"{100 * np.mean([float(r[k]) for r in mine]):.2f}" for k, _ in shown]
        dose = str(doses[0]) if len(doses) == 1 else f"{doses[0]}-{doses[-1]}"
        lines.append(f"| {arm} | {len(mine)} | {dose} | " + " | ".join(cells) + " |")
    return lines


def secondary_table(runs: list[dict]) -> list[str]:
    """IDC-guided minus each arm on the secondary endpoints (points, mean over copies; copies IDC ahead)."""
    keys = endpoints(runs)[1:]
    lines = ["| IDC-guided minus | " + " | ".join(name for _, name in keys) + " |", "|---|" + "---|" * len(keys)]
    for arm in FAMILY:
        cells = []
        for key, _ in keys:
            a, b = paired_values(runs, arm, key)
            if not len(a):
                break
            cells.append(f"{100 * (a - b).mean():+.2f} ({int((a > b).sum())}/{len(a)})")
        if cells:
            lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return lines


def summarise(copies: list[dict], args, command: str, out: Path) -> list[dict]:
    runs = [row for found in copies for row in found["rows"]]
    write_csv(out / "runs.csv", runs)
    tests = comparisons(runs)
    write_csv(out / "summary.csv", tests)
    first = copies[0]
    eps = ", ".join(f"{c['attack_eps']:.3f}" for c in copies)
    lines = [
        f"# The hardening study ({args.dataset})",
        "",
        f"Command: `{command}`",
        "",
        f"{len(copies)} subject copies; per copy an IDC-guided and an unguided campaign on {args.seeds} test seeds "
        f"({args.budget} execs each) and a held-out IDC campaign on {args.seeds} other seeds. Dose per copy (inputs "
        "added to the training half): "
        + ", ".join(str(c["dose"]) for c in copies)
        + f" (declared {args.dose}); IDC campaigns kept "
        + ", ".join(str(c["kept"][GUIDED]) for c in copies)
        + f". Fine-tuning: Adam lr 1e-4, {args.epochs} epochs. Measured on {args.test} test inputs never used as "
        f"seeds: the corruption suite ({len(first['corruptions'])} corruptions x severities "
        + ", ".join(map(str, first["severities"]))
        + "; "
        + ("; ".join(first["notes"]) or "all 15")
        + f"), clean, PGD (L-inf) at eps {', '.join(f'{e:g}' for e in args.pgd_eps)}, the held-out findings ("
        + ", ".join(str(c["held_out_findings"]) for c in copies)
        + f"). pgd/fgsm L2 eps per copy: {eps}.",
        "",
        "## Primary endpoint: mean corruption accuracy, IDC-guided against each arm",
        "",
        "Paired Wilcoxon signed-rank over the copies (two-sided, exact), Holm over the six comparisons. With 5 "
        "copies the smallest possible p is 0.0625: no comparison can reach 0.05.",
        "",
        *primary_table(tests),
        "",
        "## Verdicts",
        "",
        *(f"- {verdict(t)}" for t in tests),
        "",
        "## Per arm (mean over copies, %)",
        "",
        *arm_table(runs),
        "",
        "## Secondary endpoints: IDC-guided minus each arm (points; copies IDC ahead), not tested",
        "",
        *secondary_table(runs),
    ]
    (out / "study.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return tests


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    keras = tuple(d for d in ARCHITECTURES if d not in TORCH_DATASETS)
    parser.add_argument("--dataset", default="mnist", choices=keras)
    parser.add_argument("--copies", type=int, default=5, help="subject copies (recipes/subjects.py trains them)")
    parser.add_argument("--seeds", type=int, default=500, help="seeds of each campaign (and of the held-out one)")
    parser.add_argument("--budget", type=int, default=10_000, help="execs of each campaign")
    parser.add_argument("--dose", type=int, default=None, help="inputs added; default 1 %% of the training half")
    parser.add_argument("--test", type=int, default=1000, help="test inputs every model is measured on")
    parser.add_argument("--corruptions", nargs="+", default=None, help="default: the whole suite")
    parser.add_argument("--severities", nargs="+", type=int, default=[1, 2, 3, 4, 5])
    parser.add_argument("--pgd-eps", nargs="+", type=float, default=[0.1, 0.3])
    parser.add_argument("--epochs", type=int, default=3, help="fine-tuning epochs of every arm")
    parser.add_argument("--fit-train", type=int, default=10_000, help="training inputs the IDC analysis is fitted on")
    parser.add_argument("--m", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--out", default=None, help="default outputs/hardening_study/<dataset>")
    parser.add_argument("--summary-only", action="store_true", help="summarise the copies done, run nothing")
    args = parser.parse_args(argv)
    if args.dose is None:
        args.dose = len(training_sets(args.dataset)[0][1]) // 100
    for name in ("copies", "seeds", "budget", "dose", "test", "epochs", "fit_train", "m", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    out = Path(args.out) if args.out else OUTPUTS / "hardening_study" / args.dataset
    if out.exists() and not out.is_dir():
        parser.error(f"--out {out} is a file, not a folder")
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    copies = run_all(args, out)
    if not copies:
        raise SystemExit(f"error: no finished copy in {out}")
    summarise(copies, args, command_line(), out)
    print(f"total {time.perf_counter() - started:.0f} s -> {out}")


if __name__ == "__main__":
    main()
