"""Tests of idcgen.quality: L0/L2/L-inf by hand, SSIM against scikit-image's structural_similarity (the
Wang et al. 2004 settings) on real images with noise, the campaign summary by hand, and import without
TensorFlow."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from skimage.metrics import structural_similarity

from idcgen.errors import InputError, ParameterError
from idcgen.quality import distances, ssim, summary

SHARED_CIFAR = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10" / "eran_cifar10_test_first100.npz"


def reference_ssim(mutants, seeds, data_range):
    """scikit-image with Gaussian weights (sigma 1.5, 11x11), population covariance, mean over channels."""
    return np.array(
        [
            structural_similarity(
                m,
                s,
                gaussian_weights=True,
                sigma=1.5,
                use_sample_covariance=False,
                data_range=data_range,
                channel_axis=-1,
            )
            for m, s in zip(np.asarray(mutants, np.float64), np.asarray(seeds, np.float64))
        ]
    )


def noisy(seeds, scale, rng, low=0.0, high=1.0, uint8=False):
    """Gaussian noise of each strength in ``scale`` (one per image), clipped; optionally rounded to uint8."""
    out = np.clip(seeds + rng.normal(size=seeds.shape) * np.asarray(scale).reshape(-1, 1, 1, 1), low, high)
    return out.round().astype(np.uint8) if uint8 else out


def test_l0_l2_linf_by_hand():
    seed = np.zeros((1, 2, 2, 3))
    mutant = seed.copy()
    mutant[0, 0, 0] = [0.5, 0, 0]  # pixel (0, 0): one channel by 0.5
    mutant[0, 1, 1] = [0.1, -0.2, 0.0]  # pixel (1, 1): two channels
    mutant[0, 0, 1, 2] = 0.001  # pixel (0, 1): below half a uint8 step (0.00196): not a change
    d = distances(mutant, seed, (0.0, 1.0))
    assert d["l0_pixels"].tolist() == [2] and d["l0"].tolist() == [0.5]
    np.testing.assert_allclose(d["l2"], [np.sqrt(0.25 + 0.01 + 0.04 + 0.001**2)], rtol=1e-12)
    np.testing.assert_allclose(d["linf"], [0.5])
    np.testing.assert_allclose(d["linf_rel"], [0.5])
    assert np.isnan(d["ssim"]).all()  # 2x2 is smaller than SSIM's window
    # the same in uint8 units on a [0, 255] range: relative values unchanged, half a step is 0.5
    seed8, mutant8 = np.zeros((1, 2, 2, 1), np.uint8), np.zeros((1, 2, 2, 1), np.uint8)
    mutant8[0, 0, 0, 0], mutant8[0, 1, 0, 0] = 255, 1  # a 1-step change counts (1 > 0.5)
    d8 = distances(mutant8, seed8, (0, 255))
    assert d8["l0_pixels"].tolist() == [2] and d8["l0"].tolist() == [0.5]
    np.testing.assert_allclose(d8["l2"], [np.sqrt(255**2 + 1)])
    np.testing.assert_allclose(d8["l2_rel"], [np.sqrt(255**2 + 1) / 255])
    np.testing.assert_allclose(d8["linf"], [255.0])
    np.testing.assert_allclose(d8["linf_rel"], [1.0])
    # identical images: all zero, SSIM 1; (n, h, w) works as one channel
    same = distances(np.ones((2, 12, 12)) * 0.3, np.ones((2, 12, 12)) * 0.3)
    assert same["l0"].tolist() == [0, 0] and same["l2"].tolist() == [0, 0]
    np.testing.assert_allclose(same["ssim"], [1.0, 1.0])


def test_ssim_equals_scikit_image_on_mnist_with_noise(digits):
    x = digits[2][:40].astype(np.float64)  # embedded MNIST test digits in [0, 1]
    rng = np.random.default_rng(0)
    mutants = noisy(x, np.linspace(0.01, 0.5, len(x)), rng)
    expected = reference_ssim(mutants, x, 1.0)
    got = ssim(mutants, x, (0.0, 1.0))
    np.testing.assert_allclose(got, expected, atol=1e-4)
    assert np.abs(got - expected).max() < 1e-10  # the same computation, to rounding
    assert expected.min() < 0.6 and expected.max() > 0.95  # from barely to heavily changed
    # the same pair on a [-0.5, 0.5] range (SADL's scaling) scores the same: values are taken from the low end
    np.testing.assert_allclose(ssim(mutants - 0.5, x - 0.5, (-0.5, 0.5)), got, atol=1e-10)
    np.testing.assert_allclose(ssim(mutants * 255, x * 255, (0, 255)), got, atol=1e-10)


def test_ssim_equals_scikit_image_on_colour_images_in_uint8():
    from skimage import data

    rng = np.random.default_rng(1)
    photos = [data.astronaut(), data.chelsea(), data.coffee()]
    seeds = np.stack([p[r : r + 32, c : c + 32] for p in photos for r, c in ((40, 60), (150, 200), (250, 100))])
    mutants = noisy(seeds.astype(np.float64), rng.uniform(1, 60, len(seeds)), rng, 0, 255, uint8=True)
    got = ssim(mutants, seeds, (0, 255))
    np.testing.assert_allclose(got, reference_ssim(mutants, seeds, 255), atol=1e-4)
    d = distances(mutants, seeds, (0, 255))
    np.testing.assert_allclose(d["ssim"], got)
    # a pixel is changed when any channel is: at least the share of changed channel values
    changed_values = (mutants != seeds).reshape(len(seeds), -1).mean(axis=1)
    assert (d["l0"] >= changed_values).all() and (d["l0"] <= 1).all()


@pytest.mark.skipif(not SHARED_CIFAR.exists(), reason="CIFAR-10 test images only in the development workspace")
def test_ssim_equals_scikit_image_on_cifar10():
    with np.load(SHARED_CIFAR) as f:
        key = next(k for k in f.files if f[k].ndim == 4)
        x = f[key][:30].astype(np.float64)
    low, high = (0.0, 255.0) if x.max() > 1.5 else (0.0, 1.0)
    rng = np.random.default_rng(2)
    mutants = noisy(x, np.linspace(0.005, 0.2, len(x)) * (high - low), rng, low, high)
    np.testing.assert_allclose(ssim(mutants, x, (low, high)), reference_ssim(mutants, x, high - low), atol=1e-4)


def test_ssim_blocks_do_not_change_the_result(monkeypatch):
    from idcgen import quality

    rng = np.random.default_rng(3)
    seeds = rng.uniform(size=(7, 14, 13, 2))
    mutants = noisy(seeds, np.full(7, 0.1), rng)
    whole = ssim(mutants, seeds)
    monkeypatch.setattr(quality, "_BLOCK", 3)
    np.testing.assert_allclose(ssim(mutants, seeds), whole, rtol=1e-14)
    np.testing.assert_allclose(whole, reference_ssim(mutants, seeds, 1.0), atol=1e-10)


def test_summary_by_hand():
    findings = {
        "label": np.array([3, 3, 5, 3, 7]),
        "prediction": np.array([8, 8, 3, 5, 1]),
        "combination": np.array([[0, 1], [0, 1], [1, 1], [0, 1], [1, 0]]),
        "ssim": np.array([0.9, 0.8, 0.7, 0.6, 0.5]),
    }
    out = summary(findings, execs=2_000, seconds=30.0)
    assert out == {
        "findings": 5,
        "unique_pairs": 4,
        "pairs": [[3, 5], [3, 8], [5, 3], [7, 1]],
        "per_1000_execs": 2.5,
        "per_minute": 10.0,
        "distinct_combinations": 3,
        "mean_ssim": pytest.approx(0.7),
    }
    one_id = summary({"label": [1, 1], "prediction": [2, 2], "combination": [17, 4]}, execs=0, seconds=0)
    assert (one_id["unique_pairs"], one_id["distinct_combinations"]) == (1, 2)
    assert one_id["per_1000_execs"] is None and one_id["per_minute"] is None
    empty = summary({"label": [], "prediction": [], "combination": np.zeros((0, 3))}, execs=100, seconds=1.0)
    assert (empty["findings"], empty["unique_pairs"], empty["distinct_combinations"], empty["per_minute"]) == (
        0,
        0,
        0,
        0,
    )
    assert summary({"label": [0], "prediction": [1]}, 10, 1.0)["distinct_combinations"] is None


def test_errors():
    with pytest.raises(
        InputError,
        match=r"mutants and seeds must be two non-empty arrays of the same shape .* "
        r"got \(2, 12, 12, 1\) and \(1, 12, 12, 1\)",
    ):
        distances(np.zeros((2, 12, 12, 1)), np.zeros((1, 12, 12, 1)))
    with pytest.raises(ParameterError, match=r"value_range must be \(low, high\) with finite low < high"):
        distances(np.zeros((1, 12, 12)), np.zeros((1, 12, 12)), (1.0, 1.0))
    with pytest.raises(InputError, match="SSIM needs images of at least 11x11 pixels"):
        ssim(np.zeros((1, 10, 30)), np.zeros((1, 10, 30)))
    with pytest.raises(InputError, match="findings must be a dict of arrays with at least 'label' and 'prediction'"):
        summary({"label": [1]}, 10, 1.0)
    with pytest.raises(InputError, match=r"findings\['combination'\] has shape \(1,\); 'label' has 2 rows"):
        summary({"label": [1, 2], "prediction": [2, 1], "combination": [0]}, 10, 1.0)
    with pytest.raises(ParameterError, match="execs must be an int >= 0"):
        summary({"label": [1], "prediction": [2]}, -1, 1.0)
    with pytest.raises(ParameterError, match="seconds must be a number >= 0"):
        summary({"label": [1], "prediction": [2]}, 1, float("nan"))


def test_imports_without_tensorflow():
    code = (
        "import sys, idcgen.quality; heavy = [m for m in ('tensorflow', 'keras', 'torch') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1]
    )
    assert result.returncode == 0, result.stderr
