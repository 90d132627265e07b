"""Joining Ray, and the model as Ray workers rebuild it.

A worker gets the model as the bytes of a ``.keras`` file (through Ray's object store, so a cluster's
nodes need no shared disk) with the input convention and task the driver measured it with, loads it
once, and checks that its weights fingerprint is the driver's.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import IdcgenError, Param, ParameterError
from . import require_ray

#: what ``ray=`` / ``--ray`` take besides an address
LOCAL = "local"


def connect(address: str | None = LOCAL, *, what: str = "--ray"):
    """Ray, initialised: ``"local"`` (or None) starts a Ray on this machine, ``"auto"`` joins the cluster
    that ``ray start`` made here (or $RAY_ADDRESS), any other value is a cluster address such as
    ``ray://head:10001``. A Ray already initialised in this process is used as it is.
    Returns (ray, whether this call started it)."""
    ray = require_ray(what)
    if ray.is_initialized():
        return ray, False
    if address is not None and not isinstance(address, str):
        raise ParameterError(f"{what} takes 'local', 'auto' or a Ray address such as ray://head:10001; got {address!r}")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    kwargs = dict(include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    try:
        if address in (None, "", LOCAL):
            ray.init(**kwargs)
        else:
            ray.init(address=address, **kwargs)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise IdcgenError(
            f"could not join the Ray cluster at {address!r}: {first}; start one with `ray start "
            f"--head` or pass {what} local"
        ) from None
    return ray, True


def network_of(model, *, task: str | None = None, safe_mode: bool = True, **convention):
    """(Network, input convention) of a model file, Keras model or Network, as the driver measures it."""
    from ..framework import ForwardNetwork, Network, load_model, network_with_convention

    if isinstance(model, (str, os.PathLike)):
        model = Network(load_model(Path(model), safe_mode=safe_mode), task=task)
    elif not isinstance(model, ForwardNetwork):
        model = Network(model, task=task)
    return network_with_convention(model, **convention)


def fetch(ray, refs):
    """``ray.get``, with an idcgen error raised on a worker re-raised as itself (one line, no traceback)."""
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, IdcgenError):
            raise cause from None
        raise


def cluster_workers(
    ray, workers: int | None, gpus_per_worker: float | None = None, *, on_gpus: bool = True
) -> tuple[int, float]:
    """(workers, GPUs per worker): by default one worker per GPU of the cluster, else one per CPU; each
    worker's share of a GPU is ``gpus_per_worker`` when given (0.5: two workers a GPU), else the cluster's
    GPUs spread over the workers. ``on_gpus`` False (the driver was asked for the CPU): the cluster's GPUs are
    neither counted nor shared out, as the workers run on their CPUs."""
    resources = ray.cluster_resources()
    gpus, cpus = int(resources.get("GPU", 0)) if on_gpus else 0, int(resources.get("CPU", 1))
    if workers is None:
        workers = gpus or max(cpus, 1)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ParameterError(Param("workers"), f" must be an int in the range [1, inf). Got {workers!r} instead.")
    if gpus_per_worker is not None:
        return workers, check_gpus_per_worker(gpus_per_worker)
    return workers, (min(1.0, gpus / workers) if gpus else 0.0)


def check_gpus_per_worker(gpus_per_worker) -> float:
    """A worker's share of GPUs: 0 (none), a fraction (workers share a GPU) or a whole number of GPUs."""
    share = float(gpus_per_worker)
    if not share >= 0 or (share > 1 and share != int(share)):
        raise ParameterError(
            Param("gpus_per_worker"),
            f" must be 0, a fraction of one GPU or a whole number of GPUs. Got {gpus_per_worker!r} instead.",
        )
    return share


def hold_threads(threads: int | None) -> None:
    """In a fresh worker, before the framework runs anything: quiet logs, ``threads`` intra-op threads."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
    if threads:
        from ..framework import limit_threads

        limit_threads(int(threads))


@dataclass(frozen=True)
class ModelRecipe:
    """What a worker needs to rebuild the driver's Network: the user's model as a file's bytes (and the
    file's suffix, which tells the framework), the input convention it is measured with, its task, the
    weights fingerprint to check, and the precision of its forward passes (a worker's analysis passes still
    run in fp32, as the driver's do)."""

    model_bytes: bytes
    suffix: str
    convention: dict
    task: str
    fingerprint: str
    safe_mode: bool = True
    device: str = "auto"  # the driver's setting: cpu keeps the workers on their CPUs too
    precision: str = "fp32"  # the driver's: bf16/fp16 forward passes for PyTorch models

    @classmethod
    def of(cls, network, *, safe_mode: bool = True) -> "ModelRecipe":
        """The recipe of a Network as :func:`idcgen.framework.network_with_convention` returned it."""
        from ..framework import network_with_convention

        network, convention = network_with_convention(network)
        suffix, data = network.recipe()
        device = "cpu" if getattr(network, "device_asked", "auto") == "cpu" else "auto"
        return cls(
            model_bytes=data,
            suffix=suffix,
            convention=convention.to_dict(),
            task=network.task,
            fingerprint=network.fingerprint(),
            safe_mode=safe_mode,
            device=device,
            precision=getattr(network, "precision", None) or "fp32",  # Keras and ONNX networks have none
        )

    def worker_device(self) -> str:
        """Where a worker runs the model: its own GPU when Ray gave it a share of one (Ray makes that GPU the
        only one the worker sees), else its CPU."""
        if self.device == "cpu":
            return "cpu"
        try:
            import ray

            return "cuda" if ray.get_gpu_ids() else "cpu"
        except Exception:  # not in a Ray worker (a recipe built in the driver): the driver's own choice
            return self.device

    def build(self):
        """The Network, as the driver has it (refused if the weights came out otherwise)."""
        from ..convention import InputConvention
        from ..framework import Network, framework_of_path, load_model, network_with_convention, resolve_device

        device = self.worker_device()
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"model{self.suffix}"
            path.write_bytes(self.model_bytes)
            resolve_device(framework_of_path(path), device)  # before the load: TensorFlow's GPU hidden in time
            model = load_model(path, safe_mode=self.safe_mode)
        network, _ = network_with_convention(
            Network(model, task=self.task, device=device, precision=self.precision),
            recorded=InputConvention.from_dict(self.convention),
        )
        if network.fingerprint() != self.fingerprint:
            raise IdcgenError(
                "a Ray worker rebuilt the model with other weights than the driver's (fingerprint "
                f"{network.fingerprint()[:12]}, expected {self.fingerprint[:12]}): the same idcgen "
                "and framework (Keras, TensorFlow) versions are needed on every node"
            )
        return network


#: shards per worker: enough for a progress bar and to even out a slow worker, few enough to cost nothing
SHARDS_PER_WORKER = 4


def shard_bounds(n: int, batch_size: int, workers: int, per_worker: int = SHARDS_PER_WORKER) -> list[tuple[int, int]]:
    """[start, stop) of each shard: whole batches of ``batch_size`` (the last one may be short), so every
    batch holds the inputs it holds in one process and the sums come out the same."""
    batches = math.ceil(n / batch_size)
    size = max(1, math.ceil(batches / (workers * per_worker))) * batch_size
    return [(start, min(start + size, n)) for start in range(0, n, size)]


def gather(ray, refs, sizes, progress):
    """Results of ``refs`` in their order; ``progress`` moves by each one's size as it arrives."""
    if progress is not None:
        pending = dict(zip(refs, sizes))
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                progress.update(pending.pop(ref))
    return fetch(ray, refs)


def cluster_on(pool, acts: np.ndarray, neurons, ks, method: str, random_state: int, progress: bool):
    """:func:`idcgen.analysis.cluster_neurons` with the neurons spread over the workers: the same streams, so
    the same clusters as in one process. (Clustering is serial in the driver otherwise: 30-40 % of a LeNet-5
    analysis of 60,000 inputs, which two workers could not then speed up beyond 1.4x.) A neuron goes to the
    first worker free, as neurons differ in cost (the k-means runs until they settle)."""
    from tqdm.auto import tqdm

    from ..analysis.passes import neuron_streams

    streams = neuron_streams(random_state, len(neurons))
    waiting, running, found = list(range(len(neurons)))[::-1], {}, [None] * len(neurons)

    def give(actor):
        if waiting:
            i = waiting.pop()
            ref = actor.cluster.remote(np.ascontiguousarray(acts[:, i]), int(neurons[i]), tuple(ks), streams[i], method)
            running[ref] = (i, actor)

    for actor in pool.actors:
        give(actor)
    with tqdm(total=len(found), desc="clusters", unit="neuron", disable=not progress, leave=False) as bar:
        while running:
            (ref,), _ = pool.ray.wait(list(running), num_returns=1)
            i, actor = running.pop(ref)
            found[i] = fetch(pool.ray, ref)
            bar.update(1)
            give(actor)
    return found
