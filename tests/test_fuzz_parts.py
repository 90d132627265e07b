"""Validity bounds, schedulers, oracles and the corpus: numpy-only parts of the fuzzer."""

import numpy as np
import pytest

from idcgen.errors import InputError, ParameterError
from idcgen.fuzz.corpus import Corpus
from idcgen.fuzz.oracle import Misclassification, PredictionChange, make_oracle
from idcgen.fuzz.scheduler import BatchPrioritization, Uniform, make_scheduler
from idcgen.fuzz.validity import Validity


def test_validity_bounds_by_hand():
    ref = np.zeros((1, 10, 10, 1), np.float32)  # 100 pixels: L0 bound 0.02 * 100 = 2
    one_big = ref.copy()
    one_big[0, 0, 0] = 1.0  # L0 = 1 < 2: valid whatever L-inf
    two_big = ref.copy()
    two_big[0, 0, :2] = 1.0  # L0 = 2, L-inf 1 > 0.2: invalid
    all_small = ref + 0.2  # L-inf = 0.2 <= 0.2: valid
    all_bigger = ref + 0.21  # invalid
    rounding = ref + 0.001  # below half a uint8 step: no change
    batch = np.concatenate([one_big, two_big, all_small, all_bigger, rounding])
    v = Validity()
    np.testing.assert_array_equal(v.check(batch, np.repeat(ref, 5, 0)), [True, False, True, False, True])
    assert Validity(enabled=False).check(batch, np.repeat(ref, 5, 0)).all()
    assert "L0 < 0.02" in v.describe() and "51/255" in v.describe()
    with pytest.raises(ParameterError, match="'beta' validity bound"):
        Validity(beta=0)


def test_validity_in_parts_is_the_whole_batch_check(monkeypatch):
    """The check runs rows at a time on the thread pool: split into many parts it answers as in one."""
    import idcgen.threads as threads

    rng = np.random.default_rng(0)
    refs = rng.random((300, 8, 8, 3), dtype=np.float32)
    mutants = np.clip(refs + rng.normal(0, 0.12, refs.shape).astype(np.float32), 0, 1)
    mutants[::7] = refs[::7]
    whole = Validity().check(mutants, refs)
    assert 0 < whole.sum() < len(whole)
    monkeypatch.setattr(threads, "PART_BYTES", 5 * 8 * 8 * 3 * 4)  # 5 rows a part: 60 parts
    assert len(threads.row_parts(300, 8 * 8 * 3 * 4)) == 60
    np.testing.assert_array_equal(Validity().check(mutants, refs), whole)
    # by hand, on the flattened differences
    diff = np.abs(mutants - refs).reshape(300, -1)
    want = (np.count_nonzero(diff > 0.5 / 255, axis=1) < 0.02 * 192) | (diff.max(axis=1) <= 0.2 + 1e-6)
    np.testing.assert_array_equal(whole, want)
    assert Validity().check(mutants[:0], refs[:0]).shape == (0,)


def test_gather_in_parts_is_fancy_indexing(monkeypatch):
    import idcgen.threads as threads

    a = np.random.default_rng(1).random((50, 4, 4, 3), dtype=np.float32)
    rows = np.random.default_rng(2).integers(0, 50, 37)
    monkeypatch.setattr(threads, "PART_BYTES", 3 * a[0].nbytes)  # 13 parts
    got = threads.gather(a, rows)
    np.testing.assert_array_equal(got, a[rows])
    assert not np.shares_memory(got, a) and threads.gather(a, rows[:0]).shape == (0, 4, 4, 3)


