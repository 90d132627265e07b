"""Neuron-level criteria of DeepXplore (NC) and DeepGauge (KMNC, NBC, SNAC, TKNC).

Neurons are those of several layers, by default :func:`default_neuron_layers` (every hidden layer
with weights before the logits, the ReLU output where an activation layer follows). A conv neuron is
a channel, its activation the spatial mean (docs/design.md, "Relevance"). Neurons are numbered across the layers in
order: layer 0's neurons first.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from idcgen.errors import InputError

from ..checks import check_choice, check_int, check_real
from .base import Criterion, check_layer_names, default_neuron_layers

__all__ = [
    "NeuronCoverage",
    "KMultisectionCoverage",
    "NeuronBoundaryCoverage",
    "StrongNeuronActivationCoverage",
    "TopKNeuronCoverage",
]


class _NeuronCriterion(Criterion):
    """A criterion over the neurons of ``layers``; learns ``layers_``, ``widths_`` and ``n_neurons_``."""

    def __init__(self, *, layers: Sequence[str] | None = None):
        self.layers = layers

    def _validate_params(self) -> None:
        check_layer_names(type(self).__name__, self.layers)

    def _fit_layers(self, network) -> tuple[str, ...]:
        names = default_neuron_layers(network) if self.layers is None else self.layers
        layers = tuple(network.layer(name).name for name in names)  # LayerError for an unknown name
        self.layers_ = layers
        self.widths_ = tuple(network.neuron_count(name) for name in layers)
        self.n_neurons_ = int(sum(self.widths_))
        return layers

    def forward_layers(self) -> tuple[str, ...]:
        return self.layers_

    def _per_layer(self, acts: Sequence[np.ndarray]) -> list[tuple[int, np.ndarray]]:
        """(index of the layer's first neuron, its (n, width) float64 activations) for each layer."""
        self._check_fitted()
        self._check_widths(acts, self.widths_, self.layers_)
        offsets = np.cumsum([0, *self.widths_[:-1]])
        return [(int(offset), np.asarray(a, dtype=np.float64)) for offset, a in zip(offsets, acts)]

    def _stack(self, acts: Sequence[np.ndarray]) -> np.ndarray:
        """(n, n_neurons_) float64 activations of every neuron, layers in order."""
        return np.concatenate([a for _, a in self._per_layer(acts)], axis=1)

    def _fit_end(self, state: Any) -> None:
        self.total_ = self.n_neurons_


class NeuronCoverage(_NeuronCriterion):
    """NC (DeepXplore): a neuron is covered when, for some input, its activation min-max scaled over
    its layer for that input exceeds ``threshold`` (or, unscaled, its raw activation does).

    ``scaling`` says what is scaled (docs/design.md, "Other criteria"):

    - ``"feature-maps"`` (default, as DeepXplore and DeepHunter compute it): the layer's whole output
      for one input (every position of every feature map) is scaled to [0, 1] by its minimum and
      maximum, then a conv neuron's value is the spatial mean of its scaled map. Scaling is affine, so
      this is ``(channel mean - min(output)) / (max(output) - min(output))``: only the channel means and
      each input's output range are needed.
    - ``"channel-means"``: the channel means are scaled by their own minimum and maximum over the
      layer. Their range is narrower than the maps', so more neurons pass the threshold (on LeNet-5
      several points of NC more).

    - ``"none"``: the raw activation (a conv neuron's channel mean) is compared with the threshold, as
      DeepHunter and dnn-tip count neurons; the threshold is then any real, in the activations' units.

    The first two are the same for dense layers. A layer whose output is constant for an input covers
    nothing with it when scaled. Fit needs no training data: it only resolves the layers.

    Parameters
    ----------
    threshold : float in [0, 1) when scaled, any finite float with ``scaling="none"``; default 0.75 (the
        DeepImportance paper's setting).
    layers : layer names, default every hidden layer with weights before the logits.
    scaling : "feature-maps" (default), "channel-means" or "none".
    """

    name = "nc"
    unit = "neurons"
    needs_data = False
    SCALINGS = ("feature-maps", "channel-means", "none")

    def __init__(self, *, threshold: float = 0.75, layers: Sequence[str] | None = None, scaling: str = "feature-maps"):
        self.threshold = threshold
        self.layers = layers
        self.scaling = scaling

    def _validate_params(self) -> None:
        super()._validate_params()
        check_choice("scaling", self.scaling, self.SCALINGS, owner=type(self).__name__)
        if self.scaling == "none":
            check_real("threshold", self.threshold, owner=type(self).__name__)
        else:
            check_real("threshold", self.threshold, 0.0, 1.0, closed="left", owner=type(self).__name__)

    def _fit_layers(self, network) -> tuple[str, ...]:
        layers = super()._fit_layers(network)
        # the layers whose output range differs from their neurons' range: those with feature maps
        self.map_layers_ = (
            tuple(i for i, name in enumerate(layers) if len(network.output_shape(name)) > 2)
            if self.scaling == "feature-maps"
            else ()
        )
        return layers

    def forward_layers(self) -> tuple[str, ...]:
        from idcgen.framework import RANGE_TAP

        return self.layers_ + tuple(self.layers_[i] + RANGE_TAP for i in self.map_layers_)

    def features_from(self, probs, acts) -> np.ndarray:
        self._check_fitted()
        acts = list(acts)
        n = len(self.layers_)
        if len(acts) != n + len(self.map_layers_):
            raise InputError(
                f"NeuronCoverage: expected the activations of {list(self.forward_layers())} "
                f"(from network.forward(x, nc.forward_layers())); got {len(acts)} arrays."
            )
        ranges = dict(zip(self.map_layers_, acts[n:]))
        parts = []
        for i, (offset, a) in enumerate(self._per_layer(acts[:n])):
            neuron = offset + np.arange(a.shape[1], dtype=np.int64)
            if self.scaling == "none":
                parts.append(np.where(a > self.threshold, neuron, -1))
                continue
            if i in ranges:
                extent = np.asarray(ranges[i], dtype=np.float64)
                low, high = extent[:, :1], extent[:, 1:2]
            else:
                low, high = a.min(axis=1, keepdims=True), a.max(axis=1, keepdims=True)
            span = high - low
            scaled = np.divide(a - low, span, out=np.zeros_like(a), where=span > 0)
            parts.append(np.where(scaled > self.threshold, neuron, -1))
        return np.concatenate(parts, axis=1)


class _BoundsCriterion(_NeuronCriterion):
    """Learns each neuron's training range: ``min_`` and ``max_`` (n_neurons_,) float64."""

    def _fit_start(self, network, layers):
        return {"min": np.full(self.n_neurons_, np.inf), "max": np.full(self.n_neurons_, -np.inf)}

    def _fit_batch(self, state, probs, acts, y) -> None:
        a = np.concatenate([np.asarray(v, dtype=np.float64) for v in acts], axis=1)
        np.fmin(state["min"], a.min(axis=0, initial=np.inf), out=state["min"])
        np.fmax(state["max"], a.max(axis=0, initial=-np.inf), out=state["max"])

    def _fit_end(self, state) -> None:
        self.min_, self.max_ = state["min"], state["max"]
        self.total_ = self._total()

    def _total(self) -> int:
        return self.n_neurons_


class KMultisectionCoverage(_BoundsCriterion):
    """KMNC (DeepGauge): each neuron's training range [min, max] cut into ``k`` equal sections; the
    share of the k * neurons sections that some input's activation falls in.

    Values outside [min, max] are in no section (the original counted them and inflated KMNC; they
    count for NBC and SNAC instead). The upper bound belongs to the last section. A neuron constant on
    the training data (min = max, e.g. a dead ReLU) has all its sections at that one value: hitting it
    covers its first section only.

    Parameters
    ----------
    k : int >= 1, default 1000 (the paper's setting).
    layers : layer names, default every hidden layer with weights before the logits.
    """

    name = "kmnc"
    unit = "sections"

    def __init__(self, *, k: int = 1000, layers: Sequence[str] | None = None):
        self.k = k
        self.layers = layers

    def _validate_params(self) -> None:
        super()._validate_params()
        check_int("k", self.k, 1, owner=type(self).__name__)

    def _total(self) -> int:
        return int(self.k) * self.n_neurons_

    def features_from(self, probs, acts) -> np.ndarray:
        a = self._stack(acts)
        low, high = self.min_, self.max_
        width = high - low
        inside = (a >= low) & (a <= high)
        with np.errstate(invalid="ignore"):  # a - low is inf - inf for a neuron never seen finite
            position = np.divide((a - low) * self.k, width, out=np.zeros_like(a), where=(width > 0) & inside)
        section = np.minimum(np.floor(position).astype(np.int64), self.k - 1)
        neuron = np.arange(self.n_neurons_, dtype=np.int64)
        return np.where(inside, neuron * self.k + section, -1)


class NeuronBoundaryCoverage(_BoundsCriterion):
    """NBC (DeepGauge): the share of the 2 * neurons corners reached: the lower corner of a neuron by a
    value below its training minimum, the upper corner by a value above its training maximum.

    Item ids: neuron j's lower corner is j, its upper corner n_neurons_ + j.

    Parameters
    ----------
    layers : layer names, default every hidden layer with weights before the logits.
    """

    name = "nbc"
    unit = "corners"

    def _total(self) -> int:
        return 2 * self.n_neurons_

    def features_from(self, probs, acts) -> np.ndarray:
        a = self._stack(acts)
        neuron = np.arange(self.n_neurons_, dtype=np.int64)
        return np.where(a < self.min_, neuron, np.where(a > self.max_, self.n_neurons_ + neuron, -1))


class StrongNeuronActivationCoverage(_BoundsCriterion):
    """SNAC (DeepGauge): the share of neurons whose upper corner (a value above the training maximum)
    some input reaches.

    Parameters
    ----------
    layers : layer names, default every hidden layer with weights before the logits.
    """

    name = "snac"
    unit = "upper corners"

    def features_from(self, probs, acts) -> np.ndarray:
        a = self._stack(acts)
        return np.where(a > self.max_, np.arange(self.n_neurons_, dtype=np.int64), -1)


class TopKNeuronCoverage(_NeuronCriterion):
    """TKNC (DeepGauge): the share of neurons that are among the ``k`` most active of their layer for
    some input. Ties go to the lower neuron index; a layer narrower than k contributes all its neurons.
    Fit needs no training data: it only resolves the layers.

    Parameters
    ----------
    k : int >= 1, default 3 (the paper's setting).
    layers : layer names, default every hidden layer with weights before the logits.
    """

    name = "tknc"
    unit = "neurons"
    needs_data = False

    def __init__(self, *, k: int = 3, layers: Sequence[str] | None = None):
        self.k = k
        self.layers = layers

    def _validate_params(self) -> None:
        super()._validate_params()
        check_int("k", self.k, 1, owner=type(self).__name__)

    def features_from(self, probs, acts) -> np.ndarray:
        return np.concatenate(
            [
                offset + np.argsort(-a, axis=1, kind="stable")[:, : self.k].astype(np.int64)
                for offset, a in self._per_layer(acts)
            ],
            axis=1,
        )
