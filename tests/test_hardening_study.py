"""The hardening study (recipes/hardening_study.py): a smoke run on the embedded digits checked for the arms, the
dose every arm shares, the resumption and the family's statistics; the dose cap and the comparisons by hand."""

import numpy as np
import pytest

from test_recipes import outputs, read_csv, recipe, run_recipe  # noqa: F401  (fixtures shared with test_recipes)


def test_comparisons_pair_copies_and_adjust_over_the_family(recipe):
    study = recipe("hardening_study")
    runs = []
    for c in range(5):
        runs.append({"arm": "IDC-guided", "copy": c, "corruption mean": 0.5 + 0.01 * c})
        for k, arm in enumerate(study.FAMILY):
            # random: IDC ahead on every copy; the others: behind by k points on copies 0-2, ahead on 3-4
            delta = 0.01 * (c + 1) if arm == "random" else (-0.01 * k if c < 3 else 0.001 * (c + 1))
            runs.append({"arm": arm, "copy": c, "corruption mean": 0.5 + 0.01 * c - delta})
    tests = {t["comparison"].split(" vs ")[1]: t for t in study.comparisons(runs)}
    assert list(tests) == list(study.FAMILY)
    random = tests["random"]
    assert random["copies IDC ahead"] == 5 and random["r"] == 1.0 and random["p"] == pytest.approx(2 / 32)
    assert random["mean difference"] == pytest.approx(0.03)
    assert tests["pgd"]["copies IDC ahead"] == 2
    ps = sorted(t["p"] for t in tests.values())
    assert min(t["Holm p"] for t in tests.values()) == pytest.approx(min(1.0, 6 * ps[0]))
    assert "not significant" in study.verdict(random) and "all 5 copies" in study.verdict(random)


def test_capped_keeps_the_first_kept_in_order(recipe):
    study = recipe("hardening_study")

    class Corpus:
        parent = np.array([-1, -1, 0, 1, 2, 0, 3])
        label = np.array([4, 7, 4, 7, 4, 4, 7])

    class Campaign:
        corpus = Corpus()

    assert study.capped(Campaign, 3) == 3
    assert Corpus.label.tolist() == [4, 7, 4, 7, 4, -1, -1]  # seeds keep their labels; the 4th and 5th kept lose theirs
    assert study.capped(Campaign, 10) == 3  # fewer kept than asked: all of them


def test_split_is_disjoint_and_refuses_too_many(recipe):
    study = recipe("hardening_study")
    seeds, held, measure = study.split(100, 20, 50)
    assert len(set(seeds) | set(held) | set(measure)) == 90
    with pytest.raises(SystemExit):
        study.split(100, 30, 50)


@pytest.mark.slow
def test_hardening_study_smoke(recipe, outputs, monkeypatch, capsys):
    subjects = recipe("subjects")
    if not (outputs / "subjects" / "embedded-mnist" / "lenet4_extractor.keras").exists():
        run_recipe(subjects, ["--dataset", "embedded-mnist", "--copies", "2", "--epochs", "2"], monkeypatch)
    study = recipe("hardening_study")
    argv = ["--dataset", "embedded-mnist", "--copies", "2", "--seeds", "30", "--budget", "300", "--dose", "15"]
    argv += ["--test", "100", "--corruptions", "contrast", "pixelate", "--severities", "5", "--epochs", "1"]
    argv += ["--fit-train", "1000", "--pgd-eps", "0.1"]
    run_recipe(study, argv, monkeypatch)
    out = outputs / "hardening_study" / "embedded-mnist"
    runs = read_csv(out / "runs.csv")
    assert [(r["copy"], r["arm"]) for r in runs] == [(str(c), arm) for c in range(2) for arm in study.ARMS]
    for c in range(2):
        mine = {r["arm"]: r for r in runs if r["copy"] == str(c)}
        dose = int(mine["IDC-guided"]["dose"])
        assert 0 < dose <= 15 and dose <= int(mine["IDC-guided"]["campaign_kept"])
        for arm in ("random", "pgd", "fgsm", "augment", "unguided-kept"):
            assert int(mine[arm]["dose"]) == dose
        assert int(mine["clean"]["dose"]) == 0 and int(mine["original"]["dose"]) == 0
        for r in mine.values():
            assert 0 <= float(r["corruption mean"]) <= 1 and 0 <= float(r["held-out findings"]) <= 1
            per = [float(r[f"corruption: {n}"]) for n in ("contrast", "pixelate")]
            assert float(r["corruption mean"]) == pytest.approx(np.mean(per))
    summary = read_csv(out / "summary.csv")
    assert [s["comparison"] for s in summary] == [f"IDC-guided vs {a}" for a in study.FAMILY]
    text = (out / "study.md").read_text()
    assert "| random | 2 |" in text and "not significant" in text
    capsys.readouterr()
    run_recipe(study, argv, monkeypatch)  # resumed: nothing runs again
    assert "[copy" not in capsys.readouterr().out
