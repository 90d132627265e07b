"""The hardening study (recipes/hardening_study.py): a smoke run on the embedded digits checked for the arms, the
dose every arm shares, the resumption and the family's statistics; the dose cap and the comparisons by hand."""

import numpy as np
import pytest

from test_recipes import outputs, read_csv, recipe, run_recipe  # noqa: F401  (fixtures shared with test_recipes)


def test_comparisons_pair_copies_and_adjust_over_the_family(recipe):
    study = recipe("hardening_study")
    runs = []
    for c in range(5):
        for dose in (10, 50):
            runs.append(
                {
                    "arm": "IDC-guided",
                    "training": "finetune",
                    "dose": dose,
                    "copy": c,
                    "repeat": 0,
                    "corruption mean": 0.5 + 0.01 * c,
                }
            )
            for k, arm in enumerate(a for a in study.FAMILY if a != "clean"):
                # random: IDC ahead on every copy; the others: behind by k points on copies 0-2, ahead on 3-4
                delta = 0.01 * (c + 1) if arm == "random" else (-0.01 * k if c < 3 else 0.001 * (c + 1))
                for repeat, noise in enumerate((-0.002, 0.002)):  # two repeats: their mean is the copy's value
                    runs.append(
                        {
                            "arm": arm,
                            "training": "finetune",
                            "dose": dose,
                            "copy": c,
                            "repeat": repeat,
                            "corruption mean": 0.5 + 0.01 * c - delta + noise,
                        }
                    )
        runs.append({"arm": "clean", "training": "finetune", "dose": 0, "copy": c, "repeat": 0, "corruption mean": 0.4})
    tests = study.comparisons(runs)
    assert [(t["dose"], t["comparison"].split(" vs ")[1]) for t in tests] == [
        (dose, arm) for dose in (10, 50) for arm in study.FAMILY
    ]
    by = {(t["dose"], t["comparison"].split(" vs ")[1]): t for t in tests}
    random = by[(10, "random")]
    assert random["copies IDC ahead"] == 5 and random["r"] == 1.0 and random["p"] == pytest.approx(2 / 32)
    assert random["mean difference"] == pytest.approx(0.03)
    assert by[(50, "clean")]["mean other"] == pytest.approx(0.4)  # clean (nothing added) serves every dose
    assert by[(10, "pgd")]["copies IDC ahead"] == 2
    ps = sorted(t["p"] for t in tests)
    assert len(tests) == 2 * len(study.FAMILY)
    assert min(t["Holm p"] for t in tests) == pytest.approx(min(1.0, len(tests) * ps[0]))  # Holm over both doses
    assert "not significant" in study.verdict(random) and "all 5 copies" in study.verdict(random)
    assert study.verdict(random).startswith("fine-tuned, dose 10:")


def test_limits_take_the_first_kept_block_by_block(recipe):
    study = recipe("hardening_study")
    assert study.limits([40, 30, 50], 60) == [40, 20, 0]
    assert study.limits([40, 30], 300) == [40, 30]  # fewer kept than asked: all of them
    assert study.limits([0, 5], 3) == [0, 3]


def test_merged_keeps_the_first_kept_of_each_block_and_shifts_roots(recipe):
    from idcgen.fuzz.corpus import Corpus

    study = recipe("hardening_study")

    def block(parents, labels, value):
        corpus = Corpus((2, 2, 1))
        n = len(parents)
        roots = [i if p < 0 else 0 for i, p in enumerate(parents)]
        corpus.add(
            np.full((n, 2, 2, 1), value, np.float32),
            np.zeros((n, 2, 2, 1), np.float32),
            [[] if p < 0 else ["gauss"] for p in parents],
            parent=np.array(parents),
            root=np.array(roots),
            label=np.array(labels),
        )
        return Campaign(corpus)

    from dataclasses import dataclass

    @dataclass
    class Campaign:
        corpus: object

    a = block([-1, 0, 0, 1], [3, 3, 3, 3], 1.0)
    b = block([-1, -1, 0], [5, 6, 5], 2.0)
    out = study.merged([a, b], [1, 1]).corpus
    assert out.x[:, 0, 0, 0].tolist() == [1, 1, 1, 1, 2, 2, 2]
    assert out.parent.tolist() == [-1, 0, 0, 1, -1, -1, 4]
    assert out.root.tolist() == [0, 0, 0, 0, 4, 5, 4]
    assert out.label.tolist() == [3, 3, -1, -1, 5, 6, 5]  # a's 2nd and 3rd kept lose their label; seeds keep theirs
    assert study.kept_count(type("C", (), {"corpus": out})) == 2
    assert study.merged([a, b], [0, 1]).corpus.x.shape[0] == 3  # a block giving none is left out


