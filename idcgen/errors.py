"""The few exception types idcgen raises on bad input.

Every message says what was wrong, what was expected, what was received and, where it helps, what to
do. The CLI turns any of them into one line on stderr and a non-zero exit.
"""


class IdcgenError(Exception):
    """Base class of every error idcgen raises on purpose."""


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
