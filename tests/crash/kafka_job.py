"""The streaming job the Kafka crash tests SIGKILL: JSON files -> KafkaSink, one file per epoch.

Runs until every input file is committed (availableNow), then exits 0. Small Arrow batches
make a task produce its shard in several chunks, so ``mid_produce`` fires inside the open
transaction with more still to come.
"""

from __future__ import annotations

import json
import os

from exactlyonce.connectors.kafka import KafkaSink
from tests.crash import job_common

# Report fields summed in the JOB DONE line.
TOTALS = ("written", "duplicates", "shards_skipped", "catalog_rebuilds")


def main() -> None:
    parser = job_common.job_arguments()
    parser.add_argument("--topic", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--arrow-batch", type=int, default=25)
    # --api format: round-robin the stream into this many Spark partitions (0: as read)
    parser.add_argument("--repartition", type=int, default=0)
    parser.add_argument("--transaction-timeout-ms", type=int, default=60_000)
    args = parser.parse_args()
    spark = job_common.crash_session(
        "kafka-crash-job",
        args.master,
        {"spark.sql.execution.arrow.maxRecordsPerBatch": str(args.arrow_batch)},
        api=args.api,
    )
    if args.api == "format":
        options = {
            "sink": "kafka",
            "bootstrap_servers": args.bootstrap,
            "topic": args.topic,
            "id_columns": "event_id",
            "query_name": args.query_name,
            "shards": str(args.shards),
            "dedup": json.dumps({"expected_ids": 2_000}),
            "redis_url": os.environ["EXACTLYONCE_REDIS_URL"],
        }
        job_common.run_format_to_end(spark, args, options, repartition=args.repartition)
        return
    sink = KafkaSink(
        args.bootstrap,
        args.topic,
        ["event_id"],
        args.query_name,
        shards=args.shards,
        dedup=job_common.small_catalog(),
        transaction_timeout_ms=args.transaction_timeout_ms,
    )
    job_common.run_to_end(spark, args, sink, TOTALS)


if __name__ == "__main__":
    main()
