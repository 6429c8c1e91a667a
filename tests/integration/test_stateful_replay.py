"""A stateful streaming query (dropDuplicates, an aggregation) re-running an epoch the sink
already committed: the sink skips the write, but Spark's state stores must still commit the
batch.

Found by tests/crash/test_upsert_crash.py: after a crash between the sink head and Spark's
commit log, Spark re-runs the batch; a sink that returned without running the DataFrame left
every state store of it uncommitted, and Spark 4 failed the query
(STATE_STORE_COMMIT_VALIDATION_FAILED; older Spark fails the next batch, whose state version
is missing). Here the crash is simulated without a kill: Spark's commit file of the last
epoch is deleted, which is exactly what a SIGKILL after ``after_head`` leaves.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from exactlyonce.connectors import PostgresSink
from exactlyonce.integration.spark import start_stream

pytestmark = pytest.mark.integration

SCHEMA = "event_id STRING, key STRING, amount BIGINT"


def write_file(inbox: Path, n: int, events: list[tuple[str, str, int]]) -> None:
    tmp = inbox.parent / f".{n}.tmp"
    tmp.write_text(
        "".join(
            json.dumps(dict(zip(("event_id", "key", "amount"), e, strict=True))) + "\n"
            for e in events
        )
    )
    tmp.rename(inbox / f"part-{n:04d}.json")


def run(spark: SparkSession, inbox: Path, ckpt: Path, sink: PostgresSink, mode: str) -> None:
    events = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(inbox))
    deduplicated = events.dropDuplicates(["event_id"])
    df: DataFrame = deduplicated
    if mode == "upsert":
        df = deduplicated.groupBy("key").agg(
            F.count(F.lit(1)).alias("n"), F.sum("amount").alias("total")
        )
    output = "update" if mode == "upsert" else None
    query = start_stream(df, sink, str(ckpt), available_now=True, output_mode=output)
    query.awaitTermination()


@pytest.mark.parametrize("mode", ["upsert", "insert"])
def test_a_committed_epoch_rerun_by_spark_still_commits_its_state(
    mode: str,
    spark: SparkSession,
    pg_dsn: str,
    pg: psycopg.Connection[Any],
    unique_name: str,
    tmp_path: Path,
) -> None:
    inbox, ckpt = tmp_path / "in", tmp_path / "ckpt"
    inbox.mkdir()
    write_file(inbox, 0, [("e1", "a", 1), ("e2", "b", 2)])
    write_file(inbox, 1, [("e3", "a", 3), ("e1", "a", 1)])

    def sink() -> PostgresSink:
        key = ["key"] if mode == "upsert" else ["event_id"]
        extra: dict[str, Any] = {} if mode == "upsert" else {"dedup": False}
        return PostgresSink(pg_dsn, unique_name, key, unique_name, mode=mode, **extra)  # type: ignore[arg-type]

    run(spark, inbox, ckpt, sink(), mode)
    for name in ("1", ".1.crc"):  # a crash after the sink head, before Spark's commit log
        (ckpt / "commits" / name).unlink()
    restarted = sink()
    run(spark, inbox, ckpt, restarted, mode)  # Spark re-runs epoch 1; the sink skips it
    assert [r.skipped for r in restarted.reports] == [True]
    write_file(inbox, 2, [("e4", "b", 4), ("e3", "a", 3)])
    run(spark, inbox, ckpt, restarted, mode)  # its state must be there for epoch 2
    if mode == "upsert":
        rows = pg.execute(
            sql.SQL("SELECT key, n, total, epoch FROM {} ORDER BY key").format(
                sql.Identifier(unique_name)
            )
        ).fetchall()
        assert rows == [("a", 2, 4, 1), ("b", 2, 6, 2)]
    else:
        rows = pg.execute(
            sql.SQL("SELECT event_id FROM {} ORDER BY 1").format(sql.Identifier(unique_name))
        ).fetchall()
        assert [r[0] for r in rows] == ["e1", "e2", "e3", "e4"]
