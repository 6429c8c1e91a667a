"""The streaming job the upsert crash tests SIGKILL: an aggregation in update mode, upserted.

JSON event files (one per epoch, with duplicate events and replays) ->
``dropDuplicates(["event_id"])`` -> ``groupBy("key").agg(count, sum)`` in ``outputMode("update")``
-> a sink in ``mode="upsert"`` keyed by ``key``: PostgreSQL (``EXACTLYONCE_PG_DSN``), Redis
(``EXACTLYONCE_SINK_REDIS_URL``, hash or string writes) or Elasticsearch (``--es-url``); with
``--sink all``, all three, one after the other in each epoch (a fan-out: one JVM start per run
serves the three sinks' crash schedules; each sink keeps its own head and catalog).

Runs until every input file is committed (availableNow). Then, with ``--expected-out``, it
runs the same aggregation as a plain batch job over the deduplicated input and writes it
there as JSON (``{key: [n, total]}``), the end state the sink must hold.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from exactlyonce.connectors import ElasticsearchSink, ExactlyOnceSink, PostgresSink, RedisSink
from exactlyonce.connectors.elasticsearch import RetryPolicy
from exactlyonce.integration.spark import start_stream
from tests.crash import job_common

SCHEMA = "event_id STRING, key STRING, amount BIGINT"
# Every run starts a JVM, and a test kills four of them: keep each start and each batch light.
# Two shuffle partitions: half the state stores per batch (fixed in the checkpoint at the first
# start). No whole-stage codegen, C1 only: a short job on a few hundred rows spends its CPU
# compiling, not running (measured here: a whole run 24-25 s instead of 31-37 s).
LEAN_SESSION = {
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.codegen.wholeStage": "false",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}


def aggregate(events: DataFrame) -> DataFrame:
    deduplicated = events.dropDuplicates(["event_id"])
    return deduplicated.groupBy("key").agg(
        F.count(F.lit(1)).alias("n"), F.sum("amount").alias("total")
    )


SINKS = ("postgres", "redis", "elasticsearch")


class FanOut:
    """``foreachBatch`` target writing each epoch through several sinks, in order."""

    def __init__(self, sinks: list[ExactlyOnceSink]) -> None:
        self.sinks = sinks

    def __call__(self, df: DataFrame, epoch: int) -> None:
        df.persist()
        try:
            for sink in self.sinks:
                sink(df, epoch)
        finally:
            df.unpersist()


def sink_name(base: str, kind: str, fan_out: bool) -> str:
    """The table/index and query name of ``kind``'s sink: each sink of a fan-out has its
    own (its head, its catalog)."""
    return f"{base}_{kind}" if fan_out else base


def build_sink(args: argparse.Namespace, kind: str) -> ExactlyOnceSink:
    name = sink_name(args.query_name, kind, args.sink == "all")
    common = {"mode": "upsert", "shards": args.shards}
    if kind == "postgres":
        return PostgresSink(os.environ["EXACTLYONCE_PG_DSN"], name, ["key"], name, **common)
    if kind == "redis":
        return RedisSink(
            os.environ["EXACTLYONCE_SINK_REDIS_URL"],
            f"{name}:{{key}}",
            ["key"],
            name,
            write=args.write,
            pipeline_size=4,  # several staged chunks per task: mid_write fires between them
            **common,
        )
    logging.getLogger("elastic_transport").setLevel(logging.WARNING)
    return ElasticsearchSink(
        args.es_url,
        name,
        ["key"],
        name,
        retry_policy=RetryPolicy(max_retries=6, initial_backoff=0.5, max_backoff=8.0),
        bulk_max_actions=5,  # several bulk requests per shard: mid_bulk lands between them
        **common,
    )


def write_expected(spark: SparkSession, args: argparse.Namespace) -> None:
    """The batch job: the same aggregation over every input file, deduplicated."""
    rows = aggregate(spark.read.schema(SCHEMA).json(args.input)).collect()
    expected = {r["key"]: [int(r["n"]), int(r["total"])] for r in rows}
    Path(args.expected_out).write_text(json.dumps(expected, sort_keys=True))


def stream_ended(
    spark: SparkSession, df: DataFrame, sinks: list[ExactlyOnceSink], checkpoint: str
) -> None:
    """Run the stream through ``sinks`` (one: as ``start_stream`` does; several: each
    preflighted, then a fan-out) until every input file is committed."""
    if len(sinks) == 1:
        query = start_stream(df, sinks[0], checkpoint, available_now=True, output_mode="update")
    else:
        for sink in sinks:
            sink.preflight(df.schema)
        query = (
            df.writeStream.foreachBatch(FanOut(sinks))
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(availableNow=True)
            .start()
        )
    query.awaitTermination()


def main() -> None:
    parser = job_common.job_arguments()
    parser.add_argument("--sink", required=True, choices=[*SINKS, "all"])
    parser.add_argument("--write", default="hash", choices=["hash", "string"])
    parser.add_argument("--es-url")
    parser.add_argument("--expected-out")
    args = parser.parse_args()
    spark = job_common.crash_session("upsert-crash-job", args.master, LEAN_SESSION)
    kinds = SINKS if args.sink == "all" else (args.sink,)
    sinks = [build_sink(args, kind) for kind in kinds]
    events = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(args.input)
    stream_ended(spark, aggregate(events), sinks, args.checkpoint)
    for sink in sinks:
        done = [r for r in sink.reports if not r.skipped]
        print(
            f"JOB DONE {sink.query_name} {len(sink.reports)} batches; written "
            f"{sum(r.written for r in done)}, stale {sum(r.stale for r in done)}",
            flush=True,
        )
    if args.expected_out:
        write_expected(spark, args)


if __name__ == "__main__":
    main()
