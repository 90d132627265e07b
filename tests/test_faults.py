"""Fault injection on a campaign folder: each kind of file truncated, emptied or deleted, kill -9 in each
phase of a run, two writers at once. Each case either resumes to the campaign an uninterrupted run makes
(same manifest, findings, corpus arrays, previews and exports) or is refused with one line and exit 1.

A small real setup: LeNet-1 trained briefly (tests/conftest.py), 60 embedded MNIST seeds, batches of 64.
``base`` is a campaign stopped after 3 of 6 steps; ``reference`` the same settings run uninterrupted.
"""

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from idcgen.errors import InputError

BUDGET, HALF = 384, 192


@pytest.fixture(scope="module")
def world(trained_lenet, digits, tmp_path_factory):
    """Model file, seeds file, saved analysis, and the arguments of a fuzz command on them."""
    from idcgen.analysis import analyze

    model, path = trained_lenet
    x_train, y_train, x_test, y_test = digits
    root = tmp_path_factory.mktemp("faults")
    pick = np.concatenate([np.flatnonzero(y_test == k)[:6] for k in range(10)])  # seeds across the classes
    np.savez(root / "seeds.npz", x=(x_test[pick, ..., 0] * 255).round().astype(np.uint8), y=y_test[pick])
    analyze(model, x_train[:1000], y_train[:1000], layer="block2_conv1", m=6, progress=False).save(root / "analysis")
    args = [
        "fuzz",
        "--model",
        str(path),
        "--seeds",
        str(root / "seeds.npz"),
        "--analysis",
        str(root / "analysis"),
        "--mutators",
        "gauss(std=0.05),rotate",
        "--batch-size",
        "64",
    ]
    return {"root": root, "args": args, "model": model}


def cli(*args) -> tuple[int, str]:
    from idcgen.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def reference(world):
    code, out = cli(*world["args"], "--budget", BUDGET, "--out", world["root"] / "reference")
    assert code == 0, out
    return world["root"] / "reference"


@pytest.fixture(scope="module")
def base(world):
    """A campaign stopped (closed) after 3 of the reference's 6 steps, with findings."""
    code, out = cli(*world["args"], "--budget", HALF, "--out", world["root"] / "base")
    assert code == 0, out
    folder = world["root"] / "base"
    assert len(list((folder / "findings").glob("step-*.npz"))) >= 1, "the base campaign needs findings"
    return folder


@pytest.fixture
def copy(base, tmp_path):
    shutil.copytree(base, tmp_path / "c")
    return tmp_path / "c"


def resume(folder) -> tuple[int, str]:
    return cli("fuzz", "--resume", folder, "--budget", BUDGET)


def committed_step(folder) -> int:
    from idcgen.fuzz.statefile import read_state

    return json.loads(str(np.load(__import__("io").BytesIO(read_state(folder)[1]))["state"]))["step"]


def newest_state_file(folder) -> Path:
    from idcgen.fuzz.statefile import STATE_FILES, read_state

    return folder / STATE_FILES[read_state(folder)[0] % 2]


