"""The campaign folder, in the AFL habit, written so that a crash never leaves a corrupt file.

    campaign.json      config, versions, model fingerprint, a readable copy of the state
    state-0, state-1   the commit point of every step (counters, rng state, per-mutator stats, fuzz
                       counts, covered combinations), written in place into the two files in turn
    analysis/          the analysis the campaign measures with (a copy: the folder is self-contained)
    corpus/            step-NNNNNN.npz (entries added at that step; step 0 = the seeds), png/ previews
    findings/          step-NNNNNN.npz (findings of that step), png/ previews
    manifest.jsonl     one row per corpus entry: id, parent, root seed, mutator chain, combination, ...
    findings.jsonl     one row per finding
    stats.jsonl        one row per step: time, execs, execs/s, corpus size, IDC, findings

A step's files are written first and its state last, so after a kill the folder holds the last
committed step and anything newer is dropped on resume. Other files are written to a temporary name and
renamed into place. The state is not: creating a file costs up to 1 ms of CPU on some filesystems (ext4
here), as much as 40 mutants, and a rename per step makes one. It goes into the older of two files
instead, framed with its length and checksum, so a kill while one is written leaves the other whole.
"""

from __future__ import annotations

import io
import json
import os
import struct
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from ..analysis import Analysis, versions
from ..coverage import CoverageTracker
from ..errors import AnalysisMismatchError, InputError
from ..imageio import to_png
from .corpus import Corpus

FORMAT_VERSION = 2
JSON_EVERY_SECONDS = 2.0
STATE_FILES = ("state-0", "state-1")
_STATE_HEADER = struct.Struct("<8sQQI")  # magic, commit number, payload length, CRC-32 of the payload
_STATE_MAGIC = b"IDCGSTAT"


def atomic_write(path: Path, write, *, sync: bool = False) -> None:
    """Call ``write(file)`` on a temporary file beside ``path``, then rename it into place.

    The rename makes a killed process leave either the old or the new file, never half of one;
    ``sync`` also survives a power cut, at a cost of milliseconds per call.
    """
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as handle:
        write(handle)
        if sync:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(tmp, path)


def atomic_text(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode()))


def npz_bytes(arrays: dict, *, compressed: bool = False) -> bytes:
    """An ``.npz`` archive built in memory: zipfile's many small writes and seeks on a real file cost
    twice as much, on the writer thread of every step."""
    buffer = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buffer, **arrays)
    return buffer.getvalue()


def atomic_npz(path: Path, arrays: dict, *, compressed: bool = False) -> None:
    """``np.savez`` through :func:`atomic_write`."""
    data = npz_bytes(arrays, compressed=compressed)
    atomic_write(path, lambda f: f.write(data))


def frame_state(commit: int, payload: bytes) -> bytes:
    """A state file's content: header (commit number, length, checksum), then the payload."""
    return _STATE_HEADER.pack(_STATE_MAGIC, commit, len(payload), zlib.crc32(payload)) + payload


def read_state(folder: Path) -> tuple[int, bytes] | None:
    """(commit number, payload) of the newest whole state file (``STATE_FILES[commit % 2]``), None if
    there is none."""
    newest = None
    for name in STATE_FILES:
        try:
            data = (folder / name).read_bytes()
        except OSError:
            continue
        if len(data) < _STATE_HEADER.size:
            continue
        magic, commit, length, crc = _STATE_HEADER.unpack_from(data)
        payload = data[_STATE_HEADER.size:_STATE_HEADER.size + length]
        if magic != _STATE_MAGIC or len(payload) != length or zlib.crc32(payload) != crc:
            continue  # half written when the process was killed: the other file holds the commit before
        if newest is None or commit > newest[0]:
            newest = (commit, payload)
    return newest


def read_jsonl(path: Path, keep: int) -> list[dict]:
    """The first ``keep`` rows of a JSON-lines log. Only those are committed: what follows them (after
    a kill, possibly half a line) is never parsed."""
    return [json.loads(line) for line in path.read_text().splitlines()[:keep]]


def _truncate_lines(path: Path, keep: int) -> None:
    if not path.exists():
        atomic_text(path, "")
        return
    lines = path.read_text().splitlines(keepends=True)
    if len(lines) != keep:
        atomic_text(path, "".join(lines[:keep]))


@dataclass
class MutatorStats:
    execs: int = 0
    valid: int = 0
    kept: int = 0
    findings: int = 0
    seconds: float = 0.0
    steps: int = 0
    errors: int = 0
    last_error: str | None = None


