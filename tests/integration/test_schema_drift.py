"""Schema drift between two runs of one query (issue 16): a column added, removed or retyped
in the stream's schema gives a clear error naming the column, or a documented evolution
(README "Schema changes between restarts"), never a silent loss.

Each run is a new PostgresSink (a new driver) on the same table and query_name, writing the
next epoch with real Spark DataFrames against real PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from exactlyonce.connectors import ConfigError, PostgresSink
from tests.support.audit import assert_exactly_once, install_audit
from tests.support.events import events, ids

pytestmark = pytest.mark.integration


def new_sink(dsn: str, table: str) -> PostgresSink:
    return PostgresSink(dsn, table, ["event_id"], query_name=table)


def first_run(dsn: str, pg: psycopg.Connection[Any], table: str, df: DataFrame) -> None:
    sink = new_sink(dsn, table)
    sink.preflight(df.schema)
    install_audit(pg, table)
    sink(df, 0)


def dead_letters(pg: psycopg.Connection[Any], table: str) -> list[tuple[str, str]]:
    rows = pg.execute(
        "SELECT record_id, error FROM exactlyonce_dead_letters WHERE query_name = %s",
        [table],
    ).fetchall()
    return [(str(r[0]).replace("-", ""), str(r[1])) for r in rows]


def test_an_added_column_is_refused_naming_it_until_the_table_has_it(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    first_run(pg_dsn, pg, unique_name, events(spark, 0, 100))
    wider = events(spark, 100, 200).withColumn("country", F.lit("fr"))
    with pytest.raises(ConfigError, match=r"lacks column\(s\) \['country'\]") as err:
        new_sink(pg_dsn, unique_name)(wider, 1)
    assert err.value.field == "table"
    assert "ALTER TABLE" in str(err.value)
    pg.execute(f'ALTER TABLE "{unique_name}" ADD COLUMN country text')
    new_sink(pg_dsn, unique_name)(wider, 1)
    assert_exactly_once(pg, unique_name, ids(0, 200))
    by_country = dict(
        pg.execute(f'SELECT country IS NULL, count(*) FROM "{unique_name}" GROUP BY 1').fetchall()
    )
    assert by_country == {True: 100, False: 100}


def test_a_removed_column_is_written_as_null(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    first_run(pg_dsn, pg, unique_name, events(spark, 0, 100))
    narrower = events(spark, 100, 200).drop("action")
    sink = new_sink(pg_dsn, unique_name)
    sink(narrower, 1)
    assert sink.last_report is not None and sink.last_report.written == 100
    assert_exactly_once(pg, unique_name, ids(0, 200))
    nulls = pg.execute(f'SELECT count(*) FROM "{unique_name}" WHERE action IS NULL').fetchone()
    assert nulls == (100,)
    assert dead_letters(pg, unique_name) == []


def test_a_removed_not_null_column_is_refused_naming_it(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    first_run(pg_dsn, pg, unique_name, events(spark, 0, 100))
    pg.execute(f'ALTER TABLE "{unique_name}" ALTER COLUMN action SET NOT NULL')
    narrower = events(spark, 100, 200).drop("action")
    with pytest.raises(ConfigError, match="'action'") as err:
        new_sink(pg_dsn, unique_name)(narrower, 1)
    assert "NOT NULL" in str(err.value) and err.value.field == "table"
    assert_exactly_once(pg, unique_name, ids(0, 100))


def test_a_retyped_column_sends_the_values_it_cannot_store_to_dead_letters(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    first_run(pg_dsn, pg, unique_name, events(spark, 0, 100))  # amount: bigint
    as_text = events(spark, 100, 200).withColumn(
        "amount",
        F.when(F.col("amount") % 100 == 0, F.lit("n/a")).otherwise(F.col("amount").cast("string")),
    )
    sink = new_sink(pg_dsn, unique_name)
    sink(as_text, 1)
    letters = dead_letters(pg, unique_name)
    assert len(letters) == 10 and all("bigint" in error for _, error in letters)
    report = sink.last_report
    assert report is not None and report.written == 90 and report.dead_letters == 10
    stored = ids(0, 200) - {rid for rid, _ in letters}
    assert_exactly_once(pg, unique_name, stored)


NARROWINGS = {
    # first run's type, second run's type, what the stored value would silently lose
    "double-into-real": ("float", "double", "real"),
    "timestamp-into-date": ("date", "timestamp", "date"),
    "decimal-scale": ("decimal(12,2)", "decimal(12,4)", "numeric(13,2)"),
    "long-into-double": ("double", "bigint", "double precision"),
}


@pytest.mark.parametrize("case", sorted(NARROWINGS))
def test_a_retyped_column_the_table_would_store_with_loss_is_refused(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str, case: str
) -> None:
    before, after, table_type = NARROWINGS[case]
    source = {
        "float": "CAST(amount + 0.125 AS float)",
        "double": "CAST(amount AS double) + 0.123456789",
        "date": "date_add(DATE'2026-01-01', CAST(amount / 10 AS int))",
        "timestamp": "TIMESTAMP'2026-01-01 10:30:00' + make_interval(0,0,0,0,0,0,amount)",
        "decimal(12,2)": "CAST(amount AS decimal(12,2)) + 0.25",
        "decimal(12,4)": "CAST(amount AS decimal(12,4)) + 0.1234",
        "bigint": "amount + 9007199254740993",
    }
    first = events(spark, 0, 50).withColumn("amount", F.expr(source[before]))
    first_run(pg_dsn, pg, unique_name, first)
    second = events(spark, 50, 100).withColumn("amount", F.expr(source[after]))
    with pytest.raises(ConfigError, match="'amount'") as err:
        new_sink(pg_dsn, unique_name)(second, 1)
    assert table_type in str(err.value) and err.value.field == "table"
    assert_exactly_once(pg, unique_name, ids(0, 50))
