"""Analysis and coverage on Ray workers: the inputs in shards of whole relevance batches, mapped through
the model by actors that each load it once, reduced on the driver with the single-process functions.

- analysis: each worker runs :func:`idcgen.relevance.batch_totals` on its shards; the driver adds the
  per-batch sums in input order (:func:`idcgen.relevance.sum_totals`), ranks, gathers the m important
  neurons' activations from the workers (n x m floats), and clusters them as
  :func:`idcgen.analysis.analyze` does, which it runs with these passes;
- coverage: each worker maps its shards to combination ids; the driver puts them into one tracker.

See docs/design.md, "Scale-out on Ray".
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import numpy as np

from .cluster import LOCAL, ModelRecipe, cluster_workers, connect, fetch, hold_threads

#: shards per worker: enough for a progress bar and to even out a slow worker, few enough to cost nothing
SHARDS_PER_WORKER = 4


def shard_bounds(n: int, batch_size: int, workers: int, per_worker: int = SHARDS_PER_WORKER) -> list[tuple[int, int]]:
    """[start, stop) of each shard: whole batches of ``batch_size`` (the last one may be short), so every
    batch holds the inputs it holds in one process and the sums come out the same."""
    batches = math.ceil(n / batch_size)
    size = max(1, math.ceil(batches / (workers * per_worker))) * batch_size
    return [(start, min(start + size, n)) for start in range(0, n, size)]


class AnalysisWorker:
    """A Ray actor: the model, loaded once, and what its relevance passes kept for the gather."""

    def __init__(self, recipe: ModelRecipe, threads: int | None):
        hold_threads(threads)
        self.network = recipe.build()
        self._relevance = {}
        self._kept = {}
        self._bound = {}

    def ready(self) -> int:
        return os.getpid()

    def totals(self, shard, x, start, stop, layer, eps, batch_size, target, labels, keep):
        """The relevance pass over ``x[start:stop]``: per-batch (signed, abs, n used, predictions, None);
        with ``keep`` the layer's activations of the inputs used stay here for :meth:`activations`."""
        from ..relevance import Relevance, batch_totals
        key = (layer, eps, batch_size)
        if key not in self._relevance:
            self._relevance[key] = Relevance(self.network, layer=layer, eps=eps, batch_size=batch_size)
        part = slice(start, stop)
        batches = list(batch_totals(self._relevance[key], x[part], None if target is None else target[part],
                                    labels=None if labels is None else labels[part], keep_activations=keep))
        if keep:
            self._kept[shard] = np.concatenate([b[4] for b in batches])
        return [b[:4] + (None,) for b in batches]

    def activations(self, shard, x, start, stop, layer, neurons, rows):
        """(rows, m) activations of the important neurons: kept by the relevance pass, else a forward pass."""
        if shard in self._kept:
            return self._kept.pop(shard)[:, neurons]
        return self.network.activations(x[start:stop], layer, neurons, rows=rows)

    def forget(self) -> None:
        self._kept.clear()

    def _bind(self, analysis):
        key = (analysis.fingerprint, analysis.layer, tuple(int(n) for n in analysis.neurons), analysis.total)
        if key not in self._bound:
            self._bound[key] = analysis.bind(self.network)
        return self._bound[key]

    def ids(self, analysis, x, start, stop):
        """Combination ids of ``x[start:stop]``."""
        return self._bind(analysis).ids(x[start:stop])

    def file_ids(self, analysis, spec: str, load: dict):
        """Combination ids of the inputs of one shard file (or folder), read here, as the driver would."""
        from ..data import load_for_model
        _, x = load_for_model(spec, self.network.input_shape, n_classes=self.network.n_classes,
                              task=self.network.task, **load)
        bound = self._bind(analysis)
        bound.check_inputs(x, f"the inputs of {spec}")
        return bound.ids(x)


def _gather(ray, refs, sizes, progress):
    """Results of ``refs`` in their order; ``progress`` moves by each one's size as it arrives."""
    if progress is not None:
        pending = dict(zip(refs, sizes))
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                progress.update(pending.pop(ref))
    return fetch(ray, refs)