@dataclass
class Campaign:
    """One saved, resumable run: its corpus, coverage, findings and counters."""

    folder: Path
    config: dict
    analysis: Analysis
    corpus: Corpus
    tracker: CoverageTracker
    rng: np.random.Generator
    step: int = 0
    execs: int = 0
    seed_execs: int = 0
    elapsed: float = 0.0
    n_findings: int = 0
    n_stats_rows: int = 0
    finding_keys: set = field(default_factory=set)
    pick_counts: np.ndarray | None = None   # resumed: the fuzz counts the next batch's parents come from
    mutator_stats: dict = field(default_factory=dict)
    _json_written: float = field(default=-float("inf"), repr=False)
    _pending_png: list = field(default_factory=list, repr=False)
    _handles: dict = field(default_factory=dict, repr=False)
    _writer: ThreadPoolExecutor | None = field(default=None, repr=False)
    _pending: list = field(default_factory=list, repr=False)
    _versions: dict | None = field(default=None, repr=False)
    _committed: dict | None = field(default=None, repr=False)   # state() at the last commit
    _commits: int = field(default=0, repr=False)   # state files written (the next goes to the older one)

    @property
    def budget(self) -> int:
        return int(self.config["budget"])

    @property
    def value_range(self) -> tuple[float, float]:
        return tuple(self.config["value_range"])

    # ---- writing ----------------------------------------------------------------------------
    def create(self) -> None:
        """Make the folder for a new campaign (refusing to overwrite another campaign)."""
        if any((self.folder / name).exists() for name in (*STATE_FILES, "campaign.json")):
            raise InputError(f"{self.folder} already holds a campaign: resume it with --resume {self.folder}, "
                             "or choose another --out")
        if self.folder.exists() and (not self.folder.is_dir() or any(self.folder.iterdir())):
            raise InputError(f"{self.folder} exists and is not empty: choose another --out")
        for sub in ("corpus/png", "findings/png"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        self.analysis.save(self.folder / "analysis")
        for name in ("manifest.jsonl", "findings.jsonl", "stats.jsonl"):
            atomic_text(self.folder / name, "")
        self.write_json()

    def _submit(self, task) -> None:
        """Run a step's file writes on the writer thread while the next step computes.

        At most one step's writes are in flight (so a kill loses at most that step and the one being
        computed), and a failed write stops the run before anything later is written.
        """
        self.flush()
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="idcgen-writer")
        self._pending.append(self._writer.submit(task))

    def _append(self, name: str, text: str) -> None:
        """Append JSON lines (writer thread); the handles stay open, as opening a file costs ~0.5 ms here."""
        if name not in self._handles:
            self._handles[name] = open(self.folder / name, "a")
        self._handles[name].write(text)
        self._handles[name].flush()

    def _write_state(self, commit: int, payload: bytes) -> None:
        """Overwrite the older state file in place (writer thread); flushed to the kernel, a kill of the
        process cannot lose it."""
        name = STATE_FILES[commit % 2]
        if name not in self._handles:
            path = self.folder / name
            self._handles[name] = open(path, "r+b" if path.exists() else "w+b")
        handle = self._handles[name]
        handle.seek(0)
        handle.write(frame_state(commit, payload))
        handle.truncate()
        handle.flush()

    def flush(self) -> None:
        """Wait until the submitted writes are on disk (re-raising a write that failed). A write leaves
        the list only once it is known to have succeeded: an interrupted wait loses no error."""
        while self._pending:
            self._pending[0].result()
            self._pending.pop(0)

    def close(self) -> None:
        """Finish the writes, write campaign.json and the PNG previews, close the log files.

        After a failed write only the cleanup runs (the folder keeps its last committed step)."""
        try:
            self.flush()
        finally:
            failed = self.close_files()
            if failed:  # a write that failed while the wait for it was interrupted: the failure matters more
                raise failed[0]
        self.write_json()
        self.write_previews()

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

    def commit(self, new_ids: np.ndarray, findings: dict | None, stats_row: dict, *,
               next_batch: tuple[dict, np.ndarray] | None = None) -> None:
        """Persist one step: new corpus entries, findings, a stats row, then the state (commit point).

        Everything is snapshotted here and written by one background thread in this order, so disk
        time overlaps the next step and a kill still leaves a consistent last committed step.
        ``next_batch``: (generator state, fuzz counts) the next step's batch was already mutated from;
        they are saved instead of the current ones, so that a resumed campaign mutates it again alike.
        """
        tag = f"step-{self.step:06d}.npz"
        folder = self.folder
        entries = self.corpus.entries(new_ids) if len(new_ids) else None
        if entries is not None:
            self._pending_png.extend(("corpus", int(i), x) for i, x in zip(new_ids, entries["x"]))
        if findings is not None and len(findings["id"]):
            self._pending_png.extend(("findings", int(i), x) for i, x in zip(findings["id"], findings["x"]))
        else:
            findings = None
        self.n_stats_rows += 1
        # snapshots only: encoding them (JSON, npz) is left to the writer thread
        rng, pick_counts = next_batch if next_batch is not None else (self.rng.bit_generator.state, None)
        self._committed = self.state()
        state = dict(state=self._committed, rng=rng, n_stats_rows=self.n_stats_rows,
                     fuzz_count=self.corpus.fuzz_count.copy(), covered=self.tracker.covered_ids())
        if pick_counts is not None:
            state["pick_counts"] = pick_counts
        self._commits += 1
        commit = self._commits

        def write():
            if entries is not None:
                atomic_npz(folder / "corpus" / tag, entries)
                self._append("manifest.jsonl", "".join(json.dumps(_manifest_row(entries, j)) + "\n"
                                                       for j in range(len(entries["id"]))))
            if findings is not None:
                atomic_npz(folder / "findings" / tag, findings)
                self._append("findings.jsonl", "".join(json.dumps(_finding_row(findings, j)) + "\n"
                                                       for j in range(len(findings["id"]))))
            self._append("stats.jsonl", json.dumps(stats_row) + "\n")
            self._write_state(commit, npz_bytes(dict(state, state=json.dumps(state["state"]),
                                                     rng=json.dumps(state["rng"]))))
        self._submit(write)
        if time.monotonic() - self._json_written >= JSON_EVERY_SECONDS:
            self.flush()  # campaign.json must not run ahead of the state files
            self.write_json()

    def state(self) -> dict:
        """The counters as a new dict (a snapshot: later steps do not change it)."""
        return {"step": self.step, "execs": self.execs, "seed_execs": self.seed_execs,
                "elapsed_seconds": round(self.elapsed, 3), "corpus": len(self.corpus),
                "seeds": self.corpus.n_seeds, "findings": self.n_findings,
                "idc": self.tracker.score, "covered": self.tracker.covered, "total": self.tracker.total,
                "mutators": {k: dict(vars(v)) for k, v in self.mutator_stats.items()}}

    def write_previews(self) -> None:
        """PNG previews of the entries committed since the last call; written when a run ends, not per
        step (a PNG costs ~0.7 ms, as much as running 30 mutants)."""
        for where, i, x in self._pending_png:
            to_png(x, self.value_range).save(self.folder / where / "png" / f"{i:06d}.png")
        self._pending_png.clear()

    def write_json(self) -> None:
        """Rewrite ``campaign.json``, the readable copy of the config and state (throttled per step:
        indented JSON is encoded in pure Python, slow enough to show in the fuzz loop)."""
        if self._versions is None:
            self._versions = versions()
        meta = {"format_version": FORMAT_VERSION, "config": self.config, "versions": self._versions,
                "model_fingerprint": self.analysis.fingerprint,
                "state": self.state() if self._committed is None else self._committed}
        atomic_text(self.folder / "campaign.json", json.dumps(meta, indent=2) + "\n")
        self._json_written = time.monotonic()

    # ---- reading ----------------------------------------------------------------------------
    @classmethod
    def load(cls, folder: str | os.PathLike, network=None, *, repair: bool = False) -> "Campaign":
        """Reopen a campaign at its last committed step.

        ``repair=True`` (resuming) also deletes what was written after that step and truncates the logs
        to it; without it the folder is only read (safe while another process fuzzes into it).
        """
        folder = Path(folder)
        if not (folder / "campaign.json").is_file():
            raise InputError(f"not a campaign folder (no campaign.json): {folder}")
        try:
            meta = json.loads((folder / "campaign.json").read_text())
            meta["config"]["input_shape"]
        except (OSError, ValueError, KeyError) as exc:
            raise InputError(f"campaign {folder}: campaign.json is unreadable ({exc})") from None
        if meta.get("format_version") != FORMAT_VERSION:
            made_by = meta.get("versions", {}).get("idcgen", "?")
            raise InputError(f"campaign {folder} has folder format {meta.get('format_version')!r}; this idcgen "
                             f"reads format {FORMAT_VERSION} (it was made by idcgen {made_by}: open it with that "
                             "version, or start a new campaign)")
        newest = read_state(folder)
        if newest is None:
            raise InputError(f"campaign {folder} has no whole state file ({' or '.join(STATE_FILES)}): its start "
                             f"was interrupted before the seeds were committed; delete {folder} and start again")
        commits, payload = newest
        analysis = Analysis.load(folder / "analysis")
        if network is not None:
            try:
                analysis.bind(network)
            except AnalysisMismatchError:
                raise AnalysisMismatchError(
                    f"the campaign in {folder} was run on another model (fingerprint "
                    f"{analysis.fingerprint[:12]}); pass the model it was made with") from None
        with np.load(io.BytesIO(payload)) as st:
            state = json.loads(str(st["state"]))
            rng_state = json.loads(str(st["rng"]))
            fuzz_count, covered = st["fuzz_count"], st["covered"]
            n_rows = int(st["n_stats_rows"])
            pick_counts = st["pick_counts"] if "pick_counts" in st.files else None
        corpus = Corpus(analysis_input_shape(meta))
        for path in sorted((folder / "corpus").glob("step-*.npz"), key=_step_of):
            if _step_of(path) > state["step"]:
                if repair:
                    path.unlink()  # written after the last commit
                continue
            with np.load(path) as arrays:
                corpus.add_entries({k: arrays[k] for k in arrays.files})
        for path in (folder / "findings").glob("step-*.npz"):
            if _step_of(path) > state["step"] and repair:
                path.unlink()
        if len(corpus) != state["corpus"]:
            raise InputError(f"campaign {folder} is inconsistent: {len(corpus)} corpus entries on disk, "
                             f"{state['corpus']} committed")
        corpus.fuzz_count[:] = fuzz_count
        pending = [("corpus", i, corpus.x[i]) for i in range(len(corpus))
                   if not (folder / "corpus" / "png" / f"{i:06d}.png").exists()]
        rng = np.random.default_rng()
        rng.bit_generator.state = rng_state
        tracker = CoverageTracker(analysis.total, covered)
        if repair:
            _truncate_lines(folder / "manifest.jsonl", len(corpus))
            _truncate_lines(folder / "findings.jsonl", state["findings"])
            _truncate_lines(folder / "stats.jsonl", n_rows)
        campaign = cls(folder=folder, config=meta["config"], analysis=analysis, corpus=corpus, tracker=tracker,
                       rng=rng, step=state["step"], execs=state["execs"], seed_execs=state["seed_execs"],
                       elapsed=state["elapsed_seconds"], n_findings=state["findings"], n_stats_rows=n_rows,
                       mutator_stats={k: MutatorStats(**v) for k, v in state["mutators"].items()},
                       pick_counts=pick_counts)
        campaign._commits = commits  # the next commit overwrites the other, older state file
        campaign._pending_png = pending
        found = campaign.findings()
        if found:  # a finding is saved once per (combination, true label, prediction)
            campaign.finding_keys = set(zip(found["combination"].tolist(), found["label"].tolist(),
                                            found["prediction"].tolist()))
        campaign._pending_png += [("findings", int(i), x) for i, x in zip(found.get("id", []), found.get("x", []))
                                  if not (folder / "findings" / "png" / f"{int(i):06d}.png").exists()]
        return campaign

    def stats_rows(self) -> list[dict]:
        return read_jsonl(self.folder / "stats.jsonl", self.n_stats_rows)

    def findings(self) -> dict:
        """All committed findings as arrays (concatenated over steps)."""
        parts = []
        for path in sorted((self.folder / "findings").glob("step-*.npz"), key=_step_of):
            if _step_of(path) > self.step:
                continue
            with np.load(path) as arrays:
                parts.append({k: arrays[k] for k in arrays.files})
        if not parts:
            return {}
        # columns all steps have (campaigns of the first version also saved survives_uint8 per step)
        common = [k for k in parts[0] if all(k in p for p in parts)]
        return {k: np.concatenate([p[k] for p in parts]) for k in common}


def _manifest_row(entries: dict, j: int) -> dict:
    """The manifest.jsonl row of the j-th of a step's new corpus entries."""
    chain = str(entries["chain"][j])
    return {"id": int(entries["id"][j]), "parent": int(entries["parent"][j]), "root": int(entries["root"][j]),
            "chain": chain.split("|") if chain else [], "combination": int(entries["combination"][j]),
            "prediction": int(entries["prediction"][j]), "label": int(entries["label"][j]),
            "step": int(entries["step"][j]), "seed": bool(entries["parent"][j] < 0)}


def _finding_row(findings: dict, j: int) -> dict:
    """The findings.jsonl row of the j-th of a step's findings (everything but the input)."""
    return {k: v[j].item() for k, v in findings.items() if k != "x"}


def _step_of(path: Path) -> int:
    return int(path.stem.split("-")[1])


def analysis_input_shape(meta: dict) -> tuple:
    return tuple(meta["config"]["input_shape"])
