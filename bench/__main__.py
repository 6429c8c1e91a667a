"""``python -m bench postgres --rows 1000000``: run one sink's benchmark."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    from bench import postgres

    parser = argparse.ArgumentParser(
        prog="python -m bench", description="Benchmarks of the exactly-once sinks."
    )
    sub = parser.add_subparsers(dest="sink", required=True, metavar="SINK")
    pg = sub.add_parser(
        "postgres",
        help="PostgresSink vs Spark's JDBC writer vs a plain COPY",
        description=(postgres.__doc__ or "").split("\n\n")[0],
    )
    postgres.add_arguments(pg)
    pg.set_defaults(main=postgres.main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.main(args))


if __name__ == "__main__":
    sys.exit(main())
