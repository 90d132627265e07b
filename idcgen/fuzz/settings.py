"""What a campaign is made of, typed: the settings a campaign records in ``campaign.json`` and keeps on resume.

:class:`CampaignSettings` is the one place that knows the recorded keys, their types and what a campaign of
an earlier idcgen, which did not record a key, ran with (:meth:`CampaignSettings.from_dict`). The fuzzer is
built from it (:meth:`idcgen.fuzz.fuzzer.Fuzzer.from_settings`); a resume compares two of them field by field
(:meth:`CampaignSettings.differences`), and the budget is the one field a resume may change.

:class:`Sources` says where a campaign's inputs came from (model files, seeds, training data and how they
were loaded); a campaign made in a notebook from arrays leaves them empty. numpy-free.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from types import UnionType
from typing import Union, get_args, get_origin, get_type_hints

#: settings a resume may change (every other field must match the campaign's own)
RESUMABLE = ("budget",)


#: How a field is recorded in campaign.json, in its metadata (fields are written in their order, lists for tuples,
#: a nested dataclass as its own object):
#: ``absent``: what a campaign.json without the key (of an earlier idcgen) ran with, where that is not the default;
#: ``omit_default``: the key is written only when the value differs from the default (a setting added later
#: leaves the campaign.json of a campaign without it as it was);
#: ``flat``: a nested dataclass whose keys are written among the settings' own.
ABSENT, OMIT_DEFAULT, FLAT = "absent", "omit_default", "flat"


@dataclass(frozen=True)
class Sources:
    """Where the inputs came from and how they were loaded (recorded paths are absolute where they name files,
    so that a resume from another directory finds them). Fields in the order campaign.json holds them."""

    model: str | None = None
    other_models: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()  # JSON architectures of weights-only files, "-" for none
    seeds: str | None = None
    train: str | None = None
    analysis_source: str = ""  # how the analysis was found, for the report
    notes: tuple[str, ...] = ()  # what the report should say about the setting
    scale: str = "auto"
    resize: str | None = None  # "HxW"
    class_names: tuple[str, ...] | None = None
    limit: int | None = field(default=None, metadata={OMIT_DEFAULT: True})  # the first N seeds only
    labels: str | None = field(default=None, metadata={OMIT_DEFAULT: True})  # a CSV of labels for a folder of frames
    crop: str | None = field(default=None, metadata={OMIT_DEFAULT: True})  # "TOP,BOTTOM,LEFT,RIGHT"
    task_given: str | None = field(default=None, metadata={OMIT_DEFAULT: True})  # --task, when it overrode the task

    def load_options(self) -> dict:
        """The options that load images for this campaign's model (seeds and training data alike)."""
        return {
            "scale": self.scale,
            "resize": self.resize,
            "crop": self.crop,
            "labels": self.labels,
            "class_names": self.class_names,
        }


@dataclass(frozen=True)
class ValiditySettings:
    """DeepHunter's bounds as recorded (the value range is the campaign's own)."""

    enabled: bool = True
    alpha: float = 0.02
    beta: float = 0.2


