"""DeepBase's report: :class:`AffinityResult` in words, tables and heatmaps, and `write_report` (CSV, JSON,
Markdown/HTML)."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ParameterError
from ..markdown import to_html
from .hypotheses import Hypothesis
from .statistics import MASK_MEASURES, TITLES
from .units import UnitGroup


@dataclass
class AffinityResult:
    """Scores of every (unit, hypothesis) per unit measure and every (group, hypothesis) for ``linear``.

    ``scores[m]`` is (units, hypotheses) for pearson/spearman/mi and (groups, hypotheses) for linear, with
    ``half_widths[m]`` (95 % interval) and ``n_used[m]`` (inputs the score was computed on)."""

    units: list[tuple[str, int]]
    groups: list[UnitGroup]
    hypotheses: list[Hypothesis]
    measures: tuple[str, ...]
    scores: dict
    half_widths: dict
    n_used: dict
    baselines: np.ndarray  # (groups, hypotheses): majority share (0/1 hypotheses) or 0 (R^2)
    binary: np.ndarray  # (hypotheses,) bool: a 0/1 hypothesis on the inputs used
    n_inputs: int
    n_seen: int
    tol: float | None
    y_source: str  # "labels" or "predictions": what the hypotheses got as y
    seconds: float
    timings: dict = field(default_factory=dict)
    checks: list = field(default_factory=list)  # input counts at which scores were checked
    channels: set = field(default_factory=set)  # layers whose neurons are channels (conv)
    notes: list = field(default_factory=list)

    def __repr__(self) -> str:  # a notebook shows this; table() gives the scores
        return (
            f"AffinityResult({len(self.units)} units, {len(self.hypotheses)} hypotheses "
            f"({', '.join(h.name for h in self.hypotheses)}), measures={list(self.measures)}, "
            f"{self.n_inputs} inputs; .table() shows the scores)"
        )

    # -- words --
    def summary_lines(self, report=None) -> list[str]:
        """What ``idcgen affinity`` prints: the notes, what was measured, the tables of the headline measure
        (and of linear and the masks' where measured), the plain-words lines; ``report``: where it was written."""
        stop = (
            f"early stopping at +-{self.tol}: {self.n_seen} of {self.n_inputs} inputs"
            if self.tol
            else f"all {self.n_inputs} inputs"
        )
        lines = [f"note: {note}" for note in self.notes]
        lines.append(
            f"{len(self.units)} units in {len(self.groups)} group(s), {len(self.hypotheses)} hypotheses, "
            f"{', '.join(self.measures)}; {stop}; {self.seconds:.1f} s"
        )
        shown = [self.headline() or self.measures[0]] + [m for m in ("linear", "pixel", "iou") if m in self.measures]
        lines += [self.table(measure) for measure in dict.fromkeys(shown)]
        lines += self.describe()
        if report is not None:
            lines.append(f"report: {report} (and report.html, affinity.csv, affinity.json)")
        return lines

    def unit_name(self, i: int) -> str:
        layer, neuron = self.units[i]
        return f"{'channel' if layer in self.channels else 'neuron'} {neuron} of {layer}"

    def headline(self) -> str | None:
        """The unit measure that plain-words lines use: Spearman, else Pearson, else MI."""
        return next((m for m in ("spearman", "pearson", "mi") if m in self.measures), None)

    def top(self, k: int = 3, measure: str | None = None) -> list[tuple[int, list[tuple[int, float]]]]:
        """Per unit: its ``k`` hypotheses of largest |score| (NaN last): [(unit, [(hypothesis, score)])]."""
        measure = measure or self.headline()
        if measure is None:
            return []
        s = self.scores[measure]
        out = []
        for u in range(len(self.units)):
            key = np.where(np.isnan(s[u]), -1.0, np.abs(s[u]))
            order = np.argsort(-key, kind="stable")[:k]
            out.append((u, [(int(j), float(s[u, j])) for j in order]))
        return out

    def constant_units(self) -> set[int]:
        """The units whose correlation with every hypothesis is undefined: constant on the inputs."""
        found = set()
        for m in ("pearson", "spearman"):
            if m in self.scores:
                found |= {int(u) for u in np.flatnonzero(np.isnan(self.scores[m]).all(axis=1))}
        return found

    def describe(self, k: int = 1, measure: str | None = None) -> list[str]:
        """ "neuron 71 of fc2: class 1 one-vs-rest, Spearman 0.83" per unit; then each group's best
        hypothesis by the linear model."""
        measure = measure or self.headline()
        lines = []
        if measure is not None:
            constant = self.constant_units()
            for u, best in self.top(k, measure):
                if u in constant:  # its correlations are 0/0: "nan" read as a bug, or as a finding
                    lines.append(
                        f"{self.unit_name(u)}: constant unit (the same activation on every input: no "
                        "hypothesis can explain it)"
                    )
                    continue
                said = "; ".join(
                    f"{self.hypotheses[j].words}, {TITLES[measure].capitalize() if measure != 'mi' else 'MI'} {_fmt(v)}"
                    for j, v in best
                )
                lines.append(f"{self.unit_name(u)}: {said}")
        if "linear" in self.measures:
            s = self.scores["linear"]
            for g, group in enumerate(self.groups):
                for kind in (True, False):  # the best 0/1 hypothesis (accuracy above the majority share), then R^2
                    gain = np.where(self.binary == kind, s[g] - self.baselines[g], np.nan)
                    if np.isnan(gain).all():
                        continue
                    j = int(np.nanargmax(gain))
                    what = (
                        f"logistic accuracy {_fmt(s[g, j])} (majority {_fmt(self.baselines[g, j])})"
                        if kind
                        else f"linear R^2 {_fmt(s[g, j])}"
                    )
                    lines.append(f"{group.name} ({len(group.neurons)} units): {self.hypotheses[j].words}, {what}")
        return lines

    # -- tables --
    def rows(self) -> list[dict]:
        """One row per score: unit or group, hypothesis, measure, score, 95 % interval half-width, inputs used."""
        out = []
        for m in self.measures:
            s, w, n = self.scores[m], self.half_widths[m], self.n_used[m]
            owners = (
                [(self.unit_name(i), self.units[i][0], self.units[i][1], "") for i in range(len(self.units))]
                if m != "linear"
                else [(g.name, g.layer, "", g.name) for g in self.groups]
            )
            for i, (who, layer, neuron, group) in enumerate(owners):
                for j, hyp in enumerate(self.hypotheses):
                    out.append(
                        {
                            "unit": who,
                            "layer": layer,
                            "neuron": neuron,
                            "group": group,
                            "hypothesis": hyp.name,
                            "measure": m,
                            "score": _num(s[i, j]),
                            "half_width": _num(w[i, j]),
                            "inputs": int(n[i, j]),
                            "baseline": _num(self.baselines[i, j]) if m == "linear" else "",
                        }
                    )
        return out

    def to_frame(self):
        """The rows as a pandas DataFrame (pandas needed)."""
        try:
            import pandas as pd
        except ImportError:
            raise ParameterError("to_frame needs pandas (pip install pandas); rows() gives the same as dicts") from None
        return pd.DataFrame(self.rows())

    def matrix(self, measure: str) -> np.ndarray:
        return self.scores[measure]

    def to_dict(self) -> dict:
        return {
            "units": [self.unit_name(i) for i in range(len(self.units))],
            "groups": [{"name": g.name, "layer": g.layer, "neurons": list(g.neurons)} for g in self.groups],
            "hypotheses": [
                {"name": h.name, "description": h.words, "binary": bool(b)}
                for h, b in zip(self.hypotheses, self.binary)
            ],
            "measures": list(self.measures),
            "scores": {m: _nested(self.scores[m]) for m in self.measures},
            "half_widths": {m: _nested(self.half_widths[m]) for m in self.measures},
            "inputs_used": {m: self.n_used[m].tolist() for m in self.measures},
            "inputs": self.n_inputs,
            "inputs_seen": self.n_seen,
            "tol": self.tol,
            "y": self.y_source,
            "checks": self.checks,
            "seconds": round(self.seconds, 3),
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
            "top": self.describe(),
            "notes": self.notes,
        }

    def table(self, measure: str | None = None) -> str:
        """The hypothesis x unit matrix of one measure as aligned text (hypotheses as rows)."""
        measure = measure or self.headline() or self.measures[0]
        s = self.scores[measure]
        cols = [f"{l}:{n}" for l, n in self.units] if measure != "linear" else [g.name for g in self.groups]
        head = [f"{TITLES[measure]}"] + cols
        body = [
            [h.name] + [_fmt(v) for v in s[:, j]]
            for j, h in enumerate(self.hypotheses)
            if measure not in MASK_MEASURES or not np.isnan(s[:, j]).all()
        ]  # mask measures: the masks only
        widths = [max(len(r[c]) for r in [head] + body) for c in range(len(head))]
        return "\n".join(
            "  ".join(v.rjust(w) if c else v.ljust(w) for c, (v, w) in enumerate(zip(r, widths))).rstrip()
            for r in [head] + body
        )

    def plot(self, path=None, measure: str | None = None):
        """Heatmap of one measure (hypotheses x units; the linear measure: x groups); saved to ``path`` if
        given. Returns the matplotlib figure."""
        from ..plots import pyplot

        plt = pyplot()
        measure = measure or self.headline() or self.measures[0]
        s = self.scores[measure].T
        cols = [f"{l}:{n}" for l, n in self.units] if measure != "linear" else [g.name for g in self.groups]
        fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * len(cols) + 2.5), max(3.0, 0.32 * len(self.hypotheses) + 1.5)))
        signed = measure in ("pearson", "spearman", "pixel")
        image = ax.imshow(
            np.ma.masked_invalid(s),
            cmap="RdBu_r" if signed else "viridis",
            aspect="auto",
            vmin=-1 if signed else None,
            vmax=1 if signed else None,
        )
        ax.set_xticks(range(len(cols)), cols, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(len(self.hypotheses)), [h.name for h in self.hypotheses], fontsize=7)
        fig.colorbar(image, ax=ax, label=TITLES[measure])
        ax.set_title(f"Affinity ({TITLES[measure]}), {self.n_seen} of {self.n_inputs} inputs", fontsize=9)
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, dpi=110)
            plt.close(fig)
        return fig

    def save(self, folder) -> Path:
        """``affinity.csv``, ``affinity.json``, the heatmaps and ``report.md``/``report.html`` into ``folder``."""
        return write_report(self, folder)


