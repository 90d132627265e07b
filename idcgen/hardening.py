"""``idcgen harden``: retrain with a campaign's kept inputs and measure robustness (the paper's RQ6).

The original model is compared with copies fine-tuned (or retrained) on the training data plus the campaign's
kept mutants (IDC-guided) and plus equal-size baselines from the same root seeds (docs/design.md, "Hardening:
baselines and the corruption suite"): the same mutator chains replayed without selection (random), one
mutation of each seed (one-step), PGD/FGSM at the kept inputs' median L2, standard augmentation, or nothing
(clean); every arm gets the same training budget, repeated with other seeds on request. Robustness: clean
accuracy, noise and transforms (fixed sets), white-box FGSM/BIM at the paper's settings, a 15-corruption suite
at 5 severities (idcgen.corruptions), PGD robust accuracy, and accuracy on a held-out campaign's findings.
"""

from __future__ import annotations

import csv
import json
import random
import sys
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from .analysis import check_class_labels
from .checks import check_int
from .data import Dataset, fit_to_model
from .errors import InputError, ModelError, Param, ParameterError
from .files import atomic_text
from .framework import Network, as_network
from .fuzz.campaign import Campaign
from .fuzz.mutators import MutationContext, make_mutator
from .plots import pyplot

CORRUPTIONS_ALL = None  # the corruption suite's default: all of idcgen.corruptions.CORRUPTIONS

#: Perturbed test sets: name -> mutator spec (the paper's settings on [0, 1] inputs; amounts are fractions
#: of the campaign's value range, so the same on a model taking 0..255).
EVALUATIONS = {
    "clean": None,
    "gauss (std 0.3)": "gauss(std=0.3)",
    "rotate (±30°)": "rotate(limit=30.0)",
    "shift (±10 %)": "shift(limit=0.1)",
    "brightness (±0.2)": "brightness(limit=0.2)",
    "FGSM (eps 0.3)": "fgsm(eps=0.3)",
    "BIM (eps 0.3)": "bim(eps=0.3, eps_iter=0.05, nb_iter=10)",
}
#: A coverage-directed step has no unguided twin; PGD is the nearest gradient-based perturbation.
CONTROL_SUBSTITUTES = {"directed": "pgd(eps=0.15, eps_iter=0.02, nb_iter=10)"}
MODES = ("finetune", "scratch")


@dataclass(frozen=True)
class Augmentation:
    x: np.ndarray
    y: np.ndarray
    source: str


