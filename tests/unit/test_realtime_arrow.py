"""The Real-time Mode writer fed by ``mapInArrow`` (``RealtimeWriter.write_arrow``): the same
commits as the ``foreach`` calls on the same rows. A store in memory stands in for the sink and
a stub for Spark's task context (pure logic; the crash tests run both on Spark)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

import pyarrow as pa
import pytest

from exactlyonce.connectors.base.frontier import Chunk, SourceKey
from exactlyonce.connectors.base.realtime import (
    BATCH_ID_PROPERTY,
    FrontierStore,
    FrontierTarget,
    RealtimeOptions,
    RealtimeWriter,
    TaskInfo,
    arrow_rows,
)
from exactlyonce.errors import ConfigError
from tests.support.realtime import rows, run_epoch


@dataclass
class MemoryStore(FrontierStore):
    commits: list[Chunk]
    frontiers: dict[SourceKey, int]

    def prepare(self, columns: Sequence[str]) -> None:
        pass

    def read(self, key: SourceKey) -> int | None:
        return self.frontiers.get(key)

    def commit(self, chunk: Chunk) -> None:
        self.commits.append(chunk)
        self.frontiers.update(chunk.next_offsets)

    def close(self) -> None:
        pass


@dataclass
class MemoryTarget(FrontierTarget):
    query_name: str = "q"
    commits: list[Chunk] = field(default_factory=list)
    frontiers: dict[SourceKey, int] = field(default_factory=dict)

    def open_store(self, task: TaskInfo) -> FrontierStore:
        return MemoryStore(self.commits, self.frontiers)


class StubContext:
    def __init__(self, partition: int, epoch: int | None) -> None:
        self.partition, self.epoch = partition, epoch

    def partitionId(self) -> int:  # noqa: N802 - Spark's name
        return self.partition

    def attemptNumber(self) -> int:  # noqa: N802 - Spark's name
        return 0

    def getLocalProperty(self, key: str) -> str | None:  # noqa: N802 - Spark's name
        return str(self.epoch) if key == BATCH_ID_PROPERTY and self.epoch is not None else None


def in_task(monkeypatch: pytest.MonkeyPatch, epoch: int | None, partition: int = 0) -> None:
    import pyspark

    monkeypatch.setattr(
        pyspark.TaskContext, "get", staticmethod(lambda: StubContext(partition, epoch))
    )


def batches(offsets: range, size: int = 1) -> Iterator[pa.RecordBatch]:
    table = pa.Table.from_pylist([r.asDict() for r in rows(offsets)])
    yield from table.to_batches(max_chunksize=size)


def writer(target: MemoryTarget) -> RealtimeWriter:
    # a commit only at the epoch's end: the chunks compare whatever the timing
    return RealtimeWriter(target, RealtimeOptions(commit_interval=3600.0))


def test_mapinarrow_commits_what_foreach_commits_and_yields_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    by_foreach, by_arrow = MemoryTarget(), MemoryTarget()
    in_task(monkeypatch, epoch=7)
    run_epoch(writer(by_foreach), 7, rows(range(0, 50)))
    out = list(writer(by_arrow).write_arrow(batches(range(0, 50))))
    assert out == []
    assert [c.rows for c in by_arrow.commits] == [c.rows for c in by_foreach.commits]
    assert by_arrow.frontiers == by_foreach.frontiers == {("t", 0): 50}
    assert {row[-1] for c in by_arrow.commits for row in c.rows} == {7}  # the epoch


def test_a_rerun_epoch_skips_rows_below_the_frontier(monkeypatch: pytest.MonkeyPatch) -> None:
    target = MemoryTarget()
    in_task(monkeypatch, epoch=3)
    list(writer(target).write_arrow(batches(range(0, 30), size=7)))
    list(writer(target).write_arrow(batches(range(0, 40), size=7)))
    written = [row[3] for c in target.commits for row in c.rows]
    assert written == [f"e{o}" for o in range(40)]


def test_a_failing_input_commits_nothing_more_and_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    target = MemoryTarget()
    in_task(monkeypatch, epoch=1)

    def failing() -> Iterator[pa.RecordBatch]:
        yield from batches(range(0, 5))
        raise RuntimeError("the source failed")

    with pytest.raises(RuntimeError, match="the source failed"):
        list(writer(target).write_arrow(failing()))
    assert target.commits == []


def test_outside_a_streaming_task_it_refuses_naming_the_transport(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    in_task(monkeypatch, epoch=None)
    with pytest.raises(ConfigError, match="transport"):
        list(writer(MemoryTarget()).write_arrow(batches(range(0, 1))))


def test_arrow_rows_hold_what_a_row_holds_timestamps_naive_in_local_time() -> None:
    at = datetime(2026, 11, 29, 12, 30, tzinfo=timezone.utc)
    batch = pa.RecordBatch.from_pydict(
        {
            "n": pa.array([1, None]),
            "s": pa.array(["a", "b"]),
            "at": pa.array([at, None], pa.timestamp("us", tz="UTC")),
        }
    )
    assert list(arrow_rows(batch)) == [
        (1, "a", at.astimezone().replace(tzinfo=None)),
        (None, "b", None),
    ]
