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
from typing import List, Optional

import typer
import typer.core

from .errors import IdcgenError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Coverage-guided test-input generation with Importance-Driven Coverage (IDC).")

DEFAULT_OUTPUTS = Path("outputs")

ModelOpt = typer.Option(..., "--model", help="Model: Keras .keras/.h5; PyTorch TorchScript .pt, torch.export .pt2, .onnx, or a factory package.module:make_model with --weights W.pt.")
UnsafeOpt = typer.Option(False, "--unsafe", help="Turn off Keras' safe mode (allows Lambda layers): trusted files only.")
ArchitectureOpt = typer.Option(None, "--architecture", "--weights", help="Keras JSON architecture (as model.to_json() writes) for a weights-only .h5 model file; for a PyTorch factory --model package.module:make_model, its state_dict file (--weights W.pt).")
ScaleOpt = typer.Option("auto", "--scale", help="auto (uint8 0..255 mapped onto the model's value range, floats kept), 255 (divide by 255) or none.")
ValueRangeOpt = typer.Option(None, "--value-range", help="LO,HI: range of the images the model takes (default: 0,255 if it starts with Rescaling(1/255), else 0,1).")
PreprocessOpt = typer.Option(None, "--preprocess", help="Between image and model: imagenet-caffe, imagenet-torch, tf ([0,255] -> [-1,1]) or mean=M,std=S.")
ResizeOpt = typer.Option(None, "--resize", help="HxW: resize the images of image folders (PIL, bilinear).")
TaskOpt = typer.Option(None, "--task", help="regression or classification (default: detected; a head of one output unit is a regression model).")
LabelsOpt = typer.Option(None, "--labels", help="CSV of labels for an image folder: FILE.csv (id and target columns detected) or FILE.csv:ID_COLUMN,TARGET_COLUMN; ids are the file names, with or without extension.")
CropOpt = typer.Option(None, "--crop", help="TOP,BOTTOM,LEFT,RIGHT: pixels cut from each image of an image folder before --resize.")
RayOpt = typer.Option(None, "--ray", help="Run on Ray workers: local (start Ray on this machine), auto (the cluster `ray start` made here) or a cluster address such as ray://HEAD:10001. Needs pip install \"idcgen[ray]\".")
WorkersOpt = typer.Option(None, "--workers", help="Ray workers (default: one per GPU of the cluster, else one per CPU); alone it means --ray local.")
ClassNamesOpt = typer.Option(None, "--class-names", help="Class names in label order (cat,dog or a file with one per line): labels of image class subfolders not named by integers (default: sorted names).")


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
    "alpha": "--alpha", "analysis": "--analysis", "architecture": "--architecture", "beta": "--beta",
    "budget": "--budget", "batch_size": "--batch-size", "threshold": "--threshold", "scaling": "--scaling",
    "top": "--top", "clusters": "--clusters", "crop": "--crop",
    "labels": "--labels", "task": "--task",
    "class_names": "--class-names", "cluster_method": "--cluster-method", "correct_only": "--correct-only",
    "criteria": "--criteria", "epochs": "--epochs", "force": "--force", "guide": "--guide",
    "image_shape": "--image-shape", "layer": "--layer", "limit": "--limit", "m": "--m", "measure": "--measure",
    "mode": "--mode", "model": "--model", "mutators": "--mutators", "no_round": "--no-round",
    "no_validity": "--no-validity", "only_class": "--class", "oracle": "--oracle", "out": "--out",
    "overwrite": "--force", "pair": "--pair", "preprocess": "--preprocess", "random_state": "--random-state",
    "relevance_of": "--relevance-of", "repeats": "--repeats", "resize": "--resize", "scale": "--scale",
    "scheduler": "--scheduler", "seeds": "--seeds", "train": "--train", "value_range": "--value-range",
    "tol": "--tol", "measures": "--measures", "units": "--units", "hypotheses": "--hypotheses",
    "workers": "--workers", "by": "--by", "passes": "--passes", "tolerance": "--tolerance",
    "x_train": "--train",
}
# "the 'm' parameter", "the 'layer' and 'm' parameters" (not "the 'std' parameter of gauss": a mutator's own)
_PARAMETER_WORDS = re.compile(r"(?<!\w)(?:[Tt]he )?'(\w+)'(?: and '(\w+)')? parameters?\b(?! of )")
# name=value with a Python repr or a bare value, not inside a spec such as rotate(limit=30)
_ASSIGNMENT = re.compile(r"(?<![\w(])(\w+)=('[^']*'|\"[^\"]*\"|[^\s,;)]+)")


def in_cli_words(message: str) -> str:
    """A library message with its parameter references spelt as the flags that set them (see FLAGS)."""
    def words(match):
        names = [n for n in match.groups() if n]
        if not all(n in FLAGS for n in names):
            return match.group(0)
        return " and ".join(FLAGS[n] for n in names)

    def assignment(match):
        name, value = match.groups()
        if name not in FLAGS:
            return match.group(0)
        if value[:1] in "'\"" and value[-1:] == value[:1] and len(value) >= 2:
            value = value[1:-1]
        return FLAGS[name] if value == "True" else f"{FLAGS[name]} {shlex.quote(value)}"
    return _ASSIGNMENT.sub(assignment, _PARAMETER_WORDS.sub(words, message))


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


#: the Ray worker pools the running command started (`_ray_pool`), closed when it ends
_POOLS = []


class _Command(typer.core.TyperCommand):
    """A command refusing a single-valued option given twice (click keeps the last one silently)."""

    def parse_args(self, ctx, args):
        single = {name for p in self.params if not getattr(p, "multiple", False) and not getattr(p, "is_flag", False)
                  for name in p.opts if name.startswith("--")}
        seen = set()
        for arg in args:
            if arg == "--":
                break
            name = arg.split("=", 1)[0]
            if name in single and name in seen:
                _fail(f"{name} given twice (only one is used): give it once")
            seen.add(name)
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx):
        # typer writes a required argument {OLD}, which reads as a set; click's plain OLD is the convention
        return [re.sub(r"^\{(.+)\}$", r"\1", piece) for piece in super().collect_usage_pieces(ctx)]


