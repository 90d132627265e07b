"""Tests of idcgen.coverage: combination ids and the coverage tracker."""

import numpy as np
import pytest

from idcgen.coverage import BITMAP_MAX_TOTAL, Combinations, CoverageResult, CoverageTracker
from idcgen.errors import InputError, ParameterError

# ------------------------------------------------------------------ Combinations


@pytest.fixture
def combos():
    # neuron 0: 2 clusters at 0 and 1; neuron 1: 3 clusters at 0, 10, 20. id = i0 * 3 + i1.
    return Combinations([np.array([0.0, 1.0]), np.array([0.0, 10.0, 20.0])])


def test_combinations_hand_example(combos):
    assert combos.total == 6 and combos.cluster_counts == (2, 3) and combos.m == 2
    activations = np.array(
        [
            [0.2, 19.0],  # (0, 2) -> 0*3 + 2 = 2
            [0.9, -5.0],  # (1, 0) -> 1*3 + 0 = 3
            [0.5, 5.0],  # both exactly halfway: lower centroids (0, 0) -> 0
            [0.51, 15.0],  # (1, 1): 15 is halfway between 10 and 20 -> 1*3 + 1 = 4
            [3.0, 100.0],  # (1, 2) -> 5
            [-7.0, 10.0],  # (0, 1) -> 1
        ]
    )
    np.testing.assert_array_equal(combos.assign(activations), [[0, 2], [1, 0], [0, 0], [1, 1], [1, 2], [0, 1]])
    ids = combos.ids(activations)
    assert ids.dtype == np.int64
    np.testing.assert_array_equal(ids, [2, 3, 0, 4, 5, 1])
    # neuron 0 is the most significant digit: the order of np.ravel_multi_index
    np.testing.assert_array_equal(ids, np.ravel_multi_index(combos.assign(activations).T, (2, 3)))
    np.testing.assert_array_equal(combos.centroid_vector(4), [1.0, 10.0])


def test_combinations_decode_round_trip():
    rng = np.random.default_rng(0)
    combos = Combinations([np.sort(rng.normal(size=k)) for k in (2, 5, 3, 4, 2)])
    x = rng.normal(size=(1000, 5)) * 2
    ids = combos.ids(x)
    np.testing.assert_array_equal(combos.decode(ids), combos.assign(x))
    np.testing.assert_array_equal(combos.ids(np.stack([combos.centroid_vector(int(i)) for i in ids[:50]])), ids[:50])
    np.testing.assert_array_equal(combos.decode(np.arange(combos.total)).shape, (combos.total, 5))
    assert len(set(map(tuple, combos.decode(np.arange(combos.total))))) == combos.total


def test_combinations_agree_with_brute_force_nearest_combination():
    rng = np.random.default_rng(1)
    centroids = [np.sort(rng.normal(size=k)) for k in (2, 3, 4)]
    combos = Combinations(centroids)
    grid = np.array(np.meshgrid(*centroids, indexing="ij")).reshape(3, -1).T  # every combination, C order
    x = rng.normal(size=(300, 3))
    nearest = np.argmin(((x[:, None, :] - grid[None, :, :]) ** 2).sum(axis=2), axis=1)
    np.testing.assert_array_equal(combos.ids(x), nearest)


def test_combinations_total_overflow_raises():
    assert Combinations([[0.0, 1.0]] * 62).total == 2**62
    with pytest.raises(ParameterError, match="more than 2\\*\\*62.*Lower m or the cluster range"):
        Combinations([[0.0, 1.0]] * 63)


def test_combinations_bad_input():
    with pytest.raises(ParameterError, match="at least one important neuron"):
        Combinations([])
    with pytest.raises(ParameterError, match="neuron 1 must be a non-empty, finite, strictly increasing"):
        Combinations([[0.0, 1.0], [2.0, 1.0]])
    combos = Combinations([[0.0, 1.0], [0.0, 1.0, 2.0]])
    with pytest.raises(InputError, match=r"shape \(n, 2\).*got shape \(4, 3\)"):
        combos.ids(np.zeros((4, 3)))
    with pytest.raises(InputError, match="finite.*row 1"):
        combos.ids(np.array([[0.0, 0.0], [np.nan, 0.0]]))
    with pytest.raises(InputError, match=r"in \[0, 6\)"):
        combos.decode([6])


# ------------------------------------------------------------------ CoverageResult


def test_coverage_result_display():
    result = CoverageResult(score=87 / 256, covered=87, total=256)
    assert str(result) == "IDC 34.0 % (87 of 256 combinations)"
    assert result.to_dict() == {"idc": 87 / 256, "covered": 87, "total": 256}


# ------------------------------------------------------------------ CoverageTracker


def test_tracker_update_mask_counts_repeated_new_id_once():
    tracker = CoverageTracker(10, [1])
    mask = tracker.update(np.array([3, 1, 3, 7, 3, 7]))
    np.testing.assert_array_equal(mask, [True, False, False, True, False, False])
    assert tracker.covered == 3 and tracker.score == pytest.approx(0.3)
    np.testing.assert_array_equal(tracker.covered_ids(), [1, 3, 7])
    np.testing.assert_array_equal(tracker.would_cover([7, 8, 8]), [False, True, False])
    assert tracker.covered == 3  # would_cover does not update
    assert tracker.result() == CoverageResult(score=0.3, covered=3, total=10)


def test_tracker_score_bounds_and_monotone():
    rng = np.random.default_rng(0)
    tracker = CoverageTracker(500)
    assert tracker.score == 0.0
    previous = 0.0
    for _ in range(40):
        tracker.update(rng.integers(0, 500, size=int(rng.integers(0, 60))))
        assert 0.0 <= previous <= tracker.score <= 1.0
        previous = tracker.score
    tracker.update(np.arange(500))
    assert tracker.score == 1.0
    assert tracker.uncovered_ids().size == 0


