"""The corruption suite's constants and a few outputs, pinned to make_cifar_c.py (Hendrycks & Dietterich, the
CIFAR-10-C script in hendrycks/robustness, ImageNet-C/create_c/) and worked out by hand from its definitions."""

import io

import numpy as np
import pytest
from PIL import Image

from idcgen import corruptions as C

#: make_cifar_c.py's per-severity constants, copied by hand from the published script (severity 1..5)
PUBLISHED = {
    "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),
    "shot_noise": (500, 250, 100, 75, 50),
    "impulse_noise": (0.01, 0.02, 0.03, 0.05, 0.07),
    "defocus_blur": ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)),
    "glass_blur": ((0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2)),
    "motion_blur": ((6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)),
    "zoom_blur": (1.06, 1.11, 1.16, 1.21, 1.26),
    "snow": (
        (0.1, 0.2, 1, 0.6, 8, 3, 0.95),
        (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
        (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9),
        (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
        (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8),
    ),
    "frost": ((1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45)),
    "fog": ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)),
    "brightness": (0.05, 0.1, 0.15, 0.2, 0.3),
    "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),
    "elastic_transform": ((0, 0, 0.08), (0.05, 0.2, 0.07), (0.08, 0.06, 0.06), (0.1, 0.04, 0.05), (0.1, 0.03, 0.03)),
    "pixelate": (0.95, 0.9, 0.85, 0.75, 0.65),
    "jpeg_compression": (80, 65, 58, 50, 40),
}


def test_every_constant_is_the_published_one():
    assert set(C.SEVERITY) == set(C.CORRUPTIONS) == set(PUBLISHED)
    for name, values in PUBLISHED.items():
        assert C.SEVERITY[name] == values, name


def _image(rgb, h=32, w=32):
    return np.broadcast_to(np.asarray(rgb, np.float32), (1, h, w, 3)).copy()


@pytest.mark.parametrize("severity, sigma", [(1, 0.04), (3, 0.08), (5, 0.10)])
def test_gaussian_noise_sigma(severity, sigma):
    """x + N(0, sigma): the noise of a mid-grey image has the published standard deviation."""
    x = np.full((1, 32, 32, 3), 0.5, np.float32)
    rng = np.random.default_rng(1)
    drawn = C.gaussian_noise(x[0].astype(np.float64), severity, rng) - 0.5
    again = np.random.default_rng(1).normal(size=x[0].shape, scale=sigma)
    np.testing.assert_allclose(drawn, again, atol=1e-12)
    out = C.corrupt(x, "gaussian_noise", severity, random_state=0)
    assert (out - 0.5).std() == pytest.approx(sigma, rel=0.05)


def test_contrast_by_hand():
    """(x - channel mean) * c + mean: half the image at 51/255, half at 153/255 (mean 102/255). Severity 1
    (c 0.75) gives 102 -+ 38.25 = 63.75 and 140.25, stored truncated (np.uint8) as 63 and 140; severity 5
    (c 0.15) gives 102 -+ 7.65 = 94.35 and 109.65: 94 and 109."""
    x = np.full((1, 32, 32, 3), 51 / 255, np.float32)
    x[:, :, 16:] = 153 / 255
    for severity, (low, high) in ((1, (63, 140)), (5, (94, 109))):
        out = np.round(C.corrupt(x, "contrast", severity) * 255)
        assert set(np.unique(out[:, :, :16])) == {low} and set(np.unique(out[:, :, 16:])) == {high}, severity
    # a constant image has nothing to contrast
    flat = np.full((1, 32, 32, 3), 51 / 255, np.float32)
    np.testing.assert_array_equal(np.round(C.corrupt(flat, "contrast", 5) * 255), 51)


