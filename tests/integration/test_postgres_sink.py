"""PostgresSink against real PostgreSQL and real Spark (local[2]), batch by batch."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from exactlyonce.connectors import ConfigError, PostgresSink, SinkUnavailableError
from exactlyonce.dedup.ids import record_id
from tests.support.audit import assert_exactly_once, install_audit, write_counts
from tests.support.events import events, ids

pytestmark = pytest.mark.integration


def new_sink(dsn: str, table: str, **kw: Any) -> PostgresSink:
    return PostgresSink(dsn, table, ["event_id"], query_name=table, **kw)


def prepared(dsn: str, pg: psycopg.Connection[Any], table: str, df: DataFrame) -> PostgresSink:
    sink = new_sink(dsn, table)
    sink.preflight(df.schema)
    install_audit(pg, table)
    return sink


def test_epoch_writes_every_row_once_and_replay_is_skipped(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    df = events(spark, 0, 500)
    sink = prepared(pg_dsn, pg, unique_name, df)
    sink(df, 0)
    assert sink.last_report is not None and sink.last_report.written == 500
    sink(df, 0)  # Spark re-runs a batch after a crash before its commit log
    assert sink.last_report.skipped
    restarted = new_sink(pg_dsn, unique_name)  # a new driver reads the head back
    restarted(df, 0)
    assert restarted.last_report is not None and restarted.last_report.skipped
    assert_exactly_once(pg, unique_name, ids(0, 500))
    head = restarted.head()
    assert head is not None and head.epoch == 0


def test_duplicates_within_and_across_epochs_are_dropped(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    first = events(spark, 0, 300)
    first = first.union(first.limit(60))  # 60 repeated inside the batch
    sink = prepared(pg_dsn, pg, unique_name, first)
    sink(first, 0)
    second = events(spark, 250, 400)  # 50 IDs seen in epoch 0
    sink(second, 1)
    assert sink.reports[0].duplicates == 60
    assert sink.reports[1].duplicates == 50 and sink.reports[1].written == 100
    # Keys never null: the sink writes Spark's partitions as they are (no shuffle by ID), so a
    # repeat in another partition of the same batch is sent by its own task too and the unique
    # index absorbs it (counted in the 60 above): attempted once or twice, inserted once.
    repeated = [r.event_id for r in first.groupBy("event_id").count().where("count > 1").collect()]
    assert len(repeated) == 60
    twice = {record_id([event]): range(1, 3) for event in repeated}
    assert_exactly_once(pg, unique_name, ids(0, 400), twice)


def nullable_key(df: DataFrame) -> DataFrame:
    """The same rows with ``event_id`` a column Spark must assume nullable (as a file or Kafka
    source's columns are): the sink then shuffles by ID and writes shard markers."""
    return df.withColumn("event_id", F.when(F.col("amount") >= 0, F.col("event_id")))


def test_committed_shards_are_skipped_when_the_head_did_not_advance(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    df = nullable_key(events(spark, 0, 400))
    sink = prepared(pg_dsn, pg, unique_name, df)
    assert not sink._writes_unaligned(df.schema)
    sink(df, 0)
    # The driver dies after the tasks of epoch 1 committed, before the head advanced.
    head = sink.head()
    assert head is not None
    sink._write_epoch(nullable_key(events(spark, 400, 800)), 1, head.num_shards)
    assert new_sink(pg_dsn, unique_name).head().epoch == 0  # type: ignore[union-attr]
    rerun = new_sink(pg_dsn, unique_name)
    rerun(nullable_key(events(spark, 400, 800)), 1)
    report = rerun.last_report
    # Every shard of the epoch holds some of its 400 records, and every one committed.
    assert report is not None and report.shards_skipped == head.num_shards
    assert report.written == 0
    assert_exactly_once(pg, unique_name, ids(0, 800))


def stage_counts(spark: SparkSession, group: str) -> list[int]:
    """Stages of each job Spark ran under the job group ``group``."""
    tracker = spark.sparkContext.statusTracker()
    jobs = sorted(tracker.getJobIdsForGroup(group))
    return [len(tracker.getJobInfo(j).stageIds) for j in jobs]  # type: ignore[union-attr]


def test_keys_never_null_skip_the_shuffle_and_a_partly_committed_rerun_writes_each_once(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    """mode="insert" with key columns Spark knows are never null: no shuffle by ID (each
    partition is written as it is, one stage), no shard marker; a re-run of an epoch whose
    tasks partly committed, split into other partitions, writes nothing twice (COPY meets the
    unique index and falls back to ON CONFLICT DO NOTHING), and dedup still drops repeats
    that sit in different partitions.

    The audit counts committed insert attempts, so it sees what the unique index absorbs on
    this path, and says exactly how much: every row the dead driver's task committed is
    attempted again by the re-run (the catalog drops entries above the head), and a repeat
    that two tasks of one epoch hold at the same moment (neither sees the other's ID in the
    catalog yet) may be attempted by both; every other ID is attempted once, each inserted
    once."""
    first = events(spark, 0, 300).repartition(3)
    sink = prepared(pg_dsn, pg, unique_name, first)
    assert sink._writes_unaligned(first.schema)
    spark.sparkContext.setJobGroup(unique_name, "unaligned epoch")
    try:
        sink(first.localCheckpoint(), 0)
        counts = stage_counts(spark, unique_name)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert counts and counts[-1] == 1, counts  # the write: one stage, no exchange
    head = sink.head()
    assert head is not None
    # The driver dies after some tasks of epoch 1 committed (here: the rows 300-599, written
    # by a task), before the head advanced; the re-run splits the epoch differently.
    sink._write_epoch(events(spark, 300, 600), 1, head.num_shards)
    rerun = new_sink(pg_dsn, unique_name)
    again = events(spark, 300, 900).union(events(spark, 850, 900)).repartition(4)
    rerun(again, 1)
    report = rerun.last_report
    assert report is not None and not report.skipped
    assert report.written == 300 and report.duplicates == 350, report
    assert report.shards_skipped == 0
    assert pg.execute(
        "SELECT count(*) FROM exactlyonce_shard_commits WHERE query_name = %s", [unique_name]
    ).fetchone() == (0,)
    rewritten = {i: 2 for i in ids(300, 600)}
    raced = {i: range(1, 3) for i in ids(850, 900)}
    assert_exactly_once(pg, unique_name, ids(0, 900), reattempted=rewritten | raced)


def test_null_keys_and_refused_records_go_to_dead_letters(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    df = events(spark, 0, 200).withColumn(
        "event_id", F.when(F.col("amount") == 70, None).otherwise(F.col("event_id"))
    )
    sink = prepared(pg_dsn, pg, unique_name, df)
    pg.execute(f'ALTER TABLE "{unique_name}" ADD CONSTRAINT no_big CHECK (amount <> 1500)')
    sink(df, 0)
    report = sink.last_report
    assert report is not None and report.dead_letters == 2 and report.written == 198
    letters = pg.execute(
        "SELECT epoch, record_id, error, payload FROM exactlyonce_dead_letters "
        "WHERE query_name = %s ORDER BY error",
        [unique_name],
    ).fetchall()
    assert [row[0] for row in letters] == [0, 0]
    errors = sorted(row[2] for row in letters)
    assert errors[0].startswith("23514")  # check_violation, by SQLSTATE
    assert "null key column(s): event_id" in errors[1]
    assert any('"amount":70' in row[3] for row in letters)
    assert any(row[1] == record_id(["e150"]) for row in letters)
    expected = ids(0, 200) - {record_id(["e7"]), record_id(["e150"])}
    assert_exactly_once(pg, unique_name, expected)


def test_column_types_round_trip(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    df = spark.sql(
        "SELECT 'k1' AS k, '' AS empty, CAST(NULL AS STRING) AS nothing, "
        "'quote\" comma, newline\n' AS tricky, CAST(1.25 AS DECIMAL(10,2)) AS dec, "
        "TIMESTAMP '2024-01-02 03:04:05.123456' AS ts, DATE '2024-01-02' AS d, true AS b, "
        "CAST('hi' AS BINARY) AS bin, array(1, 2) AS arr, named_struct('x', 1) AS st, "
        "CAST('NaN' AS DOUBLE) AS nan"
    )
    sink = PostgresSink(pg_dsn, unique_name, ["k"], query_name=unique_name)
    sink(df, 0)
    row = pg.execute(
        f"SELECT empty, nothing, tricky, dec::text, ts::text, d::text, b, bin, arr::text, "
        f'st::text, nan::text FROM "{unique_name}"'
    ).fetchone()
    assert row == (
        "",
        None,
        'quote" comma, newline\n',
        "1.25",
        "2024-01-02 03:04:05.123456+00",
        "2024-01-02",
        True,
        b"hi",
        "[1, 2]",
        '{"x": 1}',
        "NaN",
    )


BINARY_ROW = (
    "SELECT 'k1' AS k, '' AS empty, CAST(NULL AS STRING) AS nothing, "
    "'quote\" comma, newline\n\\\\N é' AS tricky, CAST(9007199254740993 AS BIGINT) AS big, "
    "CAST(-7 AS INT) AS i, CAST(3 AS SMALLINT) AS s, CAST('NaN' AS DOUBLE) AS nan, "
    "CAST(0.1 AS DOUBLE) AS d, CAST(1.5 AS FLOAT) AS f, false AS b, CAST(NULL AS BIGINT) AS gap"
)
BINARY_EXPECTED = (
    "", None, 'quote" comma, newline\n\\N é', 9007199254740993, -7, 3, "NaN", 0.1, 1.5,
    False, None,
)  # fmt: skip


def _binary_columns(pg: psycopg.Connection[Any], table: str) -> Any:
    return pg.execute(
        f"SELECT empty, nothing, tricky, big, i, s, nan::text, d, f, b, gap, "
        f"replace(record_id::text, '-', '') "
        f'FROM "{table}"'
    ).fetchone()


def test_columns_in_binary_wire_form_round_trip(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    """Every column of this batch has a binary wire form (text, integers, floats, boolean,
    the record ID as uuid), so the fast path sends it as binary COPY."""
    df = spark.sql(BINARY_ROW)
    sink = PostgresSink(pg_dsn, unique_name, ["k"], query_name=unique_name)
    sink(df, 0)
    assert _binary_columns(pg, unique_name) == (*BINARY_EXPECTED, record_id(["k1"]))


def test_the_binary_copy_stream_is_what_postgres_stores(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    """The encoder's bytes through COPY (FORMAT binary) into the table the sink creates: the
    same values as the Spark round trip, so the fast path cannot change a value."""
    from exactlyonce.connectors.postgres.binary import binary_copy
    from exactlyonce.connectors.postgres.schema import TableName, table_columns

    df = spark.sql(BINARY_ROW).withColumn("record_id", F.md5(F.col("k")))
    df = df.withColumn("epoch", F.lit(0).cast("long"))
    sink = PostgresSink(pg_dsn, unique_name, ["k"], query_name=unique_name)
    sink.preflight(df.drop("record_id", "epoch").schema)
    oid = pg.execute(
        "SELECT to_regclass(%s)::oid", [TableName.parse(unique_name).ident().as_string(pg)]
    ).fetchone()
    types = table_columns(pg, oid[0])
    batch = df.toArrow().to_batches()[0]
    data = binary_copy(batch, types, "record_id")
    assert data is not None, f"not all in wire form: {batch.schema} vs {types}"
    names = ", ".join(f'"{n}"' for n in batch.schema.names)
    with pg.cursor().copy(f'COPY "{unique_name}" ({names}) FROM STDIN (FORMAT binary)') as copy:
        copy.write(data)
    assert _binary_columns(pg, unique_name) == (*BINARY_EXPECTED, record_id(["k1"]))


def test_preflight_names_the_problem_without_the_password(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    password = urlsplit(pg_dsn).password
    wrong_password = pg_dsn.replace(f":{password}@", ":s3cret-pw@", 1)
    assert "s3cret-pw" in wrong_password
    with pytest.raises(SinkUnavailableError) as err:
        new_sink(wrong_password, unique_name)
    assert "s3cret-pw" not in str(err.value) and "***" in str(err.value)
    with pytest.raises(SinkUnavailableError, match="cannot connect"):
        new_sink("postgresql://u:s3cret-pw@127.0.0.1:1/db", unique_name, connect_timeout=2)
    with pytest.raises(ConfigError, match="dsn"):
        new_sink("host=127.0.0.1 password=s3cret-pw port", unique_name)
    pg.execute(f'CREATE TABLE "{unique_name}" (event_id text, record_id uuid, epoch bigint)')
    with pytest.raises(ConfigError, match="no unique index") as err:
        new_sink(pg_dsn, unique_name)
    assert err.value.field == "table"
    pg.execute(f'CREATE UNIQUE INDEX ON "{unique_name}" (record_id)')
    sink = new_sink(pg_dsn, unique_name)
    with pytest.raises(ConfigError, match=r"lacks column\(s\) \['amount', 'action'\]"):
        sink.preflight(events(spark, 0, 1).schema)
    with pytest.raises(ConfigError, match="id_columns"):
        PostgresSink(pg_dsn, unique_name, ["nope"], query_name="q").preflight(
            events(spark, 0, 1).schema
        )


def test_counts_are_writes_not_rows(pg: psycopg.Connection[Any], unique_name: str) -> None:
    """The audit sees a second write that a unique key would hide: the check can fail."""
    pg.execute(f'CREATE TABLE "{unique_name}" (record_id text)')
    install_audit(pg, unique_name)
    pg.execute(f"INSERT INTO \"{unique_name}\" VALUES ('a'), ('b')")
    pg.execute(f"DELETE FROM \"{unique_name}\" WHERE record_id = 'a'")
    pg.execute(f"INSERT INTO \"{unique_name}\" VALUES ('a')")
    assert write_counts(pg, unique_name) == {"a": 2, "b": 1}
    with pytest.raises(AssertionError, match="written more than once"):
        assert_exactly_once(pg, unique_name, {"a", "b"})


@pytest.mark.parametrize("mode", ["insert", "append"])
def test_a_reset_head_starts_a_fresh_catalog(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str, mode: str
) -> None:
    """The catalog caches what the head committed; without the head it must not drop a record."""
    df = events(spark, 0, 300)
    sink = new_sink(pg_dsn, unique_name, mode=mode)
    sink(df, 0)
    sink.reset_head()  # the user starts over: new checkpoint, emptied table
    pg.execute(f'TRUNCATE "{unique_name}"')
    pg.commit()
    install_audit(pg, unique_name)
    again = new_sink(pg_dsn, unique_name, mode=mode)
    again(df, 0)
    assert again.last_report is not None and again.last_report.written == 300
    assert_exactly_once(pg, unique_name, ids(0, 300))


def test_head_is_none_before_the_first_epoch_even_without_the_heads_table(
    pg: psycopg.Connection[Any], pg_dsn: str, unique_name: str
) -> None:
    """``head()`` is how a watcher (the demo, an operator) sees progress; on a fresh
    database, before any query created the sink's tables, nothing was committed: None, not
    an error."""
    pg.execute(f'CREATE SCHEMA "{unique_name}"')
    try:
        sink = PostgresSink(
            pg_dsn, f"{unique_name}.events", ["event_id"], unique_name, dedup=False, check=False
        )
        assert sink.head() is None
    finally:
        pg.execute(f'DROP SCHEMA "{unique_name}" CASCADE')
