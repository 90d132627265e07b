"""Fuzz campaigns as the command line runs them: new and resumed, from the parsed settings groups.

A campaign (:func:`new_campaign`, :func:`resume_campaign`) runs in this process or, with ``workers``, as
parallel campaigns on Ray: the two differ only in the runner (:class:`LocalRunner`, :class:`ParallelRunner`),
never in how models, seeds, training data and the analysis are found (:mod:`idcgen.session`).

The analysis comes from ``analysis`` (reuse), or from ``train`` (analysed first), or from a saved
analysis of the same model, or, as a last resort, from the seeds themselves (said plainly in the output
and the report).
"""

from __future__ import annotations

import dataclasses
import errno
import time
from pathlib import Path

from .analysis import Analysis, Clustering, analyze, find_analysis
from .checks import check_int
from .convention import infer_image_shape
from .data import check_source
from .distributed.parallel import PARALLEL_FILE, ParallelRecord
from .errors import AnalysisMismatchError, InputError, ModelError, ParameterError
from .export import export_campaign
from .framework import framework_of_path, network_with_convention
from .fuzz.campaign import Campaign, check_budget
from .fuzz.fuzzer import Fuzzer
from .fuzz.mutators import check_tasks, default_mutators, make_mutator
from .fuzz.oracle import make_oracle
from .fuzz.settings import CampaignSettings, Sources, ValiditySettings
from .fuzz.store import read_meta
from .options import (
    AnalysisOptions,
    CampaignOptions,
    ConventionOptions,
    InputOptions,
    ModelsOptions,
    RunnerOptions,
)
from .report import write_report
from .session import OUTPUTS, _say_device, load_inputs, load_networks, save_analysis


def default_oracle(network) -> str:
    """Misclassification, or for a regression model deviation (DeepTest's, 0.2)."""
    return "deviation" if network.task == "regression" else "misclassification"


def _absolute(path) -> str:
    """A path as a campaign records it: absolute when it names a file or folder, so that a resume from
    another directory finds it; a dataset name such as ``embedded-mnist:train`` as it is."""
    return str(Path(path).resolve()) if Path(path).exists() else str(path)


def _folders(paths) -> str:
    """Folders as a person reads them in a message: './' rather than '.'."""
    return ", ".join(f"{p}/" for p in paths)


def _training_inputs(spec, network, convention, sources: Sources, echo):
    """The training data of a campaign, loaded as its seeds are (labels and crop apply to a folder of frames;
    other training data is taken as it is)."""
    options = sources.load_options()
    if not Path(spec).is_dir():
        options.update(labels=None, crop=None)
    return load_inputs(spec, network, convention, echo=echo, **options)


