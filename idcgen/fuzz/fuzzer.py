"""The coverage-guided fuzz loop (docs/design.md, "Fuzz loop").

Each step: the scheduler picks parents, one mutator makes a batch of mutants, one forward pass gives
their predictions and activations, the validity bounds drop mutants too far from their seed, the
guiding criterion says which reach something not yet covered (those join the corpus), and the oracle
marks findings. The campaign records the step whole; its store, if any, writes it to disk.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Sequence, cast

import numpy as np
from tqdm.auto import tqdm

from ..analysis import Analysis, check_class_labels
from ..checks import check_int
from ..convention import InputConvention, as_image_shape, as_value_range, check_scale, infer_image_shape
from ..data import Dataset, check_labels, fit_to_model
from ..errors import InputError, ParameterError
from ..framework import ForwardNetwork, Network, network_with_convention
from ..imageio import quantise
from ..threads import extent, gather
from .campaign import Campaign, MutatorStats, Step, check_budget
from .corpus import Corpus
from .guidance import check_guide, measures_of, new_coverage
from .mutators import MutationContext, Mutator, check_tasks, make_mutator, parse_mutators
from .oracle import Execution, make_oracle, needs_labels
from .scheduler import make_scheduler, scheduler_spec
from .settings import CampaignSettings, Sources, ValiditySettings
from .validity import Validity

#: steps in a row without a mutant before the loop gives up (every mutator failing)
MAX_IDLE_STEPS = 50


@dataclasses.dataclass(frozen=True)
class FuzzContext(MutationContext):
    """What a mutator may use: the model, the batch's root labels, and for coverage-directed mutators
    the analysis, the IDC coverage so far and the parents' combinations."""

    analysis: Analysis | None = None
    tracker: object | None = None
    parent_combinations: np.ndarray | None = dataclasses.field(default=None, repr=False)
    others: tuple = ()  # the other models of a differential campaign (the deepxplore mutator)


