"""What the guidance recipes share (recipes/superseded/guidance.py and guidance_study.py): the guides compared,
the study's setting (model, seeds, analysis, fitted criteria, test sets), one fuzzing run and the check that
findings survive being written as PNG."""

from __future__ import annotations

import io
import re
import time

import numpy as np

from .data import load_data
from .models import load_model

GUIDES = ("idc", "nc", "kmnc", "nbc", "snac", "tknc", "lsc", "dsc", "none")


CRITERIA = GUIDES[1:-1]


#: robustness test sets (the specs of idcgen.hardening.EVALUATIONS)
ROBUSTNESS = ("clean", "gauss (std 0.3)", "rotate (±30°)", "shift (±10 %)", "FGSM (eps 0.3)")


def default_mutators() -> str:
    from idcgen.fuzz.mutators import DEFAULT_MUTATORS

    return ",".join(s for s in DEFAULT_MUTATORS.split(",") if s != "directed")


def call_cost(spec: str) -> int:
    """Model calls per mutant of a mutator spec: a forward pass of one input is one call, a gradient one call
    (FGSM 2, BIM and PGD 1 + iterations, directed 1 + steps, the relevance-targeted noise 2 for its relevance
    pass, others 1)."""
    name = spec.split("(")[0].strip()
    iterations = re.search(r"nb_iter\s*=\s*(\d+)", spec)
    if name in ("bim", "pgd"):
        return 1 + (int(iterations.group(1)) if iterations else 10)
    if name == "directed":  # a gradient per step, then the forward pass
        steps = re.search(r"steps\s*=\s*(\d+)", spec)
        return 1 + (int(steps.group(1)) if steps else 5)
    return 2 if name in ("fgsm", "relevant_pixels") else 1


def run_calls(campaign) -> int:
    """A campaign's model calls: its seeds' passes plus, per mutator, its execs times its cost."""
    return int(campaign.seed_execs + sum(s.execs * call_cost(name) for name, s in campaign.mutator_stats.items()))


def save_run(path, settings: dict, row: dict, arrays: dict) -> None:
    """A finished study run: its arrays in ``<path>.npz``, then its settings and row in ``path`` (JSON), written
    last so that the run counts as done only once both exist (an interrupted study resumes)."""
    from idcgen.files import atomic_npz

    from .tables import save_json

    atomic_npz(path.with_suffix(".npz"), arrays)
    save_json(path, {"settings": settings, "row": row})


def load_run(path, settings: dict) -> tuple[dict, dict]:
    """The row and arrays of a run saved by ``save_run``; SystemExit when it was made with other settings."""
    import json

    saved = json.loads(path.read_text())
    if saved["settings"] != settings:
        raise SystemExit(f"error: {path} was made with other settings; remove it or give another --out")
    with np.load(path.with_suffix(".npz")) as data:
        return saved["row"], {k: data[k] for k in data.files}


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
        from idcgen.framework import Network
        from idcgen.framework import load_model as load_file
        from idcgen.fuzz.mutators import MutationContext, make_mutator
        from idcgen.hardening import EVALUATIONS, on_images

        self.args = args
        self.model = load_file(args.model_file) if args.model_file else load_model(args.model, args.dataset)
        self.network = Network(self.model)
        x_train, y_train = load_data("train", args.dataset)
        x_test, y_test = load_data("test", args.dataset)
        rng = np.random.default_rng(0)
        fit = rng.permutation(len(x_train))[: args.fit_train]
        self.x_train, self.y_train = x_train[fit], y_train[fit]
        seeds = stratified(y_test, args.seeds, rng)
        rest = np.setdiff1d(np.arange(len(x_test)), seeds)  # never a seed: the robustness test set
        rest = rng.permutation(rest)[: args.eval]
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
        self.fixed = {
            name: make_mutator(spec).mutate(self.x_eval, np.random.default_rng(0), ctx)
            for name, spec in self.specs.items()
            if spec and not make_mutator(spec).needs_model
        }

    def settings(self) -> dict:
        a = self.args
        return {
            "dataset": a.dataset,
            "model": a.model_file or a.model,
            "seeds": a.seeds,
            "budget": a.budget,
            "mutators": a.mutators,
            "m": a.m,
            "fit_train": len(self.x_train),
            "eval": len(self.y_eval),
            "batch_size": a.batch_size,
        }

    def fuzzer(self, guide: str, random_state: int):
        from idcgen.fuzz.fuzzer import Fuzzer
        from idcgen.fuzz.mutators import parse_mutators

        return Fuzzer(
            self.analysis,
            mutators=parse_mutators(self.args.mutators),
            guide=guide,
            measure=self.criteria,
            batch_size=self.args.batch_size,
            random_state=random_state,
        )

    def robustness(self, model) -> dict:
        """Accuracy (%) on the held-out test sets; FGSM attacks this model (white-box)."""
        from idcgen.framework import Network
        from idcgen.fuzz.mutators import MutationContext, make_mutator
        from idcgen.hardening import on_images

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
        row = {
            "guide": guide,
            "repetition": r,
            "execs": campaign.execs,
            "findings": n,
            "findings_per_1k": 1000.0 * n / campaign.execs,
            # criterion-neutral: every valid mutant the oracle flagged, before findings are made unique per
            # IDC combination (a count that could favour IDC guidance)
            "flagged_per_1k": 1000.0 * campaign.flagged / campaign.execs,
            "reproduce_%": 100.0 * reproduce / n if n else 100.0,
            "unique_pairs": len({(int(a), int(b)) for a, b in zip(f.get("label", ()), f.get("prediction", ()))}),
            "distinct_faults": distinct_faults(
                failure_features(self.network, f["x"]), f["label"], f["prediction"]
            ).count
            if n
            else 0,  # idcgen/faults.py
            "seeds_failed": len(np.unique(f["root"])) if n else 0,
            "mean_ssim": float(np.mean(f["ssim"])) if n else float("nan"),
            "kept": len(kept),
            "fuzz_s": round(fuzz_seconds, 1),
        }
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