def command(func):
    """Register ``func`` as a command and turn idcgen errors into one clear line."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except IdcgenError as exc:
            _fail(in_cli_words(str(exc)))
        except OSError as exc:  # unwritable --out, a file where a folder should be, a full disk
            _fail(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
        except KeyboardInterrupt:
            typer.echo("error: interrupted", err=True)
            raise typer.Exit(130)
        finally:   # Ray workers freed however the command ends (an error half-way too)
            while _POOLS:
                _POOLS.pop().close()
    return app.command(cls=_Command)(wrapper)


def _given(ctx: typer.Context) -> dict:
    """The options typed on the command line (not left at their defaults), by parameter name."""
    source = ctx.get_parameter_source  # click's ParameterSource (typer vendors click: compared by name)
    return {k: v for k, v in ctx.params.items() if getattr(source(k), "name", None) == "COMMANDLINE"}


def _network(model: Path, unsafe: bool, architecture: Optional[Path] = None, task: Optional[str] = None):
    from .session import load_networks
    return load_networks([model], architectures=None if architecture is None else [architecture],
                         safe_mode=not unsafe, task=task)[0]


def _open(model: Path, unsafe: bool, architecture=None, task=None, value_range=None, preprocess=None, analysis=None,
          images=None):
    """(network in image space, its input convention, the bound Analysis or None): idcgen.session.open_model."""
    from .session import open_model
    return open_model(model, safe_mode=not unsafe, architecture=architecture, task=task, value_range=value_range,
                      preprocess=preprocess, analysis=analysis, images=images)


def _inputs(spec: str, network, scale: str, limit: Optional[int] = None, convention=None, resize=None,
            class_names=None, err: bool = False, labels=None, crop=None):
    """(Dataset, x) for the model; the label mapping and conversions are shown once (stderr if ``err``)."""
    from .session import load_inputs
    return load_inputs(spec, network, convention, scale=scale, limit=limit, resize=resize, crop=crop, labels=labels,
                       class_names=class_names, echo=lambda line: typer.echo(line, err=err))


def _shard_pattern(spec: str, option: str, ray: Optional[str], workers: Optional[int], limit) -> bool:
    """Whether ``spec`` names shard files the Ray workers read themselves (a pattern, with --ray or --workers);
    a pattern naming none, or --limit beside one, is refused in one line before any worker starts."""
    if (ray is None and workers is None) or not any(c in spec for c in "*?["):
        return False
    from .distributed.shards import shard_files
    shard_files(spec)
    if limit is not None:
        _fail(f"--limit is for one input set; shard files ({option} with a pattern) are read whole: drop --limit")
    return True


def _idc_of_shards(found, names, pattern: str, network, ray, workers, unsafe: bool, as_json: bool, load: dict):
    """``coverage --inputs 'PATTERN' --ray``: IDC of shard files the Ray workers read themselves, one a shard."""
    if found is None or names != ["idc"]:
        _fail("shard files (--inputs with a pattern) are measured for IDC only: give --criteria idc, or one input set")
    pool = _ray_pool(ray, workers, network, unsafe)
    held = pool.shards(pattern, **load)
    result = pool.tracker(found, held, progress=not as_json).result()
    n, shards = len(held), len(held.sources)
    if as_json:
        typer.echo(json.dumps(dict(result.to_dict(), inputs=n, shards=shards, layer=found.layer, m=found.m,
                                   criteria={"idc": {"score": result.score, "covered": result.covered, "total": result.total}})))
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


def _ray_pool(ray: Optional[str], workers: Optional[int], network, unsafe: bool):
    """Ray workers holding ``network`` when --ray or --workers is given, else None (one process)."""
    if ray is None and workers is None:
        return None
    from .distributed import require_ray
    from .distributed.workers import Workers
    what = "--ray" if ray is not None else "--workers"
    require_ray(what)   # before anything else: one line saying what to install
    typer.echo(f"starting {workers or 'one per CPU or GPU'} Ray worker(s) ({ray or 'local'}) ...", err=True)
    _POOLS.append(Workers(network, ray=ray or "local", workers=workers, safe_mode=not unsafe, what=what))
    return _POOLS[-1]   # closed by the command's wrapper (`command`) when it ends, if not before


@command
def layers(model: Path = ModelOpt, unsafe: bool = UnsafeOpt, architecture: Optional[Path] = ArchitectureOpt,
           task: Optional[str] = TaskOpt):
    """List the model's layers: name, type, output shape, neurons (units or channels)."""
    network = _network(model, unsafe, architecture, task)
    rows = [(i.name, i.type, str(i.output_shape), str(i.neurons)) for i in network.layers_info()]
    widths = [max(len(r[c]) for r in rows + [("name", "type", "output shape", "neurons")]) for c in range(4)]
    for row in [("name", "type", "output shape", "neurons")] + rows:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
    if network.task == "regression":   # a classifier's listing stays as it was
        typer.echo(f"task: {_task_line(network)}")
    typer.echo(f"logits: {network.logits_layer}   default subject layer: {network.default_layer()}")
    for note in network.rule_notes(None):
        typer.echo(note)
    typer.echo(_subject_line(network))
    typer.echo(f"expects: {network.own_convention().describe()}")
    found = network.preprocessing()
    typer.echo("preprocessing layers: " + (", ".join(found) if found else
                                           "none (give --preprocess if the model expects normalised inputs)"))


def _subject_line(network) -> str:
    """Which layers `analyze --layer` accepts, so a refused one is not found one run at a time."""
    usable = network.subject_layers()
    hidden = [i.name for i in network.layers_info() if network.is_hidden(i.name)]
    if len(usable) == len(hidden):
        return f"subject layers: all {len(hidden)} hidden layers"
    blocked = [i for i in network.layers_info() if network.rule_label(i.name) == "none" and
               (network.is_hidden(i.name) or i.name == network.logits_layer)]
    shown = ", ".join(usable[:5]) + (f" ... {usable[-1]}" if len(usable) > 5 else "")
    return (f"subject layers: {len(usable)} of {len(hidden)} hidden layers, from the last layer without an LRP "
            f"rule on ({', '.join(f'{b.name!r} ({b.type})' for b in blocked[-3:])}): {shown or 'none'}")


