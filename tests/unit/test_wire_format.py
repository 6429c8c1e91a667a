"""The Kafka sink's record header, wire format 1, as pure logic: one ``eo`` header carries
what wire format 0 spread over five, a reader gets the five back, and a value it does not
know is refused rather than skipped (a skipped record would be lost)."""

from __future__ import annotations

from typing import Any

import pytest

from exactlyonce.connectors.kafka.reader import (
    H_ATTEMPT,
    H_COMPACT,
    H_EPOCH,
    H_QUERY,
    H_RECORD_ID,
    H_SHARD,
    compact_prefix,
    expand_compact,
    headers_of,
)
from exactlyonce.errors import WireFormatError

RID = b"0123456789abcdef0123456789abcdef"


class _Message:
    def __init__(self, headers: Any) -> None:
        self._headers = headers

    def headers(self) -> Any:
        return self._headers


@pytest.mark.parametrize("query", ["orders", "a|b|c", "ünïcode", "x|"])
def test_the_compact_header_gives_back_the_five_fields(query: str) -> None:
    value = compact_prefix(query, 12, 3, "00ff00ff00ff00ff") + RID
    assert expand_compact(value) == {
        H_QUERY: query.encode(),
        H_EPOCH: b"12",
        H_SHARD: b"3",
        H_ATTEMPT: b"00ff00ff00ff00ff",
        H_RECORD_ID: RID,
    }


def test_the_record_id_is_the_last_32_bytes_after_a_bar() -> None:
    value = compact_prefix("q", 0, 1, "aa") + RID
    assert value == b"1|0|1|aa|q|" + RID
    assert value[-32:] == RID


@pytest.mark.parametrize(
    "value",
    [
        b"2|0|1|aa|q|" + RID,  # a newer format
        b"",
        b"1|0|1|aa|q" + RID,  # no bar before the ID
        b"1|0|1|q|" + RID,  # a field missing
        RID,
    ],
)
def test_a_value_it_does_not_know_is_refused(value: bytes) -> None:
    with pytest.raises(WireFormatError):
        expand_compact(value)


def test_headers_of_reads_both_formats_alike() -> None:
    five = [
        (H_QUERY, b"q"),
        (H_EPOCH, b"7"),
        (H_SHARD, b"0"),
        (H_ATTEMPT, b"ab"),
        (H_RECORD_ID, RID),
    ]
    one = [(H_COMPACT, compact_prefix("q", 7, 0, "ab") + RID)]
    assert headers_of(_Message(one)) == headers_of(_Message(five)) == dict(five)


def test_other_headers_are_kept_beside_the_compact_one() -> None:
    one = [(H_COMPACT, compact_prefix("q", 7, 0, "ab") + RID), ("trace", "t-1")]
    assert headers_of(_Message(one))["trace"] == b"t-1"
