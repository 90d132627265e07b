"""RQ3/RQ4 with controls (issue 51): which attacks raise IDC most, against noise that moves the inputs as far.

    python recipes/rq3_attacks.py [--dataset mnist] [--copies 0 1 2 3 4] [--states 0 1] [--seeds 200]
    python recipes/rq3_attacks.py --dataset mnist --verdicts      # the declared family, from runs.csv
    python recipes/rq3_attacks.py --dataset mnist --publish       # runs.csv to docs/data/rq3-attacks/<dataset>/
    python recipes/rq3_attacks.py --dataset mnist --campaign      # one fuzz campaign with every attack, reported

A *pair* is (subject copy, random state): the copy (recipes/subjects/<dataset>/, trained on half A of the
training set), ``--seeds`` held-out test inputs it classifies correctly drawn for that pair alone (classes
balanced, random state 1000 x copy + state), and that state for every random draw. On every pair the same seeds
get each added set:

- each attack: FGSM, BIM, PGD, C&W, JSMA (kit.sets.PERTURBATIONS, the paper's parameters; JSMA at gamma 0.1) and
  DeepXplore's generator (one model: the deviation from the seed's class plus NC, light constraint);
- for each attack, four noise sets *matched* to it input by input: Gaussian and uniform noise scaled, after
  clipping to the value range, to the attack's L2 distance of that input from its seed, and separately to its
  L-inf distance (a bisection on the scale per input, ``matched_noise``);
- the natural misclassified test inputs (not seeds) of the copy, as many as the seeds or all there are;
- a random transform per seed (rotate, shift, scale, shear, brightness or contrast at idcgen's defaults).

For the seeds alone and for the seeds plus each set, IDC at m = 6, 8, 10 (analyses of ``--fit-train`` inputs of
half A, one per copy and m), NC (threshold 0) and NLC are measured. One row per (pair, set) goes to
``outputs/rq3_attacks/<dataset>/runs.csv``; each pair is saved apart first (``pairs/``), so an interrupted run
resumes at the next pair. ``--verdicts`` writes ``study.md`` and ``gains.png``: the family declared in docs/design.md ("RQ3/RQ4
with matched perturbation") with Wilcoxon signed-rank over the pairs and Holm, and the secondary tables.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np

from kit import OUTPUTS, ROOT, load_data, save_json
from kit.sets import PERTURBATIONS
from kit.stats import holm, rank_biserial, wilcoxon
from kit.study import stratified
from kit.subjects import load_subject, training_sets

#: attack name -> mutator spec (inputs in [0, 1])
ATTACKS = {
    "FGSM": PERTURBATIONS["U_O+FGSM"],
    "BIM": PERTURBATIONS["U_O+BIM"],
    "PGD": "pgd(eps=0.3, eps_iter=0.05, nb_iter=10)",
    "CW": PERTURBATIONS["U_O+CW"],
    "JSMA": "jsma(theta=1.0, gamma=0.1)",
    "DeepXplore": "deepxplore(constraint='light', coverage='nc', step=0.1, iterations=20)",
}
#: CIFAR-10's attacks at the field's scale for its images (docs/design.md, "RQ3/RQ4 with matched perturbation":
#: eps 8/255, step 2/255; C&W and JSMA shortened for a CPU), under the same names
CIFAR_ATTACKS = {
    "FGSM": f"fgsm(eps={8 / 255})",
    "BIM": f"bim(eps={8 / 255}, eps_iter={2 / 255}, nb_iter=10)",
    "PGD": f"pgd(eps={8 / 255}, eps_iter={2 / 255}, nb_iter=10)",
    "CW": "cw(confidence=0.0, lr=0.01, binary_search_steps=3, max_iterations=50)",
    "JSMA": "jsma(theta=1.0, gamma=0.02)",
    "DeepXplore": ATTACKS["DeepXplore"],
}
#: seeds a pair has by default: fewer on CIFAR-10, whose C&W and JSMA cost most (docs/design.md)
DEFAULT_SEEDS = {"cifar10": 100}
NOISES = ("gauss", "uniform")
NORMS = ("l2", "linf")
TRANSFORMS = ("rotate", "shift", "scale", "shear", "brightness", "contrast")
MS = (6, 8, 10)
#: the declared family (docs/design.md): each attack against its L2-matched Gaussian and its L-inf-matched
#: uniform noise, IDC gain over the seeds at m = 6
FAMILY = tuple((a, c) for a in ATTACKS for c in ("gauss-l2", "uniform-linf"))
PRIMARY = "idc_m6"


def distances(x: np.ndarray, seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(l2, linf) of each input from its seed over every value."""
    d = np.abs(x.reshape(len(x), -1).astype(np.float64) - seeds.reshape(len(seeds), -1))
    return np.sqrt((d * d).sum(1)), d.max(1)


