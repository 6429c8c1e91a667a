"""The streaming job the Elasticsearch crash tests SIGKILL: JSON files -> ElasticsearchSink.

One file per epoch; runs until every input file is committed (availableNow), then exits 0.
Takes the arguments of tests/crash/job.py (``--table`` names the index) plus ``--es-url``.
"""

from __future__ import annotations

import argparse
import logging
import os

from exactlyonce.connectors.elasticsearch import ElasticsearchSink, RetryPolicy
from exactlyonce.dedup.catalog import DedupConfig
from exactlyonce.integration.spark import session, start_stream

SCHEMA = "event_id STRING, amount BIGINT, action STRING"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--table", required=True, help="the target index")
    parser.add_argument("--query-name", required=True)
    parser.add_argument("--es-url", required=True)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--mode", default="create", choices=["create", "index", "insert"])
    parser.add_argument("--max-files-per-trigger", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("elastic_transport").setLevel(logging.WARNING)
    crash_env = {
        f"spark.executorEnv.{key}": value
        for key, value in os.environ.items()
        if key.startswith("EXACTLYONCE_CRASH_")
    }
    spark = session("es-crash-job", master=args.master, extra=crash_env)
    source = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", args.max_files_per_trigger)
        .json(args.input)
    )
    dedup = DedupConfig(os.environ["EXACTLYONCE_REDIS_URL"], expected_ids=2_000)
    sink = ElasticsearchSink(
        args.es_url,
        args.table,
        ["event_id"],
        args.query_name,
        op_type="index" if args.mode == "index" else "create",
        shards=args.shards,
        dedup=dedup,
        # Rides out a 10 s window of 429s: 0.5 + 1 + 2 + 4 + 8 s of backoff.
        retry_policy=RetryPolicy(max_retries=6, initial_backoff=0.5, max_backoff=8.0),
        bulk_max_actions=50,  # several bulk requests per shard: kills land between them
    )
    query = start_stream(source, sink, args.checkpoint, available_now=True)
    query.awaitTermination()
    done = [r for r in sink.reports if not r.skipped]
    print(
        f"JOB DONE {len(sink.reports)} batches; written {sum(r.written for r in done)}, "
        f"duplicates dropped {sum(r.duplicates for r in done)}, "
        f"dead letters {sum(r.dead_letters for r in done)}",
        flush=True,
    )


if __name__ == "__main__":
    main()
