"""The ``idcgen`` command line: a thin layer over the library.

Every library error becomes one line on stderr (``error: ...``) and exit status 1.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import shlex
from pathlib import Path
from typing import Optional

import typer
import typer.core

from .criteria import ALL_NAMES, NEEDS_DATA
from .errors import IdcgenError
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
from .prioritization import SURPRISE

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


def _peak_memory_mib() -> float:
    """This process' peak resident memory so far. Linux: VmHWM of /proc/self/status (ru_maxrss would also
    count a parent's memory at fork time); elsewhere ru_maxrss (KiB, or bytes on macOS)."""
    import resource
    import sys

    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


#: The one table from the library's parameter names to the flags that set them. The library's messages
#: name Python parameters ("The 'batch_size' parameter must ...", "scale='255'"); the CLI's error handler
#: rewrites those references into the user's words ("--batch-size must ...", "--scale 255").
FLAGS = {
    "alpha": "--alpha",
    "analysis": "--analysis",
    "architecture": "--architecture",
    "beta": "--beta",
    "budget": "--budget",
    "batch_size": "--batch-size",
    "threshold": "--threshold",
    "scaling": "--scaling",
    "top": "--top",
    "clusters": "--clusters",
    "crop": "--crop",
    "labels": "--labels",
    "task": "--task",
    "class_names": "--class-names",
    "cluster_method": "--cluster-method",
    "correct_only": "--correct-only",
    "criteria": "--criteria",
    "epochs": "--epochs",
    "force": "--force",
    "guide": "--guide",
    "image_shape": "--image-shape",
    "layer": "--layer",
    "limit": "--limit",
    "limit_test": "--limit-test",
    "m": "--m",
    "measure": "--measure",
    "mode": "--mode",
    "model": "--model",
    "mutators": "--mutators",
    "no_round": "--no-round",
    "no_validity": "--no-validity",
    "only_class": "--class",
    "oracle": "--oracle",
    "out": "--out",
    "overwrite": "--force",
    "pair": "--pair",
    "preprocess": "--preprocess",
    "random_state": "--random-state",
    "relevance_of": "--relevance-of",
    "repeats": "--repeats",
    "resize": "--resize",
    "scale": "--scale",
    "scheduler": "--scheduler",
    "seeds": "--seeds",
    "train": "--train",
    "value_range": "--value-range",
    "tol": "--tol",
    "measures": "--measures",
    "units": "--units",
    "hypotheses": "--hypotheses",
    "workers": "--workers",
    "by": "--by",
    "passes": "--passes",
    "tolerance": "--tolerance",
    "x_train": "--train",
    "device": "--device",
    "precision": "--precision",
    "gpus_per_worker": "--gpus-per-worker",
}
# "the 'm' parameter", "the 'layer' and 'm' parameters" (not "the 'std' parameter of gauss": a mutator's own)
_PARAMETER_WORDS = re.compile(r"(?<!\w)(?:[Tt]he )?'(\w+)'(?: and '(\w+)')? parameters?\b(?! of )")
# name=value with a Python repr or a bare value, not inside a spec such as rotate(limit=30)
_ASSIGNMENT = re.compile(r"(?<![\w(])(\w+)=('[^']*'|\"[^\"]*\"|[^\s,;)]+)")


def _in_spec(text: str, at: int) -> bool:
    """Whether ``text[at]`` lies inside a spec's parentheses, nc(scaling=none,threshold=0.5): the spec is
    what the user wrote, not flags, however deep (kmnc(k=(2,3),...))."""
    depth = 0
    for i in range(at - 1, -1, -1):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            if depth == 0:
                return i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")
            depth -= 1
    return False


def in_cli_words(message: str) -> str:
    """A library message with its parameter references spelt as the flags that set them (see FLAGS)."""

    def words(match):
        names = [n for n in match.groups() if n]
        if not all(n in FLAGS for n in names):
            return match.group(0)
        return " and ".join(FLAGS[n] for n in names)

    def assignment(match):
        name, value = match.groups()
        if name not in FLAGS or _in_spec(match.string, match.start()):
            return match.group(0)
        if value[:1] in "'\"" and value[-1:] == value[:1] and len(value) >= 2:
            value = value[1:-1]
        return FLAGS[name] if value == "True" else f"{FLAGS[name]} {shlex.quote(value)}"

    return _ASSIGNMENT.sub(assignment, _PARAMETER_WORDS.sub(words, message))


