"""The Redis drain's two ways of encoding a share (no service needed): the column-wise fast
path (Arrow) writes exactly the chunks the record-by-record exact path writes, and hands every
share it cannot write exactly to the exact path, which finds and names the bad records."""

from __future__ import annotations

import json
from typing import Any

import pytest

from exactlyonce.connectors.base.drain import Chunk
from exactlyonce.connectors.redis import RedisSink
from exactlyonce.connectors.redis.drain_fast import fast_share
from exactlyonce.connectors.redis.drain_records import exact_share
from exactlyonce.dedup.ids import record_id

CATALOG = "redis://catalog.example:6379/0"


def sink(write: str, template: str = "ev:{event_id}") -> RedisSink:
    return RedisSink(
        "redis://cache.example:6379/0",
        template,
        ["event_id"],
        "q",
        write=write,  # type: ignore[arg-type]
        pipeline_size=7,
        redis_url=CATALOG,
        check=False,
    )


def chunk_of(frames: list[list[dict[str, Any] | bytes]]) -> Chunk:
    """A chunk of frames (lists of records: a dict is JSON-encoded, bytes go as they are)."""
    chunk = Chunk({0: 0}, {0: len(frames)})
    n = 0
    for epoch, records in enumerate(frames):
        lines = [r if isinstance(r, bytes) else json.dumps(r).encode() for r in records]
        ids = [record_id([f"e{n + k}"]).encode() for k in range(len(lines))]
        n += len(lines)
        chunk.messages.append(None)
        chunk.ids.append(b"".join(ids))
        chunk.epochs.append(epoch)
        chunk.values.append(b"\n".join(lines))
        chunk.partitions.append(0)
        chunk.counts.append(len(lines))
        chunk.frames.append(True)
    return chunk


def events(start: int, end: int) -> list[dict[str, Any] | bytes]:
    return [
        {
            "event_id": f"e{i}",
            "amount": 10 * i - 50,
            "action": None if i % 3 else "click",
            "ok": i % 2 == 0,
            "note": 'quotes " \\ ünï ✓',
        }
        for i in range(start, end)
    ]


@pytest.mark.parametrize("write", ["hash", "string", "stream"])
def test_the_fast_path_writes_what_the_exact_path_writes(write: str) -> None:
    template = "ev:{note}" if write == "stream" else "ev:{event_id}"
    chunk = chunk_of([events(0, 10), events(10, 13), events(13, 30)])
    where = [0, 1, 2]
    fast = fast_share(sink(write, template), chunk, where)
    exact = exact_share(sink(write, template), chunk, where)
    assert fast is not None, "ints, booleans, strings and nulls: the fast path holds"
    assert (fast.chunks, fast.fields, fast.records) == (exact.chunks, exact.fields, exact.records)
    assert fast.records == 30 and len(fast.chunks) == 5, "pipeline_size records a chunk"
    first = json.loads(fast.chunks[0])
    assert first[4] == ["0"] * 7, "each record's own epoch"
    if write != "string":
        assert fast.fields == ["event_id", "amount", "action", "ok", "note"]
        assert first[3][1][:2] == ["-50", "-40"] and first[3][3][:2] == ["true", "false"]


@pytest.mark.parametrize(
    ("records", "why"),
    [
        ([{"event_id": "e0", "ratio": 0.5}], "a double: only its JSON text is exact"),
        ([{"event_id": "e0", "at": "2026-01-02 03:04:05"}], "a timestamp Arrow recognised"),
        ([{"event_id": "e0", "nested": {"a": 1}}], "nested values"),
        ([{"event_id": None, "amount": 1}], "a null key-template column"),
        ([b'{"event_id": "e0", "amount": ', b"[1, 2]"], "not JSON objects"),
    ],
)
def test_what_the_fast_path_leaves_to_the_exact_path(
    records: list[dict[str, Any] | bytes], why: str
) -> None:
    chunk = chunk_of([[{"event_id": "e9", "amount": 1}, *records]])
    assert fast_share(sink("hash"), chunk, [0]) is None, why
    exact = exact_share(sink("hash"), chunk, [0])
    assert exact.records + len(exact.letters) == 1 + len(records)


def test_the_exact_path_names_its_dead_letters_and_keeps_json_texts() -> None:
    chunk = chunk_of(
        [
            [
                {"event_id": None, "amount": 1},
                b"[1, 2]",
                b"\xff not utf-8",
                b'{"event_id": "e3", "ratio": 1.0E20, "big": 12345678901234567890, '
                b'"d": {"x": 1.5}}',
            ]
        ]
    )
    exact = exact_share(sink("hash"), chunk, [0])
    reasons = [why for _, why in exact.letters]
    assert reasons[0] == "null key template column(s): event_id"
    assert "not a JSON object" in reasons[1] and "UTF-8" in reasons[2]
    assert exact.records == 1
    body = json.loads(exact.chunks[0])[3]
    assert [column[0] for column in body] == [
        "e3",
        "1.0E20",
        "12345678901234567890",
        '{"x":1.5}',
    ], "numbers as the JSON text Spark wrote, nested values as compact JSON"
