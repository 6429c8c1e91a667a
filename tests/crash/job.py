"""The streaming job the crash tests SIGKILL: JSON files -> PostgresSink, one file per epoch.

Runs until every input file is committed (availableNow), then exits 0.
"""

from __future__ import annotations

import argparse
import logging
import os

from exactlyonce.connectors import PostgresSink
from exactlyonce.integration.spark import session, start_stream

SCHEMA = "event_id STRING, amount BIGINT, action STRING"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--query-name", required=True)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--shards", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # Executors launched by a standalone worker do not inherit this process's environment.
    crash_env = {
        f"spark.executorEnv.{key}": value
        for key, value in os.environ.items()
        if key.startswith("EXACTLYONCE_CRASH_")
    }
    spark = session("crash-job", master=args.master, extra=crash_env)
    source = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(args.input)
    sink = PostgresSink(
        os.environ["EXACTLYONCE_PG_DSN"],
        args.table,
        ["event_id"],
        args.query_name,
        shards=args.shards,
    )
    query = start_stream(source, sink, args.checkpoint, available_now=True)
    query.awaitTermination()
    print(f"JOB DONE {len(sink.reports)} batches", flush=True)


if __name__ == "__main__":
    main()
