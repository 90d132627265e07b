"""The guidance study to the field's standard: the eight guides and none, against noise-only and PGD baselines at
the same number of model calls, with distinct faults, validity, SSIM, robustness at equal retraining size, A12 and Holm.

    python recipes/superseded/guidance_study.py [--dataset mnist|fashion|cifar10] [--seeds 500] [--budget 10000]
                                                [--repeats 10] [--arms idc nc ... none noise pgd] [--retrain-size 200]
                                                [--validator lenet4] [--out outputs/guidance_study/<dataset>]

What is shared with ``recipes/superseded/guidance.py`` (its ``Study``): the model, the seeds (``--seeds`` test
inputs, classes balanced), the mutators (idcgen's cheap default set without ``directed``), IDC (m = 8) and the
other criteria fitted on a fixed training subset, the held-out robustness test sets. The arms:

- the nine guides (idc, nc, kmnc, nbc, snac, tknc, lsc, dsc, none), ``--budget`` execs each;
- ``noise``: no guidance (every valid mutant kept) and only the noise mutators (NOISE), run until it has made
  as many model calls as the ``none`` run of the same repetition;
- ``pgd``: no guidance and only PGD (eps 0.15, step 0.02, 10 iterations), with as many mutants as that number
  of model calls allows (a PGD mutant costs 11 calls).

Model calls: a forward pass of one input is one call, a gradient of one input one call; a run's calls are its
seeds' passes plus, per mutator, its execs times its cost (COSTS: FGSM 2, BIM and PGD 1 + iterations, the
relevance-targeted noise 2 for its relevance pass, every other mutator 1).

Per run: findings (misclassified valid mutants, once per IDC combination, label and prediction), (true,
predicted) pairs, distinct faults (idcgen.faults: findings clustered within each pair on the model's
penultimate-layer features; in the summary the findings of every run of the dataset are clustered together
and a run counts the distinct faults it reached; counted a second time in the validator's penultimate layer,
"independent faults", which do not depend on the model under test), validity (the share of findings that
``--validator``, a second model of another architecture trained on the same data, classifies as the seed's
label), mean SSIM to the seed,
and robustness after retraining with ``--retrain-size`` of the run's findings drawn at random (labelled as their
seeds; the same number for every arm, fewer only where a run found fewer), fine-tuned as in ``guidance.py``.
Each arm is compared with ``none`` (and ``idc`` with every other arm): Vargha-Delaney A12 and a two-sided
Mann-Whitney U, its p Holm-corrected over the comparisons of one metric.

Writes ``<out>/runs/<arm>_r<r>.json`` and ``.npz`` (findings' features in both models, labels, predictions),
resumable, and ``study.md``/``study.csv``. A run saved without the validator's features (made before they were
recorded) is replayed for them: its campaign run again with the same random state, its findings checked
against the saved labels and predictions (retraining is not repeated). A full study is long (about 1-3 hours
a dataset on 2 shared cores): run it under ``nice`` in the background; an interrupted study resumes where it
stopped.

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

from idcgen.files import atomic_npz
from kit import OUTPUTS, command_line, load_model, save_json, write_csv
from kit.stats import a12, holm, mann_whitney
from kit.study import GUIDES, Study, call_cost, default_mutators, load_run, run_calls, save_run

NOISE = "gauss,random_pixels,noise"
PGD = "pgd(eps=0.15, eps_iter=0.02, nb_iter=10)"
ARMS = GUIDES + ("noise", "pgd")
METRICS = (
    "faults_per_1k_calls",
    "independent_faults_per_1k_calls",
    "findings_per_1k_calls",
    "pairs",
    "validity_%",
    "mean_ssim",
)


class GuidanceStudy(Study):
    """``guidance.Study`` with the baselines, the validator and the equal-size retraining."""

    def __init__(self, args):
        super().__init__(args)
        from idcgen.framework import Network

        self.validator = Network(load_model(args.validator, args.dataset))

    def settings(self) -> dict:
        return dict(
            super().settings(), validator=self.args.validator, retrain_size=self.args.retrain_size, noise=NOISE, pgd=PGD
        )

    def campaign_for(self, arm: str, r: int, calls: int | None):
        from idcgen.fuzz.fuzzer import Fuzzer
        from idcgen.fuzz.mutators import parse_mutators

        if arm in GUIDES:
            fuzzer, budget = self.fuzzer(arm, r), self.args.budget
        else:
            if calls is None:
                raise SystemExit(
                    f"the {arm} baseline needs the calls of the none run of repetition {r}: run none first"
                )
            mutators = NOISE if arm == "noise" else PGD
            fuzzer = Fuzzer(
                self.analysis,
                mutators=parse_mutators(mutators),
                guide="none",
                measure=self.criteria,
                batch_size=self.args.batch_size,
                random_state=r,
            )
            budget = max(1, (calls - len(self.x_seeds)) // call_cost(mutators.split(",")[0]))
        return fuzzer, fuzzer.run(self.x_seeds, self.y_seeds, budget=budget, progress=False)

    def run_arm(self, arm: str, r: int, calls: int | None) -> tuple[dict, dict]:
        from idcgen.faults import distinct_faults, failure_features

        started = time.perf_counter()
        fuzzer, campaign = self.campaign_for(arm, r, calls)
        f = campaign.findings()
        n = len(f.get("id", ()))
        used = run_calls(campaign)
        features = failure_features(self.network, f["x"]) if n else np.zeros((0, 1), np.float32)
        independent = self.independent_features(f, n)
        labels = f["label"] if n else np.zeros(0, np.int64)
        predictions = f["prediction"] if n else np.zeros(0, np.int64)
        valid = (self.validator.predict(f["x"].reshape(self.model_shape)) == labels) if n else np.zeros(0, bool)
        rng = np.random.default_rng(1000 + r)
        take = rng.permutation(n)[: self.args.retrain_size]
        robust = self.robustness(
            self.retrain(f["x"][take] if n else f.get("x", np.zeros((0,) + self.image_shape)), labels[take], r)
        )
        row = {
            "arm": arm,
            "repetition": r,
            "execs": campaign.execs,
            "calls": used,
            "findings": n,
            "findings_per_1k_calls": 1000.0 * n / used,
            "faults_in_run": distinct_faults(features, labels, predictions).count if n else 0,
            "pairs": len({(int(a), int(b)) for a, b in zip(labels, predictions)}),
            "validity_%": 100.0 * float(valid.mean()) if n else float("nan"),
            "mean_ssim": float(np.mean(f["ssim"])) if n else float("nan"),
            "retrain_n": int(len(take)),
            "kept": int((campaign.corpus.parent >= 0).sum()),
        }
        row.update({f"acc {name}": value for name, value in robust.items()})
        row["seconds"] = round(time.perf_counter() - started, 1)
        return row, {
            "features": features,
            "validator_features": independent,
            "label": labels,
            "prediction": predictions,
        }

    def independent_features(self, findings: dict, n: int) -> np.ndarray:
        """The findings' features in the validator's penultimate layer: a fault extractor independent of the
        model under test (whose penultimate layer is also IDC's subject layer on the LeNets)."""
        from idcgen.faults import failure_features

        if not n:
            return np.zeros((0, 1), np.float32)
        return failure_features(self.validator, findings["x"].reshape(self.model_shape))

    def replay_features(self, arm: str, r: int, calls: int | None, saved: dict, arrays: dict) -> np.ndarray:
        """A run made before the independent extractor existed: run its campaign again (same random state,
        so the same findings; checked against the saved labels and predictions) for the validator's features.
        Retraining is not repeated."""
        _, campaign = self.campaign_for(arm, r, calls)
        f = campaign.findings()
        n = len(f.get("id", ()))
        if n != saved["findings"] or (
            n
            and (
                not np.array_equal(f["label"], arrays["label"])
                or not np.array_equal(f["prediction"], arrays["prediction"])
            )
        ):
            raise SystemExit(
                f"error: replaying {arm} r{r} gave {n} findings, not the {saved['findings']} saved: "
                "the campaign is not reproducible here; remove the run to make it again"
            )
        return self.independent_features(f, n)


#: the two fault extractors: the model under test's penultimate layer, and the validator's (independent of it)
EXTRACTORS = {"faults": "features", "independent_faults": "validator_features"}


def add_faults(runs: list[dict], arrays: dict) -> dict:
    """Cluster the findings of every run together, once per extractor; each run's distinct faults and faults
    per 1,000 calls. Returns a sentence per extractor saying how many faults all runs hold."""
    from idcgen.faults import distinct_faults

    keys = [(r["arm"], r["repetition"]) for r in runs]
    sizes = [len(arrays[k]["label"]) for k in keys]
    labels = np.concatenate([arrays[k]["label"] for k in keys])
    predictions = np.concatenate([arrays[k]["prediction"] for k in keys])
    notes = {}
    for column, key in EXTRACTORS.items():
        width = max((arrays[k][key].shape[1] for k, size in zip(keys, sizes) if size), default=1)
        features = np.concatenate([arrays[k][key].reshape(-1, width) for k in keys])
        faults = distinct_faults(features, labels, predictions)
        start = 0
        for run, size in zip(runs, sizes):
            run[column] = faults.hit(np.arange(start, start + size)) if size else 0
            run[f"{column}_per_1k_calls"] = 1000.0 * run[column] / run["calls"]
            start += size
        notes[column] = (
            f"{faults.count} distinct faults among the {len(features)} findings of all {len(runs)} "
            f"runs ({faults.pairs} (true, predicted) pairs)"
        )
    notes["method"] = faults.method
    return notes


def shown_p(p: float) -> str:
    return "" if np.isnan(p) else f"{p:.1e}" if p < 0.001 else f"{p:.3f}"


def summarise(runs: list[dict], references: dict, settings: dict, fault_note: dict, command: str, out: Path) -> Path:
    arms = [a for a in ARMS if any(r["arm"] == a for r in runs)]
    by = {a: [r for r in runs if r["arm"] == a] for a in arms}
    accs = [k for k in runs[0] if k.startswith("acc ")]
    metrics = list(METRICS) + accs

    def values(arm, key):
        return [r[key] for r in by[arm]]

    def cell(v, digits):
        v = np.asarray(v, float)
        if len(v) == 1:
            return f"{v[0]:.{digits}f}"
        return f"{np.nanmean(v):.{digits}f} ± {np.nanstd(v, ddof=1):.{digits}f}"

    tests = {}
    for against, family in (("none", [a for a in arms if a != "none"]), ("idc", [a for a in arms if a != "idc"])):
        if against not in by:
            continue
        for k in metrics:
            p = {a: mann_whitney(values(a, k), values(against, k)) for a in family}
            adjusted = holm(p)
            for a in family:
                tests[(against, a, k)] = (a12(values(a, k), values(against, k)), p[a], adjusted[a])
    rows = []
    for a in arms:
        row = {"arm": a, "runs": len(by[a])}
        for k in ("calls", "findings", "faults", "independent_faults", "faults_in_run", "kept", "retrain_n") + tuple(
            metrics
        ):
            v = np.asarray(values(a, k), float)
            row[k], row[k + " std"] = float(np.nanmean(v)), float(np.nanstd(v, ddof=1)) if len(v) > 1 else 0.0
        for (against, other, k), (effect, p, adjusted) in tests.items():
            if other == a:
                row[f"A12 {k} vs {against}"], row[f"p {k} vs {against}"], row[f"Holm p {k} vs {against}"] = (
                    effect,
                    p,
                    adjusted,
                )
        rows.append(row)
    write_csv(out / "study.csv", rows)

    def test(arm, k, against="none"):
        if (against, arm, k) not in tests:
            return "", ""
        effect, _, adjusted = tests[(against, arm, k)]
        return f"{effect:.2f}", shown_p(adjusted)

    n = min(len(v) for v in by.values())
    lines = [
        f"# Guidance study ({settings['dataset']}, {settings['model']})",
        "",
        f"Command: `{command}`",
        "",
        f"{settings['seeds']} seeds, {settings['budget']} execs per guided run; noise ({NOISE}) and PGD ({PGD}) "
        f"baselines at the calls of the `none` run of the same repetition; {n} runs per arm at least. "
        f"Validity: the share of findings {settings['validator']} classifies as the seed's label. Faults "
        f"(all runs' findings clustered together; {fault_note['method']}), counted twice: in the penultimate-"
        f"layer features of the model under test ({fault_note['faults']}) and, independent of that model, in "
        f"those of the validator {settings['validator']} ({fault_note['independent_faults']}). A12 and "
        f"Holm-corrected p (two-sided Mann-Whitney U, over the {len(arms) - 1} comparisons of each metric) "
        "against `none`.",
        "",
        "| arm | calls | faults / 1k calls | A12 | Holm p | independent faults / 1k calls | A12 | Holm p "
        "| findings / 1k calls | A12 | Holm p | pairs | A12 | Holm p | validity % | A12 | Holm p | mean SSIM "
        "| A12 | Holm p | faults | independent faults | kept |",
        "|---|" + "---|" * 22,
    ]
    for a in arms:
        cells = [cell(values(a, "calls"), 0)]
        for k, digits in zip(METRICS, (2, 2, 2, 1, 1, 3)):
            cells += [cell(values(a, k), digits), *test(a, k)]
        cells += [cell(values(a, "faults"), 1), cell(values(a, "independent_faults"), 1), cell(values(a, "kept"), 0)]
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"## Accuracy (%) after fine-tuning with {settings['retrain_size']} findings of each run "
        f"({settings['eval']} held-out test inputs)",
        "",
        "| model | " + " | ".join(f"{k[4:]} | A12 | Holm p" for k in accs) + " |",
        "|---|" + "---|" * (3 * len(accs)),
    ]
    for name, vals in references.items():
        lines.append(f"| {name} | " + " | ".join(f"{cell([v[k[4:]] for v in vals], 2)} | | " for k in accs) + " |")
    for a in arms:
        lines.append(
            f"| + findings of `{a}` | "
            + " | ".join(
                f"{cell(values(a, k), 2)} | {' | '.join(test(a, k))}"
                if test(a, k)[0]
                else f"{cell(values(a, k), 2)} | | "
                for k in accs
            )
            + " |"
        )
    if "idc" in by:
        lines += [
            "",
            "## IDC guidance against every other arm (A12 of idc over the arm; Holm p over the arms)",
            "",
            "| arm | " + " | ".join(f"{k} A12 | Holm p" for k in METRICS) + " |",
            "|---|" + "---|" * (2 * len(METRICS)),
        ]
        for a in arms:
            if a == "idc":
                continue
            cells = []
            for k in METRICS:
                effect, _, adjusted = tests[("idc", a, k)]
                cells += [f"{1 - effect:.2f}", shown_p(adjusted)]
            lines.append(f"| {a} | " + " | ".join(cells) + " |")
    (out / "study.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return out / "study.md"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dataset", default="mnist", choices=("mnist", "fashion", "fashion-mnist", "cifar10", "embedded-mnist")
    )
    parser.add_argument("--model", default=None, help="recipe model name (default lenet5, or cifar10_cnn)")
    parser.add_argument("--model-file", default=None)
    parser.add_argument(
        "--validator", default=None, help="recipe model that judges validity (default lenet4, or resnet20 for cifar10)"
    )
    parser.add_argument("--seeds", type=int, default=500)
    parser.add_argument("--budget", type=int, default=10_000, help="execs of each guided run")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    parser.add_argument("--retrain-size", type=int, default=200, help="findings of each run to retrain with")
    parser.add_argument("--m", type=int, default=8)
    parser.add_argument("--fit-train", type=int, default=10_000)
    parser.add_argument("--eval", type=int, default=2_000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    args.dataset = "fashion-mnist" if args.dataset == "fashion" else args.dataset
    args.model = args.model or ("cifar10_cnn" if args.dataset == "cifar10" else "lenet5")
    args.validator = args.validator or ("resnet20" if args.dataset == "cifar10" else "lenet4")
    args.mutators = default_mutators()
    for name in ("seeds", "budget", "repeats", "retrain_size", "fit_train", "eval"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    out = Path(args.out) if args.out else OUTPUTS / "guidance_study" / args.dataset
    (out / "runs").mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    study = GuidanceStudy(args)
    settings = study.settings()
    print(f"setup {time.perf_counter() - started:.0f} s: {settings}", flush=True)
    reference_file = out / "runs" / "references.json"
    if reference_file.exists() and json.loads(reference_file.read_text())["settings"] == settings:
        references = json.loads(reference_file.read_text())["references"]
    else:
        none = np.zeros((0,) + study.image_shape, np.float32), np.zeros(0, np.int64)
        references = {
            "original": [study.robustness(study.model)],
            "fine-tuned, no findings": [study.robustness(study.retrain(*none, r)) for r in range(3)],
        }
        save_json(reference_file, {"settings": settings, "references": references})
    arms = [a for a in ARMS if a in args.arms]
    baselines_last = [a for a in arms if a in GUIDES] + [a for a in arms if a not in GUIDES]
    jobs = [(a, r) for r in range(args.repeats) for a in baselines_last]
    runs, arrays = [], {}
    for i, (arm, r) in enumerate(jobs, 1):
        path = out / "runs" / f"{arm}_r{r}.json"
        if path.exists():
            row, arrays[(arm, r)] = load_run(path, settings)
            if "validator_features" in arrays[(arm, r)]:
                print(f"[{i}/{len(jobs)}] {arm} r{r}: done before, kept", flush=True)
            else:
                none = next((x for x in runs if x["arm"] == "none" and x["repetition"] == r), None)
                took = time.perf_counter()
                arrays[(arm, r)]["validator_features"] = study.replay_features(
                    arm, r, none["calls"] if none else None, row, arrays[(arm, r)]
                )
                atomic_npz(path.with_suffix(".npz"), arrays[(arm, r)])
                print(
                    f"[{i}/{len(jobs)}] {arm} r{r}: done before; replayed for the independent fault features "
                    f"({time.perf_counter() - took:.0f} s)",
                    flush=True,
                )
        else:
            none = next((x for x in runs if x["arm"] == "none" and x["repetition"] == r), None)
            row, arrays[(arm, r)] = study.run_arm(arm, r, none["calls"] if none else None)
            save_run(path, settings, row, arrays[(arm, r)])
            print(
                f"[{i}/{len(jobs)}] {arm} r{r}: {row['calls']} calls, {row['findings']} findings "
                f"({row['findings_per_1k_calls']:.2f}/1k calls), {row['faults_in_run']} faults in the run, "
                f"{row['pairs']} pairs, validity {row['validity_%']:.1f} %, SSIM {row['mean_ssim']:.3f} "
                f"({row['seconds']:.0f} s)",
                flush=True,
            )
        runs.append(row)
    fault_note = add_faults(runs, arrays)
    write_csv(out / "runs.csv", runs)
    summarise(runs, references, settings, fault_note, command_line(), out)
    print(f"total {time.perf_counter() - started:.0f} s -> {out}")


if __name__ == "__main__":
    main()
