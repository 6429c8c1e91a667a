"""The streaming job the Elasticsearch and OpenSearch crash tests SIGKILL: JSON files ->
ElasticsearchSink, or OpenSearchSink with ``--engine opensearch`` (the same protocol code).

One file per epoch; runs until every input file is committed (availableNow), then exits 0.
Takes the arguments of tests/crash/job.py (``--table`` names the index) plus ``--es-url``;
``--retries`` (default 6) retries of each request, waits from 0.5 s doubling up to 8 s.
"""

from __future__ import annotations

import json
import logging
import os

from exactlyonce.connectors.elasticsearch import ElasticsearchSink, RetryPolicy
from exactlyonce.connectors.opensearch import OpenSearchSink
from tests.crash import job_common

# Report fields summed in the JOB DONE line.
TOTALS = ("written", "duplicates", "dead_letters")


def main() -> None:
    parser = job_common.job_arguments()
    parser.add_argument("--table", required=True, help="the target index")
    parser.add_argument("--es-url", required=True)
    parser.add_argument("--mode", default="create", choices=["create", "index", "insert"])
    parser.add_argument(
        "--engine", default="elasticsearch", choices=["elasticsearch", "opensearch"]
    )
    parser.add_argument("--retries", type=int, default=6)
    args = parser.parse_args()
    spark = job_common.crash_session("es-crash-job", args.master, api=args.api)
    logging.getLogger("elastic_transport").setLevel(logging.WARNING)
    logging.getLogger("opensearch").setLevel(logging.ERROR)
    if args.api == "format":
        options = {
            "sink": args.engine,
            "hosts": args.es_url,
            "index": args.table,
            "id_columns": "event_id",
            "query_name": args.query_name,
            "op_type": "index" if args.mode == "index" else "create",
            "shards": str(args.shards),
            "dedup": json.dumps({"expected_ids": 2_000}),
            "redis_url": os.environ["EXACTLYONCE_REDIS_URL"],
            "max_retries": str(args.retries),
            "bulk_max_actions": "50",
        }
        job_common.run_format_to_end(spark, args, options)
        return
    sink_class = OpenSearchSink if args.engine == "opensearch" else ElasticsearchSink
    sink = sink_class(
        args.es_url,
        args.table,
        ["event_id"],
        args.query_name,
        op_type="index" if args.mode == "index" else "create",
        shards=args.shards,
        dedup=job_common.small_catalog(),
        # Rides out a 10 s window of 429s: 0.5 + 1 + 2 + 4 + 8 s of backoff.
        retry_policy=RetryPolicy(max_retries=args.retries, initial_backoff=0.5, max_backoff=8.0),
        bulk_max_actions=50,  # several bulk requests per shard: kills land between them
    )
    job_common.run_to_end(spark, args, sink, TOTALS)


if __name__ == "__main__":
    main()