class RayPasses:
    """:class:`idcgen.analysis.LocalPasses` on a :class:`Workers` pool: the same two passes, sharded."""

    def __init__(self, pool: "Workers", network, layer: str, eps: float, x: np.ndarray):
        from ..relevance import batch_size_for
        self.pool, self.layer, self.eps = pool, layer, eps
        self.batch_size = batch_size_for(network)   # the single-process batches: the same sums
        self.x = pool.ray.put(np.ascontiguousarray(x))
        self.shards = shard_bounds(len(x), self.batch_size, len(pool.actors))

    def totals(self, target, *, labels, keep_activations, progress):
        from ..relevance import sum_totals
        ray = self.pool.ray
        target = None if target is None else ray.put(np.asarray(target))
        labels = None if labels is None else ray.put(np.asarray(labels))
        fetch(ray, [a.forget.remote() for a in self.pool.actors])
        refs = [self.pool.actor(i).totals.remote(i, self.x, start, stop, self.layer, self.eps, self.batch_size,
                                                 target, labels, keep_activations)
                for i, (start, stop) in enumerate(self.shards)]
        parts = _gather(ray, refs, [stop - start for start, stop in self.shards], progress)
        signed, absolute, n_used, predictions, _ = sum_totals([b for part in parts for b in part])
        return signed, absolute, n_used, predictions

    def activations(self, neurons: np.ndarray, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows)
        refs = [self.pool.actor(i).activations.remote(
                    i, self.x, start, stop, self.layer, np.asarray(neurons),
                    rows[(rows >= start) & (rows < stop)] - start)
                for i, (start, stop) in enumerate(self.shards)]
        found = fetch(self.pool.ray, refs)
        return np.concatenate(found) if found else np.zeros((0, len(neurons)), np.float32)


def network_of(model, *, task: str | None = None, safe_mode: bool = True, **convention):
    """(Network, input convention) of a model file, Keras model or Network, as the driver measures it."""
    from ..analysis import network_with_convention
    from ..models import Network, load_model
    if isinstance(model, (str, os.PathLike)):
        model = Network(load_model(Path(model), safe_mode=safe_mode), task=task)
    elif not isinstance(model, Network):
        model = Network(model, task=task)
    return network_with_convention(model, **convention)


