"""What the commands share: models, inputs and analyses loaded one way, and the executor their work runs on.

``analyze``, ``coverage``, ``inspect``, ``affinity``, ``harden`` and ``fuzz`` load a model with its input
convention (:func:`open_model`) and their inputs (:func:`load_inputs`: resize, crop, labels and class names
for every input set alike); a :class:`Session` holds them for one command. Fuzz campaigns are built on it in
:mod:`idcgen.campaigns`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .analysis import Analysis
from .data import load_for_model
from .data import load_inputs as load_inputs_of
from .errors import InputError, InputShapeError, ModelError
from .framework import as_network, framework_of_path, is_factory, load_model, network_with_convention
from .options import (
    ConventionOptions,
    InputOptions,
    ModelOptions,
    ModelsOptions,
    RunnerOptions,
)

if TYPE_CHECKING:
    from .distributed.workers import Workers
    from .executor import LocalExecutor
    from .fuzz.settings import Sources

OUTPUTS = Path("outputs")


# ---- models and inputs, for every command ---------------------------------------------------------
def load_networks(
    models,
    *,
    architectures=None,
    safe_mode: bool = True,
    task=None,
    device=None,
    precision=None,
    images=None,
    input_shape=None,
    batch_size=None,
) -> list:
    """One Network per model file; ``architectures`` (JSON files for weights-only files) pair with ``models``
    in order, one per model, ``-`` for a model file that holds its own architecture. ``device`` and
    ``precision``: :mod:`idcgen.framework.device` (a GPU asked for and not seen is said before any load); a
    PyTorch model that records no input shape (a TorchScript file, a factory without an ``input_shape``
    attribute) takes ``input_shape`` (H, W, C), else the shape of the inputs ``images`` (a source spec) where
    given. ``batch_size``: inputs per forward and relevance batch (default: sized from memory)."""
    architectures = [None if str(a) == "-" else a for a in architectures or []]
    if architectures and len(architectures) != len(models):
        raise InputError(
            f"{len(architectures)} --architecture files for {len(models)} models: give one per --model "
            "(- for a model file that holds its architecture)"
        )
    for path in [*models, *(a for a in architectures if a is not None)]:  # all, before the framework loads one
        if not Path(path).exists() and not is_factory(path):  # a PyTorch factory names code, not a file
            raise ModelError(f"{_role(path, models, architectures)} file not found: {path}")
    from .framework import resolve_device

    resolve_device(framework_of_path(models[0]), device, precision)  # a GPU asked for and not seen: said now
    pairs = zip(models, architectures or [None] * len(models))
    return [
        as_network(  # what Network(...) dispatches to, which mypy takes for the abstract class
            _load_model(p, a, safe_mode, images, input_shape),
            task=task,
            device=device,
            precision=precision,
            batch_size=batch_size,
        )
        for p, a in pairs
    ]


def _load_model(path, architecture, safe_mode: bool, images, input_shape):
    if input_shape is not None:
        if framework_of_path(path) != "torch":
            raise InputError(
                f"--input-shape is for PyTorch models that do not record their input shape; {path} records "
                "its own: drop --input-shape"
            )
        return load_model(path, safe_mode=safe_mode, architecture=architecture, input_shape=input_shape)
    try:
        return load_model(path, safe_mode=safe_mode, architecture=architecture)
    except InputShapeError:
        if images is None:
            raise
        shape = load_inputs_of(images, limit=1).x.shape[1:]  # the images the command is given
        return load_model(
            path,
            safe_mode=safe_mode,
            architecture=architecture,
            input_shape=tuple(shape) if len(shape) == 3 else (*shape, 1),
        )


def _role(path, models, architectures) -> str:
    """ "model", or what the --architecture/--weights file beside a model is: a PyTorch factory's state_dict
    ("weights") or a Keras JSON architecture."""
    if path in models:
        return "model"
    model = next((m for m, a in zip(models, architectures) if a == path), None)
    return "weights" if model is not None and framework_of_path(model) == "torch" else "architecture"


def open_model(
    model: ModelOptions | ModelsOptions, convention: ConventionOptions, *, analysis=None, recorded=None, images=None
):
    """(Networks measured in image space, their input convention, the Analysis or None) for a command: the
    model files loaded (the first under test; with :class:`~idcgen.options.ModelsOptions` others for the
    disagreement oracle, in the same convention), the ``analysis`` (a saved folder, read, or an Analysis) bound to
    the first under its ``recorded`` convention (default: the analysis' own; an explicit value range or
    preprocessing in ``convention`` that contradicts it is refused); ``images``: as for :func:`load_networks`."""
    found = analysis if analysis is None or isinstance(analysis, Analysis) else Analysis.load(analysis)
    if recorded is None and found is not None:
        recorded = dataclasses.replace(found.convention, image_shape=None)
    first, *others = load_networks(
        model.model if isinstance(model, ModelsOptions) else [model.model],
        architectures=model.architectures,
        safe_mode=model.safe_mode,
        task=model.task,
        device=model.device,
        precision=model.precision,
        images=images,
        input_shape=model.input_shape,
        batch_size=getattr(model, "batch_size", None),  # ModelsOptions: sized from memory
    )
    network, in_convention = network_with_convention(
        first, value_range=convention.value_range, preprocess=convention.preprocess, recorded=recorded
    )
    if found is not None:
        found.bind(network)
    return [network] + [network_with_convention(n, recorded=in_convention)[0] for n in others], in_convention, found


class Session:
    """What one command works with: the model under test in its input convention (the one value range), the
    saved analysis bound to it, the input sets it reads, and the executor its work runs on (this process, or
    Ray workers started when first needed); closing the session frees the workers.

    ``model``, ``convention`` and ``runner`` are settings groups (:mod:`idcgen.options`), ``model`` one model or
    several (:class:`~idcgen.options.ModelsOptions`: the others, for the disagreement oracle, are ``others``);
    ``analysis``: a saved analysis folder, read once, or an Analysis, bound under its convention or ``recorded``;
    ``images``: an input set the command reads (a model file that records no input shape takes theirs);
    ``echo``: where notes go; ``status``: where a line about starting workers goes.
    """

    def __init__(
        self,
        model: ModelOptions | ModelsOptions,
        convention: ConventionOptions | None = None,
        runner: RunnerOptions | None = None,
        *,
        analysis=None,
        recorded=None,
        images=None,
        echo=print,
        status=None,
    ):
        self.model, self.runner, self.echo, self.status = model, runner or RunnerOptions(), echo, status or echo
        networks, self.convention, self.analysis = open_model(
            model, convention or ConventionOptions(), analysis=analysis, recorded=recorded, images=images
        )
        self.network, self.others = networks[0], networks[1:]
        from .framework.device import device_line

        line = device_line(self.network.device_info())  # None for the CPU in fp32: said nowhere
        if line is not None:
            self.status(line)
        self._executor: LocalExecutor | Workers | None = None

    @property
    def executor(self):
        """:class:`~idcgen.executor.LocalExecutor`, or Ray workers holding the model (started on first use)."""
        if self._executor is None:
            if not self.runner.parallel:
                from .executor import LocalExecutor

                self._executor = LocalExecutor(self.network)
            else:
                from .distributed import require_ray
                from .distributed.workers import Workers

                ray, workers = self.runner.ray, self.runner.workers
                what = "--ray" if ray is not None else "--workers"
                require_ray(what)  # one line saying what to install
                self.status(f"starting {workers or 'one per CPU or GPU'} Ray worker(s) ({ray or 'local'}) ...")
                self._executor = Workers(
                    self.network,
                    ray=ray or "local",
                    workers=workers,
                    safe_mode=self.model.safe_mode,
                    what=what,
                    gpus_per_worker=self.runner.gpus_per_worker,
                )
        return self._executor

    def inputs(self, spec, reading: InputOptions | Sources, *, limit=None, labels=None, echo=None):
        """(Dataset, x) of one input set for the model, read as ``reading`` says (``limit`` and ``labels`` are this
        set's: a training set is read whole, and only some sets have labels)."""
        return load_inputs(
            spec,
            self.network,
            self.convention,
            **dict(reading.load_options(), labels=labels),
            limit=limit,
            echo=echo or self.echo,
        )

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def load_inputs(
    spec,
    network,
    convention=None,
    *,
    scale="auto",
    limit=None,
    resize=None,
    crop=None,
    labels=None,
    class_names=None,
    echo=print,
):
    """(Dataset, x) for the model, in its convention's value range; the label mapping and conversions are
    echoed once."""
    value_range = (0.0, 1.0) if convention is None else convention.value_range
    ds, x = load_for_model(
        spec,
        network.input_shape,
        scale=scale,
        limit=limit,
        value_range=value_range,
        resize=resize,
        class_names=class_names,
        n_classes=network.n_classes,
        labels=labels,
        crop=crop,
        task=network.task,
    )
    for note in ds.notes:
        echo(note if note.startswith(("labels: ", "warning: ")) else f"note: {note}")
    return ds, x


def save_analysis(analysis, model, out=None, *, force: bool = False) -> tuple[Path, str]:
    """Save ``analysis`` in ``out`` (replacing one there only with ``force``), or by default under
    outputs/analyses/ with a name that tells analyses apart, never over another one; returns the folder and
    what happened, as a line says it ("saved to ...", "already in ..., unchanged")."""
    if out is not None:
        folder = analysis.save(out, overwrite=force)
        return folder, f"saved to {folder}"
    wanted = OUTPUTS / "analyses" / analysis.default_name(Path(model).stem)
    folder, written = analysis.save_unique(wanted)
    return folder, (
        f"already in {folder}, unchanged"
        if not written
        else f"saved to {folder}"
        if folder == wanted
        else f"saved to {folder} ({wanted} holds another analysis)"
    )


@dataclass
class Measurement:
    """The coverage of one input set by each criterion asked for (``results``, spec -> result: IDC first), with
    their ``notes`` (spec -> lines) and the criteria that could not be computed (``missing``, spec -> why)."""

    results: dict
    notes: dict
    missing: dict
    inputs: int
    analysis: Analysis | None = None
    shards: int | None = None  # the shard files the inputs were read from by Ray workers (IDC only)

    def to_dict(self) -> dict:
        """``idcgen coverage --json``: the first result's fields, then each criterion's."""
        first = next(iter(self.results.values()))
        payload = dict(first.to_dict(), inputs=self.inputs)
        if self.shards is not None and self.analysis is not None:
            payload.update(shards=self.shards, layer=self.analysis.layer, m=self.analysis.m)
        elif "idc" in self.results and self.analysis is not None:
            payload.update(idc=self.results["idc"].score, layer=self.analysis.layer, m=self.analysis.m)
        payload["criteria"] = {
            k: {"score": r.score, "covered": r.covered, "total": r.total} for k, r in self.results.items()
        }
        for name, lines in self.notes.items():
            payload["criteria"][name]["notes"] = lines
        if self.missing:
            payload["missing"] = self.missing
        return payload

    def summary_lines(self) -> list[str]:
        """What ``idcgen coverage`` prints: one line per criterion (a spec with parameters named), its notes, and
        why a criterion is missing."""
        lines, where = [], "" if self.shards is None else f" in {self.shards} shards"
        for name, result in self.results.items():
            if name == "idc" and self.analysis is not None:
                extra = f", layer {self.analysis.layer}, m={self.analysis.m}"
            else:
                extra = f", {name}" if ":" in name or "(" in name else ""
            lines.append(f"{result}  [{self.inputs} inputs{where}{extra}]")
            lines += [f"note: {name.upper()}: {line}" for line in self.notes.get(name, ())]
        return lines + [f"note: {name.upper()} not computed: {why}" for name, why in self.missing.items()]


def measure_coverage(
    network, x, criteria: dict, *, analysis=None, x_train=None, y_train=None, executor=None
) -> Measurement:
    """The coverage of an input set: IDC (with ``analysis``, on ``executor`` if given) and each criterion of
    ``criteria`` (spec -> unfitted criterion), fitted on ``x_train``. A criterion that cannot be computed here
    (LSC's densities on a layer wider than the training inputs are many, DSC without two classes) does not take
    the others with it: the measurement's ``missing`` says why, one line per criterion."""
    import numpy as np

    from .errors import DeviceError, IdcgenError

    results, notes, missing = {}, {}, {}
    if analysis is not None:
        results["idc"] = analysis.coverage(x) if executor is None else executor.coverage(analysis, x)
    for spec, criterion in criteria.items():
        try:
            fitted = criterion.fit(
                network, x_train if x_train is not None else x[:1], y_train if x_train is not None else None
            )
            results[spec] = fitted.coverage(network, x)
        except DeviceError:  # the device, not the criterion: every other criterion would meet it too
            raise
        except (IdcgenError, ValueError, np.linalg.LinAlgError) as exc:
            missing[spec] = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            continue
        if getattr(criterion, "notes_", None):  # e.g. LSC classes without a density: their inputs get no score
            notes[spec] = list(criterion.notes_)
    return Measurement(results, notes, missing, len(x), analysis)
