"""The guidance study, third version: paired runs on independently trained subject copies, every flagged mutant
counted, faults from an extractor the subjects never saw, and random-keep controls at the guides' keep rates.

    python recipes/superseded/guidance_v3.py --dataset mnist|fashion-mnist|cifar10 [--copies 5] [--states 3]
                                             [--seeds 500] [--budget 10000]
                                             [--arms idc nc none random-keep@idc random-keep@nc]
                                             [--sizes 5 10 20 40] [--out outputs/guidance_v3/<dataset>]
                                             [--summary-only]
    python recipes/superseded/guidance_v3.py --verdicts mnist fashion-mnist cifar10   (the declared family, Holm
                                             over all)

Declared before the runs (docs/results.md, "The guidance study, third version"):

- **Primary endpoint**: distinct valid faults per 1,000 model calls. A *failure* is any mutant the run's oracle
  flagged (misclassified, of a seed the subject classifies correctly), kept in the corpus or not, so no arm is
  credited only through what its own guide kept. It is *valid* when the extractor (another architecture,
  trained on the half of the training set the subject never saw: recipes/kit/subjects.py) gives it the seed's
  label. A *fault* is a cluster of valid failures (idcgen.faults: the extractor's penultimate-layer features,
  PCA to 10 dimensions, HDBSCAN within each (true, predicted) pair) with min_cluster_size 5; the valid failures
  of every run of a dataset are clustered together and a run counts the faults it reached. Model calls: a
  forward pass of one input is one call, a gradient one call (kit.study.call_cost).
- **Arms**: ``idc``, ``nc`` (neuron coverage, the guide that kept fewest mutants in the second version),
  ``none`` (every valid mutant kept) and the controls ``random-keep@idc`` and ``random-keep@nc``, which keep
  each valid mutant with probability kept / valid of the ``idc`` (``nc``) run of the same pair: as many mutants
  as the guide kept, chosen without any criterion.
- **Pairs**: a run is identified by (subject copy c, state r): copy c of the subject, a seed set of its own
  (``--seeds`` test inputs, classes balanced, drawn with seed (100, c, r): no two pairs share one) and the
  fuzzer's random state 1000 c + r. Every arm runs on every
  pair, so arms are compared pair by pair: Wilcoxon signed-rank (two-sided) with the matched-pairs
  rank-biserial correlation as its effect size (Vargha-Delaney A12, unpaired, beside it). The **declared
  family**: four comparisons per dataset, idc vs none, idc vs nc, idc vs random-keep@idc, nc vs random-keep@nc,
  Holm over all of them (twelve over MNIST, Fashion-MNIST and CIFAR-10: ``--verdicts``); each dataset's
  study.md also shows Holm over its own four. Every other figure is exploratory. The three pairs of a copy share
  its model, so pairs are independent in seeds and random state but not in the model: on how many copies the
  arm's mean over the copy's pairs is ahead is reported beside the test.
- **Sensitivity**: the primary count for each ``--sizes`` value of min_cluster_size, with faults per valid
  failure (the count discriminates only well under 0.8).

Writes ``<out>/runs/<arm>_c<c>_r<r>.json`` and ``.npz`` (the valid failures' extractor features, labels and
predictions) as each run ends (an interrupted study resumes), then ``runs.csv``, ``study.csv`` and ``study.md``.

Superseded by the later versions of the study (``recipes/guidance_v4.py`` is the current one); kept to
reproduce the results docs/results.md publishes with it.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

# a superseded study, moved out of recipes/ (its commands reproduce published results): kit is in the
# folder above, which `python recipes/superseded/NAME.py` does not put on sys.path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kit import OUTPUTS, command_line, write_csv
from kit.guidance import (
    copies_ahead,
    judged_failures,
    mean_sd,
    pair_state,
    paired,
    run_pairs,
    shown_p,
    stacked,
    study_fuzzer,
    subjects_fingerprint,
    valid_arrays,
)
from kit.stats import a12, holm, rank_biserial, wilcoxon
from kit.study import default_mutators, run_calls
from kit.subjects import ARCHITECTURES, load_subject

ARMS = ("idc", "nc", "none", "random-keep@idc", "random-keep@nc")
FAMILY = (("idc", "none"), ("idc", "nc"), ("idc", "random-keep@idc"), ("nc", "random-keep@nc"))
SHOWN = {"mnist": "MNIST", "fashion-mnist": "Fashion-MNIST", "cifar10": "CIFAR-10"}
PRIMARY_SIZE = 5
PRIMARY = "valid_faults_per_1k_calls"


class Subject:
    """One subject copy: the model, its IDC analysis and NC fitted on ``fit`` (inputs of its training half), the
    extractor."""

    def __init__(self, args, copy: int, extractor, fit: tuple[np.ndarray, np.ndarray]):
        from idcgen.analysis import analyze
        from idcgen.criteria import make_criterion
        from idcgen.framework import Network

        self.args, self.copy, self.extractor = args, copy, extractor
        self.network = Network(load_subject(args.dataset, copy))
        x_fit, y_fit = fit
        self.analysis = analyze(self.network, x_fit, y_fit, m=args.m, random_state=0, progress=False)
        self.nc = make_criterion("nc").fit(self.network, x_fit)

    def run(self, arm: str, r: int, seeds: tuple, keep_rate: float | None) -> tuple[dict, dict]:
        """One run of ``arm`` on pair (this copy, state ``r``) from its ``seeds``."""
        from idcgen.fuzz.mutators import parse_mutators

        started = time.perf_counter()
        guide = "none" if arm.startswith("random-keep") else arm
        fuzzer = study_fuzzer(
            self.analysis,
            keep_rate=keep_rate,
            mutators=parse_mutators(self.args.mutators),
            guide=guide,
            measure=[self.nc],
            batch_size=self.args.batch_size,
            random_state=pair_state(self.copy, r),
        )
        campaign = fuzzer.run(*seeds, budget=self.args.budget, progress=False)
        calls = run_calls(campaign)
        judged = judged_failures(fuzzer, self.extractor, seeds[0].shape[1:])
        x, labels, predictions, valid = judged["x"], judged["label"], judged["prediction"], judged["valid"]
        valid_mutants = sum(s.valid for s in campaign.mutator_stats.values())
        kept = int((campaign.corpus.parent >= 0).sum())
        row = {
            "arm": arm,
            "copy": self.copy,
            "state": r,
            "execs": campaign.execs,
            "calls": calls,
            "valid_mutants": int(valid_mutants),
            "kept": kept,
            "keep_rate": kept / max(1, valid_mutants),
            "failures": len(x),
            "flagged": campaign.flagged,  # the campaign's own count of what the study recorded as failures
            "valid_failures": int(valid.sum()),
            "validity_%": 100.0 * float(valid.mean()) if len(x) else float("nan"),
            "findings": campaign.n_findings,
            "valid_pairs": len({(int(a), int(b)) for a, b in zip(labels[valid], predictions[valid])}),
            "valid_failures_per_1k_calls": 1000.0 * float(valid.sum()) / calls,
            "idc_%": 100.0 * campaign.tracker.score,
            "nc_%": 100.0 * campaign.coverage["nc"].score,
            "seconds": round(time.perf_counter() - started, 1),
        }
        arrays = valid_arrays(judged)
        return row, arrays


def run_all(args, out: Path) -> tuple[list[dict], dict]:
    """Every (copy, state, arm) run, resumed from ``out/runs`` (kit.guidance.run_pairs)."""
    settings = {k: getattr(args, k) for k in ("dataset", "seeds", "budget", "m", "fit_train", "batch_size", "mutators")}
    settings["subjects"] = subjects_fingerprint(args.dataset, args.copies)  # retrained subjects: runs made again
    return run_pairs(args, out, settings, Subject)


def count_faults(runs: list[dict], sizes: list[int], faults, column: str) -> None:
    """Each run's faults reached (``faults_<column>``) and per 1,000 calls, its failures being the next
    ``sizes[i]`` rows of what ``faults`` clustered."""
    start = 0
    for run, n in zip(runs, sizes):
        run[f"faults_{column}"] = faults.hit(np.arange(start, start + n)) if n else 0
        run[f"{PRIMARY}_{column}"] = 1000.0 * run[f"faults_{column}"] / run["calls"]
        start += n


def add_faults(runs: list[dict], arrays: dict, sizes) -> list[dict]:
    """Cluster the valid failures of every run together once per min_cluster_size; each run's faults reached
    and faults per 1,000 calls (``faults_<size>``, ``valid_faults_per_1k_calls_<size>``). Returns one row per
    size: faults, valid failures, faults per valid failure, pairs, seconds."""
    from idcgen.faults import distinct_faults

    features, labels, predictions, counts = stacked(runs, arrays)
    rows = []
    for size in sizes:
        started = time.perf_counter()
        faults = distinct_faults(features, labels, predictions, min_cluster_size=size)
        count_faults(runs, counts, faults, str(size))
        rows.append(
            {
                "min_cluster_size": size,
                "faults": faults.count,
                "valid_failures": len(labels),
                "faults_per_valid_failure": faults.count / max(1, len(labels)),
                # failures alone in their fault: many would mean the count measures volume
                "single_failure_faults_%": 100.0 * float((np.bincount(faults.fault) == 1).sum()) / max(1, len(labels)),
                "pairs": faults.pairs,
                "seconds": round(time.perf_counter() - started, 1),
                "method": faults.method,
            }
        )
        print(
            f"min_cluster_size {size}: {faults.count} faults among {len(labels)} valid failures "
            f"({rows[-1]['faults_per_valid_failure']:.3f} a failure), {rows[-1]['seconds']:.0f} s",
            flush=True,
        )
    return rows


def add_faults_per_pair(runs: list[dict], arrays: dict) -> None:
    """The primary count with the valid failures clustered within each pair (copy, state) alone, so that no
    run's count depends on another pair's failures (``faults_pair``, ``valid_faults_per_1k_calls_pair``):
    exploratory, beside the pooled clustering of the primary endpoint."""
    from idcgen.faults import distinct_faults

    for pair in sorted({(r["copy"], r["state"]) for r in runs}):
        members = [r for r in runs if (r["copy"], r["state"]) == pair]
        features, labels, predictions, counts = stacked(members, arrays)
        faults = distinct_faults(features, labels, predictions, min_cluster_size=PRIMARY_SIZE)
        count_faults(members, counts, faults, "pair")


def comparisons(runs: list[dict], key: str) -> list[dict]:
    """The declared family on ``key``: per comparison the pairs, means, median paired difference, A12, the
    Wilcoxon p and its Holm adjustment over the family (comparisons with an arm not run are left out)."""
    arms = {r["arm"] for r in runs}
    family = [(a, b) for a, b in FAMILY if a in arms and b in arms]
    tests = {}
    for a, b in family:
        x, y, pairs = paired(runs, a, b, key)
        tests[(a, b)] = (x, y, wilcoxon(x, y), copies_ahead(x, y, pairs))
    adjusted = holm({k: v[2] for k, v in tests.items()})
    return [
        {
            "comparison": f"{a} vs {b}",
            "pairs": len(x),
            "mean a": float(x.mean()) if len(x) else float("nan"),
            "mean b": float(y.mean()) if len(y) else float("nan"),
            "median difference": float(np.median(x - y)) if len(x) else float("nan"),
            "a wins": int((x > y).sum()),
            "copies a ahead": ahead,
            "paired A12": (float((x > y).sum()) + 0.5 * float((x == y).sum())) / len(x) if len(x) else float("nan"),
            "paired r": rank_biserial(x, y),
            "A12": a12(x, y) if len(x) else float("nan"),
            "p": p,
            "Holm p": adjusted[(a, b)],
        }
        for (a, b), (x, y, p, ahead) in tests.items()
    ]


def verdicts(root: Path, datasets, command: str) -> Path:
    """The declared family over every dataset studied: the four comparisons per dataset, Holm over all of them
    (twelve with MNIST, Fashion-MNIST and CIFAR-10). Reads ``<root>/<dataset>/runs.csv``; writes
    ``<root>/verdicts.md`` and ``verdicts.csv``."""
    rows = []
    for dataset in datasets:
        path = root / dataset / "runs.csv"
        if not path.exists():
            command = f"python recipes/superseded/guidance_v3.py --dataset {dataset}"
            raise SystemExit(f"error: {path} not found: run `{command}` first")
        with open(path, newline="") as handle:
            runs = [{k: v if k == "arm" else float(v) for k, v in r.items() if v != ""} for r in csv.DictReader(handle)]
        rows += [{"dataset": dataset, **t} for t in comparisons(runs, f"{PRIMARY}_{PRIMARY_SIZE}")]
    adjusted = holm({i: r["p"] for i, r in enumerate(rows)})
    for i, r in enumerate(rows):
        r["Holm p (all)"] = adjusted[i]
    write_csv(root / "verdicts.csv", rows)
    lines = [
        "# Guidance study, third version: the declared family",
        "",
        f"Command: `{command}`",
        "",
        f"Primary endpoint: distinct valid faults per 1,000 model calls; Wilcoxon signed-rank on the pairs, Holm "
        f"over all {len(rows)} comparisons.",
        "",
        "| comparison | dataset | pairs | mean a | mean b | a wins | copies a ahead | paired A12 | paired r | p | Holm p |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['comparison']} | {SHOWN.get(r['dataset'], r['dataset'])} | {r['pairs']} | {r['mean a']:.2f} | "
            f"{r['mean b']:.2f} | "
            f"{r['a wins']}/{r['pairs']} | {r['copies a ahead']} | {r['paired A12']:.2f} | {r['paired r']:+.2f} | "
            f"{shown_p(r['p'])} | "
            f"{shown_p(r['Holm p (all)'])} |"
        )
    (root / "verdicts.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return root / "verdicts.md"


EXPLORATORY = (
    ("calls", "calls", 0),
    ("kept", "kept", 0),
    ("idc_%", "IDC %", 1),
    ("nc_%", "NC %", 1),
    ("failures", "failures", 0),
    ("valid_failures", "valid failures", 0),
    ("validity_%", "validity %", 1),
    ("valid_failures_per_1k_calls", "valid failures / 1k calls", 2),
    ("findings", "findings (unique per IDC combination)", 0),
    ("valid_pairs", "valid (true, predicted) pairs", 1),
)


def summarise(runs, sensitivity, args, command: str, out: Path) -> None:
    arms = [a for a in ARMS if any(r["arm"] == a for r in runs)]
    by = {a: [r for r in runs if r["arm"] == a] for a in arms}
    primary = f"{PRIMARY}_{PRIMARY_SIZE}"
    tests = comparisons(runs, primary)
    write_csv(out / "runs.csv", runs)
    summary = []
    for a in arms:
        row = {"arm": a, "runs": len(by[a])}
        for key in [primary] + [k for k, _, _ in EXPLORATORY]:
            v = np.asarray([r[key] for r in by[a]], float)
            row[key], row[key + " sd"] = float(np.nanmean(v)), float(np.nanstd(v, ddof=1)) if len(v) > 1 else 0.0
        summary.append(row)
    write_csv(out / "study.csv", summary + [{"arm": "", **t} for t in tests] + [{"arm": "", **s} for s in sensitivity])
    pairs = sorted({(r["copy"], r["state"]) for r in runs})
    lines = [
        f"# Guidance study, third version ({args.dataset})",
        "",
        f"Command: `{command}`",
        "",
        f"{len(pairs)} pairs (subject copy, state), {args.seeds} seeds and {args.budget} execs per run. "
        f"Primary endpoint: distinct valid faults per 1,000 model calls (min_cluster_size {PRIMARY_SIZE}), "
        "every flagged mutant counted. Wilcoxon signed-rank on the pairs, Holm over this dataset's "
        f"{len(tests)} comparisons (`--verdicts` adjusts over every dataset's: the declared family); paired r: "
        "the matched-pairs rank-biserial correlation.",
        "",
        "| comparison | pairs | mean a | mean b | median difference | a wins | copies a ahead | paired A12 | paired r "
        "| A12 (unpaired) | p | Holm p |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in tests:
        lines.append(
            f"| {t['comparison']} | {t['pairs']} | {t['mean a']:.2f} | {t['mean b']:.2f} | "
            f"{t['median difference']:+.2f} | {t['a wins']}/{t['pairs']} | {t['copies a ahead']} | "
            f"{t['paired A12']:.2f} | {t['paired r']:+.2f} | {t['A12']:.2f} | "
            f"{shown_p(t['p'])} | "
            f"{shown_p(t['Holm p'])} |"
        )
    lines += [
        "",
        "## Per arm (mean ± sd over the runs; exploratory except the first column)",
        "",
        "| arm | runs | valid faults / 1k calls | " + " | ".join(name for _, name, _ in EXPLORATORY) + " |",
        "|---|---|---|" + "---|" * len(EXPLORATORY),
    ]
    for a in arms:
        cells = [mean_sd([r[primary] for r in by[a]], 2)]
        cells += [mean_sd([r[k] for r in by[a]], d) for k, _, d in EXPLORATORY]
        lines.append(f"| {a} | {len(by[a])} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Sensitivity to the clustering's size parameter (exploratory)",
        "",
        "| min_cluster_size | faults | valid failures | faults per valid failure | failures alone in a fault % | "
        + " | ".join(f"{a} / 1k calls" for a in arms)
        + " | "
        + " | ".join(f"{t['comparison']} A12, p" for t in tests)
        + " |",
        "|---|---|---|---|---|" + "---|" * (len(arms) + len(tests)),
    ]
    for s in sensitivity:
        size = s["min_cluster_size"]
        key = f"{PRIMARY}_{size}"
        cells = [f"{np.mean([r[key] for r in by[a]]):.2f}" for a in arms]
        cells += [f"{t['A12']:.2f}, {shown_p(t['p'])}" for t in comparisons(runs, key)]
        lines.append(
            f"| {size} | {s['faults']} | {s['valid_failures']} | {s['faults_per_valid_failure']:.3f} | "
            f"{s['single_failure_faults_%']:.2f} | " + " | ".join(cells) + " |"
        )
    per_pair = comparisons(runs, f"{PRIMARY}_pair")
    lines += [
        "",
        f"## Faults clustered within each pair alone (exploratory; min_cluster_size {PRIMARY_SIZE})",
        "",
        "| arm | valid faults / 1k calls |",
        "|---|---|",
        *(f"| {a} | {mean_sd([r[f'{PRIMARY}_pair'] for r in by[a]], 2)} |" for a in arms),
        "",
        "| comparison | a wins | paired r | p | Holm p |",
        "|---|---|---|---|---|",
        *(
            f"| {t['comparison']} | {t['a wins']}/{t['pairs']} | {t['paired r']:+.2f} | {shown_p(t['p'])} | "
            f"{shown_p(t['Holm p'])} |"
            for t in per_pair
        ),
    ]
    (out / "study.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist", choices=tuple(ARCHITECTURES) + ("fashion",))
    parser.add_argument("--copies", type=int, default=5, help="subject copies (recipes/subjects.py trains them)")
    parser.add_argument("--states", type=int, default=3, help="seed sets and random states per copy")
    parser.add_argument("--seeds", type=int, default=500)
    parser.add_argument("--budget", type=int, default=10_000, help="execs of each run")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    parser.add_argument("--sizes", nargs="+", type=int, default=[5, 10, 20, 40], help="min_cluster_size values")
    parser.add_argument("--m", type=int, default=8)
    parser.add_argument("--fit-train", type=int, default=10_000, help="training inputs for IDC and NC")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--out", default=None)
    parser.add_argument("--summary-only", action="store_true", help="summarise the runs done, run nothing")
    parser.add_argument(
        "--verdicts",
        nargs="+",
        default=None,
        metavar="DATASET",
        help="run nothing: the declared family over these datasets' runs.csv, Holm over all of them",
    )
    args = parser.parse_args(argv)
    args.dataset = "fashion-mnist" if args.dataset == "fashion" else args.dataset
    if args.verdicts:  # --out, if given, is the folder holding one folder per dataset
        named = ["fashion-mnist" if d == "fashion" else d for d in args.verdicts]
        return verdicts(Path(args.out) if args.out else OUTPUTS / "guidance_v3", named, command_line())
    args.arms = [a for a in ARMS if a in args.arms]
    args.mutators = default_mutators()
    for name in ("copies", "states", "seeds", "budget", "m", "fit_train", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if PRIMARY_SIZE not in args.sizes or min(args.sizes) < 2:
        parser.error(f"--sizes must include the primary {PRIMARY_SIZE}, and every size be at least 2")
    out = Path(args.out) if args.out else OUTPUTS / "guidance_v3" / args.dataset
    if out.exists() and not out.is_dir():
        parser.error(f"--out {out} is a file; give a folder (it holds runs/ and the summary)")
    (out / "runs").mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    runs, arrays = run_all(args, out)
    if not runs:
        raise SystemExit(f"error: no runs in {out / 'runs'}")
    sensitivity = add_faults(runs, arrays, sorted(set(args.sizes)))
    add_faults_per_pair(runs, arrays)
    summarise(runs, sensitivity, args, command_line(), out)
    print(f"total {time.perf_counter() - started:.0f} s -> {out}")


if __name__ == "__main__":
    main()
