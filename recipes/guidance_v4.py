"""The guidance study, fourth version: does a guide beat keeping nothing, at equal failure volume?

    python recipes/guidance_v4.py --dataset mnist|fashion-mnist|cifar10 [--copies 5] [--states 3] [--seeds 500]
                                  [--budget 10000] [--arms keep-none none idc@m4 ...] [--out DIR] [--summary-only]
    python recipes/guidance_v4.py --verdicts mnist fashion-mnist cifar10  (the declared family, Holm over all)
    python recipes/guidance_v4.py --dataset mnist --extension          (the added arms, the reference pool)
    python recipes/guidance_v4.py --dataset mnist --matched            (the timing-matched controls)

Declared before the runs in docs/design.md, "The guidance study, fourth version". The third version's pairs
(subject copy, state), seed sets, random states, mutators, budget, failures, validity and faults; new:

- **Arms**: ``keep-none`` (mutants never enter the corpus: the seeds alone are fuzzed), ``none`` (every valid
  mutant kept), ``idc@m4`` and ``idc@m8``, their random-keep controls at the IDC run's keep rate, ``nc``, and
  ``nlc`` where idcgen has that criterion.
- **Primary endpoint**: distinct valid faults *rarefied* to the smallest number of valid failures n among the
  arms of the pair: the exact expected number of distinct faults in a random subsample of n (Hurlbert), so
  that volume no longer decides. The faults are HDBSCAN's at min_cluster_size 5 over all runs of a dataset.
- **Family**: six comparisons a dataset (FAMILY), Wilcoxon signed-rank over the pairs, Holm over every
  dataset's (``--verdicts``).

Writes ``<out>/runs/<arm>_c<c>_r<r>.json`` and ``.npz`` as each run ends (an interrupted study resumes), then
``runs.csv`` (one row per run), ``assignments.npz`` (each run's valid failures' fault ids) and ``study.md``.

``--extension`` (docs/design.md, "The fourth version extended"): the seven ADDED arms besides, ten held-out
unguided runs (``<out>/reference``) whose failures, clustered once, are the reference faults, and every run's
faults against them at pairwise equal volume (ADDED_FAMILY), with DBCV, a min_cluster_size sweep and a contact
sheet, in ``<out>/extension``. The pooled endpoint above stays the eight arms'; ``--verdicts`` then also writes
the grown family (Holm over the published and the added comparisons).

``--matched`` (docs/design.md, "The timing-matched control"): the MATCHED controls, which keep IDC's count at
IDC's moments drawn blind, against their IDC arms on the extension's endpoint (MATCHED_FAMILY), in
``<out>/matched``; ``--verdicts`` then also writes their family (Holm over every dataset's).
"""

from __future__ import annotations

import argparse
import csv
import time
from math import comb
from pathlib import Path

import numpy as np

