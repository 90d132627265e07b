"""Scale-out on Ray (idcgen.distributed): the same analysis, coverage and campaigns as in one process.

One local Ray (2 CPUs) is started for the module; the module is skipped where Ray is not installed
(the `ray` extra), except for the test of the one-line message that says to install it.
"""

import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from idcgen.analysis import RelevanceSettings

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

#: centroids and importance agree to this relative tolerance: Ray workers add the same per-batch sums in the
#: same order, but run TensorFlow with one intra-op thread, which may round a convolution differently
RTOL = 1e-5


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    yield
    ray.shutdown()


def assert_same_analysis(a, b, same_data_fingerprint=True):
    np.testing.assert_array_equal(a.neurons, b.neurons)
    np.testing.assert_allclose(a.importance, b.importance, rtol=RTOL, atol=1e-9)
    assert [c.k for c in a.clusters] == [c.k for c in b.clusters]
    for c, d in zip(a.clusters, b.clusters):
        np.testing.assert_allclose(c.centroids, d.centroids, rtol=RTOL, atol=1e-7)
    assert a.total == b.total and a.fingerprint == b.fingerprint
    keys = ("n_inputs", "n_used", "accuracy") + (("fingerprint",) if same_data_fingerprint else ())
    assert {k: a.data[k] for k in keys} == {k: b.data[k] for k in keys}


def test_shards_are_whole_batches():
    from idcgen.distributed.workers import shard_bounds

    # 1,000 inputs in batches of 64: 16 batches, 2 workers x 4 shards -> 2 batches (128 inputs) a shard
    assert shard_bounds(1000, 64, 2) == [(s, min(s + 128, 1000)) for s in range(0, 1000, 128)]
    assert shard_bounds(10, 64, 2) == [(0, 10)]
    assert shard_bounds(0, 64, 2) == []
    assert all(start % 512 == 0 for start, _ in shard_bounds(60000, 512, 3))


