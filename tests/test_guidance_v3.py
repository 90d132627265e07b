"""The guidance study's third version (recipes/superseded/guidance_v3.py) and its subjects (recipes/subjects.py):
a smoke run on the embedded digits checked for pairing, the random-keep controls and the failure count; the
paired statistics by hand."""

import numpy as np
import pytest

from test_recipes import outputs, read_csv, recipe, run_recipe  # noqa: F401  (fixtures shared with test_recipes)

pytestmark = pytest.mark.slow


def test_wilcoxon_by_hand(recipe):
    stats = recipe("kit.stats")
    # differences 1, 2, 3, 4, 5: all positive, so the exact two-sided p is 2 / 2^5
    assert stats.wilcoxon([2, 4, 6, 8, 10], [1, 2, 3, 4, 5]) == pytest.approx(2 / 32)
    assert stats.wilcoxon([1, 2, 3], [1, 2, 3]) == 1.0 and np.isnan(stats.wilcoxon([1], [2]))


def test_rank_biserial_by_hand(recipe):
    v3 = recipe("superseded.guidance_v3")
    # differences 1, 2, -3: ranks 1, 2, 3, so (1 + 2 - 3) / 6
    assert v3.rank_biserial(np.array([2.0, 4, 0]), np.array([1.0, 2, 3])) == 0.0
    # differences 1, -2, 4 (and a zero, dropped): (1 + 3 - 2) / 6
    assert v3.rank_biserial(np.array([2.0, 0, 5, 7]), np.array([1.0, 2, 1, 7])) == pytest.approx(2 / 6)
    assert v3.rank_biserial(np.array([3.0, 4]), np.array([1.0, 2])) == 1.0


def test_comparisons_pair_runs_by_copy_and_state(recipe):
    v3 = recipe("superseded.guidance_v3")
    runs = [
        {
            "arm": arm,
            "copy": c,
            "state": s,
            "y": value + (1.0 if arm == "idc" else 0.0) + (0.5 * s if arm == "idc" else 0),
        }
        for c in range(2)
        for s in range(3)
        for arm, value in (("idc", 10.0 * c + s), ("none", 10.0 * c + s))
    ]
    runs.append({"arm": "none", "copy": 9, "state": 0, "y": 99.0})  # no idc run on that pair: left out
    (test,) = v3.comparisons(runs, "y")
    assert test["comparison"] == "idc vs none" and test["pairs"] == 6 and test["a wins"] == 6
    assert test["copies a ahead"] == "2/2" and test["paired r"] == 1.0
    assert test["median difference"] == pytest.approx(1.5)  # differences 1, 1.5, 2 on each copy
    assert test["p"] == pytest.approx(2 / 64) and test["Holm p"] == pytest.approx(test["p"])


def test_subjects_and_study_smoke(recipe, outputs, monkeypatch, capsys):
    subjects = recipe("subjects")
    run_recipe(subjects, ["--dataset", "embedded-mnist", "--copies", "2", "--epochs", "2"], monkeypatch)
    folder = outputs / "subjects" / "embedded-mnist"
    table = read_csv(folder / "subjects.csv")
    assert sorted(r["file"] for r in table) == ["lenet4_extractor.keras", "lenet5_s0.keras", "lenet5_s1.keras"]
    assert {r["training half"] for r in table if r["role"] == "subject"} == {"A"}
    assert [r["training half"] for r in table if r["role"] == "extractor"] == ["B"]
    (a, _), (b, _) = recipe("kit.subjects").halves("embedded-mnist")
    assert not set(map(bytes, a.reshape(len(a), -1).round(3))) & set(map(bytes, b.reshape(len(b), -1).round(3)))

    v3 = recipe("superseded.guidance_v3")
    argv = ["--dataset", "embedded-mnist", "--copies", "2", "--states", "2", "--seeds", "30", "--budget", "512"]
    argv += ["--fit-train", "1000", "--sizes", "2", "5"]
    run_recipe(v3, argv, monkeypatch)
    out = outputs / "guidance_v3" / "embedded-mnist"
    runs = read_csv(out / "runs.csv")
    assert [(r["arm"], r["copy"], r["state"]) for r in runs] == [
        (arm, str(c), str(s)) for c in range(2) for s in range(2) for arm in v3.ARMS
    ]
    by = {(r["arm"], r["copy"], r["state"]): r for r in runs}
    for r in runs:
        # findings are failures made unique per IDC combination; the valid failures are a part of the failures
        assert int(r["failures"]) >= int(r["findings"]) and int(r["failures"]) >= int(r["valid_failures"])
        assert int(r["valid_failures"]) >= int(r["faults_5"]) and int(r["valid_failures"]) >= int(r["faults_pair"])
        if r["arm"].startswith("random-keep@"):
            source = by[(r["arm"][12:], r["copy"], r["state"])]
            rate, valid = float(source["keep_rate"]), int(r["valid_mutants"])
            # kept ~ Binomial(valid, rate): within 5 standard deviations (and 3 mutants)
            assert abs(int(r["kept"]) - rate * valid) <= 5 * np.sqrt(valid * rate * (1 - rate)) + 3
        if r["arm"] == "none":
            assert int(r["kept"]) == int(r["valid_mutants"])
    # failures are counted whether kept or not: the arms that keep a few mutants fail far more often than that
    sparse = [r for r in runs if r["arm"] in ("nc", "random-keep@nc")]
    assert sum(int(r["failures"]) for r in sparse) > sum(int(r["kept"]) for r in sparse)
    text = (out / "study.md").read_text()
    for comparison in ("idc vs none", "idc vs nc", "idc vs random-keep@idc", "nc vs random-keep@nc"):
        assert f"| {comparison} | 4 |" in text
    run_recipe(v3, ["--verdicts", "embedded-mnist"], monkeypatch)
    family = read_csv(outputs / "guidance_v3" / "verdicts.csv")
    assert len(family) == 4  # one dataset: the family is its four comparisons, adjusted alike
    summary = {r["comparison"]: r for r in read_csv(out / "study.csv") if r.get("comparison")}
    for row in family:
        assert float(row["Holm p (all)"]) == pytest.approx(float(summary[row["comparison"]]["Holm p"]))
    capsys.readouterr()
    run_recipe(v3, argv, monkeypatch)  # resumed: nothing runs again
    assert "[" not in "".join(line[:1] for line in capsys.readouterr().out.splitlines())


