"""``exactlyonce audit pipeline.yaml --expected-ids FILE [--json]``: compare what the sink
holds (any sink: :mod:`exactlyonce.integration.audit`) with the expected IDs; exit 1 on any
duplicate, missing, unexpected or unattributable record, or an unexpected dead-letter count."""

from __future__ import annotations

import argparse
import json

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
    audit.add_argument("--json", action="store_true", help="one JSON document")
    audit.set_defaults(func=cmd_audit)


def cmd_audit(args: argparse.Namespace) -> int:
    from exactlyonce.integration.audit import (
        audit_json,
        audit_pipeline,
        print_sink_audit,
        read_expected,
    )

    cfg = load_config(args.config)
    expected = read_expected(args.expected_ids)
    audit = audit_pipeline(cfg, expected, expected_dead_letters=args.expected_dead_letters)
    if args.json:
        print(json.dumps(audit_json(audit), indent=2), flush=True)
    else:
        print_sink_audit(audit)
    return EXIT_OK if audit.ok else EXIT_FAILED
