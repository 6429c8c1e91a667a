"""One chunk of the buffer: the records of confirmed attempts over a range of offsets.

Reading a chunk is recipe steps 2-3 of :mod:`exactlyonce.connectors.kafka.reader`: a record
is accepted only if its attempt is confirmed on the control topic (brokers such as Tansu
still deliver aborted records); others are counted as skipped. Accepted messages are kept
column-wise (a frame, or a message of one record: see :mod:`exactlyonce.buffer.frames`);
messages whose record IDs do not hold together are kept aside, with why, for the dead-letter
topic. A frame is split into its records only on the exact path (:meth:`Chunk.rows_of`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from exactlyonce.buffer.drain.exact_path import DrainRow
from exactlyonce.buffer.frames import FrameRecord, ids_problem, split_ids, value_problem
from exactlyonce.buffer.tuning import gc_paused
from exactlyonce.connectors.kafka.reader import (
    H_EPOCH,
    H_RECORD_ID,
    H_RECORD_IDS,
    RECORD_ID_BYTES,
    Commits,
    RangeReader,
    headers_of,
)

_UNKNOWN = object()
_ID_HEADERS = (H_RECORD_IDS, H_RECORD_ID)


@dataclass
class Chunk:
    """What one read of the buffer returned: accepted messages (column-wise: a frame, or a
    message of one record), bad messages and new positions. ``ids[i]`` holds message i's
    record IDs, 32 bytes each; ``counts[i]`` how many."""

    starts: dict[int, int]
    ends: dict[int, int]
    messages: list[Any] = field(default_factory=list)
    ids: list[bytes] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    frames: list[bool] = field(default_factory=list)
    bad: list[tuple[Any, str]] = field(default_factory=list)
    read: int = 0  # records (a frame counts its records)
    skipped: int = 0

    @property
    def offsets(self) -> int:
        return sum(self.ends[p] - s for p, s in self.starts.items())

    def records(self, where: list[int]) -> Iterator[tuple[int, int, bytes, bytes]]:
        """``(i, k, record ID, value)`` of every record of the messages at ``where``: ``i``
        the message's position in the chunk, ``k`` the record's place in its frame (-1 for a
        message of one record). A frame is split into its lines and IDs here."""
        for i in where:
            if not self.frames[i]:
                yield i, -1, self.ids[i], self.values[i]
                continue
            lines = self.values[i].split(b"\n")
            for k, (line, rid) in enumerate(zip(lines, split_ids(self.ids[i]), strict=True)):
                yield i, k, rid, line

    def source(self, i: int, k: int, record_id: bytes, value: bytes) -> Any:
        """What a record of :meth:`records` is dead-lettered as: its message, or for a
        record of a frame a :class:`FrameRecord` (its own value, ID and place)."""
        return self.messages[i] if k < 0 else FrameRecord(self.messages[i], k, record_id, value)

    def rows_of(self, where: list[int]) -> tuple[list[DrainRow], list[tuple[Any, str]]]:
        """The records of the messages at ``where`` as rows for the exact path, and the values
        that cannot be a row at all (with why). A frame's records are looked at one by one."""
        rows, bad = [], []
        for i, k, rid, value in self.records(where):
            source = self.source(i, k, rid, value)
            problem = value_problem(value)  # the exact path: the precise look at every value
            if problem:
                bad.append((source, problem))
                continue
            rows.append(DrainRow(self.partitions[i], rid.lower(), self.epochs[i], value, source))
        return rows, bad


def read_chunk(
    reader: RangeReader, commits: Commits, starts: Mapping[int, int], ends: Mapping[int, int]
) -> Chunk:
    """Recipe steps 2-3 over ``[starts, ends)``: the records of confirmed attempts.

    The recipe's verdict is asked once per (query, epoch, shard, attempt) of the chunk:
    every record below the frontier was written before its confirmation, which was folded
    in before the head that put it below the frontier. A record as the sink writes it has
    exactly five headers, the record ID last: its first four are the key of that verdict.
    Anything else takes the general look (:func:`headers_of`). The cyclic garbage collector
    is paused meanwhile (:func:`~exactlyonce.buffer.tuning.gc_paused`).
    """
    with gc_paused():
        return _read_chunk(reader, commits, starts, ends)


def _read_chunk(
    reader: RangeReader, commits: Commits, starts: Mapping[int, int], ends: Mapping[int, int]
) -> Chunk:
    chunk = Chunk(dict(starts), dict(ends))
    verdicts: dict[Any, int | None] = {}  # attempt -> its epoch, or None
    messages, ids, epochs, counts = chunk.messages, chunk.ids, chunk.epochs, chunk.counts
    values, partitions, frames, bad = chunk.values, chunk.partitions, chunk.frames, chunk.bad
    ranges = {p: (s, ends[p]) for p, s in starts.items()}
    for batch in reader.read(ranges):
        msg: Any
        for msg in batch:  # one pass per message, inline: this is the drain's hot loop
            h: Any = msg.headers()
            if h is not None and len(h) == 5 and h[4][0] in _ID_HEADERS:
                key = (h[0], h[1], h[2], h[3])
                epoch = verdicts.get(key, _UNKNOWN)
                if epoch is _UNKNOWN:
                    epoch = verdicts[key] = verdict(commits, msg)
                name, found = h[4]
            else:
                epoch = verdict(commits, msg)
                named = dict(h or ())
                name = H_RECORD_IDS if H_RECORD_IDS in named else H_RECORD_ID
                found = named.get(name)
            frame = name == H_RECORD_IDS
            n = len(found) // RECORD_ID_BYTES if frame and isinstance(found, bytes) else 1
            chunk.read += n
            if epoch is None:
                chunk.skipped += n
                continue
            value = msg.value()
            problem = ids_problem(frame, found, value)
            if problem:
                bad.append((msg, problem))
                continue
            messages.append(msg)
            ids.append(found)
            epochs.append(epoch)  # type: ignore[arg-type]
            values.append(value)
            partitions.append(msg.partition())
            counts.append(n)
            frames.append(frame)
    return chunk


def verdict(commits: Commits, msg: Any) -> int | None:
    """The record's epoch if the recipe accepts it (its attempt is confirmed), else None."""
    headers = headers_of(msg)
    return int(headers[H_EPOCH]) if commits.accepts(headers) else None
