"""The coverage-guided fuzz loop (docs/design.md, "Fuzz loop").

Each step: the scheduler picks parents, one mutator makes a batch of mutants, one forward pass gives
their predictions and subject-layer activations, the coverage tracker says which reach a combination
not yet covered (those join the corpus), and the oracle marks findings. One batch is in flight: the
model runs on a worker thread while the main thread commits the previous step and mutates the next.
"""

from __future__ import annotations

import dataclasses
import shutil
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from ..analysis import Analysis, check_class_labels, network_with_convention
from ..convention import check_scale, infer_image_shape, parse_image_shape, parse_value_range
from ..coverage import CoverageTracker
from ..data import fit_to_model
from ..errors import InputError, ParameterError
from .campaign import Campaign, MutatorStats
from .corpus import Corpus
from .mutators import Mutator, MutationContext, make_mutator
from .oracle import make_oracle
from .scheduler import make_scheduler
from .validity import Validity


@dataclass(frozen=True)
class FuzzContext(MutationContext):
    """What a mutator may use: the model, the batch's root labels, and for coverage-directed mutators
    the analysis and the coverage so far."""

    analysis: Analysis | None = None
    tracker: CoverageTracker | None = None
    parent_combinations: np.ndarray | None = field(default=None, repr=False)


class Fuzzer:
    """Grow a test set that reaches new important-neuron cluster combinations.

    Parameters
    ----------
    analysis : Analysis bound to the model under test
    mutators : mutator objects or spec strings such as ``"gauss(std=0.05)"``
    oracle : "misclassification" (against the root seed's label), "prediction-change" or "disagreement"
    others : further models (Network) for the disagreement oracle
    scheduler : "prioritized" (DeepHunter's batch prioritisation) or "uniform"
    validity : DeepHunter's bounds (``Validity(enabled=False)`` turns them off)
    batch_size : mutants per step
    value_range : (low, high) of the images mutated; default: the analysis' recorded value range
    image_shape : (h, w, c) of the images mutated when the model takes flat (d,) or channel-less (h, w)
        inputs; default: inferred (see :func:`idcgen.convention.infer_image_shape`). The model is then
        run through a wrapper that reshapes the images to its input (:mod:`idcgen.convention`), so the
        corpus, mutators, validity and exports all work on images.
    """

    def __init__(self, analysis: Analysis, *, mutators: Sequence, oracle: str = "misclassification",
                 others: Sequence = (), scheduler: str = "prioritized", validity: Validity | None = None,
                 batch_size: int = 256, random_state: int = 0, value_range=None, image_shape=None):
        if analysis.network is None:
            raise ParameterError("bind the analysis to the model under test first: analysis.bind(model)")
        if not mutators:
            raise ParameterError("at least one mutator is needed")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ParameterError(f"The 'batch_size' parameter must be an int >= 1. Got {batch_size!r} instead.")
        image_shape = parse_image_shape(image_shape)
        shape = tuple(analysis.network.input_shape)
        if len(shape) != 3 or (image_shape is not None and image_shape != shape):
            image_shape = image_shape or infer_image_shape(shape)
            analysis, others = self._as_images(analysis, others, image_shape)
        self.analysis = analysis
        self.network = analysis.network
        self.mutators: list[Mutator] = [make_mutator(m) if isinstance(m, str) else m for m in mutators]
        self.oracle_name = oracle
        self.oracle = make_oracle(oracle, others)
        self.scheduler = make_scheduler(scheduler)
        self._order: tuple[int, np.ndarray] | None = None  # (round, mutator order) of the current round
        self.value_range = parse_value_range(value_range) or tuple(analysis.convention.value_range)
        self.validity = dataclasses.replace(validity or Validity(), value_range=self.value_range)
        self.batch_size = batch_size
        if not isinstance(random_state, (int, np.integer)) or random_state < 0:
            raise ParameterError(f"The 'random_state' parameter must be an int >= 0. Got {random_state!r} instead.")
        self.random_state = int(random_state)
        for other in others:  # differential testing needs models that read and answer alike
            if other.input_shape != self.network.input_shape or other.n_classes != self.network.n_classes:
                raise ParameterError(f"every model must take inputs {self.network.input_shape} and give "
                                     f"{self.network.n_classes} classes; one takes {other.input_shape} and gives "
                                     f"{other.n_classes}")

    @staticmethod
    def _as_images(analysis: Analysis, others: Sequence, image_shape: tuple) -> tuple[Analysis, list]:
        """The analysis bound to the model behind an image -> model-input reshape (and the other
        models alike); the analysis given is left as it is."""
        recorded = dataclasses.replace(analysis.convention, image_shape=tuple(image_shape))
        network, _ = network_with_convention(analysis.network, recorded=recorded)
        wrapped = [network_with_convention(o, recorded=recorded)[0] for o in others]
        return dataclasses.replace(analysis, network=None).bind(network), wrapped

    def config(self, budget: int) -> dict:
        return {"budget": int(budget), "mutators": [repr(m) for m in self.mutators], "oracle": self.oracle_name,
                "scheduler": self.scheduler.name, "batch_size": self.batch_size,
                "random_state": self.random_state, "value_range": list(self.value_range),
                "validity": {"enabled": self.validity.enabled, "alpha": self.validity.alpha,
                             "beta": self.validity.beta},
                "layer": self.analysis.layer, "m": self.analysis.m,
                "input_shape": list(self.network.input_shape),
                "input_convention": dict(self.analysis.convention.to_dict(), value_range=list(self.value_range),
                                         image_shape=list(self.network.input_shape))}

    # ---- starting and resuming --------------------------------------------------------------
    def start(self, x_seeds: np.ndarray, y_seeds: np.ndarray | None, out: str | Path, *, budget: int,
              extra_config: dict | None = None) -> Campaign:
        """Run the seeds, mark their combinations covered, and write a new campaign folder."""
        _check_budget(budget)
        x = fit_to_model(x_seeds, self.network.input_shape)
        y = np.full(len(x), -1, np.int64) if y_seeds is None else check_class_labels(x, y_seeds, self.network.n_classes)
        if y_seeds is None and self.oracle_name == "misclassification":
            raise InputError("the seeds have no labels, which the misclassification oracle needs; "
                             "use --oracle prediction-change (or disagreement with several models)")
        lo, hi = self.value_range
        if x.min() < lo or x.max() > hi:
            raise InputError(f"seed values span [{x.min():g}, {x.max():g}], outside the value range [{lo:g}, {hi:g}]; "
                             f"load them in that range (--scale) or give the model's range (--value-range LO,HI)")
        check_scale(x, dataclasses.replace(self.analysis.convention, value_range=self.value_range),
                    self.analysis.observed_range, "the seeds")
        config = dict(self.config(budget), **(extra_config or {}))
        corpus = Corpus(self.network.input_shape)
        campaign = Campaign(folder=Path(out), config=config, analysis=self.analysis, corpus=corpus,
                            tracker=self.analysis.tracker(), rng=np.random.default_rng(self.random_state),
                            mutator_stats={repr(m): MutatorStats() for m in self.mutators})
        existed = campaign.folder.exists()
        campaign.create()
        try:
            started = time.perf_counter()
            probs, (acts,) = self.network.forward(x, (self.analysis.layer,))
            ids = self.analysis.combinations.ids(self.analysis.select(acts))
            campaign.tracker.update(ids)
            n = len(x)
            new_ids = corpus.add(x, x, [[] for _ in range(n)], parent=np.full(n, -1), root=np.arange(n), label=y,
                                 prediction=probs.argmax(1), combination=ids, affine=np.zeros(n, bool),
                                 step=np.zeros(n, np.int64))
            campaign.seed_execs = n
            campaign.elapsed = time.perf_counter() - started
            campaign.commit(new_ids, None, self._stats_row(campaign, None, 0.0))
            campaign.flush()  # the seeds' step is on disk when start returns: the folder can be loaded at once
        except BaseException:  # (Ctrl-C too) nothing was committed: leave no half-made campaign behind
            campaign.close_files()
            _remove_new_campaign(campaign.folder, existed)
            raise
        return campaign

    def resume(self, folder: str | Path) -> Campaign:
        """Reopen a campaign made by a fuzzer with this one's analysis and settings, at its last step."""
        campaign = Campaign.load(folder, self.network, repair=True)
        mine, theirs = self.analysis.summary(), campaign.analysis.summary()
        keys = ("layer", "important_neurons", "clusters", "combinations_total")
        if any(mine[k] != theirs[k] for k in keys):
            raise ParameterError(f"campaign {folder} was made with another analysis (layer {theirs['layer']}, "
                                 f"neurons {theirs['important_neurons']}); resume it with its own "
                                 f"({Path(folder) / 'analysis'})")
        ours = self.config(campaign.budget)
        changed = [k for k in ("mutators", "oracle", "scheduler", "batch_size", "random_state", "validity")
                   if ours[k] != campaign.config.get(k)]
        if changed:
            raise ParameterError(f"campaign {folder} was made with other settings ({', '.join(changed)}); "
                                 "a resumed campaign keeps its own")
        campaign.analysis = self.analysis
        return campaign

    # ---- the loop ---------------------------------------------------------------------------
    def run(self, campaign: Campaign, *, budget: int | None = None, progress: bool = True,
            on_step: Callable[[Campaign], None] | None = None) -> Campaign:
        """Fuzz until ``campaign.execs`` reaches the budget (total mutant execs, default the campaign's).

        ``on_step(campaign)`` is called after each committed step, while the next batch may already be
        running through the model on the worker thread: a callback should not run the model itself."""
        if budget is not None:
            _check_budget(budget)
            campaign.config["budget"] = int(budget)
            campaign.write_json()
        try:
            self._loop(campaign, progress, on_step)
        finally:  # also on Ctrl-C: what was committed gets its previews and a readable state
            campaign.close()
        return campaign

    def _loop(self, c: Campaign, progress: bool, on_step) -> None:
        """Steps, one batch in flight: while the model runs step k's mutants on a worker thread, the main
        thread commits step k - 1 and mutates step k + 1 (whose parents therefore come from the corpus as
        it was after step k - 1). Mutators that use the model or the coverage wait for the batch in flight.
        """
        idle, inflight, finishing = 0, None, False
        worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="idcgen-forward")
        tick = time.perf_counter()
        try:
            with tqdm(total=c.budget, initial=min(c.execs, c.budget), unit="exec", desc="fuzz",
                      disable=not progress, dynamic_ncols=True) as bar:
                while True:
                    planned = c.execs + (_execs(inflight) if inflight is not None else 0)
                    batch = None
                    if planned < c.budget:
                        step = (inflight.step if inflight is not None else c.step) + 1
                        mutator = self._mutator_of(step)
                        if inflight is None or self._pipelined(mutator):  # else: finish the batch in flight first
                            batch = self._prepare(c, step, mutator, c.budget - planned)
                            if batch.mutants is not None:
                                batch.result = worker.submit(self._run, batch.mutants)
                    if inflight is None:
                        if batch is None:
                            break
                        inflight = batch  # nothing in flight to finish yet
                        continue
                    self._await(inflight)  # interrupted here, nothing of the step is committed yet
                    finishing = True
                    with _interrupts_deferred():  # a step is committed whole; Ctrl-C is raised after it
                        done, tick = self._finish(c, inflight, batch, tick)
                        inflight, finishing = batch, False
                    bar.update(done)
                    bar.set_postfix(IDC=f"{c.tracker.score:.1%}", corpus=len(c.corpus), findings=c.n_findings,
                                    execs_s=f"{c.execs / max(c.elapsed, 1e-9):.0f}", refresh=False)
                    idle = idle + 1 if done == 0 else 0
                    if idle > 50:
                        raise ParameterError("50 steps in a row made no mutant (every mutator failed; "
                                             "see the errors in campaign.json)")
                    if on_step is not None:
                        on_step(c)
                        tick = time.perf_counter()  # the callback's time is not the campaign's
        finally:
            worker.shutdown(wait=True)
            if inflight is not None and not finishing:  # interrupted between steps: a batch was mutated
                # but not committed; rewind to where it began, as a resume from disk would, so that running
                # this campaign object again continues the same sequence
                c.rng.bit_generator.state = inflight.rng_before
                c.pick_counts = inflight.pick_counts

    def _mutator_of(self, step: int) -> Mutator:
        # mutators take turns in an order shuffled every round, so each gets an equal share of the
        # budget and the per-mutator table compares like with like (derived from the step: resumable)
        round_, turn = divmod(step - 1, len(self.mutators))
        return self.mutators[self._turn_order(round_)[turn]]

    def _prepare(self, c: Campaign, step: int, mutator: Mutator, left: int) -> "_Batch":
        """Pick parents and mutate them: the first half of a step."""
        started = time.perf_counter()
        rng, corpus = c.rng, c.corpus
        batch = _Batch(step=step, mutator=mutator, name=repr(mutator), rng_before=rng.bit_generator.state)
        if c.pick_counts is not None:  # resuming a campaign whose next batch was picked a step early
            counts, c.pick_counts = c.pick_counts, None
        else:
            counts = corpus.fuzz_count.copy()
        batch.pick_counts = counts
        n = min(self.batch_size, left)
        if mutator.affine:  # DeepHunter: at most one affine transform per chain, so parents without one
            eligible = np.flatnonzero(~corpus.affine[:len(counts)])  # (never empty: the seeds have none)
            parents = eligible[self.scheduler.pick(counts[eligible], n, rng)]
        else:
            parents = self.scheduler.pick(counts, n, rng)
        batch.parents, batch.roots = parents, corpus.root[parents]
        ctx = FuzzContext(network=self.network, labels=corpus.label[batch.roots], value_range=self.value_range,
                          analysis=self.analysis, tracker=c.tracker,
                          parent_combinations=corpus.combination[parents])
        try:
            if mutator.affine:  # the reference moves with the same transform (DeepHunter)
                batch.mutants, batch.references = mutator.mutate_with_reference(
                    corpus.x[parents], corpus.reference[parents], rng, ctx)
            else:
                batch.mutants = mutator.mutate(corpus.x[parents], rng, ctx)
                batch.references = corpus.reference[parents]
        except Exception as exc:  # an attack failing on a batch is reported, the campaign goes on
            message = str(exc).strip()
            batch.error = f"{type(exc).__name__}: {message.splitlines()[0] if message else ''}"
            batch.mutants = batch.references = None
        batch.seconds = time.perf_counter() - started
        return batch

    def _run(self, mutants: np.ndarray):
        """The model on a batch (worker thread): predictions, subject-layer activations, seconds."""
        started = time.perf_counter()
        probs, (acts,) = self.network.forward(mutants, (self.analysis.layer,))
        return probs, acts, time.perf_counter() - started

    def _await(self, batch: "_Batch") -> None:
        """Check the batch's validity while the model runs it, then wait for the model. Changes nothing in
        the campaign, so an interrupt or a model error here leaves it at its last committed step."""
        if batch.error is None:
            batch.valid = self.validity.check(batch.mutants, batch.references)
            batch.outcome = batch.result.result()

    def _finish(self, c: Campaign, batch: "_Batch", following: "_Batch | None", tick: float) -> tuple[int, float]:
        """Coverage, corpus, oracle and commit of a batch: the second half of its step. Returns the execs
        it made and the time it committed."""
        started = time.perf_counter()
        corpus, name = c.corpus, batch.name
        stats = c.mutator_stats[name]
        c.step = batch.step
        if batch.error is not None:
            stats.errors += 1
            stats.last_error = batch.error
            return 0, self._commit(c, stats, batch, following, tick, started, np.zeros(0, np.int64), None)
        mutants, references, parents, roots = batch.mutants, batch.references, batch.parents, batch.roots
        valid, (probs, acts, forward_seconds) = batch.valid, batch.outcome
        batch.seconds += forward_seconds
        started = time.perf_counter()
        preds = probs.argmax(1)
        ids = self.analysis.combinations.ids(self.analysis.select(acts))
        new = np.zeros(len(mutants), bool)
        new[valid] = c.tracker.update(ids[valid])
        flagged = self.oracle(mutants, preds, corpus.label[roots], corpus.prediction[roots]) & valid
        np.add.at(corpus.fuzz_count, parents, 1)

        def chain(i):  # the mutator chain of mutant i
            return corpus.chains[parents[i]] + [name]

        kept = np.flatnonzero(new)
        new_ids = corpus.add(mutants[kept], references[kept], [chain(i) for i in kept], parent=parents[kept],
                             root=roots[kept], label=corpus.label[roots][kept], prediction=preds[kept],
                             combination=ids[kept], affine=corpus.affine[parents][kept] | batch.mutator.affine,
                             step=np.full(len(kept), c.step))
        findings = self._findings(c, mutants, flagged, ids, preds, parents, roots, kept, new_ids, chain)

        c.execs += len(mutants)
        stats.execs += len(mutants)
        stats.valid += int(valid.sum())
        stats.kept += len(kept)
        stats.findings += 0 if findings is None else len(findings["id"])
        stats.steps += 1
        return len(mutants), self._commit(c, stats, batch, following, tick, started, new_ids, findings)

    def _commit(self, c: Campaign, stats, batch: "_Batch", following: "_Batch | None", tick: float,
                started: float, new_ids, findings) -> float:
        """Commit the step; returns when that was done. The campaign's time is wall time (steps overlap);
        a mutator's seconds are its batches' mutation, model and bookkeeping time. If the next batch is
        already mutated, the state saved is the one it was mutated from, so that a resumed campaign
        mutates it again alike."""
        now = time.perf_counter()
        seconds = batch.seconds + now - started
        stats.seconds += seconds
        c.elapsed += now - tick
        c.commit(new_ids, findings, self._stats_row(c, batch.name, seconds),
                 next_batch=None if following is None else (following.rng_before, following.pick_counts))
        end = time.perf_counter()
        c.elapsed += end - now  # the commit itself (saved with the next step)
        return end

    def _pipelined(self, mutator: Mutator) -> bool:
        """Noise and transforms need neither the model nor the coverage: they may run a step ahead. (Not
        with an oracle that runs models of its own while a step finishes: TensorFlow is kept to one
        thread at a time.)"""
        return mutator.kind in ("noise", "transform") and not mutator.needs_model and not self.oracle.runs_models

    def _turn_order(self, round_: int) -> np.ndarray:
        """The mutators' order in a round (seeding a generator costs 0.3 ms: once per round)."""
        if self._order is None or self._order[0] != round_:
            order = np.random.default_rng([self.random_state, round_]).permutation(len(self.mutators))
            self._order = (round_, order)
        return self._order[1]

    def _findings(self, c, mutants, flagged, ids, preds, parents, roots, kept, new_ids, chain):
        """Unique findings of this step: flagged mutants whose (combination, true label, prediction) is new."""
        corpus_id = np.full(len(mutants), -1, np.int64)
        corpus_id[kept] = new_ids
        chosen = []
        for i in np.flatnonzero(flagged):
            key = (int(ids[i]), int(c.corpus.label[roots[i]]), int(preds[i]))
            if key not in c.finding_keys:
                c.finding_keys.add(key)
                chosen.append(i)
        if not chosen:
            return None
        chosen = np.asarray(chosen)
        first = c.n_findings
        c.n_findings += len(chosen)
        return {"id": np.arange(first, c.n_findings), "x": mutants[chosen], "corpus_id": corpus_id[chosen],
                "parent": parents[chosen], "root": roots[chosen], "label": c.corpus.label[roots[chosen]],
                "root_prediction": c.corpus.prediction[roots[chosen]], "prediction": preds[chosen],
                "combination": ids[chosen], "step": np.full(len(chosen), c.step),
                "chain": np.array(["|".join(chain(i)) for i in chosen], dtype=str)}

    def _stats_row(self, c: Campaign, mutator: str | None, seconds: float) -> dict:
        return {"step": c.step, "time": round(c.elapsed, 4), "execs": c.execs,
                "execs_per_s": round(c.execs / c.elapsed, 1) if c.elapsed > 0 else 0.0,
                "corpus": len(c.corpus), "idc": c.tracker.score, "covered": c.tracker.covered,
                "findings": c.n_findings, "mutator": mutator,
                "seconds": round(seconds, 4)}


