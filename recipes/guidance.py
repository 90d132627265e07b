"""Which criterion should guide the fuzzer? The same campaign guided by IDC, by each other criterion, and by none.

    python recipes/guidance.py [--dataset mnist|fashion|cifar10] [--seeds 500] [--budget 20000] [--repeats 3]
                               [--guides idc nc kmnc nbc snac tknc lsc dsc none] [--out outputs/guidance/<dataset>]

Every run starts from the same seeds (``--seeds`` test inputs, as many of each class), spends the same
budget of execs with the same mutators (``--mutators``, by default idcgen's cheap default set without
``directed``, which steers towards IDC and so would not be neutral), and differs only in the guiding
criterion and the random state (repetition r uses random_state r for every guide). Every criterion is
fitted once on a fixed subset of the training data and measured in every run, whatever guides it.

Per run: findings per 1,000 execs (the misclassification oracle; a finding is kept once per IDC
combination, true label and prediction), distinct faults (idcgen.faults: the findings clustered within each
(true, predicted) pair on the model's penultimate-layer features, each cluster once), the share of findings that reproduce from their 8-bit image
(written as PNG, read back, run again: still the same wrong prediction), unique (true, predicted) pairs,
seeds with a finding, mean SSIM of findings to their root seeds, every criterion's coverage of the grown
corpus, and robustness after retraining with the kept mutants as ``idcgen harden`` does (its retraining
and perturbed test sets are reused): the model fine-tuned 1 epoch on the same training subset plus the
run's kept mutants (labelled as their root seed), then its accuracy on a fixed held-out test set, clean,
noisy, rotated, shifted and under FGSM. Each guide is compared with ``none`` by a two-sided
Mann-Whitney U test over the repetitions.

Writes ``<out>/runs/<guide>_r<r>.json`` (one per run: an interrupted study resumes where it stopped),
``runs.csv``/``runs.json`` (every run), ``guidance.csv`` and ``guidance.md`` (means, spreads and tests).
"""

from __future__ import annotations

import argparse
import io
import json
import time
from pathlib import Path

import numpy as np

from common import DATASETS, OUTPUTS, command_line, load_data, load_model

GUIDES = ("idc", "nc", "kmnc", "nbc", "snac", "tknc", "lsc", "dsc", "none")
CRITERIA = GUIDES[1:-1]
#: robustness test sets (the specs of idcgen.hardening.EVALUATIONS)
ROBUSTNESS = ("clean", "gauss (std 0.3)", "rotate (±30°)", "shift (±10 %)", "FGSM (eps 0.3)")


def default_mutators() -> str:
    from idcgen.fuzz.mutators import DEFAULT_MUTATORS
    return ",".join(s for s in DEFAULT_MUTATORS.split(",") if s != "directed")