# ---- fuzz sessions ----------------------------------------------------------------------------------
def new_campaign(
    models: ModelsOptions,
    inputs: InputOptions,
    convention: ConventionOptions,
    wanted: AnalysisOptions,
    options: CampaignOptions,
    runner: RunnerOptions,
    *,
    echo=print,
    progress: bool = True,
) -> dict | None:
    """A new campaign as the command line runs it, from its parsed settings groups: models, seeds and analysis
    found, one :class:`CampaignSettings` made, the loop run (in this process, or ``runner.workers`` campaigns on
    Ray), then exports and report. ``wanted``: the analysis asked for (None fields: any saved one, or the
    defaults when analysing). None if interrupted."""
    specs = _check_new_campaign(models, options)  # every option is checked before any model is loaded
    executor = (
        LocalRunner()
        if runner.workers is None
        else ParallelRunner(runner.workers, runner.ray, models.safe_mode, runner.gpus_per_worker)
    )
    executor.check(models=models.model, architectures=models.architectures, guide=options.guide, specs=specs)
    saved = None if options.analysis is None else Analysis.load(options.analysis)  # read once
    if saved is not None:  # a saved analysis is used as it is: refuse settings it was not made with
        check_analysis_options(saved, options.analysis, wanted)
    recorded = None if saved is None else dataclasses.replace(saved.convention, image_shape=None)
    networks = load_networks(
        models.model,
        architectures=models.architectures,
        safe_mode=models.safe_mode,
        task=models.task,
        device=models.device,
        precision=models.precision,
        images=options.seeds,
        input_shape=models.input_shape,
    )
    _say_device(networks[0])
    if options.mutators is None:  # the default set less what cannot run on this model, each said once
        kept, dropped = default_mutators(networks[0])
        mutator_specs = tuple(repr(m) for m in kept)
        for note in dropped:
            echo(f"note: {note}")
    else:
        mutator_specs = options.mutators
    check_tasks([make_mutator(s) for s in mutator_specs], networks[0].task)  # before the analysis, not 50 steps in
    network, in_convention = network_with_convention(
        networks[0], value_range=convention.value_range, preprocess=convention.preprocess, recorded=recorded
    )
    networks = [network] + [network_with_convention(n, recorded=in_convention)[0] for n in networks[1:]]
    sources = _sources(models, inputs, options)
    seeds_ds, x_seeds = load_inputs(
        options.seeds, network, in_convention, limit=inputs.limit, echo=echo, **inputs.load_options()
    )
    image_shape = options.image_shape
    if image_shape is None and len(network.input_shape) != 3:  # flat or channel-less: fuzzed as images
        image_shape = infer_image_shape(network.input_shape, seeds_ds.x.shape[1:])
    if saved is not None:
        found, source, notes, x_train, y_train = saved.bind(network), f"loaded from {options.analysis}", [], None, None
    else:
        found, source, notes, x_train, y_train = _campaign_analysis(
            executor,
            network,
            in_convention,
            sources,
            options.train,
            (seeds_ds, x_seeds),
            wanted,
            dict(random_state=options.random_state, progress=progress),
            echo,
        )
    echo(f"inputs: {in_convention.describe()}")
    for note in notes:
        echo(f"note: {note}")
    echo(f"analysis: layer {found.layer}, m = {found.m}, {found.total} combinations ({source})")
    criteria = fit_criteria(
        specs,
        network,
        x_seeds if x_train is None else x_train,
        echo,
        "the training inputs" if x_train is not None else "the SEEDS (no --train given)",
    )
    settings = CampaignSettings(
        budget=options.budget,
        mutators=tuple(mutator_specs),
        oracle=options.oracle or default_oracle(network),
        scheduler=options.scheduler,
        guide=options.guide,
        measure_specs=tuple(specs),
        validity=ValiditySettings(enabled=not options.no_validity, alpha=options.alpha, beta=options.beta),
        batch_size=options.batch_size,
        random_state=options.random_state,
        rounding=not options.no_round,
        value_range=tuple(in_convention.value_range),
        input_shape=tuple(image_shape or ()),
        sources=dataclasses.replace(sources, analysis_source=source, notes=tuple(notes)),
    )
    fuzzer = Fuzzer.from_settings(found, settings, others=networks[1:], measure=criteria)
    echo(fuzzer.validity.describe(fuzzer.mutators))
    echo("mutators: " + ", ".join(repr(mu) for mu in fuzzer.mutators))
    out = options.out or OUTPUTS / "campaigns" / f"{Path(models.model[0]).stem}_{time.strftime('%Y%m%d-%H%M%S')}"
    return executor.start(
        fuzzer, x_seeds, seeds_ds.y, Path(out), x_train=x_train, y_train=y_train, echo=echo, progress=progress
    )


