"""What the guidance studies of subject copies share (recipes/superseded/guidance_v3.py, recipes/guidance_v4.py):
the fuzzer that records every flagged mutant, the pairs (copy, state), the subjects' fingerprint, the valid
failures of many runs stacked, and paired comparisons."""

from __future__ import annotations

import numpy as np

from .data import load_data
from .study import load_run, save_run, stratified
from .subjects import load_subject, subject_path, training_sets


def study_fuzzer(
    analysis,
    *,
    keep_rate: float | None = None,
    energy: float | None = None,
    per_class=None,
    matched: bool = False,
    **kwargs,
):
    """idcgen's Fuzzer that also records every flagged mutant, kept or not, and, given ``keep_rate``, keeps each
    valid mutant with that probability instead of by coverage (a random-keep control; guide "none").

    ``energy`` (guide "none": every valid mutant kept): IDC as a scheduler. Parents are drawn with DeepHunter's
    weight times ``energy`` for the entries that were the first of the corpus to reach their IDC combination
    (seeds included), times 1 for the others. idcgen's schedulers see only fuzz counts, hence ``_parents`` here.

    ``per_class`` ({class: analysis of that class}, guide "idc"): a valid mutant is kept when it reaches a
    combination of its seed's class's analysis not yet covered for that class (the paper's per-class IDC).

    ``matched`` (guide "none"): the timing-matched control (docs/design.md, "The timing-matched control"). A
    shadow tracker, from the seeds' coverage, counts at each step the valid mutants IDC would keep (those that
    reach a combination it has not marked, which it then marks), and the step keeps as many valid mutants
    drawn at random: IDC's count at IDC's moments, chosen blind."""
    from idcgen.fuzz.fuzzer import Fuzzer

    class StudyFuzzer(Fuzzer):
        def __init__(self):
            super().__init__(analysis, **kwargs)
            self.failures: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
            self.favoured: list[bool] = []  # per corpus entry, in corpus order (energy)
            self.class_trackers: dict = {}  # class -> tracker of its analysis (per_class)
            self.shadow = None  # what IDC would have covered by now (matched)

        def step(self, c, left):
            if energy is not None and not self.favoured:  # the seeds: the first of each combination
                first = np.zeros(len(c.corpus), bool)
                first[np.unique(c.corpus.combination, return_index=True)[1]] = True
                self.favoured = first.tolist()
            if per_class is not None and not self.class_trackers:
                for k, class_analysis in per_class.items():
                    seeds = c.corpus.x[c.corpus.label == k]
                    self.class_trackers[k] = class_analysis.tracker(seeds if len(seeds) else None)
            if matched and self.shadow is None:
                self.shadow = analysis.tracker()
                self.shadow.update(c.corpus.combination)  # the seeds' combinations
            step = super().step(c, left)
            if step.error is not None:
                return step
            if matched:
                rows = np.flatnonzero(step.valid)
                count = int(self.shadow.update(step.combinations[rows]).sum())
                drawn = np.random.default_rng([self.random_state, step.number, 11]).choice(rows, count, replace=False)
                step.keep = np.zeros(len(step.valid), bool)
                step.keep[drawn] = True
            if keep_rate is not None:  # drawn from (random state, step): the same draws on every rerun
                draws = np.random.default_rng([self.random_state, step.number, 7]).random(len(step.valid))
                step.keep = step.valid & (draws < keep_rate)
            if per_class is not None:
                step.keep = self._class_keep(c, step)
            if energy is not None:  # the kept join the corpus in this order (Campaign.record)
                self.favoured += c.tracker.would_cover(step.combinations[step.keep]).tolist()
            flagged = np.flatnonzero(step.flagged)
            if flagged.size:
                labels = c.corpus.label[c.corpus.root[step.parents[flagged]]]
                self.failures.append((step.mutants[flagged], labels, step.predictions[flagged]))
            return step

        def _class_keep(self, c, step) -> np.ndarray:
            keep = np.zeros(len(step.valid), bool)
            labels = c.corpus.label[c.corpus.root[step.parents]]
            for k, tracker in self.class_trackers.items():
                rows = np.flatnonzero(step.valid & (labels == k))
                if rows.size:  # marked covered now: the study keeps exactly these
                    keep[rows] = tracker.update(per_class[k].ids(step.mutants[rows]))
            return keep

        def _parents(self, c, mutator, n):
            if energy is None:
                return super()._parents(c, mutator, n)
            weight = self.scheduler.weights(c.corpus.fuzz_count) * np.where(self.favoured, energy, 1.0)
            eligible = np.flatnonzero(~c.corpus.affine) if mutator.moves_reference else np.arange(len(weight))
            cdf = np.cumsum(weight[eligible])  # inverse-CDF sampling, as BatchPrioritization.pick
            return eligible[np.minimum(np.searchsorted(cdf, c.rng.random(n) * cdf[-1], side="right"), len(cdf) - 1)]

    return StudyFuzzer()


