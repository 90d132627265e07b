"""Faults of issue 50: wrong results, tracebacks and unclear messages, each refused or said in one line."""

import numpy as np
import pytest
from typer.testing import CliRunner

from idcgen.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def _digit_folders(digits, tmp_path):
    """The same 20 digits as 8-bit PNGs, 16-bit PNGs, 16-bit TIFFs and 8-bit greyscale+alpha PNGs."""
    from PIL import Image

    x = (digits[2][:20, ..., 0] * 255).round().astype(np.uint8)
    folders = {kind: tmp_path / kind for kind in ("png8", "png16", "tif16", "la")}
    for folder in folders.values():
        folder.mkdir()
    for i, image in enumerate(x):
        Image.fromarray(image, "L").save(folders["png8"] / f"{i:02d}.png")
        Image.fromarray(image.astype(np.uint16) * 257).save(folders["png16"] / f"{i:02d}.png")
        Image.fromarray(image.astype(np.uint16) * 257).save(folders["tif16"] / f"{i:02d}.tif")
        Image.fromarray(np.stack([image, np.full_like(image, 255)], -1), "LA").save(folders["la"] / f"{i:02d}.png")
    return folders


@pytest.mark.parametrize("value_range", [(0.0, 1.0), (0.0, 255.0)])
def test_16_bit_images_are_read_at_their_depth(digits, tmp_path, value_range):
    """P16a/P16b: a 16-bit PNG was read with every non-zero pixel as 1.0, silently."""
    from idcgen.data import load_inputs

    folders = _digit_folders(digits, tmp_path)
    eight = load_inputs(folders["png8"], value_range=value_range)
    for kind in ("png16", "tif16", "la"):
        other = load_inputs(folders[kind], value_range=value_range)
        np.testing.assert_array_equal(other.x, eight.x, err_msg=kind)
    sixteen = load_inputs(folders["png16"], value_range=value_range)
    assert "65535" in sixteen.scaling, sixteen.scaling
    # resized and cropped at their depth as well
    a = load_inputs(folders["png16"], resize=(14, 14), crop=(1, 1, 1, 1)).x
    b = load_inputs(folders["png8"], resize=(14, 14), crop=(1, 1, 1, 1)).x
    assert np.abs(a - b).max() < 1 / 255


def test_an_npz_of_0x0_images_is_refused_in_one_line(tmp_path):
    """Z01: zero-size array to reduction operation minimum."""
    from idcgen.data import load_inputs
    from idcgen.errors import InputError

    np.savez(tmp_path / "z.npz", x=np.zeros((3, 0, 0), np.uint8), y=np.arange(3))
    with pytest.raises(InputError, match=r"have shape \(3, 0, 0\): each input is empty"):
        load_inputs(tmp_path / "z.npz")


@pytest.mark.parametrize("name", ["arrays.npz", "arrays.npy"])
def test_arrays_of_text_are_named_as_such(tmp_path, name):
    """A08: numpy's "Object arrays cannot be loaded when allow_pickle=False" is advice a user cannot take."""
    from idcgen.data import load_inputs
    from idcgen.errors import InputError

    text = np.array(["a cat", "a dog"], dtype=object)
    np.savez(tmp_path / name, x=text) if name.endswith(".npz") else np.save(tmp_path / name, text)
    with pytest.raises(InputError) as caught:
        load_inputs(tmp_path / name)
    assert "allow_pickle" not in str(caught.value) and "not numbers" in str(caught.value), caught.value