@dataclass(frozen=True)
class CampaignSettings:
    """Everything that decides what a campaign does; two campaigns with equal settings, seeds and analysis
    make the same steps.

    A new setting is a field here (its metadata saying how campaign.json records it, see :data:`ABSENT`);
    :meth:`to_dict`, :meth:`from_dict` and :meth:`differences` follow the fields. Fields in the order
    campaign.json holds them."""

    budget: int
    mutators: tuple[str, ...] = field(metadata={ABSENT: ()})  # canonical mutator specs (their repr)
    oracle: str = "misclassification"  # canonical oracle spec
    scheduler: str = "prioritized"
    # most times one corpus entry is picked as a parent (None: no cap); written only when set
    max_mutations: int | None = field(default=None, metadata={OMIT_DEFAULT: True})
    batch_size: int = 256
    random_state: int = 0
    value_range: tuple[float, float] = (0.0, 1.0)
    validity: ValiditySettings = ValiditySettings()
    guide: str = "idc"
    measure: tuple[str, ...] = ()  # names of the criteria measured besides IDC
    layer: str | None = None  # the analysis' subject layer
    m: int | None = None
    task: str = field(default="classification", metadata={OMIT_DEFAULT: True})
    input_shape: tuple[int, ...] = ()  # the images mutated (the model's input, or --image-shape)
    input_convention: dict = field(default_factory=dict, compare=False)  # InputConvention.to_dict(), for the record
    # how the corpus stores inputs: uint8 (on the grid) or float32 (as every campaign did before storage existed)
    storage: str = field(default="uint8", metadata={ABSENT: "float32"})
    # mutants rounded to the seeds' uint8 levels before they run (before rounding existed they ran unrounded)
    rounding: bool = field(default=True, metadata={ABSENT: False})
    measure_specs: tuple[str, ...] = ()  # the specs of ``measure``, fitted again on resume
    sources: Sources = field(default=Sources(), metadata={FLAT: True})
    parallel: dict | None = field(default=None, metadata={OMIT_DEFAULT: True})  # a parallel campaign's worker

    @property
    def regression(self) -> bool:
        return self.task == "regression"

    @property
    def preprocess(self) -> str | None:
        return (self.input_convention or {}).get("preprocess")

    # ---- the record ---------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The flat JSON form campaign.json holds (the keys of earlier versions, so their readers still work)."""
        return _record(self)

    @classmethod
    def from_dict(cls, data: dict) -> "CampaignSettings":
        """Settings from campaign.json's ``config``; keys an earlier idcgen did not write take what it ran with."""
        return _from_record(cls, data)

    # ---- comparing -----------------------------------------------------------------------------
    def differences(self, other: "CampaignSettings", *, ignore=RESUMABLE) -> list[tuple[str, object, object]]:
        """(field, this value, the other's) for every compared field that differs, sources' fields by name."""
        found = []
        for f in fields(self):
            if f.name in ignore or not f.compare:
                continue
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if f.metadata.get(FLAT):  # the sources
                found += [
                    (g.name, getattr(mine, g.name), getattr(theirs, g.name))
                    for g in fields(mine)
                    if g.name not in ("analysis_source", "notes") and getattr(mine, g.name) != getattr(theirs, g.name)
                ]
            elif mine != theirs:
                found.append((f.name, mine, theirs))
        return found

    def replace(self, **changes) -> "CampaignSettings":
        return dataclasses.replace(self, **changes)


# ---- the JSON record, field by field ------------------------------------------------------------------
def _record(settings) -> dict:
    """A settings dataclass as JSON: its fields in order (see :data:`ABSENT` for the metadata they may carry)."""
    out: dict = {}
    for f in fields(settings):
        value = getattr(settings, f.name)
        if f.metadata.get(OMIT_DEFAULT) and value == f.default:
            continue
        if f.metadata.get(FLAT):
            out.update(_record(value))
        else:
            out[f.name] = _json(value)
    return out


def _json(value):
    """A field's value as JSON holds it: tuples as lists, a nested dataclass as its object, numbers as Python's."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _record(value)
    if isinstance(value, (tuple, list)):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return dict(value)
    if hasattr(value, "item"):  # a numpy scalar (a budget computed with numpy)
        return value.item()
    return value


def _from_record(cls, data: dict):
    """The settings dataclass ``cls`` from its JSON object ``data`` (a flat field's keys read from ``data``
    too); a key that is absent, or null where the field takes no None, reads as the field's ``absent`` value,
    else its default."""
    hints = get_type_hints(cls)
    values = {}
    for f in fields(cls):
        if f.metadata.get(FLAT):
            values[f.name] = _from_record(hints[f.name], data)
            continue
        if ABSENT in f.metadata:
            absent = f.metadata[ABSENT]
        elif f.default is not dataclasses.MISSING:
            absent = f.default
        elif f.default_factory is not dataclasses.MISSING:
            absent = f.default_factory()
        else:
            absent = dataclasses.MISSING  # a required key: its absence is a KeyError
        value = data[f.name] if absent is dataclasses.MISSING else data.get(f.name)
        if value is None and not (f.name in data and _takes_none(hints[f.name])):
            values[f.name] = absent
        else:
            values[f.name] = _read(hints[f.name], value)
    return cls(**values)


def _takes_none(hint) -> bool:
    return get_origin(hint) in (Union, UnionType) and type(None) in get_args(hint)


def _read(hint, value):
    """A JSON value as a field of type ``hint`` holds it: a list as a tuple (its items read as the tuple's type
    says), a number as the int, float or bool named, an object as the dataclass or dict named."""
    if value is None:
        return None
    if _takes_none(hint):
        hint = next(h for h in get_args(hint) if h is not type(None))
    origin, args = get_origin(hint), get_args(hint)
    if dataclasses.is_dataclass(hint):
        return _from_record(hint, value)
    if origin is tuple:
        kinds = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis else args
        return tuple(_read(kind, v) for kind, v in zip(kinds, value))
    if hint in (int, float, bool):
        return hint(value)
    if hint is dict or origin is dict:
        return dict(value)
    return value
