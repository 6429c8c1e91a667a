"""What the crash job scripts (job.py, kafka_job.py, redis_job.py, es_job.py) share.

Each script reads JSON files (one per epoch), writes them through its sink and runs until
every input file is committed (availableNow); the parts below are the same in all of them.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from exactlyonce.dedup.catalog import DedupConfig
from exactlyonce.integration.spark import session, start_stream
from tests.crash.harness import EVENT_LOG_ENV
from tests.support.secrets_scan import event_log_conf

SCHEMA = "event_id STRING, amount BIGINT, action STRING"
# Short-lived test JVMs start faster with the C1 compiler only (the JIT tier; nothing else).
TEST_JVM = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}


def job_arguments() -> argparse.ArgumentParser:
    """The arguments every crash job takes; a script adds its sink's own."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--query-name", required=True)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--max-files-per-trigger", type=int, default=1)
    # foreachBatch(sink), or Spark's format API: df.writeStream.format("exactlyonce")
    parser.add_argument("--api", default="foreachBatch", choices=["foreachBatch", "format"])
    return parser


def crash_session(
    app_name: str,
    master: str,
    extra: dict[str, str] | None = None,
    *,
    connectors: bool = False,
    api: str = "foreachBatch",
) -> SparkSession:
    """Logging set up, and a Spark session whose executors see the crash-point environment.
    Every crash job reads JSON files, so Spark's Kafka and Avro jars stay off its class path
    unless ``connectors`` (the sinks' own clients write Kafka); ``format("exactlyonce")`` is
    registered only for ``api="format"`` (registering costs a Python process per start).
    Spark's event log is written, uncompressed, where ``$EXACTLYONCE_TEST_EVENT_LOG`` says
    (the harness sets it: its credential scan reads the log)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # Small COPY chunks: a shard of a few hundred bytes goes in several, so mid_copy fires
    # between two chunks of one COPY (exactlyonce/connectors/postgres/writer.py).
    os.environ.setdefault("EXACTLYONCE_CRASH_COPY_CHUNK_BYTES", "256")
    # Likewise Redis: tasks stage 4-record chunks, so mid_write fires between two of them
    # (the path a task bigger than pipeline_size takes; exactlyonce/connectors/redis/task.py).
    os.environ.setdefault("EXACTLYONCE_CRASH_PIPELINE_SIZE", "4")
    # Executors launched by a standalone worker do not inherit this process's environment.
    crash_env = {
        f"spark.executorEnv.{key}": value
        for key, value in os.environ.items()
        if key.startswith("EXACTLYONCE_CRASH_")
    }
    return session(
        app_name,
        master=master,
        extra={**crash_env, **TEST_JVM, **_event_log(), **(extra or {})},
        connectors=connectors,
        data_source=api == "format",
    )


def _event_log() -> dict[str, str]:
    directory = os.environ.get(EVENT_LOG_ENV)
    return event_log_conf(Path(directory)) if directory else {}


def json_files(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The input directory as a stream, ``--max-files-per-trigger`` files per epoch."""
    return (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", args.max_files_per_trigger)
        .json(args.input)
    )


def small_catalog(**options: Any) -> DedupConfig:
    """The catalog in the services' Redis, with small filters: Bloom false positives happen
    and are counted."""
    return DedupConfig(os.environ["EXACTLYONCE_REDIS_URL"], expected_ids=2_000, **options)


# The JOB DONE line's label for each report field a job totals.
TOTAL_LABELS = {
    "written": "written",
    "duplicates": "duplicates dropped",
    "shards_skipped": "shards skipped",
    "catalog_rebuilds": "catalog rebuilds",
    "dead_letters": "dead letters",
}


def run_to_end(
    spark: SparkSession, args: argparse.Namespace, sink: Any, totals: tuple[str, ...]
) -> None:
    """Stream the input through ``sink`` until every file is committed, then print the
    ``JOB DONE`` line: the number of batches and, per report field in ``totals``, its sum
    over the batches that were not skipped."""
    query = start_stream(json_files(spark, args), sink, args.checkpoint, available_now=True)
    query.awaitTermination()
    done = [r for r in sink.reports if not r.skipped]
    summed = ", ".join(
        f"{TOTAL_LABELS[field]} {sum(getattr(r, field) for r in done)}" for field in totals
    )
    print(f"JOB DONE {len(sink.reports)} batches; {summed}", flush=True)


def run_format_to_end(
    spark: SparkSession, args: argparse.Namespace, options: dict[str, str], repartition: int = 0
) -> None:
    """``--api format``: the same stream through ``format("exactlyonce")`` with the sink's
    settings as options (``repartition``: round-robin into that many Spark partitions),
    until every file is committed; then the ``JOB DONE`` line (the driver keeps no batch
    report on this path: only the batch count)."""
    stream = json_files(spark, args)
    if repartition:
        stream = stream.repartition(repartition)
    writer = stream.writeStream.format("exactlyonce")
    for name, value in options.items():
        writer = writer.option(name, value)
    query = writer.option("checkpointLocation", args.checkpoint).trigger(availableNow=True).start()
    query.awaitTermination()
    print(f"JOB DONE {len(query.recentProgress)} batches", flush=True)
