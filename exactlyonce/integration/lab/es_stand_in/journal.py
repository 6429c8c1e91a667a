"""The stand-in's durability (``--data DIR``): an append-only journal of records, each framed
(length, CRC-32, pickle) and fsynced before the reply that acknowledges it; read back at start,
where a record cut short by a kill is recognised and cut off (it was never acknowledged).

Elasticsearch keeps an acknowledged write through a crash with its translog, fsynced per request
by default (``index.translog.durability: request``); this journal gives the stand-in the same
promise, so chaos can SIGKILL it and start it again as it does a genuine server. What the
records hold (states, not requests) and how they are replayed is the server's
(:meth:`~.server.EsTestServer._persist`, :func:`~.server.restore`); this module only keeps them.
"""

from __future__ import annotations

import os
import pickle
import struct
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

FILE = "journal.bin"
_FRAME = struct.Struct(">II")  # payload length, CRC-32 of the payload

Record = tuple[Any, ...]


def _frame(record: Record) -> bytes:
    payload = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


class Journal:
    """The journal file under ``directory`` (created if missing)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / FILE
        self.path.touch()
        self._file = self.path.open("ab")

    def append(self, records: Iterable[Record]) -> None:
        """Write ``records`` and fsync them: once this returns they survive a SIGKILL."""
        frames = b"".join(_frame(record) for record in records)
        if not frames:
            return
        self._file.write(frames)
        self._file.flush()
        os.fsync(self._file.fileno())

    def records(self) -> Iterator[Record]:
        """Every whole record, in order; a torn last one is cut off the file."""
        data = self.path.read_bytes()
        at = 0
        while at + _FRAME.size <= len(data):
            length, crc = _FRAME.unpack_from(data, at)
            payload = data[at + _FRAME.size : at + _FRAME.size + length]
            if len(payload) < length or zlib.crc32(payload) != crc:
                break
            yield pickle.loads(payload)
            at += _FRAME.size + length
        if at < len(data):  # a record torn by a kill: never acknowledged
            with self.path.open("r+b") as f:
                f.truncate(at)

    def rewrite(self, records: Iterable[Record]) -> None:
        """Replace the journal by ``records``: a new file, fsynced, renamed over the old."""
        staging = self.path.with_name(self.path.name + ".compacting")
        with staging.open("wb") as out:
            for record in records:
                out.write(_frame(record))
            out.flush()
            os.fsync(out.fileno())
        self._file.close()
        staging.replace(self.path)
        self._file = self.path.open("ab")

    def close(self) -> None:
        self._file.close()
