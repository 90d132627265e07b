"""The campaign folder, in the AFL habit, written so that a crash never leaves a corrupt file.

    campaign.json      config, versions, model fingerprint, a readable copy of the state
    state.npz          the commit point of every step: counters, rng state, per-mutator stats,
                       fuzz counts, covered combinations, finding keys
    analysis/          the analysis the campaign measures with (a copy: the folder is self-contained)
    corpus/            step-NNNNNN.npz (entries added at that step; step 0 = the seeds), png/ previews
    findings/          step-NNNNNN.npz (findings of that step), png/ previews
    manifest.jsonl     one row per corpus entry: id, parent, root seed, mutator chain, combination, ...
    findings.jsonl     one row per finding
    stats.jsonl        one row per step: time, execs, execs/s, corpus size, IDC, findings

Every file is written to a temporary name and renamed into place; ``state.npz`` is renamed last, so
after a kill the folder holds the last committed step and anything newer is dropped on resume.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from ..analysis import Analysis, versions
from ..coverage import CoverageTracker
from ..errors import AnalysisMismatchError, InputError
from ..imageio import to_png
from .corpus import Corpus

FORMAT_VERSION = 1


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
    mutator_stats: dict = field(default_factory=dict)

    @property
    def budget(self) -> int:
        return int(self.config["budget"])

    @property
    def value_range(self) -> tuple[float, float]:
        return tuple(self.config["value_range"])

    # ---- writing ----------------------------------------------------------------------------
    def create(self) -> None:
        """Make the folder for a new campaign (refusing to overwrite another campaign)."""
        if (self.folder / "state.npz").exists():
            raise InputError(f"{self.folder} already holds a campaign: resume it with --resume {self.folder}, "
                             "or choose another --out")
        for sub in ("corpus/png", "findings/png"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        self.analysis.save(self.folder / "analysis")
        for name in ("manifest.jsonl", "findings.jsonl", "stats.jsonl"):
            atomic_text(self.folder / name, "")

    def _append(self, name: str, rows: list[dict]) -> None:
        if rows:
            with open(self.folder / name, "a") as handle:
                handle.write("".join(json.dumps(r) + "\n" for r in rows))

    def commit(self, new_ids: np.ndarray, findings: dict | None, stats_row: dict) -> None:
        """Persist one step: new corpus entries, findings, a stats row, then the state (commit point)."""
        tag = f"step-{self.step:06d}.npz"
        if len(new_ids):
            entries = self.corpus.entries(new_ids)
            atomic_write(self.folder / "corpus" / tag, lambda f: np.savez(f, **entries))
            for i, x in zip(new_ids, entries["x"]):
                to_png(x, self.value_range).save(self.folder / "corpus" / "png" / f"{i:06d}.png")
            self._append("manifest.jsonl", [self._manifest_row(i) for i in new_ids])
        if findings is not None and len(findings["id"]):
            atomic_write(self.folder / "findings" / tag, lambda f: np.savez(f, **findings))
            for i, x in zip(findings["id"], findings["x"]):
                to_png(x, self.value_range).save(self.folder / "findings" / "png" / f"{i:06d}.png")
            self._append("findings.jsonl", [
                {k: (v[j].item() if hasattr(v[j], "item") else v[j]) for k, v in findings.items() if k != "x"}
                for j in range(len(findings["id"]))])
        self._append("stats.jsonl", [stats_row])
        self.n_stats_rows += 1
        self._save_state()

    def _manifest_row(self, i: int) -> dict:
        c = self.corpus
        return {"id": int(i), "parent": int(c.parent[i]), "root": int(c.root[i]), "chain": c.chains[i],
                "combination": int(c.combination[i]), "prediction": int(c.prediction[i]),
                "label": int(c.label[i]), "step": int(c.step[i]), "seed": bool(c.parent[i] < 0)}

    def state(self) -> dict:
        return {"step": self.step, "execs": self.execs, "seed_execs": self.seed_execs,
                "elapsed_seconds": round(self.elapsed, 3), "corpus": len(self.corpus),
                "seeds": self.corpus.n_seeds, "findings": self.n_findings,
                "idc": self.tracker.score, "covered": self.tracker.covered, "total": self.tracker.total,
                "mutators": {k: vars(v) for k, v in self.mutator_stats.items()}}

    def _save_state(self) -> None:
        keys = np.array(sorted(self.finding_keys), np.int64).reshape(-1, 2)
        arrays = dict(state=json.dumps(self.state()), rng=json.dumps(self.rng.bit_generator.state),
                      n_stats_rows=self.n_stats_rows, fuzz_count=self.corpus.fuzz_count,
                      covered=self.tracker.covered_ids(), finding_keys=keys)
        atomic_write(self.folder / "state.npz", lambda f: np.savez(f, **arrays))
        meta = {"format_version": FORMAT_VERSION, "config": self.config, "versions": versions(),
                "model_fingerprint": self.analysis.fingerprint, "state": self.state()}
        atomic_text(self.folder / "campaign.json", json.dumps(meta, indent=2) + "\n")

    # ---- reading ----------------------------------------------------------------------------
    @classmethod
    def load(cls, folder: str | os.PathLike, network=None) -> "Campaign":
        """Reopen a campaign at its last committed step (anything written after it is dropped)."""
        folder = Path(folder)
        if not (folder / "state.npz").is_file() or not (folder / "campaign.json").is_file():
            raise InputError(f"not a campaign folder (no state.npz / campaign.json): {folder}")
        meta = json.loads((folder / "campaign.json").read_text())
        analysis = Analysis.load(folder / "analysis")
        if network is not None:
            try:
                analysis.bind(network)
            except AnalysisMismatchError:
                raise AnalysisMismatchError(
                    f"the campaign in {folder} was run on another model (fingerprint "
                    f"{analysis.fingerprint[:12]}); pass the model it was made with") from None
        with np.load(folder / "state.npz") as st:
            state = json.loads(str(st["state"]))
            rng_state = json.loads(str(st["rng"]))
            fuzz_count, covered = st["fuzz_count"], st["covered"]
            keys, n_rows = st["finding_keys"], int(st["n_stats_rows"])
        corpus = Corpus(analysis_input_shape(meta))
        for path in sorted((folder / "corpus").glob("step-*.npz")):
            if int(path.stem.split("-")[1]) > state["step"]:
                path.unlink()  # written after the last commit
                continue
            with np.load(path) as arrays:
                corpus.add_entries({k: arrays[k] for k in arrays.files})
        for path in (folder / "findings").glob("step-*.npz"):
            if int(path.stem.split("-")[1]) > state["step"]:
                path.unlink()
        if len(corpus) != state["corpus"]:
            raise InputError(f"campaign {folder} is inconsistent: {len(corpus)} corpus entries on disk, "
                             f"{state['corpus']} committed")
        corpus.fuzz_count[:] = fuzz_count
        rng = np.random.default_rng()
        rng.bit_generator.state = rng_state
        tracker = CoverageTracker(analysis.total, covered)
        _truncate_lines(folder / "manifest.jsonl", len(corpus))
        _truncate_lines(folder / "findings.jsonl", state["findings"])
        _truncate_lines(folder / "stats.jsonl", n_rows)
        return cls(folder=folder, config=meta["config"], analysis=analysis, corpus=corpus, tracker=tracker,
                   rng=rng, step=state["step"], execs=state["execs"], seed_execs=state["seed_execs"],
                   elapsed=state["elapsed_seconds"], n_findings=state["findings"], n_stats_rows=n_rows,
                   finding_keys={tuple(k) for k in keys.tolist()},
                   mutator_stats={k: MutatorStats(**v) for k, v in state["mutators"].items()})

    def stats_rows(self) -> list[dict]:
        return [json.loads(line) for line in (self.folder / "stats.jsonl").read_text().splitlines() if line]

    def findings(self) -> dict:
        """All findings as arrays (concatenated over steps)."""
        parts = []
        for path in sorted((self.folder / "findings").glob("step-*.npz")):
            with np.load(path) as arrays:
                parts.append({k: arrays[k] for k in arrays.files})
        if not parts:
            return {}
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def analysis_input_shape(meta: dict) -> tuple:
    return tuple(meta["config"]["input_shape"])
