"""The fourth guidance study's extension (docs/design.md, "The fourth version extended"): IDC as an energy
scheduler and IDC per class in the study fuzzer (recipes/kit/guidance.py) on the framework-free double, the
reference pool's mapping, the new-fault rarefaction and DBCV by hand (recipes/kit/reference.py)."""

import numpy as np
import pytest

from test_recipes import outputs, read_csv, recipe, run_recipe  # noqa: F401  (fixtures shared with test_recipes)

CHEAP = ["gauss(std=0.05)", "random_pixels", "rotate", "brightness"]


@pytest.fixture(scope="module")
def setup(digits):
    from doubles import NumpyNet
    from idcgen.analysis import analyze

    x_train, y_train, x_test, y_test = digits
    network = NumpyNet.fit(x_train, y_train)
    analysis = analyze(network, x_train[:1000], y_train[:1000], layer="hidden", m=6, progress=False)
    return analysis, network, (x_train[:1000], y_train[:1000]), x_test[:60], y_test[:60]


def campaign_of(kit, analysis, x, y, **kw):
    fuzzer = kit.study_fuzzer(analysis, mutators=CHEAP, batch_size=64, random_state=3, **kw)
    return fuzzer, fuzzer.run(x, y, budget=640, progress=False)


def first_of_its_kind(values) -> np.ndarray:
    first = np.zeros(len(values), bool)
    first[np.unique(values, return_index=True)[1]] = True
    return first


def test_energy_favours_the_first_entry_of_each_combination(recipe, setup):
    kit = recipe("kit.guidance")
    analysis, _, _, x, y = setup
    fuzzer, campaign = campaign_of(kit, analysis, x, y, guide="none", energy=10.0)
    combination = campaign.corpus.combination
    assert len(fuzzer.favoured) == len(campaign.corpus) > len(x)  # every valid mutant kept
    assert np.array_equal(fuzzer.favoured, first_of_its_kind(combination))
    favoured = np.array(fuzzer.favoured)
    counts = campaign.corpus.fuzz_count
    assert counts[favoured].mean() > counts[~favoured].mean()  # ten times the weight: picked more often


def test_energy_one_is_deephunters_scheduler(recipe, setup):
    kit = recipe("kit.guidance")
    analysis, _, _, x, y = setup
    _, plain = campaign_of(kit, analysis, x, y, guide="none")
    _, flat = campaign_of(kit, analysis, x, y, guide="none", energy=1.0)
    assert np.array_equal(plain.corpus.parent, flat.corpus.parent)
    assert np.array_equal(plain.corpus.x, flat.corpus.x)


def test_matched_keep_takes_idcs_count_at_idcs_moments_blind(recipe, setup):
    """The timing-matched control (docs/design.md, "The timing-matched control"): the first step (the same
    mutants in both campaigns) keeps as many as IDC does; what it keeps is drawn blind, so unlike IDC's corpus
    some kept mutants reach combinations the corpus already had."""
    kit = recipe("kit.guidance")
    analysis, _, _, x, y = setup
    _, idc = campaign_of(kit, analysis, x, y, guide="idc")
    fuzzer, blind = campaign_of(kit, analysis, x, y, guide="none", matched=True)
    first = min(idc.corpus.step[idc.corpus.parent >= 0])
    kept = [(c.corpus.step[c.corpus.parent >= 0] == first).sum() for c in (idc, blind)]
    assert kept[0] == kept[1] > 0
    for campaign, all_new in ((idc, True), (blind, False)):
        kept = campaign.corpus.parent >= 0
        assert first_of_its_kind(campaign.corpus.combination)[kept].all() == all_new
    seeds = len(np.unique(blind.corpus.combination[blind.corpus.parent < 0]))
    assert (blind.corpus.parent >= 0).sum() == fuzzer.shadow.covered - seeds  # one kept per combination IDC marked


def test_per_class_keeps_what_is_new_for_its_class(recipe, setup):
    from idcgen.analysis import RelevanceSettings, analyze

    kit = recipe("kit.guidance")
    analysis, network, (x_fit, y_fit), x, y = setup
    per_class = {
        int(k): analyze(network, x_fit, y_fit, layer="hidden", m=4, relevance=RelevanceSettings(only_class=int(k)))
        for k in np.unique(y)
    }
    _, campaign = campaign_of(kit, analysis, x, y, per_class=per_class)
    corpus = campaign.corpus
    label = corpus.label[corpus.root]
    mutants = np.flatnonzero(corpus.parent >= 0)
    assert mutants.size
    for k, class_analysis in per_class.items():
        rows = np.flatnonzero(label == k)
        ids = class_analysis.ids(corpus.x[rows])
        new = first_of_its_kind(ids)
        # a class's seeds may share a combination; each kept mutant is the first of its class's combination
        assert new[np.isin(rows, mutants)].all()


