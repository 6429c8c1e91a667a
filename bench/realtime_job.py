"""One path of ``python -m bench realtime``, as its own Spark application: a Kafka topic of
stamped events (``{"event_id": ..., "ts": ...}``) into a sink, until ``<checkpoint>.stop``
appears. Paths:

``rtm_postgres`` / ``rtm_kafka`` / ``rtm_redis``
    Spark Real-time Mode, ``start_stream(..., real_time=...)``: ``sink.realtime(schema)`` fed by
    ``mapInArrow``, one row per Arrow batch (exactly once by frontiers);
``rtm_foreach_postgres`` / ``rtm_foreach_kafka`` / ``rtm_foreach_redis``
    the same writers fed by Spark's ``foreach(sink.realtime(schema))``;
``spark_rtm_kafka``
    Spark Real-time Mode into Spark's own Kafka sink (at-least-once);
``rtm_arrow_arrival`` / ``rtm_foreach_arrival``
    Spark Real-time Mode into Python code that only notes when each row reached it (a line
    per row in ``<out>/``), by each transport: the floor of any Python writer on it;
``microbatch_postgres`` / ``microbatch_kafka``
    ``foreachBatch(sink)`` with ``processingTime="0 seconds"`` (exactly once by epochs).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

PATHS = (
    "rtm_arrow_arrival",
    "rtm_foreach_arrival",
    "rtm_postgres",
    "rtm_kafka",
    "rtm_redis",
    "rtm_foreach_postgres",
    "rtm_foreach_kafka",
    "rtm_foreach_redis",
    "spark_rtm_kafka",
    "microbatch_postgres",
    "microbatch_kafka",
)


class ArrivalWriter:
    """Notes when each row reached ``process()``: ``event_id time`` lines, one file per task."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def open(self, partition_id: int, epoch_id: int) -> bool:
        name = f"{partition_id}-{epoch_id}-{os.getpid()}-{time.monotonic_ns()}.txt"
        self.file = open(os.path.join(self.directory, name), "a", buffering=1)  # noqa: SIM115
        return True

    def process(self, row: Any) -> None:
        self.file.write(f"{row.event_id} {time.time()}\n")

    def close(self, error: BaseException | None) -> None:
        self.file.close()


class ArrowArrivals:
    """:class:`ArrivalWriter` on the Arrow transport: ``write_arrow`` as a ``mapInArrow``
    function that notes when each row reached Python, and yields nothing."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def write_arrow(self, batches: Any) -> Any:
        name = f"arrow-{os.getpid()}-{time.monotonic_ns()}.txt"
        with open(os.path.join(self.directory, name), "a", buffering=1) as file:
            for batch in batches:
                now = time.time()
                for event_id in batch.column("event_id").to_pylist():
                    file.write(f"{event_id} {now}\n")
        yield from ()


def stream(spark: Any, bootstrap: str, topic: str) -> Any:
    from pyspark.sql import functions as F

    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    value = F.col("value").cast("string")
    return source.select(
        "topic",
        "partition",
        "offset",
        F.get_json_object(value, "$.event_id").alias("event_id"),
        F.get_json_object(value, "$.ts").cast("double").alias("ts"),
    )


def sink_of(path: str, out: str, query: str) -> Any:
    from exactlyonce.connectors import KafkaSink, PostgresSink, RedisSink
    from exactlyonce.connectors.base.config import IdFrom

    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    # Real-time Mode: IDs from the source coordinates; micro-batch: from event_id.
    rtm = path.startswith("rtm")
    ids: list[str] | None = None if rtm else ["event_id"]
    id_from: IdFrom = "content" if rtm else "columns"
    if path.endswith("postgres"):
        dsn = os.environ["EXACTLYONCE_PG_DSN"]
        return PostgresSink(dsn, out, ids, query, mode="append", id_from=id_from)
    if path.endswith("redis"):
        url = os.environ["BENCH_SINK_REDIS_URL"]
        return RedisSink(url, f"{out}:events", None, query, write="stream", id_from="content")
    return KafkaSink(bootstrap, out, ids, query, create_topic=True, partitions=2, id_from=id_from)


def start(
    path: str,
    df: Any,
    out: str,
    query: str,
    checkpoint: str,
    real_time: str,
    commit_interval: float | None = None,
) -> Any:
    from exactlyonce.integration.spark import start_realtime, start_stream

    if path == "spark_rtm_kafka":
        from pyspark.sql import functions as F

        value = F.to_json(F.struct("event_id", "ts")).alias("value")
        return (
            df.select(value)
            .writeStream.format("kafka")
            .option("kafka.bootstrap.servers", os.environ["KAFKA_BOOTSTRAP_SERVERS"])
            .option("topic", out)
            .option("checkpointLocation", checkpoint)
            .queryName(query)
            .outputMode("update")
            .trigger(realTime=real_time)
            .start()
        )
    if path == "rtm_foreach_arrival":
        os.makedirs(out, exist_ok=True)
        return start_realtime(df, ArrivalWriter(out), checkpoint, query, real_time, "foreach")
    if path == "rtm_arrow_arrival":
        os.makedirs(out, exist_ok=True)
        return start_realtime(df, ArrowArrivals(out), checkpoint, query, real_time)
    sink = sink_of(path, out, query)
    interval = {} if commit_interval is None else {"commit_interval": commit_interval}
    if path.startswith("rtm_foreach"):
        writer = sink.realtime(df.schema, **interval)
        return start_realtime(df, writer, checkpoint, query, real_time, "foreach")
    if path.startswith("rtm") and interval:
        return start_realtime(
            df, sink.realtime(df.schema, **interval), checkpoint, query, real_time
        )
    if path.startswith("rtm"):
        return start_stream(df, sink, checkpoint, real_time=real_time)
    sink.preflight(df.schema)
    writer = df.writeStream.option("checkpointLocation", checkpoint).queryName(query)
    return writer.foreachBatch(sink).trigger(processingTime="0 seconds").start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", choices=PATHS, required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True, help="table, topic or stream key prefix")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--master", default="local[4]")
    parser.add_argument("--real-time", default="5 seconds", help="the epoch length")
    parser.add_argument("--commit-interval", type=float, default=None,
                        help="our writers' commit_interval (default: the sink's)")  # fmt: skip
    args = parser.parse_args()

    from exactlyonce.integration.spark import session

    extra = {"spark.sql.shuffle.partitions": "2"}
    if args.path.startswith("rtm_foreach"):
        # Python foreach writers get rows through this buffer (64 KiB by default): 1 passes
        # each row on at once (docs/guides/real-time-mode.md#latency). Not for micro-batch:
        # its mapInArrow tasks refuse a buffer that small.
        extra["spark.buffer.size"] = "1"
    spark = session(f"bench-realtime-{args.path}", master=args.master, extra=extra)
    df = stream(spark, os.environ["KAFKA_BOOTSTRAP_SERVERS"], args.topic)
    name = os.path.basename(args.out)
    query = start(
        args.path, df, args.out, name, args.checkpoint, args.real_time, args.commit_interval
    )
    print("JOB STARTED", flush=True)
    stop = Path(f"{args.checkpoint}.stop")
    while not stop.exists():
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")
        time.sleep(0.2)
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
