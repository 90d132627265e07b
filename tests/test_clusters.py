"""Tests of idcgen.clusters: exact 1-D silhouette, 1-D k-means, per-neuron clustering."""

import json

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.metrics import silhouette_score

from idcgen.clusters import (
    NeuronClusters,
    cluster_neuron,
    kmeans_1d,
    nearest_centroid,
    parse_cluster_range,
    silhouette_1d,
)
from idcgen.errors import InputError, ParameterError


def sk_silhouette(x, labels):
    return silhouette_score(np.asarray(x, dtype=float).reshape(-1, 1), labels)


def nearest_labels(x, centroids):
    """Nearest-centroid labels the slow way (argmin: ties to the lower centroid)."""
    centroids = np.sort(centroids)
    return np.argmin(np.abs(x[:, None] - centroids[None, :]), axis=1)


# ------------------------------------------------------------------ silhouette_1d


def test_silhouette_hand_example():
    # values [0, 1, 10, 11], clusters {0, 1} and {10, 11}; a(i) = 1 for every point.
    #   x=0:  b = (10 + 11) / 2 = 10.5, s = (10.5 - 1) / 10.5 = 19/21
    #   x=1:  b = ( 9 + 10) / 2 =  9.5, s = ( 9.5 - 1) /  9.5 = 17/19
    #   x=10: b = (10 +  9) / 2 =  9.5, s = 17/19
    #   x=11: b = (11 + 10) / 2 = 10.5, s = 19/21
    # mean = (19/21 + 17/19) / 2 = 359/399 = 0.899749...
    assert silhouette_1d(np.array([0.0, 1.0, 10.0, 11.0]), np.array([0, 0, 1, 1])) == pytest.approx(
        359 / 399, abs=1e-15
    )


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_silhouette_matches_sklearn_random(seed, k):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 2001))
    x = rng.normal(size=n) * rng.uniform(0.1, 50) + rng.uniform(-100, 100)
    labels = nearest_labels(x, rng.choice(x, size=k, replace=False))
    if len(np.unique(labels)) < 2:
        pytest.skip(
            f"this draw put every point nearest one centre (n={n}, k={k}): the silhouette is "
            "undefined for one cluster, so there is nothing to compare"
        )
    assert silhouette_1d(x, labels) == pytest.approx(sk_silhouette(x, labels), abs=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_silhouette_matches_sklearn_with_ties(seed):
    rng = np.random.default_rng(100 + seed)
    x = rng.integers(0, 8, size=int(rng.integers(50, 1500))).astype(float)  # many repeats
    k = int(rng.integers(2, 6))
    labels = nearest_labels(x, rng.choice(np.unique(x), size=k, replace=False))
    assert silhouette_1d(x, labels) == pytest.approx(sk_silhouette(x, labels), abs=1e-9)


def test_silhouette_singletons_and_two_point_clusters():
    x = np.array([0.0, 0.1, 5.0, 5.3, 9.0, 20.0, 21.0, 21.5, 22.0, 50.0])
    labels = nearest_labels(x, np.array([0.05, 5.1, 9.0, 21.0, 50.0]))  # 2, 2, 1, 4, 1 points
    assert sorted(np.bincount(labels)) == [1, 1, 2, 2, 4]
    assert silhouette_1d(x, labels) == pytest.approx(sk_silhouette(x, labels), abs=1e-12)
    # two-point clusters only
    x2 = np.array([0.0, 1.0, 3.0, 4.5])
    assert silhouette_1d(x2, [0, 0, 1, 1]) == pytest.approx(sk_silhouette(x2, [0, 0, 1, 1]), abs=1e-12)


def test_silhouette_constant_clusters_score_zero_like_sklearn():
    # a(i) = b(i) = 0 cannot happen across clusters, but a = 0 within constant clusters gives s = 1.
    x = np.array([1.0, 1.0, 1.0, 2.0, 2.0, 7.0])
    labels = np.array([0, 0, 0, 1, 1, 2])
    assert silhouette_1d(x, labels) == pytest.approx(sk_silhouette(x, labels), abs=1e-12)


def test_silhouette_label_names_and_order_do_not_matter():
    x = np.array([0.0, 1.0, 1.0, 2.0, 7.0, 8.0])
    # equal values 1.0 straddle the boundary, and the cluster on the left has the larger label
    labels = np.array(["b", "b", "a", "a", "c", "c"])
    assert silhouette_1d(x, labels) == pytest.approx(sk_silhouette(x, labels), abs=1e-12)
    # {0, 1} and {1, 2}: intervals whose equal values straddle the boundary
    x2, labels2 = np.array([0.0, 1.0, 1.0, 2.0]), np.array([0, 1, 0, 1])
    assert silhouette_1d(x2, labels2) == pytest.approx(sk_silhouette(x2, labels2), abs=1e-12)
    shuffled = np.random.default_rng(0).permutation(6)
    assert silhouette_1d(x[shuffled], labels[shuffled]) == pytest.approx(silhouette_1d(x, labels), abs=1e-15)


def brute_force_silhouette(x, labels):
    """The definition, with |x_i - x_j| computed directly (no dot-product expansion)."""
    d = np.abs(x[:, None] - x[None, :])
    names = np.unique(labels)
    mean_to = np.stack([d[:, labels == c].sum(axis=1) / (labels == c).sum() for c in names], axis=1)
    own = np.searchsorted(names, labels)
    same = labels[:, None] == labels[None, :]
    size = same.sum(axis=1)
    a = (d * same).sum(axis=1) / np.maximum(size - 1, 1)
    mean_to[np.arange(x.size), own] = np.inf
    b = mean_to.min(axis=1)
    s = np.where(size > 1, (b - a) / np.maximum(a, b), 0.0)
    return s.mean()


def test_silhouette_large_offset_stays_exact():
    # sklearn's euclidean distances expand (x - y)^2 = x^2 + y^2 - 2xy and lose about 1e-5 here, so
    # the reference is the definition computed directly.
    rng = np.random.default_rng(3)
    x = 1e6 + rng.normal(size=1500)
    labels = nearest_labels(x, np.array([1e6 - 1, 1e6 + 1]))
    assert silhouette_1d(x, labels) == pytest.approx(brute_force_silhouette(x, labels), abs=1e-9)
    small = x[:300] - 1e6
    assert brute_force_silhouette(small, labels[:300]) == pytest.approx(sk_silhouette(small, labels[:300]), abs=1e-12)


def test_silhouette_non_contiguous_labels_raise():
    with pytest.raises(InputError, match="intervals of the sorted values"):
        silhouette_1d(np.array([0.0, 1.0, 2.0, 3.0]), np.array([0, 1, 0, 1]))
    # cluster 1 = {1.0} lies inside cluster 0 = {0.0, 1.0, 2.0}, although it shares a value with it
    with pytest.raises(InputError, match="overlap"):
        silhouette_1d(np.array([0.0, 1.0, 1.0, 2.0]), np.array([0, 1, 0, 0]))


@pytest.mark.parametrize(
    "labels, count",
    [([0, 0, 0, 0], 1), ([0, 1, 2, 3], 4)],
)
def test_silhouette_label_count_raises_like_sklearn(labels, count):
    with pytest.raises(ParameterError, match=f"Number of labels is {count}. Valid values are 2 to n_samples - 1"):
        silhouette_1d(np.array([0.0, 1.0, 2.0, 3.0]), np.array(labels))


def test_silhouette_bad_input_raises():
    with pytest.raises(InputError, match="finite"):
        silhouette_1d(np.array([0.0, np.nan, 2.0, 3.0]), np.array([0, 0, 1, 1]))
    with pytest.raises(InputError, match=r"labels must have shape \(4,\)"):
        silhouette_1d(np.array([0.0, 1.0, 2.0, 3.0]), np.array([0, 0, 1]))


# ------------------------------------------------------------------ kmeans_1d


def sklearn_inertia(x, k):
    return KMeans(n_clusters=k, n_init=10, random_state=0).fit(x.reshape(-1, 1)).inertia_


@pytest.mark.parametrize("k", [2, 3, 4, 5])
@pytest.mark.parametrize("kind", ["separated", "uniform"])
def test_kmeans_inertia_no_worse_than_sklearn(kind, k):
    rng = np.random.default_rng(k)
    if kind == "separated":
        x = np.concatenate([rng.normal(10.0 * c, 0.5, size=400) for c in range(k)])
    else:
        x = rng.uniform(-3, 3, size=2000)
    ours = kmeans_1d(x, k, rng=np.random.default_rng(0))
    assert ours.inertia <= sklearn_inertia(x, k) * (1 + 1e-6)
    assert ours.inertia == pytest.approx(np.sum((x - ours.centroids[ours.labels]) ** 2), rel=1e-12)


def test_kmeans_same_rng_same_result_and_sorted():
    x = np.random.default_rng(5).normal(size=3000)
    a = kmeans_1d(x, 4, rng=np.random.default_rng(7))
    b = kmeans_1d(x, 4, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(a.centroids, b.centroids)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert a.inertia == b.inertia
    assert np.all(np.diff(a.centroids) > 0)
    np.testing.assert_array_equal(a.labels, nearest_centroid(x, a.centroids))


def test_kmeans_centroids_are_cluster_means():
    x = np.random.default_rng(6).exponential(size=1000)
    result = kmeans_1d(x, 3, rng=np.random.default_rng(0))
    for j, c in enumerate(result.centroids):
        assert c == pytest.approx(x[result.labels == j].mean(), rel=1e-12)


def test_kmeans_k_equal_to_distinct_values_with_heavy_ties():
    x = np.array([0.0] * 200 + [1.0, 2.0])
    result = kmeans_1d(x, 3, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(result.centroids, [0.0, 1.0, 2.0])
    assert result.inertia == 0.0


def test_kmeans_parameter_errors():
    x = np.array([0.0, 0.0, 1.0])
    with pytest.raises(
        ParameterError, match=r"'k' parameter of kmeans_1d must be at most the number of distinct values \(2\)"
    ):
        kmeans_1d(x, 3, rng=np.random.default_rng(0))
    with pytest.raises(ParameterError, match=r"'k' parameter of kmeans_1d must be an int >= 1"):
        kmeans_1d(x, 0, rng=np.random.default_rng(0))
    with pytest.raises(ParameterError, match="'rng' parameter of kmeans_1d"):
        kmeans_1d(x, 2, rng=0)


def test_nearest_centroid_tie_goes_to_lower():
    np.testing.assert_array_equal(nearest_centroid([0.5, 1.5, 0.49, 0.51], np.array([0.0, 1.0, 2.0])), [0, 1, 0, 1])


# ------------------------------------------------------------------ cluster_neuron


def test_cluster_neuron_picks_three_blobs():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(c, 0.2, size=300) for c in (0.0, 4.0, 9.0)])
    result = cluster_neuron(x, neuron=7, rng=np.random.default_rng(0))
    assert result.k == 3 and result.neuron == 7
    np.testing.assert_allclose(result.centroids, [0.0, 4.0, 9.0], atol=0.05)
    assert set(result.scores) == {2, 3, 4, 5}
    assert result.silhouette == max(result.scores.values()) == result.scores[3]
    assert result.note is None


def test_cluster_neuron_constant():
    result = cluster_neuron(np.zeros(500), neuron=1, rng=np.random.default_rng(0))
    assert result.k == 1 and result.silhouette is None and result.scores == {}
    np.testing.assert_array_equal(result.centroids, [0.0])
    assert result.note == "constant activation 0: one cluster"


def test_cluster_neuron_two_distinct_values():
    x = np.array([0.0] * 90 + [2.5] * 10)
    result = cluster_neuron(x, neuron=0, rng=np.random.default_rng(0))
    assert result.k == 2
    np.testing.assert_array_equal(result.centroids, [0.0, 2.5])
    assert result.note == "only 2 distinct values: k limited to 2"
    assert result.silhouette == pytest.approx(1.0)


def test_cluster_neuron_fewer_distinct_values_than_every_k():
    x = np.array([0.0] * 50 + [1.0] * 50)
    result = cluster_neuron(x, neuron=0, ks=(3, 4), rng=np.random.default_rng(0))
    assert result.k == 2 and "fewer than the smallest k (3)" in result.note


def test_cluster_neuron_almost_constant_is_noted_not_dropped():
    x = np.zeros(10_000)
    x[:5] = [3.0, 3.1, 2.9, 7.0, 7.2]
    result = cluster_neuron(x, neuron=4, rng=np.random.default_rng(0))
    assert result.k >= 2
    assert "almost constant: 9995 of 10000 values equal 0" in result.note


def test_cluster_neuron_too_few_values():
    result = cluster_neuron(np.array([1.0, 3.0]), neuron=0, rng=np.random.default_rng(0))
    assert result.k == 1 and result.centroids[0] == 2.0 and "too few" in result.note


def test_cluster_neuron_same_rng_same_result():
    x = np.random.default_rng(2).gamma(2.0, size=2000)
    a = cluster_neuron(x, neuron=0, rng=np.random.default_rng(11))
    b = cluster_neuron(x, neuron=0, rng=np.random.default_rng(11))
    assert a == b


def test_cluster_neuron_nan_raises():
    with pytest.raises(InputError, match=r"neuron 3.*finite.*index 1"):
        cluster_neuron(np.array([0.0, np.nan, 1.0]), neuron=3, rng=np.random.default_rng(0))


@pytest.mark.parametrize("ks", [(), (1, 2), (2, 2.5), "2-5", (True, 3), 3])
def test_cluster_neuron_bad_ks(ks):
    with pytest.raises(
        ParameterError, match="The 'ks' parameter of cluster_neuron must be a non-empty sequence of ints >= 2"
    ):
        cluster_neuron(np.arange(10.0), neuron=0, ks=ks, rng=np.random.default_rng(0))


def test_neuron_clusters_dict_round_trip():
    x = np.random.default_rng(1).normal(size=300)
    result = cluster_neuron(x, neuron=2, rng=np.random.default_rng(0))
    assert NeuronClusters.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    with pytest.raises(ValueError):
        result.centroids[0] = 1.0  # read-only


# ------------------------------------------------------------------ parse_cluster_range


@pytest.mark.parametrize(
    "text, expected",
    [("2-5", (2, 3, 4, 5)), ("2,3,4", (2, 3, 4)), (" 3 ", (3,)), ("2-3, 6", (2, 3, 6)), ("4,2,4", (2, 4))],
)
def test_parse_cluster_range(text, expected):
    assert parse_cluster_range(text) == expected


@pytest.mark.parametrize("text", ["", "a", "5-2", "1-4", "2-", "2,,3", "-3", "2.5"])
def test_parse_cluster_range_bad(text):
    with pytest.raises(ParameterError, match="The cluster range must be integers >= 2"):
        parse_cluster_range(text)


def test_lloyd_reseeds_empty_clusters():
    from idcgen.clusters import _lloyd

    xs = np.sort(np.random.default_rng(4).uniform(0, 1, size=500))
    prefix = np.concatenate(([0.0], np.cumsum(xs)))
    # the first two centroids start far left of the data: their clusters are empty
    centroids = _lloyd(xs, prefix, np.array([-100.0, -99.0, 0.5]), max_iter=300, tol=0.0)
    assert centroids.size == 3 and np.all(np.diff(centroids) > 0)
    assert np.all((centroids > 0) & (centroids < 1))


# ------------------------------------------------------------------ silhouette_samples_1d


def test_silhouette_samples_match_sklearn_and_the_mean():
    from sklearn.metrics import silhouette_samples

    from idcgen.clusters import silhouette_samples_1d

    rng = np.random.default_rng(11)
    x = np.concatenate([np.zeros(40), rng.gamma(2.0, 1.0, 160)])
    rng.shuffle(x)
    labels = kmeans_1d(x, 3, rng=np.random.default_rng(0)).labels
    got = silhouette_samples_1d(x, labels)
    np.testing.assert_allclose(got, silhouette_samples(x.reshape(-1, 1), labels), atol=1e-9)
    assert silhouette_1d(x, labels) == pytest.approx(got.mean(), abs=1e-12)


# ------------------------------------------------------------------ zero-aware clusters

# The hand example: four exact zeros (a ReLU off on half the inputs) and two groups of positives.
HAND = np.array([0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 10.0, 11.0])


def test_paper_method_on_the_hand_example_picks_two_clusters():
    # k = 2: {0,0,0,0,1,2} (mean 0.5) and {10,11} (mean 10.5).
    #   each 0: a = (0+0+0+1+2)/5 = 0.6, b = 10.5        -> s = 9.9/10.5
    #   1: a = (1*4+1)/5 = 1, b = 9.5                      -> s = 8.5/9.5
    #   2: a = (2*4+1)/5 = 1.8, b = 8.5                    -> s = 6.7/8.5
    #   10: a = 1, b = 10 - 0.5 = 9.5                      -> s = 8.5/9.5
    #   11: a = 1, b = 10.5                                -> s = 9.5/10.5
    k2 = (4 * 9.9 / 10.5 + 8.5 / 9.5 + 6.7 / 8.5 + 8.5 / 9.5 + 9.5 / 10.5) / 8
    # k = 3: {0,0,0,0} {1,2} {10,11} (inertia 1, the least of any 3 intervals).
    #   each 0: a = 0 -> s = 1; 1: a = 1, b = |1 - 0| = 1 -> s = 0; 2: a = 1, b = 2 -> s = 1/2
    #   10: a = 1, b = 10 - 1.5 = 8.5 -> s = 7.5/8.5; 11: a = 1, b = 9.5 -> s = 8.5/9.5
    k3 = (4 * 1 + 0 + 0.5 + 7.5 / 8.5 + 8.5 / 9.5) / 8
    result = cluster_neuron(HAND, neuron=3, ks=(2, 3), rng=np.random.default_rng(0))
    assert result.scores == pytest.approx({2: k2, 3: k3}, abs=1e-12)
    assert k2 > k3 and result.k == 2
    np.testing.assert_allclose(result.centroids, [0.5, 10.5])


def test_zero_aware_on_the_hand_example():
    # positives [1, 2, 10, 11] alone. k = 2: {1,2} {10,11}; a = 1 for each point.
    #   1: b = (9+10)/2 = 9.5 -> 17/19;  2: b = (8+9)/2 = 8.5 -> 15/17; 10 and 11 mirror them.
    pos2 = (17 / 19 + 15 / 17) / 2
    # k = 3: {1,2} {10} {11} or its mirror {1} {2} {10,11} (equal inertia, equal score); singletons 0.
    #   1: a = 1, b = |1 - 10| = 9 -> 8/9;  2: a = 1, b = 8 -> 7/8
    pos3 = (8 / 9 + 7 / 8) / 4
    result = cluster_neuron(HAND, neuron=3, ks=(2, 3), rng=np.random.default_rng(0), method="zero-aware")
    # 1 + 2 clusters: the zeros, then the positives' means 1.5 and 10.5; the zero cluster's centroid is
    # stored as -1.5 so that the boundary between it and 1.5 is exactly 0.
    np.testing.assert_array_equal(result.centroids, [-1.5, 1.5, 10.5])
    assert result.k == 3
    assert result.scores == pytest.approx({3: pos2, 4: pos3}, abs=1e-12)
    assert result.silhouette == result.scores[3]
    assert "4 of 8 values exactly 0" in result.note


def test_zero_aware_assignment_agrees_with_coverage():
    from idcgen.coverage import Combinations

    result = cluster_neuron(HAND, neuron=0, ks=(2, 3), rng=np.random.default_rng(0), method="zero-aware")
    combos = Combinations([result.centroids])
    # the training values get the clusters that built the centroids: zeros, {1, 2}, {10, 11}
    np.testing.assert_array_equal(combos.assign(HAND[:, None])[:, 0], [0, 0, 0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal(nearest_centroid(HAND, result.centroids), [0, 0, 0, 0, 1, 1, 2, 2])
    # exactly 0 (and below) is the zero cluster; the tiniest positive value is active, however small
    probe = np.array([-0.5, -0.0, 0.0, 1e-30, 0.2, 0.75, 5.9, 6.1, 100.0])
    np.testing.assert_array_equal(combos.assign(probe[:, None])[:, 0], [0, 0, 0, 1, 1, 1, 1, 2, 2])


def test_zero_aware_keeps_the_paper_method_without_a_zero_mass():
    rng = np.random.default_rng(5)
    x = rng.gamma(2.0, 1.0, 300)
    x[:2] = 0.0  # 2 of 300 = 0.7 % exact zeros, below the 1 % for a zero cluster
    paper = cluster_neuron(x, neuron=1, rng=np.random.default_rng(0))
    variant = cluster_neuron(x, neuron=1, rng=np.random.default_rng(0), method="zero-aware")
    np.testing.assert_array_equal(variant.centroids, paper.centroids)
    assert variant.scores == paper.scores
    assert "2 of 300 values exactly 0, below the 1%" in variant.note
    # from 1 % on (3 of 300), the zeros get a cluster and the rest is clustered alone
    x[2] = 0.0
    variant = cluster_neuron(x, neuron=1, rng=np.random.default_rng(0), method="zero-aware")
    alone = cluster_neuron(x[x > 0], neuron=1, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(variant.centroids, np.concatenate(([-alone.centroids[0]], alone.centroids)))
    assert variant.scores == {k + 1: v for k, v in alone.scores.items()}
    # a lower threshold makes 2 zeros enough
    x[2] = 1.0
    low = cluster_neuron(x, neuron=1, rng=np.random.default_rng(0), method="zero-aware", min_zero_share=0.005)
    assert low.k == cluster_neuron(x[x > 0], neuron=1, rng=np.random.default_rng(0)).k + 1


def test_zero_aware_leaves_neurons_with_negative_values_to_the_paper_method():
    x = np.array([-3.0, -2.0, 0.0, 0.0, 0.0, 5.0, 6.0])
    paper = cluster_neuron(x, neuron=2, ks=(2, 3), rng=np.random.default_rng(0))
    variant = cluster_neuron(x, neuron=2, ks=(2, 3), rng=np.random.default_rng(0), method="zero-aware")
    np.testing.assert_array_equal(variant.centroids, paper.centroids)
    assert variant.note.startswith("zero-aware: 2 negative values")


def test_zero_aware_degenerate_neurons():
    rng = np.random.default_rng(0)
    dead = cluster_neuron(np.zeros(50), neuron=0, rng=rng, method="zero-aware")
    assert dead.k == 1 and dead.centroids.tolist() == [0.0] and "constant" in dead.note
    # on or off at one level: zero cluster + one positive cluster, boundary at 0
    two = cluster_neuron(np.array([0.0] * 5 + [2.0] * 5), neuron=0, rng=rng, method="zero-aware")
    assert two.centroids.tolist() == [-2.0, 2.0] and two.silhouette is None
    assert "constant activation 2" in two.note


def test_cluster_method_is_checked():
    with pytest.raises(ParameterError, match="The cluster method must be one of silhouette, zero-aware"):
        cluster_neuron(HAND, neuron=0, rng=np.random.default_rng(0), method="zeros")
    with pytest.raises(ParameterError, match="min_zero_share"):
        cluster_neuron(HAND, neuron=0, rng=np.random.default_rng(0), method="zero-aware", min_zero_share=0)


# ------------------------------------------------------------------ zero-aware through analyze, the CLI, find_analysis


@pytest.fixture(scope="module")
def relu_mlp(digits, tmp_path_factory):
    """Flatten - Dense(32, relu) 'fc' - Dense(10) - softmax, trained one epoch on 1,500 embedded digits."""
    import keras

    from idcgen.framework.keras_zoo import train

    keras.utils.set_random_seed(3)
    inputs = keras.Input((28, 28, 1))
    h = keras.layers.Dense(32, activation="relu", name="fc")(keras.layers.Flatten()(inputs))
    out = keras.layers.Activation("softmax")(keras.layers.Dense(10, name="logits")(h))
    model = keras.Model(inputs, out)
    x, y = digits[0][:1500], digits[1][:1500]
    train(model, x, y, epochs=1, optimizer="adam")
    path = tmp_path_factory.mktemp("mlp") / "mlp.keras"
    model.save(path)
    return model, path, x, y


def test_analyze_zero_aware_clusters_match_coverage(relu_mlp):
    from idcgen.analysis import Clustering, analyze

    model, _, x, y = relu_mlp
    paper = analyze(model, x, y, layer="fc", m=6, progress=False)
    variant = analyze(model, x, y, layer="fc", m=6, clusters=Clustering(method="zero-aware"), progress=False)
    assert paper.config["cluster_method"] == "silhouette" and variant.config["cluster_method"] == "zero-aware"
    np.testing.assert_array_equal(paper.neurons, variant.neurons)  # only the clustering differs
    acts = variant.activations(x)
    labels = variant.combinations.assign(acts)
    with_zero_cluster = 0
    for j, c in enumerate(variant.clusters):
        v = acts[:, j]
        if (v == 0).mean() < 0.01:
            continue
        with_zero_cluster += 1
        # the zero cluster holds exactly the inputs where the ReLU is off
        np.testing.assert_array_equal(labels[:, j] == 0, v == 0)
        # each positive centroid is the mean of the training values the coverage mapping gives it
        for i in range(1, c.k):
            assert c.centroids[i] == pytest.approx(v[labels[:, j] == i].mean(), rel=1e-6)
        assert c.k - 1 in range(1, 6) and c.silhouette == c.scores[c.k]
    assert with_zero_cluster >= 3, [float((acts[:, j] == 0).mean()) for j in range(variant.m)]


def test_cli_cluster_method(relu_mlp, tmp_path):
    from typer.testing import CliRunner

    from idcgen.cli import app

    _, path, x, y = relu_mlp
    np.savez(tmp_path / "train.npz", x=(x[..., 0] * 255).round().astype(np.uint8), y=y)
    out = tmp_path / "za"
    result = CliRunner().invoke(
        app,
        [
            "analyze",
            "--model",
            str(path),
            "--train",
            str(tmp_path / "train.npz"),
            "--layer",
            "fc",
            "--m",
            "4",
            "--cluster-method",
            "zero-aware",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    meta = json.loads((out / "analysis.json").read_text())
    assert meta["config"]["cluster_method"] == "zero-aware"
    assert any("zero cluster for" in (c["note"] or "") for c in meta["clusters"])
    bad = CliRunner().invoke(
        app,
        [
            "analyze",
            "--model",
            str(path),
            "--train",
            str(tmp_path / "train.npz"),
            "--cluster-method",
            "zeros",
            "--out",
            str(tmp_path / "bad"),
        ],
    )
    assert bad.exit_code == 1
    assert "error: The cluster method must be one of silhouette, zero-aware" in bad.output


def test_find_analysis_by_cluster_method(relu_mlp, tmp_path):
    import os

    from idcgen.analysis import Clustering, analyze, find_analysis
    from idcgen.framework import Network

    model, _, x, y = relu_mlp
    network = Network(model)
    analyze(network, x[:400], y[:400], layer="fc", m=3, progress=False).save(tmp_path / "paper")
    analyze(network, x[:400], y[:400], layer="fc", m=3, clusters=Clustering(method="zero-aware"), progress=False).save(
        tmp_path / "za"
    )
    os.utime(tmp_path / "paper" / "analysis.json", (1e9, 1e9))  # the zero-aware one is the newest
    newest, where, _ = find_analysis(network, [tmp_path])
    assert where.name == "za"
    found, where, _ = find_analysis(network, [tmp_path], cluster_method="silhouette")
    assert where.name == "paper" and found.config["cluster_method"] == "silhouette"
    found, where, _ = find_analysis(network, [tmp_path], cluster_method="zero-aware")
    assert where.name == "za"