def assert_same(folder: Path, reference: Path, *, stats: bool = True) -> None:
    """The campaign in ``folder`` is the reference one: logs byte for byte, the arrays of every step
    file, the PNG previews byte for byte, the exports' arrays and findings."""
    from idcgen.fuzz.campaign import Campaign

    for name in ("manifest.jsonl", "findings.jsonl"):
        assert (folder / name).read_bytes() == (reference / name).read_bytes(), name
    for kind in ("corpus", "findings"):
        names = sorted(p.name for p in (reference / kind).glob("step-*.npz"))
        assert sorted(p.name for p in (folder / kind).glob("step-*.npz")) == names
        for name in names:
            with np.load(folder / kind / name) as a, np.load(reference / kind / name) as b:
                assert a.files == b.files
                for key in a.files:
                    np.testing.assert_array_equal(a[key], b[key], err_msg=f"{kind}/{name}:{key}")
        pngs = sorted(p.name for p in (reference / kind / "png").glob("*.png"))
        assert sorted(p.name for p in (folder / kind / "png").glob("*.png")) == pngs
        for name in pngs:
            assert (folder / kind / "png" / name).read_bytes() == (reference / kind / "png" / name).read_bytes()
    a, b = Campaign.load(folder), Campaign.load(reference)
    np.testing.assert_array_equal(a.corpus.fuzz_count, b.corpus.fuzz_count)
    assert a.state()["execs"] == b.state()["execs"] == BUDGET and a.rng.bit_generator.state == b.rng.bit_generator.state
    if stats:
        strip = lambda rows: [{k: v for k, v in r.items() if k not in ("time", "execs_per_s", "seconds")} for r in rows]
        assert strip(a.stats_rows()) == strip(b.stats_rows())
    with np.load(folder / "exports" / "grown.npz") as x, np.load(reference / "exports" / "grown.npz") as y:
        for key in y.files:
            np.testing.assert_array_equal(x[key], y[key])
    assert (folder / "exports" / "findings.jsonl").read_bytes() == (
        reference / "exports" / "findings.jsonl"
    ).read_bytes()
    assert not list(folder.rglob(".*.tmp"))


def assert_refused(folder: Path, network, expected: str) -> str:
    """Refused with one line, reading (``Campaign.load``, no lock) and resuming (the CLI) alike; the
    folder is left unlocked."""
    from idcgen.fuzz.campaign import Campaign

    with pytest.raises(InputError) as read:
        Campaign.load(folder, network)
    code, out = resume(folder)
    lines = out.strip().splitlines()
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: "), out
    assert expected in str(read.value) and expected in lines[0], (expected, str(read.value), lines[0])
    with open(folder / ".lock", "a") as handle:  # no process kept the writer lock
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    return lines[0]


def notes_of(folder) -> list[str]:
    from idcgen.fuzz.store import CampaignStore

    return CampaignStore.read(folder).notes


# ---- damaged files: rebuilt -------------------------------------------------------------------------
@pytest.mark.parametrize("fault", ["delete", "truncate", "empty"])
@pytest.mark.parametrize("log", ["manifest.jsonl", "findings.jsonl"])
def test_a_damaged_log_is_rebuilt_from_the_step_files(log, fault, copy, reference):
    path = copy / log
    before = path.read_bytes()
    {
        "delete": path.unlink,
        "truncate": lambda: path.write_bytes(before[: len(before) // 2]),
        "empty": lambda: path.write_bytes(b""),
    }[fault]()
    notes = notes_of(copy)  # read only: reported, not written
    assert len(notes) == 1 and notes[0].startswith(log) and "resuming it rebuilds it" in notes[0]
    assert not path.exists() if fault == "delete" else len(path.read_bytes()) < len(before)
    code, out = resume(copy)
    assert code == 0, out
    assert f"note: {log} " in out and "rebuilt from the" in out
    assert_same(copy, reference)


def test_a_log_changed_in_its_committed_part_is_rebuilt(copy, reference):
    path = copy / "manifest.jsonl"
    path.write_text(path.read_text().replace('"root": 1,', '"root": 7,', 1))
    assert "does not match its committed checksum" in notes_of(copy)[0]
    code, out = resume(copy)
    assert code == 0 and "rebuilt from the corpus step files" in out, out
    assert_same(copy, reference)


@pytest.mark.parametrize("fault", ["delete", "truncate"])
def test_damaged_stats_are_rebuilt_minimal_and_said(fault, copy, reference):
    path = copy / "stats.jsonl"
    if fault == "delete":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:-30])
    from idcgen.fuzz.campaign import Campaign

    loaded = Campaign.load(copy)  # read only: two rebuilt rows in memory, the file untouched
    rows = loaded.stats_rows()
    ref_rows = Campaign.load(reference).stats_rows()
    assert [r["step"] for r in rows] == [0, 3] and all(r["rebuilt"] for r in rows)
    for key in ("corpus", "idc", "covered", "findings"):  # the seeds' row recomputed, the last from the state
        assert rows[0][key] == ref_rows[0][key] and rows[1][key] == ref_rows[3][key], key
    code, out = resume(copy)
    assert code == 0 and "note: stats.jsonl" in out and "two rows only" in out, out
    assert_same(copy, reference, stats=False)
    resumed = Campaign.load(copy).stats_rows()
    assert [r["step"] for r in resumed] == [0, 3, 4, 5, 6] and resumed[2:][0]["execs"] == ref_rows[4]["execs"]
    assert notes_of(copy) == []  # the rebuilt file was committed: the next read finds nothing wrong


