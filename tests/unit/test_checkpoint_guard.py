"""The checkpoint-reset guard fails closed (DESIGN invariants 9 and 13).

A start that cannot establish Spark's query id cannot tell a restart of the same checkpoint
from a deleted one. Over a head with committed epochs it must refuse: a deleted checkpoint
restarts at epoch 0 and every epoch would be skipped as already committed (silent loss).
Only a fresh head (nothing committed, bound to no query) may proceed, or a sink whose user
opted out explicitly (``allow_unknown_query_id``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pytest

from exactlyonce.connectors.base import NO_EPOCH, Head, spark_query_id
from exactlyonce.connectors.base.sink import refuse_another_checkpoint
from exactlyonce.errors import CheckpointResetError
from exactlyonce.testing import MemorySink, MemoryStore, run_in_process
from exactlyonce.testing.epochs import schema_of

RECORDS = [{"event_id": "a", "n": 1}, {"event_id": "b", "n": 2}]


def new_sink(store: MemoryStore, **kw: Any) -> MemorySink:
    return MemorySink(store, "events", ["event_id"], "clicks", shards=2, dedup=False, **kw)


# -- the rule ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "query_id"),
    [
        (Head(NO_EPOCH, None, 2), None),  # fresh, unbound: a first start without an id
        (Head(NO_EPOCH, "q-1", 2), "q-1"),
        (Head(4, "q-1", 2), "q-1"),  # a restart of the same checkpoint
        (Head(4, None, 2), "q-1"),  # an unbound head: the caller binds it (first bind wins)
    ],
)
def test_the_guard_passes_what_it_can_tell_apart(head: Head, query_id: str | None) -> None:
    refuse_another_checkpoint("memory:events", "clicks", head, query_id)


@pytest.mark.parametrize(
    ("head", "query_id", "why"),
    [
        (Head(4, "q-1", 2), "q-2", "written by Spark query q-1"),
        (Head(4, "q-1", 2), None, "query id cannot be established"),
        (Head(4, None, 2), None, "query id cannot be established"),
        (Head(NO_EPOCH, "q-1", 2), None, "query id cannot be established"),
    ],
)
def test_the_guard_refuses_what_it_cannot_tell_apart(
    head: Head, query_id: str | None, why: str
) -> None:
    with pytest.raises(CheckpointResetError, match=why) as refused:
        refuse_another_checkpoint("memory:events", "clicks", head, query_id)
    message = str(refused.value)
    assert "clicks" in message and "reset-head" in message
    if query_id is None:
        assert "allow_unknown_query_id" in message, "the message names the opt-out"


def test_the_opt_out_passes_an_unknown_id_but_never_a_different_one() -> None:
    refuse_another_checkpoint("memory:events", "clicks", Head(4, "q-1", 2), None, trust=True)
    with pytest.raises(CheckpointResetError):
        refuse_another_checkpoint("memory:events", "clicks", Head(4, "q-1", 2), "q-2", trust=True)


# -- through the protocol ----------------------------------------------------------------


def test_a_start_without_a_query_id_over_committed_epochs_is_refused() -> None:
    store = MemoryStore()
    run_in_process(new_sink(store), 0, RECORDS, query_id="q-1")
    attempts = sum(store.write_attempts.values())
    with pytest.raises(CheckpointResetError, match="query id cannot be established"):
        run_in_process(new_sink(store), 0, RECORDS, query_id=None)
    assert sum(store.write_attempts.values()) == attempts, "nothing written, nothing skipped"
    assert store.heads[("clicks", "memory:events")].epoch == 0


def test_a_fresh_head_proceeds_without_a_query_id_and_its_restart_is_refused() -> None:
    store = MemoryStore()
    sink = new_sink(store)
    run_in_process(sink, 0, RECORDS, query_id=None)
    run_in_process(sink, 1, [{"event_id": "c", "n": 3}], query_id=None)  # the same run goes on
    assert len(store.rows("events")) == 3
    with pytest.raises(CheckpointResetError, match="query id cannot be established"):
        run_in_process(new_sink(store), 0, RECORDS, query_id=None)  # a restart: which one?


def test_the_opt_out_restarts_without_a_query_id_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    run_in_process(new_sink(store), 0, RECORDS, query_id="q-1")
    with caplog.at_level(logging.WARNING, logger="exactlyonce"):
        report = run_in_process(
            new_sink(store, allow_unknown_query_id=True), 0, RECORDS, query_id=None
        )
    assert report.skipped
    assert any("allow_unknown_query_id" in r.getMessage() for r in caplog.records)


def test_the_opt_out_is_off_by_default() -> None:
    assert new_sink(MemoryStore()).config.allow_unknown_query_id is False


def test_a_start_whose_tasks_check_the_id_defers_the_guard_to_them() -> None:
    """The data source path: its driver sees the id only in a local checkpoint; its tasks
    see it always and refuse there (``ExactlyOnceStreamWriter.write``)."""
    store = MemoryStore()
    run_in_process(new_sink(store), 0, RECORDS, query_id="q-1")
    schema = schema_of(RECORDS)
    head = new_sink(store).start(schema, None, lambda: 2, checked_by_tasks=True)
    assert head == Head(0, "q-1", 2)
    with pytest.raises(CheckpointResetError):
        new_sink(store).start(schema, None, lambda: 2)


# -- where the id comes from -------------------------------------------------------------


@dataclass
class FakeQuery:
    id: str
    name: str | None


@dataclass
class FakeStreams:
    active: list[FakeQuery] = field(default_factory=list)


@dataclass
class ConnectSession:
    """A Spark Connect session as foreachBatch sees it on the server: no SparkContext."""

    streams: FakeStreams

    @property
    def sparkContext(self) -> Any:  # noqa: N802 (pyspark's name)
        raise AttributeError("Spark Connect has no SparkContext")


@dataclass
class FakeFrame:
    sparkSession: Any  # noqa: N815 (pyspark's name)


def connect_frame(*queries: FakeQuery) -> FakeFrame:
    return FakeFrame(ConnectSession(FakeStreams(list(queries))))


def test_under_spark_connect_the_only_active_query_is_this_one() -> None:
    assert spark_query_id(connect_frame(FakeQuery("q-1", None))) == "q-1"


def test_under_spark_connect_the_query_named_like_the_sink_is_this_one() -> None:
    frame = connect_frame(FakeQuery("q-1", "other"), FakeQuery("q-2", "clicks_out"))
    assert spark_query_id(frame, "clicks-out") == "q-2"
    assert spark_query_id(frame, "clicks_out") == "q-2"


def test_under_spark_connect_an_ambiguous_session_establishes_no_id() -> None:
    frame = connect_frame(FakeQuery("q-1", "a"), FakeQuery("q-2", None))
    assert spark_query_id(frame, "clicks") is None
    assert spark_query_id(connect_frame(), "clicks") is None


# -- fencing comes after the check -------------------------------------------------------


def fencing_sink(store: MemoryStore, fenced: list[Head]) -> MemorySink:
    sink = new_sink(store)
    sink._fence_earlier_writers = fenced.append  # type: ignore[method-assign]
    return sink


def test_earlier_writers_are_fenced_only_once_the_head_was_checked() -> None:
    """A second query under a live query_name is refused before it can fence the running
    query's writers (Kafka: ``init_transactions`` of the same transactional ids)."""
    store = MemoryStore()
    run_in_process(new_sink(store), 0, RECORDS, query_id="q-1")
    schema = schema_of(RECORDS)
    fenced: list[Head] = []
    with pytest.raises(CheckpointResetError):
        fencing_sink(store, fenced).start(schema, "q-2", lambda: 2)
    with pytest.raises(CheckpointResetError):
        fencing_sink(store, fenced).start(schema, None, lambda: 2)
    assert fenced == [], "a refused start fenced nobody"
    fencing_sink(store, fenced).start(schema, "q-1", lambda: 2)
    assert fenced == [Head(0, "q-1", 2)], "a checked start fences, once"


def test_a_start_that_left_the_check_to_its_tasks_fences_nobody() -> None:
    """It cannot tell the running query from itself: its tasks, once they checked the id,
    fence their own earlier attempts (their transactional ids), nothing more."""
    store = MemoryStore()
    run_in_process(new_sink(store), 0, RECORDS, query_id="q-1")
    fenced: list[Head] = []
    fencing_sink(store, fenced).start(schema_of(RECORDS), None, lambda: 2, checked_by_tasks=True)
    assert fenced == []
