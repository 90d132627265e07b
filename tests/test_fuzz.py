"""The fuzz loop, campaigns, resume, exports and the fuzz command. The loop's own behaviour is tested on a
framework-free network (tests/doubles.py: numpy, fitted in closed form); what needs a framework's model
(gradients and attacks, several real models, the command on a model file) on a small real LeNet-1."""

import json
import os
import signal
import threading

import numpy as np
import pytest
from typer.testing import CliRunner

from idcgen.errors import AnalysisMismatchError, InputError, ParameterError

CHEAP = ["gauss(std=0.05)", "random_pixels", "rotate", "brightness"]


@pytest.fixture(scope="module")
def setup(digits):
    """(analysis, network, None, seeds, labels): the loop on the numpy double, no framework involved."""
    from doubles import NumpyNet
    from idcgen.analysis import analyze

    x_train, y_train, x_test, y_test = digits
    network = NumpyNet.fit(x_train, y_train)
    analysis = analyze(network, x_train[:1000], y_train[:1000], layer="hidden", m=6, progress=False)
    return analysis, network, None, x_test[:60], y_test[:60]


@pytest.fixture(scope="module")
def keras_setup(trained_lenet, digits):
    """(analysis, model, model file, seeds, labels) on a trained Keras LeNet-1: for what needs gradients,
    attacks or a model file."""
    from idcgen.analysis import analyze

    model, path = trained_lenet
    x_train, y_train, x_test, y_test = digits
    analysis = analyze(model, x_train[:1000], y_train[:1000], layer="block2_conv1", m=6, progress=False)
    return analysis, model, path, x_test[:60], y_test[:60]


def test_the_loop_tests_run_without_a_framework(setup):
    # the double is what the loop tests run on: no framework's model, so no framework to import for them
    from doubles import NumpyNet

    analysis, network, _, x, y = setup
    assert isinstance(analysis.network, NumpyNet) and analysis.network.model is analysis.network
    assert (network.predict(x) == y).mean() > 0.5  # a classifier, not noise: findings are rare, not the rule


def make_fuzzer(analysis, mutators=CHEAP, **kw):
    from idcgen.fuzz.fuzzer import Fuzzer

    kw.setdefault("batch_size", 64)
    return Fuzzer(analysis, mutators=list(mutators), random_state=kw.pop("random_state", 3), **kw)


def test_loop_keeps_only_new_combinations_and_idc_never_falls(setup, tmp_path):
    analysis, _, _, x, y = setup
    fuzzer = make_fuzzer(analysis)
    c = fuzzer.start(x, y, tmp_path / "c", budget=640)
    seeds_idc = c.tracker.score
    fuzzer.run(c, progress=False)
    assert c.execs == 640
    kept = c.corpus.parent >= 0
    assert kept.any(), "no mutant reached a new combination"
    combos = c.corpus.combination
    seed_combos = set(combos[~kept].tolist())
    assert not (set(combos[kept].tolist()) & seed_combos)  # every kept mutant reached a new one
    assert len(set(combos[kept].tolist())) == kept.sum()  # ... and no two the same
    np.testing.assert_array_equal(np.sort(np.unique(combos)), c.tracker.covered_ids())
    rows = c.stats_rows()
    idc = [r["idc"] for r in rows]
    assert idc[0] == seeds_idc and all(b >= a for a, b in zip(idc, idc[1:])) and idc[-1] > seeds_idc
    assert [r["execs"] for r in rows][-1] == 640
    manifest = [json.loads(line) for line in (c.folder / "manifest.jsonl").read_text().splitlines()]
    assert len(manifest) == len(c.corpus) and manifest[-1]["chain"][-1] in [repr(m) for m in fuzzer.mutators]
    # validity: every kept mutant within DeepHunter's bounds of its reference
    assert fuzzer.validity.check(c.corpus.x[kept], c.corpus.reference[kept]).all()
    # one affine transform per chain at most
    assert max(sum(s.startswith("rotate") for s in chain) for chain in c.corpus.chains) <= 1


def flaky_noise():
    """A noise mutator (it runs a step ahead) that fails on about every third batch, by its rng."""
    from idcgen.fuzz.mutators import Mutator

    class Flaky(Mutator):
        kind = "noise"

        def __repr__(self):
            return "flaky()"

        def _mutate(self, x, rng, ctx):
            if rng.random() < 0.35:
                raise RuntimeError("flaky failure")
            return x + rng.normal(0, 0.05, x.shape).astype(np.float32)

    return Flaky()


