"""Finding a saved analysis of a model: the newest one with its weights fingerprint, layer and settings."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

from ..framework import Network
from .record import Analysis


def find_analysis(
    network: Network,
    folders: Sequence[str | os.PathLike],
    *,
    layer: str | None = None,
    m: int | None = None,
    cluster_method: str | None = None,
    clusters: Sequence[int] | None = None,
) -> tuple[Analysis | None, Path | None, list[Path]]:
    """Look for a saved analysis of this model (same weights fingerprint) in ``folders`` and their
    subfolders (with ``layer``, ``m``, ``cluster_method`` and the k values tried, ``clusters``, if given);
    returns the newest match and its folder (or None, None) and the folders searched."""
    fingerprint = network.fingerprint()
    digests: list[str | None] = []

    def digest():  # the same weights in another order (a TorchScript file of a .pt2): asked once, if needed
        if not digests:
            digests.append(network.weights_digest())
        return digests[0]

    wrapped_with = network.convention
    preprocess = None if wrapped_with is None or wrapped_with.preprocess is None else wrapped_with.preprocess.spec
    value_range = None if wrapped_with is None else [float(v) for v in wrapped_with.value_range]
    searched, matches = [], []
    for folder in map(Path, folders):
        searched.append(folder)
        if not folder.is_dir():
            continue
        for meta_path in list(folder.glob("analysis.json")) + list(folder.glob("*/analysis.json")):
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                continue
            if meta.get("model_fingerprint") != fingerprint and (
                meta.get("weights_digest") is None or meta["weights_digest"] != digest()
            ):
                continue
            if (layer and meta.get("layer") != layer) or (m is not None and meta.get("m") != m):
                continue
            config = meta.get("config", {})
            if cluster_method and config.get("cluster_method", "silhouette") != cluster_method:
                continue
            if clusters is not None and config.get("clusters") != [int(k) for k in clusters]:
                continue
            if config.get("only_class") is not None or config.get("correct_only"):
                continue  # only an all-classes analysis stands in for the model's
            recorded = config.get("input_convention") or {}
            if recorded.get("preprocess") != preprocess:
                continue  # made with other preprocessing between image and model
            if value_range is not None and [float(v) for v in recorded.get("value_range", (0, 1))] != value_range:
                continue  # made for images in another range
            matches.append(meta_path.parent)
    if not matches:
        return None, None, searched
    newest = max(matches, key=lambda p: (p / "analysis.json").stat().st_mtime)
    return Analysis.load(newest, model=network), newest, searched