class Fuzzer:
    """Grow a test set that reaches what the seeds do not cover.

    Parameters
    ----------
    analysis : Analysis bound to the model under test (IDC is always measured)
    mutators : mutator objects or spec strings such as ``"gauss(std=0.05)"``, or one comma-separated string of
        specs as the command line takes (``"gauss,rotate,fgsm(eps=0.1)"``)
    oracle : an :class:`~idcgen.fuzz.oracle.Oracle` or a spec ("misclassification", "prediction-change",
        "disagreement", "misclassification & ~uncertain", ...)
    others : further models (Network) for the disagreement oracle
    scheduler : a scheduler object, "prioritized" (DeepHunter's batch prioritisation) or "uniform"
    validity : DeepHunter's bounds (``Validity(enabled=False)`` turns them off)
    guide : which criterion decides that a mutant joins the corpus: "idc" (default), the name of one of
        ``measure``'s criteria, or "none" (every valid mutant joins: the unguided baseline)
    measure : fitted criteria (:func:`idcgen.criteria.make_criterion` ... ``.fit``) measured besides IDC
    batch_size : mutants per step
    random_state : seeds the campaign's generator: the same seeds, settings and random_state give the same campaign
    rounding : round every mutant to the seeds' storage (uint8 seeds: the 256 levels of the value range)
        before it runs, so that every finding reproduces from its exported PNG; seeds that are not on
        that grid are left as they are
    convention : the :class:`~idcgen.convention.InputConvention` of the images mutated: their value range and,
        when the model takes flat (d,) or channel-less (h, w) inputs, their image shape (h, w, c); default: the
        analysis' recorded value range, the image shape inferred (see
        :func:`idcgen.convention.infer_image_shape`)
    """

    def __init__(
        self,
        analysis: Analysis,
        *,
        mutators: Sequence,
        oracle="misclassification",
        others: Sequence = (),
        scheduler="prioritized",
        validity: Validity | None = None,
        guide: str = "idc",
        measure: Sequence = (),
        batch_size: int = 256,
        random_state: int = 0,
        rounding: bool = True,
        convention: InputConvention | None = None,
    ):
        network = _bound(analysis)
        if isinstance(mutators, str):  # "gauss,rotate" as --mutators takes it, not the letters of one string
            mutators = parse_mutators(mutators)
        if not mutators:
            raise ParameterError("at least one mutator is needed")
        batch_size, random_state = check_int("batch_size", batch_size, 1), check_int("random_state", random_state, 0)
        if convention is not None and not isinstance(convention, InputConvention):
            raise ParameterError(
                "The 'convention' parameter takes an idcgen.InputConvention, for example "
                f"InputConvention(value_range=(0, 255)). Got {convention!r} instead."
            )
        value_range, image_shape = (
            (None, None) if convention is None else (convention.value_range, convention.image_shape)
        )
        image_shape = as_image_shape(image_shape)
        shape = tuple(network.input_shape)
        if len(shape) != 3 or (image_shape is not None and image_shape != shape):
            image_shape = image_shape or infer_image_shape(shape)
            analysis, others = self._as_images(analysis, others, image_shape)
            network = _bound(analysis)
        for other in others:  # differential testing needs models that read and answer alike
            if other.input_shape != network.input_shape or other.n_classes != network.n_classes:
                raise ParameterError(
                    f"every model must take inputs {network.input_shape} and give "
                    f"{network.n_classes} classes; one takes {other.input_shape} and gives "
                    f"{other.n_classes}"
                )
        self.analysis, self.network = analysis, network
        self.mutators: list[Mutator] = [make_mutator(m) if isinstance(m, str) else m for m in mutators]
        check_tasks(self.mutators, self.network.task)
        for mutator in self.mutators:  # before any step: not an error in every batch and only in report.md
            mutator.check_model(network)
        self.others = tuple(others)
        self.oracle = make_oracle(oracle, others)
        self.scheduler = make_scheduler(scheduler)
        self.measures = measures_of(analysis, measure)
        self.guide = check_guide(guide, self.measures)
        self.layers = tuple(dict.fromkeys(layer for m in self.measures for layer in m.layers))
        self.value_range: tuple[float, float] = as_value_range(value_range) or analysis.convention.value_range
        self.validity = dataclasses.replace(validity or Validity(), value_range=self.value_range)
        self.batch_size, self.random_state, self.rounding = int(batch_size), int(random_state), bool(rounding)
        self._order: tuple[int, np.ndarray] | None = None  # (round, mutator order) of the current round
        self.record: CampaignSettings | None = None  # the settings it was built from (from_settings)
        self._made: Campaign | None = None  # the campaign start made or resume checked: run goes on with it as it is

    def __repr__(self) -> str:
        return (
            f"Fuzzer(layer={self.analysis.layer!r}, mutators={[repr(m) for m in self.mutators]}, "
            f"oracle={str(self.oracle)!r}, guide={self.guide!r}, batch_size={self.batch_size}, "
            f"random_state={self.random_state})"
        )

    @staticmethod
    def _as_images(analysis: Analysis, others: Sequence, image_shape: tuple) -> tuple[Analysis, list]:
        """The analysis bound to the model behind an image -> model-input reshape (and the other
        models alike); the analysis given is left as it is."""
        recorded = dataclasses.replace(analysis.convention, image_shape=tuple(image_shape))
        network, _ = network_with_convention(analysis.network, recorded=recorded)
        wrapped = [network_with_convention(o, recorded=recorded)[0] for o in others]
        return dataclasses.replace(analysis, network=None).bind(network), wrapped

    @classmethod
    def from_settings(
        cls,
        analysis: Analysis,
        settings: CampaignSettings,
        *,
        others: Sequence = (),
        measure: Sequence = (),
        random_state: int | None = None,
    ) -> "Fuzzer":
        """The fuzzer a campaign's settings describe (``random_state``: a parallel worker's own stream); it
        keeps them, made canonical, as the record :meth:`start` writes (budget, sources and all)."""
        v = settings.validity
        fuzzer = cls(
            analysis,
            mutators=list(settings.mutators),
            oracle=settings.oracle,
            others=others,
            scheduler=settings.scheduler,
            validity=Validity(alpha=v.alpha, beta=v.beta, enabled=v.enabled),
            guide=settings.guide,
            measure=measure,
            batch_size=settings.batch_size,
            random_state=settings.random_state if random_state is None else random_state,
            rounding=settings.rounding,
            convention=InputConvention(value_range=settings.value_range, image_shape=settings.input_shape or None),
        )
        fuzzer.record = settings  # what it takes no keyword for (parallel, ...) is kept as it is
        fuzzer.record = fuzzer.settings(settings.budget, sources=settings.sources, measure_specs=settings.measure_specs)
        return fuzzer

    def settings(
        self,
        budget: int,
        *,
        sources: Sources | None = None,
        measure_specs: Sequence[str] = (),
        rounding: bool | None = None,
        storage: str = "uint8",
    ) -> CampaignSettings:
        """The settings a campaign of this fuzzer records (and a resumed one must keep): what the fuzzer made of
        its keywords, canonical, over the settings it was built from (:meth:`from_settings`), whose other fields
        (``parallel``, ...) are kept as they are; a fuzzer made with keywords alone has those fields' defaults.
        A setting the fuzzer takes no keyword for is read from the campaign's settings (``c.settings``)."""
        base = self.record if self.record is not None else CampaignSettings(budget=int(budget), mutators=())
        return base.replace(
            budget=int(budget),
            mutators=tuple(repr(m) for m in self.mutators),
            oracle=str(self.oracle),
            scheduler=scheduler_spec(self.scheduler),
            guide=self.guide,
            measure=tuple(m.name for m in self.measures[1:]),
            measure_specs=tuple(measure_specs),
            validity=ValiditySettings(self.validity.enabled, self.validity.alpha, self.validity.beta),
            batch_size=self.batch_size,
            random_state=self.random_state,
            rounding=self.rounding if rounding is None else rounding,
            storage=storage,
            value_range=self.value_range,
            input_shape=tuple(self.network.input_shape),
            input_convention=dict(
                self.analysis.convention.to_dict(),
                value_range=list(self.value_range),
                image_shape=list(self.network.input_shape),
            ),
            layer=self.analysis.layer,
            m=self.analysis.m,
            task="regression" if self.regression else "classification",
            sources=sources or Sources(),
        )

    # ---- starting and resuming --------------------------------------------------------------
    def start(
        self,
        x_seeds: np.ndarray,
        y_seeds: np.ndarray | None,
        out: str | Path | None = None,
        *,
        budget: int | None = None,
        sources: Sources | None = None,
        measure_specs: Sequence[str] = (),
        parallel: dict | None = None,
    ) -> Campaign:
        """Run the seeds and mark what they cover: a campaign at step 0, in memory, or saved in ``out``.
        A fuzzer built :meth:`from_settings` records those settings (``budget``, if given, replaces theirs);
        otherwise ``budget``, ``sources`` (where the inputs came from), ``measure_specs`` and ``parallel`` are
        recorded with it."""
        if self.record is not None:
            budget = self.record.budget if budget is None else budget
            sources, measure_specs = sources or self.record.sources, measure_specs or self.record.measure_specs
            parallel = self.record.parallel if parallel is None else parallel
        budget = check_budget(budget)
        if isinstance(x_seeds, Dataset) and y_seeds is None:  # a loaded dataset brings its labels
            y_seeds = x_seeds.y
        x = fit_to_model(x_seeds, self.network.input_shape)
        if self.regression:  # labels are output values; NaN marks a seed without one
            y = np.full(len(x), np.nan) if y_seeds is None else check_labels(x, y_seeds, task="regression")
        else:
            y = (
                np.full(len(x), -1, np.int64)
                if y_seeds is None
                else check_class_labels(x, y_seeds, self.network.n_classes)
            )
        if y_seeds is None and needs_labels(self.oracle):
            if self.regression:
                raise InputError(
                    f"the seeds have no labels, which the {self.oracle} oracle needs (give --labels "
                    "FILE.csv); or use --oracle deviation (or disagreement with several models)"
                )
            raise InputError(
                "the seeds have no labels, which the misclassification oracle needs; "
                "use --oracle prediction-change (or disagreement with several models)"
            )
        lo, hi = self.value_range
        low, high = extent(x)
        if low < lo or high > hi:
            raise InputError(
                f"seed values span [{low:g}, {high:g}], outside the value range [{lo:g}, {hi:g}]; "
                f"load them in that range (--scale) or give the model's range (--value-range LO,HI)"
            )
        check_scale(
            np.asarray((low, high)),  # their extent, taken once
            dataclasses.replace(self.analysis.convention, value_range=self.value_range),
            self.analysis.observed_range,
            "the seeds",
        )
        on_grid = np.array_equal(quantise(x, self.value_range), x)
        rounding, storage = self.rounding and on_grid, "uint8" if on_grid else "float32"
        if self.record is not None:  # built once, in from_settings
            settings = self.record.replace(
                budget=budget, sources=sources, measure_specs=tuple(measure_specs), rounding=rounding, storage=storage
            )
        else:
            settings = self.settings(
                budget, sources=sources, measure_specs=measure_specs, rounding=rounding, storage=storage
            )
        campaign = Campaign(
            settings=settings.replace(parallel=parallel),
            analysis=self.analysis,
            corpus=Corpus(self.network.input_shape, regression=self.regression),
            coverage={m.name: m.tracker() for m in self.measures},
            rng=np.random.default_rng(self.random_state),
            mutator_stats={repr(m): MutatorStats() for m in self.mutators},
        )
        started = time.perf_counter()
        probs, features = self._execute(x)
        predictions = self._predictions(probs)
        if "deeptest" in str(self.oracle):  # its MSE on the labelled seeds, measured now and recorded with it
            from .deeptest import calibrate

            self.oracle = calibrate(self.oracle, predictions, y, regression=self.regression)
        campaign.settings = campaign.settings.replace(oracle=str(self.oracle))
        # an oracle that cannot judge this model's outputs (deviation on a classifier, a class it lacks) says
        # so now, before the campaign folder exists, not at the first step
        self.oracle(Execution(x[:0], probs[:0], predictions[:0], y[:0], predictions[:0]))
        campaign.record_seeds(x, y, predictions, features, time.perf_counter() - started)
        if out is not None:
            campaign.save(out)
        self._made = campaign
        return campaign

    def resume(self, folder: str | Path) -> Campaign:
        """Reopen a campaign made by a fuzzer with this one's analysis and settings, at its last step; the
        folder is locked against a second writer until the run ends."""
        campaign = Campaign.load(folder, self.network, resume=True)
        try:
            own = (f"resume it with its own ({Path(folder) / 'analysis'})", "a resumed campaign keeps its own")
            self._check_continues(campaign, f"campaign {folder}", own)
        except BaseException:
            campaign.close()
            raise
        campaign.analysis = self.analysis
        self._made = campaign
        return campaign

    def _check_continues(self, campaign: Campaign, what: str, fixes: tuple[str, str]) -> None:
        """ParameterError unless ``campaign`` was made with this fuzzer's analysis and settings (the budget aside):
        a step of another mutator, oracle or batch size would be recorded under settings that do not say so."""
        mine, theirs = self.analysis.summary(), campaign.analysis.summary()
        if any(mine[k] != theirs[k] for k in ("layer", "important_neurons", "clusters", "combinations_total")):
            raise ParameterError(
                f"{what} was made with another analysis (layer {theirs['layer']}, "
                f"neurons {theirs['important_neurons']}); {fixes[0]}"
            )
        saved = campaign.settings
        if "deeptest" in saved.oracle and str(self.oracle) != saved.oracle:  # typed without the seeds' MSE
            from .deeptest import keep_calibration

            self.oracle = keep_calibration(self.oracle, make_oracle(saved.oracle, self.others))
        if self.record is not None:  # the settings from_settings built, with the oracle as calibrated now
            ours = self.record.replace(
                budget=saved.budget,
                oracle=str(self.oracle),
                sources=saved.sources,
                measure_specs=saved.measure_specs,
                rounding=saved.rounding,
                storage=saved.storage,
            )
        else:
            ours = self.settings(
                saved.budget,
                sources=saved.sources,
                measure_specs=saved.measure_specs,
                rounding=saved.rounding,
                storage=saved.storage,
            )
        ours = ours.replace(parallel=saved.parallel)
        changed = [f"{name} {value!r}" for name, value, _ in saved.differences(ours)]
        if changed:
            raise ParameterError(f"{what} was made with other settings ({', '.join(changed)}); {fixes[1]}")

    # ---- the loop ---------------------------------------------------------------------------
    def run(
        self,
        seeds,
        labels=None,
        *,
        budget: int | None = None,
        out: str | Path | None = None,
        progress: bool = True,
        on_step: Callable[[Campaign], None] | None = None,
    ) -> Campaign:
        """Fuzz until the campaign has made ``budget`` execs (mutants run through the model).

        ``seeds``: a :class:`Campaign` to continue (``budget``: its new total; default its own), or seed
        inputs with their ``labels`` to start one (in memory, or saved in ``out``; a :class:`Dataset` brings
        its own labels). ``on_step(campaign)``
        is called after each recorded step. Ctrl-C (or a KeyboardInterrupt from ``on_step``) stops the run at
        once; a step is recorded whole or not at all, so the campaign can be run again (or resumed from its
        folder) as if never interrupted. A run that starts the campaign returns nothing when interrupted: to
        hold an in-memory campaign across an interrupt, start it first (``c = fuzzer.start(x, y, budget=N)``,
        then ``fuzzer.run(c)``).
        """
        if isinstance(seeds, Campaign) and seeds is not self._made:  # another fuzzer's steps: settings not theirs
            fix = "continue it with the Fuzzer that made it (or one built alike: Fuzzer.resume(folder) checks it)"
            self._check_continues(seeds, "this campaign", (fix, fix))
        c = seeds if isinstance(seeds, Campaign) else self.start(seeds, labels, out, budget=budget)
        if budget is not None:
            c.set_budget(budget)
        idle = 0
        c.open()
        try:
            with (
                _Interrupts() as interrupts,
                tqdm(
                    total=c.budget,
                    initial=min(c.execs, c.budget),
                    unit="exec",
                    desc="fuzz",
                    disable=not progress,
                    dynamic_ncols=True,
                ) as bar,
            ):
                while c.execs < c.budget:
                    capped = c.settings.max_mutations is not None
                    if capped and not any(len(self._eligible(c, m.moves_reference)) for m in self.mutators):
                        c.notes.append(  # every entry was a parent max_mutations times: nothing left to mutate
                            f"every corpus entry was a parent {c.settings.max_mutations} times (max_mutations): "
                            f"the campaign ended after {c.execs} of its {c.budget} execs"
                        )
                        break
                    started, rng_before = time.perf_counter(), c.rng.bit_generator.state
                    try:
                        step = self.step(c, c.budget - c.execs)
                    except BaseException:  # nothing of this step is kept: running again redoes it alike
                        c.rng.bit_generator.state = rng_before
                        raise
                    computed = time.perf_counter()
                    with interrupts.held():  # a step is recorded whole; Ctrl-C is raised after it
                        c.record(step, computed - started)
                    c.add_recording_time(time.perf_counter() - computed)
                    bar.update(step.execs)
                    bar.set_postfix(
                        IDC=f"{c.tracker.score:.1%}",
                        corpus=len(c.corpus),
                        findings=c.n_findings,  # the rate is tqdm's own (the loop's); the summary line gives the run's
                        refresh=False,
                    )
                    idle = 0 if step.execs else idle + 1
                    if idle >= MAX_IDLE_STEPS:
                        raise ParameterError(
                            f"{MAX_IDLE_STEPS} steps in a row made no mutant (every mutator failed; "
                            "see the errors in the report or campaign.json)"
                        )
                    if on_step is not None:
                        on_step(c)
        finally:  # also on Ctrl-C: what was recorded gets its previews and a readable state
            c.close()
        return c

    def step(self, c: Campaign, left: int) -> Step:
        """One step, computed but not recorded: parents -> mutants -> model -> validity -> coverage -> oracle."""
        started = time.perf_counter()
        number = c.step + 1
        mutator = self._mutator_of(number)
        parents = self._parents(c, mutator, min(self.batch_size, left))
        step = Step(number=number, mutator=repr(mutator), affine=mutator.moves_reference, parents=parents)
        if not len(parents):  # each entry it may take was a parent max_mutations times (not each of the others')
            step.error = f"no parent left: each one it may take was a parent {c.settings.max_mutations} times"
            step.seconds["mutate"] = time.perf_counter() - started
            return step
        try:
            mutants, references = self._mutate(c, mutator, parents)
        except Exception as exc:  # an attack failing on a batch is reported, the campaign goes on
            message = str(exc).strip()
            step.error = f"{type(exc).__name__}: {message.splitlines()[0] if message else ''}"
            step.seconds["mutate"] = time.perf_counter() - started
            return step
        if c.settings.rounding:  # what runs is what the exported PNG holds
            mutants = quantise(mutants, self.value_range)
        mutated = time.perf_counter()
        probs, step.features = self._execute(mutants)
        executed = time.perf_counter()
        step.seconds.update(mutate=mutated - started, model=executed - mutated)
        step.mutants, step.references, step.predictions = mutants, references, self._predictions(probs)
        step.combinations = step.features["idc"]
        step.valid = self.validity.check(mutants, references, mutator)  # the mutator's rule: pixel or scene
        if mutator.moves_reference and not mutator.affine:  # the changed scene is the chain's reference from now on
            step.references = mutants
        step.keep = new_coverage(self.guide, c.coverage, step.features, step.valid)
        roots = c.corpus.root[parents]
        run = Execution(mutants, probs, step.predictions, c.corpus.label[roots], c.corpus.prediction[roots])
        step.flagged = self.oracle(run) & step.valid
        step.seconds["checks"] = time.perf_counter() - executed
        return step

    def _mutator_of(self, step: int) -> Mutator:
        """Mutators take turns in an order shuffled every round, so each gets an equal share of the budget
        and the per-mutator table compares like with like (derived from the step: resumable)."""
        round_, turn = divmod(step - 1, len(self.mutators))
        if self._order is None or self._order[0] != round_:  # seeding a generator costs 0.3 ms: once a round
            self._order = (round_, np.random.default_rng([self.random_state, round_]).permutation(len(self.mutators)))
        return self.mutators[self._order[1][turn]]

    def _parents(self, c: Campaign, mutator: Mutator, n: int) -> np.ndarray:
        """``n`` parents the scheduler picks among the entries ``mutator`` may take (none when there are none)."""
        if c.settings.max_mutations is None and not mutator.moves_reference:  # every entry: no copy of the counts
            return self.scheduler.pick(c.corpus.fuzz_count, n, c.rng)
        ids = self._eligible(c, mutator.moves_reference)
        return ids[self.scheduler.pick(c.corpus.fuzz_count[ids], n, c.rng)] if len(ids) else ids

    @staticmethod
    def _eligible(c: Campaign, moves_reference: bool) -> np.ndarray:
        """The ids of the entries a mutator may take as parents: those picked fewer than the campaign's
        ``max_mutations`` times (counted as a step starts: one batch may pick an entry more than once), and for
        a mutator that moves the reference, those without an affine transform (DeepHunter: one per chain; here:
        or one scene change)."""
        cap = c.settings.max_mutations
        eligible = np.ones(len(c.corpus), bool) if cap is None else c.corpus.fuzz_count < cap
        if moves_reference:
            eligible &= ~c.corpus.affine
        return np.flatnonzero(eligible)

    def _mutate(self, c: Campaign, mutator: Mutator, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        corpus = c.corpus
        ctx = FuzzContext(
            # a mutator that takes gradients checked the network has them when the fuzzer was made
            network=cast(Network, self.network),
            labels=corpus.label[corpus.root[parents]],
            value_range=self.value_range,
            analysis=self.analysis,
            tracker=c.tracker,
            parent_combinations=corpus.combination[parents],
            others=self.others,
        )
        x, references = gather(corpus.x, parents), gather(corpus.reference, parents)  # in parts, on the pool
        if mutator.affine:  # the reference moves with the same transform (DeepHunter)
            return mutator.mutate_with_reference(x, references, c.rng, ctx)
        return mutator.mutate(x, c.rng, ctx), references

    @property
    def regression(self) -> bool:
        return self.network.task == "regression"

    def _predictions(self, probs: np.ndarray) -> np.ndarray:
        """The class of each input, or a regression model's output value (float64)."""
        return probs[:, 0].astype(np.float64) if self.regression else probs.argmax(1)

    def _execute(self, x: np.ndarray) -> tuple[np.ndarray, dict]:
        """The model on a batch: probabilities and each measure's features."""
        probs, acts = self.network.forward(x, self.layers)
        by_layer = dict(zip(self.layers, acts))
        return probs, {m.name: m.features(probs, [by_layer[layer] for layer in m.layers]) for m in self.measures}


def _bound(analysis: Analysis) -> ForwardNetwork:
    """The model the analysis is bound to; a ParameterError when it is bound to none."""
    if analysis.network is None:
        raise ParameterError("bind the analysis to the model under test first: analysis.bind(model)")
    return analysis.network


class _Interrupts:
    """Ctrl-C (SIGINT) or SIGTERM (kill, a batch scheduler's stop) during a run raises KeyboardInterrupt at
    once, except while a step is recorded: then right after it, so the run stops resumable either way. One
    handler for the whole run; only the main thread receives signals, so elsewhere this does nothing."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self._holding = self._pending = False
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        while self._previous:
            signum, previous = self._previous.popitem()
            signal.signal(signum, previous)
        return False

    def _handle(self, signum, frame):
        if self._holding:
            self._pending = True
        else:
            raise KeyboardInterrupt

    @contextmanager
    def held(self):
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
        if self._pending:
            self._pending = False
            raise KeyboardInterrupt