def _close_progress_bars() -> None:
    """Close the progress bars still open, so that an error gets a line of its own (not the bar's)."""
    import sys

    tqdm = getattr(sys.modules.get("tqdm.std"), "tqdm", None)  # none open unless tqdm was imported
    for bar in list(getattr(tqdm, "_instances", ()) or ()):
        bar.close()


def _fail(message: str) -> None:
    _close_progress_bars()  # else the error lands on the line of a bar the error interrupted
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def _check_report_folder(out: Path | None) -> None:
    """A report folder given as an existing file is refused before the work, not after it when the report is
    written (harden had retrained both models by then)."""
    if out is not None and out.exists() and not out.is_dir():
        _fail(f"--out {out} is a file; the report is a folder: give a folder name")


class _Command(typer.core.TyperCommand):
    """A command refusing a single-valued option given twice (click keeps the last one silently)."""

    def parse_args(self, ctx, args):
        # each name of a single-valued option -> the option (--architecture and --weights are one option)
        single = {
            name: p
            for p in self.params
            if not getattr(p, "multiple", False) and not getattr(p, "is_flag", False)
            for name in p.opts
            if name.startswith("--")
        }
        seen = {}
        for arg in args:
            if arg == "--":
                break
            name = arg.split("=", 1)[0]
            if name in single and single[name] in seen:
                first = seen[single[name]]
                _fail(
                    f"{name} given twice (only one is used): give it once"
                    if first == name
                    else f"{first} and {name} are two names of one option (only one value is used): give one"
                )
            if name in single:
                seen[single[name]] = name
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx):
        # typer writes a required argument {OLD}, which reads as a set; click's plain OLD is the convention
        return [re.sub(r"^\{(.+)\}$", r"\1", piece) for piece in super().collect_usage_pieces(ctx)]


