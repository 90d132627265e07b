"""Test prioritisation (idcgen/prioritization.py): APFD and the orderings checked against values worked out by
hand, every ordering on a small classifier and a steering model, and the command line."""

import csv
import itertools
import json
import math

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from idcgen.cli import app
from idcgen.errors import InputError, ParameterError
from idcgen.prioritization import (
    OrderingParameters,
    additional_order,
    apfd,
    evaluate,
    found_at,
    orderings,
    prioritize,
    rank_by,
    softmax_priority,
)

runner = CliRunner()


# ---- APFD and the numpy orderings, by hand ------------------------------------------------------------


def test_apfd_of_a_toy_ranking_by_hand():
    # 5 inputs, inputs 1 and 3 fail; looked at in the order 3, 0, 1, 2, 4: failures at ranks 1 and 3
    failures = np.array([False, True, False, True, False])
    order = [3, 0, 1, 2, 4]
    assert apfd(order, failures) == pytest.approx(1 - (1 + 3) / (5 * 2) + 1 / (2 * 5))  # 0.7
    assert apfd(order, failures) == pytest.approx(0.7)
    # the share of the failures among the first ceil(p % of 5) inputs: 1 input, then 1, then 1
    assert found_at(order, failures, 10) == 0.5
    assert found_at(order, failures, 60) == 1.0  # the first 3 inputs hold both
    assert found_at(order, failures, 40) == 0.5  # the first 2 hold one
    e = evaluate(order, failures)
    assert (e.apfd, e.found_at_1, e.failures, e.inputs) == (pytest.approx(0.7), 0.5, 2, 5)


def test_failures_first_gets_the_largest_apfd_of_all_orderings():
    failures = np.array([False, True, False, True, True, False])
    n, m = len(failures), int(failures.sum())
    best = [1, 3, 4, 0, 2, 5]
    every = [apfd(list(p), failures) for p in itertools.permutations(range(n))]
    assert apfd(best, failures) == pytest.approx(1 - m / (2 * n)) == pytest.approx(max(every))
    assert apfd([0, 2, 5, 1, 3, 4], failures) == pytest.approx(min(every)) == pytest.approx(m / (2 * n))
    assert evaluate(best, failures).found_at_10 == pytest.approx(1 / 3)  # ceil(0.6) = 1 input: 1 of 3


def test_apfd_refuses_what_is_not_a_permutation_and_is_undefined_without_failures():
    with pytest.raises(InputError, match="permutation of the 3 input indices"):
        apfd([0, 0, 1], np.array([True, False, False]))
    with pytest.raises(InputError, match="permutation of the 3 input indices; got 2"):
        apfd([0, 1], np.array([True, False, False]))
    with pytest.raises(InputError, match="1-D boolean array"):
        apfd([0, 1, 2], np.array([1, 0, 0]))
    assert math.isnan(apfd([0, 1], np.array([False, False])))


def test_softmax_priorities_by_hand():
    p = np.array([[0.5, 0.3, 0.2], [1.0, 0.0, 0.0]])
    assert softmax_priority(p, "gini") == pytest.approx([1 - (0.25 + 0.09 + 0.04), 0.0])
    assert softmax_priority(p, "max-softmax") == pytest.approx([0.5, 0.0])
    assert softmax_priority(p, "margin") == pytest.approx([1 - (0.5 - 0.3), 0.0])
    entropy = -(0.5 * np.log(0.5) + 0.3 * np.log(0.3) + 0.2 * np.log(0.2))
    assert softmax_priority(p, "entropy") == pytest.approx([entropy, 0.0])
    with pytest.raises(InputError, match="at least two classes"):
        softmax_priority(np.ones((3, 1)), "gini")


def test_rank_by_keeps_ties_in_order_and_puts_nan_last():
    assert rank_by([0.1, np.nan, 0.5, 0.1, 0.9]).tolist() == [4, 2, 0, 3, 1]


def test_additional_ordering_by_hand():
    # input 1 covers most (3 items); then inputs 2 and 4 would each add item 3: the earlier, 2, is taken;
    # then nothing adds an item: the rest by their own totals (0 and 4 cover 2 items, 3 none)
    items = [np.array([0, 1]), np.array([0, 1, 2, 2, -1]), np.array([3]), np.array([], int), np.array([2, 3])]
    order, score = additional_order(items, total=4)
    assert order.tolist() == [1, 2, 0, 4, 3]
    assert score[[1, 2]].tolist() == [3.0, 1.0] and (score[[0, 4, 3]] < 1).all()