def _check_new_campaign(models: ModelsOptions, options: CampaignOptions) -> list[str]:
    """The checks of a new campaign that need no model; returns the criterion specs measured besides IDC."""
    if not models.model or options.seeds is None or options.budget is None:
        raise ParameterError("--model, --seeds and --budget are needed (or --resume DIR)")
    check_budget(options.budget)
    if options.no_validity and (options.alpha, options.beta) != (0.02, 0.2):  # ignored silently otherwise
        which = "'alpha' parameter" if options.alpha != 0.02 else "'beta' parameter"
        raise ParameterError(f"the {which} sets a validity bound, which no_validity=True turns off: drop one of them")
    specs = measure_specs(options.guide, options.measure)
    if options.train is not None and options.analysis is not None:
        raise InputError("give --train (analyse first) or --analysis (reuse), not both")
    for spec in (options.seeds, options.train):  # before the framework is imported and the models loaded
        if spec is not None:
            check_source(spec)
    return specs


def _sources(models: ModelsOptions, inputs: InputOptions, options: CampaignOptions) -> Sources:
    """Where a new campaign's inputs come from, as it records them."""
    return Sources(
        model=_absolute(models.model[0]),
        other_models=tuple(_absolute(p) for p in models.model[1:]),
        architectures=tuple(str(a) if str(a) == "-" else _absolute(a) for a in models.architecture),
        seeds=_absolute(options.seeds),
        train=None if options.train is None else _absolute(options.train),
        limit=inputs.limit,
        scale=inputs.scale,
        resize=None if inputs.resize is None else "x".join(map(str, inputs.resize)),
        crop=None if inputs.crop is None else str(inputs.crop),
        labels=None if inputs.labels is None else _absolute(inputs.labels),
        class_names=inputs.class_names,
        task_given=models.task,
    )


def _campaign_analysis(
    runner, network, convention, sources: Sources, train, seeds, wanted: AnalysisOptions, analyse: dict, echo
):
    """(analysis, where it came from, notes, x_train, y_train) of a new campaign without --analysis: an analysis
    of the training data ``train`` (by ``runner``, saved); else a saved analysis of this model (one made as
    ``wanted`` asks); else, said plainly, one of the seeds themselves."""
    analyse = dict(
        analyse,
        layer=wanted.layer,
        m=wanted.resolved("m"),
        clusters=Clustering(wanted.resolved("clusters"), wanted.resolved("cluster_method")),
    )
    if train is not None:
        train_ds, x_train = _training_inputs(train, network, convention, sources, echo)
        found = runner.analyze(network, x_train, train_ds.y, data_summary=train_ds.summary(), **analyse)
        _, where = save_analysis(found, sources.model)
        return found, f"analysed on {train} ({len(x_train)} inputs{runner.where}), {where}", [], x_train, train_ds.y
    places = [OUTPUTS / "analyses", Path(sources.model).parent, Path(sources.model).parent / "analysis"]
    found, where, searched = find_analysis(
        network, places, layer=wanted.layer, m=wanted.m, cluster_method=wanted.cluster_method, clusters=wanted.clusters
    )
    if found is not None:
        return (
            found,
            f"the saved analysis of this model in {where}/, the newest found in {_folders(searched)}",
            [],
            None,
            None,
        )
    seeds_ds, x_seeds = seeds
    found = runner.analyze(network, x_seeds, seeds_ds.y, data_summary=seeds_ds.summary(), **analyse)
    note = (
        f"no --train or --analysis given and no saved analysis of this model in {_folders(searched)}; the "
        "analysis was made on the SEEDS, so IDC is measured against the seeds' own clusters, not the training "
        "data's. Pass --train for the paper's setting."
    )
    return found, "analysed on the seeds themselves", [note], None, None


def resume_campaign(
    folder,
    models: ModelsOptions,
    inputs: InputOptions,
    convention: ConventionOptions,
    wanted: AnalysisOptions,
    options: CampaignOptions,
    runner: RunnerOptions,
    *,
    echo=print,
    progress: bool = True,
) -> dict | None:
    """Continue a campaign with its own settings (a parallel one on as many Ray workers as it had); the other
    options typed with the resume (the groups' ``given``) are refused where they differ from the campaign's;
    ``options.budget`` is the new total, ``models.model`` overrides the recorded model files."""
    folder = Path(folder)
    parallel = (folder / PARALLEL_FILE).is_file()
    if runner.workers is not None and not parallel:
        read_meta(folder)  # a folder that is no campaign at all is said to be none
        raise ParameterError(f"{folder} is a campaign of one process: resume it without --workers")
    if parallel:
        record = ParallelRecord.read(folder)
        if runner.workers is not None and runner.workers != record.workers:
            raise ParameterError(
                f"{folder} runs {record.workers} workers; resume it with --workers "
                f"{record.workers} or without --workers"
            )
        settings, executor = (
            record.settings,
            ParallelRunner(record.workers, runner.ray, models.safe_mode, runner.gpus_per_worker),
        )
        analysis_folder = folder / "worker-0" / "analysis"
    else:
        settings, executor = CampaignSettings.from_dict(read_meta(folder)["config"]), LocalRunner()
        analysis_folder = folder / "analysis"
    found = Analysis.load(analysis_folder)
    refuse_resume_changes(folder, settings, found, (models, inputs, convention, wanted, options))
    src = settings.sources
    paths = models.model or [src.model, *src.other_models]
    from .framework import resolve_device

    # the options' own faults (a precision the model's framework lacks, a GPU not seen) are said as they are,
    # not as the recorded model's (the hint below is for a model file that moved)
    resolve_device(framework_of_path(paths[0]), models.device, models.precision)
    try:
        networks = load_networks(
            paths,
            architectures=models.architectures or (None if models.model else src.architectures),
            safe_mode=models.safe_mode,
            task=src.task_given,
            device=models.device,
            precision=models.precision,
            input_shape=models.input_shape,
        )
    except ModelError as exc:
        if models.model:
            raise
        relative = "" if Path(src.model).is_absolute() else ", relative to the directory it was started in"
        raise ModelError(
            f"{exc} (the model campaign {folder} recorded{relative}); give the 'model' parameter to override it"
        ) from None
    recorded = dataclasses.replace(found.convention, image_shape=None, value_range=tuple(settings.value_range))
    networks = [network_with_convention(n, recorded=recorded)[0] for n in networks]
    try:
        found.bind(networks[0])
    except AnalysisMismatchError as exc:
        raise AnalysisMismatchError(f"cannot resume {folder}: {exc}") from None
    x_train = y_train = None
    if src.train:
        train_ds, x_train = _training_inputs(src.train, networks[0], recorded, src, echo)
        y_train = train_ds.y
    criteria = []
    if settings.measure_specs:  # fitted again on the data they were fitted on (deterministic)
        x_fit = (
            x_train
            if x_train is not None
            else load_inputs(
                src.seeds, networks[0], recorded, limit=src.limit, echo=echo, **dict(src.load_options(), labels=None)
            )[1]
        )
        criteria = fit_criteria(
            list(settings.measure_specs),
            networks[0],
            x_fit,
            echo,
            f"{src.train or src.seeds} again, as when the campaign started",
        )
    if options.budget is not None:
        settings = settings.replace(budget=options.budget)
    fuzzer = Fuzzer.from_settings(found, settings, others=networks[1:], measure=criteria)
    return executor.resume(
        fuzzer, folder, options.budget, x_train=x_train, y_train=y_train, echo=echo, progress=progress
    )


