"""Inputs the Ray workers read and hold themselves, one shard per file, folder or Ray Data block, so the
training set never passes through (nor has to fit in) the driver's memory.

Each worker loads its shards as the driver would load one input set (:func:`idcgen.data.load_for_model`
with the same scale, resize, crop and class names; a Ray Data block is scaled like an array file) and
keeps them for the passes of an analysis (the relevance totals, then the m important neurons'
activations), a coverage measurement, or a forward pass of inspect/affinity. The driver receives only
what it reduces: per-shard sizes, labels (n ints), value ranges and digests. See docs/design.md,
"Scale-out on Ray".
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import itertools
import os
import re
from pathlib import Path

import numpy as np

from ..errors import InputError, ParameterError

_TOKENS = itertools.count()


def shard_files(pattern) -> list[str]:
    """The files or folders a pattern such as ``'shards/*.npz'`` names (sorted: the shards' order is the
    inputs' order), or a list of paths as given; one line if it names none."""
    if isinstance(pattern, (str, os.PathLike)):
        found = sorted(glob.glob(str(pattern)))
        if not found:
            raise InputError(
                f"no file or folder matches {str(pattern)!r}; give a pattern such as 'shards/*.npz' "
                "(quoted, so the shell leaves it to idcgen)"
            )
        return found
    found = [str(p) for p in pattern]
    if not found:
        raise InputError("no shard files given; give a pattern such as 'shards/*.npz' or a list of paths")
    return found


def is_ray_dataset(x) -> bool:
    """Whether ``x`` is a Ray Data dataset (without importing Ray Data when it is not)."""
    return any(
        c.__module__.startswith("ray.data") and c.__name__ in ("Dataset", "MaterializedDataset")
        for c in type(x).__mro__
    )


def read_shard(source, network, load: dict):
    """(x fitted to the model, labels or None) of one shard: a file or folder path, read as
    :func:`idcgen.data.load_for_model` reads it, or a Ray Data block (a dict of columns, or one array)."""
    from ..data import check_labels, fit_to_model, load_for_model, scale_inputs

    if isinstance(source, (str, os.PathLike)):
        options = {k: v for k, v in load.items() if k not in ("x_column", "y_column")}
        ds, x = load_for_model(source, network.input_shape, n_classes=network.n_classes, task=network.task, **options)
        return x, ds.y
    x_column, y_column = load.get("x_column"), load.get("y_column")
    if not isinstance(source, (dict, np.ndarray)):  # a Ray Data block (Arrow or pandas): its columns
        from ray.data.block import BlockAccessor

        source = BlockAccessor.for_block(source).to_numpy()
    if isinstance(source, dict):
        columns = sorted(source)
        if x_column is None:
            rest = [c for c in columns if c != y_column]
            if len(rest) != 1:
                raise InputError(f"the Ray dataset has columns {columns}; name the inputs' column (x_column=)")
            x_column = rest[0]
        for name in (x_column, y_column):
            if name is not None and name not in source:
                raise InputError(f"the Ray dataset has no column {name!r} (it has {columns})")
        x, y = np.asarray(source[x_column]), None if y_column is None else np.asarray(source[y_column])
    else:
        x, y = np.asarray(source), None
    x, _ = scale_inputs(x, load.get("scale", "none"), load.get("value_range", (0.0, 1.0)))
    x = fit_to_model(x, network.input_shape)
    if y is not None:
        y = check_labels(x, y, task="regression" if network.task == "regression" else "classification")
    return x, y


def folder_class_names(sources) -> tuple[str, ...] | None:
    """The sorted union of the class subfolder names of the image-folder shards, when they are named by
    words (None when integer-named, or no folder): every shard then labels a class as the others do,
    not by its index among its own subfolders (a shard lacking a class would shift the labels)."""
    from ..data import is_image_folder

    names = set()
    for source in sources:
        if isinstance(source, (str, os.PathLike)) and is_image_folder(source):
            names.update(
                p.name
                for p in Path(os.fspath(source)).expanduser().iterdir()
                if p.is_dir() and not p.name.startswith(".")
            )
    words = sorted(n for n in names if not re.fullmatch(r"\d+", n))
    if not words:
        return None
    if len(words) < len(names):
        number = min(n for n in names if n not in words)
        raise InputError(
            f"the shards' class subfolders mix integers ({number}) and other names ({words[0]}); "
            "name every folder by its class index, or give the class names in label order "
            "(--class-names)"
        )
    return tuple(words)


class ShardedInputs:
    """Inputs held by a :class:`~idcgen.distributed.workers.Workers` pool, shard ``i`` on actor ``i mod
    workers``: what :func:`idcgen.analyze` (``passes`` from the pool) and ``Workers.tracker`` take in place
    of an array. Make one with ``Workers.shards``; ``release()`` (or ``with``) frees the workers' copies."""

    #: what idcgen.analysis.analyze looks for: the inputs are on the workers, not in this process
    read_by_workers = True

    def __init__(self, pool, sources: list, names: list[str], load: dict, description: str):
        if not sources:
            raise InputError(f"{description} holds no inputs")
        self.pool, self.sources, self.names, self.load_options = pool, sources, names, dict(load)
        self.description = description
        self.class_names = load.get("class_names")  # the folders' classes by label (given, or their union)
        self.token = next(_TOKENS)
        self.sizes: list[int] | None = None
        self.y = None
        self.observed_range = None
        self.fingerprint = None
        self.shape = None
        self.selected = False  # some inputs dropped by select(): read again to measure them all

    # ---- the shards on the workers ---------------------------------------------------------------
    def key(self, i: int):
        return (self.token, i)

    def actor(self, i: int):
        return self.pool.actor(i)

    def __len__(self) -> int:
        return 0 if self.sizes is None else int(sum(self.sizes))

    @property
    def offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)

    def load(self):
        """Have the workers read their shards; returns the labels (n,) gathered here, or None. Refuses in
        one line a shard that cannot be read or fitted to the model (naming it), and shards of which some
        carry labels and some do not."""
        from .cluster import fetch

        if self.selected:  # an analysis of one class (only_class) kept only its inputs: read them all again
            self.release()
        if self.sizes is not None:
            return self.y
        refs = [
            self.actor(i).hold.remote(self.key(i), source, self.load_options) for i, source in enumerate(self.sources)
        ]
        found = fetch(self.pool.ray, refs)
        errors = [(name, f[1]) for name, f in zip(self.names, found) if f[0] == "error"]
        if errors:
            name, error = errors[0]
            more = f" ({len(errors) - 1} more shards refused)" if len(errors) > 1 else ""
            raise InputError(f"shard {name}: ", *error, more)
        facts = [f[1] for f in found]
        labelled = [f["y"] is not None for f in facts]
        if any(labelled) and not all(labelled):
            raise InputError(
                f"shard {self.names[labelled.index(False)]} has no labels but shard "
                f"{self.names[labelled.index(True)]} has: give every shard its labels, or none"
            )
        self.sizes = [f["n"] for f in facts]
        self.y = np.concatenate([f["y"] for f in facts]) if all(labelled) else None
        self.observed_range = (min(f["min"] for f in facts), max(f["max"] for f in facts))
        self.shape = facts[0]["shape"]
        digest = hashlib.blake2b(digest_size=4)  # of the shards' digests, in order: inputs and labels
        for f in facts:
            digest.update(f["digest"].encode())
        self.fingerprint = digest.hexdigest()
        self.classes_present = None if self.y is None else sorted(set(self.y.tolist()))
        return self.y

    def select(self, keep: np.ndarray) -> None:
        """Keep only the inputs where ``keep`` (n,) is true, on the workers (``only_class``)."""
        from .cluster import fetch

        bounds = self.offsets
        refs = [
            self.actor(i).select.remote(self.key(i), keep[bounds[i] : bounds[i + 1]]) for i in range(len(self.sources))
        ]
        facts = fetch(self.pool.ray, refs)
        self.selected = True
        self.sizes = [f["n"] for f in facts]
        self.y = None if self.y is None else self.y[keep]
        present = [f for f in facts if f["n"]]
        self.observed_range = (min(f["min"] for f in present), max(f["max"] for f in present)) if present else None

    def predict(self) -> np.ndarray:
        """The model's outputs of every input, in order (a regression model's MSE)."""
        from .cluster import fetch

        parts = fetch(self.pool.ray, [self.actor(i).predict_held.remote(self.key(i)) for i in range(len(self.sources))])
        return np.concatenate(parts)

    def passes(self, network, layer: str, eps: float, x=None) -> "ShardPasses":
        """The two passes of an analysis over these shards (what ``passes=`` of :func:`idcgen.analyze` takes)."""
        return ShardPasses(self, layer, eps)

    def summary(self) -> dict:
        """What an analysis records of its training inputs (like ``Dataset.summary``, counted on the workers)."""
        classes = self.y is not None and self.y.dtype.kind in "iu"
        labels, counts = np.unique(self.y, return_counts=True) if classes else ((), ())
        return {
            "source": self.description,
            "n": len(self),
            "shards": len(self.sources),
            "shape": None if self.shape is None else list(self.shape),
            "dtype": "float32",
            "scaling": f"scale={self.load_options.get('scale', 'none')} on each shard",
            "min": None if self.observed_range is None else self.observed_range[0],
            "max": None if self.observed_range is None else self.observed_range[1],
            "n_labels": 0 if self.y is None else len(self.y),
            "class_counts": None if not classes else {str(k): int(c) for k, c in zip(labels, counts)},
        }

    def release(self) -> None:
        """Free the workers' copies of the shards."""
        from .cluster import fetch

        if self.pool.actors:
            fetch(self.pool.ray, [a.drop.remote(self.token) for a in self.pool.actors])
        self.sizes, self.selected = None, False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class ShardPasses:
    """:class:`idcgen.analysis.LocalPasses` over shards the workers hold: each worker runs the relevance
    pass over its shards (batches from each shard's start); the driver adds the per-batch sums in shard
    order, then gathers the important neurons' activations of the rows it names."""

    def __init__(self, inputs: ShardedInputs, layer: str, eps: float):
        from ..relevance import batch_size_for

        self.inputs, self.layer, self.eps = inputs, layer, eps
        self.batch_size = batch_size_for(inputs.pool.network)

    def totals(self, target, *, labels, keep_activations, progress):
        from ..relevance import sum_totals
        from .cluster import fetch, gather

        inputs, ray = self.inputs, self.inputs.pool.ray
        bounds = inputs.offsets
        fetch(ray, [a.forget.remote() for a in inputs.pool.actors])

        def part(a, i):
            return None if a is None else np.asarray(a)[bounds[i] : bounds[i + 1]]

        refs = [
            inputs.actor(i).totals.remote(
                inputs.key(i),
                None,
                0,
                inputs.sizes[i],
                self.layer,
                self.eps,
                self.batch_size,
                part(target, i),
                part(labels, i),
                keep_activations,
            )
            for i in range(len(inputs.sources))
        ]
        parts = gather(ray, refs, inputs.sizes, progress)
        signed, absolute, n_used, predictions, _ = sum_totals([b for p in parts for b in p])
        return signed, absolute, n_used, predictions

    def activations(self, neurons: np.ndarray, rows: np.ndarray) -> np.ndarray:
        from .cluster import fetch

        inputs, rows = self.inputs, np.asarray(rows)
        bounds = inputs.offsets
        refs = [
            inputs.actor(i).activations.remote(
                inputs.key(i),
                None,
                0,
                inputs.sizes[i],
                self.layer,
                np.asarray(neurons),
                rows[(rows >= bounds[i]) & (rows < bounds[i + 1])] - bounds[i],
            )
            for i in range(len(inputs.sources))
        ]
        found = fetch(inputs.pool.ray, refs)
        return np.concatenate(found) if found else np.zeros((0, len(neurons)), np.float32)

    def clusters(self, acts, neurons, ks, method, random_state, progress):
        from .cluster import cluster_on

        return cluster_on(self.inputs.pool, acts, neurons, ks, method, random_state, progress)