def _task_line(network) -> str:
    """"regression (one output unit, tanh; ...)" or "classification (10 classes)"."""
    if network.task == "classification":
        return f"classification ({network.n_classes} classes)"
    act = network.head_activation()
    line = (f"regression (one output unit, {act}; relevance starts from its pre-activation; "
            "--task classification overrides)")
    return line + (f"; note: {network.head_note}" if network.head_note else "")


@command
def analyze(model: Path = ModelOpt,
            train: str = typer.Option(..., "--train", help="Training inputs: folder, .npz, .npy, IDX .gz, or a dataset name; with --ray or --workers a pattern such as 'shards/*.npz' names shard files (or folders) the workers read themselves."),
            layer: Optional[str] = typer.Option(None, "--layer", help="Subject layer (default: last hidden layer)."),
            m: int = typer.Option(8, "--m", help="Number of important neurons."),
            clusters: str = typer.Option("2-5", "--clusters", help="k values tried per neuron, e.g. 2-5 or 2,3,4."),
            cluster_method: str = typer.Option("silhouette", "--cluster-method", help="silhouette (the paper's) or zero-aware (a ReLU's exact zeros get their own cluster; k chosen on the positive values)."),
            relevance_of: str = typer.Option("predicted", "--relevance-of", help="predicted or label."),
            correct_only: bool = typer.Option(False, "--correct-only", help="Use only correctly classified inputs."),
            only_class: Optional[int] = typer.Option(None, "--class", help="Use only inputs of this label."),
            random_state: int = typer.Option(0, "--random-state", help="Seed of the clustering (k-means restarts)."),
            limit: Optional[int] = typer.Option(None, "--limit", help="Use the first N inputs only."),
            scale: str = ScaleOpt, value_range: Optional[str] = ValueRangeOpt,
            preprocess: Optional[str] = PreprocessOpt, resize: Optional[str] = ResizeOpt,
            class_names: Optional[str] = ClassNamesOpt, labels: Optional[str] = LabelsOpt,
            crop: Optional[str] = CropOpt, task: Optional[str] = TaskOpt,
            out: Optional[Path] = typer.Option(None, "--out", help="Analysis folder (default outputs/analyses/<model>_<layer>_m<m>_<data fingerprint>)."),
            force: bool = typer.Option(False, "--force", help="Replace the analysis already in --out."),
            ray: Optional[str] = RayOpt, workers: Optional[int] = WorkersOpt,
            unsafe: bool = UnsafeOpt, architecture: Optional[Path] = ArchitectureOpt):
    """Find the m most important neurons of a layer and cluster their activations."""
    from .analysis import analyze as run, check_save_target
    from .clusters import parse_cluster_range
    _need_ray(ray, workers)
    ks = parse_cluster_range(clusters)
    if out is not None:
        check_save_target(out, overwrite=force)  # before the analysis, not after minutes of work
    _check_sources(train, scale=scale, limit=limit, resize=resize, crop=crop, class_names=class_names)
    sharded = _shard_pattern(train, "--train", ray, workers, limit)   # shard files the workers read themselves
    network, convention, _ = _open(model, unsafe, architecture, task, value_range, preprocess, images=train)
    pool = _ray_pool(ray, workers, network, unsafe)
    if sharded:
        x = pool.shards(train, scale=scale, resize=resize, class_names=class_names, crop=crop, labels=labels)
        x.load()
        y, summary, scaling = None, x.summary(), f"{len(x.sources)} shards, scale {scale}"
    else:
        ds, x = _inputs(train, network, scale, limit, convention, resize, class_names, labels=labels, crop=crop)
        y, summary, scaling = ds.y, ds.summary(), ds.scaling
    analysis = run(network, x, y, layer=layer, m=m, clusters=ks, cluster_method=cluster_method, relevance_of=relevance_of,
                   correct_only=correct_only, only_class=only_class, random_state=random_state,
                   data_summary=summary, passes=None if pool is None else pool.passes)
    from .session import save_analysis
    _, where = save_analysis(analysis, model, out, force=force)
    ks_chosen = [c.k for c in analysis.clusters]
    if network.task == "regression":
        typer.echo(f"task: {_task_line(network)}" + (f"; MSE on the labels {analysis.data['mse']:.4g}"
                                                      if analysis.data.get("mse") is not None else ""))
    typer.echo(f"layer {analysis.layer}: important neurons {analysis.neurons.tolist()}, clusters {ks_chosen}, "
               f"{analysis.total} combinations")
    low, high = analysis.data["observed_range"]
    typer.echo(f"inputs: {convention.describe()}; training inputs span [{low:g}, {high:g}] ({scaling})")
    for note in analysis.notes:
        if note not in analysis.warnings:
            typer.echo(f"note: {note}")
    for warning in analysis.warnings:
        typer.echo(f"warning: {warning}", err=True)
    train_cov = analysis.coverage(x) if pool is None else pool.coverage(analysis, x)
    typer.echo(f"training inputs reach {train_cov}")
    typer.echo(f"analysis {where} ({sum(analysis.timings.values()):.1f} s, peak memory {_peak_memory_mib():,.0f} MiB)")
    if pool is not None:
        pool.close()   # the workers' CPUs (and the shards they hold) freed for whatever runs next in this Ray


