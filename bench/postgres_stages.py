"""Where the PostgreSQL sink's CPU goes, stage by stage, against a plain COPY.

``python -m bench postgres_stages --rows 1000000`` times the same generated rows (as
:mod:`bench.postgres`) through each stage of the sink's plan, and through the plain COPY users
would write instead, in one Spark session (``local[2]``), interleaved, ``--repeat`` times:

``python_ceiling``       the rows handed to Python as Arrow, counted (:mod:`bench.ceiling`);
``ids_python``           plus what the sink adds in the JVM: the record ID (md5 of ``id``), the
                         epoch and the shard (``pmod(hash(record_id), 2)``);
``ids_sorted_python``    plus the sort by record ID within each partition (the sink's order);
``raw_copy``             one COPY per task into a plain table, unique index on ``id``
                         (:class:`bench.postgres.RawCopyWriter`);
``raw_copy_sorted``      the same, each partition sorted by ``id`` first;
``eos_no_dedup``         ``PostgresSink(dedup=False)``, an epoch after its first: the protocol
                         without the catalog;
``eos``                  ``PostgresSink`` with its defaults (the catalog on), an epoch after its
                         first;
``eos_first_epoch``      the same sink's first epoch, as ``bench postgres`` times it: with the
                         query's start (preflight, head, catalog) inside the clock.

Every write path writes into a new table of its own each run (an empty table and a new index,
as ``bench postgres`` does; the sinks' warm-up epoch puts ``--warmup-rows`` rows in first), and
the table must then hold exactly the rows written. Each path's figure is its user+system CPU
seconds per million records, median run, summed over the Spark tree (driver, JVM, Python
workers), PostgreSQL and Redis (:class:`CpuMeter`), and its best rate. On two shared cores
every path is CPU-bound, so the CPU per stage says where the sink's extra cost over a plain
COPY is. A profile, not a target (the target is ``bench postgres``'s ``eos_vs_raw_copy``):
results go to ``bench/results/postgres_stages.json``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from bench import common
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
    load_average,
    progress,
    timed,
)
from bench.postgres import (
    create_plain_table,
    ensure_redis_env,
    forget_sink,
    new_sink,
    purge_leftovers,
    resolve_dsn,
    verify,
    write_raw_copy,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

NAME = "postgres_stages"
TABLE = "bench_stages"
SINK_SHARDS = PARTITIONS  # as bench postgres: shards=2


def with_ids(df: DataFrame) -> DataFrame:
    """The sink's projection, as plain Spark: the record ID, the epoch and the shard."""
    from pyspark.sql import functions as F

    rid = F.md5(F.col("id"))
    return df.select(
        "*",
        rid.alias("record_id"),
        F.lit(1).cast("long").alias("epoch"),
        F.pmod(F.hash(rid), F.lit(SINK_SHARDS)).alias("_eo_shard"),
    )


def run(rows: int, warmup_rows: int, repeat: int) -> dict[str, Any]:
    from exactlyonce.integration.spark import session

    dsn = resolve_dsn(None)
    redis_url = ensure_redis_env()
    purge_leftovers(dsn, redis_url)
    common.ensure_workers_import_bench()
    os.environ.setdefault("EXACTLYONCE_SPARK_LOG_LEVEL", "ERROR")
    spark = session("bench-postgres-stages", extra={"spark.ui.showConsoleProgress": "false"})
    progress(f"generating and caching {rows:,} and {warmup_rows:,} rows")
    df = common.generate_rows(spark, rows)
    small = common.generate_rows(spark, warmup_rows, start=rows)

    def copy(d: DataFrame) -> int:
        create_plain_table(dsn, TABLE)
        return write_raw_copy(d, dsn, TABLE)

    def sink_epoch(kwargs: dict[str, Any], first: bool) -> Callable[[], Any]:
        """A new sink over a new table; its first epoch (``small``) untimed unless ``first``:
        returns the timed call."""
        sink = new_sink(dsn, TABLE, "stages", SINK_SHARDS, df.schema, kwargs)
        if first:
            return functools.partial(_then_forget, dsn, sink, 0, df)
        sink(small, 0)
        return functools.partial(_then_forget, dsn, sink, 1, df)

    paths: dict[str, tuple[Callable[[], Callable[[], Any]], int]] = {
        "python_ceiling": (lambda: lambda: count_in_python(df), 0),
        "ids_python": (lambda: lambda: count_in_python(with_ids(df)), 0),
        "ids_sorted_python": (
            lambda: lambda: count_in_python(with_ids(df).sortWithinPartitions("record_id")),
            0,
        ),
        "raw_copy": (lambda: lambda: copy(df), rows),
        "raw_copy_sorted": (lambda: lambda: copy(df.sortWithinPartitions("id")), rows),
        "eos_no_dedup": (lambda: sink_epoch({"dedup": False}, first=False), rows + warmup_rows),
        "eos": (lambda: sink_epoch({}, first=False), rows + warmup_rows),
        "eos_first_epoch": (lambda: sink_epoch({}, first=True), rows),
    }
    for name, (prepare, _) in paths.items():  # untimed: class loading, first Python workers
        progress(f"warm-up: {name}")
        prepare()()
    meter = CpuMeter(service_pids("postgres", "redis"))
    runs: dict[str, list[tuple[float, dict[str, float]]]] = {name: [] for name in paths}
    for i in range(repeat):
        for name, (prepare, expected) in paths.items():
            progress(f"run {i + 1}/{repeat}: {name}")
            call = prepare()
            with meter.measure() as cpu:
                seconds, _ = timed(call)
            if expected:
                verify(dsn, TABLE, expected, name)
            runs[name].append((seconds, cpu))
    spark.stop()
    return {"rows": rows, "warmup_rows": warmup_rows, "repeat": repeat,
            "paths": per_million_figures(runs, rows)}  # fmt: skip


def _then_forget(dsn: str, sink: Any, epoch: int, df: DataFrame) -> None:
    """One epoch of ``sink``; then its head and catalog go (its table stays, to be counted)."""
    try:
        sink(df, epoch)
    finally:
        forget_sink(dsn, sink)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.postgres_stages", description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per timed run")
    parser.add_argument("--warmup-rows", type=int, default=20_000, help="a sink's first epoch")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per path")
    add_results_dir_argument(parser)
    args = parser.parse_args(argv)
    started_load = load_average()
    figures = run(args.rows, args.warmup_rows, args.repeat)
    write_stage_profile(
        NAME, figures, started_load, ("pyspark", "pyarrow", "psycopg"), args.results_dir
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
