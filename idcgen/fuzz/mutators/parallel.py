"""A small thread pool for the fuzz loop's array work (the mutators', the validity check's, the gathering of
parents).

numpy and OpenCV release the GIL while they fill large arrays, so the other cores, idle while a mutator runs
single-threaded between two forward passes, can take parts of it. Work is split into parts fixed by the data
(never by the core count), so results are the same on every machine; the pool's size only sets how many
parts run at once.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable

import numpy as np

#: threads of the pool: the CPUs this process may run on, from 2 (the fewest parts the noise is drawn in) to 8
WORKERS = max(2, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2))
#: bytes of one part of row-wise work: small enough to stay in a core's cache, large enough that handing a
#: part to the pool costs little beside it
PART_BYTES = 4 << 20
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


def row_parts(n: int, row_bytes: int) -> list[slice]:
    """Slices of ``n`` rows of ``row_bytes`` bytes each, about :data:`PART_BYTES` a slice."""
    rows = max(1, PART_BYTES // max(1, int(row_bytes)))
    return [slice(start, min(start + rows, n)) for start in range(0, n, rows)]


def rows_of(a: np.ndarray) -> list[slice]:
    """:func:`row_parts` for the rows of ``a``."""
    return row_parts(len(a), a[0].nbytes if len(a) else 1)


def gather(a: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``a[rows]`` (a new array), copied in parts on the pool."""
    rows = np.asarray(rows)
    out = np.empty((len(rows), *a.shape[1:]), a.dtype)
    if out.size == 0:
        return out
    # mode="clip": numpy buffers `out` in the default mode="raise" (a second copy); the rows are valid indices
    run_parts(lambda part: np.take(a, rows[part], axis=0, out=out[part], mode="clip"), rows_of(out))
    return out