@pytest.mark.parametrize("spec", ["brightness", "contrast", "noise", "gain", "bias"])
@pytest.mark.parametrize("value_range", [(0.0, 1.0), (0.0, 255.0)])
def test_rowwise_transforms_in_parts_are_the_whole_batch_pass(spec, value_range, monkeypatch):
    """Drawn for the batch, applied rows at a time on the pool: in 23 parts, bit for bit the transform over the
    whole batch in one pass (in_unit_range), and the draws leave the generator where one pass leaves it."""
    import idcgen.threads as threads
    from idcgen.fuzz.mutators import make_mutator
    from idcgen.fuzz.mutators.base import MutationContext
    from idcgen.fuzz.mutators.image import in_unit_range

    lo, hi = value_range
    x = lo + (hi - lo) * np.random.default_rng(0).random((90, 6, 5, 3), dtype=np.float32)
    ctx = MutationContext(network=None, labels=np.zeros(90, int), value_range=value_range)
    mutator = make_mutator(spec)
    whole_rng, parts_rng = np.random.default_rng(3), np.random.default_rng(3)
    whole = mutator._finish(x, in_unit_range(lambda unit: mutator._transform(unit, whole_rng), x, ctx), ctx)
    monkeypatch.setattr(threads, "PART_BYTES", 4 * x[0].nbytes)  # 4 rows a part: 23 parts
    parts = mutator.mutate(x, parts_rng, ctx)
    np.testing.assert_array_equal(parts, whole)
    assert parts_rng.bit_generator.state == whole_rng.bit_generator.state
    assert not np.array_equal(parts, x) and lo <= parts.min() and parts.max() <= hi


@pytest.mark.parametrize("value_range", [(0.0, 1.0), (0.0, 255.0)])
def test_in_unit_range_clips_in_place_only_what_the_transform_made(value_range):
    """The transform's new array is clipped and scaled back in place; its input (the caller's batch, when the
    range is [0, 1]) never is, and a result of another dtype gives what the out-of-place expression gives."""
    from idcgen.fuzz.mutators.base import MutationContext
    from idcgen.fuzz.mutators.image import in_unit_range

    lo, hi = value_range
    ctx = MutationContext(network=None, labels=np.zeros(4, int), value_range=value_range)
    x = lo + (hi - lo) * np.random.default_rng(0).random((4, 3, 3, 1), dtype=np.float32)
    kept = x.copy()
    for transform in (
        lambda u: u,
        lambda u: u[::-1],
        lambda u: u + np.float32(0.3),
        lambda u: (u * 1.5).astype(np.float16),
    ):
        got = in_unit_range(transform, x, ctx)
        unit = (kept - np.float32(lo)) / np.float32(hi - lo)
        want = np.clip(transform(unit), 0.0, 1.0)
        want = want if value_range == (0.0, 1.0) else want * np.float32(hi - lo) + np.float32(lo)
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(x, kept)


def test_a_nan_in_the_last_part_of_a_batch_is_refused(monkeypatch):
    """The input check's extremes are taken rows at a time: a NaN in any part still fails it."""
    import idcgen.threads as threads
    from idcgen.fuzz.mutators import make_mutator
    from idcgen.fuzz.mutators.base import MutationContext

    x = np.random.default_rng(0).random((40, 4, 4, 3), dtype=np.float32)
    x[-1, 2, 2, 0] = np.nan
    monkeypatch.setattr(threads, "PART_BYTES", 3 * x[0].nbytes)  # 14 parts
    ctx = MutationContext(network=None, labels=np.zeros(40, int))
    with pytest.raises(InputError, match="inputs must be finite and inside value_range"):
        make_mutator("brightness").mutate(x, np.random.default_rng(0), ctx)


def test_batch_prioritization_weights_by_hand():
    s = BatchPrioritization(gamma=5, p_min=0.01)
    # f = 0 -> 1; f = 2 -> 1 - 2/5 = 0.6; f = 4 -> 0.2; f = 4.95 threshold: f = 5 -> p_min
    np.testing.assert_allclose(s.weights(np.array([0, 2, 4, 5, 9])), [1, 0.6, 0.2, 0.01, 0.01])
    rng = np.random.default_rng(0)
    picks = s.pick(np.array([0, 100]), 10_000, rng)
    assert (picks == 0).mean() > 0.98  # 1 vs 0.01
    picks = s.pick(np.array([0, 2, 4, 5]), 100_000, rng)  # weights 1, 0.6, 0.2, 0.01 (sum 1.81)
    np.testing.assert_allclose(
        np.bincount(picks, minlength=4) / 100_000, np.array([1, 0.6, 0.2, 0.01]) / 1.81, atol=0.005
    )
    np.testing.assert_array_equal(
        s.pick(np.zeros(5, int), 7, np.random.default_rng(1)), s.pick(np.zeros(5, int), 7, np.random.default_rng(1))
    )
    assert set(Uniform().pick(np.zeros(3, int), 100, rng)) == {0, 1, 2}
    with pytest.raises(ParameterError, match="'scheduler' parameter"):
        make_scheduler("fifo")


