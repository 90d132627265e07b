"""A campaign folder read back and checked against its last commit (docs/design.md, "Fuzz loop").

Each commit records the counts of corpus entries, findings and stats rows, and the committed length and
CRC-32 of each log. Reading compares the files with that record. What can be rebuilt from committed
files is rebuilt (``manifest.jsonl`` and ``findings.jsonl`` from the step files; a minimal
``stats.jsonl``; PNG previews and exports by the run that follows), but written only by the holder of
the writer lock: a plain read reports it in ``notes`` and reads around it. What cannot be rebuilt (a
step file, both state files, the analysis) is refused with one line naming the file and what to do.
A damaged file never ends in a traceback.
"""

from __future__ import annotations

import io
import json
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..files import atomic_text, remove_temporaries
from .statefile import FORMAT_VERSION, STATE_FILES, read_state, torn_states

#: what reading a damaged file can raise (a truncated npz: BadZipFile; an empty one: EOFError)
UNREADABLE = (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile)
CANNOT = "it cannot be rebuilt from the other files: restore it from a backup, or start a new campaign"
PNG_END = b"IEND\xaeB`\x82"  # the last 8 bytes of every whole PNG


class CampaignDamaged(InputError):
    """A campaign file is missing or damaged and cannot be rebuilt from the others."""


def damaged(folder: Path, what: str, advice: str = CANNOT) -> CampaignDamaged:
    return CampaignDamaged(f"campaign {folder} is damaged: {what}; {advice}")


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# ---- campaign.json and the analysis --------------------------------------------------------------
def read_meta(folder: Path, *, repair: bool = False) -> tuple[dict, list[str]]:
    """(campaign.json, notes). A missing or unreadable campaign.json is read from the newest state,
    which holds the same settings (it is rewritten when a run ends)."""
    path, problem = folder / "campaign.json", None
    try:
        meta = json.loads(path.read_text())
        meta["config"]["input_shape"]
    except FileNotFoundError:
        problem = "campaign.json is missing"
    except UNREADABLE as exc:
        problem = f"campaign.json is unreadable ({_why(exc)})"
    notes = []
    if problem is not None:
        newest = read_state(folder)
        config = None if newest is None else _payload(folder, newest).get("config")
        if newest is None and problem.endswith("missing"):
            if (folder / "corpus" / "step-000000.npz").exists():  # killed while the seeds were committed
                raise InputError(
                    f"campaign {folder} has no state file: its start was interrupted before the "
                    f"seeds were committed; delete {folder} and start again"
                )
            raise InputError(f"not a campaign folder (no campaign.json): {folder}")
        if config is None:
            raise damaged(
                folder,
                problem,
                "its settings are in no other file (the state files predate idcgen's "
                "copy of them): restore it from a backup, or start a new campaign",
            )
        meta = {"format_version": FORMAT_VERSION, "config": json.loads(str(config))}
        notes.append(
            f"{problem}: its settings were read from the state file; "
            + ("it is rewritten when this run ends" if repair else "resuming the campaign rewrites it")
        )
    if meta.get("format_version") != FORMAT_VERSION:
        made_by = meta.get("versions", {}).get("idcgen", "?")
        raise InputError(
            f"campaign {folder} has folder format {meta.get('format_version')!r}; this idcgen "
            f"reads format {FORMAT_VERSION} (it was made by idcgen {made_by}: open it with that "
            "version, or start a new campaign)"
        )
    check_analysis(folder, meta)
    return meta, notes


def check_analysis(folder: Path, meta: dict) -> None:
    """The campaign's copy of its analysis is whole (it cannot be rebuilt from the campaign)."""
    fingerprint = meta.get("model_fingerprint")
    advice = (
        "the analysis cannot be rebuilt from the campaign: copy the analysis it was made with"
        + (f" (model fingerprint {fingerprint[:12]})" if fingerprint else "")
        + f" into {folder / 'analysis'}, or start a new campaign"
    )
    for name in ("analysis.json", "arrays.npz"):
        path = folder / "analysis" / name
        if not path.is_file():
            raise damaged(folder, f"analysis/{name} is missing", advice)
        try:
            if name == "analysis.json":
                json.loads(path.read_text())["layer"]
            else:
                with np.load(path) as arrays:
                    for key in arrays.files:
                        arrays[key]
        except UNREADABLE as exc:
            raise damaged(folder, f"analysis/{name} is unreadable ({_why(exc)})", advice) from None


# ---- the state ------------------------------------------------------------------------------------
def _payload(folder: Path, newest: tuple[int, bytes]) -> dict:
    """The arrays of a state payload (its checksum already matched)."""
    try:
        with np.load(io.BytesIO(newest[1])) as arrays:
            return {k: arrays[k] for k in arrays.files}
    except UNREADABLE as exc:
        raise damaged(folder, f"{STATE_FILES[newest[0] % 2]} is unreadable ({_why(exc)})") from None


