"""Kafka: the exactly-once KafkaSink against a plain idempotent producer, same rows, one run.

``python -m bench.kafka --rows 500000`` writes the same N generated rows two ways, in one
Spark session (``local[2]``), each into its own new topic (2 partitions):

``eos``
    ``KafkaSink(bootstrap, topic, id_columns=["id"], query_name=..., shards=2)`` with its
    defaults (JSON values, the Redis ID catalog from ``$EXACTLYONCE_REDIS_URL`` or the
    services file), called as a ``foreachBatch`` callable on a cached DataFrame. A first,
    small epoch (untimed) starts the sink: preflight, broker probe, head, catalog. The timed
    epoch then pays what every epoch pays: record IDs, the shuffle by ID, dedup, one Kafka
    transaction per shard with headers, commit marker and confirmation, the head.
``plain``
    ``df.select(to_json(struct(*)))`` then ``mapInArrow``: each task opens one idempotent
    producer (``enable.idempotence``, ``acks=all``, the same batching settings as the
    sink's) and produces every value, then flushes. At-least-once; the ceiling for a Python
    writer through confluent-kafka. It is warmed up on a small topic first.

``spark``
    Spark's own Kafka sink, ``df.select(to_json(struct(*)).alias("value")).write
    .format("kafka")`` (``spark-sql-kafka``, its default producer settings: idempotent,
    ``acks=all``): what a user would pick instead. At-least-once (a re-run batch is written
    again). Warmed up the same way.

The result, ``bench/results/kafka.json``, holds ``rows``, ``eos_msgs_per_s``,
``plain_msgs_per_s``, ``spark_kafka_sink_msgs_per_s``, ``ratio`` (eos / plain) and
``ratio_vs_spark`` (eos / spark), from the best timed run of each (runs interleave the paths
so all see the same load) at the top level, ``ratio_median``/``ratio_vs_spark_median`` from the
median runs, and details under ``paths``. Targets: both ratios at least 0.7.
The same run then measures the Kafka buffer ahead of a slow sink (:mod:`bench.buffer`: Spark
batch durations to a 10x slowed PostgreSQL with and without the buffer against a fast-sink
baseline, and drain throughput against direct writes) and adds its keys at the top level
(``--no-buffer`` skips it). Keys it does not own are kept when it rewrites the file.
One run, on a shared machine: compare the ratio, not the absolute rates.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.ceiling import (
    CpuMeter,
    ceiling_figures,
    ceiling_paths,
    cpu_per_million,
    service_pids,
    time_ceilings,
)
from bench.common import (
    PARTITIONS,
    BenchError,
    PathTiming,
    add_results_dir_argument,
    generate_rows,
    machine_info,
    now_utc,
    progress,
    ratio,
    read_results,
    service,
    timed,
    versions,
    write_results,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

NAME = "kafka"
TARGET_RATIO = 0.7  # eos / the plain producer
TARGET_RATIO_VS_SPARK = 1.0  # eos / Spark's own Kafka sink (issue 34; median over runs >= 0.9)
WARM_ROWS = 100_000
PRODUCER_TUNING = {
    "linger.ms": 5,
    "batch.num.messages": 10_000,
    "queue.buffering.max.messages": 500_000,
}


@dataclass(frozen=True)
class PlainWriter:
    """``mapInArrow`` function: one idempotent producer per task, every value, one flush."""

    bootstrap: str
    topic: str

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from confluent_kafka import Producer

        producer = Producer(
            {
                **PRODUCER_TUNING,
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
            }
        )
        produce, topic, rows = producer.produce, self.topic, 0
        for batch in batches:
            for value in batch.column(0).to_pylist():
                while True:
                    try:
                        produce(topic, value)
                        break
                    except BufferError:
                        producer.poll(0.05)
            rows += batch.num_rows
            producer.poll(0)
        if producer.flush(120):
            raise RuntimeError("plain producer: messages left undelivered")
        yield pa.RecordBatch.from_pydict({"n": pa.array([rows], pa.int64())})


def write_plain(df: DataFrame, bootstrap: str, topic: str) -> int:
    from pyspark.sql import functions as F

    values = df.select(
        F.to_json(F.struct(*[F.col(c) for c in df.columns]), {"ignoreNullFields": "false"})
        .cast("binary")
        .alias("value")
    )
    return sum(
        int(r["n"]) for r in values.mapInArrow(PlainWriter(bootstrap, topic), "n long").collect()
    )


def write_spark(df: DataFrame, bootstrap: str, topic: str) -> int:
    """Spark's own Kafka sink (at-least-once), with its default producer settings."""
    from pyspark.sql import functions as F

    values = df.select(
        F.to_json(F.struct(*[F.col(c) for c in df.columns]), {"ignoreNullFields": "false"})
        .cast("binary")
        .alias("value")
    )
    values.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", topic
    ).save()
    return df.count()


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=-1)])[
        topic
    ].result()


