"""Where the Kafka sink's CPU goes, stage by stage, against Spark's own Kafka sink.

``python -m bench kafka_stages --rows 300000`` times the same generated rows (as
:mod:`bench.kafka`) through each stage of the sink's plan, and through what users would pick
instead, in one Spark session (``local[2]``), interleaved, ``--repeat`` times:

``python_ceiling``           the rows handed to Python as Arrow, counted (:mod:`bench.ceiling`);
``ids_json_python``          plus the sink's record ID (md5) and JSON value, in the JVM;
``ids_json_shuffle_python``  plus the shuffle by record ID (what the sink's tasks receive);
``plain``                    ``to_json`` then one idempotent producer per task, no headers;
``spark_sink``               Spark's own ``format("kafka")`` sink (at-least-once);
``eos_no_dedup``             ``KafkaSink(dedup=False)``: the protocol without the catalog;
``eos``                      ``KafkaSink`` with its defaults (the catalog on).

Each path's figure is its user+system CPU seconds per million records, median run, summed over
the Spark tree (driver, JVM, Python workers), the broker and Redis (:class:`CpuMeter`), and its
best rate. On two shared cores every path is CPU-bound, so ``eos`` can reach at most
``spark_sink``'s CPU over its own of Spark's rate: the CPU per stage says where the sink's extra
cost is. A profile, not a target: results go to ``bench/results/kafka_stages.json``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from bench.ceiling import (
    CpuMeter,
    count_in_python,
    per_million_figures,
    service_pids,
    write_stage_profile,
)
from bench.common import (
    PARTITIONS,
    add_results_dir_argument,
    generate_rows,
    load_average,
    progress,
    service,
    timed,
)
from bench.kafka import create_topic, write_plain, write_spark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

NAME = "kafka_stages"


def ids_and_json(df: DataFrame) -> DataFrame:
    """The sink's projection, as plain Spark: the record ID (md5 of ``id``) and the JSON
    value."""
    from pyspark.sql import functions as F

    value = F.to_json(F.struct(*[F.col(c) for c in df.columns])).cast("binary")
    return df.select(F.md5(F.col("id")).alias("rid"), value.alias("value"))


def run(rows: int, repeat: int) -> dict[str, Any]:
    from exactlyonce.connectors.kafka import KafkaSink
    from exactlyonce.dedup.catalog import DedupConfig
    from exactlyonce.integration.spark import session

    bootstrap = service("KAFKA_BOOTSTRAP_SERVERS")
    redis_url = os.environ.setdefault("EXACTLYONCE_REDIS_URL", service("EXACTLYONCE_REDIS_URL"))
    spark = session("bench-kafka-stages", master="local[2]")
    tag = uuid.uuid4().hex[:8]
    progress(f"generating {2 * repeat + 1} x {rows:,} rows")
    batches = [generate_rows(spark, rows, start=i * rows) for i in range(2 * repeat + 1)]
    plain_topic, spark_topic = f"stages-plain-{tag}", f"stages-spark-{tag}"
    create_topic(bootstrap, plain_topic)
    create_topic(bootstrap, spark_topic)

    def sink(dedup: bool) -> KafkaSink:
        catalog = DedupConfig(redis_url, expected_ids=rows * (repeat + 1)) if dedup else False
        return KafkaSink(
            bootstrap,
            f"stages-eos{int(dedup)}-{tag}",
            ["id"],
            f"stages-{int(dedup)}-{tag}",
            create_topic=True,
            partitions=PARTITIONS,
            shards=PARTITIONS,
            dedup=catalog,
        )

    eos, eos_no_dedup = sink(True), sink(False)
    warm = batches[-1]
    eos(warm, 0)  # untimed: preflight, head, catalog
    eos_no_dedup(warm, 0)
    paths: dict[str, Callable[[DataFrame, int], Any]] = {
        "python_ceiling": lambda df, i: count_in_python(df),
        "ids_json_python": lambda df, i: count_in_python(ids_and_json(df)),
        "ids_json_shuffle_python": lambda df, i: count_in_python(
            ids_and_json(df).repartition(PARTITIONS, "rid")
        ),
        "plain": lambda df, i: write_plain(df, bootstrap, plain_topic),
        "spark_sink": lambda df, i: write_spark(df, bootstrap, spark_topic),
        "eos_no_dedup": lambda df, i: eos_no_dedup(df, i + 1),
        "eos": lambda df, i: eos(df, i + 1),
    }
    for name, write in paths.items():  # untimed: class loading, first Python workers
        if not name.startswith("eos"):  # (the sinks started on it above)
            write(warm, -1)
    meter = CpuMeter(service_pids("kafka", "redis"))
    runs: dict[str, list[tuple[float, dict[str, float]]]] = {name: [] for name in paths}
    for i in range(repeat):
        for name, write in paths.items():
            df = batches[repeat + i] if name == "eos_no_dedup" else batches[i]  # new IDs
            progress(f"run {i + 1}/{repeat}: {name}")
            with meter.measure() as cpu:
                seconds, _ = timed(functools.partial(write, df, i))
            runs[name].append((seconds, cpu))
    spark.stop()
    return {"rows": rows, "repeat": repeat, "paths": per_million_figures(runs, rows)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kafka_stages", description=__doc__)
    parser.add_argument("--rows", type=int, default=300_000, help="rows per timed run")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per path")
    add_results_dir_argument(parser)
    args = parser.parse_args(argv)
    started_load = load_average()
    figures = run(args.rows, args.repeat)
    write_stage_profile(
        NAME, figures, started_load, ("pyspark", "pyarrow", "confluent_kafka"), args.results_dir
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
