"""Analysis and coverage on Ray workers: the inputs in shards of whole relevance batches, mapped through
the model by actors that each load it once, reduced on the driver with the single-process functions.

- analysis: each worker runs :func:`idcgen.relevance.batch_totals` on its shards; the driver adds the
  per-batch sums in input order (:func:`idcgen.relevance.sum_totals`), ranks, gathers the m important
  neurons' activations from the workers (n x m floats), and clusters them as
  :func:`idcgen.analysis.analyze` does, which it runs with these passes;
- coverage: each worker maps its shards to combination ids; the driver puts them into one tracker;
- the inputs: an array sent through the object store, or shards the workers read and hold themselves
  (:mod:`idcgen.distributed.shards`); inspect and affinity run on the same pool
  (:mod:`idcgen.distributed.measures`).

See docs/design.md, "Scale-out on Ray".
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from .actor import CoverageIds, HeldInputs, MeasurePasses, RelevancePasses
from .cluster import (
    LOCAL,
    ModelRecipe,
    cluster_on,
    cluster_workers,
    connect,
    fetch,
    gather,
    hold_threads,
    network_of,
    shard_bounds,
)


class AnalysisWorker(HeldInputs, RelevancePasses, CoverageIds, MeasurePasses):
    """A Ray actor: the model, loaded once, and what its passes keep for the next call (the concerns are the
    mixins of :mod:`idcgen.distributed.actor`)."""

    def __init__(self, recipe: ModelRecipe, threads: int | None):
        hold_threads(threads)
        self.network = recipe.build()
        self.kept = {}  # a relevance pass's activations per shard, inspect's per ("inspect", shard)
        HeldInputs.__init__(self)
        RelevancePasses.__init__(self)
        CoverageIds.__init__(self)

    def ready(self) -> int:
        return os.getpid()

    def forget(self) -> None:
        self.kept.clear()


class RayPasses:
    """:class:`idcgen.analysis.LocalPasses` on a :class:`Workers` pool: the same two passes, sharded."""

    def __init__(self, pool: "Workers", network, layer: str, eps: float, x: np.ndarray):
        from ..relevance import batch_size_for

        self.pool, self.layer, self.eps = pool, layer, eps
        self.batch_size = batch_size_for(network)  # the single-process batches: the same sums
        self.x, self.parts = x, {}
        self.shards = shard_bounds(len(x), self.batch_size, len(pool.actors))

    def part(self, shard: int):
        """The object-store copy of one shard's inputs, made when first needed: the first shard goes to its
        worker while the driver still copies the next (one copy of all inputs took 0.26 s for 10,000
        CIFAR-10 images, time the workers waited)."""
        if shard not in self.parts:
            start, stop = self.shards[shard]
            self.parts[shard] = self.pool.ray.put(np.ascontiguousarray(self.x[start:stop]))
        return self.parts[shard]

    def totals(self, target, *, labels, keep_activations, progress):
        from ..relevance import sum_totals

        ray = self.pool.ray
        fetch(ray, [a.forget.remote() for a in self.pool.actors])

        def cut(a, start, stop):  # a shard's labels or targets (small: sent with the call)
            return None if a is None else np.asarray(a)[start:stop]

        refs = [
            self.pool.actor(i).totals.remote(
                i,
                self.part(i),
                0,
                stop - start,
                self.layer,
                self.eps,
                self.batch_size,
                cut(target, start, stop),
                cut(labels, start, stop),
                keep_activations,
            )
            for i, (start, stop) in enumerate(self.shards)
        ]
        parts = gather(ray, refs, [stop - start for start, stop in self.shards], progress)
        signed, absolute, n_used, predictions, _ = sum_totals([b for found in parts for b in found])
        return signed, absolute, n_used, predictions

    def activations(self, neurons: np.ndarray, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows)
        refs = [
            self.pool.actor(i).activations.remote(
                i,
                self.part(i),
                0,
                stop - start,
                self.layer,
                np.asarray(neurons),
                rows[(rows >= start) & (rows < stop)] - start,
            )
            for i, (start, stop) in enumerate(self.shards)
        ]
        found = fetch(self.pool.ray, refs)
        return np.concatenate(found) if found else np.zeros((0, len(neurons)), np.float32)

    def clusters(self, acts, neurons, ks, method, random_state, progress):
        return cluster_on(self.pool, acts, neurons, ks, method, random_state, progress)


class Workers:
    """A pool of Ray actors, each holding the model once; reuse it for several analyses and measurements.

    Parameters
    ----------
    model : a model file (.keras/.h5), a Keras model or a Network
    ray : "local" (default: start Ray on this machine), "auto" (the cluster ``ray start`` made), or an
        address such as ``ray://head:10001``; a Ray already initialised in this process is used as it is
    workers : actors to start (default: one per GPU of the cluster, else one per CPU; one per CPU when the model
        was placed on the CPU)
    threads : TensorFlow intra-op threads (and CPUs reserved) per worker, default 1
    value_range, preprocess, image_shape, recorded : the input convention, as for :func:`idcgen.analyze`
    task, safe_mode : as for :class:`idcgen.Network` and :func:`idcgen.load_model`
    gpus_per_worker : each actor's share of a GPU (default: the cluster's GPUs spread over the workers); a
        worker with a share runs its model on its own GPU
    """

    def __init__(
        self,
        model,
        *,
        ray: str | None = LOCAL,
        workers: int | None = None,
        threads: int = 1,
        value_range=None,
        preprocess=None,
        image_shape=None,
        recorded=None,
        task: str | None = None,
        safe_mode: bool = True,
        what: str = "idcgen.distributed",
        gpus_per_worker: float | None = None,
    ):
        from ..checks import check_int

        self.ray, self._started = connect(ray, what=what)
        check_int("threads", threads, 1)
        self.network, self.convention = network_of(
            model,
            task=task,
            safe_mode=safe_mode,
            value_range=value_range,
            preprocess=preprocess,
            image_shape=image_shape,
            recorded=recorded,
        )
        self.address, self.safe_mode, self.gpus_per_worker, self.threads = ray, safe_mode, gpus_per_worker, threads
        on_gpus = getattr(self.network, "device_asked", "auto") != "cpu"  # cpu keeps the workers on their CPUs
        self.count, self._gpus = cluster_workers(self.ray, workers, gpus_per_worker, on_gpus=on_gpus)
        self.where = f" on {self.count} Ray workers"  # what a line about the work adds
        # taken now: the network's precision while a pass runs (an analysis' fp32) is not the pool's
        self._recipe = ModelRecipe.of(self.network, safe_mode=safe_mode)
        self._actors: list | None = None
        self._pids: list = []

    @property
    def actors(self) -> list:
        """The actors, each holding the model, started on first use (a model that fails, fails there): a pool
        whose work is a parallel campaign, which runs actors of its own, starts none."""
        if self._actors is None:
            recipe = self.ray.put(self._recipe)
            actor = self.ray.remote(AnalysisWorker).options(num_cpus=self.threads, num_gpus=self._gpus)
            started = [actor.remote(recipe, self.threads) for _ in range(self.count)]
            try:
                self._pids = fetch(self.ray, [a.ready.remote() for a in started])
            except BaseException:
                for a in started:
                    self.ray.kill(a)
                raise
            self._actors = started
        return self._actors

    @property
    def pids(self) -> list:
        """The actors' process ids (started if they were not)."""
        return self._pids if self.actors else []

    def actor(self, shard: int):
        return self.actors[shard % len(self.actors)]

    def passes(self, network, layer, eps, x):
        """The passes of an analysis over ``x``: an array sent to the workers, or shards they hold."""
        if getattr(x, "read_by_workers", False):
            return x.passes(network, layer, eps)
        return RayPasses(self, network, layer, eps, x)

    def shards(
        self,
        source,
        *,
        scale: str = "auto",
        resize=None,
        class_names=None,
        crop=None,
        labels=None,
        x_column: str | None = None,
        y_column: str | None = None,
    ):
        """:class:`~idcgen.distributed.shards.ShardedInputs` the workers read themselves: a pattern such as
        ``'shards/*.npz'`` (``.npz``/``.npy`` files or image folders, one a shard, in sorted order), a list of
        paths, or a Ray Data dataset (one shard per block; ``x_column``/``y_column`` name its columns, by
        default its one column; ``scale`` as for files, "auto" maps uint8 0..255 onto the model's range).
        Loaded as ``idcgen.load_for_model`` loads one input set (on a cluster the paths must reach every node)."""
        from .shards import ShardedInputs, folder_class_names, sources_of

        sources, names, description, options = sources_of(source, self.ray, x_column=x_column, y_column=y_column)
        load = dict(scale=scale, value_range=tuple(self.convention.value_range), **options)
        if not options:  # files and folders: word-named class subfolders labelled alike in every shard
            from ..data import parse_class_names

            class_names = parse_class_names(class_names) or folder_class_names(sources)
            load.update(resize=resize, class_names=class_names, crop=crop, labels=labels)
        return ShardedInputs(self, sources, names, load, description)

    def _held(self, x, **load):
        """(ShardedInputs, whether made here) for a pattern, list of paths or Ray dataset; else (x, False)."""
        from .shards import is_ray_dataset

        if getattr(x, "read_by_workers", False):
            return x, False
        paths = isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(p, (str, os.PathLike)) for p in x)
        if isinstance(x, (str, os.PathLike)) or paths or is_ray_dataset(x):
            return self.shards(x, **load), True
        return x, False  # an array, or a Python list of images

    # ---- what it computes --------------------------------------------------------------------
    def analyze(self, x, y: np.ndarray | None = None, *, scale: str = "auto", x_column=None, y_column=None, **kwargs):
        """:func:`idcgen.analyze` of this pool's model with its passes over ``x`` on the workers: an array
        (sent to them), or shards they read themselves (a pattern, a list of paths, a Ray Data dataset or
        :meth:`shards`; their labels are the shards' own)."""
        from ..analysis import analyze

        x, made = self._held(x, scale=scale, x_column=x_column, y_column=y_column)
        try:
            return analyze(self.network, x, y, passes=self.passes, **kwargs)
        finally:
            if made:
                x.release()

    def tracker(self, analysis, x, *, progress: bool = False, scale: str = "auto", x_column=None, y_column=None):
        """The coverage tracker of ``x`` (ids mapped on the workers, merged here): an array, or shards the
        workers read themselves (as for :meth:`analyze`)."""
        from tqdm.auto import tqdm

        from ..coverage import CoverageTracker
        from ..data import fit_to_model

        analysis.bind(self.network)
        held, made = self._held(x, scale=scale, x_column=x_column, y_column=y_column)
        if getattr(held, "read_by_workers", False):
            try:
                return self._held_tracker(analysis, held, progress)
            finally:
                if made:
                    held.release()
        x = fit_to_model(np.asarray(x), self.network.input_shape)
        analysis.check_inputs(x)
        light = self.ray.put(dataclasses.replace(analysis, network=None))
        xs = self.ray.put(np.ascontiguousarray(x))
        shards = shard_bounds(len(x), self.network.batch_size, len(self.actors))
        refs = [self.actor(i).ids.remote(light, xs, start, stop) for i, (start, stop) in enumerate(shards)]
        tracker = CoverageTracker(analysis.total)
        with tqdm(total=len(x), desc="coverage", unit="input", disable=not progress, leave=False) as bar:
            for ids in gather(self.ray, refs, [b - a for a, b in shards], bar):
                tracker.update(ids)
        return tracker

    def _held_tracker(self, analysis, inputs, progress: bool):
        from tqdm.auto import tqdm

        from ..coverage import CoverageTracker

        inputs.load()
        light = self.ray.put(dataclasses.replace(analysis, network=None))
        refs = [
            inputs.actor(i).held_ids.remote(light, inputs.key(i), f"the inputs of shard {name}")
            for i, name in enumerate(inputs.names)
        ]
        tracker = CoverageTracker(analysis.total)
        with tqdm(total=len(inputs), desc="coverage", unit="input", disable=not progress, leave=False) as bar:
            for ids in gather(self.ray, refs, inputs.sizes, bar):
                tracker.update(ids)
        return tracker

    def inspect(self, x, y=None, *, scale: str = "auto", x_column=None, y_column=None, **kwargs):
        """:func:`idcgen.inspect` of this pool's model with its forward passes on the workers (per-class counts
        summed here): ``x`` an array or shards the workers read themselves (as for :meth:`analyze`)."""
        from ..deepinspect import inspect
        from .measures import inspect_counting

        x, made = self._held(x, scale=scale, x_column=x_column, y_column=y_column)
        try:
            return inspect(self.network, x, y, counting=inspect_counting(self), **kwargs)
        finally:
            if made:
                x.release()

    def affinity(self, x, y=None, **kwargs):
        """:func:`idcgen.affinity` of this pool's model over the array ``x`` with the forward pass on the workers
        (units' activations and outputs gathered; the hypotheses, functions of ``x``, run here)."""
        from ..data import fit_to_model
        from ..deepbase import affinity
        from .measures import affinity_forward

        x = fit_to_model(x, self.network.input_shape)
        gathered = {}

        def forward(rows, layers):
            if tuple(layers) not in gathered:
                gathered[tuple(layers)] = affinity_forward(self, x, layers, self.network.batch_size)
            outputs, taps = gathered[tuple(layers)]
            return outputs[rows], [t[rows] for t in taps]

        return affinity(self.network, x, y, forward=forward, **kwargs)

    def coverage(self, analysis, x, *, progress: bool = False, **load):
        """IDC of ``x`` (an array or shards, as for :meth:`tracker`), as ``analysis.coverage(x)`` gives it."""
        return self.tracker(analysis, x, progress=progress, **load).result()

    # ---- campaigns ---------------------------------------------------------------------------
    def fuzz(self, fuzzer, x_seeds, y_seeds, out, *, echo, progress: bool = True):
        """``self.count`` campaigns of ``fuzzer``'s settings in ``out`` that share what they cover
        (:func:`idcgen.distributed.parallel.fuzz`), merged; an :class:`idcgen.executor.Fuzzed` of the merged
        view, or None if interrupted."""
        from .parallel import PARALLEL_NOT_REPRODUCIBLE

        echo(
            f"campaign: {out} ({self.count} workers on Ray, {self.address or 'local'}; each in {out}/worker-<i>, "
            f"merged in {out}/merged)"
        )
        echo(f"note: {PARALLEL_NOT_REPRODUCIBLE}")
        return self._campaigns(fuzzer, x_seeds, y_seeds, out, echo)

    def resume(self, fuzzer, folder, budget, *, seeds, echo, progress: bool = True):
        """The parallel campaign in ``folder`` continued, every worker from its last commit, to ``fuzzer``'s
        budget in all; ``seeds()`` loads the seeds it recorded."""
        echo(f"resuming {folder}: {self.count} workers, {fuzzer.record.budget} execs in all")
        x_seeds, y_seeds = seeds()
        return self._campaigns(fuzzer, x_seeds, y_seeds, folder, echo)

    def _campaigns(self, fuzzer, x_seeds, y_seeds, out, echo):
        import time

        from tqdm.auto import tqdm

        from ..executor import Fuzzed
        from ..fuzz.campaign import Campaign
        from ..fuzz.oracle import make_oracle
        from .parallel import WorkerSettings, fuzz

        self._stop_actors()  # their CPUs and GPU shares go to the campaigns' workers
        settings, began = fuzzer.record, time.perf_counter()
        with tqdm(total=settings.budget, unit="exec", desc="fuzz", dynamic_ncols=True) as bar:

            def progress(status):
                states, covered = status
                bar.n = sum(s["execs"] for s in states.values())
                bar.set_postfix(IDC=f"{covered / fuzzer.analysis.total:.1%}", workers=len(states), refresh=False)
                bar.refresh()

            try:
                result = fuzz(
                    fuzzer.network,
                    fuzzer.analysis,
                    x_seeds,
                    y_seeds,
                    budget=settings.budget,
                    out=out,
                    workers=self.count,
                    runner=WorkerSettings(ray=self.address, gpus_per_worker=self.gpus_per_worker),
                    settings=settings,
                    safe_mode=self.safe_mode,
                    on_progress=progress,
                    echo=echo,
                )
            except KeyboardInterrupt:
                return None
        # the merged state's seconds are the longest worker's fuzz loop; the run also started Ray and the workers
        per = f"this run {time.perf_counter() - began:.1f} s on Ray with the workers' start; " + "; ".join(
            f"worker {i}: {w['execs']} execs, IDC {w['idc']:.1%}, {w['imports']} imported"
            for i, w in enumerate(result["workers"])
        )
        notes = (
            f"merged view of {self.count} parallel campaigns (worker-0 .. worker-{self.count - 1}), which "
            "exchanged the entries that reached new combinations",
            *settings.sources.notes,
        )
        merged = Campaign.load(Path(out) / "merged", fuzzer.network)
        return Fuzzed(
            merged,
            make_oracle(settings.oracle),
            notes=notes,
            grown="merged",
            detail=per,
            workers=result["workers"],
            restarts=tuple(result["restarts"]),
        )

    # ---- lifetime ----------------------------------------------------------------------------
    def _stop_actors(self) -> None:
        for a in self._actors or ():
            self.ray.kill(a)
        self._actors = None

    def close(self) -> None:
        """Stop the actors (and the Ray this pool started); a second call does nothing."""
        self._stop_actors()
        self._actors = []
        if self._started:
            self.ray.shutdown()
            self._started = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def analyze(
    model,
    x,
    y: np.ndarray | None = None,
    *,
    ray: str | None = LOCAL,
    workers: int | None = None,
    threads: int = 1,
    value_range=None,
    preprocess=None,
    image_shape=None,
    task: str | None = None,
    safe_mode: bool = True,
    **kwargs,
):
    """:func:`idcgen.analyze` with its passes over ``x`` on Ray workers; the same analysis (the same important
    neurons and k, centroids up to the order of float sums, docs/design.md "Scale-out on Ray"). ``x`` is an
    array, or shards the workers read themselves: a pattern such as ``'shards/*.npz'``, a list of paths, or a
    Ray Data dataset (``x_column=``, ``y_column=``, ``scale=`` as for :meth:`Workers.shards`)."""
    x = _computed(x)
    with Workers(
        model,
        ray=ray,
        workers=workers,
        threads=threads,
        value_range=value_range,
        preprocess=preprocess,
        image_shape=image_shape,
        task=task,
        safe_mode=safe_mode,
    ) as pool:
        return pool.analyze(x, y, **kwargs)  # bound to the driver's copy of the model


def coverage(
    analysis,
    model,
    x,
    *,
    ray: str | None = LOCAL,
    workers: int | None = None,
    threads: int = 1,
    task: str | None = None,
    safe_mode: bool = True,
    **load,
):
    """IDC of ``x`` measured on Ray workers: the same covered set as ``analysis.coverage(x)``; ``x`` an array
    or shards the workers read themselves (as for :func:`analyze`)."""
    recorded = dataclasses.replace(analysis.convention, image_shape=None)
    x = _computed(x)
    with Workers(
        model, ray=ray, workers=workers, threads=threads, recorded=recorded, task=task, safe_mode=safe_mode
    ) as pool:
        return pool.coverage(analysis, x, **load)


def _computed(x):
    """A Ray dataset computed (materialized, its blocks in its order) before the workers take the CPUs its
    tasks need; else ``x``."""
    from .shards import in_order, is_ray_dataset

    if not is_ray_dataset(x) or type(x).__name__ == "MaterializedDataset":
        return x
    with in_order(x):
        return x.materialize()
