"""A small thread pool for array work rows at a time: the fuzz loop's (the mutators', the validity check's, the
gathering of parents) and the passes every command makes over its inputs (their range, their fingerprint).

numpy, OpenCV and hashlib release the GIL while they work through large arrays, so the other cores, idle while
one of them runs single-threaded (between two forward passes, or while a GPU runs the model), can take parts
of it. Work is split into parts fixed by the data (never by the core count), so results are the same on every
machine; the pool's size only sets how many parts run at once.
"""

from __future__ import annotations

import hashlib
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
        _pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="idcgen-parts")
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


def extent(a: np.ndarray) -> tuple[float, float]:
    """``(a.min(), a.max())`` as floats, rows at a time on the pool: each part's max reads what its min has
    just brought into cache, so a large array crosses memory once rather than twice. A NaN anywhere gives NaN
    (as ``np.min`` does), so ``np.isfinite(extent(a)).all()`` tells whether every value is finite, with no
    boolean array the size of ``a``."""
    a = np.asarray(a)
    if a.size == 0:
        raise ValueError("the extent of an empty array")
    if a.ndim == 0:
        return float(a), float(a)
    found = np.array(run_parts(lambda rows: (a[rows].min(), a[rows].max()), rows_of(a)))
    return float(found[:, 0].min()), float(found[:, 1].max())


#: arrays up to this size are hashed in one piece (fingerprints as before parts existed); larger ones in parts
WHOLE_HASH_BYTES = 256 << 20
#: bytes of one part of a large array's hash: big enough that a part's hashing dwarfs handing it to the pool
HASH_PART_BYTES = 64 << 20


def hash_into(digest, a: np.ndarray) -> None:
    """``digest.update`` with ``a``'s bytes (C order). Up to :data:`WHOLE_HASH_BYTES` the bytes themselves; beyond,
    the SHA-256 digests of its :data:`HASH_PART_BYTES` parts, in order, hashed on the pool. One core of this
    project's VM hashes 0.67 GB/s in BLAKE2b and 1.2 GB/s in SHA-256 (it has SHA instructions): at the first
    rate 5,000 images of 224x224 (3 GB) take about 4.5 s, beside their 1.9 s relevance pass on an H200
    (BENCHMARKS.md, "The passes over the inputs")."""
    data = np.ascontiguousarray(a).data.cast("B")
    if len(data) <= WHOLE_HASH_BYTES:
        digest.update(data)
        return
    starts = range(0, len(data), HASH_PART_BYTES)
    parts = run_parts(lambda i: hashlib.sha256(data[i : i + HASH_PART_BYTES]).digest(), starts)
    digest.update(b"parts:" + b"".join(parts))