@pytest.mark.parametrize("kind", ["cheap", "mixed", "flaky"])
def test_same_random_state_same_campaign_and_resume_equals_uninterrupted(kind, request, tmp_path):
    """A campaign resumed from its folder, or run again in memory after an interruption (between steps,
    while the model runs, in the middle of recording a step, while its state is written), equals an
    uninterrupted one; a failed batch makes no execs. The budget is not a multiple of the batch size:
    the last batch is short."""
    # the attack (fgsm) needs a framework's gradients; the other mutators run on the numpy double
    analysis, model, _, x, y = request.getfixturevalue("keras_setup" if kind == "mixed" else "setup")

    def mutators():
        return {
            "cheap": CHEAP,
            "mixed": ["fgsm(eps=0.1)", "gauss(std=0.05)", "relevant_pixels", "rotate"],
            "flaky": [flaky_noise(), "rotate", "gauss(std=0.05)"],
        }[kind]

    fuzzer = make_fuzzer(analysis, mutators())
    full = fuzzer.start(x, y, tmp_path / "full", budget=600)
    fuzzer.run(full, progress=False)
    assert full.execs == 600

    def stop_after_three(c):
        if c.step == 3:
            raise KeyboardInterrupt

    fuzzer2 = make_fuzzer(analysis, mutators())
    part = fuzzer2.start(x, y, tmp_path / "part", budget=600)
    with pytest.raises(KeyboardInterrupt):
        fuzzer2.run(part, progress=False, on_step=stop_after_three)
    # a crash after the commit could leave a half-written next step: simulate its leftovers
    (tmp_path / "part" / "corpus" / "step-000099.npz").write_bytes(b"garbage")
    with open(tmp_path / "part" / "manifest.jsonl", "a") as f:
        f.write('{"id": 99999, "half": tru')
    resumed = make_fuzzer(analysis, mutators()).resume(tmp_path / "part")
    assert resumed.step == 3
    make_fuzzer(analysis, mutators()).run(resumed, progress=False)

    fuzzer3 = make_fuzzer(analysis, mutators())  # interrupted, then run again in memory
    again = fuzzer3.start(x, y, tmp_path / "again", budget=600)
    with pytest.raises(KeyboardInterrupt):
        fuzzer3.run(again, progress=False, on_step=stop_after_three)
    fuzzer3.run(again, progress=False)

    fuzzer4 = make_fuzzer(analysis, mutators())  # Ctrl-C while the main thread waits for the model
    waiting = fuzzer4.start(x, y, tmp_path / "waiting", budget=600)
    forward, calls = fuzzer4._execute, []

    def interrupted(mutants):
        calls.append(len(mutants))
        if len(calls) == 4:
            raise KeyboardInterrupt
        return forward(mutants)

    fuzzer4._execute = interrupted
    with pytest.raises(KeyboardInterrupt):
        fuzzer4.run(waiting, progress=False)
    from idcgen.fuzz.campaign import Campaign

    on_disk = Campaign.load(tmp_path / "waiting").step  # memory, campaign.json and state agree
    assert waiting.step == on_disk == json.loads((tmp_path / "waiting" / "campaign.json").read_text())["state"]["step"]
    fuzzer4._execute = forward
    fuzzer4.run(waiting, progress=False)

    fuzzer5 = make_fuzzer(analysis, mutators())  # a real SIGINT in the middle of recording a step: held until it ends
    signalled = fuzzer5.start(x, y, tmp_path / "signalled", budget=600)
    record = signalled.record

    def record_and_signal(*args, **kw):
        if signalled.step == 2:
            # to the main thread itself: os.kill lets the kernel hand it to any thread, and on a loaded machine
            # the campaign could end before that thread ran
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        record(*args, **kw)

    signalled.record = record_and_signal
    # Ctrl-C as an interactive shell leaves it: a pytest started in the background by a non-interactive shell
    # inherits SIGINT ignored, and a campaign leaves an ignored SIGINT ignored (fuzzer._Interrupts)
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            fuzzer5.run(signalled, progress=False)
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert signalled.step == 3 and len(signalled.stats_rows()) == 4  # the seeds' row and three steps
    signalled.record = record
    fuzzer5.run(signalled, progress=False)

    fuzzer6 = make_fuzzer(analysis, mutators())  # killed while writing step 3's state: step 2 stands
    torn = fuzzer6.start(x, y, tmp_path / "torn", budget=600)
    with pytest.raises(KeyboardInterrupt):
        fuzzer6.run(torn, progress=False, on_step=stop_after_three)
    from idcgen.fuzz.statefile import STATE_FILES, read_state

    newest = tmp_path / "torn" / STATE_FILES[read_state(tmp_path / "torn")[0] % 2]
    newest.write_bytes(newest.read_bytes()[:-7])
    torn = make_fuzzer(analysis, mutators()).resume(tmp_path / "torn")
    assert torn.step == 2
    make_fuzzer(analysis, mutators()).run(torn, progress=False)

    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("time", "execs_per_s", "seconds")} for r in rows]
    for other, folder in (
        (resumed, "part"),
        (again, "again"),
        (waiting, "waiting"),
        (signalled, "signalled"),
        (torn, "torn"),
    ):
        np.testing.assert_array_equal(other.corpus.x, full.corpus.x)
        np.testing.assert_array_equal(other.corpus.combination, full.corpus.combination)
        np.testing.assert_array_equal(other.corpus.fuzz_count, full.corpus.fuzz_count)
        assert other.corpus.chains == full.corpus.chains and other.n_findings == full.n_findings
        assert strip(other.stats_rows()) == strip(full.stats_rows())
        assert (tmp_path / folder / "manifest.jsonl").read_text() == (tmp_path / "full" / "manifest.jsonl").read_text()
    if kind == "flaky":
        assert full.mutator_stats["flaky()"].errors > 0


def test_disagreement_oracle_and_its_export(keras_setup, tmp_path):
    import keras

    from idcgen.export import export_campaign
    from idcgen.framework import Network
    from idcgen.fuzz.fuzzer import Fuzzer

    analysis, model, _, x, y = keras_setup
    other = keras.models.clone_model(model)  # a second model: weights perturbed
    rng = np.random.default_rng(0)
    other.set_weights([w + rng.normal(0, 0.2 * (w.std() + 1e-3), w.shape).astype(w.dtype) for w in model.get_weights()])
    other = Network(other)
    fuzzer = Fuzzer(analysis, mutators=CHEAP, oracle="disagreement", others=[other], batch_size=64, random_state=0)
    c = fuzzer.start(x, y, tmp_path / "c", budget=512)
    fuzzer.run(c, progress=False)
    found = c.findings()
    assert c.n_findings > 0
    np.testing.assert_array_equal(other.predict(found["x"]) != found["prediction"], True)  # they disagree
    assert (
        export_campaign(c, oracle=fuzzer.oracle, out=tmp_path / "e1", images=False)["findings"]["surviving_uint8"] >= 0
    )
    summary = export_campaign(c, out=tmp_path / "e2", images=False)  # without the other model: not re-checked
    assert summary["findings"]["surviving_uint8"] is None
    rows = [json.loads(line) for line in (tmp_path / "e2" / "findings.jsonl").read_text().splitlines()]
    assert len(rows) == c.n_findings and all(r["survives_uint8"] is None for r in rows)


