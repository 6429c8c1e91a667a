"""Where the drainer reads each partition from, and when it refuses (DESIGN invariant 13):
:func:`~exactlyonce.buffer.drain.positions.check_positions` over partitions whose starts and
ends are given (the broker's answers are the integration tests' business:
tests/integration/test_buffer_expiry.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from exactlyonce.buffer.drain import positions
from exactlyonce.errors import ConfigError, ExpiredRecordsError
from exactlyonce.retry import RetryPolicy

TOPIC = "buf"


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> dict[int, tuple[int, int]]:
    """partition -> (start, end), as the checks read them."""
    parts: dict[int, tuple[int, int]] = {}
    monkeypatch.setattr(positions, "log_start_offset", lambda _c, _t, p, _s: parts[p][0])
    monkeypatch.setattr(
        positions, "exact_end_offsets", lambda _c, _t, ps, _s: {p: parts[p][1] for p in ps}
    )
    return parts


def check(
    stored: Mapping[int, int], origin: Mapping[int, int] | None, parts: dict[int, Any]
) -> dict[int, int]:
    return positions.check_positions(None, TOPIC, sorted(parts), stored, {}, origin, 1.0)


def test_stored_offsets_inside_the_partitions_are_where_the_drain_goes_on(
    broker: dict[int, tuple[int, int]],
) -> None:
    broker.update({0: (0, 50), 1: (20, 60)})
    assert check({0: 10, 1: 20}, None, broker) == {0: 10, 1: 20}


def test_a_stored_offset_below_the_start_names_the_lost_range(
    broker: dict[int, tuple[int, int]],
) -> None:
    broker.update({0: (0, 50), 1: (30, 60)})
    with pytest.raises(ExpiredRecordsError) as err:
        check({0: 10, 1: 20}, {0: 0, 1: 0}, broker)
    e = err.value
    assert (e.topic, e.partition, e.first, e.last, e.field) == (TOPIC, 1, 20, 29, "buffer.topic")
    assert "records 20..29 of buf[1] expired" in str(e) and "--reset-offsets" in str(e)


@pytest.mark.parametrize(
    ("origin", "lost"),
    [
        ({0: 0, 1: 0}, (0, 14)),  # the query's records began at 0
        ({0: 0, 1: 5}, (5, 14)),  # ... at 5: 5..14 were the query's
        ({0: 0}, (0, 14)),  # partition 1 came after the head: its records begin at 0
        ({}, (0, 14)),  # a head written before origins were kept: 0 (fail closed)
    ],
)
def test_a_never_drained_partition_is_checked_against_the_heads_origin(
    broker: dict[int, tuple[int, int]], origin: dict[int, int] | None, lost: tuple[int, int]
) -> None:
    broker.update({0: (0, 50), 1: (15, 60)})
    with pytest.raises(ExpiredRecordsError) as err:
        check({0: 10}, origin, broker)
    assert (err.value.partition, err.value.first, err.value.last) == (1, *lost)
    assert "before the partition was first drained" in str(err.value)


def test_records_below_the_origin_are_not_the_querys_the_drain_starts_at_the_start(
    broker: dict[int, tuple[int, int]],
) -> None:
    """A topic with older records (another query's, an earlier life's) that expired: nothing
    of this query is lost; the partition is read from its start, not from 0 (its reader
    refuses a read below the start)."""
    broker.update({0: (0, 50), 1: (15, 60), 2: (0, 0)})
    assert check({0: 10}, {0: 0, 1: 15, 2: 0}, broker) == {0: 10, 1: 15}
    assert check({0: 10}, {0: 0, 1: 40, 2: 0}, broker) == {0: 10, 1: 15}
    assert check({}, None, broker) == {1: 15}, "no head yet: the query wrote nothing"


def test_stored_offsets_past_the_end_or_of_a_missing_partition_are_refused(
    broker: dict[int, tuple[int, int]],
) -> None:
    broker.update({0: (0, 50)})
    with pytest.raises(ConfigError, match="past the end") as past:
        check({0: 51}, None, broker)
    assert not isinstance(past.value, ExpiredRecordsError)
    with pytest.raises(ConfigError, match="no such partition"):
        check({0: 1, 3: 5}, None, broker)


def test_an_expired_range_is_never_retried() -> None:
    """The drain stops with it: the retry policy treats it as a configuration error."""
    from exactlyonce.buffer.drain.retries import drain_retry_policy

    policy: RetryPolicy = drain_retry_policy(0.01)
    calls = []

    def expire() -> None:
        calls.append(1)
        raise positions.expired(TOPIC, 0, 3, 9, "before the partition was first drained")

    with pytest.raises(ExpiredRecordsError):
        policy.replace(deadline_s=5).call(expire)
    assert calls == [1]