class Workers:
    """A pool of Ray actors, each holding the model once; reuse it for several analyses and measurements.

    Parameters
    ----------
    model : a model file (.keras/.h5), a Keras model or a Network
    ray : "local" (default: start Ray on this machine), "auto" (the cluster ``ray start`` made), or an
        address such as ``ray://head:10001``; a Ray already initialised in this process is used as it is
    workers : actors to start (default: one per GPU of the cluster, else one per CPU)
    threads : TensorFlow intra-op threads (and CPUs reserved) per worker, default 1
    value_range, preprocess, image_shape, recorded : the input convention, as for :func:`idcgen.analyze`
    task, safe_mode : as for :class:`idcgen.Network` and :func:`idcgen.load_model`
    """

    def __init__(self, model, *, ray: str | None = LOCAL, workers: int | None = None, threads: int = 1,
                 value_range=None, preprocess=None, image_shape=None, recorded=None, task: str | None = None,
                 safe_mode: bool = True, what: str = "idcgen.distributed"):
        from ..checks import check_int
        self.ray, self._started = connect(ray, what=what)
        check_int("threads", threads, 1)
        self.network, self.convention = network_of(model, task=task, safe_mode=safe_mode, value_range=value_range,
                                                   preprocess=preprocess, image_shape=image_shape, recorded=recorded)
        count, gpus = cluster_workers(self.ray, workers)
        recipe = self.ray.put(ModelRecipe.of(self.network, safe_mode=safe_mode))
        actor = self.ray.remote(AnalysisWorker).options(num_cpus=threads, num_gpus=gpus)
        self.actors = [actor.remote(recipe, threads) for _ in range(count)]
        self.pids = fetch(self.ray, [a.ready.remote() for a in self.actors])  # a model that fails, fails here

    def actor(self, shard: int):
        return self.actors[shard % len(self.actors)]

    def passes(self, network, layer, eps, x) -> RayPasses:
        return RayPasses(self, network, layer, eps, x)

    # ---- what it computes --------------------------------------------------------------------
    def analyze(self, x: np.ndarray, y: np.ndarray | None = None, **kwargs):
        """:func:`idcgen.analyze` of this pool's model with its passes over ``x`` on the workers."""
        from ..analysis import analyze
        return analyze(self.network, x, y, passes=self.passes, **kwargs)

    def tracker(self, analysis, x: np.ndarray, *, progress: bool = False):
        """The coverage tracker of ``x`` (ids mapped on the workers, merged here)."""
        from tqdm.auto import tqdm
        from ..coverage import CoverageTracker
        from ..data import fit_to_model
        analysis.bind(self.network)
        x = fit_to_model(np.asarray(x), self.network.input_shape)
        analysis.check_inputs(x)
        light = self.ray.put(dataclasses.replace(analysis, network=None))
        xs = self.ray.put(np.ascontiguousarray(x))
        shards = shard_bounds(len(x), self.network.batch_size, len(self.actors))
        refs = [self.actor(i).ids.remote(light, xs, start, stop) for i, (start, stop) in enumerate(shards)]
        tracker = CoverageTracker(analysis.total)
        with tqdm(total=len(x), desc="coverage", unit="input", disable=not progress, leave=False) as bar:
            for ids in _gather(self.ray, refs, [b - a for a, b in shards], bar):
                tracker.update(ids)
        return tracker

    def tracker_of_files(self, analysis, specs, *, scale: str = "auto", resize=None, class_names=None, crop=None,
                         progress: bool = False):
        """(coverage tracker, number of inputs) of shard files or folders that the workers read themselves
        (each one a shard: no input passes through the driver; on a cluster the paths must reach every node)."""
        from tqdm.auto import tqdm
        from ..coverage import CoverageTracker
        analysis.bind(self.network)
        load = dict(scale=scale, value_range=tuple(self.convention.value_range), resize=resize,
                    class_names=class_names, crop=crop)
        light = self.ray.put(dataclasses.replace(analysis, network=None))
        specs = [str(spec) for spec in specs]
        refs = [self.actor(i).file_ids.remote(light, spec, load) for i, spec in enumerate(specs)]
        tracker, n = CoverageTracker(analysis.total), 0
        with tqdm(total=len(specs), desc="coverage", unit="shard", disable=not progress, leave=False) as bar:
            for ids in _gather(self.ray, refs, [1] * len(refs), bar):
                tracker.update(ids)
                n += len(ids)
        return tracker, n

    def coverage(self, analysis, x: np.ndarray, *, progress: bool = False):
        """IDC of ``x``, as ``analysis.coverage(x)`` gives it in one process."""
        return self.tracker(analysis, x, progress=progress).result()

    # ---- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the actors (and the Ray this pool started)."""
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []
        if self._started:
            self.ray.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def analyze(model, x: np.ndarray, y: np.ndarray | None = None, *, ray: str | None = LOCAL,
            workers: int | None = None, threads: int = 1, value_range=None, preprocess=None, image_shape=None,
            task: str | None = None, safe_mode: bool = True, **kwargs):
    """:func:`idcgen.analyze` with its passes over ``x`` on Ray workers; the same analysis (the same important
    neurons and k, centroids up to the order of float sums, docs/design.md "Scale-out on Ray")."""
    with Workers(model, ray=ray, workers=workers, threads=threads, value_range=value_range, preprocess=preprocess,
                 image_shape=image_shape, task=task, safe_mode=safe_mode) as pool:
        return pool.analyze(x, y, **kwargs)   # bound to the driver's copy of the model


def coverage(analysis, model, x: np.ndarray, *, ray: str | None = LOCAL, workers: int | None = None,
             threads: int = 1, task: str | None = None, safe_mode: bool = True):
    """IDC of ``x`` measured on Ray workers: the same covered set as ``analysis.coverage(x)``."""
    recorded = dataclasses.replace(analysis.convention, image_shape=None)
    with Workers(model, ray=ray, workers=workers, threads=threads, recorded=recorded, task=task,
                 safe_mode=safe_mode) as pool:
        return pool.coverage(analysis, x)
