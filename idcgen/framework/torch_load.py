"""Reading PyTorch models: TorchScript files (``.pt``, ``torch.jit.save``), ``torch.export`` programs
(``.pt2``), a Python factory with a state_dict (``package.module:make_model`` and ``w.pt``) and
``nn.Module`` objects (ONNX files run on onnxruntime: idcgen/framework/onnx_network.py). Each becomes a :class:`TorchModel`: one
``ExportedProgram`` and the image shape it takes (docs/design.md, "PyTorch").

A model's input shape is read from the program (``.pt2``), from the ``idcgen.json`` entry idcgen writes into
the TorchScript files it saves, from an ``input_shape`` attribute of the module, or given (``(H, W, C)`` for
images, as idcgen's images are); a TorchScript file without it raises InputShapeError, which a command given
images answers by loading it at their shape (idcgen/session.py), and which otherwise says the way to add it
(``idcgen convert m.pt m.pt2 --input-shape H,W,C``).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import logging
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch  # noqa: E402   (OMP_WAIT_POLICY is set before, by the package: idcgen/framework/__init__.py)

# torch.export logs each input dimension it specialises (every one, for a fixed image shape): not news here
logging.getLogger("torch._export").setLevel(logging.ERROR)

from ..errors import InputShapeError, ModelError, Param  # noqa: E402
from .common import is_factory  # noqa: E402

_EXTRA = "idcgen.json"


@dataclass
class TorchModel:
    """A PyTorch model as idcgen runs it: the exported program, the shape of one image (H, W, C) or input
    vector, whether the program takes channels first (N, C, H, W), the ``nn.Module`` it came from (None for
    a file without code: it can be fine-tuned, not rebuilt) and where it came from."""

    program: object
    image_shape: tuple
    channels_first: bool
    module: object = None
    origin: str = "nn.Module"


def _image_shape(model_shape: tuple) -> tuple[tuple, bool]:
    """(idcgen's image shape, channels first) for a model input shape without the batch: (C, H, W) images
    are taken as (H, W, C); other shapes are kept."""
    if len(model_shape) == 3:
        c, h, w = model_shape
        return (int(h), int(w), int(c)), True
    return tuple(int(d) for d in model_shape), False


def _model_shape(image_shape: tuple) -> tuple:
    image_shape = tuple(int(d) for d in image_shape)
    if len(image_shape) == 3:
        h, w, c = image_shape
        return (c, h, w)
    return image_shape


def _shape_hint(image_shape: tuple) -> str:
    """What to give where an input shape that failed to trace looks like PyTorch's (C, H, W) or lacks C: idcgen
    reads every input shape as (H, W, C)."""
    if len(image_shape) == 3 and image_shape[0] in (1, 3, 4) and image_shape[2] not in (1, 3, 4):
        c, h, w = image_shape
        return f"; the input shape {image_shape} is read as (H, W, C): for images (C, H, W) = {image_shape} give ({h}, {w}, {c})"
    if len(image_shape) == 2:
        h, w = image_shape
        return (
            f"; the input shape {image_shape} is read as (H, W, C) without C: for one-channel images give ({h}, {w}, 1)"
        )
    return ""


def weights_device(module):
    """Where a module's weights are (its first parameter or buffer), None for a module without any."""
    for tensor in (*module.parameters(), *module.buffers()):
        return tensor.device
    return None


def export(module, image_shape, *, origin: str = "nn.Module", device=None) -> TorchModel:
    """``module`` (in inference mode) as an exported program taking inputs of ``image_shape`` (H, W, C);
    traced on ``device`` (default: where the module's weights are, a user's model already on its GPU too), the
    program then on the CPU (what a network places where it runs, and ships to Ray workers)."""
    if image_shape is None:
        image_shape = getattr(module, "input_shape", None)
    if image_shape is None:
        raise InputShapeError(  # a command given images loads it again at their shape
            f"idcgen needs the input shape of this {type(module).__name__}: give --input-shape H,W,C on the "
            "command line, pass idcgen.Network(module, input_shape=(H, W, C)) where a model is asked for, or set "
            "the module's input_shape attribute (e.g. in its factory)"
        )
    try:
        module = module.eval()
    except NotImplementedError:  # a torch.export program's module, already in inference mode
        pass
    sample = torch.zeros((2, *_model_shape(image_shape)), device=device or weights_device(module))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # the batch axis stays free: code such as x.view(x.size(0), -1) runs on any batch
            program = torch.export.export(module, (sample,), dynamic_shapes=({0: torch.export.Dim.AUTO},))
    except Exception as exc:  # torch.export raises many kinds for code it cannot trace
        raise ModelError(
            f"torch.export could not trace the {type(module).__name__} on inputs of shape "
            f"{tuple(sample.shape[1:])}: {_first_line(exc)}{_shape_hint(tuple(image_shape))}"
        ) from None
    if sample.device.type not in ("cpu", "meta"):  # traced on a GPU: the source program is kept on the CPU
        from torch.export.passes import move_to_device_pass

        program = move_to_device_pass(program, "cpu")
    shape, channels_first = _image_shape(tuple(sample.shape[1:]))
    return TorchModel(program, shape, channels_first, module, origin)


def from_program(program, origin: str) -> TorchModel:
    """A loaded ``torch.export`` program as a TorchModel: its input shape is the example input's. A program
    saved or exported on a GPU becomes a CPU copy: the source a network places where it runs (``--device cpu``
    too) and ships to Ray workers."""
    args = program.example_inputs[0] if program.example_inputs else ()
    if len(args) != 1:
        raise ModelError(f"{origin} takes {len(args)} inputs; idcgen runs models of one input")
    training = _training_mode_ops(program)
    if training:  # batch statistics: an input's outputs would depend on the others in its batch
        more = f" and {len(training) - 3} more" if len(training) > 3 else ""
        raise ModelError(
            f"{origin} was exported in training mode: {', '.join(training[:3])}{more} use the batch's "
            "statistics or drop at random, so an input's outputs would depend on its batch; export it again "
            "after model.eval() (torch.export.export(model.eval(), ...))"
        )
    held = [*program.state_dict.values(), *program.constants.values(), *args]
    if any(isinstance(t, torch.Tensor) and t.device.type != "cpu" for t in held):
        from torch.export.passes import move_to_device_pass

        # a copy: the caller's program stays where it is
        program = move_to_device_pass(torch.export.load(io.BytesIO(program_bytes(program))), "cpu")
    shape, channels_first = _image_shape(tuple(args[0].shape[1:]))
    return TorchModel(program, shape, channels_first, None, origin)


def _training_mode_ops(program) -> list[str]:
    """The program's operations run in training mode (a batch norm or dropout whose ``training``/``train``
    argument is True): what a model exported before ``model.eval()`` holds."""
    found = []
    for node in program.graph_module.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None:
            continue
        for i, argument in enumerate(schema.arguments):
            if argument.name in ("training", "train"):
                value = node.args[i] if i < len(node.args) else node.kwargs.get(argument.name)
                if value is True:
                    found.append(node.name)
    return found


def _torchscript_shape(extra: dict, path: Path, image_shape) -> tuple:
    """The input shape of a TorchScript file: given, else the entry idcgen writes (TorchScript keeps none)."""
    if image_shape is not None:
        return tuple(image_shape)
    if extra.get(_EXTRA):
        return tuple(json.loads(extra[_EXTRA])["input_shape"])
    raise InputShapeError(
        f"{path} is a TorchScript file, which does not record the shape of its input: convert it once "
        f"with `idcgen convert {path} {path.with_suffix('.pt2')} --input-shape H,W,C` (a torch.export "
        "program records it), or save it with idcgen.framework.torch_load.save_torchscript"
    )


def load_torchscript(path: Path, image_shape=None) -> TorchModel:
    extra = {_EXTRA: ""}
    try:
        script = torch.jit.load(str(path), map_location="cpu", _extra_files=extra)
    except Exception as exc:
        raise ModelError(f"could not read {path} as a TorchScript file: {_first_line(exc)}") from None
    given = image_shape is not None
    image_shape = _torchscript_shape(extra, path, image_shape)
    sample = torch.zeros((2, *_model_shape(image_shape)))
    try:  # run once as it is: a shape it does not take is said in real sizes, not the converter's symbols
        with torch.inference_mode():
            script.eval()(sample)
    except Exception as exc:
        where = (  # given: by --input-shape, or taken from the images a command was given (idcgen/session.py)
            "the input shape given (--input-shape H,W,C, else that of the images given)"
            if given
            else f"the input shape recorded in {path}"
        )
        raise ModelError(
            f"the TorchScript model {path} does not run on images of {tuple(image_shape)}, "
            f"{where}: {_script_error(exc)}"
        ) from None
    from .torch_jit import module_ops, name_by_modules

    ops = module_ops(script)  # before the converter inlines the module's graphs
    try:
        from torch._export.converter import TS2EPConverter

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = TS2EPConverter(script.eval(), (sample,)).convert()
    except Exception as exc:
        raise ModelError(
            f"could not convert the TorchScript model {path} to a torch.export program: {_first_line(exc)}"
        ) from None
    name_by_modules(program, ops)  # layers named by the module paths the file keeps
    model = from_program(program, f"TorchScript file {path}")
    return model


@contextlib.contextmanager
def _quiet(logger: str):
    """``logger`` silenced: torch.export logs a whole traceback before raising what idcgen says in one line."""
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        log.setLevel(level)


def _script_error(exc) -> str:
    """The TorchScript interpreter's error: its last line says what failed (the first, that something did)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def _first_line(exc) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _import_factory_module(module_name: str, spec: str):
    """The factory's module, from Python's import path, else (as ``python -m`` and ``python -c`` would find it)
    from the current folder: the ``idcgen`` script does not put that folder on the path."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.split(".")[0]
        here = Path.cwd()
        if exc.name == top and ((here / f"{top}.py").is_file() or (here / top / "__init__.py").is_file()):
            sys.path.insert(0, str(here))
            try:
                return importlib.import_module(module_name)
            except Exception as inner:  # the module's own code failed: said below as any import error
                exc = inner
        raise ModelError(
            f"cannot import {module_name!r} for the model factory {spec}: {_first_line(exc)}; "
            "the module is looked up on Python's import path and in the current folder: run "
            "idcgen from the folder holding it, put that folder on PYTHONPATH "
            f"(PYTHONPATH=/path/to/folder idcgen ...), or pip install its package"
        ) from None
    except Exception as exc:  # the module's code raised on import
        raise ModelError(
            f"importing {module_name!r} for the model factory {spec} failed: {type(exc).__name__}: {_first_line(exc)}"
        ) from None


def _call_factory(factory, spec: str):
    """``factory()``: one that needs arguments, or raises, said in one line (idcgen calls it with none)."""
    import inspect

    try:
        needed = [
            p.name
            for p in inspect.signature(factory).parameters.values()
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
    except (TypeError, ValueError):  # no signature to read (a builtin): call it and see
        needed = []
    if needed:
        raise ModelError(
            f"the model factory {spec} needs arguments ({', '.join(needed)}); idcgen calls it with "
            "none: give defaults to its arguments, or write a function of no arguments that builds "
            "the model (def make_model(): return Net(...)) and name that"
        )
    try:
        return factory()
    except Exception as exc:
        raise ModelError(f"the model factory {spec} raised {type(exc).__name__}: {_first_line(exc)}") from None


def _state_dict(weights: Path, spec: str) -> dict:
    if not weights.is_file():
        raise ModelError(
            f"weights file not found: {weights}"
            if not weights.is_dir()
            else f"weights path is a folder, expected a state_dict file (torch.save(model.state_dict(), "
            f"PATH)): {weights}"
        )
    import zipfile

    if zipfile.is_zipfile(weights):
        with zipfile.ZipFile(weights) as archive:
            if any(n.endswith("/constants.pkl") or "/code/" in n for n in archive.namelist()):
                raise ModelError(
                    f"{weights} is a TorchScript model, not a state_dict: give it alone as --model "
                    f"{weights} (it holds its code), or save the weights with torch.save(model."
                    "state_dict(), PATH) for the factory"
                )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as exc:
        if str(exc).startswith("Weights only load failed"):  # torch's advice, weights_only=False, runs its code
            raise ModelError(
                f"{weights} is a whole pickled model (torch.save(model, PATH)) or other Python objects, not a "
                "state_dict, and idcgen does not unpickle code: save the weights with "
                "torch.save(model.state_dict(), PATH), or export the model (torch.export to .pt2) as --model"
            ) from None
        raise ModelError(
            f"could not read {weights} as a PyTorch state_dict (torch.save(model.state_dict(), PATH)): "
            f"{_first_line(exc)}"
        ) from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise ModelError(f"{weights} holds a {type(state).__name__}, not a state_dict (a dict of tensors by name)")
    return state


def _misfit(model, state: dict) -> str:
    """What keeps ``state`` from fitting ``model``: missing and unexpected names, and other shapes, in one line
    (torch's message puts them on lines after its first)."""
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [
        f"{k} {tuple(state[k].shape)} in the file, {tuple(own[k].shape)} in the model"
        for k in own
        if k in state and hasattr(state[k], "shape") and tuple(state[k].shape) != tuple(own[k].shape)
    ]

    def some(names):
        return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")

    parts = (
        ([f"{len(missing)} missing ({some(missing)})"] if missing else [])
        + ([f"{len(unexpected)} unexpected ({some(unexpected)})"] if unexpected else [])
        + ([f"{len(shapes)} of another shape ({some(shapes)})"] if shapes else [])
    )
    return "; ".join(parts)


def load_factory(spec: str, weights=None, image_shape=None) -> TorchModel:
    """``package.module:make_model`` called with no arguments, with the state_dict in ``weights`` loaded."""
    module_name, attr = str(spec).split(":")
    try:
        factory = getattr(_import_factory_module(module_name, spec), attr)
    except AttributeError:
        raise ModelError(f"module {module_name!r} has no {attr!r} (the model factory {spec})") from None
    model = _call_factory(factory, spec)
    if not isinstance(model, torch.nn.Module):
        raise ModelError(f"the factory {spec} returned a {type(model).__name__}, not a torch.nn.Module")
    if weights is not None:
        weights = Path(weights)
        state = _state_dict(weights, spec)
        try:
            model.load_state_dict(state)
        except Exception as exc:  # names and shapes that do not fit: torch says them on lines after its first
            why = _misfit(model, state) or _first_line(exc)
            raise ModelError(f"the weights in {weights} do not fit the model of {spec}: {why}") from None
    return export(model, image_shape, origin=f"{spec}" + (f" with {weights}" if weights is not None else ""))


def load(path, *, weights=None, image_shape=None) -> TorchModel:
    """The PyTorch model in ``path`` (a file, or a factory spec with ``weights``)."""
    if is_factory(path):
        return load_factory(str(path), weights, image_shape)
    path = Path(path)
    if weights is not None and is_factory(weights):  # --model w.pt --architecture package.module:make_model
        return load_factory(str(weights), path, image_shape)
    if not path.exists():
        raise ModelError(f"model file not found: {path}")
    if path.is_dir():
        raise ModelError(f"model path is a folder, expected a model file: {path}")
    suffix = path.suffix.lower()
    if suffix == ".pt2":
        import zipfile

        if not zipfile.is_zipfile(path):  # empty, cut short or not a program: said before torch logs a traceback
            raise ModelError(
                f"{path} is not a torch.export program (.pt2), or is damaged: such a program is a zip "
                "archive and this file is not one (empty, cut short, or another kind of file)"
            )
        try:
            with _quiet("torch.export"):
                program = torch.export.load(str(path))
        except Exception as exc:
            raise ModelError(f"could not read {path} as a torch.export program (.pt2): {_first_line(exc)}") from None
        model = from_program(program, f"torch.export program {path}")
        if image_shape is not None and tuple(int(d) for d in image_shape) != tuple(model.image_shape):
            # the program's shape is fixed: a different one given was ignored without a word
            raise ModelError(
                f"{path} is a torch.export program recording its input shape {tuple(model.image_shape)}; "
                f"--input-shape {','.join(str(int(d)) for d in image_shape)} is for models that record none: "
                "drop it (images of another size are resized to the model's), or export the model again at that shape"
            )
        return model
    import zipfile

    if not zipfile.is_zipfile(path):
        raise ModelError(
            f"{path} is not a PyTorch model file, or is damaged: TorchScript and state_dict files are "
            "zip archives and this one is not"
        )
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    if not any(n.endswith("/code/__torch__.py") or "/code/" in n for n in names):
        raise ModelError(
            f"{path} holds PyTorch weights (a state_dict or a pickled object), not a model idcgen can "
            f"run without its code: give the code that builds it, --model package.module:make_model "
            f"--weights {path}"
        )
    return load_torchscript(path, image_shape)


def convert(old, new, *, weights=None, input_shape=None, overwrite: bool = False) -> str:
    """A PyTorch model file (or factory) re-saved as a ``.pt2`` program, which records its input shape; a
    forward returning a ModelOutput, a dict or a tuple is saved returning its logits tensor, and the file is
    read back before this says it is done."""
    new = Path(new)
    if new.suffix != ".pt2":
        raise ModelError(
            f"a PyTorch model is converted to a torch.export program: the new file must end with .pt2, got {new}"
        )
    if new.exists() and not overwrite:
        raise ModelError(
            f"{new} already exists: refusing to replace it; pass ",
            Param("overwrite", True),
            " to replace it, or give another name",
        )
    model = _logits_only(load(old, weights=weights, image_shape=input_shape))
    save_program(model.program, new)
    try:  # a program returning a Python class (a ModelOutput) is written, but cannot be read back elsewhere
        from .torch_graph import TorchGraph

        TorchGraph(load(new).program)
    except Exception as exc:
        new.unlink(missing_ok=True)
        raise ModelError(
            f"the program written to {new} cannot be read back ({_first_line(exc)}): nothing kept"
        ) from None
    return f"converted {old} ({model.origin}) -> {new} (torch.export program, input {model.image_shape})"


def _logits(out):
    """The logits of a classifier's output: the tensor itself, the ``logits`` entry or attribute of a
    ModelOutput or dict, else its first tensor."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict) and "logits" in out:  # Hugging Face's ModelOutput is a dict too
        return out["logits"]
    if getattr(out, "logits", None) is not None:
        return out.logits
    values = out.values() if isinstance(out, dict) else out
    return next(v for v in values if isinstance(v, torch.Tensor))


def _logits_only(model: TorchModel) -> TorchModel:
    """``model`` exported again returning its logits tensor where its forward returns a structure. Its own
    forward is wrapped for the export (not the module in another one), so its layers, module paths and
    weight names stay those of the model and an analysis made on it fits the program."""
    spec = model.program.call_spec.out_spec
    if (
        spec is None
        or spec.is_leaf()
        or (spec.num_children == 1 and spec.children_specs[0].is_leaf() and spec.type in (tuple, list))
    ):
        return model
    module = model.module if model.module is not None else model.program.module()
    forward, own = module.forward, module.__dict__.get("forward")

    def logits(x):
        return _logits(forward(x))

    module.forward = logits
    try:
        return export(module, model.image_shape, origin=f"{model.origin}, its logits")
    finally:
        if own is None:
            del module.forward  # the class's forward again
        else:
            module.forward = own


def save_torchscript(module, path, *, input_shape) -> None:
    """``module`` as a traced TorchScript file that records its input shape (H, W, C) for idcgen."""
    module = module.eval()
    sample = torch.zeros((1, *_model_shape(input_shape)))
    script = torch.jit.trace(module, sample)
    torch.jit.save(script, str(path), _extra_files={_EXTRA: json.dumps({"input_shape": list(input_shape)})})


def program_bytes(program) -> bytes:
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    return buffer.getvalue()


def save_program(program, path) -> Path:
    """A torch.export program written to ``path`` (``.pt2``) whole or not at all."""
    from ..files import atomic_write

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, program_bytes(program))
    return path


def fit_threads() -> int:
    """torch's intra-op threads cut to the CPUs this process may use and finds free when the model loads
    (idcgen.framework.common: usable_cpus, free_cpus): torch counts the machine's cores, which a container's
    quota, an affinity mask or other processes may not leave it, and more threads than free cores make every
    parallel operation wait for one that is descheduled (on a shared 2-core machine a small model's campaign
    ran 30x slower on two threads than on one, BENCHMARKS.md). Never raised: a count set already
    (limit_threads in a Ray worker, OMP_NUM_THREADS, the caller) stays when lower."""
    from .common import free_cpus, usable_cpus

    threads = min(torch.get_num_threads(), usable_cpus(), free_cpus())
    if threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    return threads


def limit_threads(threads: int) -> None:
    torch.set_num_threads(int(threads))
    try:
        torch.set_num_interop_threads(int(threads))
    except RuntimeError:  # set once per process, before any parallel work
        pass


__all__ = [
    "TorchModel",
    "load",
    "export",
    "from_program",
    "convert",
    "save_torchscript",
    "program_bytes",
    "limit_threads",
    "fit_threads",
]