def newest_state(folder: Path, meta: dict) -> tuple[int, dict, list[str]]:
    """(commit number, payload arrays, notes) of the last commit."""
    newest = read_state(folder)
    if newest is None:
        present = [name for name in STATE_FILES if (folder / name).exists()]
        later = any(p.name != "step-000000.npz" for p in (folder / "corpus").glob("step-*.npz"))
        if later or (meta.get("state") or {}).get("step", 0) > 0:  # not an interrupted start: steps were committed
            what = (
                f"{' and '.join(present)} {'is' if len(present) == 1 else 'are'} torn"
                if present
                else f"{' and '.join(STATE_FILES)} are missing"
            )
            raise damaged(
                folder,
                f"{what}, and the last commit (counters, random state) is in no other file",
                "restore them from a backup, or start a new campaign",
            )
        raise InputError(
            f"campaign {folder} has no whole state file ({' or '.join(STATE_FILES)}): its start "
            f"was interrupted before the seeds were committed; delete {folder} and start again"
        )
    commit, payload = newest
    arrays = _payload(folder, newest)
    notes = []
    state = json.loads(str(arrays["state"]))
    shown = (meta.get("state") or {}).get("step", 0)  # campaign.json never runs ahead of the state files
    if shown > state["step"]:
        notes.append(
            f"{STATE_FILES[(commit + 1) % 2]} is missing or torn: the campaign was read at step "
            f"{state['step']} (the commit before; campaign.json shows step {shown}); "
            "resuming redoes the steps after it"
        )
    elif STATE_FILES[(commit + 1) % 2] in torn_states(folder):  # an interrupted run: campaign.json is older
        notes.append(
            f"{STATE_FILES[(commit + 1) % 2]} is torn (cut short while it was written: a kill or a full "
            f"disk): the campaign was read at step {state['step']}, the commit before; resuming redoes "
            "the steps after it"
        )
    return commit, arrays, notes


# ---- step files -----------------------------------------------------------------------------------
def step_files(folder: Path, kind: str, last_step: int, repair: bool) -> list[tuple[Path, dict]]:
    """(path, arrays) of ``kind/step-*.npz`` up to the committed step, in step order; with ``repair``,
    files of later steps (written after the last commit) are deleted unread."""
    found = []
    for path in (folder / kind).glob("step-*.npz"):
        try:
            found.append((int(path.stem.split("-")[1]), path))
        except (IndexError, ValueError):
            continue  # not a name idcgen writes
    parts = []
    for step, path in sorted(found):
        if step > last_step:
            if repair:
                path.unlink()
            continue
        try:
            with np.load(path) as arrays:
                part = {k: arrays[k] for k in arrays.files}
            part["id"]
        except UNREADABLE as exc:
            raise damaged(folder, f"{kind}/{path.name} is unreadable ({_why(exc)})") from None
        parts.append((path, part))
    return parts


def check_ids(folder: Path, kind: str, parts: list, committed: int) -> None:
    """Ids run 0, 1, ... over the step files up to the committed count; a gap is a missing file,
    named by the log rows of the missing ids when the log still has them."""
    noun = "corpus entries" if kind == "corpus" else "findings"
    expected, after = 0, None
    for path, part in parts:
        ids = np.asarray(part["id"]).astype(np.int64)
        if len(ids) == 0:
            continue
        if ids[0] > expected:
            raise _missing(folder, kind, noun, expected, int(ids[0]), after)
        if not np.array_equal(ids, np.arange(expected, expected + len(ids))):
            raise damaged(
                folder,
                f"{kind}/{path.name} holds {noun} {int(ids[0])}-{int(ids[-1])}, expected from "
                f"{expected} on (the folder holds files of another run)",
            )
        expected += len(ids)
        after = path.name
    if expected < committed:
        raise _missing(folder, kind, noun, expected, committed, after)
    if expected > committed:
        raise damaged(
            folder, f"{kind}/ holds {expected} {noun} up to the committed step, the state committed {committed}"
        )


def _missing(folder: Path, kind: str, noun: str, first: int, end: int, after: str | None) -> CampaignDamaged:
    log = folder / ("manifest.jsonl" if kind == "corpus" else "findings.jsonl")
    steps = sorted({row["step"] for row in _lenient_rows(log) if first <= row.get("id", -1) < end and "step" in row})
    ids = f"{first}" if end - first == 1 else f"{first}-{end - 1}"
    if steps:
        names = ", ".join(f"{kind}/step-{s:06d}.npz" for s in steps)
        what = f"{names} {'is' if len(steps) == 1 else 'are'} missing ({end - first} committed {noun}, ids {ids})"
    else:
        what = (
            f"{end - first} committed {noun} (ids {ids}) are in no step file "
            f"({'after ' + after if after else 'the first'} step file is missing)"
        )
    return damaged(folder, what)


