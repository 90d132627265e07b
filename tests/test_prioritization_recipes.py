"""Smoke runs of the prioritisation recipe and the redone guidance study on the embedded digits, and their
statistics (A12, Holm) checked by hand."""

import numpy as np
import pytest

from test_recipes import outputs, read_csv, recipe, run_recipe, trained  # noqa: F401  (fixtures shared with test_recipes)


def test_a12_and_holm_by_hand(recipe):
    study, stats = recipe("superseded.guidance_study"), recipe("kit.stats")
    # of the 4 pairs, a wins one (3 > 2) and ties one (3 = 3): (1 + 0.5) / 4
    assert stats.a12([1, 3], [2, 3]) == pytest.approx(0.375)
    assert stats.a12([5, 6], [1, 2]) == 1.0 and stats.a12([1, 2], [5, 6]) == 0.0
    adjusted = stats.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": float("nan")})
    # sorted 0.01, 0.03, 0.04 -> 3 x 0.01, max(0.03, 2 x 0.03), max(0.06, 1 x 0.04)
    assert adjusted["a"] == pytest.approx(0.03) and adjusted["c"] == pytest.approx(0.06)
    assert adjusted["b"] == pytest.approx(0.06) and np.isnan(adjusted["d"])
    assert study.call_cost("pgd(eps=0.15, eps_iter=0.02, nb_iter=10)") == 11 and study.call_cost("bim") == 11
    assert study.call_cost("fgsm") == 2 and study.call_cost("gauss(std=0.05)") == 1


def test_prioritization_smoke(recipe, outputs, monkeypatch, capsys, trained):
    trained("lenet5")
    module = recipe("prioritization")
    argv = [
        "--dataset",
        "embedded-mnist",
        "--n",
        "200",
        "--fit-train",
        "500",
        "--repeats",
        "2",
        "--orderings",
        "gini",
        "lsa",
        "nc-additional",
        "idc-rarity",
        "random",
    ]
    run_recipe(module, argv, monkeypatch)
    folder = outputs / "prioritization" / "embedded-mnist"
    runs = read_csv(folder / "runs.csv")
    assert len(runs) == 3 * (4 + 2)
    sizes = {r["set"]: int(r["inputs"]) for r in runs}
    assert sizes == {"clean": 200, "corrupted": 200, "adversarial": 220}
    for r in runs:
        best = 1 - int(r["failures"]) / (2 * int(r["inputs"]))
        assert 0 < float(r["apfd"]) <= best + 1e-12
    gini = {r["set"]: float(r["apfd"]) for r in runs if r["ordering"] == "gini"}
    random = {
        s: np.mean([float(r["apfd"]) for r in runs if r["ordering"] == "random" and r["set"] == s]) for s in sizes
    }
    assert all(gini[s] > random[s] for s in sizes)  # the softmax knows where it is unsure
    text = (folder / "study.md").read_text()
    assert "| random | " in text and " ± " in text and "Best possible APFD" in text
    capsys.readouterr()
    run_recipe(module, argv, monkeypatch)  # resumable: nothing is ranked again
    assert "APFD" not in "".join(line for line in capsys.readouterr().out.splitlines() if line.startswith("["))