def test_findings_of_the_first_format_still_load(setup, tmp_path):
    """Campaigns of the first version saved survives_uint8 with every step's findings."""
    analysis, _, _, x, y = setup
    fuzzer = make_fuzzer(analysis)
    c = fuzzer.start(x, y, tmp_path / "c", budget=1024)
    fuzzer.run(c, progress=False)
    found = c.findings()
    n = len(found["id"])
    assert n == c.n_findings >= 2 and c.step >= 2
    # how many steps the findings fall in depends on the machine's float rounding: lay them out anew
    # over two steps, the first in the old format
    for path in (c.folder / "findings").glob("step-*.npz"):
        path.unlink()
    half = n // 2
    np.savez(
        c.folder / "findings" / "step-000001.npz",
        **{k: v[:half] for k, v in found.items()},
        survives_uint8=np.ones(half, bool),
    )
    np.savez(c.folder / "findings" / f"step-{c.step:06d}.npz", **{k: v[half:] for k, v in found.items()})
    from idcgen.fuzz.campaign import Campaign

    again = Campaign.load(c.folder).findings()
    assert "survives_uint8" not in again and sorted(again) == sorted(found)
    for k in found:
        np.testing.assert_array_equal(again[k], found[k])


def test_failing_mutator_is_reported_and_campaign_goes_on(setup, tmp_path, monkeypatch):
    from idcgen.fuzz.mutators import REGISTRY, Mutator

    monkeypatch.setattr("idcgen.fuzz.mutators.REGISTRY", dict(REGISTRY))  # keep the test class out of the real one

    class Broken(Mutator):
        name, kind = "broken", "attack"

        def params(self):
            return {}

        def mutate(self, x, rng, ctx):
            raise RuntimeError("attack exploded on this batch")

    analysis, _, _, x, y = setup
    fuzzer = make_fuzzer(analysis, mutators=[Broken(), "gauss(std=0.05)"], batch_size=32)
    c = fuzzer.start(x, y, tmp_path / "c", budget=512)
    fuzzer.run(c, progress=False)
    stats = c.mutator_stats[repr(fuzzer.mutators[0])]
    assert c.execs == 512 and stats.errors >= 1 and "attack exploded" in stats.last_error


def test_exports_load_back_and_match_manifest(setup, tmp_path):
    from idcgen.data import load_inputs
    from idcgen.export import export_campaign
    from idcgen.report import write_report

    analysis, _, _, x, y = setup
    fuzzer = make_fuzzer(analysis)
    c = fuzzer.start(x, y, tmp_path / "c", budget=384)
    fuzzer.run(c, progress=False)
    extra_x, extra_y = x[:10], y[:10]
    summary = export_campaign(c, train_x=extra_x, train_y=extra_y)
    grown = np.load(c.folder / "exports" / "grown.npz")
    manifest = [json.loads(line) for line in (c.folder / "manifest.jsonl").read_text().splitlines()]
    assert len(grown["x"]) == len(manifest) == len(c.corpus)
    np.testing.assert_array_equal(grown["combination"], [r["combination"] for r in manifest])
    np.testing.assert_array_equal(grown["y"], [r["label"] for r in manifest])
    assert c.analysis.coverage(grown["x"]).covered == c.tracker.covered
    folder = load_inputs(c.folder / "exports" / "grown")
    assert len(folder) == len(c.corpus) and sorted(set(folder.y.tolist())) == sorted(set(y.tolist()))
    retrain = np.load(c.folder / "exports" / "retrain.npz")
    n_mut = int((c.corpus.parent >= 0).sum())
    assert len(retrain["x_train"]) == 10 + n_mut and summary["retrain"]["mutants"] == n_mut
    np.testing.assert_array_equal(retrain["y_train"][10:], c.corpus.label[c.corpus.parent >= 0])
    # findings re-checked once rounded to uint8, against the oracle computed here by hand
    from idcgen.imageio import quantise

    found = c.findings()
    rows = [json.loads(line) for line in (c.folder / "exports" / "findings.jsonl").read_text().splitlines()]
    assert len(rows) == c.n_findings == len(found["id"]) > 0
    predictions = c.analysis.network.predict(quantise(found["x"], c.value_range))
    expected = (predictions != found["label"]) & (found["root_prediction"] == found["label"])
    assert [r["survives_uint8"] for r in rows] == expected.tolist()
    assert [r["prediction_uint8"] for r in rows] == predictions.tolist()
    assert summary["findings"] == {"total": c.n_findings, "surviving_uint8": int(expected.sum())}
    report = write_report(c, exports=summary)
    text = report.read_text()
    assert "Which mutations raise IDC most" in text and "gauss(std=0.05)" in text
    assert (c.folder / "report.html").read_text().count("data:image/png;base64") >= 2