@pytest.mark.parametrize("backend", ["bitmap", "sorted"])
def test_tracker_order_independent(backend):
    rng = np.random.default_rng(1)
    batches = [rng.integers(0, 1000, size=50) for _ in range(10)]
    a = CoverageTracker(1000, backend=backend)
    for batch in batches:
        a.update(batch)
    b = CoverageTracker(1000, backend=backend)
    flat = np.concatenate(batches)
    for batch in np.array_split(flat[rng.permutation(flat.size)], 7):
        b.update(batch)
    np.testing.assert_array_equal(a.covered_ids(), b.covered_ids())
    assert a.score == b.score


@pytest.mark.parametrize("backends", [("bitmap", "bitmap"), ("sorted", "sorted"), ("bitmap", "sorted")])
def test_tracker_merge_is_union(backends):
    rng = np.random.default_rng(2)
    x, y = rng.integers(0, 300, size=80), rng.integers(0, 300, size=80)
    a = CoverageTracker(300, x, backend=backends[0])
    b = CoverageTracker(300, y, backend=backends[1])
    merged = a.merge(b)
    np.testing.assert_array_equal(merged.covered_ids(), np.union1d(x, y))
    assert merged.covered == np.union1d(x, y).size
    assert a.covered == np.unique(x).size  # inputs unchanged
    together = CoverageTracker(300, np.concatenate([x, y]))
    assert merged.score == together.score
    with pytest.raises(ParameterError, match="totals differ"):
        a.merge(CoverageTracker(301))


def test_tracker_backends_agree_above_bitmap_limit():
    total = BITMAP_MAX_TOTAL + 1000
    assert CoverageTracker(total).backend == "sorted"
    bitmap = CoverageTracker(total, backend="bitmap")
    sorted_ = CoverageTracker(total)
    rng = np.random.default_rng(3)
    for _ in range(5):
        batch = np.concatenate([rng.integers(0, total, size=2000), rng.integers(total - 50, total, size=100)])
        np.testing.assert_array_equal(bitmap.would_cover(batch), sorted_.would_cover(batch))
        np.testing.assert_array_equal(bitmap.update(batch), sorted_.update(batch))
    np.testing.assert_array_equal(bitmap.covered_ids(), sorted_.covered_ids())
    assert bitmap.covered == sorted_.covered
    np.testing.assert_array_equal(bitmap.uncovered_ids(limit=100), sorted_.uncovered_ids(limit=100))
    np.testing.assert_array_equal(
        bitmap.uncovered_ids(limit=100, rng=np.random.default_rng(0)),
        sorted_.uncovered_ids(limit=100, rng=np.random.default_rng(0)),
    )


@pytest.mark.parametrize("backend", ["bitmap", "sorted"])
def test_tracker_uncovered_ids(backend):
    tracker = CoverageTracker(10, [0, 1, 5, 9], backend=backend)
    np.testing.assert_array_equal(tracker.uncovered_ids(), [2, 3, 4, 6, 7, 8])
    np.testing.assert_array_equal(tracker.uncovered_ids(limit=2), [2, 3])
    np.testing.assert_array_equal(tracker.uncovered_ids(limit=50), [2, 3, 4, 6, 7, 8])
    sample = tracker.uncovered_ids(limit=3, rng=np.random.default_rng(0))
    assert sample.size == 3 and set(sample) <= {2, 3, 4, 6, 7, 8} and np.all(np.diff(sample) > 0)
    np.testing.assert_array_equal(sample, tracker.uncovered_ids(limit=3, rng=np.random.default_rng(0)))


def test_tracker_uncovered_ids_huge_total():
    tracker = CoverageTracker(2**62, [0, 1, 5, 2**62 - 1])
    np.testing.assert_array_equal(tracker.uncovered_ids(limit=5), [2, 3, 4, 6, 7])
    sample = tracker.uncovered_ids(limit=1000, rng=np.random.default_rng(0))
    assert sample.size == 1000 and not np.isin(sample, [0, 1, 5, 2**62 - 1]).any()
    assert sample.min() >= 0 and sample.max() < 2**62
    with pytest.raises(ParameterError, match="pass limit"):
        tracker.uncovered_ids()


def test_tracker_rejects_bad_ids_and_parameters():
    tracker = CoverageTracker(10)
    with pytest.raises(InputError, match=r"in \[0, 10\).*the first 10 at position 1"):
        tracker.update([3, 10])
    with pytest.raises(InputError, match=r"in \[0, 10\)"):
        tracker.would_cover([-1])
    with pytest.raises(InputError, match="must be integers"):
        tracker.update(np.array([1.0, 2.0]))
    assert tracker.covered == 0  # a rejected batch changes nothing
    with pytest.raises(
        ParameterError, match=r"'total' parameter of CoverageTracker must be an int in the range \[1, 2\*\*62\]"
    ):
        CoverageTracker(0)
    with pytest.raises(ParameterError, match="'backend' parameter"):
        CoverageTracker(10, backend="dict")
    assert tracker.update([]).shape == (0,)


def test_tracker_with_combinations_end_to_end():
    combos = Combinations([[0.0, 1.0], [0.0, 10.0, 20.0]])
    tracker = CoverageTracker(combos.total)
    new = tracker.update(combos.ids(np.array([[0.0, 0.0], [0.1, 1.0], [1.0, 20.0]])))
    np.testing.assert_array_equal(new, [True, False, True])
    assert str(tracker.result()) == "IDC 33.3 % (2 of 6 combinations)"
