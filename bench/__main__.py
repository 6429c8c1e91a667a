"""``python -m bench SINK [options]``: run one benchmark; JSON results go to bench/results/.

python -m bench postgres --rows 1000000   # PostgresSink vs Spark JDBC vs raw COPY
python -m bench redis                     # RedisSink vs plain pipelined writes
python -m bench kafka                     # KafkaSink vs a plain idempotent producer
python -m bench kafka_stages              # the Kafka sink's CPU per stage vs Spark's sink
python -m bench postgres_stages           # the PostgreSQL sink's CPU per stage vs a plain COPY
python -m bench kafka_txn                 # a transaction's visibility vs a plain produce
python -m bench dedup                     # Bloom + catalog, e2e dedup on/off vs Spark's
python -m bench dedup_stages              # where the dedup e2e time goes, stage by stage
python -m bench cluster_catalog           # the catalog on 1 Redis vs a 3-master Redis Cluster
python -m bench elasticsearch             # ElasticsearchSink vs plain streaming_bulk
python -m bench opensearch                # OpenSearchSink vs streaming_bulk, genuine node
python -m bench session_start             # Spark session start with/without the JVM archive
python -m bench recovery                  # restart to first write, 1M/10M catalog, 1,000 epochs
python -m bench buffer                    # the Kafka buffer ahead of slow sinks (p99, drain)
python -m bench realtime                  # Real-time Mode latency: ours, Spark's, micro-batch
python -m bench summary                   # draw bench/results/summary.png from the JSON
python -m bench table                     # print every figure against its target, from the JSON
python -m bench all [--quick]             # all of the above in turn, then summary and table
python -m bench soak                      # chaos runs of every sink at scale (make soak)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

# Benchmarks with their own argument parser: ``python -m bench kafka --help``.
STANDALONE = {
    "kafka": "bench.kafka",
    "kafka_stages": "bench.kafka_stages",
    "kafka_headers": "bench.kafka_headers",
    "kafka_txn": "bench.kafka_txn",
    "postgres_stages": "bench.postgres_stages",
    "dedup": "bench.dedup",
    "dedup_stages": "bench.dedup_stages",
    "cluster_catalog": "bench.cluster_catalog",
    "elasticsearch": "bench.elasticsearch",
    "opensearch": "bench.opensearch",
    "session_start": "bench.session_start",
    "recovery": "bench.recovery",
    "buffer": "bench.buffer",
    "realtime": "bench.realtime",
    "summary": "bench.summary",
    "table": "bench.table",
    "all": "bench.all",
    "soak": "bench.soak",
}


def build_parser() -> argparse.ArgumentParser:
    from bench import postgres, redis_sink

    parser = argparse.ArgumentParser(
        prog="python -m bench", description="Benchmarks of the exactly-once sinks."
    )
    sub = parser.add_subparsers(dest="sink", required=True, metavar="SINK")
    for name, module, about in (
        ("postgres", postgres, "PostgresSink vs Spark's JDBC writer vs a plain COPY"),
        ("redis", redis_sink, "RedisSink vs plain pipelined writes"),
    ):
        cmd = sub.add_parser(name, help=about, description=(module.__doc__ or "").split("\n\n")[0])
        module.add_arguments(cmd)
        cmd.set_defaults(main=module.main)
    for name, module_name in STANDALONE.items():
        sub.add_parser(name, help=f"see python -m {module_name} --help", add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in STANDALONE:
        import importlib

        module = importlib.import_module(STANDALONE[args_list[0]])
        return int(module.main(args_list[1:]) or 0)
    args = build_parser().parse_args(args_list)
    return int(args.main(args))


if __name__ == "__main__":
    sys.exit(main())