def test_export_after_a_kill_ignores_the_half_written_log_line(setup, tmp_path):
    from idcgen.export import export_campaign
    from idcgen.fuzz.campaign import Campaign

    analysis, _, _, x, y = setup
    fuzzer = make_fuzzer(analysis)
    c = fuzzer.start(x, y, tmp_path / "c", budget=384)
    fuzzer.run(c, progress=False)
    assert c.n_findings > 0
    with open(c.folder / "findings.jsonl", "a") as f:  # a kill in the middle of an append
        f.write('{"id": 12345, "par')
    loaded = Campaign.load(c.folder, analysis.network)  # read-only: the folder is not repaired
    summary = export_campaign(loaded, images=False)
    rows = (c.folder / "exports" / "findings.jsonl").read_text().splitlines()
    assert len(rows) == summary["findings"]["total"] == c.n_findings


def test_a_failed_write_survives_an_interrupted_wait(setup, tmp_path):
    import time

    analysis, _, _, x, y = setup
    c = make_fuzzer(analysis).start(x, y, tmp_path / "c", budget=64)

    def failing_write():
        time.sleep(0.5)
        raise OSError("disk full (simulated)")

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    c.store._submit(failing_write)
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)  # Ctrl-C while the loop waits for that write
        with pytest.raises(KeyboardInterrupt):
            c.store.flush()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    with pytest.raises(OSError, match="disk full"):  # closing the campaign still reports it
        c.close()


def test_started_campaign_is_on_disk_when_start_returns(setup, tmp_path, monkeypatch):
    import time

    from idcgen.fuzz import store as store_module
    from idcgen.fuzz.campaign import Campaign

    write = store_module.atomic_npz

    def slow(*args, **kw):  # the writer thread writes the seeds' step late
        time.sleep(0.3)
        write(*args, **kw)

    monkeypatch.setattr(store_module, "atomic_npz", slow)
    analysis, _, _, x, y = setup
    c = make_fuzzer(analysis).start(x, y, tmp_path / "c", budget=64)
    again = Campaign.load(c.folder)
    assert again.step == 0 and len(again.corpus) == len(x) and again.tracker.covered == c.tracker.covered


def test_an_interrupted_start_leaves_no_half_made_campaign(setup, tmp_path):
    analysis, _, _, x, y = setup
    fuzzer = make_fuzzer(analysis)
    forward = fuzzer.network.forward

    def interrupted(*args, **kw):
        raise KeyboardInterrupt  # Ctrl-C while the seeds run through the model

    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "new", tmp_path / "empty"):
        fuzzer.network.forward = interrupted
        try:
            with pytest.raises(KeyboardInterrupt):
                fuzzer.start(x, y, out, budget=64)
        finally:
            fuzzer.network.forward = forward
        assert not out.exists() if out.name == "new" else list(out.iterdir()) == []  # an empty folder stays
        assert fuzzer.start(x, y, out, budget=64).step == 0  # and the same --out works at once


def test_bad_input(setup, tmp_path):
    from idcgen.fuzz.campaign import Campaign

    analysis, _, _, x, y = setup
    fuzzer = make_fuzzer(analysis)
    with pytest.raises(ParameterError, match="'budget' parameter must be an int >= 1"):
        fuzzer.start(x, y, tmp_path / "a", budget=0)
    with pytest.raises(ParameterError, match="unknown mutator"):
        make_fuzzer(analysis, mutators=["gauss", "sparkle"])
    with pytest.raises(InputError, match="channel count"):
        fuzzer.start(np.zeros((3, 28, 28, 3), np.float32), None, tmp_path / "b", budget=10)
    c = fuzzer.start(x, y, tmp_path / "c", budget=64)
    with pytest.raises(InputError, match="already holds a campaign"):
        fuzzer.start(x, y, tmp_path / "c", budget=64)
    from idcgen.framework.keras_zoo import lenet1

    with pytest.raises(AnalysisMismatchError, match="run on another model"):
        Campaign.load(c.folder, network=__import__("idcgen.framework", fromlist=["Network"]).Network(lenet1()))
    with pytest.raises(InputError, match="not a campaign folder"):
        Campaign.load(tmp_path)
    for name in ("state-0", "state-1"):  # no whole state file: never committed
        (c.folder / name).write_bytes(b"IDCGSTAT")
    with pytest.raises(InputError, match="no whole state file"):
        Campaign.load(c.folder)
    meta = json.loads((c.folder / "campaign.json").read_text())
    (c.folder / "campaign.json").write_text(json.dumps(dict(meta, format_version=1)))
    with pytest.raises(InputError, match="has folder format 1; this idcgen reads format 2"):
        Campaign.load(c.folder)


def test_an_oracle_that_cannot_judge_a_classifier_is_refused_before_the_campaign_folder(setup, tmp_path):
    # refused at the first step, it left a campaign in --out that the corrected command could not reuse
    analysis, _, _, x, y = setup
    for i, (oracle, error, says) in enumerate(
        [
            ("deviation", InputError, "the deviation oracle compares output values"),
            ("misclassification & ~error(0.3)", InputError, "the error oracle compares output values"),
            ("confusion(3,12)", ParameterError, r"confusion\(3,12\): the model has classes 0..9 only"),
        ]
    ):
        out = tmp_path / f"c{i}"
        with pytest.raises(error, match=says):
            make_fuzzer(analysis, oracle=oracle).start(x, y, out, budget=64)
        assert not out.exists()


