"""The streaming job the Kafka crash tests SIGKILL: JSON files -> KafkaSink, one file per epoch.

Runs until every input file is committed (availableNow), then exits 0. Small Arrow batches
make a task produce its shard in several chunks, so ``mid_produce`` fires inside the open
transaction with more still to come.
"""

from __future__ import annotations

import argparse
import logging
import os

from exactlyonce.connectors.kafka import KafkaSink
from exactlyonce.dedup.catalog import DedupConfig
from exactlyonce.integration.spark import session, start_stream

SCHEMA = "event_id STRING, amount BIGINT, action STRING"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--query-name", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--max-files-per-trigger", type=int, default=1)
    parser.add_argument("--arrow-batch", type=int, default=25)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    extra = {
        f"spark.executorEnv.{key}": value
        for key, value in os.environ.items()
        if key.startswith("EXACTLYONCE_CRASH_")
    }
    extra["spark.sql.execution.arrow.maxRecordsPerBatch"] = str(args.arrow_batch)
    spark = session("kafka-crash-job", master=args.master, extra=extra)
    source = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", args.max_files_per_trigger)
        .json(args.input)
    )
    dedup = DedupConfig(
        os.environ["EXACTLYONCE_REDIS_URL"],
        expected_ids=2_000,  # small filters: Bloom false positives happen and are counted
    )
    sink = KafkaSink(
        args.bootstrap,
        args.topic,
        ["event_id"],
        args.query_name,
        shards=args.shards,
        dedup=dedup,
    )
    query = start_stream(source, sink, args.checkpoint, available_now=True)
    query.awaitTermination()
    done = [r for r in sink.reports if not r.skipped]
    print(
        f"JOB DONE {len(sink.reports)} batches; written {sum(r.written for r in done)}, "
        f"duplicates dropped {sum(r.duplicates for r in done)}, "
        f"shards skipped {sum(r.shards_skipped for r in done)}, "
        f"catalog rebuilds {sum(r.catalog_rebuilds for r in done)}",
        flush=True,
    )


if __name__ == "__main__":
    main()