class TestOnTwoWorkers:
    """One pool of two actors (both CPUs of the local Ray) for the analysis and coverage tests."""

    @pytest.fixture(scope="class")
    def pool(self, trained_lenet):
        from idcgen.distributed import Workers

        _, path = trained_lenet
        with Workers(path, workers=2) as workers:
            assert len(set(workers.pids)) == 2 and os.getpid() not in workers.pids  # two other processes
            yield workers

    @pytest.mark.parametrize(
        "options", [dict(m=6), dict(m=4, relevance=RelevanceSettings(of="label", correct_only=True))]
    )
    def test_analysis_equals_the_single_process_one(self, pool, trained_lenet, digits, options):
        import idcgen

        model, _ = trained_lenet
        x, y = digits[0][:2500], digits[1][:2500]
        single = idcgen.analyze(model, x, y, progress=False, **options)
        sharded = pool.analyze(x, y, progress=False, **options)
        assert_same_analysis(single, sharded)
        assert len(pool.passes(pool.network, single.layer, 1e-7, x).shards) > 2  # really split

    def test_two_pass_gather_equals_the_single_process_one(self, pool, trained_lenet, digits, monkeypatch):
        # activations too wide to keep during the relevance pass: the workers gather the m columns afterwards
        import idcgen
        import idcgen.analysis.passes as analysis_module

        monkeypatch.setattr(analysis_module, "ACTIVATIONS_IN_ONE_PASS", 0)
        model, _ = trained_lenet
        x, y = digits[0][:1500], digits[1][:1500]
        single = idcgen.analyze(model, x, y, m=5, relevance=RelevanceSettings(correct_only=True), progress=False)
        assert_same_analysis(
            single, pool.analyze(x, y, m=5, relevance=RelevanceSettings(correct_only=True), progress=False)
        )

    def test_coverage_equals_the_single_process_one(self, pool, trained_lenet, digits):
        import idcgen

        model, _ = trained_lenet
        analysis = idcgen.analyze(model, digits[0][:2000], digits[1][:2000], m=6, progress=False)
        x = np.concatenate([digits[2], digits[0][2000:2037]])  # 1,037 inputs: a short last shard
        single = analysis.tracker(x)
        sharded = pool.tracker(analysis, x)
        np.testing.assert_array_equal(single.covered_ids(), sharded.covered_ids())
        assert 0 < sharded.covered < analysis.total
        assert pool.coverage(analysis, x[:10]) == analysis.coverage(x[:10])
        assert pool.coverage(analysis, list(x[:10])) == analysis.coverage(x[:10])  # a list of images, not paths

    def test_coverage_of_shard_files_the_workers_read(self, pool, trained_lenet, digits, tmp_path):
        import idcgen

        model, _ = trained_lenet
        analysis = idcgen.analyze(model, digits[0][:2000], digits[1][:2000], m=6, progress=False)
        x = digits[2]
        files = []
        for i, part in enumerate(np.array_split(np.arange(len(x)), 3)):
            files.append(tmp_path / f"part-{i}.npz")
            np.savez(files[-1], x=x[part], y=digits[3][part])
        with pool.shards(files) as held:  # a list of paths
            tracker = pool.tracker(analysis, held)
            assert len(held) == len(x) and len(held.sources) == 3
        np.testing.assert_array_equal(tracker.covered_ids(), analysis.tracker(x).covered_ids())

    # ---- shards the workers read and hold themselves (idcgen.distributed.shards) -------------------
    @pytest.mark.parametrize(
        "options",
        [
            dict(m=6),
            dict(m=4, relevance=RelevanceSettings(of="label", correct_only=True)),
            dict(m=4, relevance=RelevanceSettings(only_class=3)),
        ],
    )
    def test_analysis_of_shard_files_equals_the_in_memory_one(self, pool, trained_lenet, digits, tmp_path, options):
        import idcgen

        model, _ = trained_lenet
        x, y = digits[0][:2300], digits[1][:2300]
        # 3 shards of 767, 767 and 766 inputs: batches start at each shard's start, not at multiples of 512
        for i, part in enumerate(np.array_split(np.arange(len(x)), 3)):
            np.savez(tmp_path / f"train-{i}.npz", x=x[part], y=y[part])
        single = idcgen.analyze(model, x, y, progress=False, **options)
        with pool.shards(str(tmp_path / "train-*.npz")) as held:
            sharded = pool.analyze(held, progress=False, **options)
            assert_same_analysis(single, sharded, same_data_fingerprint=False)
            assert sharded.data["observed_range"] == single.data["observed_range"]
            if "relevance" in options and options["relevance"].only_class is not None:
                # reused after only_class: every input again, not class 3's
                again = pool.analyze(held, m=4, progress=False)
                assert again.data["n_inputs"] == len(x) and again.data["fingerprint"] == sharded.data["fingerprint"]

    def test_analysis_of_npy_shards_without_labels(self, pool, trained_lenet, digits, tmp_path):
        import idcgen
        from idcgen.errors import InputError

        model, _ = trained_lenet
        x = digits[0][:1300]
        for i, part in enumerate(np.array_split(np.arange(len(x)), 2)):
            np.save(tmp_path / f"train-{i}.npy", x[part])
        single = idcgen.analyze(model, x, m=4, progress=False)
        assert_same_analysis(
            single, pool.analyze(str(tmp_path / "train-*.npy"), m=4, progress=False), same_data_fingerprint=False
        )
        with pytest.raises(InputError, match="labels are needed"):
            pool.analyze(
                str(tmp_path / "train-*.npy"), m=4, relevance=RelevanceSettings(correct_only=True), progress=False
            )
        np.savez(tmp_path / "train-2.npz", x=x[:10], y=digits[1][:10])  # labelled beside unlabelled: refused
        with pytest.raises(InputError, match=r"^shard .*train-0\.npy has no labels but shard .*train-2\.npz has"):
            pool.analyze(str(tmp_path / "train-*"), m=4, progress=False)

    def test_coverage_and_analysis_of_a_ray_dataset(self, pool, trained_lenet, digits):
        import idcgen

        model, _ = trained_lenet
        x, y = digits[0][:1800], digits[1][:1800]
        labelled = ray.data.from_items(
            [{"image": x[i], "label": int(y[i])} for i in range(len(x))], override_num_blocks=3
        )
        single = idcgen.analyze(model, x, y, m=5, relevance=RelevanceSettings(correct_only=True), progress=False)
        sharded = pool.analyze(
            labelled,
            m=5,
            relevance=RelevanceSettings(correct_only=True),
            x_column="image",
            y_column="label",
            progress=False,
        )
        assert_same_analysis(single, sharded, same_data_fingerprint=False)
        test = digits[2]
        # one column, 4 blocks, no labels (from_items: a computed dataset, whose blocks need no CPU the pool holds)
        blocks = ray.data.from_items([{"data": row} for row in test], override_num_blocks=4)
        np.testing.assert_array_equal(pool.tracker(single, blocks).covered_ids(), single.tracker(test).covered_ids())

    # ---- inspect and affinity with the forward passes on the workers ---------------------------------
    @pytest.mark.parametrize(
        "options",
        [
            dict(scaling="neuron"),
            dict(scaling="layer", memory_budget=0),
            dict(scaling="input"),
            dict(scaling="neuron", memory_budget="third", batch_size=64),
        ],
    )
    def test_inspect_equals_the_single_process_one(self, pool, trained_lenet, digits, options):
        import idcgen

        model, _ = trained_lenet
        x, y = digits[2][:900], digits[3][:900]
        single = idcgen.inspect(model, x, y, **{k: v for k, v in options.items() if v != "third"})
        if options.get("memory_budget") == "third":  # a third of the activations' bytes: each shard fits,
            options = dict(options, memory_budget=len(x) * single.napv.shape[0] * 4 // 3)  # a worker's do not
            from idcgen.distributed.cluster import shard_bounds

            assert len(shard_bounds(len(x), 64, len(pool.actors))) > 2 * len(pool.actors)  # shards < a third
        sharded = pool.inspect(x, y, **options)
        assert sharded.passes == (1 if options.get("memory_budget") is None or options["scaling"] == "input" else 2)
        for name in ("predictions", "runner_up", "per_class", "napv"):
            np.testing.assert_array_equal(getattr(sharded, name), getattr(single, name), err_msg=name)
        np.testing.assert_allclose(sharded.runner_up_probability, single.runner_up_probability, rtol=RTOL)
        assert sharded.metrics == single.metrics

    def test_inspect_of_shard_files(self, pool, trained_lenet, digits, tmp_path):
        import idcgen

        model, _ = trained_lenet
        x, y = digits[2][:900], digits[3][:900]
        for i, part in enumerate(np.array_split(np.arange(len(x)), 3)):
            np.savez(tmp_path / f"test-{i}.npz", x=x[part], y=y[part])
        single, sharded = idcgen.inspect(model, x, y), pool.inspect(str(tmp_path / "test-*.npz"))
        np.testing.assert_array_equal(sharded.napv, single.napv)
        np.testing.assert_array_equal(sharded.labels, single.labels)  # the shards' own labels, in order
        assert sharded.metrics == single.metrics

    def test_affinity_equals_the_single_process_one(self, pool, trained_lenet, digits):
        import idcgen

        model, _ = trained_lenet
        x, y = digits[2][:400], digits[3][:400]
        options = dict(measures="pearson,linear", tol=0, progress=False)
        single, sharded = idcgen.affinity(model, x, y, **options), pool.affinity(x, y, **options)
        assert sharded.units == single.units and sharded.n_seen == single.n_seen == len(x)
        for m in ("pearson", "linear"):
            np.testing.assert_allclose(sharded.scores[m], single.scores[m], rtol=1e-4, atol=1e-6, err_msg=m)
        assert np.isfinite(single.scores["pearson"]).any()

    def test_coverage_of_image_folder_shards(self, pool, trained_lenet, digits, tmp_path):
        # two folder trees (class subfolders of PNGs named by words) as two shards, class 0 missing from the
        # second: every shard labels d<k> as k (the union of the shards' folders), in the shards' file order
        from PIL import Image

        import idcgen

        model, _ = trained_lenet
        pick = np.random.default_rng(0).permutation(len(digits[3]))[:160]  # the test set is sorted by class
        x, y = digits[2][pick], digits[3][pick]
        kept = [i for i in range(len(x)) if i < 80 or y[i] != 0]
        for i in kept:
            folder = tmp_path / f"part-{i // 80}" / f"d{int(y[i])}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.rint(x[i][..., 0] * 255).astype(np.uint8)).save(folder / f"{i:03d}.png")
        order = sorted(kept, key=lambda i: (i // 80, int(y[i]), i))  # shard, then class folder, then file name
        analysis = idcgen.analyze(model, digits[0][:1000], digits[1][:1000], m=4, progress=False)
        with pool.shards(str(tmp_path / "part-*")) as held:
            tracker = pool.tracker(analysis, held)
            assert len(held) == len(order) and len(held.sources) == 2
            np.testing.assert_array_equal(held.y, y[order])  # labels from the subfolders' names, in order
            assert held.class_names == tuple(f"d{k}" for k in range(10))
        np.testing.assert_array_equal(tracker.covered_ids(), analysis.tracker(x[order]).covered_ids())

    def test_shard_inputs_refused_in_one_line(self, pool, digits, tmp_path):
        from idcgen.errors import InputError

        with pytest.raises(InputError, match=r"^no file or folder matches .*nothing-\*\.npz"):
            pool.analyze(str(tmp_path / "nothing-*.npz"), progress=False)
        np.savez(tmp_path / "a.npz", x=digits[0][:100], y=digits[1][:100])
        np.savez(tmp_path / "b.npz", x=np.zeros((50, 32, 32, 1), np.float32), y=digits[1][:50])
        with pytest.raises(InputError) as caught:
            pool.analyze(str(tmp_path / "*.npz"), progress=False)
        line = str(caught.value)
        assert "\n" not in line and line.startswith(f"shard {tmp_path / 'b.npz'}: ") and "(32, 32, 1)" in line
        assert all(not held for held in ray.get([a.held_count.remote() for a in pool.actors]))


def test_python_entries_on_one_worker(trained_lenet, digits):
    import idcgen
    import idcgen.distributed as dist

    model, path = trained_lenet
    x, y = digits[0][:1200], digits[1][:1200]
    sharded = dist.analyze(path, x, y, m=4, workers=1, progress=False)
    assert_same_analysis(idcgen.analyze(model, x, y, m=4, progress=False), sharded)
    assert sharded.network is not None and sharded.coverage(digits[2]).covered > 0  # bound to the driver's model
    assert ray.is_initialized()  # a Ray the caller started is left running
    # a lazy Ray dataset whose first block finishes last: materialized in the dataset's order (the fingerprint,
    # a digest of the blocks' digests in order, is that of the same blocks computed in order)
    rows = [{"image": x[i], "label": int(y[i]), "i": i} for i in range(400)]

    def first_block_last(batch):
        time.sleep(3 if 0 in batch["i"] else 0)
        return batch

    in_order = ray.data.from_items(rows, override_num_blocks=4)
    lazy = in_order.map_batches(first_block_last, batch_size=None)
    options = dict(x_column="image", y_column="label", m=2, workers=1, progress=False)
    assert (
        dist.analyze(path, lazy, **options).data["fingerprint"]
        == dist.analyze(path, in_order, **options).data["fingerprint"]
    )
    assert lazy.context.execution_options.preserve_order is False  # the dataset's own setting put back


def test_cli_analysis_of_shard_files(trained_lenet, digits, tmp_path):
    # `idcgen analyze --train 'PATTERN' --workers 2`, in this process (its Ray), equals the in-memory analysis
    import json

    from typer.testing import CliRunner

    import idcgen
    from idcgen.cli import app

    model, path = trained_lenet
    x, y = digits[0][:1500], digits[1][:1500]
    for i, part in enumerate(np.array_split(np.arange(len(x)), 2)):
        np.savez(tmp_path / f"train-{i}.npz", x=x[part], y=y[part])
    done = CliRunner().invoke(
        app,
        [
            "analyze",
            "--model",
            str(path),
            "--train",
            str(tmp_path / "train-*.npz"),
            "--workers",
            "2",
            "--m",
            "4",
            "--out",
            str(tmp_path / "a"),
        ],
    )
    assert done.exit_code == 0, done.output
    assert "2 shards" in done.output
    assert_same_analysis(
        idcgen.analyze(model, x, y, m=4, progress=False),
        idcgen.Analysis.load(tmp_path / "a"),
        same_data_fingerprint=False,
    )
    done = CliRunner().invoke(
        app,
        [
            "analyze",
            "--model",
            str(path),
            "--train",
            str(tmp_path / "none-*.npz"),
            "--workers",
            "1",
            "--out",
            str(tmp_path / "b"),
        ],
    )
    assert done.exit_code == 1 and "error: no file or folder matches" in done.output
    # coverage of the same shard files on the workers: the in-memory IDC
    done = CliRunner().invoke(
        app,
        [
            "coverage",
            "--analysis",
            str(tmp_path / "a"),
            "--model",
            str(path),
            "--json",
            "--inputs",
            str(tmp_path / "train-*.npz"),
            "--workers",
            "1",
        ],
    )
    assert done.exit_code == 0, done.output
    found = json.loads(done.stdout.strip().splitlines()[-1])
    expected = idcgen.Analysis.load(tmp_path / "a").bind(model).coverage(x)
    assert (found["covered"], found["inputs"], found["shards"]) == (expected.covered, len(x), 2)
    for name, extra in (("coverage", ["--analysis", str(tmp_path / "a")]), ("inspect", []), ("analyze", [])):
        done = CliRunner().invoke(
            app,
            [
                name,
                "--model",
                str(path),
                "--train" if name == "analyze" else "--inputs",
                str(tmp_path / "none-*.npz"),
                "--workers",
                "1",
                *extra,
            ],
        )
        assert done.exit_code == 1 and "error: no file or folder matches" in done.output, name
        done = CliRunner().invoke(
            app,
            [
                name,
                "--model",
                str(path),
                "--train" if name == "analyze" else "--inputs",
                str(tmp_path / "train-*.npz"),
                "--workers",
                "1",
                "--limit",
                "5",
                *extra,
            ],
        )
        assert done.exit_code == 1 and "error: --limit is for one input set" in done.output, name
    # a shard refused once the workers started: the command fails in one line and frees its workers' CPUs
    np.savez(tmp_path / "train-2.npz", x=np.zeros((5, 32, 32, 1), np.float32), y=y[:5])
    for name in ("analyze", "inspect"):
        where = ["--train" if name == "analyze" else "--inputs", str(tmp_path / "train-*.npz")]
        done = CliRunner().invoke(
            app, [name, "--model", str(path), *where, "--workers", "1", "--out", str(tmp_path / "c" / name)]
        )
        assert done.exit_code == 1 and "error: shard" in done.output, done.output
        for _ in range(100):  # ray.kill is asynchronous
            if ray.available_resources().get("CPU", 0) == 2:
                break
            time.sleep(0.1)
        assert ray.available_resources().get("CPU", 0) == 2, name


def test_cli_inspect_and_affinity_on_workers(trained_lenet, digits, tmp_path):
    # --workers maps the forward passes on Ray workers: the same JSON as in one process (timings aside)
    import json

    from typer.testing import CliRunner

    from idcgen.cli import app

    _, path = trained_lenet
    np.savez(tmp_path / "test.npz", x=digits[2][:600], y=digits[3][:600])
    common = ["--model", str(path), "--inputs", str(tmp_path / "test.npz"), "--json"]
    runs = {}
    for name, extra in (("inspect", []), ("affinity", ["--measures", "pearson,linear", "--tol", "0"])):
        for where, ray_args in (("here", []), ("ray", ["--workers", "1"])):
            done = CliRunner().invoke(app, [name] + common + extra + ray_args + ["--out", str(tmp_path / name / where)])
            assert done.exit_code == 0, done.output
            runs[name, where] = json.loads(done.stdout.strip().splitlines()[-1])
    for i, part in enumerate(np.array_split(np.arange(600), 2)):  # the same inputs as two shard files
        np.savez(tmp_path / f"part-{i}.npz", x=digits[2][part], y=digits[3][part])
    done = CliRunner().invoke(
        app,
        [
            "inspect",
            "--model",
            str(path),
            "--inputs",
            str(tmp_path / "part-*.npz"),
            "--json",
            "--workers",
            "1",
            "--out",
            str(tmp_path / "inspect" / "shards"),
        ],
    )
    assert done.exit_code == 0, done.output
    runs["inspect", "shards"] = json.loads(done.stdout.strip().splitlines()[-1])
    from PIL import Image  # folder shards with word-named classes (d0..d9, d0 missing from one): named pairs

    for n, i in enumerate(np.random.default_rng(0).permutation(len(digits[3]))[:200]):  # sorted by class
        if n >= 100 and digits[3][i] == 0:
            continue
        folder = tmp_path / "folders" / f"part-{n // 100}" / f"d{int(digits[3][i])}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.rint(digits[2][i][..., 0] * 255).astype(np.uint8)).save(folder / f"{n:03d}.png")
    done = CliRunner().invoke(
        app,
        [
            "inspect",
            "--model",
            str(path),
            "--inputs",
            str(tmp_path / "folders" / "part-*"),
            "--json",
            "--workers",
            "1",
            "--out",
            str(tmp_path / "inspect" / "folders"),
        ],
    )
    assert done.exit_code == 0, done.output
    named = json.loads(done.stdout.strip().splitlines()[-1])["pairs"]
    assert named and all((p["a_name"], p["b_name"]) == (f"d{p['a']}", f"d{p['b']}") for p in named)
    here = runs["inspect", "here"]
    for there in (runs["inspect", "ray"], runs["inspect", "shards"]):
        for key in ("pairs", "metrics", "predicted_per_class", "passes", "notes", "labels"):
            assert here[key] == there[key], key
    here, there = runs["affinity", "here"], runs["affinity", "ray"]
    assert here["units"] == there["units"] and here["inputs_seen"] == there["inputs_seen"] == 600
    for m in ("pearson", "linear"):
        np.testing.assert_allclose(
            np.array(there["scores"][m], float), np.array(here["scores"][m], float), rtol=1e-4, atol=1e-6
        )


def test_without_ray_each_entry_says_what_to_install(trained_lenet, tmp_path):
    # ray made unimportable in a subprocess, as where the extra is not installed
    _, path = trained_lenet
    line = 'pip install "idcgen[ray]"'
    code = f"""
import sys
sys.modules["ray"] = None
import idcgen.distributed as dist
try:
    dist.analyze({str(path)!r}, None)
except dist.RayNotInstalledError as exc:
    print("api:", exc)
from idcgen.cli import main
sys.argv = ["idcgen", "analyze", "--model", {str(path)!r}, "--train", "embedded-mnist:test", "--ray", "local",
            "--out", {str(tmp_path / "a")!r}]
main()
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert f"api: idcgen.distributed runs on Ray, which is not installed here: {line}" in done.stdout
    errors = [l for l in done.stderr.splitlines() if l.startswith("error:")]
    assert errors == [f"error: --ray runs on Ray, which is not installed here: {line}"]
    assert not (tmp_path / "a").exists()


# ---- parallel fuzzing ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fuzz_setup(trained_lenet, digits):
    import idcgen

    model, path = trained_lenet
    analysis = idcgen.analyze(model, digits[0][:1000], digits[1][:1000], m=4, progress=False)
    return path, analysis, digits[2][:60], digits[3][:60]


def own_and_imported(campaign):
    from idcgen.distributed.parallel import SYNC

    corpus, n = campaign.corpus, campaign.corpus.n_seeds
    imported = [i for i in range(n, len(corpus)) if corpus.chains[i][-1:] == [SYNC]]
    own = [i for i in range(n, len(corpus)) if corpus.chains[i][-1:] != [SYNC]]
    return own, imported


@pytest.fixture(scope="module")
def first_run(fuzz_setup, tmp_path_factory):
    import idcgen.distributed as dist
    from idcgen.fuzz.fuzzer import Fuzzer

    path, analysis, x, y = fuzz_setup
    out = tmp_path_factory.mktemp("parallel") / "campaign"
    settings = Fuzzer(analysis, mutators=["gauss(std=0.1)", "brightness"], batch_size=32, random_state=3).settings(1600)
    statuses = []
    result = dist.fuzz(
        path,
        analysis,
        x,
        y,
        budget=1600,
        out=out,
        settings=settings,
        workers=2,
        runner=dist.WorkerSettings(sync_every=1),
        on_progress=statuses.append,
    )
    return out, dict(result, statuses=statuses)


def test_two_workers_share_what_they_cover(first_run):
    from idcgen.distributed.parallel import worker_seed
    from idcgen.fuzz.campaign import Campaign

    out, first = first_run
    assert [w["execs"] for w in first["workers"]] == [800, 800] and first["execs"] == 1600
    parts = [Campaign.load(out / f"worker-{i}") for i in range(2)]
    assert [c.settings.random_state for c in parts] == [worker_seed(3, 0), worker_seed(3, 1)]
    assert worker_seed(3, 0) != worker_seed(3, 1)
    imports = 0
    for c in parts:
        own, imported = own_and_imported(c)
        imports += len(imported)
        combos = c.corpus.combination
        # a combination is kept once per worker: what one worker imported, it never kept again
        assert len(set(combos[c.corpus.n_seeds :].tolist())) == len(combos) - c.corpus.n_seeds
        assert not set(combos[imported].tolist()) & set(combos[own].tolist())
        assert not set(combos[own].tolist()) & set(combos[: c.corpus.n_seeds].tolist())
    assert imports > 0 and imports == sum(w["imports"] for w in first["workers"])
    merged = Campaign.load(out / "merged")
    union = set().union(*(set(c.tracker.covered_ids().tolist()) for c in parts))
    assert set(merged.tracker.covered_ids().tolist()) == union
    assert merged.execs == 1600 and merged.stats[-1]["execs"] == 1600 and merged.stats[-1]["covered"] == len(union)
    # the progress bar's IDC is the campaign's (the seeds' coverage in it), ending where the merged view does
    covered = [status[1] for status in first["statuses"]]
    assert covered == sorted(covered) and covered[-1] == len(union)
    assert len(merged.corpus) == parts[0].corpus.n_seeds + sum(len(own_and_imported(c)[0]) for c in parts)


def test_resume_and_a_killed_worker_restarted_from_its_last_commit(first_run, fuzz_setup):
    import json
    import signal

    import idcgen.distributed as dist
    from idcgen.fuzz.campaign import Campaign

    path, analysis, x, y = fuzz_setup
    out, _ = first_run
    before = [Campaign.load(out / f"worker-{i}") for i in range(2)]
    covered_before = Campaign.load(out / "merged").tracker.covered
    killed = {}

    def kill_worker_1(status):
        state = status[0].get(1)
        if not killed and state is not None and state["step"] >= before[1].step + 3:
            killed.update(state)
            os.kill(state["pid"], signal.SIGKILL)

    # --resume: every worker continues from its own folder to the new total; worker 1 is killed on the way
    again = dist.fuzz(path, analysis, x, y, budget=8000, out=out, workers=2, on_progress=kill_worker_1)
    assert killed, "worker 1 finished before it could be killed"
    assert [w["execs"] for w in again["workers"]] == [4000, 4000]
    assert again["workers"][0]["resumed_at"] == before[0].step  # the other worker went on undisturbed
    assert [r["worker"] for r in again["restarts"]] == [1]
    # the store commits a step while the next is computed: at most the step in flight is lost
    assert again["restarts"][0]["resumed_at"] >= killed["step"] - 1
    assert json.loads((out / "parallel.json").read_text())["budget"] == 8000
    assert Campaign.load(out / "worker-1").execs == 4000
    assert Campaign.load(out / "merged").tracker.covered >= covered_before


def test_parallel_steering_campaign_loads_its_training_frames_as_one_process_does(tmp_path, monkeypatch):
    # fuzz --workers 2 --train FRAMES: the frames get --crop, --resize and --labels as the seeds do (they were
    # once loaded without them, so the analysis saw uncropped frames without their angles)
    import json

    from test_regression import frames, steering_model
    from typer.testing import CliRunner

    from idcgen.cli import app

    monkeypatch.chdir(tmp_path)
    ids = frames(tmp_path / "frames", n=24, size=(14, 12))
    csv = tmp_path / "steer.csv"
    csv.write_text("frame_id,steering_angle\n" + "".join(f"{i},{(k - 12) / 30}\n" for k, i in enumerate(ids)))
    steering_model("tanh").save(tmp_path / "steer.keras")
    load = ["--labels", str(csv), "--crop", "4,2,2,2", "--resize", "8x8"]
    done = CliRunner().invoke(
        app, ["analyze", "--model", "steer.keras", "--train", "frames", "--m", "3", "--out", "one", *load]
    )
    assert done.exit_code == 0, done.output
    done = CliRunner().invoke(
        app,
        [
            "fuzz",
            "--model",
            "steer.keras",
            "--seeds",
            "frames",
            "--train",
            "frames",
            "--m",
            "3",
            "--budget",
            "80",
            "--batch-size",
            "20",
            "--workers",
            "2",
            "--mutators",
            "gauss(std=0.3)",
            "--out",
            "camp",
            *load,
        ],
    )
    assert done.exit_code == 0, done.output
    # said, and in README.md: the same --random-state does not give the same parallel campaign
    assert "note: parallel campaigns are not reproducible: " in done.output
    # the merged seconds are the workers' loop time: the run's own time, Ray's start included, is said beside it
    assert re.search(
        r"80 execs in \d+\.\d s \(this run \d+\.\d s on Ray with the workers' start; worker 0: 40 execs", done.output
    )
    one = json.loads((tmp_path / "one" / "analysis.json").read_text())
    parallel = json.loads((tmp_path / "camp" / "worker-0" / "analysis" / "analysis.json").read_text())
    assert parallel["data"]["fingerprint"] == one["data"]["fingerprint"]  # the same frames, angles included
    assert parallel["data"]["mse"] == pytest.approx(one["data"]["mse"])
    assert parallel["important_neurons"] == one["important_neurons"]
    settings = json.loads((tmp_path / "camp" / "parallel.json").read_text())["settings"]
    assert settings["crop"] == "4,2,2,2" and settings["resize"] == "8x8" and settings["labels"] == str(csv.resolve())
