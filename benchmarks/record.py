"""What every benchmark writes beside what it prints: one JSON line per measurement in
``benchmarks/results/<bench>.jsonl`` (or ``$IDCGEN_BENCH_RESULTS/<bench>.jsonl``), with the machine, the
commit and the figure's name, so that BENCHMARKS.md's tables can name the file their numbers come from
instead of copying printed text by hand.

    from record import record
    record("loop execs/s", 1234.5, unit="execs/s", batch=256, mutators="gauss")
"""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def results_folder() -> Path:
    return Path(os.environ.get("IDCGEN_BENCH_RESULTS", HERE / "results"))


@functools.lru_cache(maxsize=1)
def machine() -> dict:
    """The machine a measurement was made on: enough to tell two machines (and a loaded one) apart."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {
        "host": platform.node(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.release()}",
    }


@functools.lru_cache(maxsize=1)
def commit() -> str:
    """The repository's commit, with ``+dirty`` when tracked files differ from it; "unknown" outside git."""

    def git(*args):
        return subprocess.run(["git", "-C", str(HERE), *args], capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode:
            return "unknown"
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
        return head.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def bench_name() -> str:
    """The running benchmark: the stem of the script run (``bench_fuzz`` for benchmarks/bench_fuzz.py)."""
    return Path(sys.argv[0]).stem or "interactive"


def record(figure: str, value, *, unit: str = "", bench: str | None = None, **context) -> dict:
    """Append one measurement, ``figure`` = ``value`` [``unit``] under the settings ``context``, to
    ``<results folder>/<bench>.jsonl``; returns the line's record."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    row = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "bench": bench or bench_name(),
        "figure": figure,
        "value": value,
        "unit": unit,
        "context": context,
        "commit": commit(),
        "machine": machine(),
        "load_1min": load,
        "argv": sys.argv[1:],
    }
    folder = results_folder()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{row['bench']}.jsonl", "a") as handle:
        handle.write(json.dumps(row, default=float) + "\n")
    return row