# ---- runners: where the loop runs -------------------------------------------------------------------
class LocalRunner:
    """The loop in this process."""

    where = ""

    def check(self, **_) -> None:
        pass

    def analyze(self, network, x, y, **options):
        return analyze(network, x, y, **options)

    def start(self, fuzzer, x_seeds, y_seeds, out, *, x_train, y_train, echo, progress):
        try:
            campaign = fuzzer.start(x_seeds, y_seeds, out)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            # before its first commit there is no campaign to resume: it starts again
            raise InputError(
                f"no space left on the device of campaign {out}"
                + (f" (writing {exc.filename})" if exc.filename else "")
                + "; it stopped writing its seeds, before any fuzzing: free some space, remove "
                f"{out}, then start the campaign again"
            ) from None
        echo(
            f"campaign: {out}; seeds reach IDC {campaign.tracker.score:.1%} ({campaign.tracker.covered} of "
            f"{campaign.tracker.total})"
        )
        return self._run(fuzzer, campaign, x_train, y_train, echo, progress)

    def resume(self, fuzzer, folder, budget, *, x_train, y_train, echo, progress):
        campaign = fuzzer.resume(folder)
        if budget is not None:
            try:
                campaign.set_budget(budget)
            except BaseException:
                campaign.close()
                raise
        echo(
            f"resuming {folder} at step {campaign.step}: {campaign.execs} of {campaign.budget} execs done, "
            f"IDC {campaign.tracker.score:.1%}"
        )
        for note in campaign.store.notes:  # damage found on reading, and what was rebuilt
            echo(f"note: {note}")
        echo(fuzzer.validity.describe(fuzzer.mutators))
        return self._run(fuzzer, campaign, x_train, y_train, echo, progress)

    @staticmethod
    def _run(fuzzer, campaign, x_train, y_train, echo, progress) -> dict | None:
        try:
            fuzzer.run(campaign, progress=progress)
        except KeyboardInterrupt:
            echo(f"interrupted at step {campaign.step}; continue with: idcgen fuzz --resume {campaign.folder}")
            return None
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            # the writer thread's error has no path of the user's; the committed steps are whole on disk
            raise InputError(
                f"no space left on the device of campaign {campaign.folder}"
                + (f" (writing {exc.filename})" if exc.filename else "")
                + f"; it stopped at its last commit: free some space, then continue with: "
                f"idcgen fuzz --resume {campaign.folder}"
            ) from None
        campaign.open()  # the writer lock again: a second session must not export into the same folder at once
        try:
            return finish(campaign, x_train, y_train, fuzzer.oracle, list(campaign.settings.sources.notes), echo)
        finally:
            campaign.close()


#: said when parallel campaigns start (and in README.md): what --random-state does and does not fix there
PARALLEL_NOT_REPRODUCIBLE = (
    "parallel campaigns are not reproducible: the workers exchange inputs when they reach "
    "them, which the machine's timing decides, so the same --random-state gives another "
    "campaign; one process (no --workers) gives the same campaign for the same --random-state"
)


