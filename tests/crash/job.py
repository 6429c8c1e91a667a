"""The streaming job the crash tests SIGKILL: JSON files -> PostgresSink, one file per epoch.

Runs until every input file is committed (availableNow), then exits 0.
"""

from __future__ import annotations

import argparse
import logging
import os

from exactlyonce.connectors import PostgresSink
from exactlyonce.dedup.catalog import DedupConfig
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
    parser.add_argument("--mode", default="insert", choices=["insert", "append"])
    parser.add_argument("--on-catalog-loss", default="rebuild", choices=["rebuild", "fail"])
    parser.add_argument("--max-files-per-trigger", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # Executors launched by a standalone worker do not inherit this process's environment.
    crash_env = {
        f"spark.executorEnv.{key}": value
        for key, value in os.environ.items()
        if key.startswith("EXACTLYONCE_CRASH_")
    }
    spark = session("crash-job", master=args.master, extra=crash_env)
    source = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", args.max_files_per_trigger)
        .json(args.input)
    )
    dedup = DedupConfig(
        os.environ["EXACTLYONCE_REDIS_URL"],
        expected_ids=2_000,  # small filters: Bloom false positives happen and are counted
        on_catalog_loss=args.on_catalog_loss,
    )
    sink = PostgresSink(
        os.environ["EXACTLYONCE_PG_DSN"],
        args.table,
        ["event_id"],
        args.query_name,
        shards=args.shards,
        mode=args.mode,
        dedup=dedup,
    )
    query = start_stream(source, sink, args.checkpoint, available_now=True)
    query.awaitTermination()
    done = [r for r in sink.reports if not r.skipped]
    print(
        f"JOB DONE {len(sink.reports)} batches; duplicates dropped "
        f"{sum(r.duplicates for r in done)}, "
        f"catalog rebuilds {sum(r.catalog_rebuilds for r in done)}",
        flush=True,
    )


if __name__ == "__main__":
    main()