from kit import OUTPUTS, command_line, write_csv
from kit.guidance import (
    copies_ahead,
    copies_to_run,
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
from kit.stats import holm, rank_biserial, wilcoxon
from kit.study import default_mutators, run_calls
from kit.subjects import ARCHITECTURES, load_subject

ARMS = ("keep-none", "none", "idc@m4", "idc@m8", "random-keep@idc@m4", "random-keep@idc@m8", "nc", "nlc")
#: the extension's arms (docs/design.md, "The fourth version extended"); a control after its IDC arm
ADDED = (
    "idc@m6",
    "idc@m12",
    "random-keep@idc@m6",
    "random-keep@idc@m12",
    "idc-energy@m8",
    "idc+directed@m8",
    "idc-per-class@m8",
)
#: the timing-matched controls and their family (docs/design.md, "The timing-matched control")
MATCHED = ("matched-keep@idc@m8", "matched-keep@idc@m12")
MATCHED_FAMILY = (("idc@m8", "matched-keep@idc@m8"), ("idc@m12", "matched-keep@idc@m12"))
FAMILY = (
    ("idc@m8", "keep-none"),
    ("idc@m4", "keep-none"),
    ("idc@m8", "random-keep@idc@m8"),
    ("none", "keep-none"),
    ("nc", "keep-none"),
    ("nlc", "keep-none"),
)
ADDED_FAMILY = (
    ("idc@m6", "keep-none"),
    ("idc@m12", "keep-none"),
    ("idc@m6", "random-keep@idc@m6"),
    ("idc@m12", "random-keep@idc@m12"),
    ("idc-energy@m8", "none"),
    ("idc+directed@m8", "idc@m8"),
    ("idc-per-class@m8", "keep-none"),
)
ENERGY = 10.0  # the energy scheduler's factor for entries first to reach their combination (declared, not tuned)
REFERENCE_STATES = (3, 4)  # the reference pool's held-out states
SWEEP = (3, 5, 10, 20)  # min_cluster_size of the reference clustering, exploratory
SHOWN = {"mnist": "MNIST", "fashion-mnist": "Fashion-MNIST", "cifar10": "CIFAR-10", "embedded-mnist": "embedded"}
MIN_CLUSTER_SIZE = 5
PRIMARY = "rarefied_faults"


def rarefied(fault_ids: np.ndarray, n: int) -> float:
    """The expected number of distinct faults among n of ``fault_ids`` drawn without replacement (Hurlbert's
    rarefaction): sum over faults f of 1 - C(N - N_f, n) / C(N, n). Exact, in integers until the division."""
    total = len(fault_ids)
    if n <= 0 or total == 0:
        return 0.0
    if n > total:
        raise ValueError(f"cannot rarefy {total} failures to {n}")
    counts = np.unique(fault_ids, return_counts=True)[1]
    return float(sum(1 - comb(total - int(c), n) / comb(total, n) for c in counts))


def guide_of(arm: str) -> tuple[str, int | None]:
    """(the Fuzzer's guide, the m of the analysis it runs on or None) of an arm; controls and the energy
    scheduler (which keeps every valid mutant) run unguided."""
    if arm.startswith(("random-keep@", "matched-keep@", "idc-energy@")) or arm == "keep-none":
        return "none", int(arm.rsplit("@m", 1)[1]) if "@m" in arm else None
    if arm.startswith("idc"):
        return "idc", int(arm.rsplit("@m", 1)[1])
    return arm, None


class Subject:
    """One subject copy: the model, its IDC analyses (one per m an arm needs) and NC (and NLC) fitted on the
    training half it saw, and the extractor."""

    def __init__(self, args, copy: int, extractor, fit: tuple[np.ndarray, np.ndarray]):
        from idcgen.framework import Network

        self.args, self.copy, self.extractor, self.fit = args, copy, extractor, fit
        self.network = Network(load_subject(args.dataset, copy))
        self.analyses: dict[int, object] = {}
        self.class_analyses: dict[int, dict] = {}
        self.criteria: dict[str, object] = {}

    def analysis(self, m: int):
        from idcgen.analysis import analyze

        if m not in self.analyses:
            self.analyses[m] = analyze(self.network, *self.fit, m=m, random_state=0, progress=False)
        return self.analyses[m]

    def per_class(self, m: int) -> dict:
        """One analysis per class over that class's fit inputs (the paper's per-class IDC), at ``m``."""
        from idcgen.analysis import RelevanceSettings, analyze

        if m not in self.class_analyses:
            x, y = self.fit
            self.class_analyses[m] = {
                int(k): analyze(
                    self.network,
                    x,
                    y,
                    m=m,
                    relevance=RelevanceSettings(only_class=int(k)),
                    random_state=0,
                    progress=False,
                )
                for k in np.unique(y)
            }
        return self.class_analyses[m]

    def criterion(self, name: str):
        from idcgen.criteria import make_criterion

        if name not in self.criteria:
            self.criteria[name] = make_criterion(name).fit(self.network, self.fit[0])
        return self.criteria[name]

    def run(self, arm: str, r: int, seeds: tuple, keep_rate: float | None, images: bool = False) -> tuple[dict, dict]:
        """One run of ``arm`` on pair (this copy, state ``r``) from its ``seeds`` (``images``: the valid failures'
        inputs saved too, for the reference pool's contact sheet)."""
        from idcgen.fuzz.mutators import parse_mutators

        started = time.perf_counter()
        guide, m = guide_of(arm)
        measures = [self.criterion("nc")] + ([self.criterion(guide)] if guide not in ("idc", "none", "nc") else [])
        fuzzer = study_fuzzer(
            self.analysis(m or 8),
            keep_rate=0.0 if arm == "keep-none" else keep_rate,
            energy=ENERGY if arm.startswith("idc-energy@") else None,
            per_class=self.per_class(m) if arm.startswith("idc-per-class@") else None,
            matched=arm.startswith("matched-keep@"),
            mutators=parse_mutators(self.args.mutators + (",directed" if "+directed@" in arm else "")),
            guide=guide,
            measure=measures,
            batch_size=self.args.batch_size,
            random_state=pair_state(self.copy, r),
        )
        campaign = fuzzer.run(*seeds, budget=self.args.budget, progress=False)
        calls = run_calls(campaign)
        judged = judged_failures(fuzzer, self.extractor, seeds[0].shape[1:])
        x, valid = judged["x"], judged["valid"]
        valid_mutants = int(sum(s.valid for s in campaign.mutator_stats.values()))
        kept = int((campaign.corpus.parent >= 0).sum())
        row = {
            "arm": arm,
            "copy": self.copy,
            "state": r,
            "execs": campaign.execs,
            "calls": calls,
            "valid_mutants": valid_mutants,
            "kept": kept,
            "keep_rate": kept / max(1, valid_mutants),
            "failures": len(x),
            "valid_failures": int(valid.sum()),
            "valid_failures_per_1k_calls": 1000.0 * float(valid.sum()) / calls,
            "idc_%": 100.0 * campaign.tracker.score,
            "nc_%": 100.0 * campaign.coverage["nc"].score,
            "seconds": round(time.perf_counter() - started, 1),
        }
        arrays = valid_arrays(judged)
        if images:
            arrays["x"] = x[valid].astype(np.float16)
        return row, arrays


def available(arms) -> list[str]:
    """The arms idcgen can run: ``nlc`` only where the criterion is registered."""
    from idcgen.criteria import CRITERIA

    return [a for a in arms if a != "nlc" or "nlc" in CRITERIA]


def run_all(args, out: Path) -> tuple[list[dict], dict]:
    """Every (copy, state, arm) run, resumed from ``out/runs`` (kit.guidance.run_pairs); a random-keep control
    runs after its IDC run (ARMS' order)."""
    return run_pairs(args, out, run_settings(args), Subject)


def run_settings(args) -> dict:
    """What a saved run must have been made with to be reused."""
    settings = {k: getattr(args, k) for k in ("dataset", "seeds", "budget", "fit_train", "batch_size", "mutators")}
    settings["subjects"] = subjects_fingerprint(args.dataset, args.copies)  # retrained subjects: runs made again
    return settings


def reference_runs(args, out: Path, settings: dict) -> tuple[list[dict], dict]:
    """The reference pool's runs: ``none`` on every copy at REFERENCE_STATES, each from ``args.seeds`` test
    inputs drawn stratified (seed (100, c, r)) among those in none of the copy's study seed sets; saved in
    ``out/reference`` with the failures' images (resumed as the study's runs are)."""
    from idcgen.framework import Network
    from kit.data import load_data
    from kit.study import load_run, save_run, stratified
    from kit.subjects import training_sets

    runs, arrays, extractor, fit, test = [], {}, None, None, None
    for c in copies_to_run(args):
        subject = None
        for r in REFERENCE_STATES:
            path = out / "reference" / f"none_c{c}_r{r}.json"
            if path.exists():
                row, arrays[("none", c, r)] = load_run(path, settings)
            else:
                if subject is None:
                    extractor = extractor or Network(load_subject(args.dataset, None))
                    if fit is None:
                        (x_a, y_a), _ = training_sets(args.dataset)
                        fit = x_a[: args.fit_train], y_a[: args.fit_train]
                    subject = Subject(args, c, extractor, fit)
                x_test, y_test = test = test or load_data("test", args.dataset)
                study = [stratified(y_test, args.seeds, np.random.default_rng([100, c, s])) for s in range(args.states)]
                pool = np.setdiff1d(np.arange(len(y_test)), np.concatenate(study))
                seeds = pool[stratified(y_test[pool], args.seeds, np.random.default_rng([100, c, r]))]
                row, arrays[("none", c, r)] = subject.run("none", r, (x_test[seeds], y_test[seeds]), None, images=True)
                path.parent.mkdir(parents=True, exist_ok=True)
                save_run(path, settings, row, arrays[("none", c, r)])
                print(
                    f"[reference] c{c} r{r}: {row['valid_failures']} valid failures, {row['seconds']:.0f} s", flush=True
                )
            runs.append(row)
    return runs, arrays


def against_reference(runs: list[dict], arrays: dict, pool) -> tuple[list[dict], dict[str, np.ndarray]]:
    """Every run's fault ids against the reference pool (kit.reference.ReferencePool.run_faults) and its row:
    the counts, reference faults hit, new failures and new faults."""
    rows, assignments = [], {}
    for run in runs:
        a = arrays[(run["arm"], run["copy"], run["state"])]
        ids = pool.run_faults(a["features"], a["label"], a["prediction"]).astype(np.int32)
        assignments[run_key(run)] = ids
        keys = ("arm", "copy", "state", "calls", "kept", "keep_rate", "valid_failures", "idc_%", "nc_%", "seconds")
        row = {k: run[k] for k in keys}
        row["reference_faults"] = int(np.unique(ids[ids < pool.count]).size)
        row["new_failures"] = int((ids >= pool.count).sum())
        row["new_faults"] = int(np.unique(ids[ids >= pool.count]).size)
        row["faults"] = int(np.unique(ids).size)
        row["faults_per_1k_calls"] = 1000.0 * row["faults"] / run["calls"]
        row["valid_failures_per_1k_calls"] = 1000.0 * run["valid_failures"] / run["calls"]
        rows.append(row)
    return rows, assignments


def pairwise(rows: list[dict], assignments: dict, family, first_new: int) -> tuple[list[dict], list[dict]]:
    """The extension endpoint on ``family``: per comparison and pair both runs rarefied to the smaller of their
    valid-failure counts (all faults, and new faults only); the tests as ``comparisons`` gives them (Holm over
    these comparisons), and one row per comparison and pair."""
    from kit.reference import rarefied_new

    arms = {r["arm"] for r in rows}
    pairs_out, tests = [], {}
    for a, b in (pair for pair in family if set(pair) <= arms):
        for copy, state in sorted({(r["copy"], r["state"]) for r in rows if r["arm"] == a}):
            ids_a, ids_b = (assignments[run_key({"arm": arm, "copy": copy, "state": state})] for arm in (a, b))
            n = min(len(ids_a), len(ids_b))
            pairs_out.append(
                {
                    "comparison": f"{a} vs {b}",
                    "copy": copy,
                    "state": state,
                    "n": n,
                    "a": rarefied(ids_a, n),
                    "b": rarefied(ids_b, n),
                    "a new": rarefied_new(ids_a, n, first_new),
                    "b new": rarefied_new(ids_b, n, first_new),
                }
            )
        mine = [p for p in pairs_out if p["comparison"] == f"{a} vs {b}"]
        x, y = np.array([p["a"] for p in mine]), np.array([p["b"] for p in mine])
        pairs = [(p["copy"], p["state"]) for p in mine]
        tests[(a, b)] = (x, y, wilcoxon(x, y), copies_ahead(x, y, pairs))
    return verdict_rows(tests), pairs_out


def extension(args, out: Path, runs: list[dict], arrays: dict, settings: dict, command: str) -> None:
    """The extension's endpoint, validation and contact sheet (docs/design.md, "The fourth version extended"):
    writes ``<out>/extension/``: runs.csv, assignments.npz, pairs.csv, comparisons.csv, sweep.csv,
    reference.csv, contact_sheet.png and study.md."""
    from kit.reference import ReferencePool, contact_sheet

    folder = out / "extension"
    folder.mkdir(exist_ok=True)
    ref_runs, ref_arrays = reference_runs(args, out, settings)
    features, labels, predictions, _ = stacked(ref_runs, ref_arrays)
    sweep, chosen = [], None
    for size in SWEEP:
        pool = ReferencePool(features, labels, predictions, min_cluster_size=size)
        index, groups = pool.dbcv()
        rows, assignments = against_reference(runs, arrays, pool)
        tests, pairs = pairwise(rows, assignments, ADDED_FAMILY, pool.count)
        sweep += [
            {"min_cluster_size": size, "reference faults": pool.count, "noise share": pool.found.noise / len(labels),
             "DBCV": index, "pairs split": groups, **{k: t[k] for k in ("comparison", "mean a", "mean b", "a wins", "p")}}
            for t in tests
        ]  # fmt: skip
        print(
            f"min_cluster_size {size}: {pool.count} reference faults, DBCV {index:.3f} over {groups} pairs", flush=True
        )
        if size == MIN_CLUSTER_SIZE:
            chosen = (pool, rows, assignments, tests, pairs)
    pool, rows, assignments, tests, pairs = chosen
    explored, explored_pairs = pairwise(rows, assignments, FAMILY, pool.count)
    write_csv(folder / "runs.csv", rows)
    np.savez_compressed(folder / "assignments.npz", **assignments)
    write_csv(folder / "pairs.csv", pairs + explored_pairs)
    family = [{"family": "added", **t} for t in tests] + [{"family": "exploratory", **t} for t in explored]
    write_csv(folder / "comparisons.csv", family)
    write_csv(folder / "sweep.csv", sweep)
    write_csv(folder / "reference.csv", ref_runs)
    images = np.concatenate([ref_arrays[(r["arm"], r["copy"], r["state"])]["x"] for r in ref_runs])
    shown = contact_sheet(folder / "contact_sheet.png", images, pool.found.fault)
    summarise_extension(folder, args, command, (rows, family, pool, len(labels), shown))


def matched(args, out: Path, runs: list[dict], arrays: dict, command: str) -> None:
    """The timing-matched controls against their IDC arms on the extension's endpoint (docs/design.md, "The
    timing-matched control"): writes ``<out>/matched/``: runs.csv, assignments.npz, pairs.csv,
    comparisons.csv (Holm over this dataset's two) and study.md."""
    from kit.reference import ReferencePool

    missing = sorted({(c, r) for c in range(args.copies) for r in range(args.states)} - {
        (x["copy"], x["state"]) for x in runs if x["arm"] == MATCHED[-1]
    })  # fmt: skip
    if missing:
        raise SystemExit(
            f"error: {len(missing)} pairs lack their runs, e.g. copy {missing[0][0]}, state {missing[0][1]}"
        )
    folder = out / "matched"
    folder.mkdir(exist_ok=True)
    ref_runs, ref_arrays = reference_runs(args, out, run_settings(args))
    features, labels, predictions, _ = stacked(ref_runs, ref_arrays)
    pool = ReferencePool(features, labels, predictions, min_cluster_size=MIN_CLUSTER_SIZE)
    rows, assignments = against_reference(runs, arrays, pool)
    tests, pairs = pairwise(rows, assignments, MATCHED_FAMILY, pool.count)
    write_csv(folder / "runs.csv", rows)
    np.savez_compressed(folder / "assignments.npz", **assignments)
    write_csv(folder / "pairs.csv", pairs)
    write_csv(folder / "comparisons.csv", tests)
    per_arm = [("kept", 0), ("valid_failures", 0), ("faults", 0), ("valid_failures_per_1k_calls", 2), ("idc_%", 1)]
    lines = [
        f"# Guidance study, fourth version: the timing-matched controls ({args.dataset})",
        "",
        f"Command: `{command}`",
        "",
        f"Reference pool: {len(labels)} valid failures of {len(ref_runs)} reference runs, {pool.count} reference "
        f"faults (min_cluster_size {MIN_CLUSTER_SIZE}). Endpoint as the extension's; Holm here over this "
        "dataset's two (`--verdicts`: over every dataset's).",
        "",
        "| comparison | pairs | mean a | mean b | a wins | copies a ahead | paired r | p | Holm p |",
        "|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {t['comparison']} | {t['pairs']} | {t['mean a']:.2f} | {t['mean b']:.2f} | {t['a wins']}/{t['pairs']} "
            f"| {t['copies a ahead']} | {t['paired r']:+.2f} | {shown_p(t['p'])} | {shown_p(t['Holm p'])} |"
            for t in tests
        ),
        "",
        "| arm | " + " | ".join(k for k, _ in per_arm) + " |",
        "|---|" + "---|" * len(per_arm),
    ]
    for arm in args.arms:
        mine = [r for r in rows if r["arm"] == arm]
        cells = [f"{np.mean([r[k] for r in mine]):,.{d}f} ± {np.std([r[k] for r in mine]):,.{d}f}" for k, d in per_arm]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    (folder / "study.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def summarise_extension(folder: Path, args, command: str, found: tuple) -> None:
    rows, family, pool, pooled, shown = found
    arms = [a for a in ARMS + ADDED if any(r["arm"] == a for r in rows)]
    per_arm = (
        ("valid_failures", 0), ("reference_faults", 0), ("new_failures", 0), ("new_faults", 0), ("kept", 0),
        ("valid_failures_per_1k_calls", 2), ("calls", 0), ("idc_%", 1), ("seconds", 1),
    )  # fmt: skip
    lines = [
        f"# Guidance study, fourth version extended ({args.dataset})",
        "",
        f"Command: `{command}`",
        "",
        f"Reference pool: {pooled} valid failures of {len(REFERENCE_STATES) * args.copies} held-out unguided runs, "
        f"{pool.count} reference faults (min_cluster_size {MIN_CLUSTER_SIZE}). Endpoint: distinct faults against "
        "the pool, both runs of a pair rarefied to the smaller valid-failure count of the two. Holm here over "
        "each family's comparisons of this dataset (`--verdicts`: over every dataset's comparisons).",
        "",
        "| family | comparison | pairs | mean a | mean b | a wins | copies a ahead | paired r | p | Holm p |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {t['family']} | {t['comparison']} | {t['pairs']} | {t['mean a']:.2f} | {t['mean b']:.2f} | "
            f"{t['a wins']}/{t['pairs']} | {t['copies a ahead']} | {t['paired r']:+.2f} | {shown_p(t['p'])} | "
            f"{shown_p(t['Holm p'])} |"
            for t in family
        ),
        "",
        "## Per arm (mean ± sd over the runs)",
        "",
        "| arm | runs | " + " | ".join(k for k, _ in per_arm) + " |",
        "|---|---|" + "---|" * len(per_arm),
        *(
            f"| {a} | {sum(r['arm'] == a for r in rows)} | "
            + " | ".join(mean_sd([r[k] for r in rows if r["arm"] == a], d) for k, d in per_arm)
            + " |"
            for a in arms
        ),
        "",
        f"Contact sheet: contact_sheet.png, reference faults {', '.join(map(str, shown))} (one row each).",
    ]
    (folder / "study.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def add_faults(runs: list[dict], arrays: dict) -> dict[str, np.ndarray]:
    """Cluster every run's valid failures together; per run its faults, its rarefied faults (to the smallest
    valid-failure count of its pair) and faults per 1,000 calls. Returns each run's fault ids."""
    from idcgen.faults import distinct_faults

    features, labels, predictions, sizes = stacked(runs, arrays)
    faults = distinct_faults(features, labels, predictions, min_cluster_size=MIN_CLUSTER_SIZE)
    assignments, start = {}, 0
    for run, n in zip(runs, sizes):
        assignments[run_key(run)] = faults.fault[start : start + n].astype(np.int32)
        start += n
    add_endpoints(runs, assignments)
    print(f"{faults.count} faults among {len(labels)} valid failures ({faults.method})", flush=True)
    return assignments


def add_endpoints(runs: list[dict], assignments: dict[str, np.ndarray]) -> None:
    """``faults``, ``faults_per_1k_calls``, ``rarefy_to`` and ``rarefied_faults`` of every run from its fault ids."""
    smallest: dict[tuple, int] = {}
    for run in runs:
        pair = (run["copy"], run["state"])
        smallest[pair] = min(smallest.get(pair, run["valid_failures"]), run["valid_failures"])
    for run in runs:
        ids = assignments[run_key(run)]
        run["faults"] = int(np.unique(ids).size)
        run["faults_per_1k_calls"] = 1000.0 * run["faults"] / run["calls"]
        run["rarefy_to"] = smallest[(run["copy"], run["state"])]
        run[PRIMARY] = rarefied(ids, run["rarefy_to"])


def run_key(run: dict) -> str:
    return f"{run['arm']}_c{int(run['copy'])}_r{int(run['state'])}"


def comparisons(runs: list[dict], key: str = PRIMARY) -> list[dict]:
    """The declared family on ``key`` (comparisons with an arm not run left out): pairs, means, wins, copies
    ahead, the matched-pairs rank-biserial r, the Wilcoxon p and Holm over these comparisons."""
    arms = {r["arm"] for r in runs}
    tests = {}
    for a, b in (pair for pair in FAMILY if set(pair) <= arms):
        x, y, pairs = paired(runs, a, b, key)
        tests[(a, b)] = (x, y, wilcoxon(x, y), copies_ahead(x, y, pairs))
    return verdict_rows(tests)


def verdict_rows(tests: dict) -> list[dict]:
    """One row per comparison of ``tests`` ((a, b) -> (x, y, p, copies ahead)), Holm-adjusted over them all."""
    adjusted = holm({k: v[2] for k, v in tests.items()})
    return [
        {
            "comparison": f"{a} vs {b}",
            "pairs": len(x),
            "mean a": float(x.mean()),
            "mean b": float(y.mean()),
            "a wins": int((x > y).sum()),
            "copies a ahead": ahead,
            "paired r": rank_biserial(x, y),
            "p": p,
            "Holm p": adjusted[(a, b)],
        }
        for (a, b), (x, y, p, ahead) in tests.items()
    ]


def read_runs(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return [{k: v if k == "arm" else float(v) for k, v in r.items() if v != ""} for r in csv.DictReader(handle)]


def verdicts(root: Path, datasets, command: str) -> Path:
    """The declared family over every dataset's ``<root>/<dataset>/runs.csv``, Holm over all of it; writes
    ``<root>/verdicts.csv`` and ``verdicts.md``."""
    rows = []
    for dataset in datasets:
        path = root / dataset / "runs.csv"
        if not path.exists():
            raise SystemExit(f"error: {path} not found: run `python recipes/guidance_v4.py --dataset {dataset}` first")
        rows += [{"dataset": dataset, **t} for t in comparisons(read_runs(path))]
    write_family(
        root / "verdicts",
        "the declared family",
        "Primary endpoint: distinct valid faults rarefied to the smallest valid-failure count of the pair; "
        f"Wilcoxon signed-rank over the pairs, Holm over all {len(rows)} comparisons.",
        rows,
        "Holm p (all)",
        command,
    )
    if all((root / d / "extension" / "comparisons.csv").exists() for d in datasets):
        extended_verdicts(root, datasets, rows, command)
    if all((root / d / "matched" / "comparisons.csv").exists() for d in datasets):
        matched_verdicts(root, datasets, command)
    return root / "verdicts.md"


def write_family(stem: Path, title: str, blurb: str, rows: list[dict], holm_key: str, command: str) -> None:
    """A family over datasets, Holm over all of its rows (into each row's ``holm_key``), as ``<stem>.csv`` and
    ``<stem>.md``."""
    adjusted = holm({i: r["p"] for i, r in enumerate(rows)})
    for i, r in enumerate(rows):
        r[holm_key] = adjusted[i]
    write_csv(stem.with_suffix(".csv"), rows)
    lines = [f"# Guidance study, fourth version: {title}", "", f"Command: `{command}`", "", blurb, ""]
    lines += family_table(rows, holm_key)
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def family_table(rows: list[dict], holm_key: str) -> list[str]:
    """A family's comparisons over datasets as a markdown table, Holm p from ``holm_key``."""
    return [
        "| comparison | dataset | pairs | mean a | mean b | a wins | copies a ahead | paired r | p | Holm p |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {r['comparison']} | {SHOWN.get(r['dataset'], r['dataset'])} | {r['pairs']} | {r['mean a']:.2f} | "
            f"{r['mean b']:.2f} | {r['a wins']}/{r['pairs']} | {r['copies a ahead']} | {r['paired r']:+.2f} | "
            f"{shown_p(r['p'])} | {shown_p(r[holm_key])} |"
            for r in rows
        ),
    ]


def matched_verdicts(root: Path, datasets, command: str) -> None:
    """The timing-matched family: every dataset's two comparisons (``<root>/<dataset>/matched/comparisons.csv``),
    Holm over all of them; writes ``<root>/matched_verdicts.csv`` and ``.md``."""
    rows = []
    for dataset in datasets:
        with open(root / dataset / "matched" / "comparisons.csv", newline="") as handle:
            for t in csv.DictReader(handle):
                numbers = {k: float(t[k]) for k in ("mean a", "mean b", "paired r", "p")}
                rows.append({"dataset": dataset, "comparison": t["comparison"], "pairs": int(t["pairs"]),
                             "a wins": int(t["a wins"]), **numbers, "copies a ahead": t["copies a ahead"]})  # fmt: skip
    write_family(
        root / "matched_verdicts",
        "the timing-matched controls",
        "IDC's choice against a blind one at IDC's count and moments, on the reference-pool endpoint; Wilcoxon "
        f"signed-rank over the pairs, Holm over all {len(rows)} comparisons.",
        rows,
        "Holm p",
        command,
    )


def extended_verdicts(root: Path, datasets, published: list[dict], command: str) -> None:
    """The grown family: the published comparisons (their p, on their endpoint) and the added ones (on the
    reference-pool endpoint), Holm over all of them; writes ``<root>/extended_verdicts.csv`` and ``.md``."""
    rows = [{"endpoint": "pooled", **{k: r[k] for k in r if k != "Holm p"}} for r in published]
    for dataset in datasets:
        with open(root / dataset / "extension" / "comparisons.csv", newline="") as handle:
            for t in csv.DictReader(handle):
                if t["family"] == "added":
                    numbers = {k: float(t[k]) for k in ("mean a", "mean b", "paired r", "p")}
                    counts = {"pairs": int(t["pairs"]), "a wins": int(t["a wins"])}
                    rows.append({"endpoint": "reference", "dataset": dataset, "comparison": t["comparison"],
                                 **counts, **numbers, "copies a ahead": t["copies a ahead"]})  # fmt: skip
    adjusted = holm({i: r["p"] for i, r in enumerate(rows)})
    for i, r in enumerate(rows):
        r["Holm p (grown)"] = adjusted[i]
    write_csv(root / "extended_verdicts.csv", rows)
    lines = [
        "# Guidance study, fourth version extended: the grown family",
        "",
        f"Command: `{command}`",
        "",
        f"Holm over all {len(rows)} comparisons: the published ones on the pooled endpoint (Holm p over "
        f"{len(published)} beside), the added ones on the reference-pool endpoint.",
        "",
        "| comparison | dataset | endpoint | pairs | mean a | mean b | a wins | copies a ahead | paired r | p | "
        "Holm p (published) | Holm p (grown) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['comparison']} | {SHOWN.get(r['dataset'], r['dataset'])} | {r['endpoint']} | {r['pairs']} | "
            f"{r['mean a']:.2f} | {r['mean b']:.2f} | {r['a wins']}/{r['pairs']} | {r['copies a ahead']} | "
            f"{r['paired r']:+.2f} | {shown_p(r['p'])} | {shown_p(r.get('Holm p (all)', float('nan')))} | "
            f"{shown_p(r['Holm p (grown)'])} |"
        )
    (root / "extended_verdicts.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


PER_ARM = (
    (PRIMARY, "rarefied faults", 2),
    ("rarefy_to", "rarefied to", 0),
    ("faults_per_1k_calls", "faults / 1k calls", 2),
    ("valid_failures_per_1k_calls", "valid failures / 1k calls", 2),
    ("faults", "faults", 0),
    ("valid_failures", "valid failures", 0),
    ("kept", "kept", 0),
    ("idc_%", "IDC %", 1),
    ("nc_%", "NC %", 1),
)


def summarise(runs: list[dict], args, command: str, out: Path) -> None:
    arms = [a for a in ARMS if any(r["arm"] == a for r in runs)]
    tests = comparisons(runs)
    secondary = {key: comparisons(runs, key) for key in ("faults_per_1k_calls", "valid_failures_per_1k_calls")}
    write_csv(out / "runs.csv", runs)
    pairs = sorted({(r["copy"], r["state"]) for r in runs})
    lines = [
        f"# Guidance study, fourth version ({args.dataset})",
        "",
        f"Command: `{command}`",
        "",
        f"{len(pairs)} pairs (subject copy, state), {args.seeds} seeds and {args.budget} execs a run. Primary "
        "endpoint: distinct valid faults rarefied to the smallest valid-failure count of the pair (HDBSCAN at "
        f"min_cluster_size {MIN_CLUSTER_SIZE} over all runs). Wilcoxon signed-rank on the pairs, Holm over this "
        "dataset's comparisons (`--verdicts`: over every dataset's).",
        "",
        "| comparison | pairs | mean a | mean b | a wins | copies a ahead | paired r | p | Holm p |",
        "|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {t['comparison']} | {t['pairs']} | {t['mean a']:.2f} | {t['mean b']:.2f} | {t['a wins']}/{t['pairs']}"
            f" | {t['copies a ahead']} | {t['paired r']:+.2f} | {shown_p(t['p'])} | {shown_p(t['Holm p'])} |"
            for t in tests
        ),
        "",
        "## Per arm (mean ± sd over the runs)",
        "",
        "| arm | runs | " + " | ".join(name for _, name, _ in PER_ARM) + " |",
        "|---|---|" + "---|" * len(PER_ARM),
        *(
            f"| {a} | {sum(r['arm'] == a for r in runs)} | "
            + " | ".join(mean_sd([r[k] for r in runs if r["arm"] == a], d) for k, _, d in PER_ARM)
            + " |"
            for a in arms
        ),
        "",
        "## Secondary endpoints (the third version's; exploratory here)",
        "",
        "| endpoint | comparison | mean a | mean b | a wins | paired r | p |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {key} | {t['comparison']} | {t['mean a']:.2f} | {t['mean b']:.2f} | {t['a wins']}/{t['pairs']} | "
            f"{t['paired r']:+.2f} | {shown_p(t['p'])} |"
            for key, found in secondary.items()
            for t in found
        ),
    ]
    (out / "study.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist", choices=tuple(ARCHITECTURES))
    parser.add_argument("--copies", type=int, default=5, help="subject copies (recipes/subjects.py trains them)")
    parser.add_argument("--states", type=int, default=3, help="seed sets and random states per copy")
    parser.add_argument("--seeds", type=int, default=500)
    parser.add_argument("--budget", type=int, default=10_000, help="execs of each run")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS + ADDED + MATCHED)
    parser.add_argument("--extension", action="store_true", help="every arm, the reference pool and its endpoint")
    parser.add_argument(
        "--matched", action="store_true", help="the timing-matched controls, their IDC arms and the reference pool"
    )
    parser.add_argument("--fit-train", type=int, default=10_000, help="training inputs for IDC, NC and NLC")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--out", default=None, help="default outputs/guidance_v4/<dataset>")
    parser.add_argument("--summary-only", action="store_true", help="summarise the runs done, run nothing")
    parser.add_argument(
        "--only-copies", type=int, nargs="+", default=None, help="make these copies' runs only, summarise nothing"
    )
    parser.add_argument("--verdicts", nargs="+", default=None, metavar="DATASET", help="the family over datasets")
    args = parser.parse_args(argv)
    if args.verdicts:
        return verdicts(Path(args.out) if args.out else OUTPUTS / "guidance_v4", args.verdicts, command_line())
    for name in ("copies", "states", "seeds", "budget", "fit_train", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.extension and args.matched:
        parser.error("--extension and --matched are two summaries: run them one after the other")
    if args.matched:
        args.arms = ["idc@m8", "idc@m12", *MATCHED]
    else:
        args.arms = list(ARMS + ADDED) if args.extension else [a for a in ARMS + ADDED + MATCHED if a in args.arms]
    missing = sorted(set(args.arms) - set(available(args.arms)))
    if missing:
        print(f"note: arm {', '.join(missing)} left out: idcgen has no such criterion here", flush=True)
        args.arms = available(args.arms)
    args.mutators = default_mutators()
    out = Path(args.out) if args.out else OUTPUTS / "guidance_v4" / args.dataset
    if out.exists() and not out.is_dir():
        parser.error(f"--out {out} is a file, not a folder")
    (out / "runs").mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    runs, arrays = run_all(args, out)
    if args.only_copies:  # a share of the runs (another process makes the rest): the summary needs them all
        if args.extension or args.matched:
            reference_runs(args, out, run_settings(args))
        return print(
            f"copies {args.only_copies}: {len(runs)} runs in {out / 'runs'}, {time.perf_counter() - started:.0f} s"
        )
    if not runs:
        raise SystemExit(f"error: no runs in {out / 'runs'}")
    if args.matched:
        matched(args, out, runs, arrays, command_line())
        return print(f"total {time.perf_counter() - started:.0f} s -> {out / 'matched'}")
    published = [r for r in runs if r["arm"] in ARMS]  # the pooled endpoint stays the eight arms'
    if published:
        assignments = add_faults(published, arrays)
        np.savez_compressed(out / "assignments.npz", **assignments)
        summarise(published, args, command_line(), out)
    if args.extension:
        extension(args, out, runs, arrays, run_settings(args), command_line())
    print(f"total {time.perf_counter() - started:.0f} s -> {out}")


if __name__ == "__main__":
    main()