class ParallelRunner:
    """``workers`` campaigns on Ray that share what they cover (:mod:`idcgen.distributed.parallel`)."""

    def __init__(self, workers: int, ray: str | None, safe_mode: bool, gpus_per_worker=None):
        from .distributed import require_ray

        self.workers = check_int("workers", workers, 1)
        require_ray("--ray" if ray is not None else "--workers")
        self.ray, self.safe_mode, self.gpus_per_worker = ray, safe_mode, gpus_per_worker
        self.where = f" on {self.workers} Ray workers"

    def check(self, *, models, architectures, guide, specs) -> None:
        if len(models) != 1 or architectures:
            raise ParameterError(
                "--workers takes one --model (a .keras or full .h5 file): the other models of a "
                "disagreement oracle and --architecture are for one process"
            )
        if guide != "idc" or specs:
            raise ParameterError("--workers share IDC's combinations: --guide idc only, without --measure")

    def analyze(self, network, x, y, *, progress=True, **options):
        from .distributed.workers import Workers

        with Workers(
            network,
            ray=self.ray or "local",
            workers=self.workers,
            safe_mode=self.safe_mode,
            what="--workers",
            gpus_per_worker=self.gpus_per_worker,
        ) as pool:
            return pool.analyze(x, y, **options)

    def start(self, fuzzer, x_seeds, y_seeds, out, *, x_train, y_train, echo, progress):
        echo(
            f"campaign: {out} ({self.workers} workers on Ray, {self.ray or 'local'}; each in {out}/worker-<i>, "
            f"merged in {out}/merged)"
        )
        echo(f"note: {PARALLEL_NOT_REPRODUCIBLE}")
        return self._run(fuzzer, x_seeds, y_seeds, out, x_train, y_train, echo)

    def resume(self, fuzzer, folder, budget, *, x_train, y_train, echo, progress):
        echo(f"resuming {folder}: {self.workers} workers, {fuzzer.record.budget} execs in all")
        src = fuzzer.record.sources
        seeds, x_seeds = load_inputs(
            src.seeds, fuzzer.network, fuzzer.analysis.convention, limit=src.limit, echo=echo, **src.load_options()
        )
        return self._run(fuzzer, x_seeds, seeds.y, folder, x_train, y_train, echo)

    def _run(self, fuzzer, x_seeds, y_seeds, out, x_train, y_train, echo):
        settings = fuzzer.record
        from tqdm.auto import tqdm

        from .distributed.parallel import WorkerSettings, fuzz

        began = time.perf_counter()
        with tqdm(total=settings.budget, unit="exec", desc="fuzz", dynamic_ncols=True) as bar:

            def progress(status):
                states, covered = status
                bar.n = sum(s["execs"] for s in states.values())
                bar.set_postfix(IDC=f"{covered / fuzzer.analysis.total:.1%}", workers=len(states), refresh=False)
                bar.refresh()

            try:
                result = fuzz(
                    fuzzer.network,
                    fuzzer.analysis,
                    x_seeds,
                    y_seeds,
                    budget=settings.budget,
                    out=out,
                    workers=self.workers,
                    runner=WorkerSettings(ray=self.ray, gpus_per_worker=self.gpus_per_worker),
                    settings=settings,
                    safe_mode=self.safe_mode,
                    on_progress=progress,
                    echo=echo,
                )
            except KeyboardInterrupt:
                return None
        merged = Campaign.load(Path(out) / "merged", fuzzer.network)
        # the merged state's seconds are the longest worker's fuzz loop; the run also started Ray and the workers
        per = f"this run {time.perf_counter() - began:.1f} s on Ray with the workers' start; " + "; ".join(
            f"worker {i}: {w['execs']} execs, IDC {w['idc']:.1%}, {w['imports']} imported"
            for i, w in enumerate(result["workers"])
        )
        notes = [
            f"merged view of {self.workers} parallel campaigns (worker-0 .. worker-{self.workers - 1}), which "
            "exchanged the entries that reached new combinations",
            *settings.sources.notes,
        ]
        done = finish(
            merged,
            x_train,
            y_train,
            make_oracle(settings.oracle),
            notes,
            echo,
            grown="merged",
            detail=per,
            restarts=result["restarts"],
        )
        return dict(done, workers=result["workers"], restarts=result["restarts"])


def finish(
    campaign, x_train, y_train, oracle, notes, echo, *, grown: str = "grown set", detail: str = "", restarts=()
) -> dict:
    """Exports and report of a finished campaign, and the lines that sum it up."""
    if y_train is None:  # unlabelled training data cannot be retrained on: retrain.npz holds the mutants alone
        x_train = None
    exports = export_campaign(campaign, train_x=x_train, train_y=y_train, oracle=oracle)
    report = write_report(campaign, notes=notes, exports=exports)
    state = campaign.state()
    seeds_idc = campaign.stats_rows()[0]["idc"]
    echo(
        f"IDC {seeds_idc:.1%} (seeds) -> {campaign.tracker.score:.1%} ({grown}, {len(campaign.corpus)} inputs); "
        f"{_count(campaign.n_findings, 'finding')} ({_count(exports['findings']['surviving_uint8'], 'survive', 'survives')}"
        " uint8 rounding); "
        f"{state['execs']} execs in {state['elapsed_seconds']:.1f} s" + (f" ({detail})" if detail else "")
    )
    for r in restarts:
        echo(f"note: worker {r['worker']} was restarted and resumed at step {r['resumed_at']}")
    echo(f"report: {report} (and report.html); exports: {campaign.folder / 'exports'}")
    return {"state": state, "exports": exports, "seeds_idc": seeds_idc, "report": str(report)}


