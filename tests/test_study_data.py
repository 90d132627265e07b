"""Figures of docs/results.md recomputed from the per-run tables committed under docs/data/ (issue 32, "the
data stays"): each test fails when the CSV or the published figure changes. Plain csv and arithmetic, apart
from the recipes, so that the check is independent of the code that wrote the tables."""

import csv
from pathlib import Path

import pytest

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


RQ3_ATTACKS = ("FGSM", "BIM", "PGD", "CW", "JSMA", "DeepXplore")
#: dataset -> what its headings in docs/results.md add ("" for MNIST, the first)
RQ3_DATASETS = {"mnist": "", "fashion-mnist": " on Fashion-MNIST", "cifar10": " on CIFAR-10"}


@pytest.mark.parametrize("dataset", RQ3_DATASETS)
def test_rq3_attacks_declared_family_from_the_runs(dataset):
    """The declared family of the matched-perturbation RQ3/RQ4 study (docs/design.md, "RQ3/RQ4 with matched
    perturbation"): each attack's IDC gain at m = 6 over the seeds alone against its L2-matched Gaussian and its
    L-inf-matched uniform noise, paired by (copy, state); Wilcoxon from scipy, rank-biserial and Holm by hand."""
    import statistics

    from scipy.stats import rankdata, wilcoxon

    rows = read_csv(DOCS / "data" / "rq3-attacks" / dataset / "runs.csv")
    seeds = {(r["copy"], r["state"]): float(r["idc_m6"]) for r in rows if r["set"] == "seeds"}
    gain = {(r["set"], r["copy"], r["state"]): float(r["idc_m6"]) - seeds[(r["copy"], r["state"])] for r in rows}
    pairs = sorted(seeds)
    assert len(pairs) == 10 and {c for c, _ in pairs} == {"0", "1", "2", "3", "4"}
    for attack in RQ3_ATTACKS:  # every attack has its four matched-noise arms on every pair
        for noise in ("gauss", "uniform"):
            for norm in ("l2", "linf"):
                assert all((f"{noise}-{norm}@{attack}", *p) in gain for p in pairs)
    found = {}
    for attack in RQ3_ATTACKS:
        for control in ("gauss-l2", "uniform-linf"):
            x = [gain[(attack, *p)] for p in pairs]
            y = [gain[(f"{control}@{attack}", *p)] for p in pairs]
            d = [u - v for u, v in zip(x, y) if u != v]
            ranks = rankdata([abs(e) for e in d])
            r = (sum(k for k, e in zip(ranks, d) if e > 0) - sum(k for k, e in zip(ranks, d) if e < 0)) / sum(ranks)
            ahead = sum(  # copies whose mean over their two states is ahead
                statistics.mean(u for u, p in zip(x, pairs) if p[0] == c)
                > statistics.mean(v for v, p in zip(y, pairs) if p[0] == c)
                for c in {p[0] for p in pairs}
            )
            found[(attack, control)] = [
                "10",
                f"{statistics.mean(x):.2f}",
                f"{statistics.mean(y):.2f}",
                f"{sum(u > v for u, v in zip(x, y))}/10",
                f"{ahead}/5",
                f"{r:+.2f}",
                wilcoxon(x, y).pvalue,
            ]
    order = sorted(found, key=lambda k: found[k][-1])
    running = 0.0
    for i, key in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * found[key][-1]))
        found[key] += [running]
    heading = f"### The declared family{RQ3_DATASETS[dataset]} (issue 51)"
    for (attack, control), cells in found.items():
        published = section_row(heading, f"{attack} | {control}")[1:]
        assert published == cells[:-2] + [p_cell(cells[-2]), p_cell(cells[-1])]


@pytest.mark.parametrize("dataset", RQ3_DATASETS)
def test_rq3_attacks_change_table_from_the_runs(dataset):
    """Per attack (and the transform set): the mean over pairs of its median L2 and L-inf from the seeds, its
    misclassification, its IDC gain at m = 6 and that gain per unit of its median L-inf."""
    import statistics

    rows = read_csv(DOCS / "data" / "rq3-attacks" / dataset / "runs.csv")
    seeds = {(r["copy"], r["state"]): float(r["idc_m6"]) for r in rows if r["set"] == "seeds"}
    heading = f"### IDC per unit of change{RQ3_DATASETS[dataset]} (issue 51)"
    for name in (*RQ3_ATTACKS, "transform"):
        sel = [r for r in rows if r["set"] == name]
        gains = [float(r["idc_m6"]) - seeds[(r["copy"], r["state"])] for r in sel]
        expected = [
            f"{statistics.mean(float(r['median_l2']) for r in sel):.2f}",
            f"{statistics.mean(float(r['median_linf']) for r in sel):.3f}",
            f"{statistics.mean(float(r['misclassified']) for r in sel):.1f}",
            f"{statistics.mean(gains):.2f}",
            f"{statistics.mean(g / float(r['median_linf']) for g, r in zip(gains, sel)):.2f}",
        ]
        assert section_row(heading, name) == expected