def _lenient_rows(path: Path) -> list[dict]:
    """The rows of a log that still parse (only used to name what is missing)."""
    rows: list[dict] = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return rows
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


# ---- logs -----------------------------------------------------------------------------------------
def log_problem(path: Path, committed: tuple | None, rows: int) -> tuple[str | None, bytes]:
    """(what is wrong with the committed part of a log or None, its committed bytes)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return "is missing", b""
    except OSError as exc:
        return f"is unreadable ({_why(exc)})", b""
    if committed is not None:  # the length and checksum at the last commit
        size, crc = committed
        if len(data) < size:
            return ("is empty" if not data else f"is truncated ({len(data)} of {size} committed bytes)"), b""
        if zlib.crc32(data[:size]) != crc:
            return "does not match its committed checksum (changed after it was written)", b""
        return None, data[:size]
    lines = data.split(b"\n")  # a campaign of an earlier idcgen: only the row count was committed
    if len(lines) <= rows:
        return f"is truncated ({len(lines) - 1} of {rows} committed rows)", b""
    return None, b"\n".join(lines[:rows]) + b"\n" if rows else b""


def parse_rows(data: bytes) -> list[dict] | None:
    """The rows of a log's committed part; None if they do not parse (then the log is damaged)."""
    try:
        return [json.loads(line) for line in data.decode().splitlines()]
    except (ValueError, UnicodeDecodeError):
        return None


def minimal_stats(state: dict, corpus_parts: list, finding_parts: list) -> list[dict]:
    """What ``stats.jsonl`` can be rebuilt as from the committed files: the seeds' row (their IDC from
    their combinations) and the last committed step's (from the state), each marked ``rebuilt``."""
    seeds = [p for _, p in corpus_parts if len(p["id"]) and int(np.asarray(p["step"]).min()) == 0]
    combos = np.concatenate([p["combination"][p["step"] == 0] for p in seeds]) if seeds else np.zeros(0)
    covered = int(len(np.unique(combos)))
    total = max(int(state.get("total", 1)), 1)
    rows = [
        {
            "step": 0,
            "time": 0.0,
            "execs": 0,
            "execs_per_s": 0.0,
            "corpus": int(len(combos)),
            "idc": covered / total,
            "covered": covered,
            "findings": 0,
            "unique_pairs": 0,
            "mutator": None,
            "seconds": 0.0,
            "rebuilt": True,
        }
    ]
    if state["step"] > 0:
        pairs = {
            (float(a), float(b))
            for _, p in finding_parts
            if "label" in p and "prediction" in p  # floats: regression
            for a, b in zip(p["label"], p["prediction"])
        }
        elapsed = float(state.get("elapsed_seconds", 0.0))
        row = {
            "step": state["step"],
            "time": round(elapsed, 4),
            "execs": state["execs"],
            "execs_per_s": round(state["execs"] / elapsed, 1) if elapsed > 0 else 0.0,
            "corpus": state["corpus"],
            "idc": state["idc"],
            "covered": state["covered"],
            "findings": state["findings"],
            "unique_pairs": len(pairs),
            "mutator": None,
            "seconds": 0.0,
        }
        row.update({f"{name}_coverage": c["score"] for name, c in state.get("coverage", {}).items() if name != "idc"})
        rows.append(dict(row, rebuilt=True))
    return rows


# ---- repairs (writer lock held) ---------------------------------------------------------------------
def truncate(path: Path, size: int) -> None:
    """Cut a log back to its committed ``size`` bytes (after a kill it may end in half a row)."""
    if path.stat().st_size != size:
        with open(path, "r+b") as handle:
            handle.truncate(size)


def rewrite(path: Path, text: str) -> tuple[int, int]:
    """Write a rebuilt log; returns its (length, checksum) for the state."""
    data = text.encode()
    atomic_text(path, text)
    return len(data), zlib.crc32(data)


def tidy(folder: Path) -> list[str]:
    """Remove what interrupted writes leave behind: temporary files (``.NAME.tmp``) and torn PNG
    previews (rewritten when the run ends); make missing preview folders. Returns notes."""
    notes = []
    for sub in ("", "corpus", "findings", "corpus/png", "findings/png", "exports"):
        remove_temporaries(folder / sub)
    for sub in ("corpus/png", "findings/png"):
        png = folder / sub
        if not png.is_dir():
            png.mkdir(parents=True, exist_ok=True)
            notes.append(f"{sub}/ was missing: its previews are rewritten when this run ends")
            continue
        torn = [p for p in png.glob("*.png") if not _whole_png(p)]
        for path in torn:
            path.unlink()
        if torn:
            notes.append(f"removed {len(torn)} torn PNG previews from {sub}/: rewritten when this run ends")
    return notes


def _whole_png(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            if handle.tell() < 8 + len(PNG_END):
                return False
            handle.seek(-len(PNG_END), 2)
            return handle.read() == PNG_END
    except OSError:
        return False
