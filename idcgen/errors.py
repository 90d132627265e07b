"""The few exception types idcgen raises on bad input.

Every message says what was wrong, what was expected, what was received and, where it helps, what to
do. The CLI turns any of them into one line on stderr and a non-zero exit.

A message that names a parameter holds it as a :class:`Param` among its parts, not as words: the library
reads "The 'batch_size' parameter must ..." and "pass scale='none'", the command line its flags ("--batch-size
must ...", "pass --scale none") spelt from the same parts, so that no message is parsed to find them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


class _NoValue:
    """A :class:`Param` named without a value (one object, kept one through pickling: Ray sends errors)."""

    def __repr__(self) -> str:
        return "<no value>"

    def __reduce__(self) -> str:
        return "_NO_VALUE"


_NO_VALUE: Any = _NoValue()


@dataclass(frozen=True)
class Param:
    """A parameter a message names, with the value it is given where the message says one ("m=8")."""

    name: str
    value: Any = _NO_VALUE

    @property
    def has_value(self) -> bool:
        return self.value is not _NO_VALUE

    def __str__(self) -> str:
        return f"{self.name}={shown(self.value)}" if self.has_value else f"the '{self.name}' parameter"


def listed(value):
    """A list or tuple as the comma list an option takes ("2,3,4"); any other value as it is."""
    if isinstance(value, (list, tuple)):
        return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    return value


def shown(value) -> str:
    """A value as a message shows it: a string (or list) quoted."""
    value = listed(value)
    return repr(value) if isinstance(value, str) else str(value)


class IdcgenError(Exception):
    """Base class of every error idcgen raises on purpose. Its message is the parts given, strings and
    :class:`Param`\\ s (``ParameterError(Param("m"), " must be ...")``), joined in the library's words."""

    @property
    def parts(self) -> tuple:
        return self.args

    @property
    def parameters(self) -> tuple[str, ...]:
        """The names of the parameters the message names, in its order."""
        return tuple(p.name for p in self.args if isinstance(p, Param))

    def worded(self, spell: Callable[[Param], str] = str) -> str:
        """The message with each parameter spelt by ``spell`` (the command line passes its flags)."""
        text = "".join(spell(p) if isinstance(p, Param) else str(p) for p in self.args)
        first = self.args[0] if self.args else None
        return text[:1].upper() + text[1:] if isinstance(first, Param) and not first.has_value else text

    def __str__(self) -> str:
        return self.worded()


class ModelError(IdcgenError):
    """A model file is missing, unreadable, or has no usable logits."""


class InputShapeError(ModelError):
    """A model file that does not record its input shape (a TorchScript file), given none: a command that
    is given images loads it again at their shape."""


class LayerError(IdcgenError):
    """A layer name is unknown, or a layer cannot serve as the subject layer."""


class InputError(IdcgenError):
    """Inputs or labels are missing, unreadable, mis-shaped, or out of range."""


class ParameterError(IdcgenError):
    """A parameter is out of its valid range (for example m larger than the layer)."""


class AnalysisMismatchError(IdcgenError):
    """An analysis or campaign was made for a different model (weights fingerprint differs)."""


class DeviceError(IdcgenError):
    """The device asked for is not there, or a batch did not fit in its memory."""