def test_directed_mutator_moves_towards_uncovered_combinations(keras_setup, tmp_path):
    from idcgen.fuzz.fuzzer import FuzzContext
    from idcgen.fuzz.mutators.directed import CoverageDirected

    analysis, model, _, x, y = keras_setup
    tracker = analysis.tracker(x)
    ids = analysis.ids(x)
    mut = CoverageDirected(steps=5, eps=0.15)
    ctx = FuzzContext(network=analysis.network, labels=y, analysis=analysis, tracker=tracker, parent_combinations=ids)
    before = x.copy()
    out = mut.mutate(x, np.random.default_rng(0), ctx)
    np.testing.assert_array_equal(x, before)
    assert out.shape == x.shape and out.dtype == np.float32
    assert np.abs(out - x).max() <= 0.15 + 1e-6 and out.min() >= 0 and out.max() <= 1
    np.testing.assert_array_equal(out, mut.mutate(x, np.random.default_rng(0), ctx))
    # the targets it aimed at (same rng state), and how far the important neurons are from them
    targets = mut.targets(ids, analysis.combinations, tracker, np.random.default_rng(0))
    goal = np.stack([analysis.combinations.centroid_vector(t) for t in targets])
    spread = np.array([max(np.ptp(c.centroids), 1e-3) for c in analysis.clusters])
    distance = lambda inputs: np.abs((analysis.activations(inputs) - goal) / spread).mean()
    rng = np.random.default_rng(1)  # as many signed steps of the same size, in random directions
    blind = x.copy()
    for _ in range(mut.steps):
        blind = np.clip(
            np.clip(blind + mut.step_size * rng.choice([-1.0, 1.0], size=x.shape), x - 0.15, x + 0.15), 0, 1
        )
    assert distance(out) < 0.8 * distance(x) and distance(out) < 0.8 * distance(blind.astype(np.float32))


