"""What DeepBase measures: the unit groups (`UnitGroup`, parsed from ``LAYER`` or ``LAYER:i,j,k``) and the
measures named."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ParameterError
from .statistics import MEASURES


@dataclass(frozen=True)
class UnitGroup:
    """Units of one layer, measured together by the linear model."""

    name: str
    layer: str
    neurons: tuple[int, ...]


def parse_measures(spec) -> tuple[str, ...]:
    """ "pearson,spearman" or a sequence -> the measures, in the order given, each once."""
    names = [s.strip().lower() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    unknown = [n for n in names if n not in MEASURES]
    if not names or unknown:
        raise ParameterError(
            f"unknown measure {unknown[0]!r}; choose among {', '.join(MEASURES)}"
            if unknown
            else f"no measure given; choose among {', '.join(MEASURES)}"
        )
    return tuple(dict.fromkeys(names))


def parse_units(spec: str, network) -> list[UnitGroup]:
    """Unit groups from ``LAYER`` (all its neurons) or ``LAYER:i,j,k``, several joined by ``;``."""
    groups = []
    for part in (p.strip() for p in spec.split(";")):
        if not part:
            continue
        layer, _, listed = part.partition(":")
        layer = network.step(layer.strip()).name  # LayerError naming the valid layers
        width = network.neuron_count(layer)
        if not listed.strip():
            groups.append(UnitGroup(f"{layer} (all {width})", layer, tuple(range(width))))
            continue
        try:
            neurons = tuple(int(v) for v in listed.split(",") if v.strip())
        except ValueError:
            raise ParameterError(
                f"units {part!r}: expected LAYER or LAYER:i,j,k with neuron indices, e.g. fc2:3,17,40"
            ) from None
        bad = [i for i in neurons if not 0 <= i < width]
        if not neurons or bad:
            raise ParameterError(
                f"units {part!r}: layer {layer} has neurons 0..{width - 1}; "
                + (f"got {bad[0]}" if bad else "no index given")
            )
        groups.append(UnitGroup(f"{layer}:{','.join(map(str, neurons))}", layer, tuple(dict.fromkeys(neurons))))
    if not groups:
        raise ParameterError(f"no unit group in {spec!r}; expected LAYER or LAYER:i,j,k, joined by ;")
    return groups