def measure_specs(guide: str, measure) -> list[str]:
    """The criterion specs to fit and measure besides IDC: ``measure`` (parsed specs, or their comma-separated
    text such as 'nc,kmnc:k=10'), plus the guiding criterion when it is not among them."""
    from .criteria import parse_criteria, spec_name
    from .fuzz.guidance import guide_names

    if guide not in guide_names():
        raise ParameterError(f"The 'guide' parameter must be one of {', '.join(guide_names())}. Got {guide!r} instead.")
    if isinstance(measure, str):
        measure = parse_criteria(measure)
    specs = [s for s in measure if spec_name(s) != "idc"] if measure else []
    if guide not in ("idc", "none", "keep-none") and guide not in (spec_name(s) for s in specs):
        specs.insert(0, guide)
    return specs


def fit_criteria(specs: list[str], network, x, echo, data: str) -> list:
    """Each criterion spec fitted on ``x`` (one batched pass each), said once."""
    from .criteria import make_criterion

    if not specs:
        return []
    echo(f"criteria measured besides IDC: {', '.join(specs)} (fitted on {data}, {len(x)} inputs)")
    return [make_criterion(spec).fit(network, x) for spec in specs]


# ---- options that conflict with saved work ---------------------------------------------------------
# The library names parameters; the CLI turns "name=value" and "the 'name' parameter" into its flags.


def _shown(value) -> str:
    """A setting's value as a message shows it: lists as the comma list an option takes."""
    if isinstance(value, (list, tuple)):
        value = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    return repr(value) if isinstance(value, str) else str(value)


def _refuse_changes(what: str, conflicts: list, advice: str) -> None:
    """One line naming each saved setting beside the value asked for: ``conflicts`` holds (name, saved,
    asked); a saved None reads "without ...", True a flag."""

    def saved(name, value):
        if value is None or value is False:
            return f"without the '{name}' parameter"
        return f"{name}=True" if value is True else f"{name}={_shown(value)}"

    shown = ", ".join(saved(n, s) + ("" if a is True else f" (not {_shown(a)})") for n, s, a in conflicts)
    raise ParameterError(f"{what} {shown}; {advice}")


def _same_path(a, b) -> bool:
    return a is not None and b is not None and (str(a) == str(b) or Path(a).resolve() == Path(b).resolve())


def check_analysis_options(analysis, where, wanted: AnalysisOptions) -> None:
    """Refuse a layer, m, cluster range or cluster method given with a saved analysis made otherwise:
    the saved analysis is used as it is, so a different value would be silently ignored."""
    saved = {
        "layer": analysis.layer,
        "m": analysis.m,
        "clusters": analysis.config.get("clusters"),
        "cluster_method": analysis.config.get("cluster_method", "silhouette"),
    }
    conflicts = [
        (k, saved[k], _listed(getattr(wanted, k)))
        for k in saved
        if getattr(wanted, k) is not None and _listed(getattr(wanted, k)) != saved[k]
    ]
    if conflicts:
        _refuse_changes(
            f"analysis={str(where)!r} was made with",
            conflicts,
            "leave these out to use it, or analyse again with the 'train' parameter",
        )


def _listed(value):
    """A parsed tuple as the JSON record holds it (a list)."""
    return list(value) if isinstance(value, tuple) else value