def test_rarefied_new_by_hand(recipe):
    ref = recipe("kit.reference")
    ids = np.array([0, 0, 0, 1, 5, 5])  # faults 0 and 1 are the reference's, 5 a new one (first_new 5)
    # n = 2 of 6: fault 5 (2 failures) is missed when both draws come from the other 4: C(4, 2) / C(6, 2)
    assert ref.rarefied_new(ids, 2, 5) == pytest.approx(1 - 6 / 15)
    assert ref.rarefied_new(ids, 6, 5) == 1.0 and ref.rarefied_new(ids, 6, 0) == 3.0
    assert ref.rarefied_new(np.zeros(0, int), 0, 0) == 0.0
    with pytest.raises(ValueError):
        ref.rarefied_new(ids, 7, 5)


def test_dbcv_by_hand(recipe):
    ref = recipe("kit.reference")
    # clusters {0, 1, 2} and {10, 11, 12} in one dimension. All-points core distance of 0: the mean of (1/1)
    # and (1/2) is 3/4, so 4/3; of 1: 1. Mutual reachability 0-1 and 1-2: 4/3, 0-2: 2; so the tree is 0-1-2,
    # its one internal node 1 has no internal edge and DSC = 4/3 (all edges, as the hdbscan package). DSPC
    # between the internal nodes 1 and 11: max(1, 1, 10) = 10. V = (10 - 4/3) / 10 = 13/15 for each cluster.
    points = np.array([0, 1, 2, 10, 11, 12.0])
    assert ref.dbcv(points, np.array([0, 0, 0, 1, 1, 1])) == pytest.approx(13 / 15)
    # a noise point counts in the weights, not in a cluster: 6/7 of it
    labels = np.array([0, 0, 0, 1, 1, 1, -1])
    assert ref.dbcv(np.append(points, 50.0), labels) == pytest.approx(6 / 7 * 13 / 15)
    with pytest.raises(ValueError):
        ref.dbcv(points, np.zeros(6, int))


def test_reference_pool_maps_failures_inside_its_density(recipe):
    ref = recipe("kit.reference")
    rng = np.random.default_rng(0)
    blobs = np.concatenate([rng.normal(0, 0.1, (30, 3)), rng.normal(5, 0.1, (30, 3))])
    labels, predictions = np.zeros(60, int), np.ones(60, int)
    pool = ref.ReferencePool(blobs, labels, predictions)
    assert pool.count == 2
    near = np.array([[0.0, 0, 0], [5.0, 5, 5]])
    found = pool.assign(near, np.zeros(2, int), np.ones(2, int))
    assert found[0] != found[1] and (found >= 0).all()
    assert found[0] == pool.found.fault[0] and found[1] == pool.found.fault[59]
    # far from every pool failure, or of a (true, predicted) pair the pool lacks: new
    assert (pool.assign(np.array([[2.5, 2.5, 2.5], [0.0, 0, 0]]), np.array([0, 3]), np.array([1, 4])) == -1).all()
    run = np.concatenate([near, rng.normal(-9, 0.05, (12, 3))])
    ids = pool.run_faults(run, np.zeros(14, int), np.ones(14, int))
    assert (ids[:2] < pool.count).all() and (ids[2:] == pool.count).all()  # the new ones: one new fault


def test_contact_sheet_keeps_colour(recipe, tmp_path):
    # a CIFAR-10 fault may be a matter of hue: colour images are drawn in colour, grey ones in grey
    from PIL import Image

    reference = recipe("kit.reference")
    x = np.zeros((4, 2, 3, 3), np.float32)
    x[:, :, :, 2] = 1.0  # blue images
    x[0, 0, 0] = [1.0, 0.0, 0.0]  # one red pixel
    shown = reference.contact_sheet(tmp_path / "c.png", x, np.array([0, 0, 1, 1]), clusters=2, per=2)
    sheet = np.asarray(Image.open(tmp_path / "c.png"))  # drawn at twice the size, with a white border a tile
    assert shown.tolist() == [0, 1] and sheet.shape == (2 * 2 * (2 + 2), 2 * 2 * (3 + 2), 3)
    tiles = sheet[2:6, 2:8].reshape(-1, 3), sheet[10:14, 2:8].reshape(-1, 3)
    assert all(((t == [0, 0, 255]).all(axis=1) | (t == [255, 0, 0]).all(axis=1)).all() for t in tiles)
    grey = reference.contact_sheet(tmp_path / "g.png", x[..., :1], np.array([0, 0, 1, 1]), clusters=2, per=2)
    assert grey.tolist() == [0, 1] and np.asarray(Image.open(tmp_path / "g.png")).ndim == 2


