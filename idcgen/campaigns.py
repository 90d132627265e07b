"""Fuzz campaigns as the command line runs them, new and resumed, on one :class:`~idcgen.session.Session`.

The option groups settle into one :class:`~idcgen.fuzz.settings.CampaignSettings` the same way for a new
campaign and for the options typed with a resume (:func:`campaign_settings`); a resume refuses what differs
from the campaign's own (``saved.differences(asked)``). The model, its input convention, the analysis and the
executor are the session's: the loop runs in this process or, with ``--workers``, as parallel campaigns on Ray
behind the same call (``executor.fuzz``, ``executor.resume``), and the finished campaign (for Ray, the merged
view) is exported and reported alike.

The analysis of a new campaign comes from ``analysis`` (reuse), or from ``train`` (analysed first), or from a
saved analysis of the same model, or, as a last resort, from the seeds themselves (said plainly in the output
and the report).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import NamedTuple, cast

from .analysis import Analysis, Clustering, find_analysis
from .checks import check_int
from .convention import infer_image_shape
from .data import check_source
from .errors import AnalysisMismatchError, InputError, ModelError, Param, ParameterError, shown
from .framework import framework_of_path
from .fuzz.campaign import check_budget
from .fuzz.fuzzer import Fuzzer
from .fuzz.mutators import check_tasks, default_mutators, make_mutator
from .fuzz.oracle import make_oracle
from .fuzz.settings import CampaignSettings, Sources, ValiditySettings
from .fuzz.store import read_meta
from .options import AnalysisOptions, CampaignOptions, ConventionOptions, InputOptions, ModelsOptions, RunnerOptions
from .session import OUTPUTS, Session, load_inputs, save_analysis


class Groups(NamedTuple):
    """The option groups of ``idcgen fuzz``."""

    models: ModelsOptions
    inputs: InputOptions
    convention: ConventionOptions
    wanted: AnalysisOptions  # the analysis asked for (None fields: any saved one, or the defaults when analysing)
    options: CampaignOptions
    runner: RunnerOptions

    def typed(self) -> tuple:
        """Every option typed, in the order typed."""
        return next((g.given for g in self if g.given), ())


# ---- settings -------------------------------------------------------------------------------------
def campaign_settings(
    groups: Groups, *, mutators, oracle: str, value_range, input_shape, analysis_source: str = "", notes=()
) -> CampaignSettings:
    """The settings ``groups`` ask for, as a campaign records them; where an option was left out, what the
    campaign settled: the default ``mutators`` and ``oracle`` for its model, the ``value_range`` of its input
    convention and the ``input_shape`` of its images (a resume passes the campaign's own).

    A campaign option whose setting has its name (``--scheduler``, ``--batch-size``, ...) is copied as it is;
    the settings below are those an option makes otherwise, or that come from elsewhere."""
    models, inputs, convention, wanted, options, _ = groups
    others = models.model[1:]
    return CampaignSettings(
        **_same_named(options),
        budget=options.budget or 0,
        mutators=tuple(options.mutators or mutators),
        oracle=oracle if options.oracle is None else str(make_oracle(options.oracle, others=[None] * len(others))),
        measure_specs=tuple(measure_specs(options.guide, options.measure)),
        validity=ValiditySettings(enabled=not options.no_validity, alpha=options.alpha, beta=options.beta),
        rounding=not options.no_round,
        value_range=tuple(convention.value_range or value_range),
        input_shape=tuple(options.image_shape or input_shape or ()),
        layer=wanted.layer,
        m=wanted.m,
        sources=Sources(
            model=_absolute(models.model[0]) if models.model else None,
            other_models=tuple(_absolute(p) for p in others),
            architectures=tuple(str(a) if str(a) == "-" else _absolute(a) for a in models.architecture),
            seeds=None if options.seeds is None else _absolute(options.seeds),
            train=None if options.train is None else _absolute(options.train),
            limit=inputs.limit,
            scale=inputs.scale,
            resize=None if inputs.resize is None else "x".join(map(str, inputs.resize)),
            crop=None if inputs.crop is None else str(inputs.crop),
            labels=None if inputs.labels is None else _absolute(inputs.labels),
            class_names=inputs.class_names,
            task_given=models.task,
            analysis_source=analysis_source,
            notes=tuple(notes),
        ),
    )


#: campaign options of a setting's name that the setting does not take as they are: campaign_settings says how
#: (--measure's specs are ``measure_specs``; ``measure``, the names of the criteria fitted, is the fuzzer's)
_MADE_OTHERWISE = {"budget", "mutators", "oracle", "measure"}


def _same_named(options: CampaignOptions) -> dict:
    """The campaign options that are settings of the same name, taken as they are (a new option with its setting
    needs nothing more here)."""
    recorded = {f.name for f in dataclasses.fields(CampaignSettings)} - _MADE_OTHERWISE
    return {name: getattr(options, name) for name in CampaignOptions.flags() if name in recorded}


def measure_specs(guide: str, measure) -> list[str]:
    """The criterion specs to fit and measure besides IDC: ``measure`` (parsed specs, or their comma-separated
    text such as 'nc,kmnc:k=10'), plus the guiding criterion when it is not among them."""
    from .criteria import parse_criteria, spec_name
    from .fuzz.guidance import guide_names

    if guide not in guide_names():
        raise ParameterError(Param("guide"), f" must be one of {', '.join(guide_names())}. Got {guide!r} instead.")
    if isinstance(measure, str):
        measure = parse_criteria(measure)
    specs = [s for s in measure if spec_name(s) != "idc"] if measure else []
    if guide not in ("idc", "none", "keep-none") and guide not in (spec_name(s) for s in specs):
        specs.insert(0, guide)
    return specs


# ---- a new campaign -------------------------------------------------------------------------------
def new_campaign(groups: Groups, *, echo=print, status=None, progress: bool = True) -> dict | None:
    """A new campaign from its option groups: the model, seeds and analysis found on one session, its settings
    made once, the loop run on the session's executor (here, or ``--workers`` campaigns on Ray), then exports
    and report. None if interrupted."""
    models, inputs, convention, wanted, options, runner = groups
    specs = _check_new_campaign(models, options, runner)  # every option is checked before any model is loaded
    saved = None if options.analysis is None else Analysis.load(options.analysis)  # read once
    if saved is not None:  # a saved analysis is used as it is: refuse settings it was not made with
        check_analysis_options(saved, options.analysis, wanted)
    with Session(models, convention, runner, analysis=saved, images=options.seeds, echo=echo, status=status) as session:
        network = session.network
        if options.mutators is None:  # the default set less what cannot run on this model, each said once
            kept, dropped = default_mutators(network)
            mutators = tuple(repr(m) for m in kept)
            for note in dropped:
                echo(f"note: {note}")
        else:
            mutators = options.mutators
        check_tasks([make_mutator(s) for s in mutators], network.task)  # before the analysis, not 50 steps in
        seeds_ds, x_seeds = session.inputs(options.seeds, inputs, limit=inputs.limit, labels=inputs.labels)
        image_shape = options.image_shape
        if image_shape is None and len(network.input_shape) != 3:  # flat or channel-less: fuzzed as images
            image_shape = infer_image_shape(network.input_shape, seeds_ds.x.shape[1:])
        if saved is not None:
            found, source, notes, x_train, y_train = saved, f"loaded from {options.analysis}", [], None, None
        else:
            found, source, notes, x_train, y_train = _campaign_analysis(
                session, groups, (seeds_ds, x_seeds), dict(random_state=options.random_state, progress=progress)
            )
        echo(f"inputs: {session.convention.describe()}")
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
        settings = campaign_settings(
            groups,
            mutators=mutators,
            oracle="deviation" if network.task == "regression" else "misclassification",  # deviation: DeepTest's
            value_range=session.convention.value_range,
            input_shape=image_shape,
            analysis_source=source,
            notes=notes,
        )
        fuzzer = Fuzzer.from_settings(found, settings, others=session.others, measure=criteria)
        echo(fuzzer.validity.describe(fuzzer.mutators))
        echo("mutators: " + ", ".join(repr(mu) for mu in fuzzer.mutators))
        out = options.out or OUTPUTS / "campaigns" / f"{Path(models.model[0]).stem}_{time.strftime('%Y%m%d-%H%M%S')}"
        fuzzed = session.executor.fuzz(fuzzer, x_seeds, seeds_ds.y, Path(out), echo=echo, progress=progress)
        return None if fuzzed is None else finish(fuzzed, x_train, y_train, echo)


def _check_new_campaign(models: ModelsOptions, options: CampaignOptions, runner: RunnerOptions) -> list[str]:
    """The checks of a new campaign that need no model; returns the criterion specs measured besides IDC."""
    if not models.model or options.seeds is None or options.budget is None:
        raise ParameterError("--model, --seeds and --budget are needed (or --resume DIR)")
    check_budget(options.budget)
    if options.no_validity and (options.alpha, options.beta) != (0.02, 0.2):  # ignored silently otherwise
        which = Param("alpha" if options.alpha != 0.02 else "beta")
        raise ParameterError(
            which, " sets a validity bound, which ", Param("no_validity", True), " turns off: drop one of them"
        )
    specs = measure_specs(options.guide, options.measure)
    if runner.workers is not None:  # parallel campaigns
        check_int("workers", runner.workers, 1)
        if len(models.model) != 1 or models.architecture:
            raise ParameterError(
                "--workers takes one --model (a .keras or full .h5 file): the other models of a "
                "disagreement oracle and --architecture are for one process"
            )
        if options.guide != "idc" or specs:
            raise ParameterError("--workers share IDC's combinations: --guide idc only, without --measure")
    if options.train is not None and options.analysis is not None:
        raise InputError("give --train (analyse first) or --analysis (reuse), not both")
    for spec in (options.seeds, options.train):  # before the framework is imported and the models loaded
        if spec is not None:
            check_source(spec)
    return specs


def _campaign_analysis(session: Session, groups: Groups, seeds, analyse: dict):
    """(analysis, where it came from, notes, x_train, y_train) of a new campaign without --analysis: an analysis
    of the training data ``--train`` (on the session's executor, saved); else a saved analysis of this model
    (one made as ``--layer``, ``--m`` ... ask); else, said plainly, one of the seeds themselves."""
    network, wanted, options, executor = session.network, groups.wanted, groups.options, session.executor
    model = _absolute(groups.models.model[0])
    analyse = dict(
        analyse,
        layer=wanted.layer,
        m=wanted.resolved("m"),
        clusters=Clustering(wanted.resolved("clusters"), wanted.resolved("cluster_method")),
    )
    if options.train is not None:
        train_ds, x_train = _training_inputs(options.train, session, groups.inputs.load_options())
        found = executor.analyze(x_train, train_ds.y, data_summary=train_ds.summary(), **analyse)
        _, where = save_analysis(found, model)
        where = f"analysed on {options.train} ({len(x_train)} inputs{executor.where}), {where}"
        return found, where, [], x_train, train_ds.y
    places = [OUTPUTS / "analyses", Path(model).parent, Path(model).parent / "analysis"]
    found, saved_in, searched = find_analysis(
        network, places, layer=wanted.layer, m=wanted.m, cluster_method=wanted.cluster_method, clusters=wanted.clusters
    )
    if found is not None:
        where = f"the saved analysis of this model in {saved_in}/, the newest found in {_folders(searched)}"
        return found, where, [], None, None
    seeds_ds, x_seeds = seeds
    found = executor.analyze(x_seeds, seeds_ds.y, data_summary=seeds_ds.summary(), **analyse)
    note = (
        f"no --train or --analysis given and no saved analysis of this model in {_folders(searched)}; the "
        "analysis was made on the SEEDS, so IDC is measured against the seeds' own clusters, not the training "
        "data's. Pass --train for the paper's setting."
    )
    return found, "analysed on the seeds themselves", [note], None, None


# ---- a resumed campaign ---------------------------------------------------------------------------
def resume_campaign(groups: Groups, *, echo=print, status=None, progress: bool = True) -> dict | None:
    """Continue the campaign in ``--resume``'s folder with its own settings (a parallel one on as many Ray workers
    as it had); the other options typed with the resume are refused where they differ from the campaign's;
    ``--budget`` is the new total, ``--model`` overrides the recorded model files. None if interrupted."""
    from .distributed import PARALLEL_FILE  # (a new campaign of one process imports no part of idcgen.distributed)

    models, _, _, _, options, runner = groups
    assert options.resume is not None  # the command line calls this only with --resume
    folder = Path(options.resume)
    parallel = (folder / PARALLEL_FILE).is_file()
    if runner.workers is not None and not parallel:
        read_meta(folder)  # a folder that is no campaign at all is said to be none
        raise ParameterError(f"{folder} is a campaign of one process: resume it without --workers")
    if parallel:
        from .distributed.parallel import ParallelRecord

        record = ParallelRecord.read(folder)
        if runner.workers is not None and runner.workers != record.workers:
            raise ParameterError(
                f"{folder} runs {record.workers} workers; resume it with --workers "
                f"{record.workers} or without --workers"
            )
        saved, runner = record.settings, dataclasses.replace(runner, workers=record.workers)
    else:  # in this process, whatever --ray says
        saved, runner = CampaignSettings.from_dict(read_meta(folder)["config"]), dataclasses.replace(runner, ray=None)
    found = Analysis.load(found_folder(folder))
    src = saved.sources
    if not models.model and src.model is None:  # else load_networks would take Path(None): a TypeError
        raise ParameterError(
            f"{folder} records no model file (a campaign started from Python on a model object); give ",
            Param("model"),
        )
    paths = models.model or (src.model, *src.other_models)
    refuse_resume_changes(folder, saved, found, groups._replace(models=dataclasses.replace(models, model=paths)))
    from .framework import resolve_device

    # the options' own faults (a precision the model's framework lacks, a GPU not seen) are said as they are,
    # not as the recorded model's (the hint below is for a model file that moved)
    resolve_device(framework_of_path(paths[0]), models.device, models.precision)
    recorded = dataclasses.replace(
        found.convention, image_shape=None, value_range=(saved.value_range[0], saved.value_range[1])
    )
    model = dataclasses.replace(
        models,
        model=tuple(paths),
        architecture=tuple(models.architecture or (() if models.model else src.architectures)),
        task=src.task_given,
    )
    try:
        session = Session(model, None, runner, analysis=found, recorded=recorded, echo=echo, status=status)
    except AnalysisMismatchError as exc:
        raise AnalysisMismatchError(f"cannot resume {folder}: ", *exc.parts) from None
    except ModelError as exc:
        if models.model or src.model is None:  # (no --model and no recorded model file is refused above)
            raise
        relative = "" if Path(src.model).is_absolute() else ", relative to the directory it was started in"
        raise ModelError(
            *exc.parts, f" (the model campaign {folder} recorded{relative}); give ", Param("model"), " to override it"
        ) from None
    with session:
        network = session.network
        x_train = y_train = None
        if src.train:
            train_ds, x_train = _training_inputs(src.train, session, src.load_options())
            y_train = train_ds.y
        criteria = []
        if saved.measure_specs:  # fitted again on the data they were fitted on (deterministic)
            x_fit = (
                x_train
                if x_train is not None
                else session.inputs(src.seeds, src, limit=src.limit)[1]  # Sources load as InputOptions do
            )
            data = f"{src.train or src.seeds} again, as when the campaign started"
            criteria = fit_criteria(list(saved.measure_specs), network, x_fit, echo, data)
        settings = saved if options.budget is None else saved.replace(budget=options.budget)
        fuzzer = Fuzzer.from_settings(found, settings, others=session.others, measure=criteria)

        def seeds():  # a parallel campaign's workers are given them again
            ds, x = load_inputs(
                src.seeds,
                fuzzer.network,
                fuzzer.analysis.convention,
                limit=src.limit,
                echo=echo,
                **src.load_options(),
            )
            return x, ds.y

        fuzzed = session.executor.resume(fuzzer, folder, options.budget, seeds=seeds, echo=echo, progress=progress)
        return None if fuzzed is None else finish(fuzzed, x_train, y_train, echo)


#: typed with a resume, options about where it runs, not what it does (the budget is the new total)
_WHERE_IT_RUNS = {
    "budget",
    "model",
    "architecture",
    "unsafe",
    "resume",
    "workers",
    "ray",
    "gpus_per_worker",
    "device",
    "precision",
}
#: the option that sets a recorded setting, where the names differ (validity's ``enabled`` is --no-validity's)
_OPTION_OF = {
    "task_given": "task",
    "measure_specs": "measure",
    "rounding": "no_round",
    "enabled": "no_validity",
    "input_shape": "image_shape",
}


def refuse_resume_changes(folder: Path, saved: CampaignSettings, found: Analysis, groups: Groups) -> None:
    """Refuse options typed with a resume that differ from the campaign's own (it keeps the settings it was
    made with), in one line naming each in the order typed; the budget and the model files may change."""
    typed = groups.typed()
    differing = _differences(saved, found, groups) if typed else {}
    conflicts = []
    for name in typed:
        if name in _WHERE_IT_RUNS:
            continue
        if name == "out":
            if not _same_path(groups.options.out, folder):
                raise ParameterError(f"a resumed campaign stays in its folder {folder}: drop ", Param("out"))
        elif name in ("limit", "analysis"):
            raise ParameterError(
                f"a resumed campaign keeps its seeds and its analysis ({found_folder(folder)}): drop ", Param(name)
            )
        elif name not in _recorded_options():
            raise ParameterError("a resumed campaign keeps the settings it was made with: drop ", Param(name))
        elif name in differing:
            conflicts.append((name, *differing[name]))
    if conflicts:
        _refuse_changes(
            (f"campaign {folder} was made with",),
            conflicts,
            "a resumed campaign keeps its settings: leave these out, or start a new campaign",
        )


def _differences(saved: CampaignSettings, found: Analysis, groups: Groups) -> dict:
    """option -> (the campaign's value, the value typed), as options take them, for every setting the options
    would change: ``saved.differences(asked)``, and the analysis' clusters and the preprocessing, which the
    analysis records."""
    if "guide" not in groups.typed():  # the criteria measured besides IDC are the campaign's guide's
        groups = groups._replace(options=dataclasses.replace(groups.options, guide=saved.guide))
    asked = campaign_settings(
        groups,
        mutators=saved.mutators,
        oracle=saved.oracle,
        value_range=saved.value_range,
        input_shape=saved.input_shape,
    )
    differing = {}
    for name, mine, theirs in saved.differences(asked, ignore=("budget", "task", "measure", "storage", "parallel")):
        if name == "validity":
            for f in dataclasses.fields(cast(ValiditySettings, mine)):  # the "validity" field's value
                if getattr(mine, f.name) != getattr(theirs, f.name):
                    differing[_OPTION_OF.get(f.name, f.name)] = (getattr(mine, f.name), getattr(theirs, f.name))
        else:
            differing[_OPTION_OF.get(name, name)] = (mine, theirs)
    for negated in ("no_validity", "no_round"):  # the flag is the setting turned off
        if negated in differing:
            mine, theirs = differing[negated]
            differing[negated] = (not mine, not theirs)
    for name in ("seeds", "train"):  # the path as typed; the same file under another name is no change
        if name in differing:
            typed = getattr(groups.options, name)
            differing[name] = (differing[name][0], str(typed))
            if _same_path(differing[name][0], typed):
                del differing[name]
    preprocess = groups.convention.preprocess
    wanted, config = groups.wanted, found.config
    for name, mine, theirs in (
        ("clusters", config.get("clusters"), None if wanted.clusters is None else list(wanted.clusters)),
        ("cluster_method", config.get("cluster_method"), wanted.cluster_method),
        ("preprocess", saved.preprocess, None if preprocess is None else preprocess.spec),
    ):
        if mine != theirs:
            differing[name] = (mine, theirs)
    return differing


def _recorded_options() -> set:
    """The options whose values a campaign records (a resume compares them with its settings)."""
    settings = (CampaignSettings, Sources, ValiditySettings)
    names = {_OPTION_OF.get(f.name, f.name) for kind in settings for f in dataclasses.fields(kind)}
    return names | {"clusters", "cluster_method", "preprocess"}  # the analysis' and the input convention's


def found_folder(folder: Path) -> Path:
    """The analysis folder of a campaign (a parallel one keeps it in its first worker)."""
    from .distributed import PARALLEL_FILE

    return folder / "worker-0" / "analysis" if (folder / PARALLEL_FILE).is_file() else folder / "analysis"


# ---- what every campaign shares -------------------------------------------------------------------
def _training_inputs(spec, session: Session, load: dict):
    """The training data of a campaign, loaded as its seeds are (labels and crop apply to a folder of frames;
    other training data is taken as it is)."""
    if not Path(spec).is_dir():
        load = dict(load, labels=None, crop=None)
    return load_inputs(spec, session.network, session.convention, echo=session.echo, **load)


def fit_criteria(specs: list[str], network, x, echo, data: str) -> list:
    """Each criterion spec fitted on ``x`` (one batched pass each), said once."""
    from .criteria import make_criterion

    if not specs:
        return []
    echo(f"criteria measured besides IDC: {', '.join(specs)} (fitted on {data}, {len(x)} inputs)")
    return [make_criterion(spec).fit(network, x) for spec in specs]


def finish(fuzzed, x_train, y_train, echo) -> dict:
    """Exports and report of a finished campaign (:class:`idcgen.executor.Fuzzed`), and the lines that sum it
    up. The export and report modules (and the plotting and markdown they use) are imported here, where the
    campaign is done, not before its first step."""
    from .export import export_campaign
    from .report import write_report

    campaign = fuzzed.campaign
    if y_train is None:  # unlabelled training data cannot be retrained on: retrain.npz holds the mutants alone
        x_train = None
    try:
        exports = export_campaign(campaign, train_x=x_train, train_y=y_train, oracle=fuzzed.oracle)
        report = write_report(campaign, notes=list(fuzzed.notes), exports=exports)
        state = campaign.state()
        seeds_idc = campaign.stats_rows()[0]["idc"]
        survive = _count(exports["findings"]["surviving_uint8"], "survive", "survives")
        echo(
            f"IDC {seeds_idc:.1%} (seeds) -> {campaign.tracker.score:.1%} ({fuzzed.grown}, {len(campaign.corpus)} "
            f"inputs); {_count(campaign.n_findings, 'finding')} ({survive} uint8 rounding); "
            f"{state['execs']} execs in {state['elapsed_seconds']:.1f} s"
            + (f" ({fuzzed.detail})" if fuzzed.detail else "")
        )
        for r in fuzzed.restarts:
            echo(f"note: worker {r['worker']} was restarted and resumed at step {r['resumed_at']}")
        echo(f"report: {report} (and report.html); exports: {campaign.folder / 'exports'}")
    finally:
        campaign.close()
    done = {"state": state, "exports": exports, "seeds_idc": seeds_idc, "report": str(report)}
    if fuzzed.workers is not None:
        done.update(workers=fuzzed.workers, restarts=list(fuzzed.restarts))
    return done


def _absolute(path) -> str:
    """A path as a campaign records it: absolute when it names a file or folder, so that a resume from
    another directory finds it; a dataset name such as ``embedded-mnist:train`` as it is."""
    return str(Path(path).resolve()) if Path(path).exists() else str(path)


def _folders(paths) -> str:
    """Folders as a person reads them in a message: './' rather than '.'."""
    return ", ".join(f"{p}/" for p in paths)


def _count(n: int, word: str, one: str | None = None) -> str:
    """``n`` with ``word`` in its number: "1 finding", "3 findings"; a verb gives its singular form as ``one``."""
    return f"{n} {one or word}" if n == 1 else f"{n} {word if one else word + 's'}"


# ---- options that conflict with saved work ---------------------------------------------------------
# The library names parameters as Params: the CLI spells them as its flags.


def _refuse_changes(what: tuple, conflicts: list, *advice) -> None:
    """One line naming each saved setting beside the value asked for: ``conflicts`` holds (name, saved,
    asked); a saved None reads "without ...", True a flag; ``what`` and ``advice``: the message's parts."""
    parts: list = [*what, " "]
    for i, (name, saved, asked) in enumerate(conflicts):
        parts += [", "] if i else []
        parts += ["without ", Param(name)] if saved is None or saved is False else [Param(name, saved)]
        parts += [] if asked is True else [f" (not {shown(asked)})"]
    raise ParameterError(*parts, "; ", *advice)


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
            (Param("analysis", str(where)), " was made with"),
            conflicts,
            "leave these out to use it, or analyse again with ",
            Param("train"),
        )


def _listed(value):
    """A parsed tuple as the JSON record holds it (a list)."""
    return list(value) if isinstance(value, tuple) else value
