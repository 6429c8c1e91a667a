"""Frames: how a buffer topic packs many records into one Kafka message, and unpacks them.

A buffer message is either one record (its ID in the ``eo-record-id`` header) or a FRAME of
up to ``frame_records`` records: their JSON values one per line (JSON text has no raw line
break), their IDs concatenated in the ``eo-record-ids`` header, 32 hex digits each, in the
same order. The Kafka sink's shard task packs them (:func:`frame_bounds`, :func:`pack`); the
drainer and every drain target unpack them (:func:`split_ids`, the problems that make a
message or a value a dead letter, :class:`FrameRecord` for one record of a frame). One module
for both sides, so the wire format cannot drift. Pure logic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

H_RECORD_ID = "eo-record-id"
H_RECORD_IDS = "eo-record-ids"  # frames (a buffer's messages): every record's ID, 32 bytes each
RECORD_ID_BYTES = 32


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


H_FRAME_INDEX = "eo-frame-index"  # a dead letter from a frame: the record's place in it
HEX_DIGITS = b"0123456789abcdefABCDEF"


def valid_record_id(value: bytes | None) -> bool:
    """32 hex digits (the sink's record IDs)."""
    return value is not None and len(value) == 32 and not value.translate(None, HEX_DIGITS)


def split_ids(blob: bytes) -> list[bytes]:
    """A frame's ``eo-record-ids`` header as its records' IDs, in order."""
    return [blob[i : i + RECORD_ID_BYTES] for i in range(0, len(blob), RECORD_ID_BYTES)]


class FrameRecord:
    """One record of a frame, shaped like the Kafka message it came from (for dead letters):
    its own value and ``eo-record-id``, and its place in the frame (``eo-frame-index``)."""

    __slots__ = ("frame", "index", "record_id", "line")

    def __init__(self, frame: Any, index: int, record_id: bytes, line: bytes) -> None:
        self.frame, self.index, self.record_id, self.line = frame, index, record_id, line

    def topic(self) -> str:
        return str(self.frame.topic())

    def partition(self) -> int:
        return int(self.frame.partition())

    def offset(self) -> int:
        return int(self.frame.offset())

    def key(self) -> bytes | None:
        return self.frame.key()  # type: ignore[no-any-return]

    def value(self) -> bytes:
        return self.line

    def headers(self) -> list[tuple[str, bytes]]:
        kept = [(k, v) for k, v in self.frame.headers() or [] if k != H_RECORD_IDS]
        return [
            *kept,
            (H_RECORD_ID, self.record_id),
            (H_FRAME_INDEX, str(self.index).encode()),
        ]


def ids_problem(frame: bool, ids: Any, value: Any) -> str | None:
    """Why a message's record IDs (and, for a frame, its lines) do not hold together."""
    if not frame:
        if ids is None:
            return f"missing record-ID header ({H_RECORD_ID})"
        if not isinstance(ids, bytes) or not valid_record_id(ids):
            return f"malformed record-ID header ({H_RECORD_ID})"
        return None
    if (
        not isinstance(ids, bytes)
        or not ids
        or len(ids) % RECORD_ID_BYTES
        or ids.translate(None, HEX_DIGITS)
    ):
        return f"malformed record-IDs header ({H_RECORD_IDS}): not 32 hex digits per record"
    if not isinstance(value, bytes):
        return "a frame without a value"
    lines = value.count(b"\n") + 1
    if lines != len(ids) // RECORD_ID_BYTES:
        return (
            f"malformed frame: {len(ids) // RECORD_ID_BYTES} record IDs ({H_RECORD_IDS}) but "
            f"{lines} lines of values"
        )
    return None


def value_problem(value: bytes | None) -> str | None:
    """Why a value cannot be a row (cheap checks; PostgreSQL parses the JSON itself)."""
    if value is None:
        return "no value (a tombstone)"
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"undecodable value: not valid UTF-8 ({exc.reason} at byte {exc.start})"
    body = value.strip()
    if not body.startswith(b"{") or not body.endswith(b"}"):
        return "undecodable value: not a JSON object"
    if b"\x00" in body:
        return "undecodable value: contains a NUL byte"
    return None


__all__ = [
    "H_FRAME_INDEX",
    "H_RECORD_ID",
    "H_RECORD_IDS",
    "HEX_DIGITS",
    "RECORD_ID_BYTES",
    "FrameRecord",
    "frame_bounds",
    "frame_partition",
    "ids_problem",
    "pack",
    "single_headers",
    "split_ids",
    "valid_record_id",
    "value_problem",
]
