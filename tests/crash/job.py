"""The streaming job the crash tests SIGKILL: JSON files -> PostgresSink, one file per epoch.

Runs until every input file is committed (availableNow), then exits 0.
"""

from __future__ import annotations

import os
from typing import Any

from exactlyonce.connectors import PostgresSink
from exactlyonce.connectors.base.config import DedupSettings
from exactlyonce.connectors.postgres.config import PostgresSinkConfig
from exactlyonce.integration.datasource.options import writer_options
from tests.crash import job_common

# Report fields summed in the JOB DONE line.
TOTALS = ("duplicates", "catalog_rebuilds")


def main() -> None:
    parser = job_common.job_arguments()
    parser.add_argument("--table", required=True)
    parser.add_argument("--mode", default="insert", choices=["insert", "append"])
    parser.add_argument("--on-catalog-loss", default="rebuild", choices=["rebuild", "fail"])
    # content: keyless rows, IDs from the whole row and its occurrence number in the epoch
    parser.add_argument("--id-from", default="columns", choices=["columns", "content"])
    args = parser.parse_args()
    spark = job_common.crash_session("crash-job", args.master, api=args.api)
    if args.api == "format":
        settings: dict[str, Any] = {
            "dsn": os.environ["EXACTLYONCE_PG_DSN"],
            "table": args.table,
            "id_columns": ["event_id"],
            "query_name": args.query_name,
            "shards": args.shards,
            "mode": args.mode,
            "dedup": DedupSettings(expected_ids=2_000, on_catalog_loss=args.on_catalog_loss),
            "redis_url": os.environ["EXACTLYONCE_REDIS_URL"],
        }
        config = PostgresSinkConfig(**settings)
        # As a user passes them: the DSN under a name Spark redacts (secret.dsn).
        options = writer_options(config)
        job_common.run_format_to_end(spark, args, options)
        return
    sink = PostgresSink(
        os.environ["EXACTLYONCE_PG_DSN"],
        args.table,
        ["event_id"] if args.id_from == "columns" else None,
        args.query_name,
        id_from=args.id_from,
        shards=args.shards,
        mode=args.mode,
        dedup=job_common.small_catalog(on_catalog_loss=args.on_catalog_loss),
    )
    job_common.run_to_end(spark, args, sink, TOTALS)


if __name__ == "__main__":
    main()
