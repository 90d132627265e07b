"""The ``idcgen`` command line: a thin layer over the library.

Every library error becomes one line on stderr (``error: ...``) and exit status 1 (:mod:`idcgen.commandline`);
each result prints its own summary lines.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional

import typer

from .commandline import also_sets, fail, register
from .criteria import ALL_NAMES, NEEDS_DATA
from .options import (
    AffinityOptions,
    AnalysisOptions,
    CampaignOptions,
    CampaignRunnerOptions,
    ConventionOptions,
    HardenOptions,
    InputOptions,
    InspectOptions,
    ModelOptions,
    ModelsOptions,
    OrderingOptions,
    RunnerOptions,
)
from .prioritization import TRAINED_ORDERINGS

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Coverage-guided test-input generation with Importance-Driven Coverage (IDC).",
)

DEFAULT_OUTPUTS = Path("outputs")

UnsafeOpt = typer.Option(
    False, "--unsafe", help="Turn off Keras' safe mode (allows Lambda layers): trusted files only."
)
ArchitectureOpt = typer.Option(
    None,
    "--architecture",
    "--weights",
    help="Keras JSON architecture (as model.to_json() "
    "writes) for a weights-only .h5 model file; "
    "for a PyTorch factory --model "
    "package.module:make_model, its state_dict "
    "file (--weights W.pt).",
)


def _check_report_folder(out: Path | None) -> None:
    """A report folder given as an existing file is refused before the work, not after it when the report is
    written (harden had retrained both models by then)."""
    if out is not None and out.exists() and not out.is_dir():
        fail(f"--out {out} is a file; the report is a folder: give a folder name")


def command(func):
    """Register ``func`` as an ``idcgen`` command (:func:`idcgen.commandline.register`)."""
    return register(app, func)


def _session(
    model: ModelOptions,
    convention: ConventionOptions | None = None,
    runner: RunnerOptions | None = None,
    analysis=None,
    images=None,
):
    """The command's :class:`idcgen.session.Session` (notes on stdout; Ray's start and the device on stderr);
    ``images``: the input set whose shape a model file that records none (TorchScript) takes."""
    from .session import Session

    return Session(model, convention, runner, analysis=analysis, images=images, echo=typer.echo, status=_stderr)


def _stderr(line: str) -> None:
    typer.echo(line, err=True)


def _echo_lines(lines, echo=typer.echo) -> None:
    """A result's summary lines, printed."""
    for line in lines:
        echo(line)


def _check_reading(*specs, reading: InputOptions, limit=None) -> None:
    """Input paths, dataset names and loading options checked before the framework is imported and the
    model loaded."""
    from .data import check_source

    for spec in specs:
        if spec is not None:
            check_source(
                spec,
                scale=reading.scale,
                limit=limit,
                resize=reading.resize,
                crop=reading.crop,
                class_names=reading.class_names,
            )


def _shard_pattern(spec: str, option: str, runner: RunnerOptions, limit) -> bool:
    """Whether ``spec`` names shard files the Ray workers read themselves (a pattern, with --ray or --workers);
    a pattern naming none, or --limit beside one, is refused in one line before any worker starts."""
    if not runner.parallel or not any(c in spec for c in "*?["):
        return False
    from .distributed.shards import shard_files

    shard_files(spec)
    if limit is not None:
        fail(f"--limit is for one input set; shard files ({option} with a pattern) are read whole: drop --limit")
    return True


def _idc_of_shards(session, names, pattern: str, as_json: bool, load: dict):
    """``coverage --inputs 'PATTERN' --ray``: IDC of shard files the Ray workers read themselves, one a shard."""
    from .session import Measurement

    found = session.analysis
    if found is None or names != ["idc"]:
        fail("shard files (--inputs with a pattern) are measured for IDC only: give --criteria idc, or one input set")
    held = session.executor.shards(pattern, **load)
    result = session.executor.tracker(found, held, progress=not as_json).result()
    measured = Measurement({"idc": result}, {}, {}, len(held), found, shards=len(held.sources))
    _echo_lines([json.dumps(measured.to_dict())] if as_json else measured.summary_lines())


def _need_ray(ray: Optional[str], workers: Optional[int]) -> None:
    """With --ray or --workers, a worker count of at least 1 and Ray installed: said in one line before any
    model is loaded."""
    if workers is not None:
        from .checks import check_int

        check_int("workers", workers, 1)
    if ray is not None or workers is not None:
        from .distributed import require_ray

        require_ray("--ray" if ray is not None else "--workers")


