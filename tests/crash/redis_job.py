"""The streaming job the Redis crash tests SIGKILL: JSON files -> RedisSink, one file per epoch.

The sink's URL (with its password) comes from ``EXACTLYONCE_SINK_REDIS_URL``, never from the
command line. Runs until every input file is committed (availableNow), then exits 0.
"""

from __future__ import annotations

import os
from typing import Any

from exactlyonce.connectors.base.config import DedupSettings
from exactlyonce.connectors.redis import RedisSink
from exactlyonce.connectors.redis.config import RedisSinkConfig
from exactlyonce.integration.datasource.options import writer_options
from tests.crash import job_common

# Report fields summed in the JOB DONE line.
TOTALS = ("written", "duplicates", "shards_skipped")


def key_template(query_name: str, write: str) -> str:
    """Hash and string: one key per event. Stream: one stream per action (the null-key lines
    are dead)."""
    if write == "stream":
        return f"{query_name}:ev:{{action}}"
    return f"{query_name}:{KEY_KIND[write]}:{{event_id}}"


KEY_KIND = {"hash": "u", "string": "s"}  # the key's middle part, per write mode


def main() -> None:
    parser = job_common.job_arguments()
    parser.add_argument("--write", default="hash", choices=["hash", "string", "stream"])
    parser.add_argument("--pipeline-size", type=int, default=16)
    args = parser.parse_args()
    spark = job_common.crash_session("redis-crash-job", args.master, api=args.api)
    if args.api == "format":
        settings: dict[str, Any] = {
            "url": os.environ["EXACTLYONCE_SINK_REDIS_URL"],
            "key_template": key_template(args.query_name, args.write),
            "write": args.write,
            "id_columns": ["event_id"],
            "query_name": args.query_name,
            "shards": args.shards,
            "pipeline_size": args.pipeline_size,
            "dedup": DedupSettings(expected_ids=2_000),
            "redis_url": os.environ["EXACTLYONCE_REDIS_URL"],
        }
        config = RedisSinkConfig(**settings)
        # As a user passes them: the URL under a name Spark redacts (secret.url).
        options = writer_options(config)
        job_common.run_format_to_end(spark, args, options)
        return
    sink = RedisSink(
        os.environ["EXACTLYONCE_SINK_REDIS_URL"],
        key_template(args.query_name, args.write),
        ["event_id"],
        args.query_name,
        write=args.write,  # type: ignore[arg-type]
        shards=args.shards,
        pipeline_size=args.pipeline_size,  # small: tasks stage several chunks (mid_write)
        dedup=job_common.small_catalog(),
    )
    job_common.run_to_end(spark, args, sink, TOTALS)


if __name__ == "__main__":
    main()