def topic_messages(bootstrap: str, topic: str) -> int:
    """Messages in the topic (every offset that is not a transaction marker)."""
    from exactlyonce.connectors.kafka.reader import consumer, drain, partitions_of

    client = consumer(bootstrap, isolation="read_uncommitted")
    try:
        parts = partitions_of(client, topic, 30)
        ranges = {(topic, p): (-2, None) for p in parts}
        return sum(1 for _ in drain(client, ranges, 600, topic))
    finally:
        client.close()


def produce_loop() -> str:
    from exactlyonce.connectors.kafka.arrowproduce import native_loop

    return "native" if native_loop() is not None else "python"


def run(
    rows: int, shards: int, repeat: int, buffer_args: dict[str, Any] | None = None
) -> dict[str, Any]:
    from exactlyonce.connectors.kafka import KafkaSink
    from exactlyonce.connectors.kafka.reader import read_exactly_once
    from exactlyonce.dedup.catalog import DedupConfig
    from exactlyonce.integration.spark import session

    bootstrap = service("KAFKA_BOOTSTRAP_SERVERS")
    os.environ.setdefault("EXACTLYONCE_REDIS_URL", service("EXACTLYONCE_REDIS_URL"))
    spark = session("bench-kafka", master="local[2]")
    tag = uuid.uuid4().hex[:8]
    progress(f"generating {repeat} x {rows:,} rows (distinct IDs per run) and a warm-up set")
    batches = [generate_rows(spark, rows, start=i * rows) for i in range(repeat)]
    warm = generate_rows(spark, WARM_ROWS, start=repeat * rows)

    plain_topic, eos_topic = f"bench-plain-{tag}", f"bench-eos-{tag}"
    spark_topic = f"bench-spark-{tag}"
    query = f"bench-kafka-{tag}"
    create_topic(bootstrap, plain_topic)
    create_topic(bootstrap, spark_topic)
    # The Bloom filter sized for the IDs this query will hold. Every ID here lands in
    # generation 0; each generation's filter is sized for all of expected_ids (until
    # 2026-11-25 for a quarter, so this asked for 4x the total: results/kafka.json has 6.4M).
    held = WARM_ROWS + repeat * rows
    dedup = DedupConfig(os.environ["EXACTLYONCE_REDIS_URL"], expected_ids=held)
    sink = KafkaSink(
        bootstrap,
        eos_topic,
        ["id"],
        query,
        create_topic=True,
        partitions=PARTITIONS,
        shards=shards,
        dedup=dedup,
    )
    progress("warm-up: plain, and the sink's first epoch (preflight, head, catalog)")
    write_plain(warm, bootstrap, plain_topic)
    write_spark(warm, bootstrap, spark_topic)
    sink(warm, 0)

    meter = CpuMeter(service_pids("kafka", "redis"))
    eos, plain, spark_path = (PathTiming(n, rows) for n in ("eos", "plain", "spark"))
    noop, python = ceiling_paths(rows)
    time_ceilings(warm, WARM_ROWS, *ceiling_paths(WARM_ROWS), meter)  # warm-up, not kept
    reports = []
    for i, df in enumerate(batches):  # interleaved, so every path sees the same machine load
        progress(f"run {i + 1}/{repeat}: ceilings (noop, Python)")
        time_ceilings(df, rows, noop, python, meter)
        progress(f"run {i + 1}/{repeat}: plain")
        with meter.measure() as cpu:
            seconds, written = timed(functools.partial(write_plain, df, bootstrap, plain_topic))
        plain.record(seconds, {"cpu": cpu})
        if written != rows:
            raise BenchError(f"plain: wrote {written:,} of {rows:,}")
        progress(f"run {i + 1}/{repeat}: Spark's Kafka sink")
        with meter.measure() as cpu:
            seconds, _ = timed(functools.partial(write_spark, df, bootstrap, spark_topic))
        spark_path.record(seconds, {"cpu": cpu})
        progress(f"run {i + 1}/{repeat}: eos")
        with meter.measure() as cpu:
            seconds, _ = timed(functools.partial(sink, df, i + 1))
        eos.record(seconds, {"cpu": cpu})
        report = sink.last_report
        assert report is not None
        if report.written != rows:
            raise BenchError(f"eos: {report.written:,} written of {rows:,}")
        reports.append(report)
    eos_runs, plain_runs, spark_runs = eos.runs, plain.runs, spark_path.runs
    total = WARM_ROWS + repeat * rows
    progress("checking both topics")
    plain_held = topic_messages(bootstrap, plain_topic)
    spark_held = topic_messages(bootstrap, spark_topic)
    delivered = sum(1 for _ in read_exactly_once(bootstrap, eos_topic, query))
    if plain_held != total or spark_held != total or delivered != total:
        raise BenchError(
            f"of {total:,}: the plain topic holds {plain_held:,}, Spark's {spark_held:,}, "
            f"the recipe reads {delivered:,} of the sink's"
        )
    buffer_figures: dict[str, Any] = {}
    if buffer_args is not None:
        from bench import buffer as buffer_bench

        buffer_figures = buffer_bench.run(
            spark,
            generate_rows,
            dsn=service("EXACTLYONCE_PG_DSN"),
            bootstrap=bootstrap,
            first_id=total + 1_000_000,
            **buffer_args,
        )
    spark.stop()

    eos_rate, plain_rate = rows / min(eos_runs), rows / min(plain_runs)
    spark_rate = rows / min(spark_runs)
    best = reports[eos_runs.index(min(eos_runs))]
    return {
        "rows": rows,
        "eos_msgs_per_s": round(eos_rate),
        "plain_msgs_per_s": round(plain_rate),
        "spark_kafka_sink_msgs_per_s": round(spark_rate),
        "ratio": ratio(eos_rate, plain_rate),
        "ratio_median": ratio(statistics.median(plain_runs), statistics.median(eos_runs)),
        "ratio_vs_spark": ratio(eos_rate, spark_rate),
        "ratio_vs_spark_median": ratio(statistics.median(spark_runs), statistics.median(eos_runs)),
        "target_ratio": TARGET_RATIO,
        "target_ratio_vs_spark": TARGET_RATIO_VS_SPARK,
        "paths": {
            "eos": {
                "runs_seconds": [round(s, 3) for s in eos_runs],
                "shards": shards,
                "broker_hides_aborted": sink.hides_aborted,
                "dedup": sink.dedup_config is not None,
                "dedup_expected_ids": dedup.expected_ids,
                "bloom_negatives": best.bloom_negatives,
                "catalog_lookups": best.catalog_lookups,
                "read_back_by_recipe": delivered,
                # The sink's per-record loop in the driver's install (the workers share it):
                # "native" (exactlyonce.connectors.kafka.arrowproduce) or "python".
                "produce_loop": produce_loop(),
            },
            "plain": {"runs_seconds": [round(s, 3) for s in plain_runs], "topic_holds": plain_held},
            "spark": {"runs_seconds": [round(s, 3) for s in spark_runs], "topic_holds": spark_held},
        },
        "cpu_s_per_million": cpu_per_million(
            {"eos": eos, "plain": plain, "spark": spark_path, "ceiling_python": python}
        ),
        **ceiling_figures(noop, python, {"eos": eos, "plain": plain, "spark": spark_path}),
        **buffer_figures,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kafka", description=__doc__)
    parser.add_argument("--rows", type=int, default=300_000, help="rows per timed run")
    parser.add_argument("--shards", type=int, default=PARTITIONS)
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per path; best counts")
    parser.add_argument("--no-buffer", action="store_true", help="skip the buffer benchmark")
    parser.add_argument("--buffer-batch-rows", type=int, default=20_000)
    parser.add_argument("--buffer-batches", type=int, default=11, help="per path, 1 untimed")
    parser.add_argument("--drain-rows", type=int, default=200_000)
    parser.add_argument("--drain-repeat", type=int, default=3)
    add_results_dir_argument(parser)
    args = parser.parse_args(argv)
    buffer_args = None
    if not args.no_buffer:
        buffer_args = {
            "batch_rows": args.buffer_batch_rows,
            "batches": args.buffer_batches,
            "drain_rows": args.drain_rows,
            "drain_repeat": args.drain_repeat,
        }
    figures = run(args.rows, args.shards, args.repeat, buffer_args)
    data = {
        **read_results(NAME, args.results_dir),
        **figures,
        "date": now_utc(),
        "machine": machine_info(),
        "versions": versions("pyspark", "pyarrow", "confluent_kafka"),
        "broker": service("KAFKA_BOOTSTRAP_SERVERS"),
    }
    write_results(NAME, data, args.results_dir)
    print(
        f"eos {figures['eos_msgs_per_s']:,} msgs/s, plain {figures['plain_msgs_per_s']:,} "
        f"msgs/s, ratio {figures['ratio']:.3f} (target {TARGET_RATIO}); Spark's Kafka sink "
        f"{figures['spark_kafka_sink_msgs_per_s']:,} msgs/s, ratio {figures['ratio_vs_spark']:.3f} "
        f"(target {TARGET_RATIO_VS_SPARK}); of the Python ceiling "
        f"({figures['ceiling_python_rows_per_s']:,} rows/s): {figures['of_python_ceiling']}",
        flush=True,
    )
    if buffer_args is not None:
        from bench.buffer import print_figures

        print_figures(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