# ---- a small classifier ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def classifier():
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((4,))
    h = keras.layers.Dense(8, activation="relu", name="hidden")(inp)
    h = keras.layers.Dropout(0.2, name="drop")(h)
    model = keras.Model(inp, keras.layers.Dense(3, activation="softmax", name="out")(h))
    rng = np.random.default_rng(0)
    x_train = rng.random((300, 4)).astype(np.float32)  # values in [0, 1], as images
    x = rng.random((80, 4)).astype(np.float32)
    y = rng.integers(0, 3, 80)
    return model, x_train, x, y


@pytest.mark.parametrize("by", orderings())
def test_every_ordering_gives_a_permutation_of_a_classifiers_inputs(classifier, by):
    model, x_train, x, y = classifier
    ranking = prioritize(model, x, by=by, x_train=x_train, y=y, m=2)
    assert sorted(ranking.order.tolist()) == list(range(len(x)))
    assert ranking.scores.shape == (len(x),)
    if not by.endswith("additional") and by != "random":  # ranked by score: scores fall along the order
        s = ranking.scores[ranking.order]
        s = s[~np.isnan(s)]
        assert (np.diff(s) <= 1e-12).all()
    assert ranking.evaluation.failures == int((model.predict(x, verbose=0).argmax(1) != y).sum())
    assert 0 < ranking.evaluation.apfd < 1


def test_gini_puts_a_trained_lenets_failures_first(trained_lenet, digits):
    model, _ = trained_lenet
    _, _, x_test, y_test = digits
    gini = prioritize(model, x_test, by="gini", y=y_test).evaluation
    randoms = [prioritize(model, x_test, by="random", y=y_test, random_state=r).evaluation.apfd for r in range(3)]
    assert gini.failures > 10
    # random orderings sit near 0.5 and find about 10 % of the failures in the first 10 %
    assert max(randoms) < 0.56 and gini.apfd > max(randoms) + 0.1
    assert gini.found_at_10 > 0.2 > prioritize(model, x_test, by="random", y=y_test).evaluation.found_at_10


@pytest.mark.parametrize("by", ["gini", "max-softmax", "margin", "entropy"])
def test_a_model_ending_in_logits_is_ranked_by_its_softmax(trained_lenet, digits, by):
    # a model without a softmax at its end (most PyTorch models, Keras ones trained from_logits): the
    # orderings once read its logits as probabilities (gini scores of -100, APFD near random)
    import keras

    model, _ = trained_lenet
    _, _, x_test, y_test = digits
    logits = keras.Model(model.inputs, model.get_layer("before_softmax").output)
    theirs = prioritize(model, x_test[:300], by=by, y=y_test[:300])
    ours = prioritize(logits, x_test[:300], by=by, y=y_test[:300])
    np.testing.assert_allclose(ours.scores, theirs.scores, atol=1e-5)
    assert ours.evaluation.apfd == pytest.approx(theirs.evaluation.apfd, abs=0.01)


def test_random_is_reproducible_and_differs_by_state(classifier):
    model, _, x, _ = classifier
    a, b = (prioritize(model, x, by="random", random_state=r).order for r in (1, 1))
    assert a.tolist() == b.tolist()
    assert prioritize(model, x, by="random", random_state=2).order.tolist() != a.tolist()


def test_what_needs_the_training_inputs_is_read_from_the_registries(classifier):
    """NEEDS_TRAIN is typed nowhere: the orderings registered as trained and the criteria whose class says
    needs_data; a criterion's coverage orderings need --train exactly when it does, and --train's help says so."""
    from idcgen.criteria import CRITERIA
    from idcgen.prioritization import NEEDS_TRAIN, TRAINED_ORDERINGS

    assert TRAINED_ORDERINGS == ("lsa", "dsa", "mdsa", "idc-rarity")
    assert NEEDS_TRAIN == TRAINED_ORDERINGS + tuple(n for n, c in CRITERIA.items() if c.needs_data)
    model, _, x, _ = classifier
    for name, criterion in CRITERIA.items():
        if "total" not in criterion.orderings:
            continue
        if criterion.needs_data:
            with pytest.raises(ParameterError, match=f"by='{name}-total' needs the training inputs"):
                prioritize(model, x, by=f"{name}-total")
        else:
            assert name not in NEEDS_TRAIN
    text = " ".join(CliRunner().invoke(app, ["prioritize", "--help"], terminal_width=400).output.split())
    assert f"Training inputs ({', '.join(TRAINED_ORDERINGS)}, the coverage orderings of" in text


