"""The analysis: important neurons of a layer and their activation clusters (docs/design.md, "Relevance" to
"Coverage"). The record (`Analysis`: load, save, measure) is in :mod:`.record`, making one (`analyze`) in
:mod:`.passes`, finding a saved one (`find_analysis`) in :mod:`.search`; none imports a framework."""

from .passes import (
    Clustering,
    LocalPasses,
    RelevanceSettings,
    analyze,
    check_class_labels,
    cluster_neurons,
    neuron_streams,
)
from .record import FORMAT_VERSION, SAME_ANALYSIS_KEYS, Analysis, check_save_target, data_fingerprint, versions
from .search import find_analysis

__all__ = [
    "Analysis",
    "Clustering",
    "FORMAT_VERSION",
    "LocalPasses",
    "RelevanceSettings",
    "SAME_ANALYSIS_KEYS",
    "analyze",
    "check_class_labels",
    "check_save_target",
    "cluster_neurons",
    "data_fingerprint",
    "find_analysis",
    "neuron_streams",
    "versions",
]
