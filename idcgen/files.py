"""Files written so that a killed process leaves the old version or the new one, never half of one."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it into place.

    The temporary name (``.NAME.tmp``) is fixed, so a leftover of a killed write is found and replaced by the
    next one.
    """
    tmp = temporary_name(path)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException:  # a full disk or Ctrl-C: leave no temporary file behind
        tmp.unlink(missing_ok=True)
        raise


def temporary_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp")


def atomic_text(path: Path, text: str) -> None:
    atomic_write(path, text.encode())


def npz_bytes(arrays: dict, *, compressed: bool = False) -> bytes:
    """An ``.npz`` archive built in memory (zipfile's many small writes and seeks on a real file cost
    twice as much)."""
    buffer = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buffer, **arrays)
    return buffer.getvalue()


def atomic_npz(path: Path, arrays: dict, *, compressed: bool = False) -> None:
    """``np.savez`` through :func:`atomic_write`."""
    atomic_write(path, npz_bytes(arrays, compressed=compressed))


def jsonl(rows) -> str:
    """Rows as JSON lines."""
    return "".join(json.dumps(row) + "\n" for row in rows)


def remove_temporaries(folder: Path) -> list[Path]:
    """Delete the temporary files (``.NAME.tmp``) that writes killed midway left in ``folder``; call
    only while no other process writes there. Returns what was removed."""
    removed = []
    for path in Path(folder).glob(".*.tmp") if Path(folder).is_dir() else ():
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed
