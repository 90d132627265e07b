"""The hardening study (issue 47): does fine-tuning on IDC-kept inputs make a model more robust than as many
inputs from the same seeds made any other way, or kept by another criterion?

    python recipes/hardening_study.py [--dataset mnist] [--copies 5] [--doses 300 1500] [--block-seeds 100]
                                      [--block-budget 2000] [--held-out-seeds 500] [--held-out-budget 10000]
                                      [--test 1000] [--later-doses-without fgsm augment] [--scratch ARM ...]
                                      [--scratch-epochs 10] [--repeats 1] [--epochs 3] [--out DIR] [--summary-only]

Declared before the runs in docs/design.md, "The hardening study (declared before the runs)" and its extension.
Per subject copy (the unit): IDC-, NC- and NLC-guided campaigns, each a sequence of block campaigns (``block
seeds`` test seeds and ``block budget`` execs each, the blocks taken in order from the seed pool, fresh coverage
in each) run until the blocks together kept the largest dose or the pool ran out; unguided campaigns (``--guide
none``) on the IDC blocks, with their random states; a held-out IDC campaign on other seeds. Then, per dose,
``idcgen.hardening.harden`` fine-tunes the copy once per arm (per repeat) on its training half plus ``dose``
inputs: the first ``dose`` the IDC blocks kept, in order (IDC-guided; all they kept if fewer), or as many from
the same seeds (random, pgd, fgsm, augment), or the first ``dose`` the NC or NLC blocks kept (NC-guided,
NLC-guided), or from each IDC block's unguided twin as many as that block gave IDC-guided (unguided-kept);
clean adds none (one per copy, dose 0). With ``--scratch``, the named arms are also trained from scratch (the
subjects' recipe) at the largest dose. Every model is measured on the same test subset, never a seed: the
corruption suite (primary: its mean), clean accuracy, PGD robust accuracy, the held-out campaign's findings.

Writes ``<out>/copy<c>.json`` as each copy finishes (a rerun skips finished copies), then ``runs.csv`` (one row
per copy, training, dose, arm and repeat), ``summary.csv`` (the family: IDC-guided against each arm at each dose,
paired Wilcoxon over the copies, Holm over the whole family) and ``study.md`` (the tables and verdicts).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from kit import OUTPUTS, command_line, load_data, save_json, write_csv
from kit.stats import holm, rank_biserial, wilcoxon
from kit.subjects import ARCHITECTURES, TORCH_DATASETS, load_subject, training_sets

GUIDED = "IDC-guided"
NC_GUIDED = "NC-guided"
NLC_GUIDED = "NLC-guided"
UNGUIDED = "unguided-kept"
#: the guided arms and the Fuzzer's guide of each
GUIDES = {GUIDED: "idc", NC_GUIDED: "nc", NLC_GUIDED: "nlc"}
BASELINES = ("random", "pgd", "fgsm", "augment", "clean")
#: the family: IDC-guided against each (docs/design.md), at each dose
FAMILY = (*BASELINES, UNGUIDED, NC_GUIDED, NLC_GUIDED)
ARMS = ("original", GUIDED, NC_GUIDED, NLC_GUIDED, *BASELINES, UNGUIDED)
#: arms whose models do not depend on the dose (nothing added): one row per copy, dose 0
DOSELESS = ("original", "clean")
TRAININGS = ("finetune", "scratch")
SHOWN_TRAINING = {"finetune": "fine-tuned", "scratch": "from scratch"}
PRIMARY = "corruption mean"
#: the published endpoints: (column of runs.csv, name in the tables)
ENDPOINTS = (
    (PRIMARY, "mean corruption acc."),
    ("clean", "clean acc."),
    ("PGD eps 0.1", "PGD 0.1 acc."),
    ("PGD eps 0.3", "PGD 0.3 acc."),
    ("held-out findings", "held-out findings acc."),
)


def kept_count(campaign) -> int:
    c = campaign.corpus
    return int(((c.parent >= 0) & (c.label >= 0)).sum())


def limits(kept: list[int], n: int) -> list[int]:
    """How many of each block's kept mutants (in block order, each block's in the order kept) make the first
    ``n``: all of the early blocks', part of the one that reaches ``n``, none after it."""
    out, left = [], n
    for k in kept:
        out.append(min(k, max(left, 0)))
        left -= k
    return out


def merged(blocks: list, counts: list[int]):
    """One campaign whose corpus is the blocks' corpora one after another (parents and roots shifted), in which
    only the first ``counts[b]`` mutants block b kept keep their label: ``harden`` adds those and leaves the
    others out. Blocks giving none are left out. The blocks share the analysis and settings (but budget and
    random state), which the merged campaign takes from the first."""
    from dataclasses import replace

    from idcgen.fuzz.corpus import COLUMNS, Corpus

    used = [(b, n) for b, n in zip(blocks, counts) if n > 0]
    if not used:
        raise ValueError("no block gives any input")
    first = used[0][0]
    corpus = Corpus(first.corpus.input_shape, first.corpus.x.dtype)
    for campaign, n in used:
        c = campaign.corpus
        columns = {name: getattr(c, name).copy() for name in COLUMNS if name != "fuzz_count"}
        kept = np.flatnonzero((c.parent >= 0) & (c.label >= 0))
        columns["label"][kept[n:]] = -1
        offset = len(corpus)
        columns["parent"] = np.where(c.parent >= 0, c.parent + offset, c.parent)
        columns["root"] = c.root + offset
        corpus.add(c.x, c.reference, [list(chain) for chain in c.chains], **columns)
    return replace(first, corpus=corpus)


def split(n_test: int, held: int, test: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seed pool, held-out campaign seeds, measurement set) from the test set's permutation with seed 0, the
    same for every copy: positions held..2 held-1 are the held-out seeds, the next ``test`` the measurement set,
    and the pool is the rest in order (positions 0..held-1 first: the earlier study's campaign seeds)."""
    order = np.random.default_rng(0).permutation(n_test)
    if 2 * held + test > n_test:
        raise SystemExit(f"error: {2 * held} seeds and {test} test inputs need more than the {n_test} test inputs")
    pool = np.concatenate([order[:held], order[2 * held + test :]])
    return pool, order[held : 2 * held], order[2 * held : 2 * held + test]


class Setting:
    """What every copy shares: the data, the split, and the corruption suite (built once, when first needed)."""

    def __init__(self, args):
        (self.x_train, self.y_train), _ = training_sets(args.dataset)
        self.x_test, self.y_test = load_data("test", args.dataset)
        self.pool, self.held, self.measure = split(len(self.x_test), args.held_out_seeds, args.test)
        self.blocks = len(self.pool) // args.block_seeds
        self.args = args
        self.suite = None

    def block(self, b: int) -> np.ndarray:
        return self.pool[b * self.args.block_seeds : (b + 1) * self.args.block_seeds]

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


def block_state(copy: int, b: int) -> int:
    """The fuzzer's random state of block b of copy c (every guide's block b has the same)."""
    return 1000 * copy + 100 + b


def arms_at(args, dose: int) -> list[str]:
    """The fine-tuned arms run at ``dose``: all at the first dose, the later ones without
    ``--later-doses-without`` (clean, which adds nothing, runs with the first dose only)."""
    arms = [a for a in ARMS if a != "original"]
    if dose != args.doses[0]:
        arms = [a for a in arms if a not in args.later_doses_without]
    return arms


def run_copy(args, setting: Setting, copy: int) -> dict:
    """One copy: its block campaigns, the harden calls, one row per (training, dose, arm, repeat)."""
    from idcgen.analysis import analyze
    from idcgen.criteria import make_criterion
    from idcgen.framework import Network
    from idcgen.fuzz.fuzzer import Fuzzer
    from idcgen.fuzz.mutators import DEFAULT_MUTATORS, parse_mutators
    from idcgen.hardening import Assessment, Retraining, harden

    started = time.perf_counter()
    s = setting
    network = Network(load_subject(args.dataset, copy))
    fit = args.fit_train
    analysis = analyze(network, s.x_train[:fit], s.y_train[:fit], m=args.m, random_state=0, progress=False)
    criteria = {g: make_criterion(g).fit(network, s.x_train[:fit]) for g in ("nc", "nlc")}
    mutators = ",".join(m for m in DEFAULT_MUTATORS.split(",") if m != "directed")

    def campaign(guide: str, seeds: np.ndarray, state: int, budget: int):
        fuzzer = Fuzzer(
            analysis,
            mutators=parse_mutators(mutators),
            guide=guide,
            measure=[criteria[guide]] if guide in criteria else [],
            batch_size=args.batch_size,
            random_state=state,
        )
        return fuzzer.run(s.x_test[seeds], s.y_test[seeds], budget=budget, progress=False)

    need = max(args.doses)
    blocks, seconds = {}, {}
    for arm, guide in GUIDES.items():  # blocks until the largest dose is kept or the pool is used up
        t, blocks[arm] = time.perf_counter(), []
        while sum(map(kept_count, blocks[arm])) < need and len(blocks[arm]) < s.blocks:
            b = len(blocks[arm])
            blocks[arm].append(campaign(guide, s.block(b), block_state(copy, b), args.block_budget))
        seconds[arm] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    idc_kept = [kept_count(c) for c in blocks[GUIDED]]
    used = len([n for n in limits(idc_kept, need) if n > 0])
    blocks[UNGUIDED] = [campaign("none", s.block(b), block_state(copy, b), args.block_budget) for b in range(used)]
    held_out = campaign("idc", s.held, 1000 * copy + 1, args.held_out_budget)
    seconds["unguided and held-out"] = round(time.perf_counter() - t, 1)
    kept = {arm: [kept_count(c) for c in found] for arm, found in blocks.items()}
    suite = s.corruption_suite(blocks[GUIDED][0])
    assessment = Assessment(corruptions=suite, pgd_eps=args.pgd_eps, held_out=held_out)
    x_m, y_m = s.x_test[s.measure], s.y_test[s.measure]

    def additions(arm: str, dose: int) -> tuple[object, dict]:
        """The merged campaign whose labelled kept mutants are the arm's additions at ``dose``, and what it used."""
        source = GUIDED if arm not in (NC_GUIDED, NLC_GUIDED, UNGUIDED) else arm
        counts = limits(kept[GUIDED], dose)
        if source == UNGUIDED:  # each IDC block's twin gives as many as the block gave IDC-guided
            counts = [min(n, k) for n, k in zip(counts, kept[UNGUIDED])]
        elif source != GUIDED:
            counts = limits(kept[source], dose)
        n_blocks = len([n for n in counts if n > 0])
        if source == UNGUIDED:
            n_blocks = len([n for n in limits(kept[GUIDED], dose) if n > 0])
        found = blocks[source][:n_blocks]
        info = {
            "blocks": n_blocks,
            "seeds": n_blocks * args.block_seeds,
            "execs": int(sum(c.execs for c in found)),
            "campaign_kept": int(sum(kept[source][:n_blocks])),
        }
        return merged(blocks[source], counts), info

    def retrained(campaign, baselines: list[str], training: str, measure_original: bool) -> list[dict]:
        if training == "scratch":
            how, state = Retraining(mode="scratch", epochs=args.scratch_epochs, repeats=args.repeats), copy
        else:
            how, state = Retraining(mode="finetune", epochs=args.epochs, repeats=args.repeats), 0
        found = harden(
            network,
            s.x_train,
            s.y_train,
            campaign,
            x_m,
            y_m,
            baselines=baselines,
            retraining=how,
            random_state=state,
            progress=False,
            assessment=dataclasses.replace(assessment, original=measure_original),
        )
        return found

    rows, eps, t = [], {}, time.perf_counter()

    def add(found: dict, training: str, dose: int, rename: str | None, info: dict) -> None:
        for row in found["rows"]:
            arm = rename if (rename and row["arm"] == GUIDED) else row["arm"]
            doseless = arm in DOSELESS
            rows.append(
                {
                    "dataset": args.dataset,
                    "copy": copy,
                    "training": training,
                    "dose": 0 if doseless else dose,
                    "arm": arm,
                    "added": row["extra_inputs"],
                    "repeat": row["repeat"],
                    "seed": row["seed"],
                    **({k: "" for k in info} if doseless else info),
                    **{k: v for k, v in row.items() if k not in ("arm", "extra_inputs", "repeat", "seed")},
                }
            )

    plan = [("finetune", dose, arms_at(args, dose)) for dose in args.doses]
    if args.scratch:
        plan.append(("scratch", max(args.doses), list(args.scratch)))
    for i, (training, dose, wanted) in enumerate(plan):
        if training == "finetune" and i > 0:  # clean adds nothing: once per copy and training
            wanted = [a for a in wanted if a != "clean"]
        campaign_, info = additions(GUIDED, dose)
        found = retrained(campaign_, [a for a in BASELINES if a in wanted], training, i == 0)
        eps[f"{training} {dose}"] = found["attack_eps"]
        add(found, training, dose, None, info)
        for arm in (NC_GUIDED, NLC_GUIDED, UNGUIDED):
            if arm in wanted and sum(kept[arm]):
                campaign_, info = additions(arm, dose)
                add(retrained(campaign_, [], training, False), training, dose, arm, info)
            elif arm in wanted:
                print(f"  copy {copy}: {arm} kept nothing in {len(kept[arm])} blocks: no {arm} row", flush=True)
        print(f"  copy {copy}: {training} at dose {dose} done, {time.perf_counter() - t:.0f} s", flush=True)
    seconds["retraining and measures"] = round(time.perf_counter() - t, 1)
    return {
        "rows": rows,
        "kept": kept,
        "blocks": {arm: len(found) for arm, found in blocks.items()},
        "held_out_findings": int(len(held_out.findings()["x"])),
        "attack_eps": eps,
        "corruptions": list(suite.names),
        "severities": list(suite.severities),
        "notes": list(suite.notes),
        "phase_seconds": seconds,
        "seconds": round(time.perf_counter() - started, 1),
    }


def settings_of(args) -> dict:
    keys = (
        "dataset",
        "doses",
        "block_seeds",
        "block_budget",
        "held_out_seeds",
        "held_out_budget",
        "test",
        "severities",
        "corruptions",
        "epochs",
        "later_doses_without",
        "scratch",
        "scratch_epochs",
        "repeats",
        "fit_train",
        "m",
    )
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
        kept = ", ".join(f"{arm} {sum(k)} in {len(k)} blocks" for arm, k in found["kept"].items())
        print(
            f"[copy {copy + 1}/{args.copies}] kept: {kept}; {found['held_out_findings']} held-out findings, "
            f"{found['seconds']:.0f} s",
            flush=True,
        )
    return copies


def per_copy(runs: list[dict], training: str, dose: int, arm: str, key: str) -> dict[int, float]:
    """``key`` of ``arm`` at (training, dose) per copy, the mean over its repeats; clean (nothing added) is
    looked up at dose 0 and the original (never retrained) with the fine-tuned rows."""
    dose = 0 if arm in DOSELESS else dose
    training = "finetune" if arm == "original" else training
    found: dict[int, list[float]] = {}
    for r in runs:
        if r["arm"] == arm and r["training"] == training and int(r["dose"]) == dose:
            found.setdefault(int(r["copy"]), []).append(float(r[key]))
    return {c: float(np.mean(v)) for c, v in found.items()}


def paired_values(runs: list[dict], training: str, dose: int, arm: str, key: str) -> tuple[np.ndarray, np.ndarray]:
    """IDC-guided's and ``arm``'s values of ``key`` at (training, dose) on the copies both ran, copy by copy."""
    a, b = per_copy(runs, training, dose, GUIDED, key), per_copy(runs, training, dose, arm, key)
    copies = sorted(set(a) & set(b))
    return np.array([a[c] for c in copies]), np.array([b[c] for c in copies])


def cells(runs: list[dict]) -> list[tuple[str, int]]:
    """The (training, dose) pairs IDC-guided ran at, fine-tuning first, by dose."""
    found = {(r["training"], int(r["dose"])) for r in runs if r["arm"] == GUIDED}
    return sorted(found, key=lambda t: (TRAININGS.index(t[0]), t[1]))


def comparisons(runs: list[dict], key: str = PRIMARY) -> list[dict]:
    """IDC-guided against each arm of the family at each (training, dose): means, paired difference, copies
    ahead, r, p; Holm over all of them (the declared family)."""
    tests = []
    for training, dose in cells(runs):
        for arm in FAMILY:
            a, b = paired_values(runs, training, dose, arm, key)
            if not len(a):
                continue
            tests.append(
                {
                    "training": training,
                    "dose": dose,
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
    adjusted = holm({i: t["p"] for i, t in enumerate(tests)})
    for i, t in enumerate(tests):
        t["Holm p"] = adjusted[i]
    return tests


def shown_p(p: float) -> str:
    return "" if np.isnan(p) else f"{p:.3f}"


def where(t: dict) -> str:
    return f"{SHOWN_TRAINING[t['training']]}, dose {t['dose']}"


def verdict(t: dict) -> str:
    ahead, n = t["copies IDC ahead"], t["copies"]
    if ahead == n:
        how = f"ahead on all {n} copies (consistent; p = {shown_p(t['p'])}, the design's floor with 5 copies)"
    elif ahead == 0:
        how = f"behind on all {n} copies (consistent; p = {shown_p(t['p'])})"
    else:
        how = f"ahead on {ahead}/{n} copies (mixed; p = {shown_p(t['p'])})"
    return (
        f"{where(t)}: {t['comparison']}: IDC-guided {how}, mean difference {100 * t['mean difference']:+.2f} "
        f"points, r = {t['r']:+.2f}, Holm p = {shown_p(t['Holm p'])}: not significant"
    )


def primary_table(tests: list[dict]) -> list[str]:
    """The published table: IDC-guided against each arm on the primary endpoint, per training and dose."""
    return [
        "| training | dose | IDC-guided vs | copies | IDC-guided (%) | other (%) | difference (points) | "
        "copies IDC ahead | r | p | Holm p |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {SHOWN_TRAINING[t['training']]} | {t['dose']} | {t['comparison'].split(' vs ')[1]} | {t['copies']} | "
            f"{100 * t['mean IDC-guided']:.2f} | {100 * t['mean other']:.2f} | {100 * t['mean difference']:+.2f} | "
            f"{t['copies IDC ahead']}/{t['copies']} | {t['r']:+.2f} | {shown_p(t['p'])} | {shown_p(t['Holm p'])} |"
            for t in tests
        ),
    ]


def endpoints(runs: list[dict]) -> list[tuple[str, str]]:
    """The published endpoints the runs measured (PGD at the eps given)."""
    return [(k, name) for k, name in ENDPOINTS if k in runs[0]]


def groups(runs: list[dict]) -> list[tuple[str, int, str]]:
    """(training, dose, arm) of every model in the runs, in the tables' order."""
    found = {(r["training"], int(r["dose"]), r["arm"]) for r in runs}
    return sorted(found, key=lambda g: (TRAININGS.index(g[0]), g[1], ARMS.index(g[2])))


def span(values) -> str:
    values = sorted(set(values))
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def arm_table(runs: list[dict]) -> list[str]:
    """Each model's mean (%) of every published endpoint over the copies (each copy's mean over repeats), the
    inputs it added (range over copies) and their median L2 from their seeds (mean over copies)."""
    shown = endpoints(runs)
    lines = [
        "| training | dose | arm | copies | added | median L2 | " + " | ".join(name for _, name in shown) + " |",
        "|---|---|---|---|---|---|" + "---|" * len(shown),
    ]
    for training, dose, arm in groups(runs):
        mine = [r for r in runs if (r["training"], int(r["dose"]), r["arm"]) == (training, dose, arm)]
        means = [per_copy(mine, training, dose, arm, k) for k, _ in shown]
        l2 = np.mean(list(per_copy(mine, training, dose, arm, "median_l2").values()))
        cells_ = [f"{100 * np.mean(list(m.values())):.2f}" for m in means]
        lines.append(
            f"| {SHOWN_TRAINING[training]} | {dose} | {arm} | {len(means[0])} | "
            f"{span(int(r['added']) for r in mine)} | {l2:.2f} | " + " | ".join(cells_) + " |"
        )
    return lines


def secondary_table(runs: list[dict]) -> list[str]:
    """IDC-guided minus each arm on the secondary endpoints (points, mean over copies; copies IDC ahead)."""
    keys = endpoints(runs)[1:]
    lines = [
        "| training | dose | IDC-guided minus | " + " | ".join(name for _, name in keys) + " |",
        "|---|---|---|" + "---|" * len(keys),
    ]
    for training, dose in cells(runs):
        for arm in FAMILY:
            cells_ = []
            for key, _ in keys:
                a, b = paired_values(runs, training, dose, arm, key)
                if not len(a):
                    break
                cells_.append(f"{100 * (a - b).mean():+.2f} ({int((a > b).sum())}/{len(a)})")
            if cells_:
                lines.append(f"| {SHOWN_TRAINING[training]} | {dose} | {arm} | " + " | ".join(cells_) + " |")
    return lines


def campaign_table(copies: list[dict], args) -> list[str]:
    """Per copy: the blocks each guide ran and what they kept in all, the held-out findings."""
    arms = list(copies[0]["kept"])
    lines = [
        "| copy | " + " | ".join(f"{arm}: blocks, kept" for arm in arms) + " | held-out findings |",
        "|---|" + "---|" * (len(arms) + 1),
    ]
    for c, found in enumerate(copies):
        cells_ = [f"{len(found['kept'][arm])}, {sum(found['kept'][arm])}" for arm in arms]
        lines.append(f"| {c} | " + " | ".join(cells_) + f" | {found['held_out_findings']} |")
    return lines


def summarise(copies: list[dict], args, command: str, out: Path) -> list[dict]:
    runs = [row for found in copies for row in found["rows"]]
    write_csv(out / "runs.csv", runs)
    tests = comparisons(runs)
    write_csv(out / "summary.csv", tests)
    first = copies[0]
    eps = "; ".join(
        f"{cell}: " + ", ".join(f"{c['attack_eps'][cell]:.2f}" for c in copies)
        for cell in first["attack_eps"]
        if all(c["attack_eps"].get(cell) for c in copies)
    )
    scratch = (
        f" From scratch (the subjects' recipe: Adadelta lr 1.0, {args.scratch_epochs} epochs, seed = the copy's) at "
        f"dose {max(args.doses)}: {', '.join(args.scratch)}."
        if args.scratch
        else ""
    )
    lines = [
        f"# The hardening study ({args.dataset})",
        "",
        f"Command: `{command}`",
        "",
        f"{len(copies)} subject copies. Doses: {', '.join(map(str, args.doses))} inputs added to the training half "
        f"(the first dose with every arm; the others without {', '.join(args.later_doses_without) or 'none'}). "
        f"Campaigns: blocks of {args.block_seeds} test seeds and {args.block_budget} execs each (fresh coverage "
        "in each), taken in order from the seed pool until the blocks kept the largest dose; IDC-, NC- and "
        f"NLC-guided, and unguided twins of the IDC blocks; a held-out IDC campaign on {args.held_out_seeds} other "
        f"seeds ({args.held_out_budget} execs). Fine-tuning: Adam lr 1e-4, {args.epochs} epochs, {args.repeats} "
        f"repeat(s).{scratch} Measured on {args.test} test inputs never used as seeds: the corruption suite "
        f"({len(first['corruptions'])} corruptions x severities "
        + ", ".join(map(str, first["severities"]))
        + "; "
        + ("; ".join(first["notes"]) or "all 15")
        + f"), clean, PGD (L-inf) at eps {', '.join(f'{e:g}' for e in args.pgd_eps)}, the held-out findings. "
        f"pgd/fgsm L2 eps per copy ({eps}).",
        "",
        "## Campaigns",
        "",
        *campaign_table(copies, args),
        "",
        "## Primary endpoint: mean corruption accuracy, IDC-guided against each arm",
        "",
        f"Paired Wilcoxon signed-rank over the copies (two-sided, exact), Holm over the {len(tests)} comparisons. "
        "With 5 copies the smallest possible p is 0.0625: no comparison can reach 0.05.",
        "",
        *primary_table(tests),
        "",
        "## Verdicts",
        "",
        *(f"- {verdict(t)}" for t in tests),
        "",
        "## Per model (mean over copies, %)",
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
    parser.add_argument(
        "--doses", nargs="+", type=int, default=None, help="inputs added; default 1 %% and 5 %% of the training half"
    )
    parser.add_argument("--block-seeds", type=int, default=100, help="seeds of each block campaign")
    parser.add_argument("--block-budget", type=int, default=2000, help="execs of each block campaign")
    parser.add_argument("--held-out-seeds", type=int, default=500, help="seeds of the held-out campaign")
    parser.add_argument("--held-out-budget", type=int, default=10_000, help="execs of the held-out campaign")
    parser.add_argument("--test", type=int, default=1000, help="test inputs every model is measured on")
    parser.add_argument(
        "--later-doses-without",
        nargs="*",
        default=["fgsm", "augment"],
        choices=FAMILY,
        help="arms left out at every dose but the first",
    )
    parser.add_argument(
        "--scratch",
        nargs="*",
        default=None,
        choices=(GUIDED, *FAMILY),
        help="arms also trained from scratch at the largest dose (default: IDC-guided random clean on mnist)",
    )
    parser.add_argument("--scratch-epochs", type=int, default=10, help="epochs from scratch (the subjects' 10)")
    parser.add_argument("--corruptions", nargs="+", default=None, help="default: the whole suite")
    parser.add_argument("--severities", nargs="+", type=int, default=[1, 2, 3, 4, 5])
    parser.add_argument("--pgd-eps", nargs="+", type=float, default=[0.1, 0.3])
    parser.add_argument("--epochs", type=int, default=3, help="fine-tuning epochs of every arm")
    parser.add_argument("--repeats", type=int, default=1, help="fine-tuning seeds per arm (harden's repeats)")
    parser.add_argument("--fit-train", type=int, default=10_000, help="training inputs the IDC analysis is fitted on")
    parser.add_argument("--m", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--out", default=None, help="default outputs/hardening_study/<dataset>")
    parser.add_argument("--summary-only", action="store_true", help="summarise the copies done, run nothing")
    args = parser.parse_args(argv)
    if args.doses is None:
        half = len(training_sets(args.dataset)[0][1])
        args.doses = [half // 100, half // 20]
    if args.scratch is None:
        args.scratch = [GUIDED, "random", "clean"] if args.dataset == "mnist" else []
    if args.scratch and GUIDED not in args.scratch:
        parser.error(f"--scratch needs {GUIDED} (every comparison is against it)")
    if len(set(args.doses)) != len(args.doses) or min(args.doses) < 1:
        parser.error("--doses must be distinct and at least 1")
    names = ("copies", "block_seeds", "block_budget", "held_out_seeds", "held_out_budget", "test", "epochs")
    for name in (*names, "scratch_epochs", "repeats", "fit_train", "m", "batch_size"):
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
