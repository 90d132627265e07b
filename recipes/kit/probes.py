"""The paper's RQ1 probe, shared by the MNIST and Udacity recipes: how far the activations of the important
neurons move, against as many random neurons of the layer, when 2 % of the pixels (the most relevant or
random ones) are perturbed."""

from __future__ import annotations

import numpy as np

from .sets import PERTURBATIONS
from .tables import mean_std

#: The four measurements: (which pixels were perturbed, which neurons were measured).
QUANTITIES = {
    "important_rel": ("relevant", "important"),
    "random_rel": ("relevant", "random"),
    "important_rand": ("random", "important"),
    "random_rand": ("random", "random"),
}


def l2_per_input(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n, k), (n, k) -> (n,) Euclidean distance between the rows."""
    return np.linalg.norm(a.astype(np.float64) - b.astype(np.float64), axis=1)


def random_neurons(width: int, important: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """m neuron indices drawn uniformly without replacement from the layer, excluding ``important``."""
    others = np.setdiff1d(np.arange(width), important)
    return rng.choice(others, size=m, replace=False)


def distances(
    network,
    layer: str,
    important: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    *,
    repetitions: int,
    rng: np.random.Generator,
    specs: dict | None = None,
) -> list[dict[str, np.ndarray]]:
    """Per repetition, the per-input L2 distances (n,) of each of the four QUANTITIES, and of the first
    two with every neuron's activation divided by its standard deviation over ``x`` (``*_scaled``).
    ``specs``: the U_O+DI and U_O+S mutator specs (default PERTURBATIONS, 2 % of the pixels)."""
    from idcgen.fuzz.mutators import MutationContext, make_mutator

    specs = specs or PERTURBATIONS
    mutators = {"relevant": make_mutator(specs["U_O+DI"]), "random": make_mutator(specs["U_O+S"])}
    ctx = MutationContext(network=network, labels=y)
    _, (original,) = network.forward(x, (layer,))
    width = original.shape[1]
    scale = original.std(axis=0)
    scale[scale == 0] = 1.0  # a constant neuron does not move: its distance is 0 whatever the scale
    runs = []
    for _ in range(repetitions):
        perturbed = {}
        for pixels, mutator in mutators.items():
            _, (perturbed[pixels],) = network.forward(mutator.mutate(x, rng, ctx), (layer,))
        neurons = {"important": important, "random": random_neurons(width, important, len(important), rng)}
        run = {
            name: l2_per_input(original[:, neurons[which]], perturbed[pixels][:, neurons[which]])
            for name, (pixels, which) in QUANTITIES.items()
        }
        for which in ("important", "random"):  # each neuron in units of its own spread over the inputs
            cols = neurons[which]
            run[f"{which}_rel_scaled"] = l2_per_input(
                original[:, cols] / scale[cols], perturbed["relevant"][:, cols] / scale[cols]
            )
        runs.append(run)
    return runs


def summary_row(name: str, layer: str, m: int, runs: list[dict], extra: dict | None = None) -> dict:
    means = {key: [run[key].mean() for run in runs] for key in QUANTITIES}
    return {
        "model": name,
        **(extra or {}),
        "layer": layer,
        "m": m,
        "L2 important (relevant pixels)": mean_std(means["important_rel"]),
        "L2 random neurons (relevant pixels)": mean_std(means["random_rel"]),
        "L2 important (random pixels)": mean_std(means["important_rand"]),
        "ratio": round(float(np.mean(means["important_rel"]) / np.mean(means["random_rel"])), 2),
        "L2 random neurons (random pixels)": mean_std(means["random_rand"]),
        "ratio (std-scaled)": round(
            float(
                np.mean([run["important_rel_scaled"].mean() for run in runs])
                / np.mean([run["random_rel_scaled"].mean() for run in runs])
            ),
            2,
        ),
        "inputs": len(runs[0]["important_rel"]),
    }
