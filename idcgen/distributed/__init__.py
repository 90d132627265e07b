"""Scale-out on Ray (the optional extra ``pip install "idcgen[ray]"``): analysis and coverage mapped over
shards of the inputs on Ray workers, and parallel fuzz campaigns that share what they cover.

    import idcgen.distributed as dist
    analysis = dist.analyze("lenet5.keras", x_train, y_train, m=8, ray="local", workers=2)
    dist.coverage(analysis, "lenet5.keras", x_test, ray="local")
    dist.analyze("lenet5.keras", "shards/*.npz", m=8)   # shard files (or a Ray dataset) the workers read

Ray is imported on first use, never when this package is imported; without it every entry point says
in one line what to install (docs/design.md, "Scale-out on Ray").
"""

from importlib import import_module

from ..errors import IdcgenError

INSTALL = 'pip install "idcgen[ray]"'
#: the file that marks a campaign folder as a parallel campaign's (its ParallelRecord, idcgen.distributed.parallel);
#: here so that a campaign of one process asks for it without importing the parallel machinery
PARALLEL_FILE = "parallel.json"


class RayNotInstalledError(IdcgenError):
    """Ray is needed (--ray, --workers, idcgen.distributed) but not installed."""


def require_ray(what: str = "idcgen.distributed"):
    """The ``ray`` module, or one line saying how to install it."""
    try:
        import ray
    except ImportError:
        raise RayNotInstalledError(f"{what} runs on Ray, which is not installed here: {INSTALL}") from None
    return ray


_NAMES = {
    "Workers": "workers",
    "analyze": "workers",
    "coverage": "workers",
    "connect": "cluster",
    "ModelRecipe": "cluster",
    "fuzz": "parallel",
    "WorkerSettings": "parallel",
    "ShardedInputs": "shards",
}

__all__ = sorted(_NAMES) + ["INSTALL", "PARALLEL_FILE", "RayNotInstalledError", "require_ray"]


def __getattr__(name):
    if name in _NAMES:
        return getattr(import_module(f".{_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'idcgen.distributed' has no attribute {name!r}")