def execution(preds, labels, root_preds, probs=None):
    from idcgen.fuzz.oracle import Execution

    preds = np.asarray(preds)
    probs = np.eye(5)[preds] if probs is None else np.asarray(probs)
    return Execution(np.zeros((len(preds), 1)), probs, preds, np.asarray(labels), np.asarray(root_preds))


def test_oracles():
    run = execution([1, 2, 3, 4], [1, 1, 3, 1], [1, 1, 0, 2])
    # mutant 1: seed right (1), mutant says 2 -> finding; mutant 3: seed already wrong (2 for 1) -> not one
    np.testing.assert_array_equal(Misclassification()(run), [False, True, False, False])
    np.testing.assert_array_equal(PredictionChange()(run), [False, True, True, True])
    with pytest.raises(InputError, match="needs labelled seeds"):
        Misclassification()(execution([1, 2, 3], [-1, 1, 1], [1, 1, 0]))
    with pytest.raises(ParameterError, match="at least two models"):
        make_oracle("disagreement")
    with pytest.raises(ParameterError, match="'oracle' parameter"):
        make_oracle("crash")


def test_oracles_compose():
    from idcgen.fuzz.oracle import Uncertain

    # four mutants of correctly classified seeds (label 1); top probabilities 0.9, 0.4, 0.6, 0.3
    probs = [[0.05, 0.9, 0.05], [0.3, 0.3, 0.4], [0.6, 0.2, 0.2], [0.3, 0.3, 0.3]]
    run = execution([1, 2, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1], probs)
    confident = make_oracle("misclassification & ~uncertain")
    assert str(confident) == "misclassification & ~uncertain"
    np.testing.assert_array_equal(confident(run), [False, False, True, False])  # wrong and top-1 >= 0.5
    np.testing.assert_array_equal((Misclassification() & ~Uncertain(0.5))(run), confident(run))
    np.testing.assert_array_equal(make_oracle("uncertain(0.35)")(run), [False, False, False, True])
    either = make_oracle("prediction-change | uncertain")
    np.testing.assert_array_equal(either(run), [False, True, True, True])
    assert make_oracle(confident) is confident
    with pytest.raises(ParameterError, match="takes no parameter"):
        make_oracle("misclassification(3)")
    with pytest.raises(ParameterError, match="threshold"):
        Uncertain(1.5)


def test_uncertain_reads_a_pytorch_models_logits_as_their_softmax():
    """A PyTorch classifier's outputs are logits: its top probability is their softmax's (a logit of 3 read
    as a probability was never uncertain, and `misclassification & ~uncertain` flagged every hesitant mutant)."""
    from idcgen.fuzz.oracle import Uncertain

    logits = [[3.0, 2.9, -1.0], [6.0, 0.0, 0.0], [0.2, 0.1, 0.0]]  # softmax tops 0.51, 0.995, 0.37
    run = execution([0, 0, 0], [0, 0, 0], [0, 0, 0], logits)
    np.testing.assert_array_equal(Uncertain(0.5)(run), [False, False, True])
    np.testing.assert_array_equal(Uncertain(0.9)(run), [True, False, True])


