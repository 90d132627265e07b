"""Exact 1-D silhouette against sklearn.metrics.silhouette_score, and the cost of clustering a neuron.

Run: python benchmarks/bench_silhouette.py
"""

import time

import numpy as np
from sklearn.metrics import silhouette_score

from idcgen.clusters import cluster_neuron, kmeans_1d, silhouette_1d
from record import record


def mixture(rng: np.random.Generator, n: int) -> np.ndarray:
    """n values from a mixture of 3 Gaussians."""
    parts = rng.multinomial(n, [0.5, 0.3, 0.2])
    return rng.permutation(
        np.concatenate([rng.normal(mu, sd, size=p) for p, mu, sd in zip(parts, (0.0, 3.0, 7.0), (1.0, 0.7, 1.5))])
    )


def best_of(repeats: int, fn):
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return min(times), value


def main() -> None:
    rng = np.random.default_rng(0)
    x = mixture(rng, 20_000)
    labels = kmeans_1d(x, 3, rng=rng).labels
    ours_s, ours = best_of(5, lambda: silhouette_1d(x, labels))
    sk_s, sk = best_of(1, lambda: silhouette_score(x.reshape(-1, 1), labels))
    print(f"silhouette, n = {x.size:,}, k = 3")
    print(f"  silhouette_1d (best of 5): {ours_s * 1e3:10.2f} ms   score {ours:.15f}")
    print(f"  sklearn silhouette_score : {sk_s * 1e3:10.2f} ms   score {sk:.15f}")
    print(f"  speed-up {sk_s / ours_s:,.0f}x   |difference| {abs(ours - sk):.2e}")
    record("silhouette_1d (best of 5)", ours_s, unit="s", n=x.size, k=3)
    record("sklearn silhouette_score", sk_s, unit="s", n=x.size, k=3)
    record("silhouette |difference| to sklearn", abs(ours - sk), n=x.size, k=3)

    big = mixture(rng, 60_000)
    seconds, result = best_of(1, lambda: cluster_neuron(big, neuron=0, ks=(2, 3, 4, 5), rng=rng))
    scores = ", ".join(f"k={k}: {s:.4f}" for k, s in result.scores.items())
    print(f"cluster_neuron, n = {big.size:,}, ks 2-5: {seconds:.3f} s; chose k = {result.k} ({scores})")
    record("cluster_neuron", seconds, unit="s", n=big.size, ks="2-5", chose=result.k)


if __name__ == "__main__":
    main()
