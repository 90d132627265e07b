"""The hardening study (docs/results.md, "The hardening study (issue 47)"; declared in docs/design.md, "The
extended hardening study") recomputed from its committed data, docs/data/hardening/<dataset>/runs.csv: the
declared design (arms per training and dose, the matched sizes) checked row by row, and every published cell of
the section's tables (the primary comparisons with Holm over the dataset's family, the per-model means, the
secondary differences) recomputed from the rows. Written apart from the recipe (scipy's exact Wilcoxon, Holm and
the rank-biserial r by hand), so that an edited cell fails a test."""

import csv
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "hardening"
DATASETS = sorted(p.name for p in DATA.iterdir() if (p / "runs.csv").is_file()) if DATA.is_dir() else []
GUIDED = "IDC-guided"
OTHER_GUIDED = ("NC-guided", "NLC-guided")
MATCHED = ("random", "pgd", "fgsm", "augment", "unguided-kept")  # as many as IDC-guided adds, same seeds
FAMILY = ("random", "pgd", "fgsm", "augment", "clean", "unguided-kept", *OTHER_GUIDED)
ORDER = ("original", GUIDED, *OTHER_GUIDED, "random", "pgd", "fgsm", "augment", "clean", "unguided-kept")
DOSES = (300, 1500)
#: the declared family: (training, dose) -> the arms IDC-guided is compared with
DECLARED = {
    ("finetune", 300): FAMILY,
    ("finetune", 1500): ("random", "pgd", "clean", "unguided-kept", *OTHER_GUIDED),
    ("scratch", 1500): ("random", "clean"),
}
SCRATCH = {"mnist": True, "fashion-mnist": False}
SHOWN = {"finetune": "fine-tuned", "scratch": "from scratch"}
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


def values(runs: list[dict], training: str, dose: int, arm: str, key: str) -> dict[int, float]:
    """Per copy, the mean over repeats; clean and original at dose 0, the original with the fine-tuned rows."""
    dose = 0 if arm in ("clean", "original") else dose
    training = "finetune" if arm == "original" else training
    found: dict[int, list[float]] = {}
    for r in runs:
        if (r["training"], int(r["dose"]), r["arm"]) == (training, dose, arm):
            found.setdefault(int(r["copy"]), []).append(float(r[key]))
    return {c: float(np.mean(v)) for c, v in found.items()}


def declared(dataset: str) -> dict:
    return {k: v for k, v in DECLARED.items() if k[0] == "finetune" or SCRATCH.get(dataset, False)}


def test_the_study_is_committed():
    assert {"mnist", "fashion-mnist"} <= set(DATASETS)
    for dataset in ("mnist", "fashion-mnist"):
        runs = read_csv(DATA / dataset / "runs.csv")
        assert {int(r["copy"]) for r in runs} == set(range(5))
        assert {int(r["dose"]) for r in runs} == {0, *DOSES}


@pytest.mark.parametrize("dataset", DATASETS)
def test_every_copy_has_the_declared_arms_at_the_matched_sizes(dataset):
    runs = read_csv(DATA / dataset / "runs.csv")
    models = {(t, 0, "clean") for t, _ in declared(dataset)} | {("finetune", 0, "original")}
    models |= {(t, d, a) for (t, d), arms in declared(dataset).items() for a in (GUIDED, *arms) if a != "clean"}
    for copy in {r["copy"] for r in runs}:
        mine = {(r["training"], int(r["dose"]), r["arm"]): r for r in runs if r["copy"] == copy}
        assert set(mine) == models, f"copy {copy}: {sorted(set(mine) ^ models)}"
        for (training, dose, arm), r in mine.items():
            added, kept = int(r["added"]), r["campaign_kept"]
            if arm in ("clean", "original"):
                assert added == 0
                continue
            guided = mine[(training, dose, GUIDED)]
            if arm == GUIDED or arm in OTHER_GUIDED:  # the first `dose` its blocks kept, or all of them
                assert added == min(dose, int(kept)) and added > 0
                assert int(r["seeds"]) == 100 * int(r["blocks"]) and int(r["execs"]) == 2000 * int(r["blocks"])
            if arm in MATCHED:
                assert added == int(guided["added"]), (training, dose, arm)
            if arm == "unguided-kept":  # the twins of the IDC blocks the dose used
                assert r["blocks"] == guided["blocks"] and r["seeds"] == guided["seeds"]
            if arm in ("pgd", "fgsm"):
                assert float(r["attack_eps"]) == pytest.approx(float(guided["median_l2"]), rel=1e-9)
        for dose in DOSES:  # the 5 % additions contain the 1 % ones: the same blocks, read further
            assert int(mine[("finetune", DOSES[0], GUIDED)]["blocks"]) <= int(
                mine[("finetune", dose, GUIDED)]["blocks"]
            )
        for r in mine.values():
            per = [float(v) for k, v in r.items() if k.startswith("corruption: ")]
            assert len(per) == 15
            assert float(r["corruption mean"]) == pytest.approx(np.mean(per), abs=1e-12)