@command
def coverage(analysis: Optional[Path] = typer.Option(None, "--analysis", help="Analysis folder from `idcgen analyze` (for IDC)."),
             model: Path = ModelOpt,
             inputs: str = typer.Option(..., "--inputs", help="Inputs to measure; with --ray or --workers a pattern such as 'shards/*.npz' names shard files (or folders) the workers read themselves (IDC only)."),
             criteria: str = typer.Option("idc", "--criteria", help="Comma-separated: idc,nc,kmnc,nbc,snac,tknc,lsc,dsc; parameters as name(key=value), e.g. 'nc(scaling=channel-means),lsc(group=label)' (the older nc:scaling=channel-means still works)."),
             train: Optional[str] = typer.Option(None, "--train", help="Training inputs (needed by kmnc, nbc, snac, lsc, dsc)."),
             as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
             limit: Optional[int] = typer.Option(None, "--limit", help="Measure the first N inputs only."),
             scale: str = ScaleOpt, value_range: Optional[str] = ValueRangeOpt,
             preprocess: Optional[str] = PreprocessOpt, resize: Optional[str] = ResizeOpt,
             class_names: Optional[str] = ClassNamesOpt, labels: Optional[str] = LabelsOpt,
             crop: Optional[str] = CropOpt, task: Optional[str] = TaskOpt,
             ray: Optional[str] = typer.Option(None, "--ray", help="Measure IDC on Ray workers (the other criteria stay in this process): local, auto or a cluster address such as ray://HEAD:10001. Needs pip install \"idcgen[ray]\"."),
             workers: Optional[int] = WorkersOpt,
             unsafe: bool = UnsafeOpt, architecture: Optional[Path] = ArchitectureOpt):
    """Measure the coverage of an input set: IDC (the share of important-neuron cluster combinations it
    reaches) and, on request, the other criteria."""
    from .criteria import make_criterion, parse_criteria
    _need_ray(ray, workers)
    names = parse_criteria(criteria)
    if "idc" in names and analysis is None:
        _fail("IDC needs --analysis DIR (from `idcgen analyze`); or leave idc out of --criteria")
    _check_sources(inputs, train, scale=scale, limit=limit, resize=resize, crop=crop, class_names=class_names)
    network, convention, found = _open(model, unsafe, architecture, task, value_range, preprocess,
                                       analysis if "idc" in names else None, images=inputs)
    if _shard_pattern(inputs, "--inputs", ray, workers, limit):
        return _idc_of_shards(found, names, inputs, network, ray, workers, unsafe, as_json,
                              dict(scale=scale, resize=resize, class_names=class_names, crop=crop))
    _, x = _inputs(inputs, network, scale, limit, convention, resize, class_names, err=as_json, crop=crop)
    others = {n: make_criterion(n) for n in names if n != "idc"}  # keyed by spec: "nc", "nc(threshold=0.5)"
    x_train = y_train = None
    needing = [c.name for c in others.values() if c.needs_data]
    if needing and train is None:
        _fail(f"{', '.join(needing)} need --train DATA (the model's training inputs)")
    if labels is not None and not needing:   # they label --train's images; the inputs measured need none
        _fail("--labels gives the labels of --train's image folder, which only lsc:group=label and dsc read; "
              "coverage of --inputs needs no labels: drop --labels")
    if train is not None and not needing:
        _fail(f"--train is read by criteria fitted on training data (kmnc, nbc, snac, lsc, dsc); "
              f"{', '.join(names)} do not use it: drop --train")
    if needing:
        train_ds, x_train = _inputs(train, network, scale, None, convention, resize, class_names, err=as_json,
                                    labels=labels, crop=crop)
        y_train = train_ds.y
    from .session import measure_coverage
    pool = _ray_pool(ray, workers, network, unsafe) if found is not None else None
    results, notes, missing = measure_coverage(network, x, others, analysis=found, x_train=x_train, y_train=y_train,
                                               pool=pool)
    if not results:
        _fail("; ".join(f"{name} could not be computed: {why}" for name, why in missing.items()))
    if as_json:
        first = next(iter(results.values()))
        payload = dict(first.to_dict(), inputs=len(x))
        if "idc" in results:
            payload.update(idc=results["idc"].score, layer=found.layer, m=found.m)
        payload["criteria"] = {k: {"score": r.score, "covered": r.covered, "total": r.total} for k, r in results.items()}
        for name, lines in notes.items():
            payload["criteria"][name]["notes"] = lines
        if missing:
            payload["missing"] = missing
        typer.echo(json.dumps(payload))
    else:
        for name, result in results.items():
            extra = f", layer {found.layer}, m={found.m}" if name == "idc" else f", {name}" if ":" in name or "(" in name else ""
            typer.echo(f"{result}  [{len(x)} inputs{extra}]")
            for line in notes.get(name, ()):
                typer.echo(f"note: {name.upper()}: {line}")
        for name, why in missing.items():
            typer.echo(f"note: {name.upper()} not computed: {why}")


