"""Where a model runs: the device setting (``auto|cpu|cuda|cuda:N``, ``IDCGEN_DEVICE``), the precision of
forward-only work (``fp32|bf16|fp16``), batch sizes sized from the device's free memory, and the halving of a
batch that ran out of memory (docs/design.md, "Devices").

Framework-free at import: torch or TensorFlow is imported only when a device is resolved for its models, so
a process that never runs a model imports neither.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from dataclasses import dataclass

from ..errors import DeviceError, Param, ParameterError

DEVICE_ENV = "IDCGEN_DEVICE"
PRECISIONS = ("fp32", "bf16", "fp16")
#: share of the device's free memory a batch may take (the rest: the allocator's slack, other processes)
MEMORY_SHARE = 0.5


@dataclass(frozen=True)
class DeviceSetting:
    """A device as asked for: ``kind`` "auto", "cpu" or "cuda", ``index`` for ``cuda:N``, and where it came
    from (``source``: "device" for the option, ``IDCGEN_DEVICE`` for the environment, "default")."""

    kind: str
    index: int | None = None
    source: str = "default"

    def __str__(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"

    def given_as(self) -> Param | str:
        """How the user wrote it, as a message's part: ``device='cuda'`` (``--device cuda``) or ``IDCGEN_DEVICE=cuda``."""
        return f"{DEVICE_ENV}={self}" if self.source == DEVICE_ENV else Param("device", str(self))


def parse_device(text, *, source: str = "device") -> DeviceSetting:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (case and spaces ignored); anything else is one line."""
    if isinstance(text, DeviceSetting):
        return text
    word = str(text).strip().lower()
    name = f"{DEVICE_ENV}={text}" if source == DEVICE_ENV else Param("device", str(text))
    if word in ("auto", "cpu", "cuda"):
        return DeviceSetting(word, None, source)
    kind, _, index = word.partition(":")
    if kind == "cuda" and index.isdigit():
        return DeviceSetting("cuda", int(index), source)
    raise ParameterError(name, ": expected auto, cpu, cuda or cuda:N (N the GPU's index)")


def requested_device(device=None) -> DeviceSetting:
    """The device asked for: ``device`` when given (the option wins), else ``IDCGEN_DEVICE``, else auto."""
    if device is not None:
        return parse_device(device)
    env = os.environ.get(DEVICE_ENV, "").strip()
    return parse_device(env, source=DEVICE_ENV) if env else DeviceSetting("auto")


def check_precision(precision) -> str:
    """``fp32`` (default), ``bf16`` or ``fp16``."""
    word = "fp32" if precision is None else str(precision).strip().lower()
    if word not in PRECISIONS:
        raise ParameterError(Param("precision", precision), f": expected one of {', '.join(PRECISIONS)}")
    return word


# ---- PyTorch ------------------------------------------------------------------------------------
def _torch_cuda_seen(torch) -> str:
    """What torch sees, for a message: its version and why no GPU is there."""
    build = getattr(torch.version, "cuda", None)
    why = (
        "a CPU-only build of torch"
        if build is None
        else f"built for CUDA {build}, torch.cuda.device_count() is {torch.cuda.device_count()}"
    )
    return f"torch {torch.__version__} ({why})"


def torch_device(device=None):
    """The ``torch.device`` a PyTorch model runs on: auto is the current CUDA GPU when torch sees one, else
    the CPU; ``cuda``/``cuda:N`` where torch sees no such GPU is a DeviceError naming what it sees."""
    import torch

    if isinstance(device, torch.device):  # placed by the caller (a Ray worker's own GPU, a test's meta device)
        return device
    setting = requested_device(device)
    if setting.kind == "cpu":
        return torch.device("cpu")
    available = torch.cuda.is_available()
    if setting.kind == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if available else torch.device("cpu")
    if not available:
        raise DeviceError(
            setting.given_as(), f": no CUDA GPU is visible to {_torch_cuda_seen(torch)}; give cpu or auto"
        )
    count = torch.cuda.device_count()
    index = torch.cuda.current_device() if setting.index is None else setting.index
    if index >= count:
        raise DeviceError(
            setting.given_as(),
            f": torch {torch.__version__} sees {count} CUDA GPU(s) "
            f"(cuda:0{f' .. cuda:{count - 1}' if count > 1 else ''})",
        )
    return torch.device("cuda", index)


def free_memory(device) -> int | None:
    """Free bytes on a CUDA device (torch.cuda.mem_get_info), None elsewhere (the CPU keeps its constants)."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    return int(free)


