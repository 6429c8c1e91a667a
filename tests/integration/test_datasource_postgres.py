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
from exactlyonce.integration.datasource.options import SPARK_REDACTED, sink_config, writer_options
from tests.crash.harness import make_input
from tests.support.audit import assert_exactly_once, install_audit
from tests.support.secrets_scan import assert_no_secrets, url_passwords

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


def start_named(spark: Any, source: Path, root: Path, name: str, **options: str) -> Any:
    """A query whose checkpoint is the session's ``spark.sql.streaming.checkpointLocation``
    (``root/<name>``), not an option: the data source's driver cannot read its query id."""
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(root))
    try:
        df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
        writer = df.writeStream.format("exactlyonce").queryName(name)
        for option, value in options.items():
            writer = writer.option(option, value)
        return writer.trigger(availableNow=True).start()
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")


def test_a_driver_blind_to_the_query_id_leaves_the_guard_to_the_tasks(
    spark: Any, tmp_path: Path, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    """The start cannot establish the id, the tasks can: a restart of the same checkpoint
    goes on (not refused for want of an id), a new checkpoint is refused by the tasks."""
    data = make_input(tmp_path / "in", files=2, rows=40, seed=7)
    prepared(pg_dsn, pg, unique_name)
    options = pg_options(pg_dsn, unique_name)
    first = start_named(spark, tmp_path / "in", tmp_path / "ck", unique_name, **options)
    first.awaitTermination()
    more = make_input(tmp_path / "more", files=1, rows=40, seed=8)
    (tmp_path / "more" / "part-0000.json").rename(tmp_path / "in" / "part-0100.json")
    again = start_named(spark, tmp_path / "in", tmp_path / "ck", unique_name, **options)
    again.awaitTermination()
    assert again.id == first.id and head(pg, unique_name) == (2, str(first.id))
    expected = data.expected_ids | more.expected_ids
    assert_exactly_once(pg, unique_name, expected)
    other = start_named(spark, tmp_path / "in", tmp_path / "new-ck", unique_name, **options)
    with pytest.raises(Exception, match="CheckpointResetError"):
        other.awaitTermination()
    assert head(pg, unique_name) == (2, str(first.id))


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


def spark_redacted(spark: Any, options: dict[str, str]) -> dict[str, str]:
    """``options`` as Spark shows a command's options: through its own redaction
    (``SQLConf.redactOptions``: ``spark.redaction.regex`` and the SQL options regex)."""
    jvm = spark._jvm
    java_map = jvm.java.util.HashMap()
    for key, value in options.items():
        java_map.put(key, value)
    converters = jvm.scala.jdk.javaapi.CollectionConverters
    scala_maps = jvm.java.lang.Class.forName("scala.collection.immutable.Map$")
    immutable = getattr(scala_maps.getField("MODULE$").get(None), "from")(
        converters.asScala(java_map)
    )
    redacted = spark._jsparkSession.sessionState().conf().redactOptions(immutable)
    return dict(converters.asJava(redacted))


def spark_default_redaction(spark: Any) -> str:
    """Spark's own default of ``spark.redaction.regex``."""
    package = spark._jvm.java.lang.Class.forName("org.apache.spark.internal.config.package$")
    entry = package.getField("MODULE$").get(None).SECRET_REDACTION_PATTERN()
    return str(entry.defaultValueString())


def test_spark_redacts_every_option_that_holds_the_password(spark: Any, pg_dsn: str) -> None:
    """The options ``writer_options`` builds, through Spark's own redaction: no value shows
    the password. The old name ``dsn`` Spark shows as it is: the reason for ``secret.dsn``."""
    assert spark_default_redaction(spark) == SPARK_REDACTED.pattern
    options = writer_options(sink_config(pg_options(pg_dsn, "t")))
    assert "secret.dsn" in options and "secret.dsn" not in spark_redacted(spark, options).values()
    shown = json.dumps(spark_redacted(spark, options))
    assert_no_secrets([], url_passwords(pg_dsn), texts={"options as Spark shows them": shown})
    assert spark_redacted(spark, {"dsn": pg_dsn}) == {"dsn": pg_dsn}


def ui_plans(spark: Any) -> str:
    """What the Spark UI's SQL tab shows: every execution's description and plan."""
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    shown = []
    for n in range(executions.size()):
        execution = executions.apply(n)
        shown += [execution.description(), execution.details()]
        shown.append(execution.physicalPlanDescription())
    return "\n".join(shown)


def test_a_query_shows_the_password_nowhere(
    spark: Any,
    tmp_path: Path,
    pg_dsn: str,
    pg: psycopg.Connection[Any],
    unique_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A real query through ``format("exactlyonce")`` with the options ``writer_options``
    builds: its plan (``explain``), progress, status, Spark's settings, the UI's SQL plans
    and everything it leaves on disk (the checkpoint) show no form of the password."""
    data = make_input(tmp_path / "in", files=2, rows=40, seed=8)
    prepared(pg_dsn, pg, unique_name)
    options = writer_options(sink_config(pg_options(pg_dsn, unique_name)))
    query = start(spark, tmp_path / "in", tmp_path / "ck", **options)
    query.awaitTermination()
    assert_exactly_once(pg, unique_name, data.expected_ids)
    capsys.readouterr()
    query.explain(True)
    explain = capsys.readouterr().out
    assert "WriteToMicroBatchDataSource exactlyonce" in explain
    texts = {
        "explain": explain,
        "recentProgress": "\n".join(p.json for p in query.recentProgress),
        "status": json.dumps(query.status),
        "spark conf": repr(spark.sparkContext.getConf().getAll()),
        "UI SQL plans": ui_plans(spark),
    }
    assert all(texts.values()), [name for name, text in texts.items() if not text]
    assert_no_secrets([tmp_path / "ck"], url_passwords(pg_dsn), texts=texts)
