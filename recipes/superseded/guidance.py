"""Which criterion should guide the fuzzer? The same campaign guided by IDC, by each other criterion, and by none.

    python recipes/superseded/guidance.py [--dataset mnist|fashion|cifar10] [--seeds 500] [--budget 20000]
                                          [--repeats 3] [--guides idc nc kmnc nbc snac tknc lsc dsc none]
                                          [--out outputs/guidance/<dataset>]

Every run starts from the same seeds (``--seeds`` test inputs, as many of each class), spends the same
budget of execs with the same mutators (``--mutators``, by default idcgen's cheap default set without
``directed``, which steers towards IDC and so would not be neutral), and differs only in the guiding
criterion and the random state (repetition r uses random_state r for every guide). Every criterion is
fitted once on a fixed subset of the training data and measured in every run, whatever guides it.

Per run: findings per 1,000 execs (the misclassification oracle; a finding is kept once per IDC combination,
true label and prediction), distinct faults (idcgen.faults: the findings clustered within each (true,
predicted) pair on the model's penultimate-layer features, each cluster once), the share of findings that
reproduce from their 8-bit image (written as PNG, read back, run again: still the same wrong prediction),
unique (true, predicted) pairs, seeds with a finding, mean SSIM of findings to their root seeds, every
criterion's coverage of the grown corpus, and robustness after retraining with the kept mutants as ``idcgen
harden`` does (its retraining and perturbed test sets are reused): the model fine-tuned 1 epoch on the same
training subset plus the run's kept mutants (labelled as their root seed), then its accuracy on a fixed
held-out test set, clean, noisy, rotated, shifted and under FGSM. Each guide is compared with ``none`` by a
two-sided Mann-Whitney U test over the repetitions.

Writes ``<out>/runs/<guide>_r<r>.json`` (one per run: an interrupted study resumes where it stopped),
``runs.csv``/``runs.json`` (every run), ``guidance.csv`` and ``guidance.md`` (means, spreads and tests).

Superseded by the later versions of the study (``recipes/guidance_v4.py`` is the current one); kept to
reproduce the results docs/results.md publishes with it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

# a superseded study, moved out of recipes/ (its commands reproduce published results): kit is in the
# folder above, which `python recipes/superseded/NAME.py` does not put on sys.path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kit import DATASETS, OUTPUTS, cell, command_line, save_json
from kit.stats import mann_whitney
from kit.study import GUIDES, Study, default_mutators


def summarise(runs: list[dict], references: dict, settings: dict, command: str, out: Path) -> Path:
    """guidance.csv (one row per guide: means, standard deviations, p values) and guidance.md (three tables)."""
    import csv

    guides = list(dict.fromkeys(r["guide"] for r in runs))
    by = {g: [r for r in runs if r["guide"] == g] for g in guides}
    base = by.get("none")
    metrics = [k for k in runs[0] if k not in ("guide", "repetition")]
    rows = []
    for g in guides:
        row = {"guide": g, "runs": len(by[g])}
        for k in metrics:
            values = np.array([r.get(k, np.nan) for r in by[g]], float)
            row[k] = float(np.nanmean(values)) if not np.isnan(values).all() else float("nan")
            row[k + " std"] = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
        for k in ("findings_per_1k", "flagged_per_1k", "unique_pairs", "distinct_faults", "seeds_failed", "mean_ssim"):
            row[f"p {k} vs none"] = (
                mann_whitney([r.get(k, np.nan) for r in by[g]], [r.get(k, np.nan) for r in base])
                if base and g != "none"
                else float("nan")
            )
        rows.append(row)
    with open(out / "guidance.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

    def col(g, k, digits=1):
        return cell([r.get(k, np.nan) for r in by[g]], digits)

    def p(row, k):
        value = row[f"p {k} vs none"]
        return "" if np.isnan(value) else f"{value:.3f}"

    rs = sorted({r["repetition"] for r in runs})
    lines = [
        f"# Which criterion should guide the fuzzer? ({settings['dataset']}, {settings['model']})",
        "",
        f"Command: `{command}`",
        "",
        f"{settings['seeds']} seeds (test inputs, classes balanced), {settings['budget']} execs per run, "
        f"random states {rs}, mutators `{settings['mutators']}`, batch {settings['batch_size']}, IDC m = "
        f"{settings['m']}; criteria fitted on {settings['fit_train']} training inputs. Mean ± standard "
        "deviation over the repetitions; p: two-sided Mann-Whitney U of the runs against `none` (guidance.csv also "
        "has it for seeds with a finding and mean SSIM).",
        "",
        "## Failures",
        "",
        "| guide | findings / 1k execs | p | flagged / 1k execs | p | reproduce % | unique (true, pred) pairs | p "
        "| distinct faults | seeds with a finding | mean SSIM to seed | kept mutants | fuzz s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        g = row["guide"]
        lines.append(
            f"| {g} | {col(g, 'findings_per_1k', 2)} | {p(row, 'findings_per_1k')} | "
            f"{col(g, 'flagged_per_1k', 1)} | {p(row, 'flagged_per_1k')} | "
            f"{col(g, 'reproduce_%')} | {col(g, 'unique_pairs')} | {p(row, 'unique_pairs')} | "
            f"{col(g, 'distinct_faults')} | "
            f"{col(g, 'seeds_failed')} | {col(g, 'mean_ssim', 3)} | {col(g, 'kept', 0)} | {col(g, 'fuzz_s')} |"
        )
    covs = [k for k in runs[0] if k.startswith("cov_")]
    lines += [
        "",
        "## Coverage of the grown corpus (%)",
        "",
        "| guide | " + " | ".join(k[4:].upper() for k in covs) + " |",
        "|---|" + "---|" * len(covs),
    ]
    for g in guides:
        lines.append(f"| {g} | " + " | ".join(col(g, k) for k in covs) + " |")
    accs = [k for k in runs[0] if k.startswith("acc ")]
    lines += [
        "",
        f"## Accuracy (%) after fine-tuning with the kept mutants ({settings['eval']} held-out test inputs)",
        "",
        "| model | " + " | ".join(k[4:] for k in accs) + " |",
        "|---|" + "---|" * len(accs),
    ]
    for name, values in references.items():
        lines.append(f"| {name} | " + " | ".join(cell([v[k[4:]] for v in values], 2) for k in accs) + " |")
    for g in guides:
        lines.append(f"| + kept mutants of `{g}` | " + " | ".join(col(g, k, 2) for k in accs) + " |")
    n = min(len(v) for v in by.values())
    lines += [
        "",
        f"With {n} runs per guide, the smallest two-sided Mann-Whitney p possible is "
        f"{mann_whitney(range(n), range(n, 2 * n)):.3f}; p values are not corrected for the "
        f"{len(guides) - 1} comparisons.",
    ]
    (out / "guidance.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return out / "guidance.md"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist", choices=DATASETS + ("fashion",))
    parser.add_argument("--model", default=None, help="recipe model name (default lenet5, or cifar10_cnn)")
    parser.add_argument("--model-file", default=None, help="a .keras file instead of the recipe model")
    parser.add_argument("--seeds", type=int, default=500, help="test inputs the campaigns start from")
    parser.add_argument("--budget", type=int, default=20_000, help="execs per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per guide (random states 0..R-1)")
    parser.add_argument("--guides", nargs="+", default=list(GUIDES), choices=GUIDES)
    parser.add_argument("--mutators", default=None, help="default: the cheap default set without directed")
    parser.add_argument("--m", type=int, default=8, help="IDC's important neurons")
    parser.add_argument(
        "--fit-train",
        type=int,
        default=10_000,
        help="training inputs (a fixed random subset) to fit IDC and the criteria and to fine-tune on",
    )
    parser.add_argument("--eval", type=int, default=2_000, help="held-out test inputs for robustness")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--out", default=None, help="default outputs/guidance/<dataset>")
    args = parser.parse_args(argv)
    args.dataset = "fashion-mnist" if args.dataset == "fashion" else args.dataset
    args.model = args.model or ("cifar10_cnn" if args.dataset == "cifar10" else "lenet5")
    args.mutators = args.mutators or default_mutators()
    for name in ("seeds", "budget", "repeats", "fit_train", "eval"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    out = Path(args.out) if args.out else OUTPUTS / "guidance" / args.dataset
    (out / "runs").mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    study = Study(args)
    settings = study.settings()
    print(f"setup {time.perf_counter() - started:.0f} s: {settings}", flush=True)
    reference_file = out / "runs" / "references.json"
    if reference_file.exists() and json.loads(reference_file.read_text())["settings"] == settings:
        references = json.loads(reference_file.read_text())["references"]
    else:  # the model as it is, and fine-tuned on the training subset alone (no mutants)
        none = np.zeros((0,) + study.image_shape, np.float32), np.zeros(0, np.int64)
        references = {
            "original": [study.robustness(study.model)],
            "fine-tuned, no mutants": [study.robustness(study.retrain(*none, r)) for r in range(args.repeats)],
        }
        save_json(reference_file, {"settings": settings, "references": references})

    runs = []
    jobs = [(g, r) for r in range(args.repeats) for g in args.guides]
    for i, (guide, r) in enumerate(jobs, 1):
        path = out / "runs" / f"{guide}_r{r}.json"
        if path.exists():
            saved = json.loads(path.read_text())
            if saved["settings"] != settings:
                raise SystemExit(
                    f"error: {path} was made with other settings ({saved['settings']}); remove it or give another --out"
                )
            runs.append(saved["row"])
            print(f"[{i}/{len(jobs)}] {guide} r{r}: done before, kept", flush=True)
            continue
        row = study.run(guide, r)
        save_json(path, {"settings": settings, "row": row})
        runs.append(row)
        print(
            f"[{i}/{len(jobs)}] {guide} r{r}: {row['findings']} findings ({row['findings_per_1k']:.2f}/1k execs, "
            f"{row['reproduce_%']:.0f} % reproduce), {row['unique_pairs']} pairs, SSIM {row['mean_ssim']:.3f}, "
            f"IDC {row['cov_idc']:.1f} %, FGSM acc {row['acc FGSM (eps 0.3)']:.1f} % ({row['seconds']:.0f} s)",
            flush=True,
        )

    with open(out / "runs.csv", "w", newline="") as handle:
        import csv

        writer = csv.DictWriter(handle, fieldnames=list(runs[0]))
        writer.writeheader()
        writer.writerows(runs)
    save_json(out / "runs.json", {"settings": settings, "references": references, "runs": runs})
    summarise(runs, references, settings, command_line(), out)
    print(f"total {time.perf_counter() - started:.0f} s -> {out}")


if __name__ == "__main__":
    main()
