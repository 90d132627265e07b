"""A finding drawn for a person: its root seed and the mutant side by side, with what the model said.

For a steering model the outputs are drawn as arrows from the bottom centre of each frame, tilted by the
output in radians (positive to the right, 0 straight ahead): the label in blue, the seed's prediction in
green, the mutant's in red; the numbers are written under the frames. For a classifier the true class and
the predictions are written instead. Numpy and PIL only, so exports need no plotting library.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw

from .imageio import to_png

LABEL, SEED, MUTANT = (40, 110, 255), (0, 200, 60), (235, 30, 30)


def _frame(x: np.ndarray, value_range, scale: int) -> Image.Image:
    img = to_png(x, value_range).convert("RGB")
    return img.resize((img.width * scale, img.height * scale), Image.NEAREST) if scale > 1 else img


def arrow_end(width: int, height: int, angle: float, length: float | None = None) -> tuple[float, float]:
    """Where an arrow from the bottom centre ends for a steering ``angle`` (radians, positive to the
    right); the angle is clipped to +-pi/2 so that a wild output still points sideways, not down."""
    length = 0.6 * height if length is None else length
    a = max(-math.pi / 2, min(math.pi / 2, float(angle)))
    return width / 2 + length * math.sin(a), height - length * math.cos(a)


def _arrow(draw: ImageDraw.ImageDraw, left: int, width: int, height: int, angle: float, colour, thickness: int) -> None:
    """An arrow for ``angle`` on the frame whose left edge is at x = ``left``."""
    x0, y0 = left + width / 2, height - 1
    x1, y1 = arrow_end(width, height, angle)
    x1 += left
    draw.line([(x0, y0), (x1, y1)], fill=colour, width=thickness)
    back = math.atan2(y0 - y1, x0 - x1)  # two short strokes at the tip, 25 degrees either side of the shaft
    head = max(3.0, 0.08 * height)
    for side in (-0.44, 0.44):
        draw.line(
            [(x1, y1), (x1 + head * math.cos(back + side), y1 + head * math.sin(back + side))],
            fill=colour,
            width=thickness,
        )


def finding_image(
    seed: np.ndarray,
    mutant: np.ndarray,
    *,
    seed_prediction,
    prediction,
    label=None,
    value_range=(0.0, 1.0),
    regression: bool = True,
    scale: int | None = None,
) -> Image.Image:
    """The seed (left) and the mutant (right) with the model's outputs drawn on them and written below."""
    if scale is None:  # small frames (MNIST's 28x28) are enlarged so that arrows and text can be read
        scale = max(1, math.ceil(96 / max(seed.shape[0], 1)))
    left, right = _frame(seed, value_range, scale), _frame(mutant, value_range, scale)
    w, h = left.size
    thickness = max(1, h // 48)
    gap, text_h = 4, 14
    canvas = Image.new("RGB", (2 * w + gap, h + 2 * text_h), (255, 255, 255))
    canvas.paste(left, (0, 0))
    canvas.paste(right, (w + gap, 0))
    draw = ImageDraw.Draw(canvas)
    has_label = label is not None and not (isinstance(label, float) and math.isnan(label))
    if regression:
        for offset, pairs in (
            (0, [(label, LABEL), (seed_prediction, SEED)]),
            (w + gap, [(label, LABEL), (seed_prediction, SEED), (prediction, MUTANT)]),
        ):
            for value, colour in pairs:
                if colour != LABEL or has_label:
                    _arrow(draw, offset, w, h, value, colour, thickness)
        draw.text((2, h + 1), f"seed {float(seed_prediction):+.3f}", fill=SEED)
        draw.text((w + gap + 2, h + 1), f"mutant {float(prediction):+.3f}", fill=MUTANT)
        if has_label:
            draw.text((2, h + text_h), f"label {float(label):+.3f}", fill=LABEL)
        draw.text((w + gap + 2, h + text_h), f"moved {float(prediction) - float(seed_prediction):+.3f}", fill=(0, 0, 0))
    else:
        draw.text((2, h + 1), f"pred {int(seed_prediction)}", fill=SEED)
        draw.text((w + gap + 2, h + 1), f"pred {int(prediction)}", fill=MUTANT)
        if has_label and int(label) >= 0:
            draw.text((2, h + text_h), f"true {int(label)}", fill=LABEL)
    return canvas
