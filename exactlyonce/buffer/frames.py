"""Frames: how a buffer message carries its records, and the checks that they hold together.

A buffer message is either one record (its ID in the ``eo-record-id`` header) or a FRAME of up
to ``frame_records`` records (see :mod:`exactlyonce.buffer.buffered`): their JSON values one
per line, their IDs concatenated in the ``eo-record-ids`` header, 32 hex digits each. This
module splits a frame's IDs, says why a message's IDs or a value cannot be rows (a dead
letter's reason), and shapes one record of a frame like a Kafka message
(:class:`FrameRecord`) so it can be dead-lettered on its own.
"""

from __future__ import annotations

from typing import Any

from exactlyonce.connectors.kafka.reader import H_RECORD_ID, H_RECORD_IDS, RECORD_ID_BYTES

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
    "HEX_DIGITS",
    "FrameRecord",
    "ids_problem",
    "split_ids",
    "valid_record_id",
    "value_problem",
]