def comparison_rows(runs: list[dict], dataset: str) -> list[tuple]:
    from scipy.stats import wilcoxon

    rows = []
    for (training, dose), arms in declared(dataset).items():
        guided = values(runs, training, dose, GUIDED, "corruption mean")
        for arm in arms:
            other = values(runs, training, dose, arm, "corruption mean")
            copies = sorted(set(guided) & set(other))
            a, b = np.array([guided[c] for c in copies]), np.array([other[c] for c in copies])
            d = a - b
            p = 1.0 if not d.any() else float(wilcoxon(a, b, method="exact").pvalue)
            rows.append((training, dose, arm, len(copies), a.mean(), b.mean(), d.mean(), int((d > 0).sum()), d, p))
    return rows


@pytest.mark.parametrize("dataset", DATASETS)
def test_the_published_tables_follow_from_the_runs(dataset):
    runs = read_csv(DATA / dataset / "runs.csv")
    text = section()
    rows = comparison_rows(runs, dataset)
    adjusted = holm([row[-1] for row in rows])
    assert len(rows) == {"mnist": 16, "fashion-mnist": 14}[dataset]
    for (training, dose, arm, n, ma, mb, md, ahead, d, p), hp in zip(rows, adjusted):
        line = (
            f"| {SHOWN[training]} | {dose} | {arm} | {n} | {100 * ma:.2f} | {100 * mb:.2f} | {100 * md:+.2f} | "
            f"{ahead}/{n} | {rank_biserial(d):+.2f} | {p_cell(p)} | {p_cell(hp)} |"
        )
        assert line in text, f"{dataset}: the primary table's row for {training} {dose} {arm} is not {line}"
        assert p >= 2 / 32 - 1e-12 and hp >= min(1.0, len(rows) * 2 / 32) - 1e-12  # five pairs: the floor
    groups = sorted(
        {(r["training"], int(r["dose"]), r["arm"]) for r in runs},
        key=lambda g: (("finetune", "scratch").index(g[0]), g[1], ORDER.index(g[2])),
    )
    for training, dose, arm in groups:
        mine = [r for r in runs if (r["training"], int(r["dose"]), r["arm"]) == (training, dose, arm)]
        added = sorted({int(r["added"]) for r in mine})
        span = str(added[0]) if len(added) == 1 else f"{added[0]}-{added[-1]}"
        means = [np.mean(list(values(mine, training, dose, arm, k).values())) for k in ENDPOINTS]
        l2 = np.mean(list(values(mine, training, dose, arm, "median_l2").values()))
        cells = " | ".join(f"{100 * m:.2f}" for m in means)
        line = (
            f"| {SHOWN[training]} | {dose} | {arm} | {len({r['copy'] for r in mine})} | {span} | {l2:.2f} | {cells} |"
        )
        assert line in text, f"{dataset}: the per-model row for {training} {dose} {arm} is not {line}"
    for (training, dose), arms in declared(dataset).items():
        for arm in arms:
            cells = []
            for key in ENDPOINTS[1:]:
                a, b = values(runs, training, dose, GUIDED, key), values(runs, training, dose, arm, key)
                d = np.array([a[c] - b[c] for c in sorted(set(a) & set(b))])
                cells.append(f"{100 * d.mean():+.2f} ({int((d > 0).sum())}/{len(d)})")
            line = f"| {SHOWN[training]} | {dose} | {arm} | " + " | ".join(cells) + " |"
            assert line in text, f"{dataset}: the secondary row for {training} {dose} {arm} is not {line}"


@pytest.mark.parametrize("dataset", DATASETS)
def test_the_committed_summary_is_the_recomputed_one(dataset):
    """summary.csv (the recipe's) agrees with the comparisons recomputed here, p and Holm p included."""
    runs = read_csv(DATA / dataset / "runs.csv")
    rows = comparison_rows(runs, dataset)
    adjusted = holm([row[-1] for row in rows])
    summary = read_csv(DATA / dataset / "summary.csv")
    assert [(s["training"], int(s["dose"]), s["comparison"]) for s in summary] == [
        (t, dose, f"{GUIDED} vs {arm}") for t, dose, arm, *_ in rows
    ]
    for s, row, hp in zip(summary, rows, adjusted):
        assert float(s["mean difference"]) == pytest.approx(row[6], abs=1e-12)
        assert float(s["p"]) == pytest.approx(row[-1], abs=1e-12) and float(s["Holm p"]) == pytest.approx(hp)


@pytest.mark.parametrize("dataset", DATASETS)
def test_the_published_campaign_table_follows_from_the_runs(dataset):
    """Per copy, the blocks each guided arm (and the unguided twins) ran for the 5 % dose and what they kept."""
    runs = read_csv(DATA / dataset / "runs.csv")
    text = section()
    arms = (GUIDED, *OTHER_GUIDED, "unguided-kept")
    for copy in sorted({r["copy"] for r in runs}, key=int):
        by = {r["arm"]: r for r in runs if (r["copy"], r["training"], int(r["dose"])) == (copy, "finetune", 1500)}
        assert all(int(by[a]["campaign_kept"]) >= 1500 for a in arms)  # every arm reached the dose
        line = f"| {copy} | " + " | ".join(f"{by[a]['blocks']}, {by[a]['campaign_kept']}" for a in arms) + " |"
        assert line in text, f"{dataset}: the campaign row of copy {copy} is not {line}"
