"""DeepInspect's report: :class:`InspectResult`, its pairs table, CSV/JSON, plots and the Markdown/HTML
report."""

from __future__ import annotations

import csv
import errno
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..checks import check_int
from ..errors import InputError
from ..markdown import to_html
from .statistics import class_pairs, json_number, napvd

#: what write_report writes into its folder
REPORT_FILES = ("pairs.csv", "inspect.json", "napvd.png", "scatter.png", "examples.png", "report.md", "report.html")


@dataclass
class InspectResult:
    """What :func:`inspect` found. ``napv`` is (neurons, classes) P(active | predicted class), neurons of
    ``layers`` in order; ``columns[view]`` the per-pair arrays of the view ("all", and "important" with an
    analysis); ``metrics[view]`` the figures; ``pairs`` the table (one dict per class pair)."""

    layers: tuple
    widths: tuple
    threshold: float
    scaling: str
    n_inputs: int
    n_classes: int
    napv: np.ndarray
    per_class: np.ndarray
    columns: dict
    metrics: dict
    predictions: np.ndarray
    runner_up: np.ndarray
    runner_up_probability: np.ndarray
    labels: np.ndarray | None = None
    notes: list = field(default_factory=list)
    passes: int = 1
    seconds: float = 0.0
    class_names: tuple | None = None
    important: dict | None = None
    napv_important: np.ndarray | None = None

    def name(self, c: int) -> str:
        return str(self.class_names[c]) if self.class_names and c < len(self.class_names) else str(c)

    @property
    def napvd(self) -> np.ndarray:
        """(classes, classes) NAPVD over all neurons."""
        return napvd(self.napv)

    @property
    def pairs(self) -> list[dict]:
        """One row per class pair (a < b), smallest NAPVD first; columns of the "important" view are
        prefixed ``important_``."""
        ia, ib = class_pairs(self.n_classes)
        rows = []
        for i, (a, b) in enumerate(zip(ia.tolist(), ib.tolist())):
            row = {"a": a, "b": b}
            if self.class_names:
                row.update(a_name=self.name(a), b_name=self.name(b))
            for view, cols in self.columns.items():
                prefix = "" if view == "all" else f"{view}_"
                for key, values in cols.items():
                    if prefix and key in ("type1conf", "avg_cd", "confused", "biased"):
                        continue  # the ground truth does not depend on the neurons
                    value = values[i]
                    row[prefix + key] = bool(value) if values.dtype == bool else json_number(value)
            rows.append(row)
        return sorted(rows, key=lambda r: (r["napvd"] is None, r["napvd"] if r["napvd"] is not None else 0))

    def to_frame(self) -> list[dict]:
        """The pairs table as a list of dicts (``pandas.DataFrame(result.to_frame())`` if you use pandas)."""
        return self.pairs

    def top(self, k: int = 10) -> list[dict]:
        """The ``k`` pairs with the smallest NAPVD (the likeliest confusions)."""
        return self.pairs[: check_int("k", k, 1)]

    def summary(self) -> dict:
        """Everything but the per-pair table, JSON-ready."""
        return {
            "inputs": self.n_inputs,
            "classes": self.n_classes,
            "layers": list(self.layers),
            "neurons": int(sum(self.widths)),
            "threshold": self.threshold,
            "scaling": self.scaling,
            "labels": self.labels is not None,
            "predicted_per_class": self.per_class.tolist(),
            "passes": self.passes,
            "seconds": round(self.seconds, 3),
            "important": self.important,
            "metrics": self.metrics,
            "notes": list(self.notes),
        }

    def to_dict(self) -> dict:
        return dict(self.summary(), pairs=self.pairs)

    def write_csv(self, path) -> Path:
        rows = self.pairs
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in r.items()} for r in rows)
        return _write(path, buffer.getvalue())

    def write_json(self, path) -> Path:
        return _write(path, json.dumps(self.to_dict(), indent=1) + "\n")

    def __repr__(self) -> str:
        m = self.metrics["all"]
        line = (
            f"InspectResult({self.n_inputs} inputs, {self.n_classes} classes, {m['neurons']} neurons of "
            f"{len(self.layers)} layers; {m['predicted']['confusion_std']} pairs predicted confused "
            f"(mean - 1 std), {m['predicted']['confusion_top']} at the top 1 %"
        )
        if "confusion" in m:
            c = m["confusion"]
            line += (
                f"; precision {_fmt(c['std']['precision'])}, recall {_fmt(c['std']['recall'])}, "
                f"Spearman {_fmt(c['spearman'])}"
            )
        return line + ")"

    def summary_lines(self, top: int = 10, report=None) -> list[str]:
        """What ``idcgen inspect`` prints: the notes, the figures, the ``top`` pairs with the smallest NAPVD
        (marked where predicted confused) and, with labels, precision and recall; ``report``: where it was
        written."""
        m = self.metrics["all"]
        layers = self.layers  # DenseNet121 has 120: all are in the report, the line names the first and the last
        named = (
            ", ".join(layers)
            if len(layers) <= 6
            else f"{len(layers)} layers ({', '.join(layers[:5])} ... {layers[-1]})"
        )
        lines = [f"note: {note}" for note in self.notes]
        lines += [
            f"{self.n_inputs} inputs, {self.n_classes} classes, {m['neurons']} neurons of {named}; "
            f"NAPVD mean {_or_na(m['napvd_mean'])}, std {_or_na(m['napvd_std'])}",
            "pairs with the smallest NAPVD (* predicted confused: below mean - 1 std; ** also top 1 %; + top 1 % only):",
        ]
        for r in self.top(top):
            # the two cut-offs are separate predictions: with few defined pairs the lowest need not be below
            # mean - 1 std
            mark = _CONFUSION_MARKS[bool(r["confusion_std"]), bool(r["confusion_top"])]
            conf = r.get("type1conf")  # None: no labelled input of either class
            extra = (
                ""
                if "type1conf" not in r
                else f"  type-1 confusion {'n/a' if conf is None else f'{conf:.4f}'}"
                + (" (confused)" if r["confused"] else "")
            )
            lines.append(f"  {self.name(r['a'])} - {self.name(r['b'])}: NAPVD {_or_na(r['napvd'], '.3f')}{mark}{extra}")
        for view, vm in self.metrics.items():
            for what in ("confusion", "bias") if "confusion" in vm else ():
                e = vm[what]
                lines.append(
                    f"{what} ({view} neurons, {vm['neurons']}): {e['actual']} actual pairs; mean - 1 std: "
                    f"precision {_rate(e['std']['precision'])}, recall {_rate(e['std']['recall'])}; top 1 %: "
                    f"precision {_rate(e['top']['precision'])}, recall {_rate(e['top']['recall'])}; "
                    f"Spearman {_rate(e['spearman'])}"
                )
        if report is not None:
            lines.append(f"report: {report} (and report.html, pairs.csv, inspect.json)")
        return lines

    # ---- plots and report --------------------------------------------------------------------------
    def plot(self, folder=None) -> dict[str, Path]:
        """Save the NAPVD heatmap (``napvd.png``) and, with labels, the NAPVD-vs-type-1-confusion scatter
        (``scatter.png``) into ``folder`` (default the working folder); returns their paths."""
        from ..plots import pyplot

        plt = pyplot()
        folder = Path(folder or ".")
        folder.mkdir(parents=True, exist_ok=True)
        paths = {}
        d = self.napvd.copy()
        np.fill_diagonal(d, np.nan)
        k = self.n_classes
        fig, ax = plt.subplots(figsize=(1.2 + 0.45 * k, 0.8 + 0.45 * k))
        im = ax.imshow(d, cmap="viridis_r")
        ticks = [self.name(c) for c in range(k)]
        ax.set_xticks(range(k), ticks, rotation=90, fontsize=7)
        ax.set_yticks(range(k), ticks, fontsize=7)
        fig.colorbar(im, ax=ax, fraction=0.046, label="NAPVD (small = likely confused)")
        ax.set_title(f"NAPVD, {sum(self.widths)} neurons", fontsize=9)
        fig.tight_layout()
        paths["heatmap"] = folder / "napvd.png"
        fig.savefig(paths["heatmap"], dpi=110)
        plt.close(fig)
        if "type1conf" in self.columns["all"]:
            views = list(self.columns)
            fig, axes = plt.subplots(1, len(views), figsize=(4.2 * len(views), 3.6), squeeze=False)
            for ax, view in zip(axes[0], views):
                cols = self.columns[view]
                truth = self.columns["all"]["confused"]
                ax.scatter(
                    cols["napvd"][~truth],
                    self.columns["all"]["type1conf"][~truth],
                    s=12,
                    c="tab:blue",
                    label="not confused",
                )
                ax.scatter(
                    cols["napvd"][truth],
                    self.columns["all"]["type1conf"][truth],
                    s=16,
                    c="tab:red",
                    label="confused (ground truth)",
                )
                ax.set_xlabel(f"NAPVD ({view} neurons)")
                ax.set_ylabel("type-1 confusion")
                rho = self.metrics[view]["confusion"]["spearman"]
                ax.set_title(f"{view}: Spearman {_fmt(rho)}", fontsize=9)
                ax.legend(fontsize=7)
            fig.tight_layout()
            paths["scatter"] = folder / "scatter.png"
            fig.savefig(paths["scatter"], dpi=110)
            plt.close(fig)
        return paths

    def examples(self, a: int, b: int, per_side: int = 4) -> tuple[np.ndarray, np.ndarray]:
        """Indices of inputs predicted ``a`` with ``b`` second, and of inputs predicted ``b`` with ``a``
        second, the most hesitant first (highest runner-up probability), ``per_side`` each at most."""
        out = []
        for first, second in ((a, b), (b, a)):
            idx = np.flatnonzero((self.predictions == first) & (self.runner_up == second))
            out.append(idx[np.argsort(-self.runner_up_probability[idx], kind="stable")][:per_side])
        return out[0], out[1]

    def write_report(self, folder, x=None, *, top: int = 10, title: str = "", value_range=(0.0, 1.0)) -> Path:
        """``pairs.csv``, ``inspect.json``, the plots, example images of the predicted pairs (from ``x``,
        the inputs as inspected) and ``report.md``/``report.html`` into ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for optional in ("scatter.png", "examples.png"):  # replaced: none left from an earlier run's labels or x
            (folder / optional).unlink(missing_ok=True)
        try:
            return self._write_report(folder, x, top=top, title=title, value_range=value_range)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            for name in REPORT_FILES:  # no half report (a 0-byte PNG) left to be mistaken for one
                (folder / name).unlink(missing_ok=True)
            raise InputError(
                f"no space left on the device of {folder}"
                + (f" (writing {exc.filename})" if exc.filename else "")
                + "; the half-written report was removed: free some space, then run inspect again"
            ) from None

    def _write_report(self, folder: Path, x, *, top: int, title: str, value_range) -> Path:
        self.write_csv(folder / "pairs.csv")
        self.write_json(folder / "inspect.json")
        plots = self.plot(folder)
        lines = [f"# DeepInspect report{': ' + title if title else ''}", ""]
        lines += [f"- note: {n}" for n in self.notes]
        m = self.metrics["all"]
        lines += [
            f"- {self.n_inputs} inputs, {self.n_classes} classes; layers {', '.join(self.layers)} "
            f"({m['neurons']} neurons); active = above {self.threshold:g} after min-max scaling per "
            f"{self.scaling}; {self.passes} pass(es), {self.seconds:.1f} s",
            f"- inputs predicted per class: {', '.join(f'{self.name(c)}: {n}' for c, n in enumerate(self.per_class))}",
            f"- NAPVD mean {_fmt(m['napvd_mean'])}, std {_fmt(m['napvd_std'])}; predicted confused: "
            f"{m['predicted']['confusion_std']} pairs below mean - 1 std, {m['predicted']['confusion_top']} "
            f"at the top 1 %; predicted biased: {m['predicted']['bias_std']} above mean + 1 std, "
            f"{m['predicted']['bias_top']} at the top 1 %",
        ]
        if self.important:
            lines.append(
                f"- important neurons: {len(self.important['neurons'])} of layer "
                f"`{self.important['layer']}` {self.important['neurons']}"
            )
        if "confusion" in m:
            lines += [
                "",
                "## Against the labels",
                "",
                "Ground truth: type-1 confusion and avg_cd above mean + 1 std (docs/design.md, "
                '"Confusion and bias (DeepInspect)").',
                "",
                "| neurons | errors | actual | precision (mean - 1 std) | recall (mean - 1 std) | "
                "precision (top 1 %) | recall (top 1 %) | Spearman | AUCEC | gain over random |",
                "|---|---|---|---|---|---|---|---|---|---|",
            ]
            for view, vm in self.metrics.items():
                for what in ("confusion", "bias"):
                    e = vm[what]
                    lines.append(
                        f"| {view} ({vm['neurons']}) | {what} | {e['actual']} | {_fmt(e['std']['precision'])} | "
                        f"{_fmt(e['std']['recall'])} | {_fmt(e['top']['precision'])} | "
                        f"{_fmt(e['top']['recall'])} | {_fmt(e['spearman'])} | {_fmt(e['aucec'])} | "
                        f"{_fmt(e['gain'], pct=True)} |"
                    )
        lines += [
            "",
            f"## The {min(top, len(self.pairs))} pairs with the smallest NAPVD",
            "",
            *_pair_table(self, top),
            "",
            "![NAPVD heatmap](napvd.png)",
        ]
        if "scatter" in plots:
            lines += ["", "![NAPVD against type-1 confusion](scatter.png)"]
        if x is not None:
            shown = self._example_plot(folder, x, value_range)
            if shown:
                lines += [
                    "",
                    "## Examples of the predicted confusion pairs",
                    "",
                    "Per pair: inputs predicted a with b as the runner-up (top row), and the reverse (bottom row).",
                    "",
                    "![Examples](examples.png)",
                ]
        md = "\n".join(lines) + "\n"
        _write(folder / "report.md", md)
        _write(folder / "report.html", to_html(md, folder, title="idcgen inspect"))
        return folder / "report.md"

    def _example_plot(self, folder: Path, x: np.ndarray, value_range) -> bool:
        from ..plots import pyplot

        cols = self.columns["all"]
        ia, ib = class_pairs(self.n_classes)
        chosen = np.flatnonzero(cols["confusion_std"] | cols["confusion_top"])
        chosen = chosen[np.argsort(cols["napvd"][chosen])][:6]
        if not len(chosen) or np.asarray(x).ndim != 4:
            return False
        plt = pyplot()
        per_side = 4
        fig, axes = plt.subplots(2 * len(chosen), per_side, figsize=(1.3 * per_side, 2.6 * len(chosen)), squeeze=False)
        lo, hi = value_range
        for row, i in enumerate(chosen):
            a, b = int(ia[i]), int(ib[i])
            for side, idx in enumerate(self.examples(a, b, per_side)):
                for col in range(per_side):
                    ax = axes[2 * row + side, col]
                    ax.axis("off")
                    if col < len(idx):
                        img = np.clip((np.asarray(x[idx[col]], np.float64) - lo) / (hi - lo), 0, 1)
                        ax.imshow(img[..., 0] if img.shape[-1] == 1 else img, cmap="gray", vmin=0, vmax=1)
                        first, second = (a, b) if side == 0 else (b, a)
                        ax.set_title(f"#{idx[col]} {self.name(first)} (2nd {self.name(second)})", fontsize=6)
        fig.tight_layout()
        fig.savefig(folder / "examples.png", dpi=100)
        plt.close(fig)
        return True


def _pair_table(result: InspectResult, top: int) -> list[str]:
    rows = result.pairs[:top]
    keys = [k for k in ("napvd", "important_napvd", "avg_bias", "type1conf") if k in rows[0]]
    flags = [k for k in ("confusion_std", "confusion_top", "confused") if k in rows[0]]
    out = ["| a | b | " + " | ".join(keys + flags) + " |", "|---" * (2 + len(keys) + len(flags)) + "|"]
    for r in rows:
        out.append(
            f"| {result.name(r['a'])} | {result.name(r['b'])} | "
            + " | ".join(_fmt(r[k]) for k in keys)
            + (" | " if flags else "")
            + " | ".join("yes" if r[k] else "" for k in flags)
            + " |"
        )
    return out


#: the mark of a pair by (below mean - 1 std, in the top 1 %)
_CONFUSION_MARKS = {(True, True): "**", (True, False): "*", (False, True): "+", (False, False): ""}


def _or_na(value, spec: str = ".3g") -> str:
    """NAPVD statistics are None when no class pair has one (inputs of a single class)."""
    return "n/a" if value is None else f"{value:{spec}}"


def _rate(value) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _fmt(value, pct: bool = False) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{100 * value:+.0f} %" if pct else f"{value:.3g}"


def _write(path, text: str) -> Path:
    from ..files import atomic_text

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_text(path, text)
    return path
