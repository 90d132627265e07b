"""The campaign folder, in the AFL habit, written so that a crash never leaves a corrupt campaign.

    campaign.json      config, versions, model fingerprint, a readable copy of the state
    state-0, state-1   the commit point of every step (counters, rng state, per-mutator stats, fuzz
                       counts, covered items, the committed length and checksum of each log), written
                       in place into the two files in turn
    .lock              held (an OS file lock) by the one process that writes the campaign
    analysis/          the analysis the campaign measures with (a copy: the folder is self-contained)
    corpus/            step-NNNNNN.npz (entries added at that step; step 0 = the seeds), png/ previews
    findings/          step-NNNNNN.npz (findings of that step), png/ previews
    manifest.jsonl     one row per corpus entry: id, parent, root seed, mutator chain, combination, ...
    findings.jsonl     one row per finding
    stats.jsonl        one row per step: time, execs, execs/s, corpus size, coverage, findings

A step's files are written first and its state last, so after a kill the folder holds the last
committed step and anything newer is dropped on resume. Other files are written to a temporary name and
renamed into place. The state is not: creating a file costs up to 1 ms of CPU on some filesystems, as
much as running 40 small mutants, and a rename per step makes one. It goes into the older of two files
instead, framed with its length and checksum, so a kill while one is written leaves the other whole.
All writes of a step run on one writer thread while the loop computes the next step.
"""

from __future__ import annotations

import json
import os
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import IO

import numpy as np

from ..errors import InputError
from ..files import atomic_npz, atomic_text, jsonl, npz_bytes
from ..imageio import to_png
from . import integrity
from .statefile import FORMAT_VERSION, STATE_FILES, frame_state

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:  # Windows: no advisory locks; one writer per campaign is then the user's care
    fcntl = None

JSON_EVERY_SECONDS = 2.0
LOGS = ("manifest.jsonl", "findings.jsonl", "stats.jsonl")
#: the state's arrays of a value tracker (NLC, TKNP, CC) are named tracker_<criterion>__<array>
TRACKER_PREFIX = "tracker_"


def read_jsonl(path: Path, keep: int) -> list[dict]:
    """The first ``keep`` rows of a JSON-lines log. Only those are committed: what follows them (after
    a kill, possibly half a line) is never parsed."""
    return [json.loads(line) for line in path.read_text().splitlines()[:keep]]


class CampaignLocked(InputError):
    """Another process writes this campaign."""


class WriterLock:
    """An exclusive OS lock on ``folder/.lock``, held while one process writes the campaign. The kernel
    releases it when that process ends, however it ends, so a killed run never blocks the next."""

    def __init__(self, folder: Path):
        self.path = folder / ".lock"
        self._handle: IO[str] | None = None

    def acquire(self) -> None:
        if fcntl is None or self._handle is not None:
            return
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise CampaignLocked(
                f"campaign {self.path.parent} is being written by {holder}; wait for it to "
                "finish (reading it, as `idcgen harden --campaign` does, needs no wait)"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()}\n")
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing the descriptor releases the lock
            self._handle = None


@dataclass
class Saved:
    """A campaign folder as read at its last commit (what :meth:`Campaign.load` builds a campaign from)."""

    folder: Path
    config: dict
    state: dict
    rng_state: dict
    fuzz_count: np.ndarray
    covered: dict  # criterion name -> covered item ids
    trackers: dict  # criterion name -> the arrays of a value tracker's state (NLC, TKNP, CC)
    corpus_parts: list  # dicts of arrays, one per step with new entries
    finding_parts: list
    stats: list
    store: "CampaignStore | None"  # open for writing when resuming
    notes: list = field(default_factory=list)  # damage found, and what was rebuilt (or, read only, is to be)