def test_orderings_refuse_bad_requests_in_one_line(classifier):
    model, x_train, x, _ = classifier
    with pytest.raises(ParameterError, match=r"The 'by' parameter must be one of gini, .*Got 'ginny' instead"):
        prioritize(model, x, by="ginny")
    with pytest.raises(ParameterError, match=r"by='lsa' needs the training inputs: pass x_train \(--train\)"):
        prioritize(model, x, by="lsa")
    with pytest.raises(ParameterError, match="by='kmnc-total' needs the training inputs"):
        prioritize(model, x, by="kmnc-total")
    with pytest.raises(InputError, match=r"no inputs to feed the model: got an array of shape \(0, 4\)"):
        prioritize(model, x[:0], by="gini")
    with pytest.raises(InputError, match=r"inputs have shape \(5,\) per item but the model expects \(4,\)"):
        prioritize(model, np.zeros((3, 5), np.float32), by="gini")  # the model takes 4 values per input
    with pytest.raises(ParameterError, match="'passes' parameter must be an int >= 2"):
        prioritize(model, x, by="mc-dropout", parameters=OrderingParameters(passes=1))


# ---- a steering model ------------------------------------------------------------------------------------


def steering(dropout=True):
    import keras

    keras.utils.set_random_seed(1)
    inp = keras.Input((8, 8, 1))
    h = keras.layers.Conv2D(4, 3, activation="relu", name="conv")(inp)
    h = keras.layers.Flatten(name="flatten")(h)
    h = keras.layers.Dense(6, activation="relu", name="hidden")(h)
    if dropout:
        h = keras.layers.Dropout(0.3, name="drop")(h)
    return keras.Model(inp, keras.layers.Dense(1, name="steer")(h))


@pytest.fixture(scope="module")
def frames():
    rng = np.random.default_rng(3)
    return rng.random((120, 8, 8, 1)).astype(np.float32), rng.random((60, 8, 8, 1)).astype(np.float32)


def test_a_steering_model_ranks_by_surprise_and_mc_dropout(frames):
    x_train, x = frames
    model = steering()
    out = model.predict(x, verbose=0)[:, 0]
    y = out + np.where(np.arange(len(x)) % 10 == 0, 1.0, 0.01)  # every tenth frame is far off: a failure
    for by in ("lsa", "mdsa", "mc-dropout", "nc-total", "idc-additional", "random"):
        ranking = prioritize(model, x, by=by, x_train=x_train, y=y, m=2)
        assert sorted(ranking.order.tolist()) == list(range(len(x)))
        assert ranking.evaluation.failures == 6
    a = prioritize(model, x, by="mc-dropout", random_state=5)
    b = prioritize(model, x, by="mc-dropout", random_state=5)
    assert np.array_equal(a.scores, b.scores) and (a.scores > 0).any()
    assert not np.array_equal(a.scores, prioritize(model, x, by="mc-dropout", random_state=6).scores)
    # the tolerance decides what a failure is
    assert prioritize(model, x, by="random", y=y, parameters=OrderingParameters(tolerance=0.5)).evaluation.failures == 6
    assert (
        prioritize(model, x, by="random", y=y, parameters=OrderingParameters(tolerance=0.001)).evaluation.failures == 60
    )


def test_mc_dropout_is_refused_for_a_model_without_dropout(frames):
    _, x = frames
    with pytest.raises(ParameterError, match="by='mc-dropout' needs a model with Dropout layers"):
        prioritize(steering(dropout=False), x, by="mc-dropout")


@pytest.mark.parametrize("by", ["gini", "max-softmax", "margin", "entropy", "dsa", "dsc-total", "dsc-additional"])
def test_classification_orderings_are_refused_for_a_regression_model(frames, by):
    x_train, x = frames
    with pytest.raises(ParameterError, match=f"by='{by}' needs .* and this is a regression model: use lsa"):
        prioritize(steering(), x, by=by, x_train=x_train)


# ---- the command line -------------------------------------------------------------------------------------


