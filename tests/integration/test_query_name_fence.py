"""Two queries with one ``query_name``: the second is refused, never interleaved.

The race: both drivers start before either created the head. Each creates it (the first
create wins: ``ON CONFLICT DO NOTHING``); the loser must then read back the winner's head
and refuse, not write under a head that names the other query.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from exactlyonce.connectors import PostgresSink
from exactlyonce.connectors.base import Head
from exactlyonce.connectors.base.sink import QUERY_ID_PROPERTY
from exactlyonce.errors import CheckpointResetError
from tests.support.events import BATCH_QUERY_ID, events

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
