"""Exports of a campaign: the grown test set and the retraining set.

Every exported input is also re-checked after rounding to uint8, because a saved image is what users
will reload: DeepXplore users found failures that no longer failed once clipped and rounded. The fuzz
loop leaves this to the export, where all findings take one batched forward pass.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .data import Dataset, check_labels, fit_to_model
from .errors import ParameterError
from .files import atomic_npz, atomic_text, jsonl, remove_temporaries
from .fuzz.campaign import Campaign
from .fuzz.credit import credit_csv, mutator_credit
from .fuzz.oracle import Execution, make_oracle
from .fuzz.store import json_value
from .imageio import quantise, to_png, to_uint8


def export_campaign(
    campaign: Campaign,
    *,
    train_x: np.ndarray | None = None,
    train_y: np.ndarray | None = None,
    out: str | Path | None = None,
    images: bool = True,
    oracle=None,
) -> dict:
    """Write ``grown.npz``, ``grown/`` (PNG per class), ``retrain.npz``, ``findings.jsonl``, ``findings/``
    (each finding beside its seed with the model's outputs drawn on, when ``images``), ``mutators.csv`` and
    ``exports.json``.

    ``mutators.csv`` (and ``exports.json``'s ``mutators``) holds per mutator its kept inputs, the IDC they
    gained, their median L2 and L-inf from their seeds and the gain per unit of median L-inf
    (:func:`idcgen.fuzz.credit.mutator_credit`).

    ``grown.npz`` holds the seeds and kept mutants (``x`` float32 as run, ``x_uint8``, ``y`` = root seed's
    label, ``id``, ``seed``, ``root``, ``prediction``, ``combination``, ``combination_uint8``).
    ``retrain.npz`` holds ``x_train``/``y_train``: the training data (when given: ``train_x`` an array of any
    shape :func:`~idcgen.data.fit_to_model` fits, or a Dataset with its labels) followed by the kept
    mutants labelled with their root seed's label, as uint8-rounded values.
    ``out``: the folder written (default: ``exports/`` in the campaign's folder; a campaign in memory needs it).
    ``findings.jsonl`` is the campaign's findings.jsonl with ``prediction_uint8`` and ``survives_uint8``:
    whether the oracle (the campaign's, or ``oracle``) still flags the finding once rounded to uint8.
    The disagreement oracle needs the other models: without it given, ``survives_uint8`` is null.
    """
    if train_x is not None:  # checked before anything is written
        _training_data(train_x, train_y, campaign.corpus)
    if oracle is None and "disagreement" not in campaign.settings.oracle:
        oracle = make_oracle(campaign.settings.oracle)
    corpus, analysis = campaign.corpus, campaign.analysis
    network = analysis.network
    if out is None and campaign.folder is None:
        raise ParameterError("this campaign is in memory only: give out= (a folder for the exports) or save it first")
    if network is None:  # the export runs every rounded input through the model again
        raise ParameterError("this campaign was read without its model: load it with Campaign.load(folder, model)")
    out = Path(out) if out is not None else campaign.folder / "exports"
    out.mkdir(parents=True, exist_ok=True)
    remove_temporaries(out)  # left by an export killed midway
    vr = campaign.value_range
    x, y = corpus.x, corpus.label
    is_seed = corpus.parent < 0
    xq = quantise(x, vr)
    probs, (acts,) = network.forward(xq, (analysis.layer,))
    combo_q = analysis.combinations.ids(analysis.select(acts))
    pred_q = _predictions(corpus, probs)
    grown = dict(
        x=x,
        x_uint8=to_uint8(x, vr),
        y=y,
        id=np.arange(len(x)),
        seed=is_seed,
        root=corpus.root,
        prediction=corpus.prediction,
        prediction_uint8=pred_q,
        combination=corpus.combination,
        combination_uint8=combo_q,
    )
    atomic_npz(out / "grown.npz", grown, compressed=True)

    if images and corpus.regression:  # no classes to sort by: one folder, the label in the name
        for i in range(len(x)):
            (out / "grown").mkdir(parents=True, exist_ok=True)
            to_png(x[i], vr).save(out / "grown" / f"{'seed' if is_seed[i] else 'mutant'}-{i:06d}.png")
    elif images:
        width = max(1, len(str(max(int(y.max()), 0)))) if len(y) else 1
        for i in range(len(x)):
            folder = out / "grown" / (f"{y[i]:0{width}d}" if y[i] >= 0 else "unlabelled")
            folder.mkdir(parents=True, exist_ok=True)
            to_png(x[i], vr).save(folder / f"{'seed' if is_seed[i] else 'mutant'}-{i:06d}.png")

    mutants = ~is_seed & (~np.isnan(y) if corpus.regression else y >= 0)
    parts_x, parts_y = [quantise(x[mutants], vr)], [y[mutants]]
    if train_x is not None:
        train_x, train_y = _training_data(train_x, train_y, corpus)
        parts_x.insert(0, train_x)
        parts_y.insert(0, train_y)
    retrain = dict(
        x_train=np.concatenate(parts_x),
        y_train=np.concatenate(parts_y),
        from_campaign=np.concatenate(
            [np.zeros(len(p), bool) for p in parts_x[:-1]] + [np.ones(int(mutants.sum()), bool)]
        ),
    )
    atomic_npz(out / "retrain.npz", retrain, compressed=True)

    surviving = _recheck_findings(campaign, out, oracle)
    credit = mutator_credit(campaign)
    atomic_text(out / "mutators.csv", credit_csv(credit))
    if images:
        write_finding_images(campaign, out / "findings")
    summary = {
        "grown": {
            "inputs": int(len(x)),
            "seeds": int(is_seed.sum()),
            "mutants": int((~is_seed).sum()),
            "idc_as_run": campaign.tracker.score,
            "idc_uint8": _tracker(analysis, combo_q).score,
            "mutants_keeping_combination_uint8": int((combo_q == corpus.combination)[~is_seed].sum()),
            # for regression: the output moved by less than 1e-3 when rounded
            "mutants_keeping_prediction_uint8": int(
                (np.abs(pred_q - corpus.prediction) < 1e-3 if corpus.regression else pred_q == corpus.prediction)[
                    ~is_seed
                ].sum()
            ),
        },
        "retrain": {
            "inputs": int(len(retrain["y_train"])),
            "training_inputs": len(parts_x[0]) if len(parts_x) == 2 else 0,
            "mutants": int(mutants.sum()),
            "note": None if len(parts_x) == 2 else "no labelled training data given: the kept mutants only",
        },
        "findings": {"total": campaign.n_findings, "surviving_uint8": surviving},
        "mutators": credit,
        "files": {
            "grown": "grown.npz",
            "grown_images": "grown/" if images else None,
            "retrain": "retrain.npz",
            "findings": "findings.jsonl",
            "finding_images": "findings/" if images else None,
            "mutators": "mutators.csv",
        },
    }
    atomic_text(out / "exports.json", json.dumps(summary, indent=2) + "\n")
    return summary


def _recheck_findings(campaign: Campaign, out: Path, oracle) -> int | None:
    """Write ``findings.jsonl`` with the uint8 re-check of every finding; returns how many survive
    (None: not re-checked)."""
    found = campaign.findings()
    rows = [{k: json_value(v[j]) for k, v in found.items() if k != "x"} for j in range(len(found.get("id", ())))]
    if oracle is None:  # not computed (a disagreement campaign exported without its other models)
        atomic_text(out / "findings.jsonl", jsonl(dict(r, survives_uint8=None) for r in rows))
        return None
    survives = np.zeros(0, bool)
    if rows:
        xq = quantise(found["x"], campaign.value_range)
        probs, _ = campaign.analysis.network.forward(xq)
        predictions = _predictions(campaign.corpus, probs)
        survives = oracle(Execution(xq, probs, predictions, found["label"], found["root_prediction"]))
        for row, p, ok in zip(rows, predictions, survives):
            row.update(prediction_uint8=p.item(), survives_uint8=bool(ok))
    atomic_text(out / "findings.jsonl", jsonl(rows))
    return int(survives.sum())


def write_finding_images(campaign: Campaign, folder: Path) -> int:
    """``finding-NNNNNN.png`` per finding: its root seed and the mutant side by side with the model's outputs
    (steering arrows for a regression model, classes for a classifier; idcgen/annotate.py)."""
    from .annotate import finding_image

    found = campaign.findings()
    if not found:
        return 0
    folder.mkdir(parents=True, exist_ok=True)
    seeds = campaign.corpus.x
    for j in range(len(found["id"])):
        finding_image(
            seeds[found["root"][j]],
            found["x"][j],
            seed_prediction=found["root_prediction"][j],
            prediction=found["prediction"][j],
            label=found["label"][j],
            value_range=campaign.value_range,
            regression=campaign.corpus.regression,
        ).save(folder / f"finding-{int(found['id'][j]):06d}.png", compress_level=1)  # 8x faster than the default 6
    return len(found["id"])


def _training_data(train_x, train_y, corpus) -> tuple[np.ndarray, np.ndarray]:
    """The training data to retrain on, in the corpus' shape: (n, h, w) digits as the campaign's (n, h, w, 1);
    unlabelled training data cannot be retrained on."""
    if isinstance(train_x, Dataset) and train_y is None:
        train_y = train_x.y
    if train_y is None:
        raise ParameterError("train_x needs its labels: pass train_y too (retrain.npz pairs every input with one)")
    x = fit_to_model(train_x, corpus.input_shape)
    return x, check_labels(x, train_y, "regression" if corpus.regression else "classification")


def _predictions(corpus, probs: np.ndarray) -> np.ndarray:
    """Classes, or a regression model's output values."""
    return probs[:, 0].astype(np.float64) if corpus.regression else probs.argmax(1)


def _tracker(analysis, ids):
    tracker = analysis.tracker()
    tracker.update(ids)
    return tracker
