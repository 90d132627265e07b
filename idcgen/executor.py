"""Where a command's work runs: this process (:class:`LocalExecutor`) or Ray workers
(:class:`idcgen.distributed.workers.Workers`), behind one interface (docs/design.md, "Settings").

Both take the same calls (``analyze``, ``coverage``, ``inspect``, ``affinity``, ``close``), so a command runs
its work one way whichever executor the settings chose; only Ray workers read shard files themselves.
"""

from __future__ import annotations

from .errors import ParameterError


class LocalExecutor:
    """The work in this process, on the model under test."""

    where = ""  # what a line about the work adds ("" here; " on N Ray workers" there)

    def __init__(self, network):
        self.network = network

    def analyze(self, x, y=None, **options):
        from .analysis import analyze

        return analyze(self.network, x, y, **options)

    def coverage(self, analysis, x, *, progress: bool = False):
        return analysis.coverage(x)

    def inspect(self, x, y=None, **options):
        from .deepinspect import inspect

        return inspect(self.network, x, y, **options)

    def affinity(self, x, y=None, **options):
        from .deepbase import affinity

        return affinity(self.network, x, y, **options)

    def shards(self, source, **_):
        raise ParameterError(f"shard files ({source}) are read by Ray workers: give --ray or --workers")

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
