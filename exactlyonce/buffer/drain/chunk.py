"""One chunk of the buffer: the records of confirmed attempts over a range of offsets.

Reading a chunk is recipe steps 2-3 of :mod:`exactlyonce.connectors.kafka.reader`: a record
is accepted only if its attempt is confirmed on the control topic (brokers such as Tansu
still deliver aborted records); others are counted as skipped. Accepted messages are kept
column-wise (a frame, or a message of one record: see :mod:`exactlyonce.connectors.base.frames`);
messages whose record IDs do not hold together are kept aside, with why, for the dead-letter
topic. A frame is split into its records only on the exact path (:meth:`Chunk.rows_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exactlyonce.buffer.tuning import gc_paused
from exactlyonce.connectors.base.drain import Chunk
from exactlyonce.connectors.base.frames import ids_problem
from exactlyonce.connectors.kafka.reader import (
    H_COMPACT,
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


def read_chunk(
    reader: RangeReader, commits: Commits, starts: Mapping[int, int], ends: Mapping[int, int]
) -> Chunk:
    """Recipe steps 2-3 over ``[starts, ends)``: the records of confirmed attempts.

    The recipe's verdict is asked once per (query, epoch, shard, attempt) of the chunk:
    every record below the frontier was written before its confirmation, which was folded
    in before the head that put it below the frontier. A record as the sink writes it has
    one ``eo`` header (wire format 1), whose value up to the record ID is the key of that
    verdict; a frame (or a record of wire format 0) has exactly five headers, the record
    ID(s) last, and its first four are the key.
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
            if h is not None and len(h) == 1 and h[0][0] == H_COMPACT:  # wire format 1
                compact = h[0][1]
                key = compact[:-RECORD_ID_BYTES]
                epoch = verdicts.get(key, _UNKNOWN)
                if epoch is _UNKNOWN:
                    epoch = verdicts[key] = verdict(commits, msg)
                name, found = H_RECORD_ID, compact[-RECORD_ID_BYTES:]
            elif h is not None and len(h) == 5 and h[4][0] in _ID_HEADERS:
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