def test_fuzz_command_end_to_end_and_resume(setup, trained_lenet, digits, tmp_path, monkeypatch):
    from idcgen.cli import app

    monkeypatch.chdir(tmp_path)
    _, _, _, x, y = setup
    _, path = trained_lenet
    np.savez(tmp_path / "seeds.npz", x=(x[..., 0] * 255).round().astype(np.uint8), y=y)
    np.savez(tmp_path / "train.npz", x=(digits[0][:800, ..., 0] * 255).round().astype(np.uint8), y=digits[1][:800])
    runner = CliRunner()
    args = [
        "fuzz",
        "--model",
        str(path),
        "--seeds",
        "seeds.npz",
        "--budget",
        "256",
        "--train",
        "train.npz",
        "--m",
        "5",
        "--mutators",
        "gauss(std=0.05),rotate",
        "--batch-size",
        "64",
        "--out",
        "camp",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "IDC" in result.output and "validity bounds (DeepHunter)" in result.output
    for name in (
        "report.md",
        "report.html",
        "stats.jsonl",
        "manifest.jsonl",
        "campaign.json",
        "exports/grown.npz",
        "exports/retrain.npz",
        "idc_vs_execs.png",
    ):
        assert (tmp_path / "camp" / name).exists(), name
    retrain = np.load(tmp_path / "camp" / "exports" / "retrain.npz")
    assert len(retrain["x_train"]) >= 800
    first = (tmp_path / "camp" / "manifest.jsonl").read_text()
    result = runner.invoke(app, ["fuzz", "--resume", "camp", "--budget", "384"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "camp" / "campaign.json").read_text())["state"]["execs"] == 384
    assert (tmp_path / "camp" / "manifest.jsonl").read_text().startswith(first)  # continued, not restarted
    # without --train/--analysis: finds the analysis saved by the first run, and says where it looked
    result = runner.invoke(
        app,
        [
            "fuzz",
            "--model",
            str(path),
            "--seeds",
            "seeds.npz",
            "--budget",
            "64",
            "--m",
            "5",
            "--mutators",
            "gauss",
            "--out",
            "camp2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "the saved analysis of this model in outputs/analyses/" in result.output
    assert f"newest found in outputs/analyses/, {path.parent}/, {path.parent / 'analysis'}/)" in result.output
    result = runner.invoke(app, ["fuzz", "--model", str(path), "--seeds", "seeds.npz", "--budget", "0"])
    assert result.exit_code == 1 and "budget" in result.output
    result = runner.invoke(
        app,
        [
            "fuzz",
            "--model",
            str(path),
            "--seeds",
            "seeds.npz",
            "--budget",
            "64",
            "--m",
            "3",
            "--mutators",
            "gauss",
            "--out",
            "camp3",
        ],
    )
    assert result.exit_code == 0 and "analysis was made on the SEEDS" in result.output


def test_loop_makes_the_recorded_campaign(digits):
    """The loop's decisions, pinned: same corpus, combinations, chains, fuzz counts and findings as recorded.

    Its earlier form compared the redesigned loop with the one before it on a Keras LeNet-1, and could only
    run on the machine that recorded it (elsewhere TensorFlow's float results moved the seeds' own
    combinations, and it skipped). The loop passed it there; this form records that loop's campaign on the
    numpy double (tests/doubles.py: same arithmetic, no framework, closed-form weights) with mutators that
    use the model (relevance) and ones that do not, so that every machine checks that the loop still makes
    the same decisions, and fails where it does not."""
    import hashlib

    from doubles import NumpyNet
    from idcgen.analysis import analyze
    from idcgen.fuzz.fuzzer import Fuzzer

    x_train, y_train, x_test, y_test = digits
    network = NumpyNet.fit(x_train, y_train)
    assert network.fingerprint() == "54e336a6b2a9d5e158959fadc11d7bfa6785bac85100e34880ed8e892a2ed1ee"
    analysis = analyze(network, x_train[:500], y_train[:500], layer="hidden", m=8, progress=False)
    seeds = np.arange(0, len(x_test), 25)[:40]
    fuzzer = Fuzzer(
        analysis,
        mutators=["relevant_pixels", "gauss(std=0.05)", "random_pixels"],
        batch_size=32,
        random_state=5,
        rounding=False,
    )
    c = fuzzer.run(x_test[seeds], y_test[seeds], budget=640, progress=False)
    assert c.corpus.combination[:40].tolist() == [
        9810,
        1130,
        2941,
        5197,
        2705,
        455,
        905,
        0,
        12,
        4502,
        6,
        9045,
        5711,
        5415,
        2525,
        7212,
        912,
        6979,
        498,
        451,
        6978,
        6750,
        5196,
        450,
        902,
        2296,
        4725,
        50,
        240,
        0,
        228,
        465,
        3384,
        0,
        3836,
        6844,
        1363,
        13,
        229,
        699,
    ]
    digest = hashlib.sha256()
    for a in (c.corpus.combination, c.corpus.parent, c.corpus.fuzz_count):
        digest.update(np.ascontiguousarray(a, np.int64).tobytes())
    digest.update(json.dumps(c.corpus.chains).encode())
    found = c.findings()
    for k in ("combination", "prediction", "parent"):
        digest.update(np.ascontiguousarray(found[k], np.int64).tobytes())
    assert (len(c.corpus), c.n_findings, c.tracker.covered) == (126, 9, 124)
    assert digest.hexdigest() == "ea6942f6a6a13d8cb9c958093baca9eb73fd6ee48405e911a330bc4ff6058606"


def test_campaign_in_memory_saves_and_loads_back(setup, tmp_path):
    from idcgen.fuzz.campaign import Campaign

    analysis, _, _, x, y = setup
    memory = make_fuzzer(analysis).run(x, y, budget=320, progress=False)
    assert memory.folder is None and memory.execs == 320 and len(memory.stats_rows()) == memory.step + 1
    with pytest.raises(ParameterError, match="in memory only"):
        __import__("idcgen.export", fromlist=["export_campaign"]).export_campaign(memory)
    memory.save(tmp_path / "saved")
    memory.close()
    loaded = Campaign.load(tmp_path / "saved", analysis.network)
    np.testing.assert_array_equal(loaded.corpus.x, memory.corpus.x)
    np.testing.assert_array_equal(loaded.corpus.fuzz_count, memory.corpus.fuzz_count)
    assert loaded.corpus.chains == memory.corpus.chains and loaded.stats_rows() == memory.stats_rows()
    assert loaded.rng.bit_generator.state == memory.rng.bit_generator.state
    for k, v in memory.findings().items():
        np.testing.assert_array_equal(loaded.findings()[k], v)
    # the saved campaign goes on exactly as the one kept in memory
    make_fuzzer(analysis).run(memory, budget=640, progress=False)
    resumed = make_fuzzer(analysis).resume(tmp_path / "saved")
    make_fuzzer(analysis).run(resumed, budget=640, progress=False)
    np.testing.assert_array_equal(resumed.corpus.x, memory.corpus.x)
    assert resumed.n_findings == memory.n_findings and resumed.step == memory.step
    with pytest.raises(ParameterError, match="below the 640 execs"):
        make_fuzzer(analysis).run(memory, budget=100, progress=False)


def test_each_phase_of_a_step_is_timed_where_it_runs_and_saved(setup, tmp_path, monkeypatch):
    import time

    from idcgen.fuzz.campaign import PHASES, Campaign, phase_seconds
    from idcgen.report import phase_line, write_report

    analysis, network, _, x, y = setup
    fuzzer = make_fuzzer(analysis, mutators=["gauss(std=0.05)"], batch_size=32)
    c = fuzzer.start(x, y, tmp_path / "c", budget=128)
    forward = network.forward

    def slow_forward(*args, **kw):  # a slow model: its time is the model's phase, not the mutation's
        time.sleep(0.05)
        return forward(*args, **kw)

    monkeypatch.setattr(network, "forward", slow_forward)
    before = c.elapsed
    fuzzer.run(c, progress=False)
    spent = c.phase_seconds
    assert c.step == 4 and list(spent) == list(PHASES)
    assert spent["model"] >= 4 * 0.05 and spent["mutate"] < spent["model"] / 2 and spent["record"] > 0
    assert sum(spent.values()) == pytest.approx(c.elapsed - before, abs=1e-3)  # the steps' time, all of it
    [line] = phase_line(c.state())
    saved = phase_seconds(c.state())  # to the millisecond
    assert f"model {saved['model'] / sum(saved.values()):.0%}" in line and line.startswith("- the steps' time:")
    c.close()
    loaded = Campaign.load(tmp_path / "c", network)
    # saved with each step; the last step's recording is timed after its commit, as the elapsed time is
    assert {k: v for k, v in loaded.phase_seconds.items() if k != "record"} == pytest.approx(
        {k: v for k, v in spent.items() if k != "record"}, abs=1e-3
    )
    assert 0 < loaded.phase_seconds["record"] <= spent["record"] + 1e-3
    assert phase_line(loaded.state())[0] in write_report(loaded).read_text()
    old = {k: v for k, v in c.state().items() if k != "phase_seconds"}  # a campaign of an earlier idcgen
    assert phase_seconds(old) == dict.fromkeys(PHASES, 0.0) and phase_line(old) == []


def test_a_second_writer_is_refused_and_a_reader_is_not(setup, tmp_path):
    from idcgen.fuzz.campaign import Campaign
    from idcgen.fuzz.store import CampaignLocked

    analysis, _, _, x, y = setup
    first = make_fuzzer(analysis).start(x, y, tmp_path / "c", budget=128)  # holds the lock until it runs and ends
    # the commands it names exist (it named `report` and `export`, which do not)
    with pytest.raises(
        CampaignLocked,
        match=f"being written by process {os.getpid()}; wait for it to finish "
        r"\(reading it, as `idcgen harden --campaign` does, needs no wait\)",
    ):
        make_fuzzer(analysis).resume(tmp_path / "c")
    assert Campaign.load(tmp_path / "c").step == 0  # reading needs no lock
    make_fuzzer(analysis).run(first, progress=False)
    again = make_fuzzer(analysis).resume(tmp_path / "c")  # released when the run ended
    again.close()


@pytest.mark.parametrize("guide", ["nc", "kmnc", "none"])
def test_guidance_by_another_criterion(guide, setup, tmp_path):
    """The guiding criterion decides what joins the corpus: each kept mutant covers something of it the
    corpus did not before (none: every valid mutant joins); IDC and the other criterion are measured
    whatever guides, as the coverage of the grown set."""
    from idcgen.criteria import make_criterion

    analysis, _, _, x, y = setup
    network = analysis.network
    crits = {name: make_criterion(name).fit(network, x) for name in ("nc", "kmnc")}
    fuzzer = make_fuzzer(analysis, guide=guide, measure=list(crits.values()))
    c = fuzzer.run(x, y, budget=384, progress=False)
    assert list(c.coverage) == ["idc", "nc", "kmnc"] and c.settings.guide == guide
    kept = c.corpus.parent >= 0
    # replay the corpus in order: coverage of the grown set, and (guided) every mutant adds something new
    trackers = {"idc": analysis.tracker(), **{n: cr.tracker() for n, cr in crits.items()}}
    features = {"idc": analysis.ids(c.corpus.x), **{n: cr.features(network, c.corpus.x) for n, cr in crits.items()}}
    seeds = ~kept
    for name, tracker in trackers.items():
        tracker.update(features[name][seeds])
    for i in np.flatnonzero(kept):
        new = {name: bool(t.update(features[name][i : i + 1])[0]) for name, t in trackers.items()}
        if guide != "none":
            assert new[guide], f"mutant {i} joined without new {guide} coverage"
    for name, tracker in trackers.items():
        if name == "kmnc":
            # BLAS sums a batch of 64 mutants and the whole corpus in other orders (seen on AVX-512 OpenBLAS), so
            # the last bit of an activation can differ and move it across one of KMNC's 48,000 section edges:
            # the replay may differ by a few sections (3-8 seen), never by more than 0.05 %
            assert abs(tracker.covered - c.coverage[name].covered) <= 0.0005 * tracker.total, name
        else:
            assert tracker.covered == c.coverage[name].covered, name
    if guide == "none":  # every valid mutant was kept
        assert kept.sum() == sum(s.valid for s in c.mutator_stats.values())


def test_rounding_makes_every_finding_reproduce(setup, tmp_path):
    from idcgen.export import export_campaign
    from idcgen.imageio import to_uint8

    analysis, _, _, x, y = setup
    c = make_fuzzer(analysis, mutators=["gauss(std=0.1)", "fgsm(eps=0.15)", "rotate"]).start(
        x, y, tmp_path / "c", budget=640
    )
    assert c.settings.rounding and c.settings.storage == "uint8"
    make_fuzzer(analysis, mutators=["gauss(std=0.1)", "fgsm(eps=0.15)", "rotate"]).run(c, progress=False)
    found = c.findings()
    assert c.n_findings > 0
    np.testing.assert_array_equal(to_uint8(found["x"], c.value_range) / np.float32(255), found["x"])
    summary = export_campaign(c, images=False)
    assert summary["findings"]["surviving_uint8"] == c.n_findings
    assert {"l0", "l2", "linf", "ssim"} <= set(found) and (found["ssim"] <= 1).all() and (found["l0"] > 0).all()
    text = __import__("idcgen.report", fromlist=["write_report"]).write_report(c, exports=summary).read_text()
    assert f"{c.n_findings} of {c.n_findings} findings reproduce from their uint8 PNG (100%)" in text
    assert "## Failures" in text and "SSIM" in text


def test_resume_refuses_a_campaign_whose_analysis_was_edited(setup, tmp_path):
    from idcgen.fuzz.campaign import Campaign

    analysis, _, _, x, y = setup
    fuzzer = make_fuzzer(analysis)
    fuzzer.run(fuzzer.start(x, y, tmp_path / "c", budget=128), progress=False)
    meta_path = tmp_path / "c" / "analysis" / "analysis.json"
    meta = json.loads(meta_path.read_text())
    meta["clusters"][1]["centroids"][-1] += 1.0  # still sorted
    meta_path.write_text(json.dumps(meta, indent=2))
    with pytest.raises(InputError, match="edited or damaged since it was saved"):
        make_fuzzer(analysis).resume(tmp_path / "c")
    with pytest.raises(InputError, match="edited or damaged since it was saved"):
        Campaign.load(tmp_path / "c")


def test_sigterm_during_a_run_stops_it_as_ctrl_c_does(setup, tmp_path):
    """SIGTERM (a scheduler's stop, `kill`) ended the process with nothing printed; now the step being
    recorded is finished and the run stops as on Ctrl-C, resumable."""
    analysis, _, _, x, y = setup
    fuzzer = make_fuzzer(analysis)
    c = fuzzer.start(x, y, tmp_path / "c", budget=600)
    record = c.record
    before = signal.getsignal(signal.SIGTERM)  # the default, or what another library of this process set (Ray)

    def record_and_terminate(*args, **kw):
        if c.step == 2:
            # checked first: before the fix SIGTERM's default action would end pytest itself
            assert signal.getsignal(signal.SIGTERM) not in (before, signal.SIG_DFL, None), "SIGTERM not handled"
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
        return record(*args, **kw)

    c.record = record_and_terminate
    with pytest.raises(KeyboardInterrupt):
        fuzzer.run(c, progress=False)
    assert c.step == 3 and signal.getsignal(signal.SIGTERM) == before  # the handler given back
    c.close()
    resumed = make_fuzzer(analysis).resume(tmp_path / "c")
    assert resumed.step == 3
    resumed.close()


def test_a_torn_newest_state_of_an_interrupted_campaign_is_said(setup, tmp_path):
    """The newest state file cut short while campaign.json still shows the start (an interrupted run): the
    campaign fell back to the commit before without a note."""
    from idcgen.fuzz.statefile import STATE_FILES, read_state
    from idcgen.fuzz.store import CampaignStore

    analysis, _, _, x, y = setup
    fuzzer = make_fuzzer(analysis)
    fuzzer.run(fuzzer.start(x, y, tmp_path / "c", budget=192), progress=False)
    commit, _ = read_state(tmp_path / "c")
    newest = tmp_path / "c" / STATE_FILES[commit % 2]
    newest.write_bytes(newest.read_bytes()[:-9])
    meta = json.loads((tmp_path / "c" / "campaign.json").read_text())
    meta["state"]["step"] = 0  # as an interrupted run leaves it
    (tmp_path / "c" / "campaign.json").write_text(json.dumps(meta))
    notes = CampaignStore.read(tmp_path / "c").notes
    assert any(
        n.startswith(f"{newest.name} is torn (cut short while it was written") and "the commit before" in n
        for n in notes
    ), notes


def test_resume_of_a_one_process_campaign_with_workers_is_refused_before_loading(setup, tmp_path):
    from idcgen.cli import app

    analysis, _, _, x, y = setup
    fuzzer = make_fuzzer(analysis)
    fuzzer.run(fuzzer.start(x, y, tmp_path / "c", budget=64), progress=False)
    runner = CliRunner()
    result = runner.invoke(app, ["fuzz", "--resume", str(tmp_path / "c"), "--workers", "2"])
    assert result.exit_code == 1
    assert result.output.strip() == f"error: {tmp_path / 'c'} is a campaign of one process: resume it without --workers"
    result = runner.invoke(app, ["fuzz", "--resume", str(tmp_path / "nope"), "--workers", "2"])
    assert result.exit_code == 1
    assert result.output.strip() == f"error: not a campaign folder (no campaign.json): {tmp_path / 'nope'}"


def test_uncertain_reads_probabilities_of_a_model_ending_in_logits(trained_lenet, digits):
    # without a softmax at the model's end the oracle compared logits (5 to 15) with its threshold: no finding
    import keras

    from idcgen.analysis import analyze
    from idcgen.fuzz.fuzzer import Fuzzer

    model, _ = trained_lenet
    x_train, y_train, x_test, y_test = digits
    logits = keras.Model(model.inputs, model.get_layer("before_softmax").output)
    found = []
    for m in (model, logits):
        analysis = analyze(m, x_train[:300], y_train[:300], layer="block2_conv1", m=4, progress=False)
        fuzzer = Fuzzer(analysis, mutators=["gauss(std=0.05)"], oracle="uncertain(0.99)", batch_size=64, random_state=0)
        found.append(fuzzer.run(x_test[:40], y_test[:40], budget=128, progress=False).n_findings)
    assert found[0] > 0 and found[1] == found[0]


def test_max_mutations_is_read_from_the_settings_the_fuzzer_was_built_from(setup, tmp_path):
    """A setting the Fuzzer takes no keyword for (max_mutations) travels in the settings it is built from: the
    loop stops picking an entry once it was a parent that often, ends when none is left, and a fuzzer without
    the cap cannot continue the campaign."""
    from idcgen.fuzz.fuzzer import Fuzzer

    analysis, _, _, x, y = setup
    plain = make_fuzzer(analysis, ["gauss(std=0.05)", "rotate"], batch_size=8, guide="keep-none")
    fuzzer = Fuzzer.from_settings(analysis, plain.settings(5000).replace(max_mutations=2))
    assert fuzzer.record.max_mutations == 2 and plain.record is None
    c = fuzzer.run(x, y, out=tmp_path / "c", progress=False)
    counts = c.corpus.fuzz_count
    assert len(counts) == len(x) and (counts >= 2).all() and counts.max() <= 1 + 8  # picked while below 2
    assert c.execs == counts.sum() < 5000 and c.settings.max_mutations == 2
    assert (
        c.notes[-1]
        == f"every corpus entry was a parent 2 times (max_mutations): the campaign ended after {c.execs} of its 5000 execs"
    )
    saved = json.loads((tmp_path / "c" / "campaign.json").read_text())["config"]
    assert saved["max_mutations"] == 2
    with pytest.raises(ParameterError, match=r"was made with other settings \(max_mutations 2\)"):
        plain.resume(tmp_path / "c")
    again = Fuzzer.from_settings(analysis, plain.settings(6000).replace(max_mutations=2)).resume(tmp_path / "c")
    assert again.execs == c.execs
    again.close()
