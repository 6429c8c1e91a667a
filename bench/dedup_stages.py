"""Where the dedup benchmark's end-to-end time goes: the PostgreSQL sink's plan, stage by stage.

``python -m bench.dedup_stages --rows 1000000`` writes the 20%-duplicate Parquet input of
``bench.dedup`` once, then times, each as a batch read of the same files (a streaming
micro-batch runs the same plan; its own bookkeeping, ``walCommit``/``commitOffsets``/
``latestOffset``/``queryPlanning``, is well under a second per epoch in ``recentProgress``):

- ``read_noop``: the Parquet read alone, into Spark's ``noop`` sink;
- ``read_arrow``: the read handed to a Python worker as Arrow (``mapInArrow``, rows counted);
- ``ids_arrow``: plus the sink's projection (record ID, epoch, dead-letter columns, shard);
- ``ids_sort_arrow``: plus the sort within each partition (no shuffle);
- ``ids_shuffle_arrow``: plus the shuffle by ID (no sort);
- ``ids_shuffle_sort_arrow``: the shuffle and the sort, the plan the sink runs for a
  nullable key;
- ``sink_dedup_off``/``sink_dedup_on``: the whole sink (PostgreSQL, and Redis with dedup).

Each is run ``--repeat`` times in turn; every run's seconds are printed. Nothing is written
to bench/results: this is a profile, not a benchmark.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.common import forget_catalog, progress
from bench.dedup import DUP_FRACTION, _drop, write_input
from exactlyonce.integration.envfile import service_env

SCHEMA = "event_id STRING, amount BIGINT, ts TIMESTAMP"


def _count_rows(batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa

    n = sum(b.num_rows for b in batches)
    yield pa.RecordBatch.from_pylist([{"n": n}])


def _consume(df: Any) -> None:
    df.mapInArrow(_count_rows, "n long").collect()


def _plans(spark: Any, path: Path, dsn: str, redis_url: str) -> dict[str, Callable[[], None]]:
    from pyspark.sql import functions as F

    from exactlyonce.connectors import PostgresSink

    def read() -> Any:
        return spark.read.schema(SCHEMA).parquet(str(path))

    shape = PostgresSink(dsn, "bench_stages", ["event_id"], "bench-stages", dedup=False)

    def ids() -> Any:
        projected = shape._project(read(), 0)
        return projected.withColumn("_eo_shard", F.pmod(F.hash("record_id"), F.lit(2)))

    def sink(dedup: bool) -> Callable[[], None]:
        def run() -> None:
            table = f"bench_stages_{'on' if dedup else 'off'}"
            _drop(dsn, table)
            options = {"redis_url": redis_url} if dedup else {"dedup": False}
            s = PostgresSink(
                dsn, table, ["event_id"], f"{table}-{time.time_ns()}", shards=2, **options
            )
            try:
                s(read(), 0)
            finally:
                _drop(dsn, table)
                forget_catalog(s)

        return run

    return {
        "read_noop": lambda: read().write.format("noop").mode("overwrite").save(),
        "read_arrow": lambda: _consume(read()),
        "ids_arrow": lambda: _consume(ids()),
        "ids_sort_arrow": lambda: _consume(ids().sortWithinPartitions("record_id")),
        "ids_shuffle_arrow": lambda: _consume(ids().repartition(2, "record_id")),
        "ids_shuffle_sort_arrow": lambda: _consume(
            ids().repartition(2, "record_id").sortWithinPartitions("record_id")
        ),
        "sink_dedup_off": sink(False),
        "sink_dedup_on": sink(True),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dedup_stages", description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    env = service_env()
    from exactlyonce.integration.spark import session

    spark = session(
        "bench-dedup-stages",
        extra={"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"},
    )
    work = Path(tempfile.mkdtemp(prefix="bench-dedup-stages-"))
    try:
        write_input(spark, args.rows, DUP_FRACTION, work / "input")
        plans = _plans(
            spark, work / "input", env["EXACTLYONCE_PG_DSN"], env["EXACTLYONCE_REDIS_URL"]
        )
        for r in range(args.repeat):
            for name, plan in plans.items():
                began = time.perf_counter()
                plan()
                progress(f"round {r + 1} {name}: {time.perf_counter() - began:.2f}s")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
