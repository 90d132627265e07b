"""idcgen/threads.py's passes over whole input sets: their extent (min, max) and their fingerprint's bytes, in
parts on the pool, equal to numpy's and hashlib's own answers."""

import hashlib

import numpy as np
import pytest

import idcgen.threads as threads
from idcgen.analysis import data_fingerprint
from idcgen.threads import extent, hash_into


@pytest.mark.parametrize(
    "shape, dtype",
    [((1, 1), np.float32), ((3, 4), np.float64), ((700, 32, 32, 3), np.float32), ((50, 64, 64, 3), np.uint8)],
)
def test_the_extent_is_numpys_min_and_max(shape, dtype):
    rng = np.random.default_rng(0)
    a = (rng.random(shape) * 255 - (0 if dtype == np.uint8 else 20)).astype(dtype)
    assert len(threads.rows_of(a)) > 1 or a.nbytes < threads.PART_BYTES  # the big ones are cut into parts
    assert extent(a) == (float(a.min()), float(a.max()))
    assert extent(a[::2, ..., ::-1]) == (float(a[::2].min()), float(a[::2].max()))  # not contiguous


def test_one_nan_or_infinity_anywhere_shows_in_the_extent():
    """fit_to_model tells finite inputs by their extent alone (no boolean array the size of the inputs)."""
    a = np.random.default_rng(1).random((900, 32, 32, 3), dtype=np.float32)  # 11 parts
    assert np.isfinite(extent(a)).all()
    for value in (np.nan, np.inf, -np.inf):
        b = a.copy()
        b[777, 3, 4, 2] = value
        lo, hi = extent(b)
        if np.isnan(value):
            assert np.isnan(lo) and np.isnan(hi)
        else:
            assert (lo, hi) == ((-np.inf, float(a.max())) if value < 0 else (float(a.min()), np.inf))


def test_an_empty_array_has_no_extent():
    with pytest.raises(ValueError, match="empty"):
        extent(np.zeros((0, 3)))


def test_up_to_256_mb_the_fingerprint_hashes_the_bytes_as_before():
    """Fingerprints of inputs below the threshold are what they were before parts existed: analyses saved then
    are recognised (Analysis.matches_saved) and keep their folder names."""
    a = np.random.default_rng(2).random((300, 32, 32, 3), dtype=np.float32)
    y = np.arange(300) % 10
    want = hashlib.blake2b(digest_size=4)
    for part in (a, y):
        want.update(f"{part.shape}{part.dtype}".encode())
        want.update(memoryview(np.ascontiguousarray(part)).cast("B"))
    assert data_fingerprint(a, y) == want.hexdigest()
    assert data_fingerprint(np.asfortranarray(a), y) == want.hexdigest()  # C order whatever the layout


def test_above_the_threshold_the_parts_digests_are_hashed_in_order_whatever_the_pool(monkeypatch):
    monkeypatch.setattr(threads, "WHOLE_HASH_BYTES", 1 << 20)
    monkeypatch.setattr(threads, "HASH_PART_BYTES", 1 << 20)
    a = np.random.default_rng(3).random((100, 32, 32, 3), dtype=np.float32)  # 1.2 MB: two parts
    raw = a.tobytes()
    by_hand = hashlib.blake2b(digest_size=4)
    by_hand.update(b"parts:" + b"".join(hashlib.sha256(raw[i : i + (1 << 20)]).digest() for i in (0, 1 << 20)))
    on_pool = hashlib.blake2b(digest_size=4)
    hash_into(on_pool, a)
    assert on_pool.hexdigest() == by_hand.hexdigest()
    monkeypatch.setattr(threads, "run_parts", lambda work, parts: [work(p) for p in parts])  # one thread
    one_thread = hashlib.blake2b(digest_size=4)
    hash_into(one_thread, a)
    assert one_thread.hexdigest() == by_hand.hexdigest()
    b = a.copy()
    b[-1, -1, -1, -1] += 1  # a change in the last part changes the fingerprint
    changed = hashlib.blake2b(digest_size=4)
    hash_into(changed, b)
    assert changed.hexdigest() != by_hand.hexdigest()