def test_directed_calls(recipe):
    study = recipe("kit.study")
    assert study.call_cost("directed(steps=5, step_size=0.03, eps=0.15, tries=16)") == 6
    assert study.call_cost("directed") == 6 and study.call_cost("gauss") == 1


@pytest.mark.slow
def test_extension_smoke(recipe, outputs, monkeypatch, capsys):
    subjects = recipe("subjects")
    if not (outputs / "subjects" / "embedded-mnist" / "lenet4_extractor.keras").exists():
        run_recipe(subjects, ["--dataset", "embedded-mnist", "--copies", "2", "--epochs", "2"], monkeypatch)
    v4 = recipe("guidance_v4")
    argv = ["--dataset", "embedded-mnist", "--copies", "2", "--states", "2", "--seeds", "30", "--budget", "512"]
    argv += ["--fit-train", "1000", "--extension"]
    run_recipe(v4, argv, monkeypatch)
    out = outputs / "guidance_v4" / "embedded-mnist"
    arms = v4.available(v4.ARMS + v4.ADDED)
    assert {r["arm"] for r in read_csv(out / "runs.csv")} == set(v4.available(v4.ARMS))  # the pooled: eight arms
    runs = read_csv(out / "extension" / "runs.csv")
    assert sorted((r["arm"], r["copy"], r["state"]) for r in runs) == sorted(
        (arm, str(c), str(s)) for c in range(2) for s in range(2) for arm in arms
    )
    assert len(read_csv(out / "extension" / "reference.csv")) == 2 * len(v4.REFERENCE_STATES)
    sweep = read_csv(out / "extension" / "sweep.csv")
    first_new = int(next(r["reference faults"] for r in sweep if r["min_cluster_size"] == str(v4.MIN_CLUSTER_SIZE)))
    assignments = np.load(out / "extension" / "assignments.npz")
    for r in runs:
        ids = assignments[f"{r['arm']}_c{r['copy']}_r{r['state']}"]
        assert len(ids) == int(r["valid_failures"]) and int(r["new_failures"]) == (ids >= first_new).sum()
    for p in read_csv(out / "extension" / "pairs.csv"):
        a, b = p["comparison"].split(" vs ")
        sizes = [len(assignments[f"{arm}_c{p['copy']}_r{p['state']}"]) for arm in (a, b)]
        assert int(p["n"]) == min(sizes) and float(p["a new"]) <= float(p["a"]) + 1e-9
    families = [(c["family"], c["comparison"]) for c in read_csv(out / "extension" / "comparisons.csv")]
    added = [f"{a} vs {b}" for a, b in v4.ADDED_FAMILY if {a, b} <= set(arms)]
    assert [c for f, c in families if f == "added"] == added
    assert (out / "extension" / "contact_sheet.png").stat().st_size > 0
    run_recipe(v4, [*argv[:-1], "--matched"], monkeypatch)  # the timing-matched controls beside the IDC runs
    matched = read_csv(out / "matched" / "runs.csv")
    assert sorted({r["arm"] for r in matched}) == sorted(["idc@m8", "idc@m12", *v4.MATCHED]) and len(matched) == 16
    ext = {(r["arm"], r["copy"], r["state"]): r["valid_failures"] for r in runs}
    assert all(ext[(r["arm"], r["copy"], r["state"])] == r["valid_failures"] for r in matched if r["arm"][:4] == "idc@")
    run_recipe(v4, ["--verdicts", "embedded-mnist", "--out", str(outputs / "guidance_v4")], monkeypatch)
    grown = read_csv(outputs / "guidance_v4" / "extended_verdicts.csv")
    assert [r["endpoint"] for r in grown].count("reference") == len(added)
    assert len(read_csv(outputs / "guidance_v4" / "matched_verdicts.csv")) == len(v4.MATCHED_FAMILY)
    capsys.readouterr()
    run_recipe(v4, argv, monkeypatch)  # resumed: no study or reference run made again
    assert "[" not in "".join(line[:1] for line in capsys.readouterr().out.splitlines())
