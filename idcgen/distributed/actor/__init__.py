"""What a Ray worker (:class:`idcgen.distributed.workers.AnalysisWorker`) does, by concern: the inputs it
holds (:mod:`.inputs`), the analysis' relevance passes (:mod:`.relevance`), coverage ids (:mod:`.coverage`)
and the forward passes of inspect and affinity (:mod:`.measures`). Each is a mixin over the actor's
``network`` (the model, loaded once) and ``kept`` (what a pass keeps on the worker for the next call)."""

from .coverage import CoverageIds
from .inputs import HeldInputs
from .measures import MeasurePasses
from .relevance import RelevancePasses

__all__ = ["CoverageIds", "HeldInputs", "MeasurePasses", "RelevancePasses"]