def stratified(y: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n indices with the classes as even as they can be (classes taken in turn, each in random order)."""
    per_class = [rng.permutation(np.flatnonzero(y == c)) for c in np.unique(y)]
    order = [idx[i] for i in range(max(map(len, per_class))) for idx in per_class if i < len(idx)]
    return np.array(order[:n], dtype=np.int64)


class Study:
    """What every run shares: model, seeds, analysis, fitted criteria, training subset, test sets."""

    def __init__(self, args):
        from idcgen.analysis import analyze
        from idcgen.criteria import make_criterion
        from idcgen.fuzz.mutators import MutationContext, make_mutator
        from idcgen.hardening import EVALUATIONS, on_images
        from idcgen.framework import Network
        from idcgen.framework import load_model as load_file

        self.args = args
        self.model = load_file(args.model_file) if args.model_file else load_model(args.model, args.dataset)
        self.network = Network(self.model)
        x_train, y_train = load_data("train", args.dataset)
        x_test, y_test = load_data("test", args.dataset)
        rng = np.random.default_rng(0)
        fit = rng.permutation(len(x_train))[:args.fit_train]
        self.x_train, self.y_train = x_train[fit], y_train[fit]
        seeds = stratified(y_test, args.seeds, rng)
        rest = np.setdiff1d(np.arange(len(x_test)), seeds)   # never a seed: the robustness test set
        rest = rng.permutation(rest)[:args.eval]
        self.x_seeds, self.y_seeds = x_test[seeds], y_test[seeds]
        self.analysis = analyze(self.network, self.x_train, self.y_train, m=args.m, random_state=0, progress=False)
        self.criteria = [make_criterion(name).fit(self.network, self.x_train) for name in CRITERIA]
        self.value_range = tuple(self.analysis.convention.value_range)
        probe = self.fuzzer("none", 0)  # the images the fuzzer mutates (the model's own shape for CNNs)
        self.image_shape = tuple(probe.network.input_shape)
        self.model_shape = (-1,) + tuple(self.network.input_shape)
        self.x_eval, self.y_eval = x_test[rest].reshape((-1,) + self.image_shape), y_test[rest]
        images = on_images(self.network, self.image_shape)
        ctx = MutationContext(network=images, labels=self.y_eval, value_range=self.value_range)
        self.specs = {name: EVALUATIONS[name] for name in ROBUSTNESS}
        self.fixed = {name: make_mutator(spec).mutate(self.x_eval, np.random.default_rng(0), ctx)
                      for name, spec in self.specs.items() if spec and not make_mutator(spec).needs_model}

    def settings(self) -> dict:
        a = self.args
        return {"dataset": a.dataset, "model": a.model_file or a.model, "seeds": a.seeds, "budget": a.budget,
                "mutators": a.mutators, "m": a.m, "fit_train": len(self.x_train), "eval": len(self.y_eval),
                "batch_size": a.batch_size}

    def fuzzer(self, guide: str, random_state: int):
        from idcgen.fuzz.fuzzer import Fuzzer
        from idcgen.fuzz.mutators import parse_mutators
        return Fuzzer(self.analysis, mutators=parse_mutators(self.args.mutators), guide=guide,
                      measure=self.criteria, batch_size=self.args.batch_size, random_state=random_state)

    def robustness(self, model) -> dict:
        """Accuracy (%) on the held-out test sets; FGSM attacks this model (white-box)."""
        from idcgen.fuzz.mutators import MutationContext, make_mutator
        from idcgen.hardening import on_images
        from idcgen.framework import Network
        images = on_images(Network(model), self.image_shape)
        out = {}
        for name, spec in self.specs.items():
            if spec is None:
                xs = self.x_eval
            elif name in self.fixed:
                xs = self.fixed[name]
            else:
                ctx = MutationContext(network=images, labels=self.y_eval, value_range=self.value_range)
                xs = make_mutator(spec).mutate(self.x_eval, np.random.default_rng(0), ctx)
            out[name] = 100.0 * float((images.predict(xs) == self.y_eval).mean())
        return out

    def retrain(self, x_extra: np.ndarray, y_extra: np.ndarray, random_state: int):
        """Fine-tune (Adam lr 1e-4, idcgen.hardening.retrain) 1 epoch on the training subset plus ``x_extra``."""
        from idcgen.hardening import retrain
        x = np.concatenate([self.x_train.reshape(self.model_shape), x_extra.reshape(self.model_shape)])
        y = np.concatenate([self.y_train, y_extra])
        return retrain(self.model, x, y, mode="finetune", epochs=1, random_state=random_state)

    def run(self, guide: str, r: int) -> dict:
        from idcgen.faults import distinct_faults, failure_features
        started = time.perf_counter()
        fuzzer = self.fuzzer(guide, r)
        campaign = fuzzer.run(self.x_seeds, self.y_seeds, budget=self.args.budget, progress=False)
        fuzz_seconds = time.perf_counter() - started
        f = campaign.findings()
        n = len(f.get("id", ()))
        reproduce = reproduced(fuzzer.network, f, self.value_range) if n else 0
        c = campaign.corpus
        kept = np.flatnonzero(c.parent >= 0)
        robust = self.robustness(self.retrain(c.x[kept], c.label[kept], r))
        row = {"guide": guide, "repetition": r, "execs": campaign.execs, "findings": n,
               "findings_per_1k": 1000.0 * n / campaign.execs,
               # criterion-neutral: every valid mutant the oracle flagged, before findings are made unique per
               # IDC combination (a count that could favour IDC guidance)
               "flagged_per_1k": 1000.0 * campaign.flagged / campaign.execs,
               "reproduce_%": 100.0 * reproduce / n if n else 100.0,
               "unique_pairs": len({(int(a), int(b)) for a, b in zip(f.get("label", ()), f.get("prediction", ()))}),
               "distinct_faults": distinct_faults(failure_features(self.network, f["x"]), f["label"],
                                                  f["prediction"]).count if n else 0,   # idcgen/faults.py
               "seeds_failed": len(np.unique(f["root"])) if n else 0,
               "mean_ssim": float(np.mean(f["ssim"])) if n else float("nan"),
               "kept": len(kept), "fuzz_s": round(fuzz_seconds, 1)}
        row.update({f"cov_{name}": 100.0 * t.score for name, t in campaign.coverage.items()})
        row.update({f"acc {name}": value for name, value in robust.items()})
        row["seconds"] = round(time.perf_counter() - started, 1)
        return row


def reproduced(network, findings: dict, value_range) -> int:
    """How many findings, written as 8-bit PNG and read back, the model still gets wrong the same way."""
    from PIL import Image

    from idcgen.imageio import to_png
    lo, hi = value_range
    back = []
    for x in findings["x"]:
        buffer = io.BytesIO()
        to_png(x, value_range).save(buffer, format="PNG")
        image = np.asarray(Image.open(io.BytesIO(buffer.getvalue())), dtype=np.float32)
        back.append(image.reshape(x.shape) / 255 * (hi - lo) + lo)
    predictions = network.predict(np.stack(back).astype(np.float32))
    return int(((predictions == findings["prediction"]) & (predictions != findings["label"])).sum())


def mann_whitney(a, b) -> float:
    from scipy.stats import mannwhitneyu
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2 or len(b) < 2:
        return float("nan")
    if np.ptp(np.concatenate([a, b])) == 0:
        return 1.0
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def cell(values, digits: int = 1) -> str:
    values = np.asarray(values, float)
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{values.mean():.{digits}f} ± {values.std(ddof=1):.{digits}f}"


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
            row[f"p {k} vs none"] = (mann_whitney([r.get(k, np.nan) for r in by[g]], [r.get(k, np.nan) for r in base])
                                     if base and g != "none" else float("nan"))
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
    lines = [f"# Which criterion should guide the fuzzer? ({settings['dataset']}, {settings['model']})", "",
             f"Command: `{command}`", "",
             f"{settings['seeds']} seeds (test inputs, classes balanced), {settings['budget']} execs per run, "
             f"random states {rs}, mutators `{settings['mutators']}`, batch {settings['batch_size']}, IDC m = "
             f"{settings['m']}; criteria fitted on {settings['fit_train']} training inputs. Mean ± standard "
             "deviation over the repetitions; p: two-sided Mann-Whitney U of the runs against `none` (guidance.csv also "
             "has it for seeds with a finding and mean SSIM).", "",
             "## Failures", "",
             "| guide | findings / 1k execs | p | flagged / 1k execs | p | reproduce % | unique (true, pred) pairs | p "
             "| distinct faults | seeds with a finding | mean SSIM to seed | kept mutants | fuzz s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        g = row["guide"]
        lines.append(f"| {g} | {col(g, 'findings_per_1k', 2)} | {p(row, 'findings_per_1k')} | "
                     f"{col(g, 'flagged_per_1k', 1)} | {p(row, 'flagged_per_1k')} | "
                     f"{col(g, 'reproduce_%')} | {col(g, 'unique_pairs')} | {p(row, 'unique_pairs')} | "
                     f"{col(g, 'distinct_faults')} | "
                     f"{col(g, 'seeds_failed')} | {col(g, 'mean_ssim', 3)} | {col(g, 'kept', 0)} | {col(g, 'fuzz_s')} |")
    covs = [k for k in runs[0] if k.startswith("cov_")]
    lines += ["", "## Coverage of the grown corpus (%)", "",
              "| guide | " + " | ".join(k[4:].upper() for k in covs) + " |", "|---|" + "---|" * len(covs)]
    for g in guides:
        lines.append(f"| {g} | " + " | ".join(col(g, k) for k in covs) + " |")
    accs = [k for k in runs[0] if k.startswith("acc ")]
    lines += ["", f"## Accuracy (%) after fine-tuning with the kept mutants ({settings['eval']} held-out test inputs)",
              "", "| model | " + " | ".join(k[4:] for k in accs) + " |", "|---|" + "---|" * len(accs)]
    for name, values in references.items():
        lines.append(f"| {name} | " + " | ".join(cell([v[k[4:]] for v in values], 2) for k in accs) + " |")
    for g in guides:
        lines.append(f"| + kept mutants of `{g}` | " + " | ".join(col(g, k, 2) for k in accs) + " |")
    n = min(len(v) for v in by.values())
    lines += ["", f"With {n} runs per guide, the smallest two-sided Mann-Whitney p possible is "
              f"{mann_whitney(range(n), range(n, 2 * n)):.3f}; p values are not corrected for the "
              f"{len(guides) - 1} comparisons."]
    (out / "guidance.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return out / "guidance.md"


def write_json(path: Path, data) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)   # a run's file is there whole or not at all


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
    parser.add_argument("--fit-train", type=int, default=10_000,
                        help="training inputs (a fixed random subset) to fit IDC and the criteria and to fine-tune on")
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
    else:   # the model as it is, and fine-tuned on the training subset alone (no mutants)
        none = np.zeros((0,) + study.image_shape, np.float32), np.zeros(0, np.int64)
        references = {"original": [study.robustness(study.model)],
                      "fine-tuned, no mutants": [study.robustness(study.retrain(*none, r)) for r in range(args.repeats)]}
        write_json(reference_file, {"settings": settings, "references": references})

    runs = []
    jobs = [(g, r) for r in range(args.repeats) for g in args.guides]
    for i, (guide, r) in enumerate(jobs, 1):
        path = out / "runs" / f"{guide}_r{r}.json"
        if path.exists():
            saved = json.loads(path.read_text())
            if saved["settings"] != settings:
                raise SystemExit(f"error: {path} was made with other settings ({saved['settings']}); "
                                 f"remove it or give another --out")
            runs.append(saved["row"])
            print(f"[{i}/{len(jobs)}] {guide} r{r}: done before, kept", flush=True)
            continue
        row = study.run(guide, r)
        write_json(path, {"settings": settings, "row": row})
        runs.append(row)
        print(f"[{i}/{len(jobs)}] {guide} r{r}: {row['findings']} findings ({row['findings_per_1k']:.2f}/1k execs, "
              f"{row['reproduce_%']:.0f} % reproduce), {row['unique_pairs']} pairs, SSIM {row['mean_ssim']:.3f}, "
              f"IDC {row['cov_idc']:.1f} %, FGSM acc {row['acc FGSM (eps 0.3)']:.1f} % ({row['seconds']:.0f} s)",
              flush=True)

    with open(out / "runs.csv", "w", newline="") as handle:
        import csv
        writer = csv.DictWriter(handle, fieldnames=list(runs[0]))
        writer.writeheader()
        writer.writerows(runs)
    write_json(out / "runs.json", {"settings": settings, "references": references, "runs": runs})
    summarise(runs, references, settings, command_line(), out)
    print(f"total {time.perf_counter() - started:.0f} s -> {out}")


if __name__ == "__main__":
    main()