def matched_noise(seeds, target, kind: str, norm: str, rng, value_range=(0.0, 1.0), steps: int = 50):
    """Noise of ``kind`` (gauss: N(0, 1); uniform: U(-1, 1) per value) added to each seed with a per-input scale
    found by bisection so that the clipped result's ``norm`` distance from its seed equals ``target`` (as near
    as clipping allows: where even the largest scale falls short, the largest is taken)."""
    lo, hi = value_range
    flat = seeds.reshape(len(seeds), -1).astype(np.float64)
    direction = rng.standard_normal(flat.shape) if kind == "gauss" else rng.uniform(-1.0, 1.0, flat.shape)
    target = np.asarray(target, np.float64)

    def dist(scale):
        moved = np.clip(flat + scale[:, None] * direction, lo, hi) - flat
        return np.sqrt((moved * moved).sum(1)) if norm == "l2" else np.abs(moved).max(1)

    low, high = np.zeros(len(flat)), np.full(len(flat), 1.0)
    for _ in range(30):  # grow the upper bound until it reaches the target (or the clipping saturates)
        short = dist(high) < target
        if not short.any():
            break
        high[short] *= 2
    for _ in range(steps):
        mid = (low + high) / 2
        below = dist(mid) < target
        low, high = np.where(below, mid, low), np.where(below, high, mid)
    scale = np.where(target > 0, high, 0.0)
    out = np.clip(flat + scale[:, None] * direction, lo, hi)
    return out.reshape(seeds.shape).astype(np.float32)


def random_transforms(network, seeds, labels, rng):
    """One transform per seed, drawn among TRANSFORMS, at idcgen's default parameters."""
    from idcgen.fuzz.mutators import MutationContext, make_mutator

    pick = rng.integers(len(TRANSFORMS), size=len(seeds))
    out = seeds.copy()
    for k, name in enumerate(TRANSFORMS):
        sel = np.flatnonzero(pick == k)
        if len(sel):
            ctx = MutationContext(network=network, labels=labels[sel], value_range=(0.0, 1.0))
            out[sel] = make_mutator(name).mutate(seeds[sel], rng, ctx)
    return out


class Copy:
    """One subject copy: its model, the analyses at each m and the fitted NC."""

    def __init__(self, dataset: str, copy: int, fit_train: int):
        from idcgen.analysis import analyze
        from idcgen.criteria import make_criterion
        from idcgen.framework import Network

        self.network = Network(load_subject(dataset, copy))
        (xa, ya), _ = training_sets(dataset)
        fit = np.random.default_rng(0).permutation(len(xa))[:fit_train]
        x_fit, y_fit = xa[fit], ya[fit]
        self.analyses = {m: analyze(self.network, x_fit, y_fit, m=m, random_state=0, progress=False) for m in MS}
        self.nc = make_criterion("nc").fit(self.network, x_fit)
        self.nlc = make_criterion("nlc").fit(self.network, x_fit)

    def coverage(self, x: np.ndarray) -> dict:
        out = {f"idc_m{m}": 100.0 * a.coverage(x).score for m, a in self.analyses.items()}
        out["nc"] = 100.0 * self.nc.coverage(self.network, x).score
        out["nlc"] = float(self.nlc.coverage(self.network, x).score)  # NLC's own units: no upper bound
        return out


def attacks_of(dataset: str) -> dict:
    """Attack name -> mutator spec for ``dataset``'s images."""
    return CIFAR_ATTACKS if dataset == "cifar10" else ATTACKS


