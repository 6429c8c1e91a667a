"""``exactlyonce audit pipeline.yaml --expected-ids FILE``: compare the sink's contents with
the expected IDs; exit 1 on any loss, duplicate or unexpected dead-letter count."""

from __future__ import annotations

import argparse

from exactlyonce.integration.cli.common import EXIT_FAILED, EXIT_OK
from exactlyonce.integration.config import load_config


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = sub.add_parser("audit", help="compare the sink's contents with the expected IDs")
    audit.add_argument("config")
    audit.add_argument(
        "--expected-ids",
        required=True,
        metavar="FILE",
        help="one record per line: its key value, or a JSON array of key values",
    )
    audit.add_argument("--expected-dead-letters", type=int, metavar="N")
    audit.set_defaults(func=cmd_audit)


def cmd_audit(args: argparse.Namespace) -> int:
    from exactlyonce.integration.demo import print_audit, read_audit, read_expected_ids

    cfg = load_config(args.config)
    expected = read_expected_ids(args.expected_ids)
    audit = read_audit(cfg, expected, expected_dead_letters=args.expected_dead_letters)
    print_audit(audit)
    return EXIT_OK if audit.ok else EXIT_FAILED
