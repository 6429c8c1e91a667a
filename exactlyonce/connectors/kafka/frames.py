"""Frames: how a buffer topic packs many records into one Kafka message.

A frame holds up to ``frame_records`` records: their values one per line (JSON text has no
raw line break) and, in the ``eo-record-ids`` header, their IDs, 32 bytes each, in the same
order (see :mod:`.reader`). Frames go round-robin over the topic's partitions. Pure logic:
the shard task produces what these functions pack.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from exactlyonce.connectors.kafka.protocol import H_RECORD_IDS, RECORD_ID_BYTES


def frame_bounds(values: Sequence[bytes], records: int, budget: int) -> list[tuple[int, int]]:
    """Consecutive ``[start, end)`` frames of at most ``records`` records whose values and
    IDs (a line break and 32 bytes each) stay within ``budget`` bytes; a record larger than
    the budget is a frame of its own."""
    bounds: list[tuple[int, int]] = []
    start, size = 0, 0
    for i, value in enumerate(values):
        length = len(value) + 1 + RECORD_ID_BYTES
        if i > start and (i - start >= records or size + length > budget):
            bounds.append((start, i))
            start, size = i, 0
        size += length
    if start < len(values):
        bounds.append((start, len(values)))
    return bounds


def pack(values: Sequence[bytes], ids: Sequence[bytes]) -> tuple[bytes, tuple[str, bytes]]:
    """One frame's message value and its ``eo-record-ids`` header."""
    return b"\n".join(values), (H_RECORD_IDS, b"".join(ids))


def frame_partition(shard: int, frames_before: int, partitions: int) -> int:
    """The partition of a task's next frame (``-1``: the client picks, when the topic's
    partition count is unknown).

    Round-robin from one that depends on the shard: a keyless message's partition is the
    client's sticky choice, which put a task's frames all in one partition, and the
    drainer's writers (and processes) each own some of the partitions.
    """
    if partitions <= 0:
        return -1
    return (shard + frames_before + 1) % partitions


def single_headers(base: list[Any], record_id: bytes) -> list[Any]:
    """The headers of a record sent as a frame of one (it did not fit in a larger frame)."""
    return [*base, (H_RECORD_IDS, record_id)]