# ---- Keras (TensorFlow) ------------------------------------------------------------------------
def keras_device(device=None) -> str:
    """The device Keras models run on, settled before TensorFlow initialises its devices: ``cpu`` hides
    every GPU from TensorFlow (the only case idcgen hides one); auto is TensorFlow's own choice (its GPU
    when a GPU build sees one); ``cuda`` where TensorFlow sees no GPU is a DeviceError."""
    setting = requested_device(device)
    from .quiet import quiet_start

    # TensorFlow may start here, before the model loads, and its CUDA build calls cuInit when its devices are
    # first listed (after the import): on a machine without a GPU that "failed call to cuInit" is dropped too
    with quiet_start():
        return _keras_device(setting)


def _keras_device(setting: DeviceSetting) -> str:
    import tensorflow as tf

    if setting.kind == "cpu":
        try:
            tf.config.set_visible_devices([], "GPU")
        except RuntimeError:  # TensorFlow already initialised its devices in this process
            if tf.config.get_visible_devices("GPU"):
                raise DeviceError(
                    setting.given_as(),
                    f": TensorFlow already runs on its GPU in this process; set {DEVICE_ENV}=cpu before it starts",
                ) from None
        return "cpu"
    gpus = tf.config.list_physical_devices("GPU")
    if setting.kind == "auto":
        return "cuda:0" if gpus else "cpu"
    index = setting.index or 0
    if not gpus:
        raise DeviceError(
            setting.given_as(),
            f": no GPU is visible to TensorFlow {tf.__version__} "
            f"({'a build without CUDA' if not tf.test.is_built_with_cuda() else 'built with CUDA'}); "
            'give cpu or auto (a GPU needs TensorFlow\'s CUDA build: pip install "idcgen[gpu]")',
        )
    if index >= len(gpus):
        raise DeviceError(setting.given_as(), f": TensorFlow sees {len(gpus)} GPU(s)")
    if setting.index is not None:
        tf.config.set_visible_devices(gpus[index], "GPU")
    return f"cuda:{index}"


# ---- batches that fit ---------------------------------------------------------------------------
#: how CUDA's libraries say they ran out of memory through a plain RuntimeError (torch.AcceleratorError): a
#: cuBLAS handle or cuDNN workspace that could not be allocated, a kernel launch's cudaErrorMemoryAllocation
_OUT_OF_MEMORY_TEXT = ("CUDA error: out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED")


def is_out_of_memory(exc: BaseException) -> bool:
    """A framework's out-of-memory error (torch.OutOfMemoryError, TensorFlow's ResourceExhaustedError, or a CUDA
    library's allocation failure), told by its type's name and text so that neither framework is imported here."""
    if any(cls.__name__ in ("OutOfMemoryError", "ResourceExhaustedError") for cls in type(exc).__mro__):
        return True
    return isinstance(exc, RuntimeError) and any(text in str(exc) for text in _OUT_OF_MEMORY_TEXT)


