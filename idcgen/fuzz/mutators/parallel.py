"""A small thread pool for the mutators' array work.

numpy and OpenCV release the GIL while they fill large arrays, so the second core, idle while a
mutator runs single-threaded between two forward passes, can take half of it. Work is split into parts
fixed by the data (never by the core count), so results are the same on every machine.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable

WORKERS = 2
_pool: ThreadPoolExecutor | None = None


def run_parts(work: Callable, parts: Iterable) -> list:
    """``[work(part) for part in parts]``, on the pool when there is more than one part."""
    global _pool
    parts = list(parts)
    if len(parts) < 2:
        return [work(part) for part in parts]
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="idcgen-mutate")
    return list(_pool.map(work, parts))