@contextlib.contextmanager
def in_order(dataset):
    """``dataset`` computed with Ray Data's ``preserve_order`` (its blocks in the dataset's order, not in the
    order its tasks finish) inside the block; the dataset's own setting is put back after."""
    options = dataset.context.execution_options
    before = options.preserve_order
    options.preserve_order = True
    try:
        yield dataset
    finally:
        options.preserve_order = before


def sources_of(x, ray, *, x_column=None, y_column=None):
    """(sources, names, description, Ray Data options) of a pattern, a list of paths or a Ray dataset (its
    blocks' references: the workers convert them, no Ray Data task runs once the dataset is computed)."""
    if is_ray_dataset(x):
        if type(x).__name__ != "MaterializedDataset" and ray.available_resources().get("CPU", 0) < 1:
            raise ParameterError(
                "the Ray dataset is still to be computed and the workers hold every CPU of the "
                "cluster; call ds.materialize() before starting them, or start fewer workers"
            )
        with in_order(x):  # a lazy dataset computed here (free CPUs): its blocks in the dataset's order
            refs = [ref for bundle in x.iter_internal_ref_bundles() for ref in bundle.block_refs]
        return (
            refs,
            [f"block {i}" for i in range(len(refs))],
            f"Ray dataset ({len(refs)} blocks)",
            dict(x_column=x_column, y_column=y_column),
        )
    if x_column is not None or y_column is not None:
        raise ParameterError("x_column and y_column are for a Ray dataset; shard files carry x and y themselves")
    files = shard_files(x)
    description = str(x) if isinstance(x, (str, os.PathLike)) else f"{len(files)} shard files"
    return files, files, description, {}
