"""Affinity between hidden units and hypotheses (DeepBase, Sellam et al., "Deep Neural Inspection").

Which functions of the input (hypotheses, :mod:`~idcgen.deepbase.hypotheses`) do the units of a model follow?
For every unit and hypothesis a statistical *measure* of their affinity: Pearson and Spearman correlation,
mutual information (scikit-learn's nearest-neighbour estimators); and for every *unit group* (the important
neurons of an analysis, a layer, a list) a linear model from the group to the hypothesis, scored by
cross-validated accuracy (logistic regression, 0/1 hypotheses) or R^2 (linear regression, the others).

Per-pixel hypotheses (masks (n, H, W)) are compared with the activation maps of convolutional channels,
pixel by pixel: Pearson over every pixel (``pixel``) and NetDissect's IoU of the channel's top 0.5 % region
with the mask (``iou``), on the inputs streamed; elsewhere a mask's area share stands in for it.

By concern: :mod:`~idcgen.deepbase.hypotheses` (the built-in hypotheses and a user's file, numpy),
:mod:`~idcgen.deepbase.statistics` (the measures, numpy), :mod:`~idcgen.deepbase.units` (the unit groups and
measures asked for), :mod:`~idcgen.deepbase.driver` (the stream, :func:`affinity`) and
:mod:`~idcgen.deepbase.report` (:class:`AffinityResult`, `write_report`).

DeepBase's two optimisations (docs/design.md, "Affinity (DeepBase)"):

- *shared pass*: one forward pass per batch taps every layer any group needs, and every hypothesis is
  evaluated once per batch, whatever the number of groups and measures;
- *early stopping*: inputs are streamed in a random order (a prefix is a random sample) and every score
  carries a 95 % confidence interval; a score is final once its interval is within ``tol`` of it, and the
  stream stops when every score is final. Intervals: Fisher z for Pearson (standard error 1/sqrt(n-3)) and
  Spearman (sqrt(1.06/(n-3))); the spread over the 5 cross-validation folds for the linear model (t
  quantile with 4 degrees of freedom). A score open after a check is computed again where its interval
  predicts convergence (half-width proportional to 1/sqrt(n)), or at twice its inputs if that comes first,
  so each is computed a few times. Mutual information, whose estimate drifts with n (its bias), has a bound
  on its distance to the full-data estimate instead (`mi_half_width`): its drift per doubling of n times the
  doublings left, plus its sampling interval shrunk to the part of the data still to come.
"""

from .driver import affinity
from .report import AffinityResult, write_report
from .statistics import (
    IOU_TOP,
    MASK_MEASURES,
    MEASURES,
    TITLES,
    UNIT_MEASURES,
    is_binary,
    linear_fit,
    mask_scores,
    mi_half_width,
    mutual_information,
    pearson,
    spearman,
)
from .units import UnitGroup, parse_measures, parse_units

__all__ = [
    "affinity",
    "AffinityResult",
    "UnitGroup",
    "parse_units",
    "parse_measures",
    "MEASURES",
    "pearson",
    "spearman",
    "mutual_information",
    "linear_fit",
    "write_report",
]
