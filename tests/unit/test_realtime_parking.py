"""Stores kept across epochs in a reused Python worker (``park``/``unpark``): the next epoch's
task of the same target renews the store its predecessor parked, instead of connecting again;
a store whose epoch failed, that cannot be renewed, that idled too long, or that was checked
for other columns is closed, never reused (pure logic, stores in memory)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pytest

from exactlyonce.connectors.base import realtime
from exactlyonce.connectors.base.frontier import Chunk, SourceKey
from exactlyonce.connectors.base.realtime import (
    FrontierStore,
    FrontierTarget,
    RealtimeOptions,
    RealtimeWriter,
    TaskInfo,
    close_parked,
)
from tests.support.realtime import rows, run_epoch


@dataclass(eq=False)
class CountingStore(FrontierStore):
    frontiers: dict[SourceKey, int]
    renewable: bool = True
    tasks: list[TaskInfo] = field(default_factory=list)
    prepared: int = 0
    closed: int = 0

    def prepare(self, columns: Sequence[str]) -> None:
        self.prepared += 1

    def read(self, key: SourceKey) -> int | None:
        return self.frontiers.get(key)

    def commit(self, chunk: Chunk) -> None:
        self.frontiers.update(chunk.next_offsets)

    def close(self) -> None:
        self.closed += 1

    def renew(self, task: TaskInfo) -> bool:
        self.tasks.append(task)
        return self.renewable


OPENED: list[CountingStore] = []
FRONTIERS: dict[SourceKey, int] = {}


@dataclass(frozen=True)
class Target(FrontierTarget):
    query_name: str = "q"
    renewable: bool = True

    def open_store(self, task: TaskInfo) -> FrontierStore:
        store = CountingStore(FRONTIERS, self.renewable)
        OPENED.append(store)
        return store


@pytest.fixture(autouse=True)
def fresh_worker() -> Iterator[None]:
    close_parked()
    OPENED.clear()
    FRONTIERS.clear()
    yield
    close_parked()


def writer(target: FrontierTarget) -> RealtimeWriter:
    return RealtimeWriter(target, RealtimeOptions(commit_interval=3600.0))


def test_the_next_epoch_renews_the_store_the_last_one_parked() -> None:
    run_epoch(writer(Target()), 1, rows(range(0, 5)))
    run_epoch(writer(Target()), 2, rows(range(0, 9)))  # a new task: the writer unpickled
    (store,) = OPENED
    assert store.prepared == 1 and store.closed == 0
    assert [t.epoch for t in store.tasks] == [2]
    assert FRONTIERS == {("t", 0): 9}


def test_a_failed_epoch_closes_its_store() -> None:
    failing = writer(Target())
    failing.open(0, 1)
    failing.process(rows(range(1))[0])
    failing.close(RuntimeError("the task failed"))
    run_epoch(writer(Target()), 2, rows(range(0, 3)))
    first, second = OPENED
    assert first.closed == 1 and first.tasks == []
    assert second.prepared == 1


def test_a_store_that_cannot_be_renewed_is_closed_and_a_new_one_opened() -> None:
    run_epoch(writer(Target(renewable=False)), 1, rows(range(0, 2)))
    run_epoch(writer(Target(renewable=False)), 2, rows(range(0, 4)))
    first, second = OPENED
    assert first.closed == 1 and len(first.tasks) == 1
    assert second.prepared == 1


def test_another_target_or_other_columns_never_take_a_parked_store() -> None:
    run_epoch(writer(Target()), 1, rows(range(0, 2)))
    run_epoch(writer(Target(query_name="other")), 1, rows(range(0, 2)))
    assert len(OPENED) == 2 and all(s.tasks == [] for s in OPENED)
    renamed = rows(range(0, 2), topic="t2")
    wider = [r.asDict() | {"extra": 1} for r in renamed]
    from pyspark.sql import Row

    run_epoch(writer(Target()), 2, [Row(**r) for r in wider])
    assert len(OPENED) == 3


def test_a_store_idle_too_long_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    run_epoch(writer(Target()), 1, rows(range(0, 2)))
    now = realtime.time.monotonic()
    monkeypatch.setattr(realtime.time, "monotonic", lambda: now + realtime.MAX_PARKED_S + 1)
    run_epoch(writer(Target()), 2, rows(range(0, 3)))
    first, second = OPENED
    assert first.closed == 1 and first.tasks == []
    assert second.prepared == 1


def test_at_most_max_parked_stores_wait_the_oldest_closed() -> None:
    for n in range(realtime.MAX_PARKED + 1):
        run_epoch(writer(Target(query_name=f"q{n}")), 1, rows(range(0, 1)))
    assert [s.closed for s in OPENED] == [1] + [0] * realtime.MAX_PARKED
    close_parked()
    assert all(s.closed == 1 for s in OPENED)


def test_a_tasks_first_commit_comes_sooner_than_the_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At an epoch's start the rows that waited through Spark's epoch boundary reach the
    writer together, and they are the oldest: the first commit comes after a fraction of the
    interval (FIRST_COMMIT_FRACTION), the next ones every interval."""
    import time

    committed: list[float] = []
    real = CountingStore.commit
    monkeypatch.setattr(
        CountingStore, "commit", lambda s, c: committed.append(time.monotonic()) or real(s, c)
    )
    live = RealtimeWriter(Target(), RealtimeOptions(commit_interval=1.0))
    live.open(0, 1)
    start = time.monotonic()
    live.process(rows(range(1))[0])
    time.sleep(realtime.FIRST_COMMIT_FRACTION + 0.3)
    live.process(rows(range(1, 2))[0])
    live.close(None)
    first, last = (t - start for t in committed)
    assert realtime.FIRST_COMMIT_FRACTION - 0.05 <= first < 0.9  # not a whole interval
    assert last < 1.0  # the second row: committed at close