@command
def layers(model: ModelOptions):
    """List the model's layers: name, type, output shape, neurons (units or channels)."""
    from .session import load_networks

    network = load_networks(
        [model.model],
        architectures=model.architectures,
        safe_mode=model.safe_mode,
        task=model.task,
        device=model.device,
        precision=model.precision,
        input_shape=model.input_shape,
        batch_size=model.batch_size,
    )[0]
    rows = [(i.name, i.type, str(i.output_shape), str(i.neurons)) for i in network.layers_info()]
    widths = [max(len(r[c]) for r in rows + [("name", "type", "output shape", "neurons")]) for c in range(4)]
    for row in [("name", "type", "output shape", "neurons")] + rows:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
    if network.task == "regression":  # a classifier's listing stays as it was
        typer.echo(f"task: {_task_line(network)}")
    typer.echo(f"logits: {network.logits_layer}   default subject layer: {network.default_layer()}")
    for note in network.rule_notes(None):
        typer.echo(note)
    typer.echo(_subject_line(network))
    typer.echo(f"expects: {network.own_convention().describe()}")
    found = network.preprocessing()
    typer.echo(
        "preprocessing layers: "
        + (", ".join(found) if found else "none (give --preprocess if the model expects normalised inputs)")
    )


def _subject_line(network) -> str:
    """Which layers `analyze --layer` accepts, so a refused one is not found one run at a time."""
    usable = network.subject_layers()
    hidden = [i.name for i in network.layers_info() if network.is_hidden(i.name)]
    if len(usable) == len(hidden):
        return f"subject layers: all {len(hidden)} hidden layers"
    blocked = [
        i
        for i in network.layers_info()
        if network.rule_label(i.name) == "none" and (network.is_hidden(i.name) or i.name == network.logits_layer)
    ]
    shown = ", ".join(usable[:5]) + (f" ... {usable[-1]}" if len(usable) > 5 else "")
    why = (
        f"from the last layer without an LRP rule on ({', '.join(f'{b.name!r} ({b.type})' for b in blocked[-3:])})"
        if blocked  # else: layers relevance does not reach (attention queries and keys) or without a row per input
        else "the others reached by no relevance (attention queries and keys, a gate's branch: their rules hold "
        "them constant) or without a row per input"
    )  # the list names the usable ones: after this reason, it read as the layers left out
    then = ": " if blocked else "; usable: "
    return f"subject layers: {len(usable)} of {len(hidden)} hidden layers, {why}{then}{shown or 'none'}"


def _task_line(network) -> str:
    """ "regression (one output unit, tanh; ...)" or "classification (10 classes)"."""
    if network.task == "classification":
        return f"classification ({network.n_classes} classes)"
    act = network.head_activation()
    line = (
        f"regression (one output unit, {act}; relevance starts from its pre-activation; "
        "--task classification overrides)"
    )
    return line + (f"; note: {network.head_note}" if network.head_note else "")


@command
def analyze(
    model: ModelOptions,
    train: str = typer.Option(
        ...,
        "--train",
        help="Training inputs: folder, .npz, .npy, IDX .gz, or a dataset "
        "name; with --ray or --workers a pattern such as "
        "'shards/*.npz' names shard files (or folders) the workers "
        "read themselves.",
    ),
    wanted: AnalysisOptions = None,
    relevance_of: str = typer.Option("predicted", "--relevance-of", help="predicted or label."),
    correct_only: bool = typer.Option(False, "--correct-only", help="Use only correctly classified inputs."),
    only_class: Optional[int] = typer.Option(None, "--class", help="Use only inputs of this label."),
    random_state: int = typer.Option(0, "--random-state", help="Seed of the clustering (k-means restarts)."),
    reading: InputOptions = None,
    convention: ConventionOptions = None,
    out: Optional[Path] = typer.Option(
        None, "--out", help="Analysis folder (default outputs/analyses/<model>_<layer>_m<m>_<data fingerprint>)."
    ),
    force: bool = also_sets(typer.Option(False, "--force", help="Replace the analysis already in --out."), "overwrite"),
    runner: RunnerOptions = None,
):
    """Find the m most important neurons of a layer and cluster their activations."""
    from .analysis import Clustering, RelevanceSettings, check_save_target

    _need_ray(runner.ray, runner.workers)
    if out is not None:
        check_save_target(out, overwrite=force)  # before the analysis, not after minutes of work
    _check_reading(train, reading=reading, limit=reading.limit)
    sharded = _shard_pattern(train, "--train", runner, reading.limit)  # shard files the workers read themselves
    with _session(model, convention, runner, images=None if sharded else train) as session:
        if sharded:
            x = session.executor.shards(train, **reading.load_options())
            x.load()
            y, summary, scaling = None, x.summary(), f"{len(x.sources)} shards, scale {reading.scale}"
        else:
            ds, x = session.inputs(train, reading, limit=reading.limit, labels=reading.labels)
            y, summary, scaling = ds.y, ds.summary(), ds.scaling
        analysis = session.executor.analyze(
            x,
            y,
            layer=wanted.layer,
            m=wanted.resolved("m"),
            clusters=Clustering(wanted.resolved("clusters"), wanted.resolved("cluster_method")),
            relevance=RelevanceSettings(of=relevance_of, correct_only=correct_only, only_class=only_class),
            random_state=random_state,
            data_summary=summary,
        )
        _report_analysis(session, analysis, x, model, out, force, scaling)