def pair_state(copy: int, state: int) -> int:
    """The fuzzer's random state of pair (copy, state): different for every pair."""
    return 1000 * copy + state


def subjects_fingerprint(dataset: str, copies: int) -> str:
    """A digest of the weight files of the copies and the extractor, so that runs made on other subjects are
    never mixed in."""
    import hashlib

    digest = hashlib.sha256()
    for copy in [*range(copies), None]:
        path = subject_path(dataset, copy)
        digest.update(path.read_bytes() if path.exists() else b"missing")
    return digest.hexdigest()[:16]


def stacked(runs: list[dict], arrays: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """The valid failures of ``runs`` one after another: features, labels, predictions, and each run's count."""
    keys = [(r["arm"], r["copy"], r["state"]) for r in runs]
    sizes = [len(arrays[k]["label"]) for k in keys]
    width = max((arrays[k]["features"].shape[1] for k, n in zip(keys, sizes) if n), default=1)
    features = np.concatenate([arrays[k]["features"].reshape(n, width) for k, n in zip(keys, sizes)])
    labels = np.concatenate([arrays[k]["label"] for k in keys])
    return features, labels, np.concatenate([arrays[k]["prediction"] for k in keys]), sizes


def paired(runs: list[dict], a: str, b: str, key: str) -> tuple[np.ndarray, np.ndarray, list]:
    """The values of ``key`` for arms a and b on the pairs (copy, state) both ran, and those pairs."""
    by = {(r["arm"], r["copy"], r["state"]): r[key] for r in runs}
    common = sorted({(c, s) for (arm, c, s) in by if arm == a} & {(c, s) for (arm, c, s) in by if arm == b})
    return np.array([by[(a, *p)] for p in common], float), np.array([by[(b, *p)] for p in common], float), common


def copies_ahead(x: np.ndarray, y: np.ndarray, pairs: list) -> str:
    """On how many subject copies a's mean over the copy's pairs is above b's: "k/n"."""
    copy = np.array([c for c, _ in pairs])
    copies = np.unique(copy)
    ahead = sum(x[copy == c].mean() > y[copy == c].mean() for c in copies)
    return f"{ahead}/{len(copies)}"


def shown_p(p: float) -> str:
    return "" if np.isnan(p) else f"{p:.1e}" if p < 0.001 else f"{p:.3f}"


def mean_sd(values, digits: int) -> str:
    v = np.asarray(values, float)
    return f"{np.nanmean(v):.{digits}f} ± {np.nanstd(v, ddof=1):.{digits}f}" if len(v) > 1 else f"{v[0]:.{digits}f}"


def judged_failures(fuzzer, extractor, input_shape: tuple) -> dict:
    """Every failure a study fuzzer recorded, judged by the extractor: ``x``, ``label``, ``prediction``,
    ``features`` (the extractor's default layer, flattened) and ``valid`` (the extractor gives the seed's label)."""
    from idcgen.data import fit_to_model

    if fuzzer.failures:
        x, labels, predictions = (np.concatenate(part) for part in zip(*fuzzer.failures))
    else:
        x, labels, predictions = np.zeros((0, *input_shape), np.float32), np.zeros(0, int), np.zeros(0, int)
    layer = extractor.default_layer()
    if len(x):
        probs, (features,) = extractor.forward(fit_to_model(x, extractor.input_shape), (layer,))
        features, valid = features.reshape(len(x), -1), probs.argmax(1) == labels
    else:
        features, valid = np.zeros((0, extractor.neuron_count(layer)), np.float32), np.zeros(0, bool)
    return {"x": x, "label": labels, "prediction": predictions, "features": features, "valid": valid}


def valid_arrays(judged: dict) -> dict:
    """What a run saves of its valid failures: the extractor's features, labels and predictions."""
    valid = judged["valid"]
    return {
        "features": judged["features"][valid].astype(np.float32),
        "label": judged["label"][valid].astype(np.int64),
        "prediction": judged["prediction"][valid].astype(np.int64),
    }


def copies_to_run(args) -> list[int]:
    """The copies a run goes through: all ``args.copies``, or ``args.only_copies`` of them (a second process on
    the other core takes other copies; the summary waits for a run over all)."""
    only = getattr(args, "only_copies", None)
    return [c for c in range(args.copies) if not only or c in only]


def run_pairs(args, out, settings: dict, make_subject) -> tuple[list[dict], dict]:
    """Every (copy, state, arm) run of a guidance study, resumed from ``out/runs`` (a run made with other
    ``settings`` is refused); ``make_subject(args, copy, extractor, fit)`` sets a copy up only when one of its
    runs is missing, and its ``run(arm, state, seeds, keep_rate)`` makes one run. Each pair (c, r) has a seed set
    of its own (``args.seeds`` test inputs drawn with seed (100, c, r)); a ``random-keep@<arm>`` control runs at
    the keep rate of that arm's run of the same pair, so it must come after it in ``args.arms``. With
    ``args.summary_only`` nothing runs and no data is read."""
    from idcgen.framework import Network

    test = None  # read when a run is to be made
    runs, arrays, extractor, fit = [], {}, None, None
    total, done = args.copies * args.states * len(args.arms), 0
    for c in copies_to_run(args):
        subject = None
        for r in range(args.states):
            for arm in args.arms:
                done += 1
                path = out / "runs" / f"{arm}_c{c}_r{r}.json"
                if path.exists():
                    row, arrays[(arm, c, r)] = load_run(path, settings)
                else:
                    if args.summary_only:
                        continue
                    if subject is None:
                        extractor = extractor or Network(load_subject(args.dataset, None))
                        if fit is None:  # the training data the copies saw: read once
                            (x_a, y_a), _ = training_sets(args.dataset)
                            fit = x_a[: args.fit_train], y_a[: args.fit_train]
                        subject = make_subject(args, c, extractor, fit)
                    rate = None
                    if arm.startswith("random-keep@"):
                        source = next((x for x in runs if (x["arm"], x["copy"], x["state"]) == (arm[12:], c, r)), None)
                        if source is None:
                            raise SystemExit(f"error: {arm} needs the {arm[12:]} run of copy {c}, state {r}: add it")
                        rate = source["keep_rate"]
                    x_test, y_test = test = test or load_data("test", args.dataset)
                    seeds = stratified(y_test, args.seeds, np.random.default_rng([100, c, r]))
                    row, arrays[(arm, c, r)] = subject.run(arm, r, (x_test[seeds], y_test[seeds]), rate)
                    save_run(path, settings, row, arrays[(arm, c, r)])
                    print(
                        f"[{done}/{total}] {arm} c{c} r{r}: {row['calls']} calls, kept {row['kept']}, "
                        f"{row['failures']} failures, {row['valid_failures']} valid "
                        f"({row['valid_failures_per_1k_calls']:.1f}/1k calls), {row['seconds']:.0f} s",
                        flush=True,
                    )
                runs.append(row)
    return runs, arrays