def _labelled(x, y, campaign: Campaign, n_classes: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """``x`` in the campaign's image shape and scale (checked as its analysis checks inputs), with one class label
    each (a Dataset brings its own): what is retrained on, or measured."""
    if isinstance(x, Dataset) and y is None:
        y = x.y
    if y is None:
        raise InputError(f"the {what} inputs need their labels: pass {'y_train' if what == 'training' else 'y_test'}")
    x = fit_to_model(x, campaign.corpus.input_shape)
    campaign.analysis.check_inputs(x, f"the {what} inputs")
    return x, check_class_labels(x, y, n_classes)


def campaign_augmentations(campaign: Campaign, network: Network, *, random_state: int = 0):
    """The kept mutants (labelled with their root seed's label) and their unguided control twins, in the
    campaign's image shape; ``network`` takes those images (see `on_images`)."""
    c = campaign.corpus
    kept = np.flatnonzero((c.parent >= 0) & (c.label >= 0))
    if not len(kept):
        where = "in memory" if campaign.folder is None else campaign.folder
        raise InputError(f"the campaign ({where}) kept no labelled mutant: nothing to retrain with")
    rng = np.random.default_rng(random_state)
    control = np.empty_like(c.x[kept])
    last = np.array([c.chains[i][-1].split("(")[0] for i in kept])
    for kind in np.unique(last):
        rows = np.flatnonzero(last == kind)
        spec = CONTROL_SUBSTITUTES.get(kind) or c.chains[kept[rows[0]]][-1]
        roots = c.root[kept[rows]]
        ctx = MutationContext(network=network, labels=c.label[roots], value_range=campaign.value_range)
        control[rows] = make_mutator(spec).mutate(c.x[roots], rng, ctx)
    return (
        Augmentation(c.x[kept], c.label[kept], f"{len(kept)} IDC-kept mutants"),
        Augmentation(control, c.label[kept], f"{len(kept)} random perturbations of the same seeds"),
    )


def retrain(
    model, x: np.ndarray, y: np.ndarray, *, mode: str, epochs: int, batch_size: int = 256, random_state: int = 0
):
    """A copy of ``model`` (a framework's model or a Network) fine-tuned (Adam, lr 1e-4) or trained from
    scratch (the paper's Adadelta), as the framework's model."""
    return _retrained(
        as_network(model), x, y, mode=mode, epochs=epochs, batch_size=batch_size, random_state=random_state
    ).model


def _retrained(network: Network, x, y, *, mode: str, epochs: int, batch_size: int = 256, random_state: int = 0):
    if mode not in MODES:
        raise ParameterError(Param("mode"), f" must be one of {MODES}. Got {mode!r} instead.")
    with _callers_random_state():
        return network.retrained(x, y, mode=mode, epochs=epochs, batch_size=batch_size, random_state=random_state)


@contextmanager
def _callers_random_state():
    """Retraining seeds the frameworks' global generators (the only way to a repeatable fit); the caller's
    numpy, Python and torch generators are put back after it, so a notebook's own random draws do not restart
    at harden's random_state. TensorFlow's global seed cannot be read back and stays set."""
    numpy_state, python_state = np.random.get_state(), random.getstate()
    torch = sys.modules.get("torch")
    with ExitStack() as stack:
        if torch is not None:
            cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
            stack.enter_context(torch.random.fork_rng(devices=cuda))
        try:
            yield
        finally:
            np.random.set_state(numpy_state)
            random.setstate(python_state)


def on_images(network: Network, image_shape: tuple) -> Network:
    """``network`` taking images of ``image_shape``: the campaign mutated (h, w, c) images for a model
    taking flat or channel-less inputs (docs/design.md), so the test set is perturbed in that shape and
    reshaped in front of the model."""
    return network.on_images(image_shape)


def pair_name(pair) -> str:
    return f"confusion {pair[0]}-{pair[1]}"


def check_pair(pair, n_classes: int) -> tuple[int, int]:
    """Two different classes of the model, as ints (``--pair A,B``)."""
    try:
        a, b = (int(v) for v in pair)
        ok = 0 <= a < n_classes and 0 <= b < n_classes and a != b and all(float(v) == int(v) for v in pair)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ParameterError(
            Param("pair"), f" must be two different classes in 0..{n_classes - 1}, e.g. 4,9. Got {pair!r} instead."
        )
    return a, b


def robustness(
    network: Network,
    x: np.ndarray,
    y: np.ndarray,
    fixed: dict,
    *,
    random_state: int = 0,
    value_range=(0.0, 1.0),
    pair=None,
) -> dict:
    """Accuracy on the clean and perturbed test sets; attacks are run against this model. With ``pair`` (a, b),
    also DeepInspect's type-1 confusion of the pair on the clean set (docs/design.md, "Confusion and bias
    (DeepInspect)"): the mean of P(predicted b | label a) and P(predicted a | label b), lower is better."""
    out = {}
    for name, spec in EVALUATIONS.items():
        if spec is None:
            xs = x
        elif name in fixed:
            xs = fixed[name]
        else:
            ctx = MutationContext(network=network, labels=y, value_range=value_range)
            xs = make_mutator(spec).mutate(x, np.random.default_rng(random_state), ctx)
        out[name] = float((network.predict(xs) == y).mean())
    if pair is not None:
        from .deepinspect import confusion_matrix, type1_confusion

        matrix = confusion_matrix(y, network.predict(x), network.n_classes)
        out[pair_name(pair)] = float(type1_confusion(matrix)[pair[0], pair[1]])
    return out


@dataclass(frozen=True)
class Retraining:
    """How `harden` retrains: ``finetune`` (from the model's weights) or ``scratch``, for ``epochs`` epochs, every
    arm ``repeats`` times (mean and 95 % interval; each repeat its own fine-tuning seed and baseline draws)."""

    mode: str = "finetune"
    epochs: int = 3
    repeats: int = 1

    def checked(self) -> tuple[str, int, int]:
        return self.mode, check_int("epochs", self.epochs, 1), check_int("repeats", self.repeats, 1)


#: the PGD robust accuracy's epsilons by default (fractions of the value range)
DEFAULT_PGD_EPS = (0.1, 0.3)


@dataclass(frozen=True)
class Assessment:
    """What `harden` measures besides clean accuracy and the perturbed sets: the corruption suite
    (``corruptions``: names, None for all 15, or a `CorruptionSuite` built once on the same test inputs, whose
    severities are its own; ``severities``), PGD robust accuracy at ``pgd_eps`` (fractions of the value range),
    accuracy on the findings of ``held_out`` (a fresh campaign on other seeds with the same model), and, given
    ``pair`` (a, b), the pair's type-1 confusion. ``original``: measure the model before retraining too (row
    ``original``); False leaves that row out, for a caller that measured it already on the same test set."""

    corruptions: object = CORRUPTIONS_ALL
    severities: tuple = (1, 2, 3, 4, 5)
    pgd_eps: tuple = DEFAULT_PGD_EPS
    held_out: Campaign | None = None
    pair: tuple | None = None
    original: bool = True


# ---- baselines: equal-size training additions from the same seeds (issue 47) ---------------------------------
BASELINES = ("random", "one-step", "pgd", "fgsm", "augment", "clean")
DEFAULT_BASELINES = ("random",)
GUIDED = "IDC-guided"
#: PGD of the robust accuracy and of the pgd baseline: 10 steps of eps/4 from a random start in the eps ball.
PGD_STEPS = 10
#: The norm of the pgd and fgsm baselines' ball: L2, its radius the kept inputs' median L2 distance from their
#: seeds (docs/design.md, "Hardening"). A rotation or shift moves some pixels across the whole range, so the
#: kept inputs' median L-inf is often 1 and an L-inf ball of that radius is the whole input space.
ATTACK_NORM = "L2"


def check_baselines(baselines, network: Network | None = None) -> tuple[str, ...]:
    """The baselines' names, checked (known, each once) and, given ``network``, that each can run on it: one
    line naming the baseline otherwise (pgd and fgsm need a classifier's gradients)."""
    names = tuple(
        DEFAULT_BASELINES if baselines is None else ([baselines] if isinstance(baselines, str) else baselines)
    )
    unknown = [b for b in names if b not in BASELINES]
    if unknown or len(set(names)) != len(names):
        raise ParameterError(
            Param("baselines"),
            f" must be distinct names among {', '.join(BASELINES)}. Got {list(names)!r} instead.",
        )
    for name in names:
        if network is not None and name in ("pgd", "fgsm"):
            if getattr(network, "task", "classification") == "regression":
                raise ParameterError(
                    f"the {name} baseline attacks class scores and this model is a regression model (one output "
                    f"unit): leave {name} out of --baselines"
                )
            if "differentiable" not in network.capabilities:
                raise ParameterError(
                    f"the {name} baseline needs the model's gradients, and this model runs forward only"
                )
    return names


def perturbation(x: np.ndarray, seeds: np.ndarray, value_range=(0.0, 1.0)) -> dict:
    """Median L2 and L-inf distance of ``x`` from ``seeds`` (row by row), as fractions of the value range."""
    if not len(x):
        return {"median_l2": 0.0, "median_linf": 0.0}
    span = float(value_range[1]) - float(value_range[0])
    diff = (np.asarray(x, np.float64) - np.asarray(seeds, np.float64)).reshape(len(x), -1) / span
    return {
        "median_l2": float(np.median(np.sqrt((diff**2).sum(axis=1)))),
        "median_linf": float(np.median(np.abs(diff).max(axis=1))),
    }


def _kept(campaign: Campaign) -> np.ndarray:
    c = campaign.corpus
    kept = np.flatnonzero((c.parent >= 0) & (c.label >= 0))
    if not len(kept):
        where = "in memory" if campaign.folder is None else campaign.folder
        raise InputError(f"the campaign ({where}) kept no labelled mutant: nothing to retrain with")
    return kept


#: how many times the random baseline redraws a step whose result falls outside the campaign's validity bounds
REDRAWS = 20


def replay_chains(campaign: Campaign, network: Network, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """The ``random`` baseline: each kept mutant's whole mutator chain applied afresh to its root seed, in order,
    with new random draws and no coverage selection, so that chain length and kinds of mutation match the kept
    set's. Each step is made as the campaign made it (rounded to the seeds' 8-bit levels if the campaign rounds,
    an affine step moving the reference, a scene change becoming it) and held to the campaign's validity bounds
    as the kept inputs were: a draw outside them is redrawn (up to ``REDRAWS`` times; the second value returned
    counts the rows still outside after that, kept as drawn). A coverage-directed step has no unguided twin:
    PGD stands in (``CONTROL_SUBSTITUTES``)."""
    from .fuzz.validity import Validity
    from .imageio import quantise

    c, kept = campaign.corpus, _kept(campaign)
    roots = c.root[kept]
    x, reference = c.x[roots].copy(), c.x[roots].copy()
    chains = [c.chains[i] for i in kept]
    labels = c.label[roots]
    v = campaign.settings.validity
    validity = Validity(alpha=v.alpha, beta=v.beta, enabled=v.enabled, value_range=campaign.value_range)
    outside = np.zeros(len(kept), bool)
    for position in range(max(len(chain) for chain in chains)):
        specs = np.array([chain[position] if position < len(chain) else "" for chain in chains])
        for spec in sorted(set(specs.tolist()) - {""}):
            rows = np.flatnonzero(specs == spec)
            mutator = make_mutator(CONTROL_SUBSTITUTES.get(spec.split("(")[0], spec))
            new, new_ref = x[rows].copy(), reference[rows].copy()
            todo = np.arange(len(rows))
            for _ in range(REDRAWS + 1):
                ctx = MutationContext(network=network, labels=labels[rows[todo]], value_range=campaign.value_range)
                if mutator.affine:  # the reference moves with the same transform (DeepHunter)
                    drawn, moved = mutator.mutate_with_reference(x[rows[todo]], reference[rows[todo]], rng, ctx)
                else:
                    drawn, moved = mutator.mutate(x[rows[todo]], rng, ctx), reference[rows[todo]]
                if campaign.settings.rounding:
                    drawn = quantise(drawn, campaign.value_range)
                new[todo], new_ref[todo] = drawn, moved
                todo = todo[~validity.check(drawn, moved, mutator)]
                if not len(todo):
                    break
            outside[rows[todo]] = True
            x[rows] = new
            reference[rows] = new if mutator.moves_reference and not mutator.affine else new_ref
    return x, int(outside.sum())


def attack_recipe(name: str, eps: float) -> str:
    if name == "fgsm":
        return f"FGSM, L2 eps {eps:.4g} (of the value range), one step along the gradient"
    return f"PGD, L2 eps {eps:.4g} (of the value range), {PGD_STEPS} steps of eps/4 from a random start in the ball"


def l2_ball(shape: tuple, radius: float, rng: np.random.Generator) -> np.ndarray:
    """Points drawn uniformly from the L2 ball of ``radius`` in R^d, one per row of ``shape`` (cleverhans'
    ``random_lp_vector`` for ord 2, drawn from ``rng``): a uniform direction scaled by radius * U^(1/d)."""
    n, d = shape[0], int(np.prod(shape[1:]))
    direction = rng.standard_normal((n, d))
    direction /= np.maximum(np.linalg.norm(direction, axis=1, keepdims=True), 1e-12)
    scale = radius * rng.uniform(0, 1, size=(n, 1)) ** (1.0 / d)
    return (direction * scale).reshape(shape)


def l2_attack(name: str, x, labels, network: Network, rng: np.random.Generator, eps: float, value_range):
    """cleverhans' FGSM (one step of L2 length eps along the gradient) or PGD (``PGD_STEPS`` such steps of eps/4,
    each projected onto the L2 ball of radius eps around the input and the value range, from a start drawn
    uniformly in the ball) on the model's logits, away from ``labels``; ``eps`` a fraction of the value range."""
    lo, hi = (float(v) for v in value_range)
    radius = eps * (hi - lo)
    y = np.asarray(labels).astype(np.int32)
    if name == "fgsm":
        return network.attack("fgsm", x, y, eps=radius, clip=(lo, hi), norm=2)
    start = np.clip(x + l2_ball(x.shape, radius, rng).astype(x.dtype), lo, hi).astype(x.dtype)
    return network.attack(
        "pgd", x, y, start=start, eps=radius, eps_iter=radius / 4, nb_iter=PGD_STEPS, clip=(lo, hi), norm=2
    )


def augment_seeds(x: np.ndarray, rng: np.random.Generator, value_range=(0.0, 1.0)) -> np.ndarray:
    """The ``augment`` baseline: standard augmentation (albumentations): a horizontal flip (p 0.5), a random
    crop of 80-100 % of the area resized back, and an affine map (rotation ±15°, translation ±10 %, scale
    0.9-1.1), each image drawn anew."""
    import albumentations as A

    lo, hi = (float(v) for v in value_range)
    h, w = x.shape[1:3]
    pipeline = A.Compose(
        [
            A.HorizontalFlip(p=0.5),
            A.RandomResizedCrop(size=(h, w), scale=(0.8, 1.0), ratio=(0.9, 1.1), p=1.0),
            A.Affine(rotate=(-15, 15), translate_percent=(-0.1, 0.1), scale=(0.9, 1.1), p=1.0),
        ],
        seed=int(rng.integers(2**31)),
    )
    unit = ((x - lo) / (hi - lo)).astype(np.float32)
    out = np.stack([pipeline(image=image)["image"].reshape(image.shape) for image in unit])
    return (lo + np.clip(out, 0, 1) * (hi - lo)).astype(x.dtype)


def baseline_additions(
    name: str, campaign: Campaign, network: Network, rng: np.random.Generator, eps: float
) -> tuple[np.ndarray, np.ndarray, str]:
    """One baseline's additions (x, labels, the spec or recipe used): as many as the campaign's kept inputs,
    from the same root seeds (each kept input's own), labelled with the seed's label; ``clean`` adds none.
    ``eps``: pgd's and fgsm's L2 budget (``ATTACK_NORM``), a fraction of the value range (the L2 norm of the
    change divided by the range's width)."""
    c, kept = campaign.corpus, _kept(campaign)
    roots = c.root[kept]
    labels = c.label[roots]
    if name == "clean":
        return c.x[:0], labels[:0], "nothing added"
    if name == "random":
        x, outside = replay_chains(campaign, network, rng)
        note = f" ({outside} outside the validity bounds after {REDRAWS} redraws)" if outside else ""
        return x, labels, f"the kept inputs' mutator chains replayed on their seeds, within the validity bounds{note}"
    if name == "one-step":
        _, control = campaign_augmentations(campaign, network, random_state=int(rng.integers(2**31)))
        return control.x, control.y, "the last mutation of each chain, once, on the seed"
    if name in ("pgd", "fgsm"):
        return (
            l2_attack(name, c.x[roots], labels, network, rng, eps, campaign.value_range),
            labels,
            attack_recipe(name, eps),
        )
    if name == "augment":
        return augment_seeds(c.x[roots], rng, campaign.value_range), labels, "flip, resized crop, affine"
    raise ParameterError(f"unknown baseline {name!r}")


# ---- robustness measures --------------------------------------------------------------------------------------
class CorruptionSuite:
    """The test set under each corruption and severity, built once (8-bit, as the published sets) and measured on
    every model; see :mod:`idcgen.corruptions`."""

    def __init__(self, x, names, severities, *, value_range, random_state=0, progress=False):
        from .corruptions import CORRUPTIONS, SEVERITIES, available, corrupt

        self.names, self.notes = available(CORRUPTIONS if names is None else names)
        self.severities = tuple(int(s) for s in severities)
        if not self.severities or any(s not in SEVERITIES for s in self.severities):
            raise ParameterError(Param("severities"), f" must be in 1..5. Got {list(severities)!r} instead.")
        self.lo, self.hi = (float(v) for v in value_range)
        self.size = len(x)
        self.codes = {}
        jobs = [(n, s) for n in self.names for s in self.severities]
        for n, s in tqdm(jobs, desc="corruptions", disable=not progress, leave=False):
            unit = (corrupt(x, n, s, random_state=random_state, value_range=value_range) - self.lo) / (
                self.hi - self.lo
            )
            self.codes[n, s] = np.round(unit * 255).astype(np.uint8)

    def images(self, name, severity) -> np.ndarray:
        return (self.lo + self.codes[name, severity].astype(np.float32) / 255 * (self.hi - self.lo)).astype(np.float32)

    def accuracy(self, network: Network, y: np.ndarray) -> dict:
        """``corruption mean`` (over corruptions and severities) and ``corruption: NAME`` (over severities)."""
        per = {
            n: float(np.mean([(network.predict(self.images(n, s)) == y).mean() for s in self.severities]))
            for n in self.names
        }
        out = {"corruption mean": float(np.mean(list(per.values()))) if per else float("nan")}
        out.update({f"corruption: {n}": v for n, v in per.items()})
        return out


def pgd_accuracy(network: Network, x, y, eps_list, *, value_range, random_state=0) -> dict:
    out = {}
    for eps in eps_list:
        spec = f"pgd(eps={eps:.6g}, eps_iter={eps / 4:.6g}, nb_iter={PGD_STEPS})"
        ctx = MutationContext(network=network, labels=y, value_range=value_range)
        xs = make_mutator(spec).mutate(x, np.random.default_rng(random_state), ctx)
        out[f"PGD eps {eps:g}"] = float((network.predict(xs) == y).mean())
    return out


def _interval(values) -> tuple[float, float]:
    """Mean and half-width of the two-sided 95 % t interval (0 for one value)."""
    from scipy import stats

    values = np.asarray(values, np.float64)
    if len(values) < 2:
        return float(values.mean()), 0.0
    half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    return float(values.mean()), float(half)


def harden(
    model,
    x_train: np.ndarray,
    y_train: np.ndarray,
    campaign: Campaign,
    x_test: np.ndarray,
    y_test: np.ndarray,
    *,
    retraining: Retraining | None = None,
    random_state: int = 0,
    out: str | Path | None = None,
    progress: bool = True,
    baselines=None,
    assessment: Assessment | None = None,
) -> dict:
    """Retrain with the IDC-kept inputs and with equal-size baselines from the same seeds; compare robustness.
    Returns the summary: ``rows`` one per (arm, repeat) with every measure, ``table`` the means with 95 %
    intervals, ``differences`` IDC-guided minus each baseline (paired by repeat), ``additions`` each arm's
    training additions (size, median L2 and L-inf from their seeds).

    ``model``: the classifier ``campaign`` was run on (a framework's model, a model file's path or a Network).
    ``x_train``, ``y_train``: what every retraining starts from, and ``x_test``, ``y_test``: what robustness is
    measured on; arrays of any shape :func:`~idcgen.data.fit_to_model` fits, on the campaign's scale, with one
    class label each (a Dataset with y None brings its own). ``retraining``: how (a `Retraining`; default:
    fine-tune 3 epochs, once). ``random_state``: the seed of repeat 0 (repeat r uses random_state + r for its
    fine-tuning and its baselines' draws; the caller's numpy, Python and torch generators are restored after).
    ``baselines``: names among ``BASELINES`` (default ``("random",)``). ``assessment``: what robustness is
    measured by besides clean accuracy (an `Assessment`; default: all 15 corruptions at severities 1-5, PGD at
    0.1 and 0.3, no held-out campaign, no pair); a `CorruptionSuite` in it lets many calls share one.
    ``out``: a folder for harden.md/.csv/.json/.png and hardening.csv (None: nothing written). ``progress``:
    progress bars on stderr."""
    mode, epochs, repeats = (retraining or Retraining()).checked()
    measured = assessment or Assessment()
    corruptions, severities, held_out = measured.corruptions, measured.severities, measured.held_out
    pgd_eps, pair = measured.pgd_eps, measured.pair
    network = as_network(model)
    if "trainable" not in network.capabilities:  # an ONNX export: forward only
        raise ModelError(
            "hardening retrains the model, and this one runs forward only (an ONNX export): harden its source "
            "model (.pt2, .keras) and export the hardened copy again"
        )
    names = check_baselines(baselines, network)
    pgd_eps = tuple(float(e) for e in pgd_eps)
    if any(not 0 < e <= 1 for e in pgd_eps):
        raise ParameterError(Param("pgd_eps"), f" must be in (0, 1] (fractions of the value range). Got {pgd_eps}")
    pair = None if pair is None else check_pair(pair, network.n_classes)
    if not campaign.analysis.made_for(network):
        raise InputError("the campaign was run on another model than the one given to harden")
    if held_out is not None and held_out.analysis.fingerprint != campaign.analysis.fingerprint:
        raise InputError("the held-out campaign was run on another model than the one given to harden")
    x_train, y_train = _labelled(x_train, y_train, campaign, network.n_classes, "training")
    x_test, y_test = _labelled(x_test, y_test, campaign, network.n_classes, "test")
    started = time.perf_counter()
    # Mutations happen where the campaign made them: its value range (a Rescaling model takes 0..255,
    # amounts are fractions of the range) and its image shape; retraining feeds the model its own shape.
    value_range, image_shape = tuple(campaign.value_range), tuple(campaign.corpus.x.shape[1:])
    model_shape = (-1,) + tuple(network.input_shape)
    x_test = x_test.reshape((-1,) + image_shape)
    images = on_images(network, image_shape)
    c, kept = campaign.corpus, _kept(campaign)
    guided = Augmentation(c.x[kept], c.label[kept], f"{len(kept)} IDC-kept mutants")
    guided_size = perturbation(guided.x, c.x[c.root[kept]], value_range)
    eps = guided_size["median_l2"]  # pgd's and fgsm's L2 radius (ATTACK_NORM)
    attacks = bool({"pgd", "fgsm"} & set(names))
    if eps <= 0 and attacks:
        raise InputError("the kept inputs do not differ from their seeds (median L2 0): no epsilon for pgd/fgsm")
    rng = np.random.default_rng(random_state)
    fixed = {
        name: make_mutator(spec).mutate(x_test, rng, MutationContext(images, y_test, value_range))
        for name, spec in EVALUATIONS.items()
        if spec and not make_mutator(spec).needs_model
    }
    if isinstance(corruptions, CorruptionSuite):  # built once by the caller on this x_test, measured again here
        if corruptions.size != len(x_test):
            raise InputError(
                f"the corruption suite was built on {corruptions.size} inputs, the test set has {len(x_test)}"
            )
        suite = corruptions
    else:
        suite = CorruptionSuite(
            x_test, corruptions, severities, value_range=value_range, random_state=random_state, progress=progress
        )
    held = held_out.findings() if held_out is not None else {}
    if held_out is not None and not held:
        raise InputError(f"the held-out campaign ({held_out.folder}) has no findings to measure")

    def measure(net: Network, r: int) -> dict:
        found = robustness(
            net, x_test, y_test, fixed, random_state=random_state + r, value_range=value_range, pair=pair
        )
        found.update(suite.accuracy(net, y_test))
        found.update(pgd_accuracy(net, x_test, y_test, pgd_eps, value_range=value_range, random_state=random_state + r))
        if held:
            found["held-out findings"] = float((net.predict(held["x"]) == held["label"]).mean())
        return found

    rows = []
    if measured.original:
        rows.append(
            {
                "arm": "original",
                "repeat": 0,
                "seed": random_state,
                "extra_inputs": 0,
                **_no_size(),
                **_attack_budget("original", eps),
                **measure(images, 0),
            }
        )
    jobs = [(r, arm) for r in range(repeats) for arm in (GUIDED,) + names]
    additions: dict = {}
    for r, arm in tqdm(jobs, desc="retrain", disable=not progress, leave=False):
        seed = random_state + r
        if arm == GUIDED:
            x_add, y_add, recipe, size = guided.x, guided.y, "kept by the campaign", guided_size
        else:
            x_add, y_add, recipe = baseline_additions(arm, campaign, images, np.random.default_rng([seed, 47]), eps)
            size = perturbation(x_add, c.x[c.root[kept]][: len(x_add)], value_range)
        additions.setdefault(arm, {"inputs": int(len(y_add)), "how": recipe, "median_l2": [], "median_linf": []})
        additions[arm]["median_l2"].append(size["median_l2"])
        additions[arm]["median_linf"].append(size["median_linf"])
        x = np.concatenate([x_train.reshape(model_shape), x_add.reshape(model_shape)])
        y = np.concatenate([y_train, y_add])
        trained = _retrained(network, x, y, mode=mode, epochs=epochs, random_state=seed)
        found = measure(on_images(trained, image_shape), r)
        budget = _attack_budget(arm, eps)
        rows.append({"arm": arm, "repeat": r, "seed": seed, "extra_inputs": int(len(y_add)), **size, **budget, **found})
    for entry in additions.values():
        for key in ("median_l2", "median_linf"):
            entry[key] = float(np.mean(entry[key]))
    table, differences = _table(rows), _differences(rows, names)
    summary = {
        "mode": mode,
        "epochs": epochs,
        "repeats": repeats,
        "random_state": random_state,
        "training_inputs": int(len(x_train)),
        "extra_inputs": int(len(guided.y)),
        "guided": guided.source,
        "baselines": list(names),
        "attack_eps": eps if attacks else None,
        "attack_norm": ATTACK_NORM if attacks else None,
        "additions": additions,
        "test_inputs": int(len(x_test)),
        "evaluations": {k: v for k, v in EVALUATIONS.items()},
        "corruptions": suite.names,
        "severities": list(suite.severities),
        "pgd_eps": list(pgd_eps),
        "held_out_findings": int(len(held["x"])) if held else None,
        "notes": suite.notes,
        "pair": None if pair is None else list(pair),
        "rows": rows,
        "table": table,
        "differences": differences,
        "seconds": round(time.perf_counter() - started, 1),
    }
    if out is not None:
        write_outputs(summary, Path(out))
    return summary


def _no_size() -> dict:
    return {"median_l2": 0.0, "median_linf": 0.0}


def _attack_budget(arm: str, eps: float) -> dict:
    """The attack's budget in a pgd or fgsm row (its eps, a fraction of the value range, and its norm); empty
    cells in the other rows."""
    attack = arm in ("pgd", "fgsm")
    return {"attack_eps": eps if attack else None, "attack_norm": ATTACK_NORM if attack else None}


ROW_KEYS = ("arm", "repeat", "seed", "extra_inputs", "median_l2", "median_linf", "attack_eps", "attack_norm")


def measures(rows: list[dict]) -> list[str]:
    """The measured columns of the rows (accuracies, and the pair's confusion if measured), in order."""
    return [k for k in rows[0] if k not in ROW_KEYS]


def _table(rows: list[dict]) -> list[dict]:
    """One row per arm: each measure's mean over repeats and its 95 % interval's half-width (``NAME ci95``)."""
    table = []
    for arm in dict.fromkeys(r["arm"] for r in rows):
        runs = [r for r in rows if r["arm"] == arm]
        row = {"model": arm, "runs": len(runs)}
        for name in measures(rows):
            row[name], row[name + " ci95"] = _interval([r[name] for r in runs])
        table.append(row)
    return table


def _differences(rows: list[dict], baselines) -> list[dict]:
    """IDC-guided minus each baseline, paired by repeat (the same fine-tuning seed): mean and 95 % interval."""
    guided = {r["repeat"]: r for r in rows if r["arm"] == GUIDED}
    out = []
    for name in baselines:
        other = {r["repeat"]: r for r in rows if r["arm"] == name}
        row = {"baseline": name, "runs": len(other)}
        for measure in measures(rows):
            row[measure], row[measure + " ci95"] = _interval([guided[k][measure] - other[k][measure] for k in other])
        out.append(row)
    return out


def headline(summary: dict) -> list[str]:
    """The measures shown in the main table: all but the per-corruption ones."""
    return [m for m in measures(summary["rows"]) if not m.startswith("corruption: ")]


def format_table(summary: dict, names=None) -> str:
    """Means (%) per arm, ± the 95 % interval's half-width when repeated."""
    names = names or headline(summary)
    lines = ["| model | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for row in summary["table"]:
        cells = [f"{100 * row[n]:.2f}" + (f" ± {100 * row[n + ' ci95']:.2f}" if row["runs"] > 1 else "") for n in names]
        lines.append(f"| {row['model']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_differences(summary: dict, names=None) -> str:
    """IDC-guided minus each baseline (percentage points), paired by repeat."""
    names = names or headline(summary)
    lines = ["| IDC-guided minus | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for row in summary["differences"]:
        cells = [
            f"{100 * row[n]:+.2f}" + (f" ± {100 * row[n + ' ci95']:.2f}" if row["runs"] > 1 else "") for n in names
        ]
        lines.append(f"| {row['baseline']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_lines(summary: dict, out=None) -> list[str]:
    """What ``idcgen harden`` prints of a :func:`harden` summary: notes, the attacks' budget, the table and the
    differences; ``out``: where it was written."""
    lines = [f"note: {note}" for note in summary["notes"]]
    if summary["attack_eps"] is not None:
        lines.append(
            f"pgd and fgsm additions at {summary['attack_norm']} eps {summary['attack_eps']:.4g} of the value range "
            "(the kept inputs' median L2 distance from their seeds)"
        )
    lines += [
        format_table(summary),
        "IDC-guided minus each baseline (points, paired by repeat):",
        format_differences(summary),
    ]
    if out is not None:
        lines.append(
            f"written to {out}/ (harden.md, harden.csv, hardening.csv, harden.json, harden.png) in {summary['seconds']} s"
        )
    return lines


def format_additions(summary: dict) -> str:
    lines = ["| arm | inputs added | median L2 | median L-inf | how |", "|---|---|---|---|---|"]
    for arm, a in summary["additions"].items():
        lines.append(f"| {arm} | {a['inputs']} | {a['median_l2']:.3f} | {a['median_linf']:.3f} | {a['how']} |")
    return "\n".join(lines)


def write_outputs(summary: dict, out: Path) -> None:
    """``harden.md``, ``harden.csv`` (the means), ``hardening.csv`` (one row per arm and repeat), ``harden.json``
    and ``harden.png`` (grouped bars with 95 % intervals)."""
    plt = pyplot()

    out.mkdir(parents=True, exist_ok=True)
    per_corruption = [m for m in measures(summary["rows"]) if m.startswith("corruption: ")]
    eps = summary.get("attack_eps")
    md = (
        f"# Hardening: {summary['mode']}, {summary['epochs']} epochs, {summary['repeats']} repetition(s)\n\n"
        f"Accuracy (%) on the test set ({summary['test_inputs']} inputs), clean and perturbed; mean ± half-width "
        f"of the 95 % interval over repetitions (t), each repetition its own fine-tuning seed and baseline draws. "
        f"Retraining data: {summary['training_inputs']} training inputs plus {summary['guided']} (IDC-guided) or "
        f"plus as many from the same seeds (baselines: {', '.join(summary['baselines']) or 'none'})."
        + (
            f" pgd and fgsm additions at {summary['attack_norm']} eps {eps:.4g} of the value range (the kept "
            "inputs' median L2 distance from their seeds)."
            if eps is not None
            else ""
        )
        + f" Corruption suite: {len(summary['corruptions'])} corruptions of CIFAR-10-C/ImageNet-C, severities "
        + ", ".join(map(str, summary["severities"]))
        + f"; PGD: {PGD_STEPS} steps of eps/4 from a random start."
        + (f" Held-out findings: {summary['held_out_findings']}." if summary.get("held_out_findings") else "")
        + "".join(f" Note: {n}." for n in summary.get("notes", []))
        + (
            f" {pair_name(summary['pair'])}: the pair's type-1 confusion on the clean test set (%, lower is better)."
            if summary.get("pair")
            else ""
        )
        + f"\n\n{format_table(summary)}\n\n"
        + (f"IDC-guided minus each baseline (points; paired by repetition):\n\n{format_differences(summary)}\n\n")
        + f"Training additions (distances from their seeds, fractions of the value range):\n\n{format_additions(summary)}\n\n"
        + (
            f"Per corruption (mean over severities):\n\n{format_table(summary, per_corruption)}\n\n"
            if per_corruption
            else ""
        )
        + "![accuracy](harden.png)\n"
    )
    atomic_text(out / "harden.md", md)
    atomic_text(out / "harden.json", json.dumps(summary, indent=2) + "\n")
    for name, rows in (("harden.csv", summary["table"]), ("hardening.csv", summary["rows"])):
        with open(out / name, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    names = headline(summary)
    fig, ax = plt.subplots(figsize=(max(9, 0.9 * len(names)), 3.8))
    width = 0.8 / len(summary["table"])
    for i, row in enumerate(summary["table"]):
        pos = np.arange(len(names)) + i * width
        ax.bar(
            pos, [100 * row[n] for n in names], width, yerr=[100 * row[n + " ci95"] for n in names], label=row["model"]
        )
    ax.set_xticks(np.arange(len(names)) + width * (len(summary["table"]) - 1) / 2, names, rotation=20, fontsize=7)
    ax.set_ylabel("accuracy (%)")
    ax.set_title("Robustness after retraining: IDC-guided inputs against equal-size baselines (95 % intervals)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "harden.png", dpi=110)
    plt.close(fig)
