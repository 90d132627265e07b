"""DeepInspect (Tian et al., ICSE 2020): which class pairs a classifier confuses, and which it treats with
bias, from per-class neuron activation probabilities alone (docs/design.md, "Confusion and bias
(DeepInspect)").

    result = idcgen.inspect(model, x, y)          # y optional: without labels, predictions only
    result.top(5)                                 # the five pairs with the smallest NAPVD
    result.metrics["all"]["confusion"]            # precision, recall, Spearman, AUCEC (with labels)
    result.write_csv("pairs.csv"); result.plot("folder")

By concern: :mod:`~idcgen.deepinspect.statistics` (the numpy core: ``napv_from_counts``, ``napvd``,
``cutoffs``, ``avg_bias``, ``type1_confusion``, ...), :mod:`~idcgen.deepinspect.driver` (the passes over the
model, and :func:`inspect`) and :mod:`~idcgen.deepinspect.report` (:class:`InspectResult`, its tables,
plots and report). Only :func:`inspect` runs a model, through :class:`idcgen.framework.Network` (imported when
called, so importing this package does not load TensorFlow).
"""

from .driver import MEMORY_BUDGET, ClassCounts, activation_limits, count_pass, first_pass, inspect
from .report import InspectResult
from .statistics import (
    SCALINGS,
    TOP_SHARE,
    aucec,
    avg_bias,
    avg_confusion_difference,
    class_pairs,
    confusion_matrix,
    cutoffs,
    evaluate,
    ground_truth,
    napv_from_counts,
    napvd,
    precision_recall,
    spearman,
    top_count,
    type1_confusion,
)

__all__ = [
    "inspect",
    "InspectResult",
    "napv_from_counts",
    "napvd",
    "cutoffs",
    "avg_bias",
    "type1_confusion",
    "avg_confusion_difference",
    "ground_truth",
    "precision_recall",
    "aucec",
    "spearman",
    "SCALINGS",
]
