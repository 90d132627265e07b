"""Figures of docs/results.md recomputed from the per-run tables committed under docs/data/ (issue 32, "the
data stays"): each test fails when the CSV or the published figure changes. Plain csv and arithmetic, apart
from the recipes, so that the check is independent of the code that wrote the tables."""

import csv
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def published_row(label: str) -> list[str]:
    """The cells after the label of the one row of docs/results.md whose first cell is ``label``."""
    rows = [line for line in (DOCS / "results.md").read_text().splitlines() if line.startswith(f"| {label} |")]
    assert len(rows) == 1, f"{len(rows)} rows labelled {label!r} in docs/results.md"
    return [cell.strip() for cell in rows[0].strip("|").split("|")][1:]


def test_deeptests_table_7_by_epsilon_from_the_grids_runs():
    rows = read_csv(DOCS / "data" / "deeptest-grid" / "runs.csv")
    assert len(rows) == 3 * 70  # three Daves, seven transformations at ten values
    recomputed = []
    for eps in (0.01, 0.02, 0.03, 0.04, 0.05, None):
        kept = [
            r
            for r in rows
            if eps is None or abs(float(r["mse transformed"]) - float(r["mse original"])) <= eps  # DeepTest's Eq. 3
        ]
        recomputed.append(sum(int(r["erroneous lambda=5"]) for r in kept))
    cells = published_row("idcgen, three Daves, 561 frames each, by epsilon")
    assert [int(c.replace(",", "")) for c in cells] == recomputed


def section_row(heading: str, label: str) -> list[str]:
    """The cells after the label of the first row labelled ``label`` under the heading ``heading``."""
    text = (DOCS / "results.md").read_text()
    section = text[text.index(heading) :]
    row = next(line for line in section.splitlines() if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in row.strip("|").split("|")][1:]


def test_udacity_prioritisation_apfd_from_the_runs():
    import statistics

    rows = read_csv(DOCS / "data" / "prioritization-udacity" / "runs.csv")
    assert {float(r["failure_bound"]) for r in rows} == {0.111}  # the absolute bound, in radians
    heading = "### Dave-2 on the real steering angles, with an absolute failure bound"
    for ordering in ("random", "idc-rarity"):
        cells = section_row(heading, ordering)
        for k, name in enumerate(("clean", "corrupted", "adversarial")):
            apfd = [float(r["apfd"]) for r in rows if r["ordering"] == ordering and r["set"] == name]
            figure = (
                f"{apfd[0]:.3f}" if len(apfd) == 1 else f"{statistics.mean(apfd):.3f} ± {statistics.stdev(apfd):.3f}"
            )
            assert cells[2 * k] == figure
