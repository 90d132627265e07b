"""``idcgen harden``: retrain with a campaign's kept inputs and measure robustness (the paper's RQ6).

Three models are compared on the same test set: the original; one retrained on the training data plus
the campaign's kept mutants (IDC-guided); and one retrained on the training data plus as many randomly
perturbed inputs, made from the same root seeds by the same kinds of mutation but not selected by
coverage (the control). Both retrainings get the same training budget (epochs, optimiser, number of
extra inputs). Robustness is the accuracy on perturbed copies of the test set: noise and transforms
(fixed sets, the same for every model) and white-box FGSM/BIM at the paper's settings (per model).
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
from .errors import InputError, ModelError, ParameterError
from .files import atomic_text
from .framework import Network, as_network
from .fuzz.campaign import Campaign
from .fuzz.mutators import MutationContext, make_mutator
from .plots import pyplot

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
        raise ParameterError(f"The 'mode' parameter must be one of {MODES}. Got {mode!r} instead.")
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
            f"The 'pair' parameter must be two different classes in 0..{n_classes - 1}, e.g. 4,9. Got {pair!r} instead."
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
    """How `harden` retrains: ``finetune`` (from the model's weights) or ``scratch``, for ``epochs`` epochs, both
    retrainings ``repeats`` times (mean and std)."""

    mode: str = "finetune"
    epochs: int = 3
    repeats: int = 1

    def checked(self) -> tuple[str, int, int]:
        return self.mode, check_int("epochs", self.epochs, 1), check_int("repeats", self.repeats, 1)


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
    pair=None,
) -> dict:
    """Retrain with IDC-kept inputs and with random perturbations; compare robustness. Returns the summary,
    its ``table`` one row per model (original, IDC-guided, random control).

    ``model``: the classifier ``campaign`` was run on (a framework's model, a model file's path or a Network).
    ``x_train``, ``y_train``: what both retrainings start from, and ``x_test``, ``y_test``: what robustness is
    measured on; arrays of any shape :func:`~idcgen.data.fit_to_model` fits, on the campaign's scale, with one
    class label each (a Dataset with y None brings its own). ``retraining``: how (a `Retraining`; default:
    fine-tune 3 epochs, once). ``random_state``: the retrainings' seed (the caller's numpy, Python and torch
    generators are restored after). ``out``: a folder for harden.md/.csv/.json/.png (None: nothing written).
    ``progress``: a progress bar on stderr. ``pair`` (a, b): also measure the pair's type-1 confusion (e.g. a
    pair ``idcgen inspect`` predicts, after a campaign with the ``confusion(a,b)`` oracle)."""
    mode, epochs, repeats = (retraining or Retraining()).checked()
    network = as_network(model)
    if "trainable" not in network.capabilities:  # an ONNX export: forward only
        raise ModelError(
            "hardening retrains the model, and this one runs forward only (an ONNX export): harden its source "
            "model (.pt2, .keras) and export the hardened copy again"
        )
    pair = None if pair is None else check_pair(pair, network.n_classes)
    if network.fingerprint() != campaign.analysis.fingerprint:
        raise InputError("the campaign was run on another model than the one given to harden")
    x_train, y_train = _labelled(x_train, y_train, campaign, network.n_classes, "training")
    x_test, y_test = _labelled(x_test, y_test, campaign, network.n_classes, "test")
    started = time.perf_counter()
    # Mutations happen where the campaign made them: its value range (a Rescaling model takes 0..255,
    # amounts are fractions of the range) and its image shape; retraining feeds the model its own shape.
    value_range, image_shape = tuple(campaign.value_range), tuple(campaign.corpus.x.shape[1:])
    model_shape = (-1,) + tuple(network.input_shape)
    x_test = x_test.reshape((-1,) + image_shape)
    images = on_images(network, image_shape)
    guided, control = campaign_augmentations(campaign, images, random_state=random_state)
    rng = np.random.default_rng(random_state)
    fixed = {
        name: make_mutator(spec).mutate(x_test, rng, MutationContext(images, y_test, value_range))
        for name, spec in EVALUATIONS.items()
        if spec and not make_mutator(spec).needs_model
    }
    results = {
        "original": [
            robustness(images, x_test, y_test, fixed, random_state=random_state, value_range=value_range, pair=pair)
        ]
    }
    jobs = [
        (name, aug, r) for r in range(repeats) for name, aug in (("IDC-guided", guided), ("random control", control))
    ]
    for name, aug, r in tqdm(jobs, desc="retrain", disable=not progress, leave=False):
        x = np.concatenate([x_train.reshape(model_shape), aug.x.reshape(model_shape)])
        y = np.concatenate([y_train, aug.y])
        trained = _retrained(network, x, y, mode=mode, epochs=epochs, random_state=random_state + r)
        results.setdefault(name, []).append(
            robustness(
                on_images(trained, image_shape),
                x_test,
                y_test,
                fixed,
                random_state=random_state + r,
                value_range=value_range,
                pair=pair,
            )
        )
    table = _table(results)
    summary = {
        "mode": mode,
        "epochs": epochs,
        "repeats": repeats,
        "random_state": random_state,
        "training_inputs": int(len(x_train)),
        "extra_inputs": int(len(guided.y)),
        "guided": guided.source,
        "control": control.source,
        "test_inputs": int(len(x_test)),
        "evaluations": {k: v for k, v in EVALUATIONS.items()},
        "pair": None if pair is None else list(pair),
        "table": table,
        "seconds": round(time.perf_counter() - started, 1),
    }
    if out is not None:
        write_outputs(summary, Path(out))
    return summary


def _table(results: dict) -> list[dict]:
    rows = []
    for model_name, runs in results.items():
        row = {"model": model_name, "runs": len(runs)}
        for name in runs[0]:  # the evaluations, then the pair's confusion if measured
            values = np.array([r[name] for r in runs])
            row[name] = float(values.mean())
            row[name + " std"] = float(values.std(ddof=1)) if len(values) > 1 else 0.0
        rows.append(row)
    return rows


def format_table(summary: dict) -> str:
    names = [k for k in summary["table"][0] if k not in ("model", "runs") and not k.endswith(" std")]
    lines = ["| model | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for row in summary["table"]:
        cells = [f"{100 * row[n]:.2f}" + (f" ± {100 * row[n + ' std']:.2f}" if row["runs"] > 1 else "") for n in names]
        lines.append(f"| {row['model']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_outputs(summary: dict, out: Path) -> None:
    """``harden.md``, ``harden.csv``, ``harden.json`` and ``harden.png`` (grouped bars)."""
    plt = pyplot()

    out.mkdir(parents=True, exist_ok=True)
    md = (
        f"# Hardening: {summary['mode']}, {summary['epochs']} epochs, {summary['repeats']} repetition(s)\n\n"
        f"Accuracy (%) on the test set ({summary['test_inputs']} inputs), clean and perturbed. Retraining data: "
        f"{summary['training_inputs']} training inputs plus {summary['guided']} (IDC-guided) or plus "
        f"{summary['control']} (random control)."
        + (
            f" {pair_name(summary['pair'])}: the pair's type-1 confusion on the clean test set (%, lower is better)."
            if summary.get("pair")
            else ""
        )
        + f"\n\n{format_table(summary)}\n\n![accuracy](harden.png)\n"
    )
    atomic_text(out / "harden.md", md)
    atomic_text(out / "harden.json", json.dumps(summary, indent=2) + "\n")
    with open(out / "harden.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(summary["table"][0]))
        writer.writeheader()
        writer.writerows(summary["table"])
    names = list(EVALUATIONS)
    fig, ax = plt.subplots(figsize=(9, 3.8))
    width = 0.8 / len(summary["table"])
    for i, row in enumerate(summary["table"]):
        pos = np.arange(len(names)) + i * width
        ax.bar(
            pos, [100 * row[n] for n in names], width, yerr=[100 * row[n + " std"] for n in names], label=row["model"]
        )
    ax.set_xticks(np.arange(len(names)) + width * (len(summary["table"]) - 1) / 2, names, rotation=15, fontsize=8)
    ax.set_ylabel("accuracy (%)")
    ax.set_title("Robustness after retraining: IDC-guided vs random perturbations")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "harden.png", dpi=110)
    plt.close(fig)