def test_brightness_by_hand():
    """HSV value + c (clipped to 1), hue and saturation kept. Grey 102/255 at severity 2 (c 0.1): 0.5 * 255 =
    127.5 -> 127; at severity 5 (c 0.3): 0.7 * 255 = 178.5 -> 178. (153, 51, 0)/255 has V 0.6 and S 1: at
    severity 2, V 0.7, so R 178.5 -> 178, G = V / 3 = 59.5 -> 59, B 0. White stays white."""
    grey = _image([102 / 255] * 3)
    assert set(np.unique(np.round(C.corrupt(grey, "brightness", 2) * 255))) == {127}
    assert set(np.unique(np.round(C.corrupt(grey, "brightness", 5) * 255))) == {178}
    colour = np.round(C.corrupt(_image([153 / 255, 51 / 255, 0]), "brightness", 2) * 255)
    np.testing.assert_array_equal(colour[0, 0, 0], [178, 59, 0])
    assert np.all(C.corrupt(_image([1.0] * 3), "brightness", 1) == 1.0)


def test_shot_noise_rate():
    x = np.full((32, 32, 3), 0.5)
    for severity, rate in ((1, 500), (4, 75)):
        drawn = C.shot_noise(x, severity, np.random.default_rng(2))
        np.testing.assert_array_equal(drawn, np.random.default_rng(2).poisson(x * rate) / rate)


def test_jpeg_and_pixelate_by_hand():
    """JPEG at the published quality (58 at severity 3); pixelate: box-resized to int(32 * 0.9) = 28 and back
    (severity 2)."""
    rng = np.random.default_rng(0)
    x = (rng.integers(0, 256, size=(1, 32, 32, 3)) / 255).astype(np.float32)
    pil = Image.fromarray(np.uint8(np.round(x[0] * 255)))
    buffer = io.BytesIO()
    pil.save(buffer, "JPEG", quality=58)
    jpeg = np.asarray(Image.open(buffer).convert("RGB"))
    np.testing.assert_array_equal(np.round(C.corrupt(x, "jpeg_compression", 3)[0] * 255), jpeg)
    box = Image.Resampling.BOX
    small = np.asarray(pil.resize((28, 28), box).resize((32, 32), box))
    np.testing.assert_array_equal(np.round(C.corrupt(x, "pixelate", 2)[0] * 255), small)


def test_motion_blur_radius_and_sigma():
    """CIFAR-10-C's ImageMagick motion blur, radius 6 and sigma 1 at severity 1 (9 and 2.5 at 5), through the
    numpy stand-in: a (2 * radius + 1)-tap one-sided Gaussian along a direction drawn in [-45, 45] degrees."""
    x = np.random.default_rng(0).random((32, 32, 3)).astype(np.float32)
    for severity, (radius, sigma) in ((1, (6, 1)), (5, (9, 2.5))):
        angle = np.random.default_rng(5).uniform(-45, 45)
        expected = C._motion_blur(x, radius=radius, sigma=sigma, angle=angle)
        np.testing.assert_allclose(C.motion_blur(x, severity, np.random.default_rng(5)), expected, atol=1e-6)
    # the kernel: exp(-i^2 / (2 sigma^2)) over i = 0..2 * radius, normalised; at 0 degrees pixel j takes
    # weight k[i] from pixel j + i, so one bright pixel at 20 spreads over 20, 19, ..., 8
    row = np.zeros((1, 32, 1), np.float32)
    row[0, 20] = 1.0
    kernel = np.exp(-(np.arange(13) ** 2) / 2.0)
    blurred = C._motion_blur(row, radius=6, sigma=1, angle=0.0)[0, :, 0]
    np.testing.assert_allclose(blurred[20:7:-1], kernel / kernel.sum(), atol=1e-6)
    assert not blurred[21:].any() and not blurred[:8].any()


def test_zoom_blur_factors():
    """The average of the image and its zooms by np.arange(1, 1.06, 0.01) at severity 1: float rounding makes
    that 1.00, ..., 1.06 (7 factors, 8 images averaged), in the published script as here."""
    x = np.random.default_rng(0).random((32, 32, 3)).astype(np.float32)
    factors = np.arange(1, 1.06, 0.01)
    assert len(factors) == 7
    by_hand = x + sum(C._clipped_zoom(x, f) for f in factors)
    np.testing.assert_allclose(C.zoom_blur(x, 1, None), by_hand / 8, atol=1e-6)