def _report_analysis(session, analysis, x, model: ModelOptions, out, force: bool, scaling: str) -> None:
    """Save a new analysis and say what it found (and the coverage of the inputs it was made on)."""
    from .framework.common import peak_memory_mib
    from .session import save_analysis

    network, convention = session.network, session.convention
    _, where = save_analysis(analysis, model.model, out, force=force)
    ks_chosen = [c.k for c in analysis.clusters]
    if network.task == "regression":
        typer.echo(
            f"task: {_task_line(network)}"
            + (f"; MSE on the labels {analysis.data['mse']:.4g}" if analysis.data.get("mse") is not None else "")
        )
    typer.echo(
        f"layer {analysis.layer}: important neurons {analysis.neurons.tolist()}, clusters {ks_chosen}, "
        f"{analysis.total} combinations"
    )
    low, high = analysis.data["observed_range"]
    typer.echo(f"inputs: {convention.describe()}; training inputs span [{low:g}, {high:g}] ({scaling})")
    for note in analysis.notes:
        if note not in analysis.warnings:
            typer.echo(f"note: {note}")
    for warning in analysis.warnings:
        typer.echo(f"warning: {warning}", err=True)
    typer.echo(f"training inputs reach {session.executor.coverage(analysis, x)}")
    typer.echo(f"analysis {where} ({sum(analysis.timings.values()):.1f} s, peak memory {peak_memory_mib():,.0f} MiB)")