@command
def prioritize(model: Path = ModelOpt,
               inputs: str = typer.Option(..., "--inputs", help="The inputs to order (with labels, e.g. an .npz with y or a folder with --labels, the ordering is scored by APFD)."),
               by: str = typer.Option(..., "--by", help="gini, max-softmax, margin, entropy, lsa, dsa, mdsa, mc-dropout, <criterion>-total, <criterion>-additional (criterion: nc, kmnc, nbc, snac, tknc, lsc, dsc), idc-rarity, idc-additional or random."),
               out: Path = typer.Option(..., "--out", help="CSV file to write: rank (1 = look first), input (index, or file name for a folder), score."),
               train: Optional[str] = typer.Option(None, "--train", help="Training inputs (lsa, dsa, mdsa, idc-*, and the coverage orderings of kmnc, nbc, snac, lsc, dsc)."),
               analysis: Optional[Path] = typer.Option(None, "--analysis", help="Analysis folder for idc-rarity and idc-additional (default: analyse --train with --m)."),
               layer: Optional[str] = typer.Option(None, "--layer", help="Layer of lsa, dsa and mdsa (default: the last hidden layer before the logits)."),
               m: int = typer.Option(8, "--m", help="Important neurons when the IDC orderings analyse --train."),
               passes: int = typer.Option(20, "--passes", help="Forward passes of mc-dropout."),
               tolerance: Optional[float] = typer.Option(None, "--tolerance", help="Regression: an input fails when its absolute error exceeds this (default twice the RMSE over the inputs)."),
               random_state: int = typer.Option(0, "--random-state", help="Seed of random and mc-dropout."),
               as_json: bool = typer.Option(False, "--json", help="Print one JSON object: apfd, found_at_1, found_at_5, found_at_10, failures, inputs (null without labels)."),
               limit: Optional[int] = typer.Option(None, "--limit", help="Use the first N inputs only."),
               scale: str = ScaleOpt, value_range: Optional[str] = ValueRangeOpt,
               preprocess: Optional[str] = PreprocessOpt, resize: Optional[str] = ResizeOpt,
               class_names: Optional[str] = ClassNamesOpt, labels: Optional[str] = LabelsOpt,
               crop: Optional[str] = CropOpt, task: Optional[str] = TaskOpt,
               unsafe: bool = UnsafeOpt, architecture: Optional[Path] = ArchitectureOpt):
    """Order a set of inputs so that those most likely to reveal a failure come first (which to label first);
    with labels, score the ordering by APFD and the share of failures in the first 1, 5 and 10 %."""
    from .prioritization import check_ordering, input_names, prioritize as run
    check_ordering(by)   # an unknown ordering is refused before any model is loaded
    _check_sources(inputs, train, scale=scale, limit=limit, resize=resize, crop=crop, class_names=class_names)
    network, convention, found = _open(model, unsafe, architecture, task, value_range, preprocess, analysis,
                                       images=inputs)
    check_ordering(by, network.task)   # classification-only orderings refused for a regression model
    ds, x = _inputs(inputs, network, scale, limit, convention, resize, class_names, err=as_json, labels=labels,
                    crop=crop)
    x_train = y_train = None
    if train is not None:
        train_ds, x_train = _inputs(train, network, scale, None, convention, resize, class_names, err=True,
                                    crop=crop)
        y_train = train_ds.y
    ranking = run(network, x, by=by, x_train=x_train, y_train=y_train, y=ds.y, analysis=found, layer=layer, m=m,
                  passes=passes, tolerance=tolerance, random_state=random_state, progress=not as_json)
    path = ranking.to_csv(out, input_names(inputs, limit))
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
    typer.echo(str(evaluation) if evaluation is not None else "no labels: the ordering is not scored (give labels for APFD)")


@command
def fuzz(ctx: typer.Context,
         model: Optional[List[Path]] = typer.Option(None, "--model", help="Model under test; repeat for the disagreement oracle (first = under test)."),
         seeds: Optional[str] = typer.Option(None, "--seeds", help="Seed inputs (folder, .npz, .npy, IDX, dataset name)."),
         budget: Optional[int] = typer.Option(None, "--budget", help="Execs: mutants run through the model (on --resume: the new total)."),
         train: Optional[str] = typer.Option(None, "--train", help="Analyse on these training inputs first."),
         analysis: Optional[Path] = typer.Option(None, "--analysis", help="Reuse a saved analysis."),
         layer: Optional[str] = typer.Option(None, "--layer", help="Subject layer when analysing."),
         m: Optional[int] = typer.Option(None, "--m", help="Important neurons when analysing (default 8); also picks a saved analysis."),
         clusters: str = typer.Option("2-5", "--clusters", help="k values when analysing."),
         cluster_method: Optional[str] = typer.Option(None, "--cluster-method", help="silhouette (default when analysing) or zero-aware; also picks a saved analysis."),
         mutators: Optional[str] = typer.Option(None, "--mutators", help="Comma-separated mutator specs, e.g. 'gauss(std=0.05),rotate,fgsm' (see `idcgen mutators`)."),
         oracle: Optional[str] = typer.Option(None, "--oracle", help="Default misclassification (deviation for a regression model). For regression: deviation(threshold=T), error(threshold=T) (needs labels), deeptest(lam=L) (DeepTest's relation, lam x the MSE measured on the labelled seeds), disagreement(threshold=T). misclassification, prediction-change, disagreement, uncertain[(P)] or confusion(A,B) (a seed of class A predicted B or the reverse), or several joined by & and | with ~ for not, e.g. 'misclassification & ~uncertain'."),
         scheduler: str = typer.Option("prioritized", "--scheduler", help="prioritized (DeepHunter) or uniform."),
         guide: str = typer.Option("idc", "--guide", help="Which criterion's new coverage admits a mutant to the corpus: idc, nc, kmnc, nbc, snac, tknc, lsc, dsc, or none (every valid mutant)."),
         measure: Optional[str] = typer.Option(None, "--measure", help="Criteria measured besides IDC, e.g. 'nc,kmnc:k=10' (fitted on --train, else on the seeds)."),
         no_round: bool = typer.Option(False, "--no-round", help="Run mutants unrounded (by default they are rounded to the seeds' uint8 levels, so every finding reproduces from its PNG)."),
         batch_size: int = typer.Option(256, "--batch-size", help="Mutants per step."),
         no_validity: bool = typer.Option(False, "--no-validity", help="Turn DeepHunter's validity bounds off."),
         alpha: float = typer.Option(0.02, "--alpha", help="Validity: share of pixels that may change freely."),
         beta: float = typer.Option(0.2, "--beta", help="Validity: largest change of any pixel otherwise (share of the range)."),
         random_state: int = typer.Option(0, "--random-state", help="Seed of the campaign: the same seed, settings and inputs make the same campaign in one process."),
         limit: Optional[int] = typer.Option(None, "--limit", help="Use the first N seeds only."),
         out: Optional[Path] = typer.Option(None, "--out", help="Campaign folder (default outputs/campaigns/<model>_<time>)."),
         resume: Optional[Path] = typer.Option(None, "--resume", help="Continue the campaign in this folder."),
         scale: str = ScaleOpt, value_range: Optional[str] = ValueRangeOpt,
         preprocess: Optional[str] = PreprocessOpt, resize: Optional[str] = ResizeOpt,
         class_names: Optional[str] = ClassNamesOpt, labels: Optional[str] = LabelsOpt,
         crop: Optional[str] = CropOpt, task: Optional[str] = TaskOpt,
         image_shape: Optional[str] = typer.Option(None, "--image-shape", help="H,W,C of the images to mutate for a model taking flat or channel-less inputs (default: inferred)."),
         workers: Optional[int] = typer.Option(None, "--workers", help="Run N campaigns in parallel on Ray, each with its own random stream, sharing the inputs that reach new combinations (as AFL's -M/-S); one sub-folder each in --out, merged view in merged/. Needs --analysis or --train."),
         ray: Optional[str] = typer.Option(None, "--ray", help="With --workers: local (default: start Ray on this machine), auto or a Ray cluster address such as ray://HEAD:10001."),
         unsafe: bool = UnsafeOpt,
         architecture: Optional[List[Path]] = typer.Option(None, "--architecture", help="Keras JSON architecture for a weights-only .h5 --model; with several --model, one each in order (- for none).")):
    """Grow a test set that reaches new important-neuron cluster combinations; export it and report."""
    from .session import new_campaign, resume_campaign
    given = _given(ctx)
    _need_ray(ray, workers)
    if resume is not None:  # the campaign's own settings; any other option given is checked against them
        options = {k: v for k, v in given.items()
                   if k not in ("model", "architecture", "unsafe", "budget", "resume", "workers", "ray")}
        result = resume_campaign(resume, models=model or None, budget=budget, safe_mode=not unsafe,
                                 architectures=architecture or None, options=options, workers=workers, ray=ray,
                                 echo=typer.echo)
    else:
        if ray is not None and workers is None:
            _fail("--ray runs parallel campaigns: give their number with --workers N")
        if not model or seeds is None or budget is None:
            _fail("--model, --seeds and --budget are needed (or --resume DIR)")
        result = new_campaign(models=model, seeds=seeds, budget=budget, train=train, analysis=analysis, layer=layer,
                              m=m, clusters=given.get("clusters"), cluster_method=cluster_method, mutators=mutators,
                              oracle=oracle, scheduler=scheduler, batch_size=batch_size, validity=not no_validity,
                              alpha=alpha, beta=beta, random_state=random_state, limit=limit, out=out, scale=scale,
                              value_range=value_range, preprocess=preprocess, image_shape=image_shape, resize=resize,
                              class_names=class_names, guide=guide, measure=measure, rounding=not no_round,
                              safe_mode=not unsafe, labels=labels, crop=crop, task=task,
                              architectures=architecture or None, workers=workers, ray=ray, echo=typer.echo)
    if result is None:  # interrupted: what was committed is on disk
        raise typer.Exit(130)


