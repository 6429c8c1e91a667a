"""format("exactlyonce") into PostgreSQL: a real streaming query, real PostgreSQL and Redis.

Writes are counted by tests/support/audit.py's BEFORE INSERT trigger (committed attempts, the
rows ON CONFLICT DO NOTHING skips included), so a double write is caught though the table has
a unique key.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import psycopg
import pytest

from exactlyonce.connectors import PostgresSink
from tests.crash.harness import make_input
from tests.support.audit import assert_exactly_once, install_audit

# The services fixture puts the catalog's Redis in the environment these tests read.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("services")]

SCHEMA = "event_id STRING, amount BIGINT, action STRING"


def start(spark: Any, source: Path, checkpoint: Path, **options: str) -> Any:
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
    writer = df.writeStream.format("exactlyonce").option("checkpointLocation", str(checkpoint))
    for name, value in options.items():
        writer = writer.option(name, value)
    return writer.trigger(availableNow=True).start()


def pg_options(pg_dsn: str, table: str, **extra: str) -> dict[str, str]:
    return {
        "sink": "postgres",
        "dsn": pg_dsn,
        "table": table,
        "id_columns": "event_id",
        "query_name": table,
        "shards": "3",
        "dedup": json.dumps({"expected_ids": 5000}),
        "redis_url": os.environ["EXACTLYONCE_REDIS_URL"],
        **extra,
    }


def prepared(pg_dsn: str, pg: psycopg.Connection[Any], table: str) -> None:
    from pyspark.sql.types import StructType

    PostgresSink(pg_dsn, table, ["event_id"], table).preflight(StructType.fromDDL(SCHEMA))
    install_audit(pg, table)


def head(pg: psycopg.Connection[Any], table: str) -> tuple[Any, ...] | None:
    return pg.execute(
        "SELECT epoch, spark_query_id FROM exactlyonce_heads WHERE query_name = %s", [table]
    ).fetchone()


def test_writes_every_record_once(
    spark: Any, tmp_path: Path, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    data = make_input(tmp_path / "in", files=3, rows=120, seed=3)
    prepared(pg_dsn, pg, unique_name)
    query = start(spark, tmp_path / "in", tmp_path / "ck", **pg_options(pg_dsn, unique_name))
    query.awaitTermination()
    assert_exactly_once(pg, unique_name, data.expected_ids)
    assert head(pg, unique_name) == (2, str(query.id))
    letters = pg.execute(
        "SELECT count(*) FROM exactlyonce_dead_letters WHERE query_name = %s", [unique_name]
    ).fetchone()
    assert letters == (data.null_keys,)


def test_rerun_epoch_below_head_is_skipped(
    spark: Any, tmp_path: Path, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    """Spark's commit log loses epoch 1 (a crash after the head, before Spark's commit):
    the restarted query re-runs it and must not write it again."""
    data = make_input(tmp_path / "in", files=2, rows=80, seed=4)
    prepared(pg_dsn, pg, unique_name)
    options = pg_options(pg_dsn, unique_name)
    start(spark, tmp_path / "in", tmp_path / "ck", **options).awaitTermination()
    for name in ("1", ".1.crc"):
        (tmp_path / "ck" / "commits" / name).unlink(missing_ok=True)
    pg.execute(f"TRUNCATE {unique_name}_audit")
    query = start(spark, tmp_path / "in", tmp_path / "ck", **options)
    query.awaitTermination()
    assert (tmp_path / "ck" / "commits" / "1").exists(), "Spark re-ran epoch 1"
    written = pg.execute(f"SELECT count(*) FROM {unique_name}_audit").fetchone()
    assert written == (0,), "the re-run epoch wrote nothing"
    assert head(pg, unique_name) == (1, str(query.id))
    rows = pg.execute(f"SELECT count(*) FROM {unique_name}").fetchone()
    assert rows == (len(data.expected_ids),)


def test_reset_checkpoint_is_refused(
    spark: Any, tmp_path: Path, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    make_input(tmp_path / "in", files=1, rows=30, seed=5)
    prepared(pg_dsn, pg, unique_name)
    options = pg_options(pg_dsn, unique_name)
    start(spark, tmp_path / "in", tmp_path / "ck", **options).awaitTermination()
    query = start(spark, tmp_path / "in", tmp_path / "new-ck", **options)
    with pytest.raises(Exception, match="CheckpointResetError"):
        query.awaitTermination()


@pytest.mark.parametrize(
    ("option", "value"),
    [("shards", "many"), ("dedup", "{not json"), ("mode", "append"), ("connect_timeout", "0")],
)
def test_bad_option_names_it(
    spark: Any, tmp_path: Path, pg_dsn: str, option: str, value: str, unique_name: str
) -> None:
    """Spark builds the data source when it plans the first epoch, in the driver: the error
    stops the query there, before any task writes."""
    make_input(tmp_path / "in", files=1, rows=5, seed=6)
    options = pg_options(pg_dsn, unique_name, **{option: value})
    with pytest.raises(Exception, match=rf"ConfigError: {option}\b") as caught:
        start(spark, tmp_path / "in", tmp_path / "ck", **options).awaitTermination(60)
    password = psycopg.conninfo.conninfo_to_dict(pg_dsn).get("password")
    assert not password or password not in str(caught.value)