@pytest.mark.parametrize("fault", ["delete", "truncate"])
def test_campaign_json_is_read_from_the_state_and_rewritten(fault, copy, reference):
    path = copy / "campaign.json"
    if fault == "delete":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:100])
    assert notes_of(copy)[0].startswith("campaign.json is " + ("missing" if fault == "delete" else "unreadable"))
    code, out = resume(copy)
    assert code == 0 and "its settings were read from the state file" in out, out
    assert json.loads(path.read_text())["state"]["execs"] == BUDGET
    assert_same(copy, reference)


@pytest.mark.parametrize("fault", ["delete", "truncate"])
def test_the_newest_state_lost_falls_back_to_the_commit_before(fault, copy, reference):
    path = newest_state_file(copy)
    path.unlink() if fault == "delete" else path.write_bytes(path.read_bytes()[:-9])
    assert committed_step(copy) == 2
    assert "the campaign was read at step 2 (the commit before" in notes_of(copy)[0]
    code, out = resume(copy)
    assert code == 0 and "resuming" in out and "at step 2" in out, out
    assert_same(copy, reference)


@pytest.mark.parametrize("what", ["some", "folder", "torn"])
def test_png_previews_are_rewritten(what, copy, reference):
    pngs = sorted((copy / "corpus" / "png").glob("*.png"))
    if what == "some":
        for p in pngs[::7] + sorted((copy / "findings" / "png").glob("*.png"))[:2]:
            p.unlink()
    elif what == "folder":
        shutil.rmtree(copy / "findings" / "png")
    else:  # a kill while a preview was written (previews are written in place)
        pngs[3].write_bytes(pngs[3].read_bytes()[:50])
    code, out = resume(copy)
    assert code == 0, out
    assert_same(copy, reference)


def test_stale_temporary_files_are_removed(copy, reference):
    for name in (
        "exports/.grown.npz.tmp",
        "corpus/.step-000004.npz.tmp",
        ".manifest.jsonl.tmp",
        ".campaign.json.tmp",
        "corpus/png/.000001.png.tmp",
    ):
        (copy / name).write_bytes(b"half")
    code, out = resume(copy)
    assert code == 0, out
    assert_same(copy, reference)


# ---- damaged files: refused ------------------------------------------------------------------------
def _step_with(folder, kind) -> str:
    return sorted(p.name for p in (folder / kind).glob("step-*.npz") if p.name != "step-000000.npz")[0]


@pytest.mark.parametrize("fault", ["delete", "truncate", "empty"])
@pytest.mark.parametrize("kind", ["corpus", "findings"])
def test_a_damaged_step_file_is_refused_naming_it(kind, fault, copy, world):
    name = _step_with(copy, kind)
    path = copy / kind / name
    with np.load(path) as arrays:
        ids = arrays["id"]
    {
        "delete": path.unlink,
        "truncate": lambda: path.write_bytes(path.read_bytes()[:200]),
        "empty": lambda: path.write_bytes(b""),
    }[fault]()
    noun = "corpus entries" if kind == "corpus" else "findings"
    expected = (
        f"is damaged: {kind}/{name} is missing ({len(ids)} committed {noun}, ids {ids[0]}"
        if fault == "delete"
        else f"is damaged: {kind}/{name} is unreadable ("
    )
    line = assert_refused(copy, world["model"], expected)
    assert line.endswith("restore it from a backup, or start a new campaign")