@command
def harden(model: Path = ModelOpt,
           train: str = typer.Option(..., "--train", help="The model's training data."),
           campaign: Path = typer.Option(..., "--campaign", help="Campaign folder whose kept inputs retrain the model."),
           test: str = typer.Option(..., "--test", help="Test set to measure robustness on (keep it apart from the seeds)."),
           mode: str = typer.Option("finetune", "--mode", help="finetune (from the model's weights) or scratch."),
           epochs: int = typer.Option(3, "--epochs", help="Training epochs, the same for both retrainings."),
           repeats: int = typer.Option(1, "--repeats", help="Repetitions (mean ± std)."),
           random_state: int = typer.Option(0, "--random-state", help="Seed of the retraining and the random perturbations."),
           limit_test: Optional[int] = typer.Option(None, "--limit-test", help="Use the first N test inputs."),
           out: Optional[Path] = typer.Option(None, "--out", help="Output folder (default <campaign>/harden)."),
           pair: Optional[str] = typer.Option(None, "--pair", help="A,B: also measure the type-1 confusion of classes A and B (e.g. a pair `idcgen inspect` predicts); lower is better."),
           scale: str = ScaleOpt, class_names: Optional[str] = ClassNamesOpt,
           unsafe: bool = UnsafeOpt, architecture: Optional[Path] = ArchitectureOpt):
    """Retrain with a campaign's kept inputs and with random perturbations; compare robustness."""
    from .fuzz.campaign import Campaign
    from .hardening import check_pair, format_table, harden as run
    from .fuzz.store import read_meta
    read_meta(campaign)   # a missing folder or an analysis: "not a campaign folder", before the model loads
    _check_sources(train, test, scale=scale, class_names=class_names)
    network, convention, _ = _open(model, unsafe, architecture, analysis=campaign / "analysis")
    if network.task == "regression":
        _fail("harden measures accuracy and retrains with class labels; it is for classifiers, and this model is "
              "a regression model (one output unit)")
    classes = None if pair is None else check_pair(pair.split(","), network.n_classes)   # before any work
    found = Campaign.load(campaign, network)
    for note in found.notes:   # damage found on reading (a read-only load repairs nothing)
        typer.echo(f"note: {note}")
    convention = dataclasses.replace(convention, value_range=found.value_range)  # the inputs as the campaign's
    train_ds, x_train = _inputs(train, network, scale, None, convention, class_names=class_names)
    test_ds, x_test = _inputs(test, network, scale, limit_test, convention, class_names=class_names)
    if train_ds.y is None or test_ds.y is None:
        _fail("--train and --test need labels")
    out = out or campaign / "harden"
    summary = run(network, x_train, train_ds.y, found, x_test, test_ds.y, mode=mode, epochs=epochs,
                  repeats=repeats, random_state=random_state, out=out, pair=classes)
    typer.echo(format_table(summary))
    typer.echo(f"written to {out}/ (harden.md, harden.csv, harden.png) in {summary['seconds']} s")


@command
def convert(old: Path = typer.Argument(..., metavar="OLD", help="Model file to read: a Keras 2.x .h5, or a weights-only .h5 with --architecture; a PyTorch TorchScript .pt (with --input-shape), or a factory package.module:make_model with --weights."),
            new: Path = typer.Argument(..., metavar="NEW", help="File to write: .keras or .h5 (the format follows the suffix); .pt2 for a PyTorch model."),
            architecture: Optional[Path] = ArchitectureOpt, unsafe: bool = UnsafeOpt,
            input_shape: Optional[str] = typer.Option(None, "--input-shape", help="H,W,C of the images a TorchScript model takes (TorchScript files do not record it)."),
            force: bool = typer.Option(False, "--force", help="Replace NEW if it exists.")):
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
def demo(out: Path = typer.Option(DEFAULT_OUTPUTS / "demo", "--out", help="Output folder."),
         epochs: int = typer.Option(8, "--epochs", help="Training epochs of the demo LeNet-5."),
         budget: int = typer.Option(3000, "--budget", help="Execs of the demo's fuzz step (0 skips it)."),
         force: bool = typer.Option(False, "--force", help="Replace an earlier demo in --out.")):
    """Train LeNet-5 on the embedded MNIST digits, analyse it, measure coverage, fuzz: no download needed."""
    from .demo import run_demo
    run_demo(out, epochs=epochs, budget=budget, force=force, echo=typer.echo)


@command
def inspect(model: Path = ModelOpt,
            inputs: str = typer.Option(..., "--inputs", help="Inputs to inspect (with labels, e.g. an .npz with y, the precision and recall are measured); with --ray or --workers a pattern such as 'shards/*.npz' names shard files (or folders) the workers read themselves."),
            layers_: Optional[str] = typer.Option(None, "--layers", help="Comma-separated layers (default: every hidden layer a neuron criterion uses)."),
            threshold: float = typer.Option(0.5, "--threshold", help="A neuron is active above this, after min-max scaling (DeepInspect: 0.5)."),
            scaling: str = typer.Option("neuron", "--scaling", help="Min-max scaling per neuron over the inputs (default), per layer over the inputs, or per layer within each input ('input', as NC)."),
            analysis: Optional[Path] = typer.Option(None, "--analysis", help="Analysis folder: also measure with its important neurons only."),
            top: int = typer.Option(10, "--top", help="Pairs to print, smallest NAPVD first."),
            as_json: bool = typer.Option(False, "--json", help="Print one JSON object (summary and every pair)."),
            out: Optional[Path] = typer.Option(None, "--out", help="Report folder (default outputs/inspect/<model>); its files are replaced."),
            no_labels: bool = typer.Option(False, "--no-labels", help="Ignore the inputs' labels (predictions only)."),
            limit: Optional[int] = typer.Option(None, "--limit", help="Use the first N inputs only."),
            scale: str = ScaleOpt, value_range: Optional[str] = ValueRangeOpt,
            preprocess: Optional[str] = PreprocessOpt, resize: Optional[str] = ResizeOpt,
            class_names: Optional[str] = ClassNamesOpt, labels: Optional[str] = LabelsOpt,
            crop: Optional[str] = CropOpt,
            ray: Optional[str] = RayOpt, workers: Optional[int] = WorkersOpt,
            unsafe: bool = UnsafeOpt, architecture: Optional[Path] = ArchitectureOpt):
    """DeepInspect: the class pairs the model confuses or treats with bias, from per-class neuron activation
    probabilities (NAPVD); with labels, their precision, recall and Spearman against the confusion matrix."""
    from .deepinspect import inspect as run
    from .checks import check_int
    check_int("top", top, 1)
    _need_ray(ray, workers)
    _check_sources(inputs, scale=scale, limit=limit, resize=resize, crop=crop, class_names=class_names)
    network, convention, found = _open(model, unsafe, architecture, None, value_range, preprocess, analysis,
                                       images=inputs)
    sharded = _shard_pattern(inputs, "--inputs", ray, workers, limit)   # shard files the workers read themselves
    if not sharded:
        ds, x = _inputs(inputs, network, scale, limit, convention, resize, class_names, err=as_json, labels=labels,
                        crop=crop)
    names = None if layers_ is None else [n.strip() for n in layers_.split(",") if n.strip()]
    pool = _ray_pool(ray, workers, network, unsafe)   # the forward passes on Ray workers, the counts summed here
    if sharded:
        x = pool.shards(inputs, scale=scale, resize=resize, class_names=class_names, crop=crop, labels=labels)
        x.load()
        x.y = None if no_labels else x.y
    options = dict(layers=names, threshold=threshold, scaling=scaling, analysis=found, progress=not as_json,
                   class_names=x.class_names if sharded else ds.class_names)   # shards: given, or the folders'
    y = None if no_labels or sharded else ds.y
    result = run(network, x, y, **options) if pool is None else pool.inspect(x, y, **options)
    if pool is not None:
        pool.close()
    folder = out if out is not None else DEFAULT_OUTPUTS / "inspect" / model.stem
    report = result.write_report(folder, None if sharded else x, top=top, title=f"{model.name} on {inputs}",
                                 value_range=convention.value_range)   # shards: no example images
    if as_json:
        typer.echo(json.dumps(dict(result.to_dict(), report=str(report))))
        return
    for note in result.notes:
        typer.echo(f"note: {note}")
    m = result.metrics["all"]
    typer.echo(f"{result.n_inputs} inputs, {result.n_classes} classes, {m['neurons']} neurons of "
               f"{', '.join(result.layers)}; NAPVD mean {_fmt_number(m['napvd_mean'])}, std {_fmt_number(m['napvd_std'])}")
    shown = result.top(top)
    typer.echo(f"pairs with the smallest NAPVD (* predicted confused: below mean - 1 std; ** also top 1 %):")
    for r in shown:
        mark = "**" if r["confusion_top"] else "*" if r["confusion_std"] else ""
        conf = r.get("type1conf")   # None: no labelled input of either class
        extra = ("" if "type1conf" not in r else f"  type-1 confusion {'n/a' if conf is None else f'{conf:.4f}'}"
                 + (" (confused)" if r["confused"] else ""))
        typer.echo(f"  {result.name(r['a'])} - {result.name(r['b'])}: NAPVD {_fmt_number(r['napvd'], '.3f')}{mark}{extra}")
    for view, vm in result.metrics.items():
        if "confusion" not in vm:
            continue
        for what in ("confusion", "bias"):
            e = vm[what]
            typer.echo(f"{what} ({view} neurons, {vm['neurons']}): {e['actual']} actual pairs; mean - 1 std: "
                       f"precision {_fmt_rate(e['std']['precision'])}, recall {_fmt_rate(e['std']['recall'])}; top 1 %: "
                       f"precision {_fmt_rate(e['top']['precision'])}, recall {_fmt_rate(e['top']['recall'])}; "
                       f"Spearman {_fmt_rate(e['spearman'])}")
    typer.echo(f"report: {report} (and report.html, pairs.csv, inspect.json)")