def test_the_first_commits_wait_starts_once_the_first_row_is_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first row's frontier read can take longer than the first commit's wait (a Kafka
    producer's start): the wait starts after it, so the rows that queued behind the read go
    in the first commit, not one row alone with the rest an interval later."""
    import time

    chunks: list[int] = []
    real_read, real_commit = CountingStore.read, CountingStore.commit
    monkeypatch.setattr(CountingStore, "read", lambda s, k: time.sleep(0.6) or real_read(s, k))
    monkeypatch.setattr(
        CountingStore, "commit", lambda s, c: chunks.append(len(c.rows)) or real_commit(s, c)
    )
    monkeypatch.setattr(realtime, "CATCH_UP_S", 10.0)  # the timer alone, not a pause
    live = RealtimeWriter(Target(), RealtimeOptions(commit_interval=1.0))
    live.open(0, 1)
    for row in rows(range(4)):
        live.process(row)
        time.sleep(0.01)  # rows come from Spark's socket: the flusher may take the lock
    time.sleep(0.5)
    assert chunks == [4]
    live.close(None)


def test_the_first_commit_comes_at_the_first_pause_once_the_backlog_is_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At an epoch's start the rows that waited arrive back to back; the first pause between
    two rows (CATCH_UP_S) says the writer caught up: those rows are committed at once, before
    the next, without waiting for the first commit's timer."""
    import time

    chunks: list[int] = []
    real = CountingStore.commit
    monkeypatch.setattr(
        CountingStore, "commit", lambda s, c: chunks.append(len(c.rows)) or real(s, c)
    )
    live = RealtimeWriter(Target(), RealtimeOptions(commit_interval=10.0))
    live.open(0, 1)
    for row in rows(range(3)):
        live.process(row)
    time.sleep(realtime.CATCH_UP_S * 5)
    live.process(rows(range(3, 4))[0])
    assert chunks == [3]  # the timer (4 s) has not fired
    time.sleep(realtime.CATCH_UP_S * 5)
    live.process(rows(range(4, 5))[0])
    assert chunks == [3]  # only the first commit comes at a pause
    live.close(None)
    assert chunks == [3, 2]