def test_a_step_file_deleted_with_its_log_is_still_named_by_position(copy, world):
    name = _step_with(copy, "findings")
    (copy / "findings" / name).unlink()
    (copy / "findings.jsonl").unlink()
    assert_refused(copy, world["model"], "are in no step file")


@pytest.mark.parametrize("fault", ["both states deleted", "both states torn"])
def test_without_a_whole_state_a_grown_campaign_is_refused(fault, copy, world):
    for name in ("state-0", "state-1"):
        if fault.endswith("deleted"):
            (copy / name).unlink()
        else:
            (copy / name).write_bytes((copy / name).read_bytes()[:-5])
    assert_refused(copy, world["model"], "the last commit (counters, random state) is in no other file")


@pytest.mark.parametrize("fault", ["folder deleted", "arrays truncated", "json emptied"])
def test_a_damaged_analysis_is_refused(fault, copy, world):
    if fault == "folder deleted":
        shutil.rmtree(copy / "analysis")
    elif fault == "arrays truncated":
        path = copy / "analysis" / "arrays.npz"
        path.write_bytes(path.read_bytes()[:100])
    else:
        (copy / "analysis" / "analysis.json").write_text("")
    line = assert_refused(copy, world["model"], "is damaged: analysis/")
    assert "copy the analysis it was made with (model fingerprint" in line
    from idcgen.analysis import Analysis

    with pytest.raises(InputError):  # as harden loads it first: one line too, not a BadZipFile traceback
        Analysis.load(copy / "analysis")


# ---- kill -9 in each phase (subprocesses) ------------------------------------------------------------
VICTIM = textwrap.dedent('''
    """Run the idcgen CLI and kill -9 this process at one point of a run (argv[1]); or, "hold", keep the
    writer lock until the file argv[2] exists."""
    import os, signal, sys, time
    from pathlib import Path
    from idcgen import files
    from idcgen.fuzz import store
    phase, *args = sys.argv[1:]

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    write_state, atomic_write = store.CampaignStore._write_state, files.atomic_write
    if phase == "seeds":          # the seeds' files written, their state not yet
        store.CampaignStore._write_state = lambda self, commit, payload: die()
    elif phase == "state":        # half of step 3's state written over the older state file
        def torn_state(self, commit, payload):
            if commit == 4:
                with open(self.folder / store.STATE_FILES[commit % 2], "r+b") as handle:
                    handle.write(store.frame_state(commit, payload)[:60])
                die()
            write_state(self, commit, payload)
        store.CampaignStore._write_state = torn_state
    elif phase in ("step", "export"):   # half of a corpus file (step 2 on), or of grown.npz, in its temporary file
        def torn_write(path, data):
            path = Path(path)
            if (path.name == "grown.npz") if phase == "export" else \
                    (path.parent.name == "corpus" and path.name >= "step-000002.npz"):
                with open(files.temporary_name(Path(path)), "wb") as handle:
                    handle.write(data[: len(data) // 2])
                die()
            atomic_write(path, data)
        files.atomic_write = torn_write
    elif phase == "previews":     # the 5th PNG preview half written
        to_png, made = store.to_png, []
        class Torn:
            def __init__(self, image):
                self.image = image
            def save(self, path):
                made.append(path)
                self.image.save(path)
                if len(made) == 5:
                    Path(path).write_bytes(Path(path).read_bytes()[:40])
                    die()
        store.to_png = lambda x, value_range: Torn(to_png(x, value_range))
    elif phase == "hold":
        go, args = Path(args[0]), args[1:]
        acquire = store.WriterLock.acquire
        def held(self):
            acquire(self)
            deadline = time.monotonic() + 120
            while not go.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        store.WriterLock.acquire = held
    from idcgen.cli import main
    sys.argv = ["idcgen", *args]
    main()
''')