class CampaignStore:
    """Writes one campaign's folder: created whole, then one commit per recorded step."""

    def __init__(self, folder: Path, *, commits: int = 0, logs: dict | None = None):
        self.folder = folder
        self.lock = WriterLock(folder)
        self._commits = commits  # state files written (the next goes to the older one)
        self._logs = dict(logs or dict.fromkeys(LOGS, (0, 0)))  # committed (bytes, crc32) of each log
        self._handles: dict = {}
        self._writer: ThreadPoolExecutor | None = None
        self._pending: list = []
        self._json_written = -float("inf")
        self._previews_from = {"corpus": 0, "findings": 0}  # ids below have their PNG
        self._versions: dict | None = None
        self.notes: list[str] = []  # what reading the folder for a resume found damaged and rebuilt

    # ---- creating ---------------------------------------------------------------------------
    @classmethod
    def create(cls, folder: Path, campaign) -> "CampaignStore":
        """Make the folder of a new campaign and write everything it holds so far as one commit."""
        if any((folder / name).exists() for name in (*STATE_FILES, "campaign.json")):
            raise InputError(
                f"{folder} already holds a campaign: resume it with --resume {folder}, or choose another --out"
            )
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise InputError(f"{folder} exists and is not empty: choose another --out")
        existed = folder.exists()
        store = cls(folder)
        try:
            for sub in ("corpus/png", "findings/png"):
                (folder / sub).mkdir(parents=True, exist_ok=True)
            store.lock.acquire()
            campaign.analysis.save(folder / "analysis")
            for name in LOGS:
                atomic_text(folder / name, "")
            corpus = campaign.corpus
            for step in np.unique(corpus.step):
                ids = np.flatnonzero(corpus.step == step)
                store._write_entries(f"step-{int(step):06d}.npz", corpus.entries(ids))
            for part in campaign.finding_parts:
                store._write_findings(f"step-{int(part['step'][0]):06d}.npz", part)
            store._append("stats.jsonl", jsonl(campaign.stats))
            store._write_state(store._next_commit(), store._encode(store._state_snapshot(campaign)))
            store.close_files()
            store.write_json(campaign)
        except BaseException:  # (Ctrl-C too) nothing was committed: leave no half-made campaign behind
            store.release()
            _remove_new(folder, existed)
            raise
        return store

    # ---- committing -------------------------------------------------------------------------
    def commit(self, campaign, new_ids: np.ndarray, findings: dict | None, stats_row: dict) -> None:
        """Persist one step: new corpus entries, findings, its stats row, then the state (commit point).

        Everything is snapshotted here and written by the writer thread in this order, so disk time
        overlaps the next step and a kill leaves a consistent last committed step.
        """
        tag = f"step-{campaign.step:06d}.npz"
        entries = campaign.corpus.entries(new_ids) if len(new_ids) else None
        state = self._state_snapshot(campaign)  # arrays copied now; encoded on the writer thread
        commit = self._next_commit()

        def write():
            if entries is not None:
                self._write_entries(tag, entries)
            if findings is not None:
                self._write_findings(tag, findings)
            self._append("stats.jsonl", jsonl([stats_row]))
            self._write_state(commit, self._encode(state))

        self._submit(write)
        if time.monotonic() - self._json_written >= JSON_EVERY_SECONDS:
            self.flush()  # campaign.json must not run ahead of the state files
            self.write_json(campaign)

    def _next_commit(self) -> int:
        self._commits += 1
        return self._commits

    def _write_entries(self, tag: str, entries: dict) -> None:
        atomic_npz(self.folder / "corpus" / tag, entries)
        self._append("manifest.jsonl", manifest_text(entries))

    def _write_findings(self, tag: str, findings: dict) -> None:
        atomic_npz(self.folder / "findings" / tag, findings)
        self._append("findings.jsonl", findings_text(findings))

    def _append(self, name: str, text: str) -> None:
        """Append to a log; the handles stay open (opening a file costs ~0.5 ms) and each log's committed
        length and running checksum are kept for the state."""
        if name not in self._handles:
            self._handles[name] = open(self.folder / name, "ab")
        data = text.encode()
        self._handles[name].write(data)
        self._handles[name].flush()
        size, crc = self._logs[name]
        self._logs[name] = (size + len(data), zlib.crc32(data, crc))

    @staticmethod
    def _state_snapshot(campaign) -> dict:
        return {
            "state": campaign.state(),
            "rng": campaign.rng.bit_generator.state,
            "config": json.dumps(campaign.settings.to_dict()),  # campaign.json's settings, should it be lost
            "n_stats_rows": len(campaign.stats),
            "fuzz_count": campaign.corpus.fuzz_count.copy(),
            "covered": {name: t.covered_ids() for name, t in campaign.coverage.items() if hasattr(t, "covered_ids")},
            "trackers": {name: t.state_arrays() for name, t in campaign.coverage.items() if hasattr(t, "state_arrays")},
        }

    def _encode(self, snapshot: dict) -> bytes:
        arrays = {
            "state": json.dumps(snapshot["state"]),
            "rng": json.dumps(snapshot["rng"]),
            "n_stats_rows": snapshot["n_stats_rows"],
            "fuzz_count": snapshot["fuzz_count"],
            "logs": json.dumps(self._logs),
            "config": snapshot["config"],
        }
        for name, ids in snapshot["covered"].items():
            arrays["covered" if name == "idc" else f"covered_{name}"] = ids
        for name, state in snapshot.get("trackers", {}).items():
            arrays.update({f"{TRACKER_PREFIX}{name}__{key}": value for key, value in state.items()})
        return npz_bytes(arrays)

    def _write_state(self, commit: int, payload: bytes) -> None:
        """Overwrite the older state file in place; flushed to the kernel, a kill of the process cannot
        lose it."""
        name = STATE_FILES[commit % 2]
        if name not in self._handles:
            path = self.folder / name
            self._handles[name] = open(path, "r+b" if path.exists() else "w+b")
        handle = self._handles[name]
        handle.seek(0)
        handle.write(frame_state(commit, payload))
        handle.truncate()
        handle.flush()

    def _submit(self, task) -> None:
        """At most one step's writes are in flight (a kill loses at most that step and the one being
        computed), and a failed write stops the run before anything later is written."""
        self.flush()
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="idcgen-writer")
        self._pending.append(self._writer.submit(task))

    def flush(self) -> None:
        """Wait until the submitted writes are done (re-raising one that failed). A write leaves the list
        only once it is known to have succeeded: an interrupted wait loses no error."""
        while self._pending:
            self._pending[0].result()
            self._pending.pop(0)

    # ---- closing ----------------------------------------------------------------------------
    def close(self, campaign) -> None:
        """Finish the writes, write campaign.json and the PNG previews, close the files, release the lock.

        After a failed write only the cleanup runs (the folder keeps its last committed step)."""
        try:
            try:
                self.flush()
            finally:
                failed = self.close_files()
                if failed:  # a write that failed while the wait for it was interrupted: the failure matters more
                    raise failed[0]
            self.write_json(campaign)
            self.write_previews(campaign)
        finally:
            self.release()

    def close_files(self) -> list[BaseException]:
        """Stop the writer thread (after its pending writes) and close the files; returns the writes that
        failed."""
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()
        failed = [f.exception() for f in self._pending if f.exception() is not None]
        self._pending.clear()
        return failed

    def release(self) -> None:
        self.close_files()
        self.lock.release()

    def write_previews(self, campaign) -> None:
        """PNG previews of the entries that have none yet; written when a run ends, not per step (a PNG
        costs ~0.7 ms, as much as running 30 mutants)."""
        found = campaign.findings()
        for where, xs in (("corpus", campaign.corpus.x), ("findings", found.get("x", ()))):
            for i in range(self._previews_from[where], len(xs)):
                path = self.folder / where / "png" / f"{i:06d}.png"
                if not path.exists():
                    to_png(xs[i], campaign.value_range).save(path)
            self._previews_from[where] = len(xs)

    def write_json(self, campaign) -> None:
        """Rewrite ``campaign.json``, the readable copy of the config and the last committed state
        (throttled: indented JSON is encoded in pure Python, slow enough to show in the loop)."""
        from ..analysis import versions

        if self._versions is None:
            self._versions = versions()
        network = getattr(campaign, "network", None) or campaign.analysis.network
        meta = {
            "format_version": FORMAT_VERSION,
            "config": campaign.settings.to_dict(),
            "versions": self._versions,
            "device": {} if network is None else network.device_info(),  # information only, never compared
            "model_fingerprint": campaign.analysis.fingerprint,
            "state": campaign.state(),
        }
        atomic_text(self.folder / "campaign.json", json.dumps(meta, indent=2) + "\n")
        self._json_written = time.monotonic()

    # ---- reading ----------------------------------------------------------------------------
    @classmethod
    def read(cls, folder: Path, *, resume: bool = False) -> Saved:
        """The folder at its last commit, checked against it (:mod:`idcgen.fuzz.integrity`). ``resume``
        takes the writer lock first, then deletes what was written after the commit, cuts the logs back
        to it and rebuilds what can be rebuilt (said in ``notes``); the store returned writes the next
        steps. Without it nothing is written: damage that can be rebuilt is only reported."""
        meta, notes = integrity.read_meta(folder, repair=resume)
        store = None
        if resume:
            store = cls(folder)
            store.lock.acquire()
        try:
            saved = cls._read(folder, meta, store)
        except BaseException:
            if store is not None:
                store.release()
            raise
        saved.notes[:0] = notes
        if store is not None:
            store.notes = saved.notes
        return saved

    @classmethod
    def _read(cls, folder: Path, meta: dict, store: "CampaignStore | None") -> Saved:
        repair = store is not None
        commits, arrays, notes = integrity.newest_state(folder, meta)
        state = json.loads(str(arrays["state"]))
        rng_state = json.loads(str(arrays["rng"]))
        covered = {"idc": arrays["covered"]}
        covered.update({k[len("covered_") :]: v for k, v in arrays.items() if k.startswith("covered_")})
        trackers: dict = {}
        for key, value in arrays.items():
            if key.startswith(TRACKER_PREFIX):
                name, part = key[len(TRACKER_PREFIX) :].split("__", 1)
                trackers.setdefault(name, {})[part] = value
        n_rows = int(arrays["n_stats_rows"])
        logs = {k: tuple(v) for k, v in json.loads(str(arrays["logs"])).items()} if "logs" in arrays else None
        if repair:
            notes += integrity.tidy(folder)
        corpus = integrity.step_files(folder, "corpus", state["step"], repair)
        found = integrity.step_files(folder, "findings", state["step"], repair)
        integrity.check_ids(folder, "corpus", corpus, state["corpus"])
        integrity.check_ids(folder, "findings", found, state["findings"])
        if len(arrays["fuzz_count"]) != state["corpus"]:
            raise integrity.damaged(
                folder, f"the state holds {len(arrays['fuzz_count'])} fuzz counts for {state['corpus']} corpus entries"
            )

        committed = {"manifest.jsonl": state["corpus"], "findings.jsonl": state["findings"], "stats.jsonl": n_rows}
        rebuilt: dict[str, str] = {}
        stats: list[dict] | None = None
        for name in LOGS:
            problem, data = integrity.log_problem(folder / name, logs[name] if logs else None, committed[name])
            if problem is None and name == "stats.jsonl":
                stats = integrity.parse_rows(data)
                problem = None if stats is not None and len(stats) == n_rows else "does not parse"
            if problem is None:
                continue
            if name == "manifest.jsonl":
                rebuilt[name] = "".join(manifest_text(p) for _, p in corpus)
                how = "rebuilt from the corpus step files"
            elif name == "findings.jsonl":
                rebuilt[name] = "".join(findings_text(p) for _, p in found)
                how = "rebuilt from the findings step files"
            else:
                stats = integrity.minimal_stats(state, corpus, found)
                rebuilt[name] = jsonl(stats)
                how = (
                    "rebuilt with two rows only (the seeds' and the last step's, marked \"rebuilt\"): the "
                    "per-step statistics are in no other file, so the report's curves start again from here"
                )
            notes.append(
                f"{name} {problem}: "
                + (
                    how
                    if repair
                    else f"the campaign was read without it; resuming it {how.replace('rebuilt', 'rebuilds it')}"
                )
            )

        assert stats is not None  # stats.jsonl parsed, or rebuilt above
        if store is not None:  # repair
            new_logs = dict(logs) if logs else {}
            for name in LOGS:
                path = folder / name
                if name in rebuilt:
                    new_logs[name] = integrity.rewrite(path, rebuilt[name])
                elif logs:
                    integrity.truncate(path, logs[name][0])
                else:  # a campaign of an earlier idcgen: the checksums start here
                    lines = path.read_text().splitlines(keepends=True)
                    text = "".join(lines[: committed[name]])
                    new_logs[name] = (
                        integrity.rewrite(path, text)
                        if len(lines) != committed[name]
                        else (len(text.encode()), zlib.crc32(text.encode()))
                    )
            store._commits, store._logs = commits, new_logs  # the next commit overwrites the older state file
            if new_logs != logs or len(stats) != n_rows:  # commit what was rebuilt, so the state matches it
                arrays = dict(arrays, logs=json.dumps(new_logs), n_stats_rows=len(stats))
                store._write_state(store._next_commit(), npz_bytes(arrays))
        return Saved(
            folder=folder,
            config=meta["config"],
            state=state,
            rng_state=rng_state,
            fuzz_count=arrays["fuzz_count"],
            covered=covered,
            trackers=trackers,
            corpus_parts=[p for _, p in corpus],
            finding_parts=[p for _, p in found],
            stats=stats,
            store=store,
            notes=notes,
        )


