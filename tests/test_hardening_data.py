"""The hardening study (docs/results.md, "The hardening study (issue 47)"; declared in docs/design.md) recomputed
from its committed data, docs/data/hardening/<dataset>/runs.csv: every published cell of the section's tables
(the primary comparisons, the per-arm means, the secondary differences) from the rows. Written apart from the
recipe (scipy's exact Wilcoxon, Holm and the rank-biserial r by hand), so that an edited cell fails a test."""

import csv
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "hardening"
DATASETS = sorted(p.name for p in DATA.iterdir() if (p / "runs.csv").is_file()) if DATA.is_dir() else []
GUIDED = "IDC-guided"
FAMILY = ("random", "pgd", "fgsm", "augment", "clean", "unguided-kept")
ARMS = ("original", GUIDED, *FAMILY)
ENDPOINTS = ("corruption mean", "clean", "PGD eps 0.1", "PGD eps 0.3", "held-out findings")
SECTION = "## The hardening study (issue 47)"


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def section() -> str:
    text = (ROOT / "docs" / "results.md").read_text()
    assert SECTION in text
    rest = text.split(SECTION, 1)[1]
    return rest.split("\n## ", 1)[0]


def p_cell(p: float) -> str:
    return f"{p:.3f}"


def holm(p: list[float]) -> list[float]:
    order = np.argsort(p, kind="stable")
    out, running = [0.0] * len(p), 0.0
    for i, k in enumerate(order):
        running = max(running, min(1.0, (len(p) - i) * p[k]))
        out[k] = running
    return out


def rank_biserial(d: np.ndarray) -> float:
    from scipy.stats import rankdata

    d = d[d != 0]
    if not len(d):
        return 0.0
    ranks = rankdata(np.abs(d))
    return float((ranks[d > 0].sum() - ranks[d < 0].sum()) / ranks.sum())


def values(runs: list[dict], arm: str, key: str) -> dict[int, float]:
    return {int(r["copy"]): float(r[key]) for r in runs if r["arm"] == arm}


def test_the_study_is_committed():
    assert "mnist" in DATASETS
    runs = read_csv(DATA / "mnist" / "runs.csv")
    assert {r["arm"] for r in runs} == set(ARMS)


@pytest.mark.parametrize("dataset", DATASETS)
def test_every_arm_of_a_copy_has_the_guided_dose(dataset):
    runs = read_csv(DATA / dataset / "runs.csv")
    for copy in {r["copy"] for r in runs}:
        mine = {r["arm"]: r for r in runs if r["copy"] == copy}
        assert set(mine) == set(ARMS), f"copy {copy} lacks arms"
        dose = int(mine[GUIDED]["dose"])
        assert 0 < dose <= 300 and int(mine[GUIDED]["campaign_kept"]) >= dose
        assert all(int(mine[a]["dose"]) == dose for a in FAMILY if a != "clean")
        assert int(mine["clean"]["dose"]) == 0 and int(mine["original"]["dose"]) == 0
        for r in mine.values():
            per = [float(v) for k, v in r.items() if k.startswith("corruption: ")]
            assert float(r["corruption mean"]) == pytest.approx(np.mean(per), abs=1e-12)


@pytest.mark.parametrize("dataset", DATASETS)
def test_the_published_tables_follow_from_the_runs(dataset):
    from scipy.stats import wilcoxon

    runs = read_csv(DATA / dataset / "runs.csv")
    text = section()
    guided = values(runs, GUIDED, "corruption mean")
    rows, ps = [], []
    for arm in FAMILY:
        other = values(runs, arm, "corruption mean")
        copies = sorted(set(guided) & set(other))
        a, b = np.array([guided[c] for c in copies]), np.array([other[c] for c in copies])
        d = a - b
        p = 1.0 if not d.any() else float(wilcoxon(a, b, method="exact").pvalue)
        ps.append(p)
        rows.append((arm, len(copies), a.mean(), b.mean(), d.mean(), int((d > 0).sum()), rank_biserial(d), p))
    for (arm, n, ma, mb, md, ahead, r, p), hp in zip(rows, holm(ps)):
        line = (
            f"| {arm} | {n} | {100 * ma:.2f} | {100 * mb:.2f} | {100 * md:+.2f} | {ahead}/{n} | {r:+.2f} | "
            f"{p_cell(p)} | {p_cell(hp)} |"
        )
        assert line in text, f"the primary table's row for {arm} is not {line}"
        assert p >= 2 / 32 - 1e-12  # five pairs: the exact test's floor
    for arm in ARMS:
        mine = [r for r in runs if r["arm"] == arm]
        doses = sorted({int(r["dose"]) for r in mine})
        dose = str(doses[0]) if len(doses) == 1 else f"{doses[0]}-{doses[-1]}"
        cells = " | ".join(f"{100 * np.mean([float(r[k]) for r in mine]):.2f}" for k in ENDPOINTS)
        line = f"| {arm} | {len(mine)} | {dose} | {cells} |"
        assert line in text, f"the per-arm row for {arm} is not {line}"
    for arm in FAMILY:
        cells = []
        for key in ENDPOINTS[1:]:
            a, b = values(runs, GUIDED, key), values(runs, arm, key)
            d = np.array([a[c] - b[c] for c in sorted(set(a) & set(b))])
            cells.append(f"{100 * d.mean():+.2f} ({int((d > 0).sum())}/{len(d)})")
        line = f"| {arm} | " + " | ".join(cells) + " |"
        assert line in text, f"the secondary row for {arm} is not {line}"
