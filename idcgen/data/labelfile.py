"""Labels beside images: a CSV file whose id column names the image files of a folder and whose target
column holds each image's label (a steering angle, a class index), as driving datasets ship them
(docs/design.md, "Regression models").

The spec is ``FILE.csv`` (columns detected) or ``FILE.csv:id_column,target_column``. An id matches a
file by its full name (``1479425441182877835.jpg``) or by its name without the extension.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError, ParameterError

#: Column names taken for the id and the target when the spec does not name them (first found, any case).
ID_NAMES = ("frame_id", "id", "filename", "file", "image", "name", "frame", "path")
TARGET_NAMES = ("steering_angle", "steering", "angle", "label", "target", "y", "value", "class")


@dataclass(frozen=True)
class LabelFile:
    path: Path
    id_column: str | None = None  # None: detected
    target_column: str | None = None


def parse_label_spec(spec) -> LabelFile:
    """``FILE.csv`` or ``FILE.csv:id_col,target_col`` -> LabelFile (the file must exist)."""
    text = os.fspath(spec)
    head, colon, tail = text.rpartition(":")
    if colon and "," in tail and not Path(text).exists():
        columns = [c.strip() for c in tail.split(",")]
        if len(columns) != 2 or not all(columns):
            raise ParameterError(f"--labels takes FILE.csv or FILE.csv:ID_COLUMN,TARGET_COLUMN; got {text!r}")
        path, id_column, target_column = Path(head).expanduser(), columns[0], columns[1]
    else:
        path, id_column, target_column = Path(text).expanduser(), None, None
    if not path.is_file():
        raise InputError(f"label file not found: {path}; give a CSV file with an id and a target column")
    return LabelFile(path, id_column, target_column)


def _read_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            first = handle.readline()
            handle.seek(0)
            # spreadsheets of some locales write ';' (the comma is their decimal mark), others tabs
            delimiter = next((d for d in ",;\t|" if d in first), ",")
            rows = [row for row in csv.reader(handle, delimiter=delimiter) if any(cell.strip() for cell in row)]
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise InputError(f"cannot read label file {path}: {err}") from err
    if len(rows) < 2:
        raise InputError(
            f"label file {path} has no rows under its header; expected a header line (e.g. "
            "frame_id,steering_angle) and one row per image"
        )
    return [c.strip() for c in rows[0]], rows[1:]


def _pick(header: list[str], wanted: str | None, known: tuple, what: str, path: Path, exclude=()) -> int:
    lower = [c.lower() for c in header]
    if wanted is not None:
        if wanted.lower() not in lower:
            raise InputError(
                f"label file {path} has no {what} column {wanted!r} (columns: {', '.join(header)}); "
                f"name one of its columns"
            )
        return lower.index(wanted.lower())
    for name in known:
        if name in lower and lower.index(name) not in exclude:
            return lower.index(name)
    raise InputError(
        f"label file {path} has no {what} column that idcgen recognises (columns: {', '.join(header)}; "
        f"known names: {', '.join(known)}); name the columns: --labels {path}:ID_COLUMN,TARGET_COLUMN"
    )


def read_labels(spec, files: list[Path]) -> tuple[np.ndarray, str]:
    """The label of each of ``files`` (in their order) from the CSV ``spec``, and a note for the user.

    Integer targets stay int64 (class indices), others become float64 (a regression target). Refused with
    one line: a CSV without the columns, ids matching no file, files without a label, targets that are not
    numbers, an id given twice with two labels.
    """
    spec = spec if isinstance(spec, LabelFile) else parse_label_spec(spec)
    header, rows = _read_rows(spec.path)
    id_col = _pick(header, spec.id_column, ID_NAMES, "id", spec.path)
    target_col = _pick(header, spec.target_column, TARGET_NAMES, "target", spec.path, exclude=(id_col,))
    by_id: dict[str, str] = {}
    for number, row in enumerate(rows, start=2):
        if len(row) <= max(id_col, target_col):
            raise InputError(
                f"label file {spec.path}, line {number}: {len(row)} fields, expected at least "
                f"{max(id_col, target_col) + 1}"
            )
        key, value = row[id_col].strip(), row[target_col].strip()
        if by_id.get(key, value) != value:
            raise InputError(
                f"label file {spec.path} gives id {key!r} two labels ({by_id[key]} and {value}); keep one row per image"
            )
        by_id[key] = value
    found: list[str] = []
    missing: list[str] = []
    for f in files:
        match = f.name if f.name in by_id else f.stem if f.stem in by_id else None
        (found if match is not None else missing).append(match if match is not None else f.name)
    if not any(k is not None for k in found):
        raise InputError(
            f"no id of {spec.path}'s column {header[id_col]!r} (e.g. {next(iter(by_id))!r}) matches an "
            f"image file name (e.g. {files[0].name!r}); ids must be the file names, with or without "
            "the extension"
        )
    if missing:
        raise InputError(
            f"{len(missing)} of {len(files)} images have no label in {spec.path} (first: {missing[0]}); "
            "add their rows or move them out of the folder"
        )
    text = [by_id[k] for k in found]
    try:
        values = np.array([float(v) for v in text], np.float64)
    except ValueError:
        bad = next(v for v in text if not _is_number(v))
        raise InputError(
            f"label file {spec.path}: target column {header[target_col]!r} holds {bad!r}, not a "
            "number; give numeric targets (a class index or a value)"
        ) from None
    whole = all(v.lstrip("+-").isdigit() for v in text)
    labels = values.astype(np.int64) if whole else values
    unused = len(by_id) - len(set(found))
    note = (
        f"labels: column {header[target_col]!r} of {spec.path} by {header[id_col]!r} "
        f"({'class indices' if whole else 'numbers'}, {len(files)} images"
        + (f"; {unused} ids of the file match no image here and are not used)" if unused else ")")
    )
    return labels, note


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False
