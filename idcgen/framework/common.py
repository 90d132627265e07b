"""Framework-free pieces the implementations share: the batching of a relevance pass (and its size) and the
spelling of a model factory; beside them, what this process may use of the machine (its CPUs) and has used of
it (its peak memory). Kept apart from the package's ``__init__`` so that the
implementation modules import them without importing the package that dispatches to them (no import cycle)."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np

from ..errors import ModelError


def is_factory(path) -> bool:
    """Whether ``path`` names a Python factory ``package.module:make_model`` (a PyTorch model) and no file."""
    text = str(path)
    return bool(re.match(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", text)) and not Path(text).exists()


def usable_cpus(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """The CPUs this process may keep busy: its affinity mask (``taskset``, a scheduler's allotment), capped by
    the cgroup's CPU quota (a container's ``--cpus``: cgroup v2 ``cpu.max``, or v1 ``cpu.cfs_quota_us``), which
    the affinity mask does not show."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cpus = os.cpu_count() or 1
    quota = None
    try:
        text = (cgroup / "cpu.max").read_text().split()
        if text and text[0] != "max":
            quota = int(text[0]) / int(text[1])
    except (OSError, ValueError, IndexError):
        try:
            q = int((cgroup / "cpu" / "cpu.cfs_quota_us").read_text())
            if q > 0:
                quota = q / int((cgroup / "cpu" / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            pass
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, cpus)


def free_cpus(loadavg: Path = Path("/proc/loadavg")) -> int:
    """The machine's CPUs less those other processes keep busy: the larger of the 1-minute load average and
    the tasks running now (which sees a job that has just started), less this process. The machine's count
    (os.cpu_count), as the load is the machine's; at least 1. Where /proc/loadavg is missing, every CPU."""
    cpus = os.cpu_count() or 1
    try:
        fields = loadavg.read_text().split()
        busy = max(float(fields[0]), float(fields[3].split("/")[0]))
    except (OSError, ValueError, IndexError):
        return cpus
    return int(min(cpus, max(1, math.floor(cpus - (busy - 1)))))


def peak_memory_mib(status: Path = Path("/proc/self/status")) -> float:
    """This process' peak resident memory so far, in MiB. Linux: VmHWM of /proc/self/status (ru_maxrss would
    also count a parent's memory at fork time); elsewhere ru_maxrss (KiB, or bytes on macOS)."""
    import resource
    import sys

    try:
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def relevance_batch_size(floats_per_input: int, budget_bytes: int = 256 * 2**20, largest: int = 512) -> int:
    """Inputs per relevance batch: the forward values and their gradients (about three 4-byte floats per value
    of every tensor, ``floats_per_input`` values an input) within ``budget_bytes``, so that a ResNet's batch
    does not take gigabytes; 16 .. largest."""
    return int(np.clip(budget_bytes // max(12 * floats_per_input, 1), 16, largest))


def refuse_nan_outputs(out: np.ndarray) -> np.ndarray:
    """``out`` (n, outputs) as it is, or a ModelError when no input has finite outputs: a model whose weights
    hold NaN (a training run that diverged) otherwise shows up far from its cause, as one predicted class, a
    constant layer or non-finite activations. A few NaN outputs pass (inputs that overflow a sound model)."""
    if len(out) and not np.isfinite(out).all(axis=1).any():
        bad = "NaN" if np.isnan(out).any() else "infinite"
        raise ModelError(
            f"the model's outputs are {bad} for every one of these {len(out)} inputs: its weights hold NaN or "
            "Inf (did its training diverge?), or the inputs overflow it; check or retrain the model"
        )
    return out


def _numpy(value) -> np.ndarray:
    """A framework tensor as numpy on the host (a torch tensor may sit on a GPU)."""
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return value.numpy()


class BatchedRelevance:
    """What every implementation's relevance pass shares: ``raw(x, target)`` (framework tensors) and
    ``batch(x, target)`` (numpy, one batch) come from the implementation; this runs them over any number of
    inputs, ``batch_size`` at a time, halving a batch that runs out of the device's memory (``batches``, a
    :class:`idcgen.framework.device.Batches`, where the implementation sets one; ``release()`` frees a
    failed batch's memory)."""

    batch_size: int

    def batcher(self):
        """The Batches this pass runs with (halved sizes are kept for the next pass where it is shared)."""
        from .device import Batches

        batches = getattr(self, "batches", None)
        if batches is None:
            batches = self.batches = Batches(self.batch_size, what="relevance", device="its device")
        batches.size = self.batch_size if batches.explicit else batches.size
        return batches

    def _run(self, n: int, step) -> None:
        batches = self.batcher()
        batches.run(n, step, release=getattr(self, "release", None))
        self.batch_size = batches.size

    def _inputs(self, x) -> np.ndarray:
        """``x`` in the model's input shape ((n, h, w) digits, a Dataset, a torch tensor), or one InputError."""
        from ..data import as_array, fit_to_model

        x = as_array(x)
        return x if len(x) == 0 else fit_to_model(x, self.network.input_shape)

    def maps(self, x: np.ndarray, target: np.ndarray | None = None) -> np.ndarray:
        """Unaggregated relevance (the subject layer's shape, or the input's in image layout), batched."""
        x = self._inputs(x)
        if len(x) == 0:
            return np.zeros_like(x)
        parts = []
        self._run(
            len(x),
            lambda start, stop: parts.append(
                _numpy(self.raw(x[start:stop], None if target is None else target[start:stop])[0])
            ),
        )
        return np.concatenate(parts)

    def __call__(self, x: np.ndarray, target: np.ndarray | None = None, *, progress=None):
        """Per-neuron relevance (n, neurons), activations (n, neurons), logits (n, classes), batched: a
        convolutional neuron (channel) sums its relevance and averages its activation over positions."""
        rel, act, logits = [], [], []
        x = self._inputs(x)

        def step(start, stop):
            r, a, z = self.batch(x[start:stop], None if target is None else target[start:stop])
            rel.append(r)
            act.append(a)
            logits.append(z)
            if progress is not None:
                progress.update(stop - start)

        self._run(len(x), step)
        return np.concatenate(rel), np.concatenate(act), np.concatenate(logits)


def rule_label_notes(entries) -> list[str]:
    """Analysis notes from ``(layer name, layer kind, rule label)`` per layer on the relevance path: the rule
    of each kind, and a note per approximation a label names in parentheses ("gelu passed through
    unchanged")."""
    kinds: dict[str, set] = {}
    approximated: dict[str, list] = {}
    for name, kind, label in entries:
        kinds.setdefault(label.split(" (")[0], set()).add(kind)
        if "(" in label:
            approximated.setdefault(label.split(" (", 1)[1].rstrip(")"), []).append(name)
    notes = ["LRP rules: " + "; ".join(f"{label} for {', '.join(sorted(k))}" for label, k in sorted(kinds.items()))]
    for how, names in approximated.items():
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        exact = (
            "; exact for ReLU-like activations only, and the identity rule CP-LRP and AttnLRP prescribe "
            "for element-wise activations"
            if "passed through" in how
            else ""
        )
        notes.append(f"LRP approximated in {len(names)} layer(s) ({shown}): {how}{exact}")
    return notes


def weights_digest(named) -> str:
    """sha256 of (name, array) pairs in name order, floating-point arrays only: an order-free identity of a
    model's weights. A converter holds them in its own order (torch's TorchScript converter), and integer
    buffers count training steps (batch norm's ``num_batches_tracked``, which a converted file drops), not
    what the model computes (docs/design.md, "The framework boundary")."""
    import hashlib

    digest = hashlib.sha256()
    for name, array in sorted(named, key=lambda pair: pair[0]):
        array = np.ascontiguousarray(array)
        if array.dtype.kind != "f":
            continue
        digest.update(f"{name}:{array.shape}:{array.dtype}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()