def run_pair(subject: Copy, dataset: str, copy: int, state: int, n_seeds: int, x_test, y_test) -> list[dict]:
    from idcgen.fuzz.mutators import MutationContext, make_mutator

    network = subject.network
    rng = np.random.default_rng(1000 * copy + state)
    predicted = network.predict(x_test)
    right = np.flatnonzero(predicted == y_test)
    seeds_at = right[stratified(y_test[right], n_seeds, rng)]
    seeds, labels = x_test[seeds_at], y_test[seeds_at]
    wrong = rng.permutation(np.flatnonzero(predicted != y_test))[:n_seeds]
    base = {"dataset": dataset, "copy": copy, "state": state, "seeds": n_seeds}

    def row(name, kind, added, seconds=0.0, attack="", noise="", norm=""):
        r = dict(base, set=name, kind=kind, attack=attack, noise=noise, norm=norm, added=len(added))
        if len(added) and kind != "natural":
            l2, linf = distances(added, seeds)
            r.update(median_l2=float(np.median(l2)), median_linf=float(np.median(linf)))
            r.update(misclassified=100.0 * float((network.predict(added) != labels).mean()))
        else:
            r.update(median_l2="", median_linf="", misclassified=100.0 if kind == "natural" else "")
        r.update(subject.coverage(np.concatenate([seeds, added]) if len(added) else seeds))
        r["seconds"] = round(seconds, 1)
        return r

    rows = [row("seeds", "seeds", seeds[:0])]
    rows.append(row("natural", "natural", x_test[wrong]))
    started = time.perf_counter()
    rows.append(row("transform", "transform", random_transforms(network, seeds, labels, rng), 0.0))
    rows[-1]["seconds"] = round(time.perf_counter() - started, 1)
    for name, spec in attacks_of(dataset).items():
        started = time.perf_counter()
        mutator = make_mutator(spec)
        adv = np.concatenate(
            [
                mutator.mutate(seeds[i : i + 100], rng, MutationContext(network=network, labels=labels[i : i + 100]))
                for i in range(0, len(seeds), 100)
            ]
        )
        seconds = time.perf_counter() - started
        rows.append(row(name, "attack", adv, seconds, attack=name))
        l2, linf = distances(adv, seeds)
        for noise in NOISES:
            for norm in NORMS:
                x = matched_noise(seeds, l2 if norm == "l2" else linf, noise, norm, rng)
                rows.append(row(f"{noise}-{norm}@{name}", "matched", x, attack=name, noise=noise, norm=norm))
        print(f"  copy {copy} state {state}: {name} {seconds:.0f} s, IDC m=6 {rows[-5][PRIMARY]:.2f} %", flush=True)
    return rows


FIELDS = (
    "dataset copy state seeds set kind attack noise norm added misclassified median_l2 median_linf "
    "idc_m6 idc_m8 idc_m10 nc nlc seconds"
).split()


