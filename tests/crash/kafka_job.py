"""The streaming job the Kafka crash tests SIGKILL: JSON files -> KafkaSink, one file per epoch.

Runs until every input file is committed (availableNow), then exits 0. Small Arrow batches
make a task produce its shard in several chunks, so ``mid_produce`` fires inside the open
transaction with more still to come.
"""

from __future__ import annotations

from exactlyonce.connectors.kafka import KafkaSink
from tests.crash import job_common

# Report fields summed in the JOB DONE line.
TOTALS = ("written", "duplicates", "shards_skipped", "catalog_rebuilds")


def main() -> None:
    parser = job_common.job_arguments()
    parser.add_argument("--topic", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--arrow-batch", type=int, default=25)
    args = parser.parse_args()
    spark = job_common.crash_session(
        "kafka-crash-job",
        args.master,
        {"spark.sql.execution.arrow.maxRecordsPerBatch": str(args.arrow_batch)},
    )
    sink = KafkaSink(
        args.bootstrap,
        args.topic,
        ["event_id"],
        args.query_name,
        shards=args.shards,
        dedup=job_common.small_catalog(),
    )
    job_common.run_to_end(spark, args, sink, TOTALS)


if __name__ == "__main__":
    main()