def out_of_memory_error(exc: BaseException) -> DeviceError:
    """The error of one line for an out-of-memory error that no batch halving caught (a gradient mutator's or an attack's
    backward pass on a fuzz batch, MC dropout, fine-tuning): torch's first sentences, and what to try."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    said = re.match(r"(.*?Tried to allocate \S+ \S+?)\.(\s|$)", text)
    return DeviceError(
        f"out of memory on the device ({said.group(1) if said else text[:160]}): give a smaller ",
        Param("batch_size"),
        ", or run on another device: ",
        Param("device", "cpu"),
    )


_SAID: set = set()


def say_once(line: str) -> None:
    """A note on stderr, once per process (a halved batch is said once, not once per batch)."""
    if line not in _SAID:
        _SAID.add(line)
        print(f"note: {line}", file=sys.stderr)


class Batches:
    """Inputs per batch for one kind of work on one device (``what``: "forward", "relevance"), halved when
    a batch runs out of memory, and said once; an ``explicit`` size is kept and its out-of-memory is one
    line naming the size and what to try."""

    def __init__(self, size: int, *, what: str, device: str, explicit: bool = False):
        self.size, self.what, self.device, self.explicit = int(size), what, str(device), explicit
        self._halved_from = None  # the size that first ran out of memory, until said

    def run(self, n: int, step, *, release=None) -> None:
        """``step(start, stop)`` over ``n`` inputs, ``size`` at a time; a batch out of memory is run again at
        half the size (``release()`` first: give the failed batch's memory back)."""
        start = 0
        while start < n:
            stop = min(start + self.size, n)
            try:
                step(start, stop)
            except Exception as exc:
                self.failed(exc, stop - start, release=release)
                continue
            start = stop
        self.settle()

    def settle(self) -> None:
        """Say once what the halving came to (after a pass: one note, however many halvings it took)."""
        if self._halved_from is not None:
            say_once(
                f"{self.what} batches of {self._halved_from} inputs ran out of memory on {self.device}: "
                f"halved to {self.size}"
            )
            self._halved_from = None

    def failed(self, exc: BaseException, tried: int, *, release=None) -> None:
        """After a batch of ``tried`` inputs raised ``exc``: re-raised unless out of memory; halved and said
        once, or one line where it cannot be halved (an explicit size, or one input)."""
        if not is_out_of_memory(exc):
            raise exc
        if release is not None:
            release()
        if self.explicit or tried <= 1:
            fix = (
                ("give ", Param("batch_size", tried // 2))
                if self.explicit and tried > 1
                else ("free the device's memory",)
            )
            raise DeviceError(
                f"out of memory on {self.device} at a {self.what} batch of {tried} input(s): ",
                *fix,
                ", or run on another device: ",
                Param("device", "cpu"),
            ) from None
        self._halved_from = self._halved_from or tried
        self.size = max(1, tried // 2)


def device_line(info: dict) -> str | None:
    """ "device: cuda:0 (NVIDIA H200), bf16" for a network's device_info(); None for the CPU in fp32 (said
    nowhere: today's output stays as it was)."""
    precision = info.get("precision", "fp32")
    if info.get("device", "cpu") == "cpu" and precision == "fp32":
        return None
    name = f" ({info['name']})" if info.get("name") else ""
    return f"device: {info.get('device', 'cpu')}{name}, {precision}"


def ieee_fp32(torch) -> None:
    """fp32 as the CPU computes it on a GPU too: torch lets cuDNN run fp32 convolutions on TF32 tensor cores by
    default (a 10-bit mantissa on Ampere and newer), which moves activations by about 1e-4 and breaks relevance's
    conservation at that level. Called when a network is placed on a GPU; process-wide, as torch's settings are
    (docs/design.md, "Devices"). bf16/fp16 are the fast options."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


@contextlib.contextmanager
def full_precision(network):
    """``network`` (anything with a ``precision``) in fp32 within the block: an analysis' relevance and the
    activations it clusters are fp32 whatever the forward-only work around it uses."""
    saved = getattr(network, "precision", None)
    if saved is None or saved == "fp32":
        yield network
        return
    network.precision = "fp32"
    try:
        yield network
    finally:
        network.precision = saved


def memory_batch_size(floats_per_input: int, free_bytes: int, *, largest: int = 8192, smallest: int = 16) -> int:
    """Inputs per batch on a device with ``free_bytes`` free: ``MEMORY_SHARE`` of it over about three 4-byte
    floats per value held (``floats_per_input`` values an input), within smallest .. largest."""
    fit = int(free_bytes * MEMORY_SHARE) // max(12 * int(floats_per_input), 1)
    return max(smallest, min(largest, fit))


__all__ = [
    "DEVICE_ENV",
    "PRECISIONS",
    "DeviceSetting",
    "parse_device",
    "requested_device",
    "check_precision",
    "torch_device",
    "keras_device",
    "free_memory",
    "is_out_of_memory",
    "out_of_memory_error",
    "Batches",
    "memory_batch_size",
    "say_once",
    "full_precision",
    "ieee_fp32",
    "device_line",
]