def _fmt_number(value, spec: str = ".3g") -> str:
    """NAPVD statistics are None when no class pair has one (inputs of a single class)."""
    return "n/a" if value is None else f"{value:{spec}}"


def _fmt_rate(value) -> str:
    return "n/a" if value is None else f"{value:.2f}"


@command
def affinity(model: Path = ModelOpt,
             inputs: str = typer.Option(..., "--inputs", help="Inputs to measure on (labels, where present, feed the class hypotheses; else the model's predictions do)."),
             analysis: Optional[Path] = typer.Option(None, "--analysis", help="Analysis folder: its important neurons form one unit group."),
             units: Optional[str] = typer.Option(None, "--units", help="Unit groups: LAYER (all its neurons) or LAYER:i,j,k, several joined by ';' (default without --analysis: every neuron of the default layer)."),
             hypotheses: Optional[Path] = typer.Option(None, "--hypotheses", help="Python file of hypotheses f(x, y) -> array (n,): its HYPOTHESES dict, else its public functions; added to the built-in ones. The file is executed: trusted code only."),
             no_builtin: bool = typer.Option(False, "--no-builtin", help="Leave the built-in hypotheses out (use those of --hypotheses only)."),
             masks: bool = typer.Option(False, "--masks", help="Add the built-in per-pixel hypotheses (ink, edges, left half, centre masks): each convolutional channel's activation map against each mask, by pixel Pearson and IoU (a hypotheses file may return masks (n, H, W) too)."),
             measures: str = typer.Option("pearson,spearman,mi,linear", "--measures", help="Comma-separated: pearson, spearman, mi (mutual information), linear (a group's logistic accuracy or linear R^2, cross-validated)."),
             tol: float = typer.Option(0.05, "--tol", help="Early stopping: a score is final once its 95 % interval is within +-TOL; 0 scores every input."),
             as_json: bool = typer.Option(False, "--json", help="Print one JSON object (every score, the top hypotheses, timings)."),
             out: Optional[Path] = typer.Option(None, "--out", help="Report folder (default outputs/affinity/<model>); its files are replaced."),
             limit: Optional[int] = typer.Option(None, "--limit", help="Use the first N inputs only."),
             random_state: int = typer.Option(0, "--random-state", help="Seed of the order the inputs are streamed in."),
             scale: str = ScaleOpt, value_range: Optional[str] = ValueRangeOpt,
             preprocess: Optional[str] = PreprocessOpt, resize: Optional[str] = ResizeOpt,
             class_names: Optional[str] = ClassNamesOpt, labels: Optional[str] = LabelsOpt,
             crop: Optional[str] = CropOpt, task: Optional[str] = TaskOpt,
             ray: Optional[str] = RayOpt, workers: Optional[int] = WorkersOpt,
             unsafe: bool = UnsafeOpt, architecture: Optional[Path] = ArchitectureOpt):
    """DeepBase: which hypotheses (functions of the input) the hidden units follow, by correlation, mutual
    information and linear models, with early stopping."""
    from .deepbase import affinity as run, parse_measures
    from .hypotheses import builtin_hypotheses, builtin_masks, load_hypotheses
    chosen = parse_measures(measures)    # before loading anything
    _need_ray(ray, workers)
    extra = load_hypotheses(hypotheses) if hypotheses is not None else []
    if no_builtin and not extra and not masks:
        _fail("--no-builtin leaves no hypothesis: give --hypotheses FILE")
    _check_sources(inputs, scale=scale, limit=limit, resize=resize, crop=crop, class_names=class_names)
    network, convention, found = _open(model, unsafe, architecture, task, value_range, preprocess, analysis,
                                       images=inputs)
    ds, x = _inputs(inputs, network, scale, limit, convention, resize, class_names, err=as_json, labels=labels,
                    crop=crop)
    library = [] if no_builtin else builtin_hypotheses(
        task=network.task, n_classes=network.n_classes if network.task != "regression" else 0,
        channels=x.shape[-1] if x.ndim == 4 else 1)
    library += builtin_masks() if masks else []
    pool = _ray_pool(ray, workers, network, unsafe)   # the forward pass on Ray workers, the measures here
    options = dict(analysis=found, units=units, hypotheses=library + extra, measures=chosen, tol=tol,
                   random_state=random_state, progress=not as_json)
    result = run(network, x, ds.y, **options) if pool is None else pool.affinity(x, ds.y, **options)
    if pool is not None:
        pool.close()
    folder = out if out is not None else DEFAULT_OUTPUTS / "affinity" / model.stem
    report = result.save(folder)
    if as_json:
        typer.echo(json.dumps(dict(result.to_dict(), report=str(report))))
        return
    for note in result.notes:
        typer.echo(f"note: {note}")
    stop = (f"early stopping at +-{result.tol}: {result.n_seen} of {result.n_inputs} inputs" if result.tol
            else f"all {result.n_inputs} inputs")
    typer.echo(f"{len(result.units)} units in {len(result.groups)} group(s), {len(result.hypotheses)} hypotheses, "
               f"{', '.join(result.measures)}; {stop}; {result.seconds:.1f} s")
    for measure in dict.fromkeys([result.headline() or chosen[0]] + (["linear"] if "linear" in chosen else [])
                                 + (["pixel", "iou"] if "iou" in result.measures else [])):
        typer.echo(result.table(measure))
    for line in result.describe():
        typer.echo(line)
    typer.echo(f"report: {report} (and report.html, affinity.csv, affinity.json)")


def main():
    app()


if __name__ == "__main__":
    main()