def read_runs(path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def gains(rows: list[dict], metric: str) -> dict:
    """(set, copy, state) -> the set's coverage minus the seeds' alone, in points; for NLC, which has no upper
    bound, the rise over the seeds' alone in % of theirs."""
    seeds = {(r["copy"], r["state"]): float(r[metric]) for r in rows if r["set"] == "seeds"}
    if metric == "nlc":
        return {
            (r["set"], r["copy"], r["state"]): 100.0 * (float(r[metric]) / seeds[(r["copy"], r["state"])] - 1.0)
            for r in rows
        }
    return {(r["set"], r["copy"], r["state"]): float(r[metric]) - seeds[(r["copy"], r["state"])] for r in rows}


def p_cell(p: float) -> str:
    return f"{p:.1e}" if p < 0.001 else f"{p:.3f}"


def copies_ahead(pairs: list, x: list, y: list) -> int:
    """On how many copies the mean of ``x`` over the copy's states is above that of ``y``."""
    copies = {c for c, _ in pairs}
    return sum(
        np.mean([a for a, p in zip(x, pairs) if p[0] == c]) > np.mean([b for b, p in zip(y, pairs) if p[0] == c])
        for c in copies
    )


def family_table(rows: list[dict]) -> list[dict]:
    """The declared family: per attack and control, the paired IDC gains at m = 6 over every pair."""
    g = gains(rows, PRIMARY)
    pairs = sorted({(c, s) for _, c, s in g}, key=lambda p: (int(p[0]), int(p[1])))
    out, ps = [], {}
    for attack, control in FAMILY:
        noise, norm = control.split("-")
        x = [g[(attack, *p)] for p in pairs]
        y = [g[(f"{noise}-{norm}@{attack}", *p)] for p in pairs]
        ps[(attack, control)] = wilcoxon(x, y)
        out.append(
            {
                "attack": attack,
                "control": control,
                "pairs": len(pairs),
                "attack gain": f"{np.mean(x):.2f}",
                "control gain": f"{np.mean(y):.2f}",
                "attack ahead": f"{sum(a > b for a, b in zip(x, y))}/{len(pairs)}",
                "copies ahead": f"{copies_ahead(pairs, x, y)}/{len({c for c, _ in pairs})}",
                "r": f"{rank_biserial(x, y):+.2f}",
                "p": ps[(attack, control)],
            }
        )
    adjusted = holm(ps)
    for r in out:
        r["Holm p"] = p_cell(adjusted[(r["attack"], r["control"])])
        r["p"] = p_cell(r["p"])
    return out


def secondary_table(rows: list[dict], metric: str) -> list[dict]:
    """Per attack: the mean gain (points over the seeds alone) of the attack and of each matched noise, with the
    natural misclassified and transform sets below."""
    g = gains(rows, metric)
    pairs = sorted({(c, s) for _, c, s in g})

    def mean(name):
        return f"{np.mean([g[(name, *p)] for p in pairs]):.2f}"

    out = []
    for attack in ATTACKS:
        r = {"set": attack, "attack": mean(attack)}
        r.update({f"{n}-{k}": mean(f"{n}-{k}@{attack}") for n in NOISES for k in NORMS})
        out.append(r)
    for name in ("natural", "transform"):
        out.append({"set": name, "attack": mean(name), **{f"{n}-{k}": "" for n in NOISES for k in NORMS}})
    return out


def published_secondary(rows: list[dict]) -> list[dict]:
    """The secondary table as docs/results.md gives it: per attack its mean gain at m = 6 beside its two declared
    controls', and at m = 8, m = 10, in NC and in NLC (rise in %) beside the largest of its four matched-noise
    gains; the natural and transform sets below."""
    means = {metric: gains(rows, metric) for metric in ("idc_m6", "idc_m8", "idc_m10", "nc", "nlc")}
    pairs = sorted({(c, s) for _, c, s in means["idc_m6"]})

    def mean(name, metric):
        return float(np.mean([means[metric][(name, *p)] for p in pairs]))

    matched = [f"{n}-{k}" for n in NOISES for k in NORMS]
    out = []
    for attack in ATTACKS:
        r = {"set": attack, "m = 6": f"{mean(attack, 'idc_m6'):.2f}"}
        r.update({f"matched {c}": f"{mean(f'{c}@{attack}', 'idc_m6'):.2f}" for c in ("gauss-l2", "uniform-linf")})
        for metric, shown in (("idc_m8", "m = 8"), ("idc_m10", "m = 10"), ("nc", "NC"), ("nlc", "NLC %")):
            r[shown] = f"{mean(attack, metric):.2f}"
            r[f"best matched, {shown}"] = f"{max(mean(f'{c}@{attack}', metric) for c in matched):.2f}"
        out.append(r)
    for label, name in (("natural misclassified", "natural"), ("random transform", "transform")):
        r = {k: "" for k in out[0]}
        r.update({"set": label, "m = 6": f"{mean(name, 'idc_m6'):.2f}", "m = 8": f"{mean(name, 'idc_m8'):.2f}"})
        r.update({"m = 10": f"{mean(name, 'idc_m10'):.2f}", "NC": f"{mean(name, 'nc'):.2f}"})
        r["NLC %"] = f"{mean(name, 'nlc'):.2f}"
        out.append(r)
    return out


def change_table(rows: list[dict]) -> list[dict]:
    """Per set kind: mean over pairs of the median L2, median L-inf, misclassification and IDC gain per unit of
    median L-inf at m = 6."""
    g = gains(rows, PRIMARY)
    out = []
    for name in [*ATTACKS, "transform"]:
        sel = [r for r in rows if r["set"] == name]
        l2 = np.mean([float(r["median_l2"]) for r in sel])
        linf = np.mean([float(r["median_linf"]) for r in sel])
        per = np.mean([g[(name, r["copy"], r["state"])] / float(r["median_linf"]) for r in sel])
        out.append(
            {
                "set": name,
                "median L2": f"{l2:.2f}",
                "median L-inf": f"{linf:.3f}",
                "misclassified %": f"{np.mean([float(r['misclassified']) for r in sel]):.1f}",
                "IDC gain m=6 (pp)": f"{np.mean([g[(name, r['copy'], r['state'])] for r in sel]):.2f}",
                "pp per unit L-inf": f"{per:.2f}",
            }
        )
    return out


def markdown(rows: list[dict]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def verdicts(folder, dataset: str) -> None:
    rows = read_runs(folder / "runs.csv")
    parts = [f"# RQ3/RQ4 with matched perturbation: {dataset}", "", "## The declared family (IDC m = 6)", ""]
    parts += [markdown(family_table(rows)), ""]
    for metric in ("idc_m6", "idc_m8", "idc_m10", "nc", "nlc"):
        unit = "% of the seeds' NLC" if metric == "nlc" else "points"
        parts += [f"## Mean gain over the seeds alone, {metric} ({unit})", "", markdown(secondary_table(rows, metric))]
        parts += [""]
    parts += ["## Secondary, as docs/results.md gives it (points over the seeds alone)", ""]
    parts += [markdown(published_secondary(rows)), ""]
    parts += ["## Change and IDC per unit of change", "", markdown(change_table(rows)), ""]
    figure(rows, dataset, folder / "gains.png")
    parts += ["![IDC gains of each attack and its matched noise](gains.png)", ""]
    (folder / "study.md").write_text("\n".join(parts))
    print("\n".join(parts))


def figure(rows: list[dict], dataset: str, path) -> None:
    """Per attack: its IDC gain at m = 6 beside its four matched-noise sets', a dot per pair and a bar for the
    mean."""
    from idcgen.plots import pyplot

    plt = pyplot()
    g = gains(rows, PRIMARY)
    pairs = sorted({(c, s) for _, c, s in g})
    arms = [("attack", "{a}", "tab:red")] + [
        (f"{n}-{k}", f"{n}-{k}@{{a}}", colour)
        for (n, k), colour in zip(
            [(n, k) for n in NOISES for k in NORMS], ["tab:blue", "lightsteelblue", "tab:green", "palegreen"]
        )
    ]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.16
    for j, (label, pattern, colour) in enumerate(arms):
        for i, attack in enumerate(ATTACKS):
            values = [g[(pattern.format(a=attack), *p)] for p in pairs]
            x = i + (j - 2) * width
            ax.bar(x, np.mean(values), width, color=colour, label=label if i == 0 else None)
            ax.plot([x] * len(values), values, ".", color="black", ms=2)
    ax.set_xticks(range(len(ATTACKS)), list(ATTACKS))
    ax.set_ylabel("IDC gain over the seeds, m = 6 (points)")
    ax.set_title(f"{dataset}: each attack beside noise matched to its per-input L2 or L-inf ({len(pairs)} pairs)")
    ax.legend(fontsize=7, ncol=5)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


#: the campaign of ``--campaign``: the attacks at idcgen's defaults (within DeepHunter's bounds) beside cheap
#: noise and transforms, so its report's per-mutator change table compares them in one run
CAMPAIGN_MUTATORS = "gauss,random_pixels,rotate,shift,brightness,contrast,fgsm,bim,pgd,cw,jsma,deepxplore"


def campaign(dataset: str, folder, fit_train: int, n_seeds: int, budget: int) -> None:
    """One fuzz campaign on copy 0 (m = 6, ``n_seeds`` correct test inputs, random state 0), exported and
    reported in ``folder/campaign``: the report's "IDC gained for the change it makes" table."""
    from idcgen.analysis import analyze
    from idcgen.export import export_campaign
    from idcgen.framework import Network
    from idcgen.fuzz.fuzzer import Fuzzer
    from idcgen.report import write_report

    network = Network(load_subject(dataset, 0))
    (xa, ya), _ = training_sets(dataset)
    fit = np.random.default_rng(0).permutation(len(xa))[:fit_train]
    analysis = analyze(network, xa[fit], ya[fit], m=6, random_state=0, progress=False)
    x_test, y_test = load_data("test", dataset)
    right = np.flatnonzero(network.predict(x_test) == y_test)
    seeds = right[stratified(y_test[right], n_seeds, np.random.default_rng(0))]
    fuzzer = Fuzzer(analysis, mutators=CAMPAIGN_MUTATORS, batch_size=64, random_state=0)
    out = folder / "campaign"
    if out.exists():
        raise SystemExit(f"error: {out} exists; remove it first")
    c = fuzzer.start(x_test[seeds], y_test[seeds], out, budget=budget)
    fuzzer.run(c, progress=False)
    c.close()
    print(write_report(c, exports=export_campaign(c, images=False)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist", choices=("mnist", "fashion-mnist", "cifar10", "embedded-mnist"))
    parser.add_argument("--copies", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--states", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--seeds", type=int, default=None, help="seeds a pair (default 200; 100 on cifar10)")
    parser.add_argument("--fit-train", type=int, default=3000, help="inputs of half A the analyses are fitted on")
    parser.add_argument("--out", default=None, help="default outputs/rq3_attacks/<dataset>")
    parser.add_argument("--verdicts", action="store_true", help="only the study's tables, from runs.csv")
    parser.add_argument("--publish", action="store_true", help="copy runs.csv to docs/data/rq3-attacks/<dataset>/")
    parser.add_argument("--campaign", action="store_true", help="one fuzz campaign on copy 0 with every attack")
    parser.add_argument("--budget", type=int, default=3000, help="--campaign's execs")
    args = parser.parse_args(argv)
    args.seeds = args.seeds or DEFAULT_SEEDS.get(args.dataset, 200)
    folder = OUTPUTS / "rq3_attacks" / args.dataset if args.out is None else Path(args.out)
    if args.verdicts:
        return verdicts(folder, args.dataset)
    if args.campaign:
        return campaign(args.dataset, folder, args.fit_train, args.seeds // 2, args.budget)
    if args.publish:
        target = ROOT / "docs" / "data" / "rq3-attacks" / args.dataset
        target.mkdir(parents=True, exist_ok=True)
        (target / "runs.csv").write_text((folder / "runs.csv").read_text())
        return print(f"wrote {target / 'runs.csv'}")
    settings = {
        "seeds": args.seeds,
        "fit_train": args.fit_train,
        "attacks": attacks_of(args.dataset),
        "transforms": TRANSFORMS,
        "measures": ["idc", "nc", "nlc"],  # pairs saved before NLC was measured are refused, not mixed in
    }
    (folder / "pairs").mkdir(parents=True, exist_ok=True)
    x_test, y_test = load_data("test", args.dataset)
    rows = []
    for copy in args.copies:
        subject = None
        for state in args.states:
            path = folder / "pairs" / f"c{copy}-s{state}.json"
            if path.exists():
                saved = json.loads(path.read_text())
                if saved["settings"] != json.loads(json.dumps(settings)):
                    raise SystemExit(f"error: {path} was made with other settings; remove it or give another --out")
                rows += saved["rows"]
                continue
            subject = subject or Copy(args.dataset, copy, args.fit_train)
            started = time.perf_counter()
            pair = run_pair(subject, args.dataset, copy, state, args.seeds, x_test, y_test)
            save_json(path, {"settings": settings, "rows": pair})
            print(f"copy {copy} state {state}: {time.perf_counter() - started:.0f} s", flush=True)
            rows += pair
    write_runs(folder / "runs.csv", rows)
    print(f"wrote {folder / 'runs.csv'} ({len(rows)} rows)")


def write_runs(path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, FIELDS, lineterminator="\n")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: f"{v:.4f}" if isinstance(v, float) else v for k, v in r.items() if k in FIELDS})


if __name__ == "__main__":
    main()