def read_meta(folder: Path) -> dict:
    """campaign.json (or, should it be lost, the settings the state holds), checked for the folder
    format this idcgen reads and for a whole analysis."""
    return integrity.read_meta(folder)[0]


def manifest_text(entries: dict) -> str:
    """The manifest.jsonl rows of a step's new corpus entries."""
    return jsonl(_manifest_row(entries, j) for j in range(len(entries["id"])))


def findings_text(findings: dict) -> str:
    """The findings.jsonl rows of a step's findings (every column but the inputs)."""
    return jsonl({k: json_value(v[j]) for k, v in findings.items() if k != "x"} for j in range(len(findings["id"])))


def json_value(v):
    """A numpy scalar as JSON holds it: a class stays an int, a regression output a float, no label None."""
    v = v.item()
    return None if isinstance(v, float) and v != v else v


def _manifest_row(entries: dict, j: int) -> dict:
    """The manifest.jsonl row of the j-th of a step's new corpus entries."""
    chain = str(entries["chain"][j])
    return {
        "id": int(entries["id"][j]),
        "parent": int(entries["parent"][j]),
        "root": int(entries["root"][j]),
        "chain": chain.split("|") if chain else [],
        "combination": int(entries["combination"][j]),
        "prediction": json_value(entries["prediction"][j]),
        "label": json_value(entries["label"][j]),
        "step": int(entries["step"][j]),
        "seed": bool(entries["parent"][j] < 0),
    }


def _remove_new(folder: Path, existed: bool) -> None:
    """Delete what ``create`` made (it only writes into a new or empty folder)."""
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    if existed:
        folder.mkdir(parents=True, exist_ok=True)
