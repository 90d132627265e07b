"""The input sets of the paper's RQ2-RQ4: U_O and U_O plus perturbed or adversarial copies."""

from __future__ import annotations

import numpy as np

#: set name -> mutator spec producing the added copies (paper / project-page parameters, inputs in [0, 1])
PERTURBATIONS = {
    "U_O+S": "random_pixels(fraction=0.02, std=0.75)",  # RQ2: random pixels (control)
    "U_O+DI": "relevant_pixels(fraction=0.02, std=0.75)",  # RQ2: the most relevant pixels
    "U_O+noise": "gauss(std=0.3)",  # RQ3: Gaussian noise on all pixels
    "U_O+FGSM": "fgsm(eps=0.3)",
    "U_O+BIM": "bim(eps=0.3, eps_iter=0.05, nb_iter=10)",
    "U_O+JSMA": "jsma(theta=1.0, gamma=1.0)",
    "U_O+CW": "cw(confidence=0.0, lr=0.1, binary_search_steps=5, max_iterations=100)",
}


def perturbed(network, x: np.ndarray, y: np.ndarray, spec: str, *, random_state: int, batch: int = 500):
    """Copies of ``x`` made by the mutator ``spec`` (batched, with a progress bar)."""
    from tqdm.auto import tqdm

    from idcgen.fuzz.mutators import MutationContext, make_mutator

    mutator = make_mutator(spec)
    rng = np.random.default_rng(random_state)
    parts = []
    for start in tqdm(range(0, len(x), batch), desc=spec.split("(")[0], leave=False):
        ctx = MutationContext(network=network, labels=y[start : start + batch], value_range=(0.0, 1.0))
        parts.append(mutator.mutate(x[start : start + batch], rng, ctx))
    return np.concatenate(parts)
