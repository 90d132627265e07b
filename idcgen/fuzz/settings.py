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

#: settings a resume may change (every other field must match the campaign's own)
RESUMABLE = ("budget",)


@dataclass(frozen=True)
class Sources:
    """Where the inputs came from and how they were loaded (recorded paths are absolute where they name files,
    so that a resume from another directory finds them)."""

    model: str | None = None
    other_models: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()  # JSON architectures of weights-only files, "-" for none
    seeds: str | None = None
    train: str | None = None
    limit: int | None = None  # the first N seeds only
    scale: str = "auto"
    resize: str | None = None  # "HxW"
    crop: str | None = None  # "TOP,BOTTOM,LEFT,RIGHT"
    labels: str | None = None  # a CSV of labels for a folder of frames
    class_names: tuple[str, ...] | None = None
    task_given: str | None = None  # --task, when it overrode the detected task
    analysis_source: str = ""  # how the analysis was found, for the report
    notes: tuple[str, ...] = ()  # what the report should say about the setting

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
    make the same steps."""

    budget: int
    mutators: tuple[str, ...]  # canonical mutator specs (their repr)
    oracle: str = "misclassification"  # canonical oracle spec
    scheduler: str = "prioritized"
    guide: str = "idc"
    measure: tuple[str, ...] = ()  # names of the criteria measured besides IDC
    measure_specs: tuple[str, ...] = ()  # their specs, fitted again on resume
    validity: ValiditySettings = ValiditySettings()
    batch_size: int = 256
    random_state: int = 0
    rounding: bool = True  # mutants rounded to the seeds' uint8 levels before they run
    storage: str = "uint8"  # how the corpus stores inputs: uint8 (on the grid) or float32
    value_range: tuple[float, float] = (0.0, 1.0)
    input_shape: tuple[int, ...] = ()  # the images mutated (the model's input, or --image-shape)
    input_convention: dict = field(default_factory=dict, compare=False)  # InputConvention.to_dict(), for the record
    layer: str | None = None  # the analysis' subject layer
    m: int | None = None
    task: str = "classification"
    sources: Sources = Sources()
    parallel: dict | None = None  # a worker of a parallel campaign: {"workers", "budget", ...}

    @property
    def regression(self) -> bool:
        return self.task == "regression"

    @property
    def preprocess(self) -> str | None:
        return (self.input_convention or {}).get("preprocess")

    # ---- the record ---------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The flat JSON form campaign.json holds (the keys of earlier versions, so their readers still work)."""
        out = {
            "budget": int(self.budget),
            "mutators": list(self.mutators),
            "oracle": self.oracle,
            "scheduler": self.scheduler,
            "batch_size": self.batch_size,
            "random_state": self.random_state,
            "value_range": list(self.value_range),
            "validity": dataclasses.asdict(self.validity),
            "guide": self.guide,
            "measure": list(self.measure),
            "layer": self.layer,
            "m": self.m,
            **({"task": "regression"} if self.regression else {}),
            "input_shape": list(self.input_shape),
            "input_convention": dict(self.input_convention),
            "storage": self.storage,
            "rounding": self.rounding,
            "measure_specs": list(self.measure_specs),
        }
        s = self.sources
        out.update(
            {
                "model": s.model,
                "other_models": list(s.other_models),
                "architectures": list(s.architectures),
                "seeds": s.seeds,
                "train": s.train,
                "analysis_source": s.analysis_source,
                "notes": list(s.notes),
                "scale": s.scale,
                "resize": s.resize,
                "class_names": None if s.class_names is None else list(s.class_names),
            }
        )
        # written only when given, as before
        out.update(
            {
                k: v
                for k, v in (
                    ("limit", s.limit),
                    ("labels", s.labels),
                    ("crop", s.crop),
                    ("task_given", s.task_given),
                    ("parallel", self.parallel),
                )
                if v is not None
            }
        )
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "CampaignSettings":
        """Settings from campaign.json's ``config``; keys an earlier idcgen did not write take what it ran with."""

        def tup(value):
            return None if value is None else tuple(value)

        v = data.get("validity") or {}
        sources = Sources(
            model=data.get("model"),
            other_models=tuple(data.get("other_models") or ()),
            architectures=tuple(data.get("architectures") or ()),
            seeds=data.get("seeds"),
            train=data.get("train"),
            limit=data.get("limit"),
            scale=data.get("scale", "auto"),
            resize=data.get("resize"),
            crop=data.get("crop"),
            labels=data.get("labels"),
            class_names=tup(data.get("class_names")),
            task_given=data.get("task_given"),
            analysis_source=data.get("analysis_source", ""),
            notes=tuple(data.get("notes") or ()),
        )
        return cls(
            budget=int(data["budget"]),
            mutators=tuple(data.get("mutators") or ()),
            oracle=data.get("oracle", "misclassification"),
            scheduler=data.get("scheduler", "prioritized"),
            guide=data.get("guide", "idc"),
            measure=tuple(data.get("measure") or ()),
            measure_specs=tuple(data.get("measure_specs") or ()),
            validity=ValiditySettings(
                enabled=bool(v.get("enabled", True)), alpha=float(v.get("alpha", 0.02)), beta=float(v.get("beta", 0.2))
            ),
            batch_size=int(data.get("batch_size", 256)),
            random_state=int(data.get("random_state", 0)),
            rounding=bool(data.get("rounding", False)),  # before rounding existed mutants ran unrounded
            storage=data.get("storage", "float32"),
            value_range=_range(data.get("value_range", (0.0, 1.0))),
            input_shape=tuple(data.get("input_shape") or ()),
            input_convention=dict(data.get("input_convention") or {}),
            layer=data.get("layer"),
            m=data.get("m"),
            task=data.get("task", "classification"),
            sources=sources,
            parallel=data.get("parallel"),
        )

    # ---- comparing -----------------------------------------------------------------------------
    def differences(self, other: "CampaignSettings", *, ignore=RESUMABLE) -> list[tuple[str, object, object]]:
        """(field, this value, the other's) for every compared field that differs, sources' fields by name."""
        found = []
        for f in fields(self):
            if f.name in ignore or not f.compare:
                continue
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if f.name == "sources":
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


def _range(values) -> tuple[float, float]:
    """A recorded (low, high) value range, as floats."""
    low, high = values
    return float(low), float(high)
