"""Two queries with one ``query_name``: the second is refused, never interleaved, and (Kafka)
refused before it can fence the running one's transactional producers.

The race: both drivers start before either created the head. Each creates it (the first
create wins: ``ON CONFLICT DO NOTHING``); the loser must then read back the winner's head
and refuse, not write under a head that names the other query.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from exactlyonce.connectors import PostgresSink
from exactlyonce.connectors.base import (
    ERROR_COLUMN,
    PAYLOAD_COLUMN,
    SHARD_COLUMN,
    Head,
    TaskResult,
)
from exactlyonce.connectors.base.sink import QUERY_ID_PROPERTY
from exactlyonce.connectors.kafka import ID_COLUMN, VALUE_COLUMN, KafkaShardTask, KafkaSink
from exactlyonce.connectors.kafka.protocol import EPOCH_COLUMN
from exactlyonce.dedup.ids import record_id
from exactlyonce.errors import CheckpointResetError
from tests.support.events import BATCH_QUERY_ID, events
from tests.support.kafka_audit import audit

pytestmark = pytest.mark.integration

SCHEMA = StructType([StructField("event_id", StringType()), StructField("amount", LongType())])


def sink(pg_dsn: str, name: str) -> PostgresSink:
    return PostgresSink(pg_dsn, name, ["event_id"], name, dedup=False)


def test_the_loser_of_a_head_creation_race_refuses(
    pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = sink(pg_dsn, unique_name), sink(pg_dsn, unique_name)
    reads: list[Head | None] = []
    store = second.head_store()
    real_read = store.read_head

    def read_before_the_other_created() -> Head | None:
        head = None if not reads else real_read()  # its first read saw no head yet
        reads.append(head)
        return head

    monkeypatch.setattr(store, "read_head", read_before_the_other_created)
    monkeypatch.setattr(second, "head_store", lambda: store)
    first.start(SCHEMA, "query-a", lambda: 2)
    with pytest.raises(CheckpointResetError, match="query-a") as refused:
        second.start(SCHEMA, "query-b", lambda: 2)
    assert "reset-head" in str(refused.value)
    assert len(reads) == 2, "the loser read the head back after its create"
    row = pg.execute(
        "SELECT epoch, spark_query_id FROM exactlyonce_heads WHERE query_name = %s",
        [unique_name],
    ).fetchone()
    assert row == (-1, "query-a"), "the winner's head stands"


def test_a_second_query_after_the_first_started_is_refused(pg_dsn: str, unique_name: str) -> None:
    sink(pg_dsn, unique_name).start(SCHEMA, "query-a", lambda: 2)
    with pytest.raises(CheckpointResetError, match="query-a"):
        sink(pg_dsn, unique_name).start(SCHEMA, "query-b", lambda: 2)


def test_a_run_without_a_spark_query_id_over_committed_epochs_is_refused(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    """Fail closed (invariant 13): a run whose Spark query id cannot be established (here a
    batch without Spark's local property, as under Spark Connect before the id could be
    found) cannot tell a deleted checkpoint from a restart. Its epoch 0 is at the head: it
    used to be skipped as committed, silently dropping the new rows."""
    sink(pg_dsn, unique_name)(events(spark, 0, 20), 0)
    context = spark.sparkContext
    context.setLocalProperty(QUERY_ID_PROPERTY, None)  # type: ignore[arg-type]
    try:
        with pytest.raises(CheckpointResetError, match="cannot be established") as refused:
            sink(pg_dsn, unique_name)(events(spark, 20, 40), 0)
    finally:
        context.setLocalProperty(QUERY_ID_PROPERTY, BATCH_QUERY_ID)
    assert "allow_unknown_query_id" in str(refused.value)
    assert pg.execute(f"SELECT count(*) FROM {unique_name}").fetchone() == (20,)
    head = pg.execute(
        "SELECT epoch, spark_query_id FROM exactlyonce_heads WHERE query_name = %s",
        [unique_name],
    ).fetchone()
    assert head == (0, BATCH_QUERY_ID), "the head is left as it was"


# -- Kafka: the second query is refused before it can fence the running one -------------


def kafka_batch(start: int, end: int, epoch: int) -> pa.RecordBatch:
    """Shard 0's rows of events ``start`` to ``end - 1``, as Spark hands them to a task."""
    rids = [record_id([f"e{i}"]) for i in range(start, end)]
    n = len(rids)
    return pa.RecordBatch.from_pydict(
        {
            ID_COLUMN: pa.array(rids, pa.string()),
            VALUE_COLUMN: pa.array([f'{{"i":{i}}}'.encode() for i in range(start, end)]),
            EPOCH_COLUMN: pa.array([epoch] * n, pa.int64()),
            SHARD_COLUMN: pa.array([0] * n, pa.int32()),
            ERROR_COLUMN: pa.array([None] * n, pa.string()),
            PAYLOAD_COLUMN: pa.array([None] * n, pa.string()),
        }
    )


def kafka_sink(bootstrap: str, name: str) -> KafkaSink:
    return KafkaSink(bootstrap, name, ["event_id"], name, create_topic=True, shards=1, dedup=False)


def test_a_second_kafka_query_is_refused_before_it_can_fence_the_running_one(
    bootstrap: str, unique_name: str
) -> None:
    """Query A's shard transaction is open (mid-epoch) when query B, another Spark query
    (another checkpoint) under the same query_name, starts. B must be refused before it
    initialises a producer of A's transactional ids: ``init_transactions`` would abort A's
    open transaction and fence A's producer (Kafka's heads are last-writer-wins, so the
    refusal is all that keeps B out). A then commits its epoch as if B never came."""
    a = kafka_sink(bootstrap, unique_name)
    a.run_epoch(0, "query-a", SCHEMA, lambda: 1, in_process(a, 0, 10))
    refusals: list[CheckpointResetError] = []

    def write_while_b_starts(epoch: int, shards: int) -> list[TaskResult]:
        writer = a.task_writer(epoch, [ID_COLUMN, VALUE_COLUMN])
        task = KafkaShardTask(writer.target, epoch)  # type: ignore[attr-defined]
        task.write(kafka_batch(10, 30, epoch))  # A's data transaction is open from here
        assert task.producer is not None
        task.producer.flush()
        with pytest.raises(CheckpointResetError, match="query-a") as refused:
            kafka_sink(bootstrap, unique_name).start(SCHEMA, "query-b", lambda: 1)
        refusals.append(refused.value)
        try:
            task.commit()  # fenced, had B's start initialised shard 0's producer
        finally:
            task.close()
        return [task.result]

    report = a.run_epoch(1, "query-a", SCHEMA, lambda: 1, write_while_b_starts)
    assert refusals and "reset-head" in str(refusals[0])
    assert report.written == 20
    head = a.head()
    assert head is not None and (head.epoch, head.spark_query_id) == (1, "query-a")
    result = audit(bootstrap, unique_name, unique_name, read_committed=bool(a.hides_aborted))
    result.assert_exactly_once({record_id([f"e{i}"]) for i in range(30)})


def in_process(sink: KafkaSink, start: int, end: int) -> Callable[[int, int], list[TaskResult]]:
    """A ``write(epoch, shards)`` running shard 0's task here on events ``start..end-1``."""

    def write(epoch: int, shards: int) -> list[TaskResult]:
        writer = sink.task_writer(epoch, [ID_COLUMN, VALUE_COLUMN])
        task = KafkaShardTask(writer.target, epoch)  # type: ignore[attr-defined]
        return [task.run(iter([kafka_batch(start, end, epoch)]))]

    return write
