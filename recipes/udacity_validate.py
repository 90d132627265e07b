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

from common import OUTPUTS, UDACITY_MODELS, Timer, udacity
from udacity_data import BLOCKS, GAP, TEST_BLOCKS, blocked_split, read_angles

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


def calibration(predicted: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(a, b) of the least-squares line ``y ~ a * predicted + b``."""
    predicted, y = np.asarray(predicted, np.float64), np.asarray(y, np.float64)
    a = float(np.cov(predicted, y, bias=True)[0, 1] / predicted.var())
    return a, float(y.mean() - a * predicted.mean())


def photometric(x: np.ndarray, rng: np.random.Generator, gain: float = 0.2, bias: float = 0.1) -> np.ndarray:
    """Each frame times a gain from [1 - gain, 1 + gain] plus a bias from [-bias, bias], clipped to [0, 1]."""
    n = len(x)
    g = rng.uniform(1 - gain, 1 + gain, n).astype(np.float32)[:, None, None, None]
    b = rng.uniform(-bias, bias, n).astype(np.float32)[:, None, None, None]
    return np.clip(x * g + b, 0.0, 1.0)


def scores(predicted, y, baseline: float, prefix: str) -> dict:
    predicted = np.asarray(predicted, np.float64)
    mse = float(np.mean((predicted - y) ** 2))
    return {f"{prefix} MSE": round(mse, 4), f"{prefix} x mean": round(mse / baseline, 3),
            f"{prefix} corr": round(float(np.corrcoef(predicted, y)[0, 1]), 3),
            f"{prefix} std": round(float(predicted.std()), 3)}


def shift(x: np.ndarray, y: np.ndarray, rng: np.random.Generator, limit: int, per_px: float):
    """Each frame moved sideways by a whole number of pixels from [-limit, limit], the edge column repeated
    into the uncovered side, and its angle corrected by ``-per_px`` per pixel: scenery moved right looks as
    if the car had drifted left, so it should steer right (negative angles)."""
    n, w = len(x), x.shape[2]
    dx = rng.integers(-limit, limit + 1, n)
    out = np.empty_like(x)
    for d in np.unique(dx):   # one gather per offset instead of one per frame
        idx = np.flatnonzero(dx == d)
        out[idx] = x[idx][:, :, np.clip(np.arange(w) - d, 0, w - 1)]
    return out, y - per_px * dx


def augment(x: np.ndarray, y: np.ndarray, rng: np.random.Generator, settings: dict):
    """One epoch's copy of the frames: half flipped left-right with the angle negated, then (``settings``)
    a random gain and bias (``photometric``) and sideways shifts (``shift`` pixels, ``shift_angle`` rad each)."""
    flip = rng.random(len(x)) < 0.5
    xs, ys = np.where(flip[:, None, None, None], x[:, :, ::-1], x), np.where(flip, -y, y)
    if settings.get("photometric"):
        xs = photometric(xs, rng)
    if settings.get("shift"):
        xs, ys = shift(xs, ys, rng, settings["shift"], settings.get("shift_angle", 0.0))
    return xs, ys


def build(name: str, input_shape, settings: dict, random_state: int = 0):
    """A zoo steering model, compiled as the recipes train it: the output layer starts at zero (the first
    predictions are 0 rad, near the drive's mean), Adam with an exponential moving average of the weights
    (``ema``, default 0.99, about one epoch), MSE loss or Huber's with ``huber`` as its delta."""
    import keras
    from idcgen.framework.keras_zoo import DRIVING_MODELS
    keras.utils.set_random_seed(random_state)
    model = DRIVING_MODELS[name](tuple(input_shape), random_state=random_state)
    head = model.get_layer("steering")
    head.set_weights([np.zeros_like(w) for w in head.get_weights()])
    ema = settings.get("ema", 0.99)
    loss = keras.losses.Huber(settings["huber"]) if settings.get("huber") else "mse"
    model.compile(optimizer=keras.optimizers.Adam(settings["lr"], use_ema=ema > 0, ema_momentum=ema or 0.99), loss=loss)
    return model


def fit_epoch(model, x, y, rng, settings: dict, fraction: float = 1.0) -> float:
    """One epoch (or a random ``fraction`` of one) of augmented frames; returns the training loss."""
    if fraction < 1.0:
        keep = rng.permutation(len(x))[:max(1, round(fraction * len(x)))]
        x, y = x[keep], y[keep]
    xs, ys = augment(x, y, rng, settings)
    fit = model.fit(xs, ys, batch_size=settings.get("batch_size", 32), epochs=1, shuffle=True, verbose=0)
    return float(fit.history["loss"][-1])


def run(name: str, settings: dict, *, epochs: int, random_state: int = 0, tag: str = "",
        block: int = VALIDATION_BLOCK) -> list[dict]:
    x_train, y_train = udacity("train")
    x_test, y_test = udacity("test")
    train_positions, _ = blocked_split(len(read_angles()[1]))
    fit_idx, val_idx = validation_split(len(read_angles()[1]), train_positions, block)
    x_fit, y_fit, x_val, y_val = x_train[fit_idx], y_train[fit_idx], x_train[val_idx], y_train[val_idx]
    rng = np.random.default_rng(random_state)
    model = build(name, x_train.shape[1:], settings, random_state)
    val_base = float(np.mean((y_val - y_fit.mean()) ** 2))
    test_base = float(np.mean((y_test - y_fit.mean()) ** 2))
    rows = []
    for epoch in range(1, epochs + 1):
        with Timer() as t:
            loss = fit_epoch(model, x_fit, y_fit, rng, settings)
        p_val = model.predict(x_val, batch_size=256, verbose=0)[:, 0]
        p_test = model.predict(x_test, batch_size=256, verbose=0)[:, 0]
        a, b = calibration(p_val, y_val)
        row = {"model": name, "tag": tag, "block": block, "epoch": epoch, **settings, "train loss": round(loss, 4),
               **scores(p_val, y_val, val_base, "val"), "val a": round(a, 3), "val b": round(b, 4),
               **scores(p_test, y_test, test_base, "test"),
               **scores(a * p_test + b, y_test, test_base, "test calibrated"), "seconds": round(t.seconds, 1)}
        rows.append(row)
        print(row, flush=True)
        path = OUTPUTS / "udacity_validate" / "log.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as handle:
            handle.write(json.dumps(row) + "\n")
    return rows


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
    x_fit, y_fit, out = x[fit_idx], y[fit_idx], []
    for epoch in range(epochs):
        fit_epoch(model, x_fit, y_fit, rng, settings)
        out.append(model.predict(x[held_idx], batch_size=256, verbose=0)[:, 0])
        print(f"  epoch {epoch + 1}: held-out MSE {np.mean((out[-1] - y[held_idx]) ** 2):.4f}", flush=True)
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
            print(f"{name} {tag}: fold {k + 1}/{len(FOLDS)} (blocks {blocks} held out, {len(fit_idx)} frames fit)", flush=True)
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
        rows.append({"model": name, "tag": tag, **settings, "epoch": e + 1, **scores(p, y_all, baseline, "held-out"),
                     "a": round(a, 3), "b": round(b, 4),
                     "held-out calibrated x mean": round(float(np.mean((cal - y_all) ** 2)) / baseline, 3),
                     "per fold x mean": [round(float(np.mean((p[f_all == k] - y_all[f_all == k]) ** 2) /
                                                 np.mean((y_all[f_all == k] - y.mean()) ** 2)), 3) for k in range(len(FOLDS))]})
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
    parser.add_argument("--block", type=int, default=VALIDATION_BLOCK, help="the validation block (1-based; not 2 or 7)")
    parser.add_argument("--cv", action="store_true", help="blocked cross-validation over the training blocks (FOLDS)")
    args = parser.parse_args(argv)
    settings = {"lr": args.lr, "ema": args.ema, "huber": args.huber, "photometric": args.photometric,
                "shift": args.shift, "shift_angle": args.shift_angle}
    for name in args.models:
        if args.cv:
            cross_validate(name, settings, epochs=args.epochs, tag=args.tag)
        else:
            run(name, settings, epochs=args.epochs, tag=args.tag, block=args.block)


if __name__ == "__main__":
    main()
