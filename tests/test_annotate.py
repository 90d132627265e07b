"""Findings drawn for a person: steering arrows and classes on the seed and the mutant (idcgen/annotate.py)."""

import math

import numpy as np
import pytest

from idcgen.annotate import LABEL, MUTANT, SEED, arrow_end, finding_image


@pytest.mark.parametrize(
    "angle, end",
    [
        (0.0, (50, 40)),
        (math.pi / 2, (110, 100)),
        (-math.pi / 2, (-10, 100)),
        (3.0, (110, 100)),
        (math.pi / 6, (80, 100 - 60 * math.cos(math.pi / 6))),
    ],
)
def test_arrow_end_from_the_bottom_centre(angle, end):
    # a 100x100 frame: the arrow starts at (50, 100) and is 60 pixels long; beyond +-pi/2 it stays sideways
    assert arrow_end(100, 100, angle) == pytest.approx(end)


def _colour_at(img, xy, colour, radius=1):
    px = np.asarray(img)
    x, y = int(round(xy[0])), int(round(xy[1]))
    patch = px[max(y - radius, 0) : y + radius + 1, max(x - radius, 0) : x + radius + 1].reshape(-1, 3)
    return (patch == np.asarray(colour, np.uint8)).all(1).any()


def test_steering_arrows_point_where_the_outputs_say():
    seed = np.full((66, 200, 3), 0.5, np.float32)
    img = finding_image(seed, seed, seed_prediction=-0.4, prediction=0.9, label=0.0, scale=1)
    assert img.size == (2 * 200 + 4, 66 + 28)
    w, h, gap = 200, 66, 4
    # halfway along each shaft, in the frame it belongs to
    half = lambda a, dx=0: ((w / 2 + arrow_end(w, h, a)[0]) / 2 + dx, (h - 1 + arrow_end(w, h, a)[1]) / 2)
    assert _colour_at(img, half(-0.4), SEED) and _colour_at(img, half(0.0), LABEL)
    assert _colour_at(img, half(0.9, w + gap), MUTANT) and _colour_at(img, half(-0.4, w + gap), SEED)
    assert not _colour_at(img, half(0.9), MUTANT, radius=3)  # the seed's frame has no mutant arrow
    assert not _colour_at(img, half(-0.9, w + gap), MUTANT, radius=3)  # the mutant's arrow leans right, not left


def test_no_label_draws_no_label_arrow_and_classifiers_get_text():
    seed = np.full((66, 200, 3), 0.5, np.float32)
    img = np.asarray(finding_image(seed, seed, seed_prediction=0.3, prediction=0.3, label=float("nan"), scale=1))
    assert not (img == np.asarray(LABEL, np.uint8)).all(-1).any()
    digit = np.zeros((28, 28, 1), np.float32)
    img = finding_image(digit, digit, seed_prediction=3, prediction=5, label=3, regression=False)
    assert img.size == (2 * 28 * 4 + 4, 28 * 4 + 28)  # small frames are enlarged to about 96 pixels
    arr = np.asarray(img)
    assert (arr[:112, :112] == 0).all()  # no arrow on a classifier's image
    near = lambda part, colour: (np.abs(part.astype(int) - colour).max(-1) < 60).any()  # text is anti-aliased
    assert near(arr[112:, :112], SEED) and near(arr[112:, 116:], MUTANT) and near(arr[112:, :112], LABEL)
    assert not near(arr[112:, 116:], SEED)