def test_rarefaction_by_hand(recipe):
    v4 = recipe("guidance_v4")
    ids = np.array([0, 0, 0, 1])  # N = 4: fault 0 has 3 failures, fault 1 has 1
    # n = 1: one fault always; n = 2: fault 0 missed only if both draws avoid it: C(1, 2) = 0, so 1 for it, and
    # fault 1 is reached with 1 - C(3, 2) / C(4, 2) = 1 - 3/6; n = 4: both
    assert v4.rarefied(ids, 1) == pytest.approx(1.0)
    assert v4.rarefied(ids, 2) == pytest.approx(1.5)
    assert v4.rarefied(ids, 4) == pytest.approx(2.0)
    assert v4.rarefied(np.arange(10), 3) == pytest.approx(3.0)  # all distinct: every draw a new fault
    assert v4.rarefied(np.zeros(0, int), 0) == 0.0
    # the same as the mean over every subset of size 2
    from itertools import combinations

    subsets = [len(set(ids[list(s)])) for s in combinations(range(4), 2)]
    assert v4.rarefied(ids, 2) == pytest.approx(np.mean(subsets))
    with pytest.raises(ValueError):
        v4.rarefied(ids, 5)


def test_guidance_v4_smoke(recipe, outputs, monkeypatch, capsys):
    subjects = recipe("subjects")
    if not (outputs / "subjects" / "embedded-mnist" / "lenet4_extractor.keras").exists():
        run_recipe(subjects, ["--dataset", "embedded-mnist", "--copies", "2", "--epochs", "2"], monkeypatch)
    v4 = recipe("guidance_v4")
    argv = ["--dataset", "embedded-mnist", "--copies", "2", "--states", "2", "--seeds", "30", "--budget", "512"]
    argv += ["--fit-train", "1000"]
    out = outputs / "guidance_v4" / "embedded-mnist"
    arms = v4.available(v4.ARMS)
    run_recipe(v4, argv + ["--only-copies", "1"], monkeypatch)  # one process's share: copy 1's runs, no summary
    made = {p.name for p in (out / "runs").glob("*.json")}
    assert made == {f"{arm}_c1_r{s}.json" for s in range(2) for arm in arms}
    assert not (out / "runs.csv").exists()
    run_recipe(v4, argv, monkeypatch)  # the rest, then the summary over both copies
    runs = read_csv(out / "runs.csv")
    assert [(r["arm"], r["copy"], r["state"]) for r in runs] == [
        (arm, str(c), str(s)) for c in range(2) for s in range(2) for arm in arms
    ]
    assignments = np.load(out / "assignments.npz")
    for r in runs:
        ids = assignments[f"{r['arm']}_c{r['copy']}_r{r['state']}"]
        assert len(ids) == int(r["valid_failures"]) and np.unique(ids).size == int(r["faults"])
        pair = [x for x in runs if (x["copy"], x["state"]) == (r["copy"], r["state"])]
        assert int(r["rarefy_to"]) == min(int(x["valid_failures"]) for x in pair)
        assert float(r["rarefied_faults"]) <= int(r["faults"]) + 1e-9
        if r["arm"] == "keep-none":
            assert int(r["kept"]) == 0  # mutants never enter the corpus
    run_recipe(v4, ["--verdicts", "embedded-mnist", "--out", str(outputs / "guidance_v4")], monkeypatch)
    family = read_csv(outputs / "guidance_v4" / "verdicts.csv")
    assert [f["comparison"] for f in family] == [f"{a} vs {b}" for a, b in v4.FAMILY if {a, b} <= set(arms)]
    capsys.readouterr()
    run_recipe(v4, argv, monkeypatch)  # resumed: nothing runs again
    assert "[" not in "".join(line[:1] for line in capsys.readouterr().out.splitlines())