@pytest.mark.parametrize("dataset", RQ3_DATASETS)
def test_rq3_attacks_secondary_table_from_the_runs(dataset):
    """The secondary table: mean gains over the seeds alone at m = 6, 8, 10, in NC and in NLC (rise in %), beside
    the matched noise (at m = 6 the two declared controls, elsewhere the largest of the four matched-noise gains)."""
    import statistics

    rows = read_csv(DOCS / "data" / "rq3-attacks" / dataset / "runs.csv")

    def mean_gain(name, metric):  # NLC: the rise in % of the seeds' alone
        seeds = {(r["copy"], r["state"]): float(r[metric]) for r in rows if r["set"] == "seeds"}
        if metric == "nlc":
            return statistics.mean(
                100 * (float(r[metric]) / seeds[(r["copy"], r["state"])] - 1) for r in rows if r["set"] == name
            )
        return statistics.mean(float(r[metric]) - seeds[(r["copy"], r["state"])] for r in rows if r["set"] == name)

    heading = f"Secondary{RQ3_DATASETS[dataset]} (mean gain in points over the seeds alone"
    matched = [f"{n}-{k}" for n in ("gauss", "uniform") for k in ("l2", "linf")]
    for attack in RQ3_ATTACKS:
        cells = [f"{mean_gain(attack, 'idc_m6'):.2f}"]
        cells += [f"{mean_gain(f'{c}@{attack}', 'idc_m6'):.2f}" for c in ("gauss-l2", "uniform-linf")]
        for metric in ("idc_m8", "idc_m10", "nc", "nlc"):
            cells += [f"{mean_gain(attack, metric):.2f}"]
            cells += [f"{max(mean_gain(f'{c}@{attack}', metric) for c in matched):.2f}"]
        assert section_row(heading, attack) == cells
    for label, name in (("natural misclassified", "natural"), ("random transform", "transform")):
        cells = [f"{mean_gain(name, m):.2f}" for m in ("idc_m6", "idc_m8", "idc_m10", "nc", "nlc")]
        assert section_row(heading, label) == [cells[0], "", "", cells[1], "", cells[2], "", cells[3], "", cells[4], ""]


def test_rq3_attacks_campaign_mutator_table_from_its_export():
    """The campaign's per-mutator change table in docs/results.md, from its committed exports/mutators.csv:
    best IDC gain per unit of median L-inf first, '-' where a mutator kept nothing."""
    rows = read_csv(DOCS / "data" / "rq3-attacks" / "mnist" / "campaign-mutators.csv")
    for r in rows:
        assert float(r["idc_gained_pp"]) == pytest.approx(100 * float(r["idc_gained"]), abs=1e-3)
        if r["median_linf"]:
            per = float(r["idc_gained_pp"]) / float(r["median_linf"])
            assert float(r["idc_gained_pp_per_linf"]) == pytest.approx(per, rel=1e-4)

    def cell(value: str, fmt: str) -> str:
        return "-" if value == "" else format(float(value), fmt)

    rows.sort(key=lambda r: (r["median_linf"] == "", -float(r["idc_gained_pp_per_linf"] or 0), r["mutator"]))
    expected = [
        [
            r["mutator"].split("(")[0],
            r["kept_inputs"],
            f"{float(r['idc_gained_pp']):.2f}",
            cell(r["median_l2"], ".2f"),
            cell(r["median_linf"], ".3f"),
            cell(r["idc_gained_pp_per_linf"], ".1f"),
        ]
        for r in rows
    ]
    text = (DOCS / "results.md").read_text()
    section = text[text.index("### A campaign's per-mutator change (issue 51)") :]
    lines = section[section.index("| mutator | kept inputs |") :].splitlines()
    table = [line for line in lines[: lines.index("")] if line.startswith("| ")][1:]
    assert [[c.strip() for c in line.strip("|").split("|")] for line in table] == expected
