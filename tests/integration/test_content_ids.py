"""Content IDs (``id_from="content"``) on real Spark: they equal the Python twin's for every
column type the twin encodes, nulls included, whatever the row order and partitioning;
through a real PostgresSink two identical lines of a batch are two rows, while re-running
the epoch adds nothing (counted by writes); through a real KafkaSink identical lines are
messages, each ID once, and a later epoch adds only occurrences no earlier epoch had; and a
buffered PostgreSQL sink carries Spark's content IDs through the buffer and the drainer."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import Counter
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from exactlyonce.buffer import Buffered, Drainer, KafkaBuffer
from exactlyonce.connectors import KafkaSink, PostgresSink
from exactlyonce.dedup.content import (
    canonical_encoding,
    content_hash_column,
    content_record_ids,
    spark_kinds,
)
from exactlyonce.dedup.ids import RecordIdSpec
from tests.support.audit import insert_counts, install_audit, sink_ids, write_counts
from tests.support.kafka_audit import audit

pytestmark = pytest.mark.integration

SCHEMA = (
    "s STRING, n BIGINT, i INT, b BOOLEAN, d DOUBLE, f FLOAT, dec DECIMAL(20,4), "
    "day DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ, bin BINARY"
)
ROW = (
    'quote " \\ é\t\u0001',
    -(2**62),
    7,
    True,
    1e20,
    0.1,
    Decimal("12.5"),
    dt.date(2024, 2, 29),
    dt.datetime(2024, 1, 2, 3, 4, 5, 123456),
    dt.datetime(2024, 1, 2, 3, 4, 5, 120000),
    b"\x00\xff",
)


def rows() -> list[tuple[Any, ...]]:
    """Every column null once, identical rows, and rows differing in one column only."""
    out = [ROW, ROW, ROW]
    for k in range(len(ROW)):
        out.append(tuple(None if j == k else v for j, v in enumerate(ROW)))
    out.append((None,) * len(ROW))
    out.append((None,) * len(ROW))
    out.append(
        (
            "",
            0,
            0,
            False,
            -0.0,
            float("nan"),
            Decimal("0"),
            dt.date(1970, 1, 1),
            dt.datetime(1999, 12, 31, 23, 59, 59),
            dt.datetime(2000, 1, 1),
            b"",
        )
    )
    out.append(ROW[:4] + (0.0,) + ROW[5:])  # -0.0 and 0.0 are told apart
    out.append(ROW[:4] + (-0.0,) + ROW[5:])
    return out


def ids_of(df: DataFrame) -> tuple[list[str], list[dict[str, Any]]]:
    spec = RecordIdSpec.from_content()
    got = df.select("*", spec.column(df.schema).alias("_rid")).collect()
    return [r["_rid"] for r in got], [
        {k: v for k, v in r.asDict().items() if k != "_rid"} for r in got
    ]


def test_spark_content_ids_equal_the_python_twins(spark: SparkSession) -> None:
    df = spark.createDataFrame(rows(), SCHEMA)
    kinds = spark_kinds(df.schema)
    hashed = df.select("*", content_hash_column(df.schema).alias("_c")).collect()
    for row in hashed:
        values = {k: v for k, v in row.asDict().items() if k != "_c"}
        assert row["_c"] == hashlib.md5(canonical_encoding(values, kinds).encode()).hexdigest(), (
            values
        )
    spark_ids, values = ids_of(df)
    assert len(set(spark_ids)) == len(spark_ids) == len(rows())  # identical rows: own IDs
    assert Counter(spark_ids) == Counter(content_record_ids(values, kinds))
    shuffled = df.repartition(5).orderBy(F.rand(seed=3))  # another order and partitioning
    assert sorted(ids_of(shuffled)[0]) == sorted(spark_ids)


def test_column_order_does_not_change_the_ids(spark: SparkSession) -> None:
    df = spark.createDataFrame(rows(), SCHEMA)
    reordered = df.select(*reversed(df.columns))
    assert sorted(ids_of(reordered)[0]) == sorted(ids_of(df)[0])


def test_postgres_identical_lines_are_rows_and_a_rerun_of_the_epoch_adds_nothing(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    def sink() -> PostgresSink:
        return PostgresSink(pg_dsn, unique_name, None, unique_name, id_from="content")

    schema = "line STRING, level STRING, ms DOUBLE"
    batch = [
        ("disk full", "error", None),
        ("disk full", "error", None),
        ("GET /", None, 1.5),
        ("disk full", "error", None),
        ("GET /", None, 1.5),
        ("login ok", "info", 0.25),
    ]
    df = spark.createDataFrame(batch, schema)
    first = sink()
    first.preflight(df.schema)
    install_audit(pg, unique_name)
    first(df, 0)
    assert first.last_report is not None and first.last_report.written == 6
    lines = Counter(r[0] for r in pg.execute(f'SELECT line FROM "{unique_name}"').fetchall())
    assert lines == Counter(b[0] for b in batch)

    # The epoch runs again from scratch (head and shard markers forgotten), its rows in
    # another order and partitioning: the same IDs, so the unique index takes nothing new.
    # (Each ID is sent again and the index absorbs it: a second committed attempt each,
    # never a second row.)
    first.reset_head()
    again = sink()
    again(spark.createDataFrame(list(reversed(batch)), schema).repartition(3), 0)
    counts = insert_counts(pg, unique_name)
    assert len(counts) == 6 and set(counts.values()) == {1}, "a write happened twice"
    assert write_counts(pg, unique_name) == dict.fromkeys(counts, 2), "each ID sent again"
    assert sorted(sink_ids(pg, unique_name)) == sorted(counts)


def test_kafka_identical_lines_are_messages_and_a_later_epoch_adds_only_new_occurrences(
    spark: SparkSession, bootstrap: str, unique_name: str
) -> None:
    sink = KafkaSink(
        bootstrap, unique_name, None, unique_name, id_from="content", create_topic=True
    )
    schema = "line STRING, n BIGINT"
    first = [("disk full", 1), ("disk full", 1), ("GET /", None)]
    later = [("disk full", 1)] * 3 + [("login ok", 2)]
    sink(spark.createDataFrame(first, schema), 0)
    sink(spark.createDataFrame(later, schema), 1)
    assert [(r.written, r.duplicates) for r in sink.reports] == [(3, 0), (2, 2)]
    rows = [[{"line": line, "n": n} for line, n in batch] for batch in (first, later)]
    expected = {i for batch in rows for i in content_record_ids(batch)}
    assert len(expected) == 5  # disk full #1-#3, GET /, login ok
    result = audit(bootstrap, unique_name, unique_name, read_committed=bool(sink.hides_aborted))
    result.assert_exactly_once(expected)


def test_buffered_postgres_carries_content_ids_through_the_drainer(
    spark: SparkSession,
    bootstrap: str,
    pg_dsn: str,
    pg: psycopg.Connection[Any],
    unique_name: str,
) -> None:
    target = PostgresSink(pg_dsn, unique_name, None, unique_name, id_from="content")
    buffer = KafkaBuffer(topic=unique_name, bootstrap_servers=bootstrap, partitions=2)
    buffered = Buffered(target, buffer)
    batch = [("disk full", 1), ("disk full", 1), ("GET /", None), ("disk full", 1)]
    df = spark.createDataFrame(batch, "line STRING, n BIGINT")
    buffered.preflight(df.schema)
    install_audit(pg, unique_name)
    buffered(df, 0)
    with Drainer(target, buffer) as drainer:
        assert drainer.drain_available(timeout_s=60).written == 4
    expected = content_record_ids([{"line": line, "n": n} for line, n in batch])
    counts = write_counts(pg, unique_name)
    assert sorted(counts) == sorted(expected) and set(counts.values()) == {1}