def test_corpus_grows_and_round_trips():
    c = Corpus((2, 2, 1))
    x = np.arange(12, dtype=np.float32).reshape(3, 2, 2, 1)
    ids = c.add(
        x,
        x,
        [[], [], []],
        parent=np.full(3, -1),
        root=np.arange(3),
        label=[0, 1, 2],
        prediction=[0, 1, 1],
        combination=[5, 6, 7],
        affine=np.zeros(3, bool),
        step=0,
    )
    for k in range(40):  # forces several reallocations
        c.add(
            x[:1] + k,
            x[:1],
            [["gauss(std=0.05)"]],
            parent=[0],
            root=[0],
            label=[0],
            prediction=[0],
            combination=[100 + k],
            affine=[False],
            step=k + 1,
        )
    assert len(c) == 43 and c.n_seeds == 3 and list(ids) == [0, 1, 2]
    np.add.at(c.fuzz_count, [0, 0, 5], 1)
    assert c.fuzz_count[0] == 2 and c.fuzz_count[5] == 1
    c2 = Corpus((2, 2, 1))
    c2.add_entries(c.entries(np.arange(len(c))))
    np.testing.assert_array_equal(c2.x, c.x)
    np.testing.assert_array_equal(c2.combination, c.combination)
    assert c2.chains == c.chains and c2.chains[0] == [] and c2.chains[5] == ["gauss(std=0.05)"]


def test_scheduler_objects_and_specs():
    # a scheduler object is taken as it is (the docstrings promise it); a spec sets its parameters by name
    from idcgen.fuzz.scheduler import scheduler_spec

    mine = Uniform()
    assert make_scheduler(mine) is mine
    custom = make_scheduler("prioritized(gamma=3, p_min=0.05)")
    assert custom == BatchPrioritization(gamma=3, p_min=0.05)
    assert scheduler_spec(custom) == "prioritized(gamma=3, p_min=0.05)" and scheduler_spec(mine) == "uniform"
    assert make_scheduler(scheduler_spec(custom)) == custom  # what a campaign records makes it again
    with pytest.raises(ParameterError, match="the prioritized scheduler has no parameter 'alpha'"):
        make_scheduler("prioritized(alpha=1)")
    with pytest.raises(ParameterError, match="must be a scheduler"):
        make_scheduler(42)


def test_one_spec_grammar_with_the_older_spellings():
    from idcgen.criteria import parse_criteria, parse_spec
    from idcgen.fuzz.oracle import Confusion, Uncertain
    from idcgen.spec import parse

    assert parse("gauss(std=0.05)").kwargs == {"std": 0.05}
    assert parse("nc(scaling=channel-means)", words=True).kwargs == {"scaling": "channel-means"}
    with pytest.raises(ParameterError, match="must be a Python literal"):
        parse("nc(scaling=channel-means)")  # bare words only where a kind allows them
    # criteria: name(key=value) and the colon spelling give the same parameters
    assert (
        parse_spec("kmnc(k=10, layers=conv1+fc)")
        == parse_spec("kmnc:k=10:layers=conv1+fc")
        == ("kmnc", {"k": 10, "layers": ["conv1", "fc"]})
    )
    assert parse_criteria("idc,NC(threshold=0.5),kmnc:k=4") == ["idc", "nc(threshold=0.5)", "kmnc:k=4"]
    # oracles: name(key=value), and the unnamed values of the older spellings
    assert (
        make_oracle("uncertain(threshold=0.7)")
        == make_oracle("uncertain(0.7)")
        == make_oracle("uncertain(p=0.7)")
        == Uncertain(0.7)
    )
    assert make_oracle("confusion(a=3, b=5)") == make_oracle("confusion(3,5)") == Confusion(3, 5)
    with pytest.raises(ParameterError, match=r"the confusion oracle takes two class numbers, e.g. confusion\(3,5\)"):
        make_oracle("confusion(3)")
    with pytest.raises(ParameterError, match="the misclassification oracle takes no parameter"):
        make_oracle("misclassification(1)")
    # each oracle declares whether it reads labels; composites ask their parts
    assert make_oracle("misclassification & ~uncertain").needs_labels
    assert not make_oracle("prediction-change | uncertain").needs_labels
