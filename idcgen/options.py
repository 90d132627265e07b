"""Command-line options, parsed once at the edge into frozen settings groups (docs/design.md, "Settings").

Each group is a frozen dataclass whose fields are the *parsed* values (a value range is a pair of floats, a
cluster range a tuple of k); a field that is also a command-line option carries its :class:`Flag`: the
option's names, help text, the type the command line reads and the parser that turns the typed text into
the field's value. :func:`idcgen.cli.command` expands a command's group-typed parameters into these options
and builds the groups from what was typed; nothing after the edge parses an option again, and a value that
does not parse is refused in one line naming its flag.

``given`` records which options were typed (not left at their defaults): a saved analysis or a resumed
campaign refuses only what was asked for explicitly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, ClassVar, List, Optional

from .errors import IdcgenError
from .fuzz.guidance import guide_names
from .prioritization import orderings_help


@dataclass(frozen=True)
class Flag:
    """How a settings field is typed on the command line."""

    names: tuple[str, ...]  # "--value-range" (the first is the one messages use)
    help: str
    cli_type: Any = Optional[str]  # what the command line reads (typer's annotation)
    cli_default: Any = None  # what the command line gives when the option is not typed
    parse: Callable | None = None  # typed value -> field value (never called on None)

    @property
    def name(self) -> str:
        return self.names[0]


def option(
    *names: str,
    help: str,
    cli_type: Any = Optional[str],
    cli_default: Any = None,
    parse: Callable | None = None,
    default: Any = dataclasses.MISSING,
) -> Any:
    """A settings field that is also a command-line option; ``default`` is the field's own default (for a
    group made in Python), else the parsed ``cli_default``."""
    flag = Flag(tuple(names), help, cli_type, cli_default, parse)
    if default is dataclasses.MISSING:
        default = cli_default if parse is None or cli_default is None else parse(cli_default)
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: type(default)(default), metadata={"flag": flag})
    return field(default=default, metadata={"flag": flag})


def _parsed(name: str, flag: Flag, value):
    """``flag.parse(value)``, its refusal naming the option (once: a message that names it, or names the
    parameter ``name``, which the command line spells as the flag, is kept)."""
    assert flag.parse is not None
    try:
        return flag.parse(value)
    except (IdcgenError, ValueError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if flag.name in message or name in getattr(exc, "parameters", ()):
            raise
        from .errors import ParameterError

        raise ParameterError(f"{message.rstrip('.')} ({flag.name})") from None


_REPEATED = (Optional[List[Path]], List[Path], Optional[List[str]], List[str])


@dataclass(frozen=True)
class Group:
    """Base of the settings groups: built from typed values (:meth:`from_typed`) or in Python."""

    given: tuple = field(default=(), compare=False, repr=False)  # every option typed, in the order typed

    @classmethod
    def flags(cls) -> dict[str, Flag]:
        return {f.name: f.metadata["flag"] for f in fields(cls) if "flag" in f.metadata}

    @classmethod
    def from_typed(cls, typed: dict, given=()) -> "Group":
        """The group from the command line's values by field name (each parsed once); ``given``: the names of
        every option typed explicitly (the command's, not only this group's), in the order typed."""
        values = {}
        for name, flag in cls.flags().items():
            if name not in typed:
                continue
            value = typed[name]
            if isinstance(value, list) or (value is None and flag.cli_type in _REPEATED):  # a repeatable option
                value = tuple(value or ())
            values[name] = value if flag.parse is None or value is None else _parsed(name, flag, value)
        return cls(**values, given=tuple(given))

    def typed(self, name: str) -> bool:
        """Whether option ``name`` was typed (not left at its default)."""
        return name in self.given


# ---- parsers (imported when first called: the groups import nothing heavy) ------------------------------
def _lazy(module: str, name: str) -> Callable:
    """The parser ``name`` of ``module`` (relative to idcgen), imported when it is first called."""

    def parse(text):
        from importlib import import_module

        return getattr(import_module(module, __package__), name)(text)

    parse.__name__ = name
    return parse


_value_range = _lazy(".convention", "parse_value_range")
_preprocess = _lazy(".convention", "parse_preprocess")
_image_shape = _lazy(".convention", "parse_image_shape")
_resize = _lazy(".data", "parse_resize")
_class_names = _lazy(".data", "parse_class_names")
_clusters = _lazy(".clusters", "parse_cluster_range")
_cluster_method = _lazy(".clusters", "check_cluster_method")


def _positive(name: str) -> Callable:
    def check(value):
        from .checks import check_int

        return check_int(name, value, 1)

    return check


def _mutators(text):
    from .fuzz.mutators import parse_mutators

    return tuple(repr(m) for m in parse_mutators(text))


def _scheduler(text):
    from .fuzz.scheduler import make_scheduler, scheduler_spec

    return scheduler_spec(make_scheduler(text))


def _measure(text):
    from .criteria import parse_criteria

    return tuple(parse_criteria(text))


def _str(value):
    return None if value is None else str(value)


# ---- the groups -------------------------------------------------------------------------------------
_MODEL_HELP = (
    "Model: Keras .keras/.h5; PyTorch TorchScript .pt, torch.export .pt2, or a factory package.module:make_model "
    "with --weights W.pt; ONNX .onnx (onnxruntime, forward only: no analyze, no gradient mutators)."
)
_WEIGHTS_HELP = (
    "Keras JSON architecture (as model.to_json() writes) for a weights-only .h5 model file; for a "
    "PyTorch factory --model package.module:make_model, its state_dict file (--weights W.pt)."
)


def _task_option():
    return option(
        "--task",
        help="regression or classification (default: detected; a head of one output unit is a regression model).",
    )


def _device_option():
    return option(
        "--device",
        help="Where the model runs: auto (the GPU when the framework sees one; default, or "
        "IDCGEN_DEVICE), cpu, cuda or cuda:N. cpu also hides the GPU from TensorFlow.",
    )


def _precision_option():
    return option(
        "--precision",
        help="fp32 (default), bf16 or fp16 for the forward passes (PyTorch models; an "
        "analysis and its relevance always run in fp32).",
    )


def _input_shape_option():
    return option(
        "--input-shape",
        parse=_image_shape,
        help="H,W,C of a PyTorch model that records no input shape (a TorchScript file, a factory without an "
        "input_shape attribute); default: the shape of the inputs the command is given.",
    )


def _unsafe_option():
    return option(
        "--unsafe",
        cli_type=bool,
        cli_default=False,
        help="Turn off Keras' safe mode (allows Lambda layers): trusted files only.",
    )


@dataclass(frozen=True)
class ModelOptions(Group):
    """The model under test and how its file is read."""

    model: Path | None = option("--model", help=_MODEL_HELP, cli_type=Path, cli_default=..., default=None)
    architecture: Path | None = option("--architecture", "--weights", help=_WEIGHTS_HELP, cli_type=Optional[Path])
    task: str | None = _task_option()
    unsafe: bool = _unsafe_option()
    device: str | None = _device_option()
    precision: str | None = _precision_option()
    input_shape: tuple | None = _input_shape_option()
    batch_size: int | None = option(
        "--batch-size",
        cli_type=Optional[int],
        parse=_positive("batch_size"),
        help="Inputs per forward and relevance batch (default: sized from the model and the device's free memory).",
    )

    @property
    def safe_mode(self) -> bool:
        return not self.unsafe

    @property
    def architectures(self) -> tuple | None:
        return None if self.architecture is None else (self.architecture,)


@dataclass(frozen=True)
class ModelsOptions(Group):
    """Several models (the first under test; the others for the disagreement oracle)."""

    model: tuple = option(
        "--model",
        cli_type=Optional[List[Path]],
        default=(),
        help="Model under test; repeat for the disagreement oracle (first = under test).",
    )
    architecture: tuple = option(
        "--architecture",
        "--weights",
        cli_type=Optional[List[Path]],
        default=(),
        help="Keras JSON architecture for a weights-only .h5 --model (a PyTorch factory's "
        "state_dict); with several --model, one each in order (- for none).",
    )
    task: str | None = _task_option()
    unsafe: bool = _unsafe_option()
    device: str | None = _device_option()
    precision: str | None = _precision_option()
    input_shape: tuple | None = _input_shape_option()

    @property
    def safe_mode(self) -> bool:
        return not self.unsafe

    @property
    def architectures(self) -> tuple | None:
        return self.architecture or None


@dataclass(frozen=True)
class InputOptions(Group):
    """How input sets (folders, arrays, dataset names) are read for the model."""

    scale: str = option(
        "--scale",
        cli_type=str,
        cli_default="auto",
        help="auto (uint8 0..255 mapped onto the model's value range, floats kept), 255 (divide by 255) or none.",
    )
    limit: int | None = option("--limit", cli_type=Optional[int], help="Use the first N inputs only.")
    resize: tuple | None = option(
        "--resize",
        parse=_resize,
        help="HxW: resize the images (of image folders, or image arrays such as .npz or a named dataset; PIL bilinear).",
    )
    crop: str | None = option(
        "--crop", help="TOP,BOTTOM,LEFT,RIGHT: pixels cut from each image of an image folder before --resize."
    )
    labels: str | None = option(
        "--labels",
        help="CSV of labels for an image folder: FILE.csv (id and target columns "
        "detected) or FILE.csv:ID_COLUMN,TARGET_COLUMN; ids are the file names, with or "
        "without extension.",
    )
    class_names: tuple | None = option(
        "--class-names",
        parse=_class_names,
        help="Class names in label order (cat,dog or a file with one per line): labels "
        "of image class subfolders not named by integers (default: sorted names).",
    )

    def load_options(self) -> dict:
        """The loading keywords of :func:`idcgen.session.load_inputs`."""
        return {
            "scale": self.scale,
            "resize": self.resize,
            "crop": self.crop,
            "labels": self.labels,
            "class_names": self.class_names,
        }


@dataclass(frozen=True)
class ConventionOptions(Group):
    """The input convention asked for (default: the model's own, or the analysis' recorded one)."""

    value_range: tuple | None = option(
        "--value-range",
        parse=_value_range,
        help="LO,HI: range of the images the model takes (default: 0,255 if it starts "
        "with Rescaling(1/255), else 0,1).",
    )
    preprocess: Any = option(
        "--preprocess",
        parse=_preprocess,
        help="Between image and model: imagenet-caffe, imagenet-torch, tf ([0,255] -> [-1,1]) or mean=M,std=S.",
    )


@dataclass(frozen=True)
class RunnerOptions(Group):
    """Where the work runs: this process, or Ray workers."""

    ray: str | None = option(
        "--ray",
        help="Run on Ray workers: local (start Ray on this machine), auto (the cluster "
        "`ray start` made here) or a cluster address such as ray://HEAD:10001. Needs pip install "
        '"idcgen[ray]".',
    )
    workers: int | None = option(
        "--workers",
        cli_type=Optional[int],
        help="Ray workers (default: one per GPU of the cluster, else one per CPU; one per CPU with --device cpu); "
        "alone it means --ray local.",
    )
    gpus_per_worker: float | None = option(
        "--gpus-per-worker",
        cli_type=Optional[float],
        help=(
            "With --workers: each Ray worker's share of a GPU (0.5: two workers a GPU; default: the cluster's GPUs "
            "spread over the workers); a worker runs its model on its own GPU."
        ),
    )

    @property
    def parallel(self) -> bool:
        return self.ray is not None or self.workers is not None


@dataclass(frozen=True)
class CampaignRunnerOptions(RunnerOptions):
    """Where a fuzz campaign runs: this process, or parallel campaigns on Ray workers (their help says so)."""

    ray: str | None = option(
        "--ray",
        help="With --workers: local (default: start Ray on this machine), auto or a "
        "Ray cluster address such as ray://HEAD:10001.",
    )
    workers: int | None = option(
        "--workers",
        cli_type=Optional[int],
        help=(
            "Run N campaigns in parallel on Ray, each with its own random stream, sharing the inputs that reach new "
            "combinations (as AFL's -M/-S); one sub-folder each in --out, merged view in merged/. Without --analysis "
            "or --train the analysis is found or made first, as for one campaign."
        ),
    )


@dataclass(frozen=True)
class AnalysisOptions(Group):
    """Which analysis: made with these settings, or a saved one that was (None: any, or the default when
    analysing)."""

    layer: str | None = option("--layer", help="Subject layer (default: last hidden layer).")
    m: int | None = option(
        "--m",
        cli_type=Optional[int],
        parse=_positive("m"),
        help="Number of important neurons (default 8); where a saved analysis is looked for, the m it must have.",
    )
    clusters: tuple | None = option(
        "--clusters", parse=_clusters, help="k values tried per neuron, e.g. 2-5 or 2,3,4 (default 2-5)."
    )
    cluster_method: str | None = option(
        "--cluster-method",
        parse=_cluster_method,
        help="silhouette (the paper's, default) or zero-aware (a ReLU's exact zeros "
        "get their own cluster; k chosen on the positive values).",
    )

    #: what an analysis made without the option uses
    DEFAULTS: ClassVar[dict] = {"m": 8, "clusters": (2, 3, 4, 5), "cluster_method": "silhouette"}

    def resolved(self, name: str):
        """The value an analysis is made with: the one given, else the default."""
        value = getattr(self, name)
        return self.DEFAULTS.get(name) if value is None else value


@dataclass(frozen=True)
class CampaignOptions(Group):
    """What a fuzz campaign does (the fuzzer is built from the :class:`~idcgen.fuzz.settings.CampaignSettings`
    these settle into)."""

    seeds: str | None = option("--seeds", help="Seed inputs (folder, .npz, .npy, IDX, dataset name).")
    budget: int | None = option(
        "--budget", cli_type=Optional[int], help="Execs: mutants run through the model (on --resume: the new total)."
    )
    train: str | None = option("--train", help="Analyse on these training inputs first.")
    analysis: Path | None = option("--analysis", cli_type=Optional[Path], help="Reuse a saved analysis.")
    mutators: tuple | None = option(
        "--mutators",
        parse=_mutators,
        help="Comma-separated mutator specs, e.g. 'gauss(std=0.05),rotate,fgsm' (see `idcgen mutators`).",
    )
    oracle: str | None = option(
        "--oracle",
        help=(
            "Default misclassification (deviation for a regression model). For regression: deviation(threshold=T), "
            "error(threshold=T) (needs labels), deeptest(lam=L) (DeepTest's relation, lam x the MSE measured on the "
            "labelled seeds), disagreement(threshold=T). misclassification, prediction-change, disagreement, "
            "uncertain[(P)] or confusion(A,B) (a seed of class A predicted B or the reverse), or several joined by & "
            "and | with ~ for not, e.g. 'misclassification & ~uncertain'."
        ),
    )
    scheduler: str = option(
        "--scheduler",
        cli_type=str,
        cli_default="prioritized",
        parse=_scheduler,
        help="prioritized (DeepHunter) or uniform.",
    )
    max_mutations: int | None = option(
        "--max-mutations",
        cli_type=Optional[int],
        parse=_positive("max_mutations"),
        help="Most times one corpus entry is picked as a parent (default: no cap), so that the effort spreads over "
        "the corpus rather than a few entries; the campaign ends early once every entry has been picked N times.",
    )
    guide: str = option(
        "--guide",
        cli_type=str,
        cli_default="idc",
        help="Which criterion's new coverage admits a mutant to the corpus: "
        f"{', '.join(g for g in guide_names() if g not in ('none', 'keep-none'))}, or none (every valid mutant), "
        "or keep-none (no mutant: the seeds alone are fuzzed). idc grows the test set's IDC most; keep-none finds "
        "as many failures per model call as any guide, and no coverage guide found significantly more distinct "
        "faults (docs/results.md, the fourth guidance study).",
    )
    measure: tuple | None = option(
        "--measure",
        parse=_measure,
        help="Criteria measured besides IDC, e.g. 'nc,kmnc:k=10' (fitted on --train, else on the seeds).",
    )
    no_round: bool = option(
        "--no-round",
        cli_type=bool,
        cli_default=False,
        help="Run mutants unrounded (by default they are rounded to the seeds' uint8 levels, so "
        "every finding reproduces from its PNG).",
    )
    batch_size: int = option(
        "--batch-size", cli_type=int, cli_default=256, parse=_positive("batch_size"), help="Mutants per step."
    )
    no_validity: bool = option(
        "--no-validity", cli_type=bool, cli_default=False, help="Turn DeepHunter's validity bounds off."
    )
    alpha: float = option(
        "--alpha", cli_type=float, cli_default=0.02, help="Validity: share of pixels that may change freely."
    )
    beta: float = option(
        "--beta",
        cli_type=float,
        cli_default=0.2,
        help="Validity: largest change of any pixel otherwise (share of the range).",
    )
    random_state: int = option(
        "--random-state",
        cli_type=int,
        cli_default=0,
        help="Seed of the campaign: the same seed, settings and inputs make the same campaign in one process.",
    )
    image_shape: tuple | None = option(
        "--image-shape",
        parse=_image_shape,
        help="H,W,C of the images to mutate for a model taking flat or channel-less inputs (default: inferred).",
    )
    out: Path | None = option(
        "--out", cli_type=Optional[Path], help="Campaign folder (default outputs/campaigns/<model>_<time>)."
    )
    resume: Path | None = option("--resume", cli_type=Optional[Path], help="Continue the campaign in this folder.")


# ---- one command's own settings ------------------------------------------------------------------------
@dataclass(frozen=True)
class OrderingOptions(Group):
    """``prioritize``: which ordering, and its parameters."""

    by: str | None = option(
        "--by",
        cli_type=str,
        cli_default=...,
        default=None,
        help=orderings_help(),
    )
    layer: str | None = option(
        "--layer", help="Layer of lsa, dsa and mdsa (default: the last hidden layer before the logits)."
    )
    m: int = option(
        "--m", cli_type=int, cli_default=8, help="Important neurons when the IDC orderings analyse --train."
    )
    passes: int = option("--passes", cli_type=int, cli_default=20, help="Forward passes of mc-dropout.")
    tolerance: float | None = option(
        "--tolerance",
        cli_type=Optional[float],
        help=(
            "Regression: an input fails when its absolute error exceeds this (default twice the RMSE over the inputs)."
        ),
    )
    random_state: int = option("--random-state", cli_type=int, cli_default=0, help="Seed of random and mc-dropout.")


def _comma_list(text: str, kind: Callable) -> tuple:
    """``a,b,c`` as a tuple of ``kind`` (empty items dropped)."""
    return tuple(kind(item.strip()) for item in str(text).split(",") if item.strip())


@dataclass(frozen=True)
class HardenOptions(Group):
    """``harden``: how the model is retrained."""

    mode: str = option(
        "--mode", cli_type=str, cli_default="finetune", help="finetune (from the model's weights) or scratch."
    )
    epochs: int = option("--epochs", cli_type=int, cli_default=3, help="Training epochs, the same for every arm.")
    repeats: int = option(
        "--repeats",
        cli_type=int,
        cli_default=1,
        help="Repetitions, each its own fine-tuning seed and baseline draws (mean and 95 % interval).",
    )
    random_state: int = option(
        "--random-state", cli_type=int, cli_default=0, help="Seed of the retraining and the random perturbations."
    )
    pair: str | None = option(
        "--pair",
        help="A,B: also measure the type-1 confusion of classes A and B (e.g. a pair "
        "`idcgen inspect` predicts); lower is better.",
    )
    baselines: tuple[str, ...] = option(
        "--baselines",
        cli_type=str,
        cli_default="random",
        parse=lambda text: _comma_list(text, str),
        help="Equal-size training additions from the same seeds to compare the IDC-kept inputs with, comma-"
        "separated: random (the kept inputs' mutator chains replayed on their seeds, unselected), one-step "
        "(one mutation of each seed), pgd, fgsm (in the L2 ball of the kept inputs' median L2 distance from "
        "their seeds, printed), augment (flips, crops, "
        "affine), clean (nothing added).",
    )
    corruptions: tuple[str, ...] | None = option(
        "--corruptions",
        parse=lambda text: _comma_list(text, str),
        help="Corruptions of the suite, comma-separated (default: all 15 of CIFAR-10-C/ImageNet-C).",
    )
    severities: tuple[int, ...] = option(
        "--severities",
        cli_type=str,
        cli_default="1,2,3,4,5",
        parse=lambda text: _comma_list(text, int),
        help="Corruption severities, comma-separated, in 1..5.",
    )
    pgd_eps: tuple[float, ...] = option(
        "--pgd-eps",
        cli_type=str,
        cli_default="0.1,0.3",
        parse=lambda text: _comma_list(text, float),
        help="Epsilons (fractions of the value range) of the PGD robust accuracy, comma-separated.",
    )
    held_out: Path | None = option(
        "--held-out",
        cli_type=Optional[Path],
        help="A fresh campaign folder on other seeds (same model): accuracy on its findings.",
    )


@dataclass(frozen=True)
class InspectOptions(Group):
    """``inspect`` (DeepInspect): which neurons, when one is active, what to show."""

    layers: str | None = option(
        "--layers", help="Comma-separated layers (default: every hidden layer a neuron criterion uses)."
    )
    threshold: float = option(
        "--threshold",
        cli_type=float,
        cli_default=0.5,
        help="A neuron is active above this, after min-max scaling (DeepInspect: 0.5).",
    )
    scaling: str = option(
        "--scaling",
        cli_type=str,
        cli_default="neuron",
        help=(
            "Min-max scaling per neuron over the inputs (default), per layer over the inputs, or per layer within each "
            "input ('input', as NC)."
        ),
    )
    top: int = option("--top", cli_type=int, cli_default=10, help="Pairs to print, smallest NAPVD first.")
    no_labels: bool = option(
        "--no-labels", cli_type=bool, cli_default=False, help="Ignore the inputs' labels (predictions only)."
    )


@dataclass(frozen=True)
class AffinityOptions(Group):
    """``affinity`` (DeepBase): which units, which hypotheses, which measures."""

    units: str | None = option(
        "--units",
        help=(
            "Unit groups: LAYER (all its neurons) or LAYER:i,j,k, several joined by ';' (default without --analysis: "
            "every neuron of the default layer)."
        ),
    )
    hypotheses: Path | None = option(
        "--hypotheses",
        cli_type=Optional[Path],
        help=(
            "Python file of hypotheses f(x, y) -> array (n,): its HYPOTHESES dict, else its public functions; added to "
            "the built-in ones. The file is executed: trusted code only."
        ),
    )
    no_builtin: bool = option(
        "--no-builtin",
        cli_type=bool,
        cli_default=False,
        help="Leave the built-in hypotheses out (use those of --hypotheses only).",
    )
    masks: bool = option(
        "--masks",
        cli_type=bool,
        cli_default=False,
        help=(
            "Add the built-in per-pixel hypotheses (ink, edges, left half, centre masks): each convolutional channel's "
            "activation map against each mask, by pixel Pearson and IoU (a hypotheses file may return masks (n, H, W) "
            "too)."
        ),
    )
    measures: str = option(
        "--measures",
        cli_type=str,
        cli_default="pearson,spearman,mi,linear",
        help=(
            "Comma-separated: pearson, spearman, mi (mutual information), linear (a group's logistic accuracy or linear "
            "R^2, cross-validated)."
        ),
    )
    tol: float = option(
        "--tol",
        cli_type=float,
        cli_default=0.05,
        help=("Early stopping: a score is final once its 95 % interval is within +-TOL; 0 scores every input."),
    )
    random_state: int = option(
        "--random-state", cli_type=int, cli_default=0, help="Seed of the order the inputs are streamed in."
    )
