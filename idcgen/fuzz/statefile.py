"""A campaign's state file: the commit point of a step, framed so that a torn write is recognised.

Two files take the commits in turn (``STATE_FILES[commit % 2]``); each holds a header (magic, commit
number, payload length, CRC-32 of the payload) and the payload. A kill while one is written leaves the
other whole, and :func:`read_state` takes the newest whole one.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

FORMAT_VERSION = 2
STATE_FILES = ("state-0", "state-1")
_STATE_HEADER = struct.Struct("<8sQQI")  # magic, commit number, payload length, CRC-32 of the payload
_STATE_MAGIC = b"IDCGSTAT"


def frame_state(commit: int, payload: bytes) -> bytes:
    """A state file's content: header (commit number, length, checksum), then the payload."""
    return _STATE_HEADER.pack(_STATE_MAGIC, commit, len(payload), zlib.crc32(payload)) + payload


def is_whole(data: bytes) -> bool:
    """Whether ``data`` is a whole state file: its header, its full payload and a matching checksum."""
    if len(data) < _STATE_HEADER.size:
        return False
    magic, _, length, crc = _STATE_HEADER.unpack_from(data)
    payload = data[_STATE_HEADER.size : _STATE_HEADER.size + length]
    return magic == _STATE_MAGIC and len(payload) == length and zlib.crc32(payload) == crc


def torn_states(folder: Path) -> list[str]:
    """The state files present but not whole (cut short while written: a kill, a full disk)."""
    torn = []
    for name in STATE_FILES:
        try:
            data = (folder / name).read_bytes()
        except OSError:
            continue
        if not is_whole(data):
            torn.append(name)
    return torn


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
        payload = data[_STATE_HEADER.size : _STATE_HEADER.size + length]
        if magic != _STATE_MAGIC or len(payload) != length or zlib.crc32(payload) != crc:
            continue  # half written when the process was killed: the other file holds the commit before
        if newest is None or commit > newest[0]:
            newest = (commit, payload)
    return newest