def _num(v):
    return (
        ""
        if v is None or (isinstance(v, float) and math.isnan(v)) or (np.ndim(v) == 0 and np.isnan(v))
        else round(float(v), 6)
    )


def _nested(a: np.ndarray) -> list:
    return [[None if not np.isfinite(v) else round(float(v), 6) for v in row] for row in a]


def _fmt(v) -> str:
    return "nan" if v is None or not np.isfinite(v) else f"{v:.2f}"


def write_report(result: AffinityResult, folder) -> Path:
    """``affinity.csv`` (every score), ``affinity.json``, one heatmap per measure and ``report.md`` /
    ``report.html`` (the heatmaps inlined) into ``folder``; returns the report.md path."""
    from ..files import atomic_text

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rows = result.rows()
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    atomic_text(folder / "affinity.csv", buffer.getvalue())
    atomic_text(folder / "affinity.json", json.dumps(result.to_dict(), indent=2) + "\n")
    lines = [
        "# Affinity of hidden units with hypotheses (DeepBase)",
        "",
        f"- inputs: {result.n_seen} of {result.n_inputs} streamed in a random order; hypotheses got the "
        f"{result.y_source} as y",
        "- early stopping: "
        + (
            f"a score is final once its 95 % interval is within +-{result.tol}; checks at "
            f"{', '.join(map(str, result.checks))} inputs"
            if result.tol
            else "off (every score on all inputs)"
        ),
        f"- time: {result.seconds:.1f} s (forward {result.timings.get('forward', 0):.1f} s, hypotheses "
        f"{result.timings.get('hypotheses', 0):.1f} s, measures {result.timings.get('measures', 0):.1f} s)",
    ]
    lines += [f"- note: {n}" for n in result.notes]
    lines += ["", "## Top hypotheses per unit", ""] + [f"- {line}" for line in result.describe(k=3)]
    for old in folder.glob("heatmap_*.png"):  # the folder is replaced: no heatmap of an earlier run's measures
        old.unlink()
    for m in result.measures:
        path = folder / f"heatmap_{m}.png"
        result.plot(path, m)
        owners = [f"{l}:{n}" for l, n in result.units] if m != "linear" else [g.name for g in result.groups]
        lines += [
            "",
            f"## {TITLES[m].capitalize()}",
            "",
            f"![{TITLES[m]}]({path.name})",
            "",
            "| hypothesis | " + " | ".join(owners) + " |",
            "|---|" + "---|" * len(owners),
        ]
        lines += [
            f"| {h.name} | " + " | ".join(_fmt(v) for v in result.scores[m][:, j]) + " |"
            for j, h in enumerate(result.hypotheses)
        ]
    md = "\n".join(lines) + "\n"
    atomic_text(folder / "report.md", md)
    atomic_text(folder / "report.html", to_html(md, folder, title="idcgen affinity"))
    return folder / "report.md"
