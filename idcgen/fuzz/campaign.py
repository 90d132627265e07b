"""A campaign: the state of one fuzz run, in memory.

It holds the corpus, the coverage of every criterion measured (IDC always), the findings, the random
generator and the counters, and records the loop's steps one at a time. It needs no folder: a notebook
runs ``campaign = fuzzer.run(x, y, budget=...)`` and may ``campaign.save(folder)`` later;
``Campaign.load(folder)`` reads one back. When the campaign has a store (it was saved, or started with
``out=``), every recorded step is also committed to disk (:mod:`idcgen.fuzz.store`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from ..analysis import Analysis
from ..checks import check_int
from ..coverage import CoverageTracker
from ..criteria.base import CriterionTracker
from ..criteria.values import ValueTracker, restore_tracker
from ..errors import AnalysisMismatchError, ParameterError
from ..quality import distances
from .corpus import Corpus
from .settings import CampaignSettings
from .store import CampaignStore

#: where a step's time goes, in the order a step runs them: the parents gathered and mutated (rounding
#: included), the model's forward pass with the features the criteria take (on the model's device,
#: transfers included), the checks (validity, new coverage, oracle), and the campaign recording the step
PHASES = ("mutate", "model", "checks", "record")


@dataclass
class MutatorStats:
    execs: int = 0
    valid: int = 0
    kept: int = 0
    findings: int = 0
    seconds: float = 0.0
    steps: int = 0
    errors: int = 0
    last_error: str | None = None


@dataclass
class Step:
    """What one step of the loop produced, before the campaign records it (one row per mutant)."""

    number: int
    mutator: str
    affine: bool
    parents: np.ndarray
    mutants: np.ndarray | None = None
    references: np.ndarray | None = None
    predictions: np.ndarray | None = None
    combinations: np.ndarray | None = None  # IDC combination ids
    features: dict = field(default_factory=dict)  # criterion name -> what its tracker takes
    valid: np.ndarray | None = None
    keep: np.ndarray | None = None  # joins the corpus (new coverage of the guiding criterion)
    flagged: np.ndarray | None = None  # the oracle's verdict (valid mutants only)
    error: str | None = None  # the mutator failed on this batch
    seconds: dict = field(default_factory=dict)  # phase (PHASES, less "record") -> its time in this step

    @property
    def execs(self) -> int:
        return 0 if self.mutants is None else len(self.mutants)

    def ran(self) -> Ran:
        """The arrays of a step whose mutants ran (one without an ``error`` has every one of them)."""
        arrays = {f.name: getattr(self, f.name) for f in fields(Ran)}
        missing = [name for name, value in arrays.items() if value is None]
        if missing:
            raise ValueError(f"step {self.number} ({self.mutator}) has no {', '.join(missing)}")
        return Ran(**arrays)


@dataclass(frozen=True)
class Ran:
    """A step's arrays once its mutants ran (:meth:`Step.ran`), one row per mutant."""

    mutants: np.ndarray
    references: np.ndarray
    predictions: np.ndarray
    combinations: np.ndarray
    valid: np.ndarray
    keep: np.ndarray
    flagged: np.ndarray


