"""A Spark job for test_worker_probe.py: a PostgresSink called on a batch, in two Spark
sessions one after the other (one JVM): workers on ``bad_python``, then on ``good_python``.

argv: bad python, good python, DSN, table. Prints ``REFUSED <message>`` when the sink refused
to start, and ``PROBE_MS <ms>`` / ``PROBE_MS_AGAIN <ms>`` after batches it wrote.
"""

from __future__ import annotations

import os
import sys

import psycopg

from exactlyonce.connectors import PostgresSink
from exactlyonce.errors import ConfigError
from exactlyonce.integration.spark import session


def write_one_batch(worker_python: str, dsn: str, table: str) -> None:
    os.environ["PYSPARK_PYTHON"] = worker_python  # what a SparkContext started here uses
    spark = session(
        "worker-probe-test",
        "local[1]",
        {"spark.pyspark.python": worker_python},
        connectors=False,
        data_source=False,
    )
    try:
        sink = PostgresSink(dsn, table, ["event_id"], f"probe-{table}", dedup=False)
        df = spark.createDataFrame([("a", 1), ("b", 2)], "event_id string, v bigint")
        try:
            sink(df, 0)
        except ConfigError as exc:
            print(f"REFUSED {exc}", flush=True)
            return
        print(f"PROBE_MS {sink.worker_probe.ms:.0f}", flush=True)
        sink(df, 1)  # the same start: the probe is not run again
        print(f"PROBE_MS_AGAIN {sink.worker_probe.ms:.0f}", flush=True)
    finally:
        spark.stop()


def main(bad_python: str, good_python: str, dsn: str, table: str) -> int:
    write_one_batch(bad_python, dsn, table)
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", [table]).fetchone()
    print(f"TABLE_AFTER_REFUSAL {found[0] if found else None}", flush=True)
    write_one_batch(good_python, dsn, table)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