def test_split_is_disjoint_and_refuses_too_many(recipe):
    study = recipe("hardening_study")
    pool, held, measure = study.split(100, 20, 50)
    assert len(held) == 20 and len(measure) == 50 and len(pool) == 30
    assert len(set(pool) | set(held) | set(measure)) == 100
    order = np.random.default_rng(0).permutation(100)
    assert pool[:20].tolist() == order[:20].tolist()  # the earlier study's campaign seeds come first
    with pytest.raises(SystemExit):
        study.split(100, 30, 50)


@pytest.mark.slow
def test_hardening_study_smoke(recipe, outputs, monkeypatch, capsys):
    subjects = recipe("subjects")
    if not (outputs / "subjects" / "embedded-mnist" / "lenet4_extractor.keras").exists():
        run_recipe(subjects, ["--dataset", "embedded-mnist", "--copies", "2", "--epochs", "2"], monkeypatch)
    study = recipe("hardening_study")
    argv = ["--dataset", "embedded-mnist", "--copies", "2", "--doses", "10", "40", "--block-seeds", "20"]
    argv += ["--block-budget", "200", "--held-out-seeds", "30", "--held-out-budget", "300", "--test", "100"]
    argv += ["--corruptions", "contrast", "pixelate", "--severities", "5", "--epochs", "1", "--fit-train", "1000"]
    argv += ["--pgd-eps", "0.1", "--scratch", "IDC-guided", "random", "clean", "--scratch-epochs", "1"]
    run_recipe(study, argv, monkeypatch)
    out = outputs / "hardening_study" / "embedded-mnist"
    runs = read_csv(out / "runs.csv")
    later = [a for a in study.ARMS if a not in ("original", "clean", "fgsm", "augment")]
    expected = [("finetune", "0", "original")] + [
        ("finetune", "0" if a == "clean" else "10", a) for a in study.ARMS if a != "original"
    ]
    expected += [("finetune", "40", a) for a in later]
    expected += [("scratch", "40", "IDC-guided"), ("scratch", "40", "random"), ("scratch", "0", "clean")]
    for c in range(2):
        mine = [r for r in runs if r["copy"] == str(c)]
        assert sorted((r["training"], r["dose"], r["arm"]) for r in mine) == sorted(expected)
        for training, dose in (("finetune", "10"), ("finetune", "40"), ("scratch", "40")):
            cell = {r["arm"]: r for r in mine if (r["training"], r["dose"]) == (training, dose)}
            added = int(cell["IDC-guided"]["added"])
            assert 0 < added <= int(dose) and added <= int(cell["IDC-guided"]["campaign_kept"])
            for arm in ("random", "pgd", "fgsm", "augment", "unguided-kept"):
                if arm in cell:
                    assert int(cell[arm]["added"]) == added, (training, dose, arm)
            for arm in ("NC-guided", "NLC-guided"):
                if arm in cell:
                    assert 0 < int(cell[arm]["added"]) <= int(dose)
        assert all(int(r["added"]) == 0 for r in mine if r["arm"] in ("clean", "original"))
        for r in mine:
            assert 0 <= float(r["corruption mean"]) <= 1 and 0 <= float(r["held-out findings"]) <= 1
            per = [float(r[f"corruption: {n}"]) for n in ("contrast", "pixelate")]
            assert float(r["corruption mean"]) == pytest.approx(np.mean(per))
    summary = read_csv(out / "summary.csv")
    assert [(s["training"], s["dose"], s["comparison"]) for s in summary] == (
        [("finetune", "10", f"IDC-guided vs {a}") for a in study.FAMILY]
        + [("finetune", "40", f"IDC-guided vs {a}") for a in study.FAMILY if a not in ("fgsm", "augment")]
        + [("scratch", "40", f"IDC-guided vs {a}") for a in ("random", "clean")]
    )
    text = (out / "study.md").read_text()
    assert "| fine-tuned | 10 | random | 2 |" in text and "not significant" in text
    capsys.readouterr()
    run_recipe(study, argv, monkeypatch)  # resumed: nothing runs again
    assert "[copy" not in capsys.readouterr().out
