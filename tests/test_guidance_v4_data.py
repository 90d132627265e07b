"""The guidance study's fourth version (docs/results.md; declared in docs/design.md) recomputed from its committed
data under docs/data/guidance-v4/: each run's fault counts and rarefied faults from the fault assignments,
its rates from its counts, the declared family from runs.csv, and the published table from the family. Written
apart from the recipe (scipy's hypergeometric law for the rarefaction, Holm by hand), so that an edited cell
anywhere in the chain fails a test."""

import csv
import statistics
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).resolve().parents[1] / "docs" / "data" / "guidance-v4"
DATASETS = sorted(p.name for p in DATA.iterdir() if (p / "runs.csv").is_file()) if DATA.is_dir() else []
FAMILY = (
    ("idc@m8", "keep-none"),
    ("idc@m4", "keep-none"),
    ("idc@m8", "random-keep@idc@m8"),
    ("none", "keep-none"),
    ("nc", "keep-none"),
    ("nlc", "keep-none"),
)
SHOWN = {"mnist": "MNIST", "fashion-mnist": "Fashion-MNIST", "cifar10": "CIFAR-10"}


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def p_cell(p: float) -> str:
    return f"{p:.1e}" if p < 0.001 else f"{p:.3f}"


def test_the_study_is_committed():
    assert {"mnist", "fashion-mnist"} <= set(DATASETS)


@pytest.mark.parametrize("dataset", DATASETS)
def test_runs_follow_from_the_fault_assignments(dataset):
    from scipy.stats import hypergeom

    runs = read_csv(DATA / dataset / "runs.csv")
    assignments = np.load(DATA / dataset / "assignments.npz")
    assert len(assignments.files) == len(runs)
    smallest = {}
    for r in runs:
        pair = (r["copy"], r["state"])
        smallest[pair] = min(smallest.get(pair, int(r["valid_failures"])), int(r["valid_failures"]))
    for r in runs:
        ids = assignments[f"{r['arm']}_c{r['copy']}_r{r['state']}"]
        assert len(ids) == int(r["valid_failures"])
        assert int(r["faults"]) == len(set(ids.tolist()))
        n = smallest[(r["copy"], r["state"])]
        assert int(r["rarefy_to"]) == n
        # a fault is missed by a subsample of n when all n come from the other failures: hypergeometric at 0
        sizes = np.unique(ids, return_counts=True)[1]
        expected = sum(1 - hypergeom.pmf(0, len(ids), int(k), n) for k in sizes) if n else 0.0
        assert float(r["rarefied_faults"]) == pytest.approx(expected, rel=1e-9, abs=1e-9)
        calls = int(r["calls"])
        assert float(r["faults_per_1k_calls"]) == pytest.approx(1000 * int(r["faults"]) / calls)
        assert float(r["valid_failures_per_1k_calls"]) == pytest.approx(1000 * int(r["valid_failures"]) / calls)
        assert int(r["valid_failures"]) <= int(r["failures"])
        if r["arm"] == "keep-none":
            assert int(r["kept"]) == 0


def family_from_runs() -> list[dict]:
    from scipy.stats import rankdata, wilcoxon

    rows = []
    for dataset in DATASETS:
        runs = read_csv(DATA / dataset / "runs.csv")
        value = {(r["arm"], r["copy"], r["state"]): float(r["rarefied_faults"]) for r in runs}
        arms = {a for a, _, _ in value}
        for a, b in (pair for pair in FAMILY if set(pair) <= arms):
            pairs = sorted({(c, s) for arm, c, s in value if arm == a} & {(c, s) for arm, c, s in value if arm == b})
            x, y = [value[(a, *p)] for p in pairs], [value[(b, *p)] for p in pairs]
            d = [u - v for u, v in zip(x, y) if u != v]
            ranks = rankdata([abs(e) for e in d])
            r = (sum(k for k, e in zip(ranks, d) if e > 0) - sum(k for k, e in zip(ranks, d) if e < 0)) / sum(ranks)
            copies = sorted({c for c, _ in pairs})
            ahead = sum(
                statistics.mean(u for u, p in zip(x, pairs) if p[0] == c)
                > statistics.mean(v for v, p in zip(y, pairs) if p[0] == c)
                for c in copies
            )
            rows.append(
                {
                    "comparison": f"{a} vs {b}",
                    "dataset": dataset,
                    "pairs": len(pairs),
                    "mean a": statistics.mean(x),
                    "mean b": statistics.mean(y),
                    "a wins": sum(u > v for u, v in zip(x, y)),
                    "copies a ahead": f"{ahead}/{len(copies)}",
                    "paired r": r,
                    "p": float(wilcoxon(x, y).pvalue),
                }
            )
    running = 0.0
    for i, row in enumerate(sorted(rows, key=lambda row: row["p"])):
        running = max(running, min(1.0, (len(rows) - i) * row["p"]))
        row["Holm p (all)"] = running
    return rows


def test_verdicts_follow_from_the_runs():
    committed = {(r["comparison"], r["dataset"]): r for r in read_csv(DATA / "verdicts.csv")}
    found = family_from_runs()
    assert len(committed) == len(found)
    for row in found:
        saved = committed[(row["comparison"], row["dataset"])]
        assert int(saved["pairs"]) == row["pairs"] and int(saved["a wins"]) == row["a wins"]
        assert saved["copies a ahead"] == row["copies a ahead"]
        for key in ("mean a", "mean b", "paired r", "p", "Holm p (all)"):
            assert float(saved[key]) == pytest.approx(row[key], rel=1e-9, abs=1e-12), key


def test_the_published_table_follows_from_the_family():
    text = (DATA.parents[1] / "results.md").read_text()
    table = text[text.index("### The fourth version's declared family") :]
    for row in family_from_runs():
        line = next(x for x in table.splitlines() if x.startswith(f"| {row['comparison']} | {SHOWN[row['dataset']]} |"))
        cells = [c.strip() for c in line.strip("|").split("|")][2:]
        assert cells == [
            str(row["pairs"]),
            f"{row['mean a']:.2f}",
            f"{row['mean b']:.2f}",
            f"{row['a wins']}/{row['pairs']}",
            row["copies a ahead"],
            f"{row['paired r']:+.2f}",
            p_cell(row["p"]),
            p_cell(row["Holm p (all)"]),
        ]
