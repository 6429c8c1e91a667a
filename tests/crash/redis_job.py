"""The streaming job the Redis crash tests SIGKILL: JSON files -> RedisSink, one file per epoch.

The sink's URL (with its password) comes from ``EXACTLYONCE_SINK_REDIS_URL``, never from the
command line. Runs until every input file is committed (availableNow), then exits 0.
"""

from __future__ import annotations

import argparse
import logging
import os

from exactlyonce.connectors.redis import RedisSink
from exactlyonce.dedup.catalog import DedupConfig
from exactlyonce.integration.spark import session, start_stream

SCHEMA = "event_id STRING, amount BIGINT, action STRING"


def key_template(query_name: str, write: str) -> str:
    """Hash: one key per event. Stream: one stream per action (the null-key lines are dead)."""
    return f"{query_name}:u:{{event_id}}" if write == "hash" else f"{query_name}:ev:{{action}}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--query-name", required=True)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--write", default="hash", choices=["hash", "string", "stream"])
    parser.add_argument("--pipeline-size", type=int, default=16)
    parser.add_argument("--max-files-per-trigger", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    crash_env = {
        f"spark.executorEnv.{key}": value
        for key, value in os.environ.items()
        if key.startswith("EXACTLYONCE_CRASH_")
    }
    spark = session("redis-crash-job", master=args.master, extra=crash_env)
    source = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", args.max_files_per_trigger)
        .json(args.input)
    )
    dedup = DedupConfig(os.environ["EXACTLYONCE_REDIS_URL"], expected_ids=2_000)
    sink = RedisSink(
        os.environ["EXACTLYONCE_SINK_REDIS_URL"],
        key_template(args.query_name, args.write),
        ["event_id"],
        args.query_name,
        write=args.write,  # type: ignore[arg-type]
        shards=args.shards,
        pipeline_size=args.pipeline_size,  # small: tasks stage several chunks (mid_write)
        dedup=dedup,
    )
    query = start_stream(source, sink, args.checkpoint, available_now=True)
    query.awaitTermination()
    done = [r for r in sink.reports if not r.skipped]
    print(
        f"JOB DONE {len(sink.reports)} batches; written {sum(r.written for r in done)}, "
        f"duplicates dropped {sum(r.duplicates for r in done)}, "
        f"shards skipped {sum(r.shards_skipped for r in done)}",
        flush=True,
    )


if __name__ == "__main__":
    main()
