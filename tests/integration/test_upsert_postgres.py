"""PostgresSink(mode="upsert") against real PostgreSQL and real Spark (local[2]).

Each test drives the sink's real code: ``sink(df, epoch)`` runs the whole protocol, and
``sink._write_epoch(df, epoch, shards)`` runs an epoch's executor tasks again after the head
passed it (what a crashed driver's late tasks or a restored checkpoint do). Writes are
counted by an audit trigger on INSERT, UPDATE and DELETE, and committed attempts per (key,
epoch) by a BEFORE INSERT trigger, which also sees what the epoch guard skips
(tests/support/upsert_audit.py).
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql
from pyspark.sql import DataFrame, SparkSession

from exactlyonce.connectors import ConfigError, PostgresSink
from exactlyonce.dedup.ids import record_id
from tests.support.upsert_audit import (
    backwards,
    install_upsert_audit,
    upsert_attempts,
    upsert_writes,
)

pytestmark = pytest.mark.integration

SCHEMA = "k STRING, n BIGINT, total BIGINT"
TOMB_SCHEMA = "k STRING, n BIGINT, total BIGINT, gone BOOLEAN"
SHARDS = 3


def frame(spark: SparkSession, rows: list[tuple[Any, ...]], schema: str = SCHEMA) -> DataFrame:
    return spark.createDataFrame(rows, schema)


def new_sink(dsn: str, table: str, **kw: Any) -> PostgresSink:
    return PostgresSink(dsn, table, ["k"], table, mode="upsert", shards=SHARDS, **kw)


def prepared(
    dsn: str, pg: psycopg.Connection[Any], table: str, df: DataFrame, **kw: Any
) -> PostgresSink:
    sink = new_sink(dsn, table, **kw)
    sink.preflight(df.schema)
    install_upsert_audit(pg, table)
    return sink


def stored(pg: psycopg.Connection[Any], table: str) -> dict[str, tuple[int, int, int]]:
    """key -> (n, total, epoch)."""
    rows = pg.execute(
        sql.SQL("SELECT k, n, total, epoch FROM {}").format(sql.Identifier(table))
    ).fetchall()
    return {str(k): (int(n), int(t), int(e)) for k, n, t, e in rows}


def test_an_older_epoch_rerun_never_rolls_a_value_back(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    older = frame(spark, [(f"k{i}", 1, i) for i in range(40)])
    newer = frame(spark, [(f"k{i}", 2, 100 + i) for i in range(0, 40, 2)])  # every other key
    sink = prepared(pg_dsn, pg, unique_name, older)
    sink(older, 0)
    sink(newer, 1)
    assert sink.last_report is not None and sink.last_report.written == 20
    # Epoch 0's tasks run again after epoch 1 committed (its shard markers are gone).
    rerun = sink._write_epoch(older, 0, SHARDS)
    assert sum(t.stale for t in rerun) == 20 and sum(t.written for t in rerun) == 20
    # And a query restarted from an older checkpoint, after a deliberate head reset.
    sink.reset_head()
    restarted = new_sink(pg_dsn, unique_name)
    restarted(older, 0)
    assert restarted.last_report is not None and restarted.last_report.stale == 20
    expected = {f"k{i}": (2, 100 + i, 1) if i % 2 == 0 else (1, i, 0) for i in range(40)}
    assert stored(pg, unique_name) == expected
    writes = upsert_writes(pg, unique_name)
    assert not backwards(writes), backwards(writes)[:3]
    # A key epoch 1 changed saw its insert and that update, nothing after: the re-runs of
    # epoch 0 never wrote it (an odd key was rewritten with the same value twice).
    per_key: dict[str, list[tuple[str, int | None, int | None]]] = {}
    for w in writes:
        per_key.setdefault(w.record_id, []).append((w.op, w.old_epoch, w.new_epoch))
    assert per_key[record_id(["k0"])] == [("INSERT", None, 0), ("UPDATE", 0, 1)]
    assert per_key[record_id(["k1"])] == [("INSERT", None, 0), *[("UPDATE", 0, 0)] * 2]
    # The guard hid epoch 0's two re-runs of k0 from the AFTER trigger; the attempts log
    # counts them: every key's epoch 0 attempted three times, an even key's epoch 1 once.
    attempts = upsert_attempts(pg, unique_name)
    assert attempts == {(record_id([f"k{i}"]), 0): 3 for i in range(40)} | {
        (record_id([f"k{i}"]), 1): 1 for i in range(0, 40, 2)
    }


def test_a_replay_of_the_same_epoch_rewrites_the_same_values(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    df = frame(spark, [(f"k{i}", 1, i) for i in range(30)])
    sink = prepared(pg_dsn, pg, unique_name, df)
    sink(df, 0)
    before = stored(pg, unique_name)
    tasks = sink._write_epoch(df, 0, SHARDS)  # the same epoch's tasks once more
    assert sum(t.written for t in tasks) == 30 and sum(t.stale for t in tasks) == 0
    assert stored(pg, unique_name) == before
    writes = upsert_writes(pg, unique_name)
    assert [w.op for w in writes].count("INSERT") == 30
    replays = [w for w in writes if w.op == "UPDATE"]
    assert len(replays) == 30 and {(w.old_epoch, w.new_epoch) for w in replays} == {(0, 0)}
    sink(df, 0)  # and the protocol itself skips it: at or below the head
    assert sink.last_report is not None and sink.last_report.skipped


def test_tombstones_delete_under_the_same_guard(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    first = frame(spark, [("a", 1, 1, False), ("b", 1, 2, False), ("c", 1, 3, None)], TOMB_SCHEMA)
    second = frame(spark, [("b", 0, 0, True), ("c", 2, 30, False), ("x", 0, 0, True)], TOMB_SCHEMA)
    sink = prepared(pg_dsn, pg, unique_name, first, tombstone_column="gone")
    sink(first, 0)
    sink(second, 1)
    report = sink.last_report
    assert report is not None and (report.written, report.deleted) == (1, 2)
    assert stored(pg, unique_name) == {"a": (1, 1, 0), "c": (2, 30, 1)}
    # Epoch 0 again: b (deleted by epoch 1) must not come back, c must not roll back, and x
    # (deleted in epoch 1, never written before) must stay out too.
    again = first.union(frame(spark, [("x", 9, 9, False)], TOMB_SCHEMA))
    rerun = sink._write_epoch(again, 0, SHARDS)
    assert sum(t.stale for t in rerun) == 3 and sum(t.written for t in rerun) == 1
    assert stored(pg, unique_name) == {"a": (1, 1, 0), "c": (2, 30, 1)}
    tombstones = pg.execute(
        "SELECT record_id::text, epoch FROM exactlyonce_tombstones WHERE target = %s",
        [f"public.{unique_name}"],
    ).fetchall()
    assert {(str(r).replace("-", ""), e) for r, e in tombstones} == {
        (record_id(["b"]), 1),
        (record_id(["x"]), 1),
    }
    # A newer epoch brings b back, and its tombstone goes.
    sink(frame(spark, [("b", 3, 33, False)], TOMB_SCHEMA), 2)
    assert stored(pg, unique_name)["b"] == (3, 33, 2)
    left = pg.execute(
        "SELECT count(*) FROM exactlyonce_tombstones WHERE target = %s", [f"public.{unique_name}"]
    ).fetchone()
    assert left == (1,)
    assert "gone" not in [
        r[0]
        for r in pg.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s",
            [unique_name],
        ).fetchall()
    ]
    assert not backwards(upsert_writes(pg, unique_name))


def test_within_an_epoch_one_row_per_key_whatever_the_partition_order(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    rows = [("k1", 1, 10), ("k1", 2, 5), ("k1", 1, 7), ("k2", 4, 4), ("k2", 4, 4), ("k3", 1, 1)]
    df = frame(spark, rows)
    sink = prepared(pg_dsn, pg, unique_name, df)
    results = []
    for n, order in enumerate([rows, rows[::-1], rows[2:] + rows[:2]]):
        shuffled = frame(spark, order).repartition(3 - n % 2)
        sink(shuffled, n)
        assert sink.last_report is not None and sink.last_report.duplicates == 3
        results.append({k: v[:2] for k, v in stored(pg, unique_name).items()})
    # The row whose JSON encoding sorts last wins: {"k":"k1","n":2,...} > {"k":"k1","n":1,...}
    assert results[0] == results[1] == results[2] == {"k1": (2, 5), "k2": (4, 4), "k3": (1, 1)}


def test_upsert_refuses_a_table_without_the_unique_index(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    pg.execute(
        sql.SQL(
            "CREATE TABLE {} (k text, n bigint, total bigint, record_id uuid, epoch bigint)"
        ).format(sql.Identifier(unique_name))
    )
    sink = new_sink(pg_dsn, unique_name, check=False)
    with pytest.raises(ConfigError) as err:
        sink.preflight(frame(spark, [("a", 1, 1)]).schema)
    assert err.value.field == "table" and "unique index" in err.value.reason


def test_tombstone_column_must_be_a_boolean_of_the_stream(
    spark: SparkSession, pg_dsn: str, unique_name: str
) -> None:
    sink = new_sink(pg_dsn, unique_name, tombstone_column="gone", check=False)
    with pytest.raises(ConfigError) as missing:
        sink.preflight(frame(spark, [("a", 1, 1)]).schema)
    assert missing.value.field == "tombstone_column"
    with pytest.raises(ConfigError) as not_boolean:
        sink.preflight(
            frame(
                spark, [("a", 1, 1, "yes")], "k STRING, n BIGINT, total BIGINT, gone STRING"
            ).schema
        )
    assert not_boolean.value.field == "tombstone_column" and "boolean" in not_boolean.value.reason


def test_order_by_picks_the_row_of_a_key_within_an_epoch(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    """A changelog with several changes of a key in one epoch: the greatest ``order_by``
    wins (10 > 9 as numbers; their JSON forms would sort the other way)."""
    rows = [("k1", 9, 100), ("k1", 10, 1), ("k2", None, 5), ("k2", 3, 6), ("k3", 1, 1)]
    sink = prepared(pg_dsn, pg, unique_name, frame(spark, rows), order_by="n")
    sink(frame(spark, rows[::-1]).repartition(2), 0)
    assert {k: v[:2] for k, v in stored(pg, unique_name).items()} == {
        "k1": (10, 1),
        "k2": (3, 6),  # a null order_by value is the lowest
        "k3": (1, 1),
    }
    with pytest.raises(ConfigError) as err:
        new_sink(pg_dsn, unique_name, order_by="missing").preflight(frame(spark, rows).schema)
    assert err.value.field == "order_by"
