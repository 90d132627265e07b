"""Writing what the recipes find: Markdown and CSV tables, JSON files, the command line that made them,
and cells of repeated measurements."""

from __future__ import annotations

import csv
import json
import sys
import time
from pathlib import Path

import numpy as np

from .paths import ROOT


def write_csv(path: Path, rows: list[dict]) -> Path:
    """``rows`` (dicts) as a CSV file; the columns are every key of the rows, in the order first met."""
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(dict.fromkeys(k for row in rows for k in row)))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_table(folder: Path, name: str, rows: list[dict], *, title: str, notes: str = "", command: str = "") -> Path:
    """``<name>.md`` (with title, command and notes) and ``<name>.csv`` from a list of row dicts."""
    folder.mkdir(parents=True, exist_ok=True)
    columns = list(rows[0])
    lines = [f"# {title}", ""]
    if command:
        lines += [f"Command: `{command}`", ""]
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(r[c]) for c in columns) + " |" for r in rows]
    if notes:
        lines += ["", notes]
    (folder / f"{name}.md").write_text("\n".join(lines) + "\n")
    write_csv(folder / f"{name}.csv", rows)
    print("\n".join(lines))
    return folder / f"{name}.md"


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def mean_std(values) -> str:
    values = np.asarray(values, float)
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{values.mean():.2f} ± {values.std(ddof=1):.2f}"


def cell(values, digits: int = 1) -> str:
    """``mean ± std`` (sample std) of repeated measurements with ``digits`` decimals; the value alone for one."""
    values = np.asarray(values, float)
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{values.mean():.{digits}f} ± {values.std(ddof=1):.{digits}f}"


def command_line() -> str:
    return "python " + " ".join(
        [str(Path(sys.argv[0]).relative_to(ROOT)) if Path(sys.argv[0]).is_absolute() else sys.argv[0]] + sys.argv[1:]
    )


class Timer:
    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start


def save_json(path: Path, data) -> None:
    """``data`` as indented JSON, written whole or not at all (a run's file marks the run done)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


def write_training_tables(
    folder: Path,
    dataset: str,
    summary: str,
    row: dict,
    name: str,
    *,
    title: str,
    notes: str,
    model_column: bool = False,
) -> dict:
    """Write a trained model's per-epoch history (``history_<dataset>``) and its summary row (``summary``),
    keeping the rows of models trained by other runs; returns the row with the command, without history."""
    row = dict(row, command=command_line())
    history = [dict(h, **({"model": name} if model_column else {}), command=row["command"]) for h in row.pop("history")]
    write_table(
        folder,
        f"history_{dataset}",
        merged(folder / f"history_{dataset}.csv", history, name),
        title=f"{title}, per epoch",
    )
    write_table(folder, summary, merged(folder / f"{summary}.csv", [row], name), title=title, notes=notes)
    return row


def merged(path: Path, rows: list[dict], model: str) -> list[dict]:
    """The rows of the table ``path`` for other models than ``model`` (earlier runs), then ``rows``."""
    if not path.exists():
        return rows
    with open(path, newline="") as handle:
        kept = [r for r in csv.DictReader(handle) if r["model"] != model and list(r) == list(rows[0])]
    return kept + rows