def test_guidance_study_smoke(recipe, outputs, monkeypatch, capsys, trained):
    trained("lenet5", "lenet1")
    module = recipe("superseded.guidance_study")
    argv = [
        "--dataset",
        "embedded-mnist",
        "--validator",
        "lenet1",
        "--arms",
        "idc",
        "none",
        "noise",
        "pgd",
        "--seeds",
        "20",
        "--budget",
        "256",
        "--repeats",
        "2",
        "--fit-train",
        "1500",
        "--eval",
        "100",
        "--retrain-size",
        "10",
    ]
    run_recipe(module, argv, monkeypatch)
    folder = outputs / "guidance_study" / "embedded-mnist"
    runs = read_csv(folder / "runs.csv")
    assert [(r["arm"], r["repetition"]) for r in runs] == [
        (a, str(r)) for r in range(2) for a in ("idc", "none", "noise", "pgd")
    ]
    for r in runs:
        calls = {x["arm"]: int(x["calls"]) for x in runs if x["repetition"] == r["repetition"]}
        # the baselines stop at the none run's calls (within one batch of mutants)
        assert calls["none"] <= calls["noise"] < calls["none"] + 256
        assert calls["none"] - 11 * 256 < calls["pgd"] <= calls["none"] + 11 * 256
        for faults in ("faults", "independent_faults"):  # the model's own features and the validator's
            assert int(r[faults]) >= int(r["pairs"]) if int(r["findings"]) else int(r[faults]) == 0
        assert int(r["retrain_n"]) == min(10, int(r["findings"]))
        assert 0 <= float(r["validity_%"]) <= 100 if int(r["findings"]) else True
    text = (folder / "study.md").read_text()
    assert "| pgd | " in text and "Holm" in text and "IDC guidance against every other arm" in text
    summary = read_csv(folder / "study.csv")
    assert {"A12 faults_per_1k_calls vs none", "Holm p faults_per_1k_calls vs none"} <= set(summary[0])
    assert "independent of that model" in text and "Holm p independent_faults_per_1k_calls vs none" in summary[0]
    capsys.readouterr()
    run_recipe(module, argv, monkeypatch)
    assert capsys.readouterr().out.count("done before, kept") == 8

    # a run saved before the independent extractor existed is replayed: the same findings, the same features.
    # Which runs find failures depends on the machine's arithmetic; PGD at eps 0.15 fools a LeNet-5 trained on
    # 4,000 digits on some of 20 seeds in either repetition, so some run has findings
    found = [r for r in runs if int(r["findings"])]
    assert found, "no run found a failure"
    npz = folder / "runs" / f"{found[0]['arm']}_r{found[0]['repetition']}.npz"
    with np.load(npz) as data:
        saved = {k: data[k] for k in data.files}
    assert len(saved["label"]) == int(found[0]["findings"]) and len(saved["validator_features"]) == len(saved["label"])
    older = {k: v for k, v in saved.items() if k != "validator_features"}
    np.savez(npz, **older)
    run_recipe(module, argv, monkeypatch)
    assert capsys.readouterr().out.count("replayed for the independent fault features") == 1
    with np.load(npz) as data:
        np.testing.assert_allclose(data["validator_features"], saved["validator_features"], rtol=1e-5, atol=1e-5)
    # a replay that does not give the saved findings is refused, not silently mixed in
    np.savez(npz, **dict(older, prediction=older["prediction"][::-1] + 1))
    with pytest.raises(SystemExit, match="not reproducible"):
        run_recipe(module, argv, monkeypatch)


def test_the_steering_failure_bound_is_absolute(recipe):
    import math

    import keras

    from idcgen.prioritization import OrderingParameters, prioritize

    module = recipe("prioritization")
    # DeepTest's relation at lambda 5 for the challenge's best published RMSE on the drive (0.0498 rad)
    assert module.FAILURE_BOUND == 0.111 == round(math.sqrt(5) * 0.0498, 3)
    keras.utils.set_random_seed(1)
    inp = keras.Input((8, 8, 1))
    model = keras.Model(inp, keras.layers.Dense(1)(keras.layers.Flatten()(inp)))
    x = np.random.default_rng(0).random((6, 8, 8, 1)).astype(np.float32)
    out = model.predict(x, verbose=0)[:, 0].astype(np.float64)
    # frames just below and just above the bound, on both sides, one on the label, one far off
    errors = np.array([0.1105, 0.1115, -0.1115, -0.1105, 0.0, 0.5])
    ranking = prioritize(
        model, x, by="random", y=out - errors, parameters=OrderingParameters(tolerance=module.FAILURE_BOUND)
    )
    assert ranking.evaluation.failures == 3  # 0.1115, -0.1115 and 0.5
    # the rule it replaces, twice the set's own RMSE (0.447 rad here), calls only the far one a failure
    assert prioritize(model, x, by="random", y=out - errors).evaluation.failures == 1
    assert 2 * math.sqrt(np.mean(errors**2)) == pytest.approx(0.4467, abs=1e-4)
