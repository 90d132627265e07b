"""Choose Dave-2's training settings inside the training blocks, never on the test blocks.

    python recipes/udacity_validate.py --cv --photometric [--huber 0.1] [--shift 8 --shift-angle 0.01] [--epochs 6] --tag NAME
    python recipes/udacity_validate.py --models dave2 [--epochs 6] [--lr 1e-4] [--photometric] [--block 4] [--tag NAME]

``--cv``: blocked cross-validation, 4 folds of two training blocks each (FOLDS), 20 frames left out on each
side; per epoch the pooled held-out MSE (also after calibrating each fold with the line of the other three),
the correlation, the spread and the calibration line ``angle ~ a * prediction + b`` that ``train_models.py``
folds into the output layer. Appends to ``outputs/udacity_validate/cv.jsonl``; the fold predictions are
cached per tag. About 10-12 minutes per setting on 2 shared cores.

Without ``--cv``: block 4 of the drive's 10 (561 frames, 20 frames left out on each side) validates; the
other training frames (3,811) train; the test blocks are logged beside it for the record only. Appends to
``outputs/udacity_validate/log.jsonl``.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from kit import OUTPUTS, UDACITY_MODELS, Timer, udacity
from kit.data import BLOCKS, GAP, TEST_BLOCKS, blocked_split, read_angles
from kit.stats import calibration, steering_scores
from kit.training import augment, build, keras_epoch, train_epochs

VALIDATION_BLOCK = 4


def validation_split(n_drive: int, train_positions: np.ndarray, block: int = VALIDATION_BLOCK, gap: int = GAP):
    """(fit, validation) index arrays into the training frames (drive positions ``train_positions``):
    ``block`` (1-based, one of ``BLOCKS`` equal blocks of the drive) validates, ``gap`` frames on each side
    of it are in neither set."""
    if block in TEST_BLOCKS:
        raise ValueError(f"block {block} is a test block")
    start, stop = (block - 1) * n_drive // BLOCKS, block * n_drive // BLOCKS
    validation = (train_positions >= start) & (train_positions < stop)
    near = (train_positions >= start - gap) & (train_positions < stop + gap)
    return np.flatnonzero(~near), np.flatnonzero(validation)


def run(
    name: str, settings: dict, *, epochs: int, random_state: int = 0, tag: str = "", block: int = VALIDATION_BLOCK
) -> list[dict]:
    x_train, y_train = udacity("train")
    x_test, y_test = udacity("test")
    train_positions, _ = blocked_split(len(read_angles()[1]))
    fit_idx, val_idx = validation_split(len(read_angles()[1]), train_positions, block)
    x_fit, y_fit, x_val, y_val = x_train[fit_idx], y_train[fit_idx], x_train[val_idx], y_train[val_idx]
    rng = np.random.default_rng(random_state)
    model = build(name, x_train.shape[1:], settings, random_state)
    val_base = float(np.mean((y_val - y_fit.mean()) ** 2))
    test_base = float(np.mean((y_test - y_fit.mean()) ** 2))
    path = OUTPUTS / "udacity_validate" / "log.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)

    def score() -> dict:
        p_val = model.predict(x_val, batch_size=256, verbose=0)[:, 0]
        p_test = model.predict(x_test, batch_size=256, verbose=0)[:, 0]
        a, b = calibration(p_val, y_val)
        return {
            "tag": tag,
            "block": block,
            **settings,
            **steering_scores(p_val, y_val, val_base, "val"),
            "val a": round(a, 3),
            "val b": round(b, 4),
            **steering_scores(p_test, y_test, test_base, "test"),
            **steering_scores(a * p_test + b, y_test, test_base, "test calibrated"),
        }

    def log(row: dict) -> None:  # each epoch's row as it ends: a stopped run keeps its epochs
        with open(path, "a") as handle:
            handle.write(json.dumps(row) + "\n")

    return train_epochs(name, epochs, frames_epoch(model, x_fit, y_fit, rng, settings), score, after_epoch=log)


def frames_epoch(model, x, y, rng, settings: dict):
    """One epoch of augmented frames (kit.training.augment with ``settings``) at a time, as train_models.py trains."""
    return keras_epoch(model, x, y, settings.get("batch_size", 32), lambda xs, ys, r: augment(xs, ys, r, settings), rng)


#: blocked cross-validation: the 8 training blocks in 4 folds of 2 (one curvy and one straighter each)
FOLDS = ((1, 6), (3, 8), (4, 9), (5, 10))


def fold_split(n_drive: int, train_positions: np.ndarray, blocks, gap: int = GAP):
    """(fit, held out) index arrays into the training frames: ``blocks`` held out, ``gap`` frames on each
    side of each left out of both."""
    held, near = np.zeros(len(train_positions), bool), np.zeros(len(train_positions), bool)
    for block in blocks:
        if block in TEST_BLOCKS:
            raise ValueError(f"block {block} is a test block")
        start, stop = (block - 1) * n_drive // BLOCKS, block * n_drive // BLOCKS
        held |= (train_positions >= start) & (train_positions < stop)
        near |= (train_positions >= start - gap) & (train_positions < stop + gap)
    return np.flatnonzero(~near), np.flatnonzero(held)


def train_fold(name: str, x, y, fit_idx, held_idx, settings: dict, *, epochs: int, random_state: int = 0) -> np.ndarray:
    """Held-out predictions (epochs, len(held_idx)) of a model trained on ``fit_idx`` as train_models.py does."""
    rng = np.random.default_rng(random_state)
    model = build(name, x.shape[1:], settings, random_state)
    out = []

    def score() -> dict:
        out.append(model.predict(x[held_idx], batch_size=256, verbose=0)[:, 0])
        return {"held-out MSE": round(float(np.mean((out[-1] - y[held_idx]) ** 2)), 4)}

    train_epochs(f"{name} fold", epochs, frames_epoch(model, x[fit_idx], y[fit_idx], rng, settings), score)
    return np.array(out)


def cross_validate(name: str, settings: dict, *, epochs: int, tag: str) -> list[dict]:
    """Blocked cross-validation over the training blocks (FOLDS): per epoch, the pooled held-out MSE as a
    multiple of the training mean's, the correlation, the spread, the calibration line fitted on all held-out
    predictions, and the held-out MSE after calibrating each fold with the line fitted on the other folds.
    Each fold's predictions are cached by ``tag`` (``outputs/udacity_validate/cv_<name>_<tag>_fold<k>.npz``)."""
    x, y = udacity("train")
    n_drive = len(read_angles()[1])
    positions, _ = blocked_split(n_drive)
    folder = OUTPUTS / "udacity_validate"
    folder.mkdir(parents=True, exist_ok=True)
    preds, truths, folds = [], [], []
    for k, blocks in enumerate(FOLDS):
        fit_idx, held_idx = fold_split(n_drive, positions, blocks)
        path = folder / f"cv_{name}_{tag}_fold{k}.npz"
        if path.exists() and len(np.load(path)["predictions"]) >= epochs:
            p = np.load(path)["predictions"]
        else:
            print(
                f"{name} {tag}: fold {k + 1}/{len(FOLDS)} (blocks {blocks} held out, {len(fit_idx)} frames fit)",
                flush=True,
            )
            with Timer() as t:
                p = train_fold(name, x, y, fit_idx, held_idx, settings, epochs=epochs)
            print(f"  {t.seconds:.0f} s", flush=True)
            np.savez(path, predictions=p, held=held_idx)
        preds.append(p[:epochs])
        truths.append(y[held_idx])
        folds.append(np.full(len(held_idx), k))
    p_all, y_all, f_all = np.concatenate(preds, axis=1), np.concatenate(truths), np.concatenate(folds)
    baseline = float(np.mean((y_all - y.mean()) ** 2))
    rows = []
    for e in range(p_all.shape[0]):
        p = p_all[e]
        a, b = calibration(p, y_all)
        cal = np.empty_like(p)
        for k in range(len(FOLDS)):
            ak, bk = calibration(p[f_all != k], y_all[f_all != k])
            cal[f_all == k] = ak * p[f_all == k] + bk
        rows.append(
            {
                "model": name,
                "tag": tag,
                **settings,
                "epoch": e + 1,
                **steering_scores(p, y_all, baseline, "held-out"),
                "a": round(a, 3),
                "b": round(b, 4),
                "held-out calibrated x mean": round(float(np.mean((cal - y_all) ** 2)) / baseline, 3),
                "per fold x mean": [
                    round(
                        float(
                            np.mean((p[f_all == k] - y_all[f_all == k]) ** 2)
                            / np.mean((y_all[f_all == k] - y.mean()) ** 2)
                        ),
                        3,
                    )
                    for k in range(len(FOLDS))
                ],
            }
        )
        print(rows[-1], flush=True)
    with open(folder / "cv.jsonl", "a") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["dave2"], choices=UDACITY_MODELS)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--ema", type=float, default=0.99, help="0: no weight averaging")
    parser.add_argument("--huber", type=float, default=0.0, help="Huber loss with this delta (rad) instead of MSE")
    parser.add_argument("--photometric", action="store_true", help="random gain and bias per frame")
    parser.add_argument("--shift", type=int, default=0, help="random sideways shifts of up to this many pixels")
    parser.add_argument("--shift-angle", type=float, default=0.0, help="angle correction per pixel of shift (rad)")
    parser.add_argument("--tag", default="")
    parser.add_argument(
        "--block", type=int, default=VALIDATION_BLOCK, help="the validation block (1-based; not 2 or 7)"
    )
    parser.add_argument("--cv", action="store_true", help="blocked cross-validation over the training blocks (FOLDS)")
    args = parser.parse_args(argv)
    settings = {
        "lr": args.lr,
        "ema": args.ema,
        "huber": args.huber,
        "photometric": args.photometric,
        "shift": args.shift,
        "shift_angle": args.shift_angle,
    }
    for name in args.models:
        if args.cv:
            cross_validate(name, settings, epochs=args.epochs, tag=args.tag)
        else:
            run(name, settings, epochs=args.epochs, tag=args.tag, block=args.block)


if __name__ == "__main__":
    main()