def command(func):
    """Register ``func`` as a command and turn idcgen errors into one clear line.

    A parameter annotated with a settings group (:mod:`idcgen.options`) becomes the group's options on the
    command line; the command receives the group built from what was typed, each value parsed once."""
    groups, signature = _expand_groups(func)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            if groups:
                kwargs = _build_groups(groups, kwargs)
            return func(*args, **kwargs)
        except IdcgenError as exc:
            _fail(in_cli_words(str(exc)))
        except OSError as exc:  # unwritable --out, a file where a folder should be, a full disk
            _fail(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
        except Exception as exc:  # a device out of memory where no batch halving caught it: one line too
            from .framework.device import is_out_of_memory, out_of_memory_line

            if not is_out_of_memory(exc):
                raise
            _fail(in_cli_words(out_of_memory_line(exc)))
        except KeyboardInterrupt:
            typer.echo("error: interrupted", err=True)
            raise typer.Exit(130) from None

    wrapper.__signature__ = signature  # typer reads the expanded options, not the groups
    wrapper.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
    return app.command(cls=_Command)(wrapper)


_CTX = "_typed_ctx"  # the click context a command with groups is given, to tell typed options from defaults


def _expand_groups(func):
    """({parameter: group class}, the signature typer reads): each group-typed parameter replaced by the
    group's options."""
    import inspect
    import typing

    from .options import Group

    hints = typing.get_type_hints(func)
    groups, params = {}, []
    for p in inspect.signature(func).parameters.values():
        kind = hints.get(p.name)
        if isinstance(kind, type) and issubclass(kind, Group):
            groups[p.name] = kind
            for name, flag in kind.flags().items():
                params.append(
                    inspect.Parameter(
                        name,
                        inspect.Parameter.KEYWORD_ONLY,
                        annotation=flag.cli_type,
                        default=typer.Option(flag.cli_default, *flag.names, help=flag.help),
                    )
                )
        else:
            params.append(p.replace(annotation=hints.get(p.name, p.annotation), kind=inspect.Parameter.KEYWORD_ONLY))
    names = [p.name for p in params]
    clash = {n for n in names if names.count(n) > 1}
    if clash:  # a programming error: one option in two groups of the command
        raise TypeError(f"{func.__name__}: options {sorted(clash)} are in more than one group")
    if groups and not any(p.annotation is typer.Context for p in params):
        params.append(inspect.Parameter(_CTX, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context))
    return groups, inspect.Signature(params)


def _build_groups(groups: dict, kwargs: dict) -> dict:
    """The command's keywords with each group's options gathered into the group (parsed once)."""
    ctx = kwargs.pop(_CTX, None) or next(v for v in kwargs.values() if isinstance(v, typer.Context))
    typed = tuple(_given(ctx))
    for param, kind in groups.items():
        kwargs[param] = kind.from_typed({n: kwargs.pop(n) for n in kind.flags() if n in kwargs}, typed)
    return kwargs


def _given(ctx: typer.Context) -> dict:
    """The options typed on the command line (not left at their defaults), by parameter name."""
    source = ctx.get_parameter_source  # click's ParameterSource (typer vendors click: compared by name)
    return {k: v for k, v in ctx.params.items() if getattr(source(k), "name", None) == "COMMANDLINE"}


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


def _check_reading(*specs, reading: InputOptions, limit=None) -> None:
    """Input paths, dataset names and loading options checked before the framework is imported and the
    model loaded."""
    _check_sources(
        *specs,
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
        _fail(f"--limit is for one input set; shard files ({option} with a pattern) are read whole: drop --limit")
    return True


def _idc_of_shards(session, names, pattern: str, as_json: bool, load: dict):
    """``coverage --inputs 'PATTERN' --ray``: IDC of shard files the Ray workers read themselves, one a shard."""
    found = session.analysis
    if found is None or names != ["idc"]:
        _fail("shard files (--inputs with a pattern) are measured for IDC only: give --criteria idc, or one input set")
    pool = session.executor
    held = pool.shards(pattern, **load)
    result = pool.tracker(found, held, progress=not as_json).result()
    n, shards = len(held), len(held.sources)
    if as_json:
        typer.echo(
            json.dumps(
                dict(
                    result.to_dict(),
                    inputs=n,
                    shards=shards,
                    layer=found.layer,
                    m=found.m,
                    criteria={"idc": {"score": result.score, "covered": result.covered, "total": result.total}},
                )
            )
        )
    else:
        typer.echo(f"{result}  [{n} inputs in {shards} shards, layer {found.layer}, m={found.m}]")


def _check_sources(*specs, **options) -> None:
    """Input paths, dataset names and loading options checked before the framework is imported and the
    model loaded."""
    from .data import check_source

    for spec in specs:
        if spec is not None:
            check_source(spec, **options)


def _need_ray(ray: Optional[str], workers: Optional[int]) -> None:
    """With --ray or --workers, a worker count of at least 1 and Ray installed: said in one line before any
    model is loaded."""
    from .distributed import check_pool

    check_pool(ray, workers)


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
    force: bool = typer.Option(False, "--force", help="Replace the analysis already in --out."),
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
    typer.echo(f"analysis {where} ({sum(analysis.timings.values()):.1f} s, peak memory {_peak_memory_mib():,.0f} MiB)")


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
    train: Optional[str] = typer.Option(None, "--train", help=f"Training inputs (needed by {', '.join(NEEDS_DATA)})."),
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
        _fail("IDC needs --analysis DIR (from `idcgen analyze`); or leave idc out of --criteria")
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
        _fail(f"{', '.join(needing)} need --train DATA (the model's training inputs)")
    if labels is not None and not needing:  # they label --train's images; the inputs measured need none
        _fail(
            "--labels gives the labels of --train's image folder, which only lsc:group=label and dsc read; "
            "coverage of --inputs needs no labels: drop --labels"
        )
    if train is not None and not needing:
        _fail(
            f"--train is read by criteria fitted on training data ({', '.join(NEEDS_DATA)}); "
            f"{', '.join(names)} do not use it: drop --train"
        )
    if needing:
        train_ds, x_train = session.inputs(train, reading, labels=labels, echo=echo)
        y_train = train_ds.y
    from .session import measure_coverage

    results, notes, missing = measure_coverage(
        network,
        x,
        others,
        analysis=found,
        x_train=x_train,
        y_train=y_train,
        executor=session.executor if found is not None else None,
    )
    if not results:
        _fail("; ".join(f"{name} could not be computed: {why}" for name, why in missing.items()))
    if as_json:
        first = next(iter(results.values()))
        payload = dict(first.to_dict(), inputs=len(x))
        if "idc" in results:
            payload.update(idc=results["idc"].score, layer=found.layer, m=found.m)
        payload["criteria"] = {
            k: {"score": r.score, "covered": r.covered, "total": r.total} for k, r in results.items()
        }
        for name, lines in notes.items():
            payload["criteria"][name]["notes"] = lines
        if missing:
            payload["missing"] = missing
        typer.echo(json.dumps(payload))
    else:
        for name, result in results.items():
            extra = (
                f", layer {found.layer}, m={found.m}"
                if name == "idc"
                else f", {name}"
                if ":" in name or "(" in name
                else ""
            )
            typer.echo(f"{result}  [{len(x)} inputs{extra}]")
            for line in notes.get(name, ()):
                typer.echo(f"note: {name.upper()}: {line}")
        for name, why in missing.items():
            typer.echo(f"note: {name.upper()} not computed: {why}")


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
    train: Optional[str] = typer.Option(
        None,
        "--train",
        help=f"Training inputs ({', '.join(SURPRISE)}, idc-*, and the coverage orderings of {', '.join(NEEDS_DATA)}).",
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
    for note in ranking.notes:
        typer.echo(f"note: {note}")
    typer.echo(f"{len(x)} inputs ordered by {ranking.by} -> {path}")
    typer.echo(
        str(evaluation) if evaluation is not None else "no labels: the ordering is not scored (give labels for APFD)"
    )


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
    from .campaigns import Groups, run_campaign

    _need_ray(runner.ray, runner.workers)
    if options.resume is None and runner.ray is not None and runner.workers is None:
        _fail("--ray runs parallel campaigns: give their number with --workers N")
    # a resume keeps the campaign's own settings; any other option typed is checked against them
    result = run_campaign(Groups(models, inputs, convention, wanted, options, runner), echo=typer.echo, status=_stderr)
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
    from .hardening import Assessment, Retraining, check_baselines, check_pair, format_differences, format_table
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
        _fail(
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
        _fail("--train and --test need labels")
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
    for note in summary["notes"]:
        echo(f"note: {note}")
    if summary["attack_eps"] is not None:
        echo(
            f"pgd and fgsm additions at {summary['attack_norm']} eps {summary['attack_eps']:.4g} of the value range "
            "(the kept inputs' median L2 distance from their seeds)"
        )
    echo(format_table(summary))
    echo("IDC-guided minus each baseline (points, paired by repeat):")
    echo(format_differences(summary))
    echo(f"written to {out}/ (harden.md, harden.csv, hardening.csv, harden.json, harden.png) in {summary['seconds']} s")
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
    force: bool = typer.Option(False, "--force", help="Replace NEW if it exists."),
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
        _fail(f"{option} takes positive integers such as 32,32,3; got {text!r}")
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


#: inspect's mark of a pair by (below mean - 1 std, in the top 1 %)
_CONFUSION_MARKS = {(True, True): "**", (True, False): "*", (False, True): "+", (False, False): ""}


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
    convention = session.convention
    folder = out if out is not None else DEFAULT_OUTPUTS / "inspect" / model.model.stem
    report = result.write_report(
        folder,
        None if sharded else x,
        top=top,
        title=f"{model.model.name} on {inputs}",
        value_range=convention.value_range,
    )  # shards: no example images
    if as_json:
        typer.echo(json.dumps(dict(result.to_dict(), report=str(report))))
        return
    for note in result.notes:
        typer.echo(f"note: {note}")
    m = result.metrics["all"]
    layers = result.layers  # DenseNet121 has 120: all are in the report, the line names the first and the last
    named = (
        ", ".join(layers) if len(layers) <= 6 else f"{len(layers)} layers ({', '.join(layers[:5])} ... {layers[-1]})"
    )
    typer.echo(
        f"{result.n_inputs} inputs, {result.n_classes} classes, {m['neurons']} neurons of {named}; "
        f"NAPVD mean {_fmt_number(m['napvd_mean'])}, std {_fmt_number(m['napvd_std'])}"
    )
    shown = result.top(top)
    typer.echo(
        "pairs with the smallest NAPVD (* predicted confused: below mean - 1 std; ** also top 1 %; + top 1 % only):"
    )
    for r in shown:
        # the two cut-offs are separate predictions: with few defined pairs the lowest need not be below mean - 1 std
        mark = _CONFUSION_MARKS[bool(r["confusion_std"]), bool(r["confusion_top"])]
        conf = r.get("type1conf")  # None: no labelled input of either class
        extra = (
            ""
            if "type1conf" not in r
            else f"  type-1 confusion {'n/a' if conf is None else f'{conf:.4f}'}"
            + (" (confused)" if r["confused"] else "")
        )
        typer.echo(
            f"  {result.name(r['a'])} - {result.name(r['b'])}: NAPVD {_fmt_number(r['napvd'], '.3f')}{mark}{extra}"
        )
    for view, vm in result.metrics.items():
        if "confusion" not in vm:
            continue
        for what in ("confusion", "bias"):
            e = vm[what]
            typer.echo(
                f"{what} ({view} neurons, {vm['neurons']}): {e['actual']} actual pairs; mean - 1 std: "
                f"precision {_fmt_rate(e['std']['precision'])}, recall {_fmt_rate(e['std']['recall'])}; top 1 %: "
                f"precision {_fmt_rate(e['top']['precision'])}, recall {_fmt_rate(e['top']['recall'])}; "
                f"Spearman {_fmt_rate(e['spearman'])}"
            )
    typer.echo(f"report: {report} (and report.html, pairs.csv, inspect.json)")


def _fmt_number(value, spec: str = ".3g") -> str:
    """NAPVD statistics are None when no class pair has one (inputs of a single class)."""
    return "n/a" if value is None else f"{value:{spec}}"


def _fmt_rate(value) -> str:
    return "n/a" if value is None else f"{value:.2f}"


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
    from .hypotheses import load_hypotheses

    a = settings
    chosen = parse_measures(a.measures)  # before loading anything
    _need_ray(runner.ray, runner.workers)
    extra = load_hypotheses(a.hypotheses) if a.hypotheses is not None else []
    if a.no_builtin and not extra and not a.masks:
        _fail("--no-builtin leaves no hypothesis: give --hypotheses FILE")
    _check_report_folder(out)
    _check_reading(inputs, reading=reading, limit=reading.limit)
    with _session(model, convention, runner, analysis, images=inputs) as session:
        ds, x = session.inputs(
            inputs, reading, limit=reading.limit, labels=reading.labels, echo=_stderr if as_json else None
        )
        result = _affinity(session, x, ds.y, a, extra, chosen, as_json)
    _affinity_report(result, model, out, chosen, as_json)


def _affinity(session, x, y, a: AffinityOptions, extra: list, chosen, as_json: bool):
    """DeepBase's measures of the session's model over ``x`` (the forward pass on its executor)."""
    from .hypotheses import builtin_hypotheses, builtin_masks

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


def _affinity_report(result, model: ModelOptions, out, chosen, as_json: bool) -> None:
    """Save an affinity result's report and print its tables."""
    folder = out if out is not None else DEFAULT_OUTPUTS / "affinity" / model.model.stem
    report = result.save(folder)
    if as_json:
        typer.echo(json.dumps(dict(result.to_dict(), report=str(report))))
        return
    for note in result.notes:
        typer.echo(f"note: {note}")
    stop = (
        f"early stopping at +-{result.tol}: {result.n_seen} of {result.n_inputs} inputs"
        if result.tol
        else f"all {result.n_inputs} inputs"
    )
    typer.echo(
        f"{len(result.units)} units in {len(result.groups)} group(s), {len(result.hypotheses)} hypotheses, "
        f"{', '.join(result.measures)}; {stop}; {result.seconds:.1f} s"
    )
    for measure in dict.fromkeys(
        [result.headline() or chosen[0]]
        + (["linear"] if "linear" in chosen else [])
        + (["pixel", "iou"] if "iou" in result.measures else [])
    ):
        typer.echo(result.table(measure))
    for line in result.describe():
        typer.echo(line)
    typer.echo(f"report: {report} (and report.html, affinity.csv, affinity.json)")


def main():
    app()


if __name__ == "__main__":
    main()
