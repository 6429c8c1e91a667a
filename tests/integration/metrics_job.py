"""The streaming job tests/integration/test_metrics.py scrapes: JSON files -> PostgresSink
through ``foreachBatch(sink)``, with the Python API of the metrics (``serve``, ``watch``) and
no logging configured (so the sink's default batch line shows on stderr). Runs until killed;
writes the metrics port to ``--port-file`` once it serves."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from exactlyonce.connectors import PostgresSink
from exactlyonce.dedup.catalog import DedupConfig
from exactlyonce.integration import metrics
from exactlyonce.integration.spark import session, start_stream

SCHEMA = "event_id STRING, amount BIGINT"


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--input", "--checkpoint", "--query-name", "--table", "--port-file"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()
    spark = session("metrics-job", master="local[2]", connectors=False, data_source=False)
    port = metrics.serve(0, "127.0.0.1")
    metrics.watch(spark)
    sink = PostgresSink(
        os.environ["EXACTLYONCE_PG_DSN"],
        args.table,
        ["event_id"],
        args.query_name,
        shards=2,
        dedup=DedupConfig(os.environ["EXACTLYONCE_REDIS_URL"], expected_ids=2_000),
    )
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(args.input)
    query = start_stream(df, sink, args.checkpoint, processing_time="500 milliseconds")
    Path(args.port_file).write_text(str(port), encoding="utf-8")
    query.awaitTermination()


if __name__ == "__main__":
    main()