@dataclass
class _Batch:
    """One step's mutants on their way through the model."""

    step: int
    mutator: Mutator
    name: str
    rng_before: dict                        # the generator's state before this batch was mutated
    pick_counts: np.ndarray | None = None   # the fuzz counts its parents were picked with
    parents: np.ndarray | None = None
    roots: np.ndarray | None = None
    mutants: np.ndarray | None = None
    references: np.ndarray | None = None
    error: str | None = None
    seconds: float = 0.0
    result: Future | None = None            # the model's run, on the worker thread
    valid: np.ndarray | None = None         # set by Fuzzer._await
    outcome: tuple | None = None            # (probabilities, activations, seconds), set by Fuzzer._await


@contextmanager
def _interrupts_deferred():
    """Hold back Ctrl-C (SIGINT) until the block ends, then raise it as usual; only the main thread
    receives signals, so elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received and previous is not signal.SIG_IGN:
            if callable(previous):
                previous(signal.SIGINT, None)  # Python's default handler raises KeyboardInterrupt
            else:
                raise KeyboardInterrupt


def _remove_new_campaign(folder: Path, existed: bool) -> None:
    """Delete what ``Campaign.create`` made (it only writes into a new or empty folder)."""
    shutil.rmtree(folder, ignore_errors=True)
    if existed:
        folder.mkdir(parents=True, exist_ok=True)


def _execs(batch: _Batch) -> int:
    """The execs a batch will make (none if its mutator failed)."""
    return 0 if batch.mutants is None else len(batch.mutants)


def _check_budget(budget) -> None:
    if not isinstance(budget, (int, np.integer)) or isinstance(budget, bool) or budget < 1:
        raise ParameterError(f"The 'budget' parameter must be an int >= 1 (execs: mutants run through the "
                             f"model). Got {budget!r} instead.")