@command
def coverage(
    analysis: Optional[Path] = typer.Option(
        None, "--analysis", help="Analysis folder from `idcgen analyze` (for IDC)."
    ),
    model: ModelOptions = None,
    inputs: str = typer.Option(
        ...,
        "--inputs",
        help="Inputs to measure; with --ray or --workers a pattern "
        "such as 'shards/*.npz' names shard files (or folders) "
        "the workers read themselves (IDC only; the other "
        "criteria stay in this process).",
    ),
    criteria: str = typer.Option(
        "idc",
        "--criteria",
        help=f"Comma-separated: {', '.join(ALL_NAMES)}; parameters as "
        "name(key=value), e.g. "
        "'nc(scaling=channel-means),lsc(group=label)' (the "
        "older nc:scaling=channel-means still works).",
    ),
    train: Optional[str] = also_sets(
        typer.Option(None, "--train", help=f"Training inputs (needed by {', '.join(NEEDS_DATA)})."), "x_train"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    reading: InputOptions = None,
    convention: ConventionOptions = None,
    runner: RunnerOptions = None,
):
    """Measure the coverage of an input set: IDC (the share of important-neuron cluster combinations it
    reaches) and, on request, the other criteria."""
    from .criteria import parse_criteria

    _need_ray(runner.ray, runner.workers)
    names = parse_criteria(criteria)
    if "idc" in names and analysis is None:
        fail("IDC needs --analysis DIR (from `idcgen analyze`); or leave idc out of --criteria")
    _check_reading(inputs, train, reading=reading, limit=reading.limit)
    with _session(model, convention, runner, analysis if "idc" in names else None, images=inputs) as session:
        if _shard_pattern(inputs, "--inputs", runner, reading.limit):
            return _idc_of_shards(session, names, inputs, as_json, dict(reading.load_options(), labels=None))
        _measure(session, inputs, names, train, as_json, reading)


def _measure(session, inputs: str, names: list, train, as_json: bool, reading: InputOptions) -> None:
    """``coverage`` of one input set in this process (IDC on the session's executor)."""
    from .criteria import make_criterion

    network, found, labels = session.network, session.analysis, reading.labels
    echo = _stderr if as_json else typer.echo
    _, x = session.inputs(inputs, reading, limit=reading.limit, echo=echo)
    others = {n: make_criterion(n) for n in names if n != "idc"}  # keyed by spec: "nc", "nc(threshold=0.5)"
    x_train = y_train = None
    needing = [c.name for c in others.values() if c.needs_data]
    if needing and train is None:
        fail(f"{', '.join(needing)} need --train DATA (the model's training inputs)")
    if labels is not None and not needing:  # they label --train's images; the inputs measured need none
        fail(
            "--labels gives the labels of --train's image folder, which only lsc:group=label and dsc read; "
            "coverage of --inputs needs no labels: drop --labels"
        )
    if train is not None and not needing:
        fail(
            f"--train is read by criteria fitted on training data ({', '.join(NEEDS_DATA)}); "
            f"{', '.join(names)} do not use it: drop --train"
        )
    if needing:
        train_ds, x_train = session.inputs(train, reading, labels=labels, echo=echo)
        y_train = train_ds.y
    from .session import measure_coverage

    measured = measure_coverage(
        network,
        x,
        others,
        analysis=found,
        x_train=x_train,
        y_train=y_train,
        executor=session.executor if found is not None else None,
    )
    if not measured.results:
        fail("; ".join(f"{name} could not be computed: {why}" for name, why in measured.missing.items()))
    if as_json:
        typer.echo(json.dumps(measured.to_dict()))
    else:
        _echo_lines(measured.summary_lines())


@command
def prioritize(
    model: ModelOptions,
    inputs: str = typer.Option(
        ...,
        "--inputs",
        help="The inputs to order (with labels, e.g. an .npz with y "
        "or a folder with --labels, the ordering is scored by "
        "APFD).",
    ),
    ordering: OrderingOptions = None,
    out: Path = typer.Option(
        ..., "--out", help="CSV file to write: rank (1 = look first), input (index, or file name for a folder), score."
    ),
    train: Optional[str] = also_sets(
        typer.Option(
            None,
            "--train",
            help=f"Training inputs ({', '.join(TRAINED_ORDERINGS)}, the coverage orderings of {', '.join(NEEDS_DATA)}, "
            "and idc-additional without --analysis).",
        ),
        "x_train",
    ),
    analysis: Optional[Path] = typer.Option(
        None,
        "--analysis",
        help="Analysis folder for idc-rarity and idc-additional (default: analyse --train with --m).",
    ),
    as_json: bool = typer.Option(
        False,
        "--json",
        help="Print one JSON object: apfd, found_at_1, "
        "found_at_5, found_at_10, failures, inputs (null "
        "without labels).",
    ),
    reading: InputOptions = None,
    convention: ConventionOptions = None,
):
    """Order a set of inputs so that those most likely to reveal a failure come first (which to label first);
    with labels, score the ordering by APFD and the share of failures in the first 1, 5 and 10 %."""
    from .prioritization import OrderingParameters, check_ordering, check_ranking_target, input_names
    from .prioritization import prioritize as run

    o = ordering
    check_ordering(o.by)  # an unknown ordering is refused before any model is loaded
    check_ranking_target(out)  # a model file, a folder: refused before, not overwritten after
    _check_reading(inputs, train, reading=reading, limit=reading.limit)
    with _session(model, convention, analysis=analysis, images=inputs) as session:
        network, found = session.network, session.analysis
        check_ordering(o.by, network.task)  # classification-only orderings refused for a regression model
        ds, x = session.inputs(
            inputs, reading, limit=reading.limit, labels=reading.labels, echo=_stderr if as_json else None
        )
        x_train = y_train = None
        if train is not None:
            train_ds, x_train = session.inputs(train, reading, echo=_stderr)
            y_train = train_ds.y
    ranking = run(
        network,
        x,
        by=o.by,
        x_train=x_train,
        y_train=y_train,
        y=ds.y,
        analysis=found,
        m=o.m,
        parameters=OrderingParameters(layer=o.layer, passes=o.passes, tolerance=o.tolerance),
        random_state=o.random_state,
        progress=not as_json,
    )
    path = ranking.to_csv(out, input_names(inputs, reading.limit))
    evaluation = ranking.evaluation
    if as_json:
        keys = ("apfd", "found_at_1", "found_at_5", "found_at_10", "failures", "inputs")
        payload = evaluation.to_dict() if evaluation is not None else dict.fromkeys(keys)
        payload = {k: (None if isinstance(v, float) and v != v else v) for k, v in payload.items()}
        payload.update(inputs=len(x), by=ranking.by, out=str(path))
        typer.echo(json.dumps(payload))
        return
    _echo_lines(ranking.summary_lines(path))


@command
def fuzz(
    models: ModelsOptions,
    options: CampaignOptions,
    wanted: AnalysisOptions,
    inputs: InputOptions,
    convention: ConventionOptions,
    runner: CampaignRunnerOptions,
):
    """Grow a test set that reaches new important-neuron cluster combinations; export it and report."""
    from .campaigns import Groups, new_campaign, resume_campaign

    _need_ray(runner.ray, runner.workers)
    if options.resume is None and runner.ray is not None and runner.workers is None:
        fail("--ray runs parallel campaigns: give their number with --workers N")
    # a resume keeps the campaign's own settings; any other option typed is checked against them
    run = new_campaign if options.resume is None else resume_campaign
    result = run(Groups(models, inputs, convention, wanted, options, runner), echo=typer.echo, status=_stderr)
    if result is None:  # interrupted: what was committed is on disk
        raise typer.Exit(130)


@command
def harden(
    model: ModelOptions,
    train: str = typer.Option(..., "--train", help="The model's training data."),
    campaign: Path = typer.Option(..., "--campaign", help="Campaign folder whose kept inputs retrain the model."),
    test: str = typer.Option(..., "--test", help="Test set to measure robustness on (keep it apart from the seeds)."),
    retraining: HardenOptions = None,
    limit_test: Optional[int] = typer.Option(None, "--limit-test", help="Use the first N test inputs."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output folder (default <campaign>/harden)."),
    scale: str = typer.Option(
        "auto",
        "--scale",
        help="auto (uint8 0..255 mapped onto the model's value range, floats kept), 255 (divide by 255) or none.",
    ),
    class_names: Optional[str] = typer.Option(
        None,
        "--class-names",
        help="Class names in label order (cat,dog "
        "or a file with one per line): labels "
        "of image class subfolders not named "
        "by integers (default: sorted names).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object (the rest on stderr)."),
):
    """Retrain with a campaign's kept inputs and with equal-size baselines from the same seeds; compare
    robustness (clean, a corruption suite, PGD, held-out findings)."""
    from .checks import check_int
    from .fuzz.campaign import Campaign
    from .fuzz.store import read_meta
    from .hardening import Assessment, Retraining, check_baselines, check_pair, summary_lines
    from .hardening import harden as run

    if limit_test is not None:
        check_int("limit_test", limit_test, 1)  # before the model loads, named as the option it is
    r = retraining
    check_baselines(r.baselines)  # a misspelt name before the model loads
    read_meta(campaign)  # a missing folder or an analysis: "not a campaign folder", before the model loads
    if r.held_out is not None:
        read_meta(r.held_out)
    _check_report_folder(out)
    reading = InputOptions.from_typed({"scale": scale, "class_names": class_names})
    _check_reading(train, test, reading=reading)
    session = _session(model, analysis=campaign / "analysis")
    network = session.network
    check_baselines(r.baselines, network)  # one line naming a baseline the model cannot run (pgd on regression)
    if network.task == "regression":
        fail(
            "harden measures accuracy and retrains with class labels; it is for classifiers, and this model is "
            "a regression model (one output unit)"
        )
    classes = None if r.pair is None else check_pair(r.pair.split(","), network.n_classes)  # before any work
    echo = _stderr if as_json else typer.echo
    found = Campaign.load(campaign, network)
    held = None if r.held_out is None else Campaign.load(r.held_out, network)
    for note in found.notes + ([] if held is None else held.notes):  # damage found on reading (nothing repaired)
        echo(f"note: {note}")
    # the inputs as the campaign's
    session.convention = dataclasses.replace(session.convention, value_range=found.value_range)
    train_ds, x_train = session.inputs(train, reading)
    test_ds, x_test = session.inputs(test, reading, limit=limit_test)
    if train_ds.y is None or test_ds.y is None:
        fail("--train and --test need labels")
    out = out or campaign / "harden"
    summary = run(
        network,
        x_train,
        train_ds.y,
        found,
        x_test,
        test_ds.y,
        retraining=Retraining(mode=r.mode, epochs=r.epochs, repeats=r.repeats),
        random_state=r.random_state,
        out=out,
        baselines=r.baselines,
        assessment=Assessment(
            corruptions=r.corruptions, severities=r.severities, pgd_eps=r.pgd_eps, held_out=held, pair=classes
        ),
    )
    _echo_lines(summary_lines(summary, out), echo)
    if as_json:
        typer.echo(json.dumps(summary))


@command
def convert(
    old: Path = typer.Argument(
        ...,
        metavar="OLD",
        help="Model file to read: a Keras 2.x .h5, or a "
        "weights-only .h5 with --architecture; a PyTorch "
        "TorchScript .pt (with --input-shape), or a factory "
        "package.module:make_model with --weights.",
    ),
    new: Path = typer.Argument(
        ...,
        metavar="NEW",
        help="File to write: .keras or .h5 (the format follows the suffix); .pt2 for a PyTorch model.",
    ),
    architecture: Optional[Path] = ArchitectureOpt,
    unsafe: bool = UnsafeOpt,
    input_shape: Optional[str] = typer.Option(
        None,
        "--input-shape",
        help="H,W,C of the images a TorchScript model takes (TorchScript files do not record it).",
    ),
    force: bool = also_sets(typer.Option(False, "--force", help="Replace NEW if it exists."), "overwrite"),
):
    """Re-save a model file as one idcgen reads fully: an old or weights-only Keras file as one Keras 3 reads
    (Keras 2.1-era files need tf-keras); a PyTorch TorchScript file or factory as a .pt2 program."""
    from .framework import convert as run

    shape = None if input_shape is None else _shape_option(input_shape, "--input-shape")
    typer.echo(run(old, new, architecture=architecture, safe_mode=not unsafe, overwrite=force, input_shape=shape))


def _shape_option(text: str, option: str) -> tuple:
    try:
        shape = tuple(int(v) for v in text.replace("x", ",").split(","))
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        fail(f"{option} takes positive integers such as 32,32,3; got {text!r}")
    return shape


@command
def mutators():
    """List the mutators with their kinds and default parameters."""
    from .fuzz.mutators import DEFAULT_MUTATORS, REGISTRY, describe_mutators

    for name, kind, params in describe_mutators():
        args = ", ".join(f"{k}={v!r}" for k, v in params.items())
        scene = "  (validity: scene, SSIM floor)" if REGISTRY[name].validity == "scene" else ""
        typer.echo(f"{name:<16} {kind:<10} {args}{scene}")
    typer.echo(f"default: {DEFAULT_MUTATORS}")


@command
def demo(
    out: Path = typer.Option(DEFAULT_OUTPUTS / "demo", "--out", help="Output folder."),
    epochs: int = typer.Option(8, "--epochs", help="Training epochs of the demo LeNet-5."),
    budget: int = typer.Option(3000, "--budget", help="Execs of the demo's fuzz step (0 skips it)."),
    force: bool = typer.Option(False, "--force", help="Replace an earlier demo in --out."),
):
    """Train LeNet-5 on the embedded MNIST digits, analyse it, measure coverage, fuzz: no download needed."""
    from .demo import run_demo

    run_demo(out, epochs=epochs, budget=budget, force=force, echo=typer.echo)


@command
def inspect(
    model: ModelOptions,
    inputs: str = typer.Option(
        ...,
        "--inputs",
        help="Inputs to inspect (with labels, e.g. an .npz with y, the "
        "precision and recall are measured); with --ray or "
        "--workers a pattern such as 'shards/*.npz' names shard "
        "files (or folders) the workers read themselves.",
    ),
    settings: InspectOptions = None,
    analysis: Optional[Path] = typer.Option(
        None, "--analysis", help="Analysis folder: also measure with its important neurons only."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (summary and every pair)."),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Report folder (default outputs/inspect/<model>); its files are replaced."
    ),
    reading: InputOptions = None,
    convention: ConventionOptions = None,
    runner: RunnerOptions = None,
):
    """DeepInspect: the class pairs the model confuses or treats with bias, from per-class neuron activation
    probabilities (NAPVD); with labels, their precision, recall and Spearman against the confusion matrix."""
    from .checks import check_int

    top, no_labels = check_int("top", settings.top, 1), settings.no_labels
    _need_ray(runner.ray, runner.workers)
    _check_report_folder(out)
    _check_reading(inputs, reading=reading, limit=reading.limit)
    sharded = _shard_pattern(inputs, "--inputs", runner, reading.limit)  # shard files the workers read themselves
    names = None if settings.layers is None else [n.strip() for n in settings.layers.split(",") if n.strip()]
    with _session(model, convention, runner, analysis, images=None if sharded else inputs) as session:
        if sharded:  # the forward passes on Ray workers, the counts summed here
            x = session.executor.shards(inputs, **reading.load_options())
            x.load()
            x.y = None if no_labels else x.y
        else:
            ds, x = session.inputs(
                inputs, reading, limit=reading.limit, labels=reading.labels, echo=_stderr if as_json else None
            )
        options = dict(
            layers=names,
            threshold=settings.threshold,
            scaling=settings.scaling,
            analysis=session.analysis,
            progress=not as_json,
            class_names=x.class_names if sharded else ds.class_names,
        )  # shards: given, or the folders'
        y = None if no_labels or sharded else ds.y
        result = session.executor.inspect(x, y, **options)
    folder = out if out is not None else DEFAULT_OUTPUTS / "inspect" / model.model.stem
    report = result.write_report(
        folder,
        None if sharded else x,
        top=top,
        title=f"{model.model.name} on {inputs}",
        value_range=session.convention.value_range,
    )  # shards: no example images
    if as_json:
        typer.echo(json.dumps(dict(result.to_dict(), report=str(report))))
        return
    _echo_lines(result.summary_lines(top, report))


@command
def affinity(
    model: ModelOptions,
    inputs: str = typer.Option(
        ...,
        "--inputs",
        help="Inputs to measure on (labels, where present, feed the "
        "class hypotheses; else the model's predictions do).",
    ),
    analysis: Optional[Path] = typer.Option(
        None, "--analysis", help="Analysis folder: its important neurons form one unit group."
    ),
    settings: AffinityOptions = None,
    as_json: bool = typer.Option(
        False, "--json", help="Print one JSON object (every score, the top hypotheses, timings)."
    ),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Report folder (default outputs/affinity/<model>); its files are replaced."
    ),
    reading: InputOptions = None,
    convention: ConventionOptions = None,
    runner: RunnerOptions = None,
):
    """DeepBase: which hypotheses (functions of the input) the hidden units follow, by correlation, mutual
    information and linear models, with early stopping."""
    from .deepbase import parse_measures
    from .deepbase.hypotheses import load_hypotheses

    a = settings
    chosen = parse_measures(a.measures)  # before loading anything
    _need_ray(runner.ray, runner.workers)
    extra = load_hypotheses(a.hypotheses) if a.hypotheses is not None else []
    if a.no_builtin and not extra and not a.masks:
        fail("--no-builtin leaves no hypothesis: give --hypotheses FILE")
    _check_report_folder(out)
    _check_reading(inputs, reading=reading, limit=reading.limit)
    with _session(model, convention, runner, analysis, images=inputs) as session:
        ds, x = session.inputs(
            inputs, reading, limit=reading.limit, labels=reading.labels, echo=_stderr if as_json else None
        )
        result = _affinity(session, x, ds.y, a, extra, chosen, as_json)
    report = result.save(out if out is not None else DEFAULT_OUTPUTS / "affinity" / model.model.stem)
    _echo_lines([json.dumps(dict(result.to_dict(), report=str(report)))] if as_json else result.summary_lines(report))


def _affinity(session, x, y, a: AffinityOptions, extra: list, chosen, as_json: bool):
    """DeepBase's measures of the session's model over ``x`` (the forward pass on its executor)."""
    from .deepbase.hypotheses import builtin_hypotheses, builtin_masks

    network = session.network
    library = (
        []
        if a.no_builtin
        else builtin_hypotheses(
            task=network.task,
            n_classes=network.n_classes if network.task != "regression" else 0,
            channels=x.shape[-1] if x.ndim == 4 else 1,
        )
    )
    library += builtin_masks() if a.masks else []
    return session.executor.affinity(
        x,
        y,
        analysis=session.analysis,
        units=a.units,
        hypotheses=library + extra,
        measures=chosen,
        tol=a.tol,
        random_state=a.random_state,
        progress=not as_json,
    )


def main():
    app()


if __name__ == "__main__":
    main()