@dataclass
class Campaign:
    """One run's corpus, coverage, findings and counters."""

    settings: CampaignSettings
    analysis: Analysis
    corpus: Corpus
    coverage: dict  # criterion name -> tracker; "idc" first
    rng: np.random.Generator
    mutator_stats: dict
    step: int = 0
    execs: int = 0
    seed_execs: int = 0
    flagged: int = 0  # valid mutants the oracle flagged, before findings are made unique
    elapsed: float = 0.0
    phase_seconds: dict = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))  # the steps' time by phase
    stats: list = field(default_factory=list)  # one row per recorded step
    finding_parts: list = field(default_factory=list, repr=False)  # one dict of arrays per step with findings
    finding_keys: set = field(default_factory=set, repr=False)
    finding_pairs: set = field(default_factory=set, repr=False)  # the keys without their combination
    folder: Path | None = None  # where it is saved (None: in memory only)
    notes: list = field(default_factory=list)  # damage found when it was read, and what was rebuilt
    store: CampaignStore | None = field(default=None, repr=False)  # writes its steps there (None: read only)

    def __repr__(self) -> str:  # a notebook shows this: the counters, not the settings and arrays
        where = "in memory" if self.folder is None else f"folder={str(self.folder)!r}"
        return (
            f"Campaign(execs={self.execs} of {self.budget}, {self.tracker.result()}, corpus={len(self.corpus)}, "
            f"findings={self.n_findings}, {where})"
        )

    # ---- views ------------------------------------------------------------------------------
    @property
    def tracker(self):
        """The IDC tracker."""
        return self.coverage["idc"]

    @property
    def budget(self) -> int:
        return self.settings.budget

    @property
    def value_range(self) -> tuple[float, float]:
        low, high = self.settings.value_range
        return (low, high)

    @property
    def n_findings(self) -> int:
        return sum(len(part["id"]) for part in self.finding_parts)

    def stats_rows(self) -> list[dict]:
        return list(self.stats)

    def findings(self) -> dict:
        """All findings as arrays (concatenated over steps); {} if there are none."""
        if not self.finding_parts:
            return {}
        # columns every step has (campaigns of the first folder format also saved survives_uint8 per step)
        common = [k for k in self.finding_parts[0] if all(k in p for p in self.finding_parts)]
        return {k: np.concatenate([p[k] for p in self.finding_parts]) for k in common}

    def state(self) -> dict:
        """The counters as a new dict (a snapshot: later steps do not change it)."""
        return {
            "step": self.step,
            "execs": self.execs,
            "seed_execs": self.seed_execs,
            "flagged": self.flagged,
            "elapsed_seconds": round(self.elapsed, 3),
            "phase_seconds": {k: round(v, 3) for k, v in self.phase_seconds.items()},
            "corpus": len(self.corpus),
            "seeds": self.corpus.n_seeds,
            "findings": self.n_findings,
            "idc": self.tracker.score,
            "covered": self.tracker.covered,
            "total": self.tracker.total,
            "coverage": {
                name: {"covered": t.covered, "total": t.total, "score": t.score}
                | ({"tracker": t.spec()} if hasattr(t, "state_arrays") else {})  # a value tracker: how to restore it
                for name, t in self.coverage.items()
            },
            "mutators": {k: dict(vars(v)) for k, v in self.mutator_stats.items()},
        }

    def set_budget(self, budget: int) -> None:
        """A new total of execs; it cannot be below what is done."""
        check_budget(budget)
        if budget < self.execs:
            raise ParameterError(
                f"budget {budget} is below the {self.execs} execs this campaign has already done; "
                f"give a budget above {self.execs}"
            )
        self.settings = self.settings.replace(budget=int(budget))

    # ---- recording --------------------------------------------------------------------------
    def record(self, step: Step, seconds: float) -> None:
        """Add one step: the kept mutants to the corpus, their coverage, the new findings, the counters;
        then commit it to the store, if any. ``seconds``: the step's time (mutation, model, checks)."""
        self.step = step.number
        stats = self.mutator_stats[step.mutator]
        new_ids, findings = np.zeros(0, np.int64), None
        if step.error is not None:
            stats.errors += 1
            stats.last_error = step.error
        else:
            ran = step.ran()
            np.add.at(self.corpus.fuzz_count, step.parents, 1)
            kept = np.flatnonzero(ran.keep)
            for name, tracker in self.coverage.items():
                tracker.update(step.features[name][kept])
            new_ids = self._add_mutants(step, ran, kept)
            findings = self._new_findings(step, ran, kept, new_ids)
            self.execs += step.execs
            stats.execs += step.execs
            stats.valid += int(ran.valid.sum())
            stats.kept += len(kept)
            stats.findings += 0 if findings is None else len(findings["id"])
            self.flagged += int(ran.flagged.sum())
            stats.steps += 1
        stats.seconds += seconds
        self.elapsed += seconds
        for phase, spent in step.seconds.items():
            self.phase_seconds[phase] += spent
        self._log(step.mutator, seconds, new_ids, findings)

    def add_recording_time(self, seconds: float) -> None:
        """The time the last :meth:`record` took (it is the campaign's time too)."""
        self.elapsed += seconds
        self.phase_seconds["record"] += seconds

    def record_seeds(self, x, labels, predictions, features: dict, seconds: float) -> None:
        """Step 0: the seeds join the corpus and mark their coverage."""
        n = len(x)
        for name, tracker in self.coverage.items():
            tracker.update(features[name])
        ids = self.corpus.add(
            x,
            x,
            [[] for _ in range(n)],
            parent=np.full(n, -1),
            root=np.arange(n),
            label=labels,
            prediction=predictions,
            combination=features["idc"],
            affine=np.zeros(n, bool),
            step=np.zeros(n, np.int64),
        )
        self.seed_execs = n
        self.elapsed += seconds
        self._log(None, 0.0, ids, None)

    def _log(self, mutator, seconds, new_ids, findings) -> None:
        if findings is not None:
            self.finding_parts.append(findings)
        row = {
            "step": self.step,
            "time": round(self.elapsed, 4),
            "execs": self.execs,
            "execs_per_s": round(self.execs / self.elapsed, 1) if self.elapsed > 0 else 0.0,
            "corpus": len(self.corpus),
            "idc": self.tracker.score,
            "covered": self.tracker.covered,
            "findings": self.n_findings,
            "flagged": self.flagged,
            "unique_pairs": len(self.finding_pairs),  # regression: seeds with a finding
            "mutator": mutator,
            "seconds": round(seconds, 4),
        }
        row.update({f"{name}_coverage": t.score for name, t in self.coverage.items() if name != "idc"})
        self.stats.append(row)
        if self.store is not None:
            self.store.commit(self, new_ids, findings, row)

    def _add_mutants(self, step: Step, ran: Ran, kept: np.ndarray) -> np.ndarray:
        corpus, parents = self.corpus, step.parents[kept]
        chains = [corpus.chains[p] + [step.mutator] for p in parents]
        roots = corpus.root[parents]
        return corpus.add(
            ran.mutants[kept],
            ran.references[kept],
            chains,
            parent=parents,
            root=roots,
            label=corpus.label[roots],
            prediction=ran.predictions[kept],
            combination=ran.combinations[kept],
            affine=corpus.affine[parents] | step.affine,
            step=np.full(len(kept), step.number),
        )

    def _new_findings(self, step: Step, ran: Ran, kept: np.ndarray, new_ids: np.ndarray) -> dict | None:
        """Flagged mutants whose (combination, true label, prediction) is new: a finding is saved once."""
        corpus = self.corpus
        roots = corpus.root[step.parents]
        labels = corpus.label[roots]
        new = []
        for i in np.flatnonzero(ran.flagged):
            key = _finding_key(self.corpus, ran.combinations[i], labels[i], ran.predictions[i], roots[i])
            if key not in self.finding_keys:
                self.finding_keys.add(key)
                self.finding_pairs.add(key[1:])
                new.append(i)
        if not new:
            return None
        chosen = np.asarray(new)
        corpus_id = np.full(step.execs, -1, np.int64)
        corpus_id[kept] = new_ids
        first = self.n_findings
        parents = step.parents[chosen]
        # how far each finding is from its root seed (the failure's naturalness)
        far = distances(ran.mutants[chosen], corpus.x[roots[chosen]], self.value_range)
        return {
            "id": np.arange(first, first + len(chosen)),
            "x": ran.mutants[chosen],
            **{k: far[k].astype(np.float32) for k in ("l0", "l2", "linf", "ssim")},
            "corpus_id": corpus_id[chosen],
            "parent": parents,
            "root": roots[chosen],
            "label": labels[chosen],
            "root_prediction": corpus.prediction[roots[chosen]],
            "prediction": ran.predictions[chosen],
            "combination": ran.combinations[chosen],
            "step": np.full(len(chosen), step.number),
            "chain": np.array(["|".join(corpus.chains[p] + [step.mutator]) for p in parents], dtype=str),
        }

    # ---- saving and loading -----------------------------------------------------------------
    def save(self, folder: str | os.PathLike) -> Path:
        """Write the campaign into a new folder; later steps are committed there as they are recorded."""
        if self.store is not None:
            raise ParameterError(f"this campaign is already saved in {self.folder}")
        self.store = CampaignStore.create(Path(folder), self)
        self.folder = self.store.folder
        return self.folder

    def open(self) -> None:
        """Take the folder's writer lock (again) before more steps are recorded; nothing to do in memory. A
        campaign read only (``Campaign.load(folder)``) is refused: its steps would reach memory and not its folder."""
        if self.store is None and self.folder is not None:
            raise ParameterError(
                f"campaign {self.folder} was read only (Campaign.load): new steps would not reach its folder; "
                "go on with Fuzzer.resume(folder), which takes the folder's writer lock"
            )
        if self.store is not None:
            self.store.lock.acquire()

    def close(self) -> None:
        """Finish the store's writes (PNG previews, campaign.json) and release the folder; nothing to do
        for a campaign in memory only."""
        if self.store is not None:
            self.store.close(self)

    @classmethod
    def load(cls, folder: str | os.PathLike, network=None, *, resume: bool = False) -> "Campaign":
        """Read a campaign at its last committed step.

        ``network``: the model it was run on (checked by fingerprint; needed to export or resume).
        ``resume=True`` takes the folder's writer lock and drops what was written after the last commit;
        without it the folder is only read (safe while another process fuzzes into it).
        """
        saved = CampaignStore.read(Path(folder), resume=resume)
        try:
            analysis = Analysis.load(saved.folder / "analysis")
            if network is not None:
                try:
                    analysis.bind(network)
                except AnalysisMismatchError:
                    raise AnalysisMismatchError(
                        f"the campaign in {saved.folder} was run on another model (fingerprint "
                        f"{analysis.fingerprint[:12]}); pass the model it was made with"
                    ) from None
            settings = CampaignSettings.from_dict(saved.config)
            corpus = Corpus(settings.input_shape, regression=settings.regression)
            for part in saved.corpus_parts:
                corpus.add_entries(part)
            corpus.fuzz_count[:] = saved.fuzz_count
            rng = np.random.default_rng()
            rng.bit_generator.state = saved.rng_state
            coverage: dict[str, CoverageTracker | CriterionTracker | ValueTracker] = {
                "idc": CoverageTracker(analysis.total, saved.covered["idc"])
            }
            for name, entry in saved.state.get("coverage", {}).items():
                if name == "idc":
                    continue
                if "tracker" in entry:  # NLC, TKNP, CC: their whole state, saved as arrays
                    coverage[name] = restore_tracker(entry["tracker"], saved.trackers.get(name, {}))
                else:
                    coverage[name] = CriterionTracker(entry["total"], saved.covered[name], criterion=name)
            state = saved.state
            campaign = cls(
                settings=settings,
                analysis=analysis,
                corpus=corpus,
                coverage=coverage,
                rng=rng,
                mutator_stats={k: MutatorStats(**v) for k, v in state["mutators"].items()},
                step=state["step"],
                execs=state["execs"],
                seed_execs=state["seed_execs"],
                flagged=state.get("flagged", 0),
                elapsed=state["elapsed_seconds"],
                phase_seconds=phase_seconds(state),
                stats=saved.stats,
                finding_parts=saved.finding_parts,
            )
            for part in campaign.finding_parts:  # a finding is saved once per (combination, label, prediction)
                campaign.finding_keys.update(
                    _finding_key(corpus, *row)
                    for row in zip(part["combination"], part["label"], part["prediction"], part["root"])
                )
            campaign.finding_pairs = {key[1:] for key in campaign.finding_keys}
        except BaseException:
            if saved.store is not None:
                saved.store.release()
            raise
        campaign.folder, campaign.store, campaign.notes = saved.folder, saved.store, list(saved.notes)
        return campaign


def phase_seconds(state: dict) -> dict:
    """A state's time by phase (PHASES); zeros for a campaign of an idcgen that did not record it."""
    recorded = state.get("phase_seconds") or {}
    return {phase: float(recorded.get(phase, 0.0)) for phase in PHASES}


def _finding_key(corpus: Corpus, combination, label, prediction, root) -> tuple:
    """What makes a finding new: (combination, true label, prediction) for a classifier; for a regression
    model, whose outputs are never equal twice, (combination, root seed): one finding per combination
    reached from each seed."""
    if corpus.regression:
        return int(combination), -1, int(root)
    return int(combination), int(label), int(prediction)


def check_budget(budget) -> int:
    return check_int("budget", budget, 1, why="execs: mutants run through the model")