def test_cli_on_a_classifier_writes_the_ranking_and_prints_apfd(classifier, tmp_path):
    model, x_train, x, y = classifier
    model.save(tmp_path / "m.keras")
    np.savez(tmp_path / "test.npz", x=x, y=y)
    np.savez(tmp_path / "train.npz", x=x_train)
    out = tmp_path / "ranking.csv"
    result = runner.invoke(
        app,
        [
            "prioritize",
            "--model",
            str(tmp_path / "m.keras"),
            "--inputs",
            str(tmp_path / "test.npz"),
            "--by",
            "gini",
            "--out",
            str(out),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output.strip().splitlines()[-1])
    expected = prioritize(model, x, by="gini", y=y)
    assert set(payload) >= {"apfd", "found_at_1", "found_at_5", "found_at_10", "failures", "inputs"}
    assert payload["apfd"] == pytest.approx(expected.evaluation.apfd) and payload["inputs"] == len(x)
    rows = list(csv.DictReader(open(out)))
    assert list(rows[0]) == ["rank", "input", "score"] and len(rows) == len(x)
    assert [int(r["input"]) for r in rows] == expected.order.tolist()
    assert [int(r["rank"]) for r in rows] == list(range(1, len(x) + 1))
    result = runner.invoke(
        app,
        [
            "prioritize",
            "--model",
            str(tmp_path / "m.keras"),
            "--inputs",
            str(tmp_path / "test.npz"),
            "--by",
            "dsa",
            "--train",
            str(tmp_path / "train.npz"),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "80 inputs ordered by dsa" in result.output and "APFD 0." in result.output


def test_cli_names_the_files_of_a_folder_and_refuses_in_one_line(tmp_path, frames):
    model = steering()
    model.save(tmp_path / "steer.keras")
    folder = tmp_path / "frames"
    folder.mkdir()
    for i, image in enumerate(frames[1][:12]):
        Image.fromarray((image[:, :, 0] * 255).astype(np.uint8)).save(folder / f"f{i:02d}.png")
    out = tmp_path / "r.csv"
    result = runner.invoke(
        app,
        [
            "prioritize",
            "--model",
            str(tmp_path / "steer.keras"),
            "--inputs",
            str(folder),
            "--by",
            "mc-dropout",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "no labels: the ordering is not scored" in result.output
    names = [r["input"] for r in csv.DictReader(open(out))]
    assert sorted(names) == [f"f{i:02d}.png" for i in range(12)]
    result = runner.invoke(
        app,
        [
            "prioritize",
            "--model",
            str(tmp_path / "steer.keras"),
            "--inputs",
            str(folder),
            "--by",
            "gini",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "error: --by gini needs class probabilities and this is a regression model: use lsa, mdsa, mc-dropout, "
        "random, idc-rarity, idc-additional or a <criterion>-total/-additional ordering (not dsc)"
    ]
    result = runner.invoke(
        app,
        [
            "prioritize",
            "--model",
            str(tmp_path / "steer.keras"),
            "--inputs",
            str(folder),
            "--by",
            "nope",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    assert "--by must be one of gini" in result.output


def test_the_api_name_is_the_function():
    import idcgen.prioritization  # noqa: F401  (a submodule of that name would shadow the function)

    assert idcgen.prioritize is prioritize and callable(idcgen.prioritize)


def test_a_cache_fits_each_criterion_once_and_changes_no_ordering(classifier):
    model, x_train, x, y = classifier
    cache = {}
    first = [
        prioritize(model, x, by=by, x_train=x_train, m=2, cache=cache)
        for by in ("lsa", "kmnc-additional", "idc-rarity", "mdsa")
    ]
    fitted = {k: id(v) for k, v in cache.items()}
    again = [
        prioritize(model, x[::-1], by=by, x_train=x_train, m=2, cache=cache)
        for by in ("lsa", "kmnc-additional", "idc-rarity", "mdsa")
    ]
    assert {k: id(v) for k, v in cache.items()} == fitted and ("lsa", None) in cache and "kmnc" in cache
    for a, b, by in zip(first, again, ("lsa", "kmnc-additional", "idc-rarity", "mdsa")):
        fresh = prioritize(model, x, by=by, x_train=x_train, m=2)
        assert np.allclose(a.scores, fresh.scores, equal_nan=True) and a.order.tolist() == fresh.order.tolist()
        if by != "kmnc-additional":  # a score per input, whatever the order of the set
            assert np.allclose(b.scores[::-1], a.scores, equal_nan=True)


def test_cli_json_without_labels_has_nulls_and_the_ranking(classifier, tmp_path):
    model, _, x, _ = classifier
    model.save(tmp_path / "m.keras")
    np.save(tmp_path / "x.npy", x)
    result = runner.invoke(
        app,
        [
            "prioritize",
            "--model",
            str(tmp_path / "m.keras"),
            "--inputs",
            str(tmp_path / "x.npy"),
            "--by",
            "entropy",
            "--out",
            str(tmp_path / "r.csv"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output.strip().splitlines()[-1])
    assert payload["apfd"] is None and payload["failures"] is None and payload["inputs"] == len(x)
    assert [int(r["input"]) for r in csv.DictReader(open(tmp_path / "r.csv"))] == prioritize(
        model, x, by="entropy"
    ).order.tolist()
