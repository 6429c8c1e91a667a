"""The buffer's frames, as pure logic: how records are packed, and how a frame's records
are told apart again (IDs, lines, a record's own dead-letter headers)."""

from __future__ import annotations

from typing import Any

import pytest

from exactlyonce.connectors.base.frames import H_FRAME_INDEX, FrameRecord, ids_problem
from exactlyonce.connectors.kafka import frame_bounds
from exactlyonce.connectors.kafka.buffer_config import KafkaBuffer
from exactlyonce.connectors.kafka.reader import H_RECORD_ID, H_RECORD_IDS, record_ids_of
from exactlyonce.errors import ConfigError

RID = [(f"{i:x}" * 32)[:32].encode() for i in range(16)]


def test_frames_hold_at_most_records_and_budget() -> None:
    values = [b"x" * 10] * 10  # each: 10 + 1 + 32 = 43 bytes
    assert frame_bounds(values, 4, 10_000) == [(0, 4), (4, 8), (8, 10)]
    assert frame_bounds(values, 100, 43 * 3) == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert frame_bounds(values, 1, 10_000) == [(i, i + 1) for i in range(10)]
    assert frame_bounds([], 10, 100) == []


def test_a_record_larger_than_the_budget_is_a_frame_of_its_own() -> None:
    values = [b"a", b"b" * 500, b"c", b"d"]
    assert frame_bounds(values, 100, 200) == [(0, 1), (1, 2), (2, 4)]


def test_every_record_is_in_exactly_one_frame_in_order() -> None:
    values = [b"v" * (i % 7 * 13) for i in range(1000)]
    bounds = frame_bounds(values, 37, 700)
    flat = [i for start, end in bounds for i in range(start, end)]
    assert flat == list(range(1000))
    for start, end in bounds:
        assert end - start <= 37
        size = sum(len(v) + 33 for v in values[start:end])
        assert size <= 700 or end - start == 1


def test_record_ids_of_one_record_or_a_frame() -> None:
    assert record_ids_of({H_RECORD_ID: RID[0]}) == [RID[0]]
    assert record_ids_of({H_RECORD_IDS: RID[1] + RID[2] + RID[3]}) == RID[1:4]
    assert record_ids_of({"eo-epoch": b"1"}) == []


@pytest.mark.parametrize(
    ("frame", "ids", "value", "problem"),
    [
        (False, RID[0], b"{}", None),
        (False, None, b"{}", "missing record-ID header"),
        (False, b"xyz", b"{}", "malformed record-ID header"),
        (True, RID[0] + RID[1], b"{}\n{}", None),
        (True, RID[0] + RID[1], b"{}", "2 record IDs (eo-record-ids) but 1 lines"),
        (True, RID[0] + b"short", b"{}\n{}", "malformed record-IDs header"),
        (True, b"g" * 32, b"{}", "malformed record-IDs header"),
        (True, b"", b"", "malformed record-IDs header"),
        (True, RID[0], None, "a frame without a value"),
    ],
)
def test_ids_problem(frame: bool, ids: Any, value: Any, problem: str | None) -> None:
    found = ids_problem(frame, ids, value)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found


class _Message:
    def __init__(self, headers: list[tuple[str, bytes]], value: bytes) -> None:
        self._headers, self._value = headers, value

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers

    def value(self) -> bytes:
        return self._value

    def key(self) -> None:
        return None

    def topic(self) -> str:
        return "buf"

    def partition(self) -> int:
        return 3

    def offset(self) -> int:
        return 41


def test_a_frame_record_looks_like_a_message_of_its_own() -> None:
    frame = _Message([("eo-epoch", b"5"), (H_RECORD_IDS, RID[0] + RID[1])], b"{}\n{}")
    record = FrameRecord(frame, 1, RID[1], b'{"a": 1}')
    assert record.value() == b'{"a": 1}'
    assert (record.topic(), record.partition(), record.offset()) == ("buf", 3, 41)
    assert record.headers() == [
        ("eo-epoch", b"5"),
        (H_RECORD_ID, RID[1]),
        (H_FRAME_INDEX, b"1"),
    ]


@pytest.mark.parametrize("field", ["frame_records", "frame_bytes"])
@pytest.mark.parametrize("bad", [0, -1, "10", True])
def test_frame_settings_are_checked_by_name(field: str, bad: Any) -> None:
    with pytest.raises(ConfigError, match=field):
        KafkaBuffer(topic="t", bootstrap_servers="k:9092", **{field: bad})
