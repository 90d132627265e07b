"""Training the recipes' Keras models: one epoch loop (``train_epochs``) for every recipe that trains,
the CIFAR-10 and Udacity augmentations, and the compiled steering model. (PyTorch models train with
idcgen.framework.torch_zoo.train, the one PyTorch loop.)"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .tables import Timer


def train_epochs(
    name: str,
    epochs: float,
    one_epoch: Callable[[float], float],
    score: Callable[[], dict],
    describe: Callable[[dict], str] = str,
    *,
    stop: Callable[[float], bool] = lambda seconds: False,
    after_epoch: Callable[[dict], None] = lambda row: None,
) -> list[dict]:
    """Train for ``epochs`` (a fraction ends the last epoch early): per epoch ``one_epoch(fraction)`` (the
    training loss), then ``score()`` on the test data, timed and printed, then ``after_epoch(row)`` (save the
    model, log the row); stop early after the first epoch for which ``stop(seconds so far)`` holds. Returns the
    history, one row per epoch."""
    history, seconds = [], 0.0
    total = int(epochs) if epochs == int(epochs) else epochs
    for epoch in range(1, math.ceil(total) + 1):
        fraction = min(1.0, total - (epoch - 1))
        with Timer() as t:
            loss = one_epoch(fraction)
        seconds += t.seconds
        row = {
            "model": name,
            "epoch": epoch if fraction == 1 else round(epoch - 1 + fraction, 2),
            "train loss": round(loss, 4),
            **score(),
            "epoch seconds": round(t.seconds, 1),
        }
        history.append(row)
        print(f"{name} epoch {row['epoch']}/{total}: {describe(row)} ({t.seconds:.0f} s)", flush=True)
        after_epoch(row)
        if stop(seconds):
            break
    return history


def keras_epoch(
    model, x, y, batch_size: int, augment: Callable | None = None, rng: np.random.Generator | None = None
) -> Callable[[float], float]:
    """``one_epoch`` for ``train_epochs``: a Keras model fitted one epoch (or a random ``fraction`` of one) on
    ``augment(x, y, rng)`` (a fresh draw each epoch) or on (x, y); returns the training loss."""

    def one_epoch(fraction: float = 1.0) -> float:
        xs, ys = x, y
        if fraction < 1.0:
            keep = rng.permutation(len(x))[: max(1, round(fraction * len(x)))]
            xs, ys = x[keep], y[keep]
        if augment is not None:
            xs, ys = augment(xs, ys, rng)
        fit = model.fit(xs, ys, batch_size=batch_size, epochs=1, shuffle=True, verbose=0)
        one_epoch.history = fit.history
        return float(fit.history["loss"][-1])

    return one_epoch


def classifier_score(model, one_epoch, x_test, y_test) -> Callable[[], dict]:
    """``score`` for ``train_epochs`` of a classifier: the last epoch's training accuracy and the test accuracy."""

    def score() -> dict:
        accuracy = float((model.predict(x_test, batch_size=500, verbose=0).argmax(1) == y_test).mean())
        return {
            "train accuracy %": round(100 * one_epoch.history["accuracy"][-1], 2),
            "test accuracy %": round(100 * accuracy, 2),
        }

    return score


def describe_classifier(row: dict) -> str:
    return f"loss {row['train loss']}, train {row['train accuracy %']} %, test {row['test accuracy %']} %"


def flip_and_shift(x: np.ndarray, rng: np.random.Generator, shift: int = 4) -> np.ndarray:
    """A copy of the images (n, h, w, c), each flipped left-right with probability 1/2 and moved by a random
    whole number of pixels in [-shift, shift] along each axis, the uncovered border filled with zeros."""
    n, h, w = x.shape[:3]
    out = np.zeros_like(x)
    flipped = np.where((rng.random(n) < 0.5)[:, None, None, None], x[:, :, ::-1], x)
    dy, dx = rng.integers(-shift, shift + 1, size=(2, n))
    for sy in range(-shift, shift + 1):  # one slice assignment per offset instead of one per image
        for sx in range(-shift, shift + 1):
            idx = np.flatnonzero((dy == sy) & (dx == sx))
            if idx.size:
                out[idx, max(sy, 0) : h + min(sy, 0), max(sx, 0) : w + min(sx, 0)] = flipped[
                    idx, max(-sy, 0) : h + min(-sy, 0), max(-sx, 0) : w + min(-sx, 0)
                ]
    return out


def flips_and_shifts(x, y, rng):
    """The CIFAR-10 augmentation as ``keras_epoch`` takes it: ``flip_and_shift`` with the labels unchanged."""
    return flip_and_shift(x, rng), y


def photometric(x: np.ndarray, rng: np.random.Generator, gain: float = 0.2, bias: float = 0.1) -> np.ndarray:
    """Each frame times a gain from [1 - gain, 1 + gain] plus a bias from [-bias, bias], clipped to [0, 1]."""
    n = len(x)
    g = rng.uniform(1 - gain, 1 + gain, n).astype(np.float32)[:, None, None, None]
    b = rng.uniform(-bias, bias, n).astype(np.float32)[:, None, None, None]
    return np.clip(x * g + b, 0.0, 1.0)


def shift(x: np.ndarray, y: np.ndarray, rng: np.random.Generator, limit: int, per_px: float):
    """Each frame moved sideways by a whole number of pixels from [-limit, limit], the edge column repeated
    into the uncovered side, and its angle corrected by ``-per_px`` per pixel: scenery moved right looks as
    if the car had drifted left, so it should steer right (negative angles)."""
    n, w = len(x), x.shape[2]
    dx = rng.integers(-limit, limit + 1, n)
    out = np.empty_like(x)
    for d in np.unique(dx):  # one gather per offset instead of one per frame
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