def own_lines(stderr: bytes) -> list[str]:
    """stderr without what TensorFlow's C++ runtime logs at import (abseil prints it whatever
    TF_CPP_MIN_LOG_LEVEL says)."""
    tf = re.compile(r"^(WARNING: All log messages before absl|[IWE]\d{4} |To enable the following instructions)")
    return [line for line in stderr.decode().strip().splitlines() if not tf.match(line)]


PHASES = ("seeds", "state", "step", "previews", "export")


@pytest.fixture(scope="module")
def victims(world):
    """All kill -9 runs started at once (each pays TensorFlow's import): phase -> (process, folder)."""
    (world["root"] / "victim.py").write_text(VICTIM)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    started = {}
    for phase in PHASES:
        folder = world["root"] / f"killed-{phase}"
        started[phase] = (
            subprocess.Popen(
                [
                    sys.executable,
                    str(world["root"] / "victim.py"),
                    phase,
                    *world["args"],
                    "--budget",
                    str(BUDGET),
                    "--out",
                    str(folder),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            ),
            folder,
        )
    yield started
    for process, _ in started.values():
        if process.poll() is None:
            process.kill()


def killed(victims, phase) -> Path:
    process, folder = victims[phase]
    _, err = process.communicate(timeout=300)
    assert process.returncode == -signal.SIGKILL, err.decode()[-2000:]
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["state", "step", "previews", "export"])
def test_killed_run_resumes_to_the_uninterrupted_campaign(phase, victims, reference):
    folder = killed(victims, phase)
    leftovers = {"step": "corpus/.step-*.npz.tmp", "export": "exports/.grown.npz.tmp"}.get(phase)
    if leftovers:
        assert list(folder.glob(leftovers))
    if phase == "state":
        assert committed_step(folder) == 2
    code, out = cli("fuzz", "--resume", folder)
    assert code == 0, out
    assert_same(folder, reference)


@pytest.mark.slow
def test_killed_before_the_seeds_were_committed_is_refused_in_one_line(victims, world):
    folder = killed(victims, "seeds")
    assert (folder / "corpus" / "step-000000.npz").exists() and not (folder / "state-1").exists()
    code, out = cli("fuzz", "--resume", folder)
    lines = out.strip().splitlines()
    assert code == 1 and len(lines) == 1, out
    assert lines[0] == (
        f"error: campaign {folder} has no state file: its start was interrupted before the seeds "
        f"were committed; delete {folder} and start again"
    )


@pytest.mark.slow
def test_two_writers_one_runs_the_other_is_refused(copy, world, reference):
    from idcgen.fuzz.campaign import Campaign

    victim = world["root"] / "victim.py"
    victim.write_text(VICTIM)
    go = copy.parent / "go"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    command = [sys.executable, str(victim), "hold", str(go), "fuzz", "--resume", str(copy), "--budget", str(BUDGET)]
    both = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(2)]
    try:
        deadline = time.monotonic() + 300
        while all(p.poll() is None for p in both) and time.monotonic() < deadline:
            time.sleep(0.1)
        loser = next(p for p in both if p.poll() is not None)
        winner = next(p for p in both if p is not loser)
        _, err = loser.communicate()
        lines = own_lines(err)
        assert loser.returncode == 1 and len(lines) == 1, err.decode()
        assert lines[0] == (
            f"error: campaign {copy} is being written by process {winner.pid}; wait for it to finish "
            "(reading it, as `idcgen harden --campaign` does, needs no wait)"
        )
        assert Campaign.load(copy).step == 3  # reading needs no lock, while the winner holds it
        go.touch()
        out, err = winner.communicate(timeout=300)
        assert winner.returncode == 0, err.decode()[-2000:]
    finally:
        go.touch()
        for p in both:
            if p.poll() is None:
                p.kill()
    assert_same(copy, reference)