def resume_asked(settings: CampaignSettings, found, groups) -> list[tuple[str, object, object]]:
    """(parameter, the campaign's value, the value typed) for every option typed with a resume, in the order
    typed, each in the form the campaign records (the groups hold parsed values)."""
    src, validity = settings.sources, settings.validity
    config = found.config
    saved = {
        "seeds": src.seeds,
        "train": src.train,
        "layer": settings.layer,
        "m": settings.m,
        "clusters": config.get("clusters"),
        "cluster_method": config.get("cluster_method"),
        "mutators": list(settings.mutators),
        "oracle": settings.oracle,
        "scheduler": settings.scheduler,
        "batch_size": settings.batch_size,
        "random_state": settings.random_state,
        "no_validity": not validity.enabled,
        "alpha": validity.alpha,
        "beta": validity.beta,
        "scale": src.scale,
        "resize": src.resize,
        "value_range": list(settings.value_range),
        "preprocess": settings.preprocess,
        "image_shape": list(settings.input_shape),
        "class_names": None if src.class_names is None else list(src.class_names),
        "guide": settings.guide,
        "measure": list(settings.measure_specs),
        "no_round": not settings.rounding,
        "labels": src.labels,
        "crop": src.crop,
        "task": src.task_given,
    }
    values = {name: getattr(g, name) for g in groups for name in g.flags() if name in g.given}
    typed = next((g.given for g in groups if g.given), ())
    asked = []
    for name in typed:
        if name not in values:
            continue
        value = values[name]
        if name == "oracle":  # canonical, as the campaign records it
            value = str(make_oracle(value, others=[None] * len(src.other_models)))
        elif name == "resize":
            value = "x".join(map(str, value))
        elif name == "preprocess":
            value = None if value is None else value.spec
        elif name == "labels":
            value = _absolute(value)
        elif name == "measure":
            value = measure_specs(settings.guide, value)
        elif name in ("seeds", "train", "out"):
            value = str(value)
        asked.append((name, saved.get(name, _NOT_RESUMABLE), _listed(value)))
    return asked


_NOT_RESUMABLE = object()


def refuse_resume_changes(folder: Path, settings: CampaignSettings, found, groups) -> None:
    """Refuse options typed with a resume that differ from the campaign's own (it keeps the settings it was
    made with); the budget and the model files may change."""
    conflicts = []
    for name, saved, asked in resume_asked(settings, found, groups):
        if name in (
            "budget",
            "model",
            "architecture",
            "unsafe",
            "resume",
            "workers",
            "ray",
            "device",
            "precision",
            "gpus_per_worker",
        ):  # where it runs is not what it does
            continue
        if name == "out":
            if not _same_path(asked, folder):
                raise ParameterError(f"a resumed campaign stays in its folder {folder}: drop the 'out' parameter")
            continue
        if name in ("limit", "analysis"):
            raise ParameterError(
                f"a resumed campaign keeps its seeds and its analysis ({found_folder(folder)}): "
                f"drop the '{name}' parameter"
            )
        if saved is _NOT_RESUMABLE:
            raise ParameterError(f"a resumed campaign keeps the settings it was made with: drop the '{name}' parameter")
        if name in ("seeds", "train"):
            same = _same_path(saved, asked)
        elif isinstance(saved, float) or isinstance(asked, float):
            same = saved is not None and abs(float(asked) - float(saved)) <= 1e-12
        else:
            same = asked == saved
        if not same:
            conflicts.append((name, saved, asked))
    if conflicts:
        _refuse_changes(
            f"campaign {folder} was made with",
            conflicts,
            "a resumed campaign keeps its settings: leave these out, or start a new campaign",
        )


def found_folder(folder: Path) -> Path:
    """The analysis folder of a campaign (a parallel one keeps it in its first worker)."""
    return folder / "worker-0" / "analysis" if (folder / PARALLEL_FILE).is_file() else folder / "analysis"


def _count(n: int, word: str, one: str | None = None) -> str:
    """``n`` with ``word`` in its number: "1 finding", "3 findings"; a verb gives its singular form as ``one``."""
    return f"{n} {one or word}" if n == 1 else f"{n} {word if one else word + 's'}"
