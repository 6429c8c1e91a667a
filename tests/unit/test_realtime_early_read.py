"""A task whose Spark partition read a known source partition in an earlier epoch of the run
opens its store and reads that frontier at ``open``, before its first row: the rows then go
straight in. A hint that turns out wrong (other source partition, other columns), a read that
fails, or no hint at all leaves the task where it was without one: the frontier of the rows'
own partition is read at the first row (pure logic, stores in memory)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from exactlyonce.connectors.base import assignments, realtime
from exactlyonce.connectors.base.assignments import Assignment, recall, remember
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

COLUMNS = ("topic", "partition", "offset", "event_id")
RUN = "run-1"


@dataclass(eq=False)
class LoggingStore(FrontierStore):
    frontiers: dict[SourceKey, int]
    log: list[str] = field(default_factory=list)
    fail_reads: int = 0
    closed: int = 0

    def prepare(self, columns: Sequence[str]) -> None:
        self.log.append(f"prepare {len(columns)}")

    def read(self, key: SourceKey) -> int | None:
        self.log.append(f"read {key[1]}")
        if self.fail_reads:
            self.fail_reads -= 1
            raise ConnectionError("the sink is down")
        return self.frontiers.get(key)

    def commit(self, chunk: Chunk) -> None:
        self.log.append(f"commit {len(chunk.rows)}")
        self.frontiers.update(chunk.next_offsets)

    def close(self) -> None:
        self.closed += 1

    def renew(self, task: TaskInfo) -> bool:
        return True


OPENED: list[LoggingStore] = []
FRONTIERS: dict[SourceKey, int] = {}
FAIL_READS: list[int] = [0]


@dataclass(frozen=True)
class Target(FrontierTarget):
    query_name: str = "q"

    def open_store(self, task: TaskInfo) -> FrontierStore:
        store = LoggingStore(FRONTIERS, fail_reads=FAIL_READS[0])
        FAIL_READS[0] = 0
        OPENED.append(store)
        return store


@pytest.fixture(autouse=True)
def a_running_query(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tasks of one Spark query run (a query id), hints in a directory of their own."""
    monkeypatch.setattr(assignments, "DIRECTORY", tmp_path / "hints")
    real = realtime._task_info

    def with_query_id(partition_id: int, epoch_id: int) -> TaskInfo:
        task = real(partition_id, epoch_id)
        return TaskInfo(RUN, task.epoch, task.partition_id, task.writer)

    monkeypatch.setattr(realtime, "_task_info", with_query_id)
    close_parked()
    OPENED.clear()
    FRONTIERS.clear()
    yield
    close_parked()


def writer() -> RealtimeWriter:
    return RealtimeWriter(Target(), RealtimeOptions(commit_interval=3600.0))


def opened_early(live: RealtimeWriter, partition_id: int, epoch: int) -> None:
    live.open(partition_id, epoch)
    live.wait_for_early_read()


def test_the_first_row_remembers_which_source_partition_the_spark_partition_reads() -> None:
    run_epoch(writer(), 1, rows(range(0, 3), partition=1), partition_id=0)
    assert recall(RUN, "q", 0) == Assignment(("t", 1), COLUMNS)
    assert recall("another-run", "q", 0) is None
    assert recall(RUN, "q", 1) is None


def test_a_remembered_partitions_frontier_is_read_at_open_before_any_row() -> None:
    run_epoch(writer(), 1, rows(range(0, 3)))
    close_parked()  # the next epoch's task runs in another worker
    live = writer()
    opened_early(live, 0, 2)
    (_, store) = OPENED
    assert store.log == ["prepare 4", "read 0"]
    for row in rows(range(0, 5)):  # a re-run's first rows are below the frontier
        live.process(row)
    live.close(None)
    assert store.log == ["prepare 4", "read 0", "commit 2"]
    assert FRONTIERS == {("t", 0): 5}
    assert live.tracker.skipped == 3


def test_rows_of_another_partition_than_remembered_read_their_own_frontier() -> None:
    remember(RUN, "q", 0, Assignment(("t", 1), COLUMNS))
    FRONTIERS[("t", 0)] = 2
    live = writer()
    opened_early(live, 0, 1)
    for row in rows(range(0, 4)):
        live.process(row)
    live.close(None)
    (store,) = OPENED
    assert store.log == ["prepare 4", "read 1", "read 0", "commit 2"]
    assert FRONTIERS == {("t", 0): 4}
    assert recall(RUN, "q", 0) == Assignment(("t", 0), COLUMNS)


def test_rows_of_other_columns_than_remembered_take_a_store_checked_for_theirs() -> None:
    remember(RUN, "q", 0, Assignment(("t", 0), (*COLUMNS, "extra")))
    run_epoch(writer(), 1, rows(range(0, 2)))
    early, checked = OPENED
    assert early.closed == 1 and early.log == ["prepare 5", "read 0"]
    assert checked.log == ["prepare 4", "read 0", "commit 2"]


def test_a_failed_early_read_is_made_again_at_the_first_row() -> None:
    remember(RUN, "q", 0, Assignment(("t", 0), COLUMNS))
    FAIL_READS[0] = 1
    run_epoch(writer(), 1, rows(range(0, 2)))
    failed, fresh = OPENED
    assert failed.closed == 1 and failed.log == ["prepare 4", "read 0"]
    assert fresh.log == ["prepare 4", "read 0", "commit 2"]
    assert FRONTIERS == {("t", 0): 2}


def test_an_epoch_without_rows_keeps_the_store_it_opened_early_for_the_next() -> None:
    remember(RUN, "q", 0, Assignment(("t", 0), COLUMNS))
    run_epoch(writer(), 1, [])
    run_epoch(writer(), 2, rows(range(0, 2)))
    (store,) = OPENED
    assert store.closed == 0
    assert store.log == ["prepare 4", "read 0", "read 0", "commit 2"]


def test_a_failed_epoch_closes_the_store_it_opened_early() -> None:
    remember(RUN, "q", 0, Assignment(("t", 0), COLUMNS))
    live = writer()
    opened_early(live, 0, 1)
    live.close(RuntimeError("the task failed"))
    (store,) = OPENED
    assert store.closed == 1


def test_outside_a_spark_query_nothing_is_read_before_the_first_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    remember(RUN, "q", 0, Assignment(("t", 0), COLUMNS))
    monkeypatch.setattr(
        realtime, "_task_info", lambda p, e: TaskInfo(None, int(e), int(p), "no-query")
    )
    live = writer()
    opened_early(live, 0, 1)
    assert OPENED == []
    live.close(None)


def test_an_unreadable_hint_is_no_hint() -> None:
    remember(RUN, "q", 0, Assignment(("t", 0), COLUMNS))
    (path,) = assignments.DIRECTORY.iterdir()
    path.write_text("{not json")
    assert recall(RUN, "q", 0) is None
