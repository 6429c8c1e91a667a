"""A Spark job for test_worker_probe.py: a PostgresSink called on one batch.

argv: worker python, DSN, table. Prints ``PROBE_MS <ms>`` after a batch it wrote, or
``REFUSED <message>`` and exits 3 when the sink refused to start.
"""

from __future__ import annotations

import sys

from exactlyonce.connectors import PostgresSink
from exactlyonce.errors import ConfigError
from exactlyonce.integration.spark import session


def main(worker_python: str, dsn: str, table: str) -> int:
    spark = session(
        "worker-probe-test",
        "local[1]",
        {"spark.pyspark.python": worker_python},
        connectors=False,
    )
    sink = PostgresSink(dsn, table, ["event_id"], f"probe-{table}", dedup=False)
    df = spark.createDataFrame([("a", 1), ("b", 2)], "event_id string, v bigint")
    try:
        sink(df, 0)
    except ConfigError as exc:
        print(f"REFUSED {exc}", flush=True)
        return 3
    print(f"PROBE_MS {sink.worker_probe.ms:.0f}", flush=True)
    sink(df, 1)  # the same start: the probe is not run again
    print(f"PROBE_MS_AGAIN {sink.worker_probe.ms:.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
