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


FAMILY = (("idc", "none"), ("idc", "nc"), ("idc", "random-keep@idc"), ("nc", "random-keep@nc"))
V3 = {"MNIST": "mnist", "Fashion-MNIST": "fashion-mnist", "CIFAR-10": "cifar10"}


def p_cell(p: float) -> str:
    return f"{p:.1e}" if p < 0.001 else f"{p:.3f}"


def test_guidance_v3_declared_family_from_the_runs():
    """The declared family of the third guidance study (four comparisons on each of three datasets, Holm over
    the twelve), recomputed from the committed runs.csv: runs paired by (copy, state), Wilcoxon signed-rank
    from scipy, the rank-biserial correlation and Holm by hand. It checks that the published table follows from
    the data, with code written apart from the recipe's."""
    import statistics

    from scipy.stats import rankdata, wilcoxon

    text = (DOCS / "results.md").read_text()
    table = text[text.index("### The declared family") :]
    found = {}
    for name, dataset in V3.items():
        rows = read_csv(DOCS / "data" / "guidance-v3" / dataset / "runs.csv")
        value = {(r["arm"], r["copy"], r["state"]): float(r["valid_faults_per_1k_calls_5"]) for r in rows}
        pairs = sorted({(c, s) for _, c, s in value})
        assert len(pairs) == 15  # five copies x three states
        for a, b in FAMILY:
            x, y = [value[(a, *p)] for p in pairs], [value[(b, *p)] for p in pairs]
            d = [u - v for u, v in zip(x, y) if u != v]
            ranks = rankdata([abs(e) for e in d])
            r = (sum(k for k, e in zip(ranks, d) if e > 0) - sum(k for k, e in zip(ranks, d) if e < 0)) / sum(ranks)
            ahead = sum(
                statistics.mean(u for u, p in zip(x, pairs) if p[0] == c)
                > statistics.mean(v for v, p in zip(y, pairs) if p[0] == c)
                for c in {p[0] for p in pairs}
            )
            found[(f"{a} vs {b}", name)] = [
                "15",
                f"{statistics.mean(x):.2f}",
                f"{statistics.mean(y):.2f}",
                f"{sum(u > v for u, v in zip(x, y))}/15",
                f"{ahead}/5",
                f"{(sum(u > v for u, v in zip(x, y)) + 0.5 * sum(u == v for u, v in zip(x, y))) / 15:.2f}",
                f"{r:+.2f}",
                wilcoxon(x, y).pvalue,
            ]
    order = sorted(found, key=lambda k: found[k][-1])
    running = 0.0
    for i, key in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * found[key][-1]))
        found[key] += [running]
    for (comparison, name), cells in found.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| {comparison} | {name} |"))
        published = [c.strip() for c in row.strip("|").split("|")][2:]
        assert published == cells[:-2] + [p_cell(cells[-2]), p_cell(cells[-1])]
