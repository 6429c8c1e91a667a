"""``exactlyonce reset-head pipeline.yaml --yes``: forget what the query committed to its
sink (and drop its dedup catalog); the data stays."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from exactlyonce.integration.cli.common import EXIT_CONFIG, EXIT_OK, err
from exactlyonce.integration.config import load_config
from exactlyonce.integration.maintenance import drop_catalog

if TYPE_CHECKING:
    pass


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    reset = sub.add_parser(
        "reset-head", help="forget what the query committed to its sink (keeps the data)"
    )
    reset.add_argument("config")
    reset.add_argument("--yes", action="store_true", help="really reset")
    reset.set_defaults(func=cmd_reset_head)


def cmd_reset_head(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    if not args.yes:
        err(
            f"refusing to reset the head of {cfg.query_name!r} without --yes. A reset makes the "
            "sink accept epochs from 0 again and drops its dedup catalog (the data stays; "
            "re-written records are no-ops). "
            "Do it only after deleting the query's checkpoint on purpose."
        )
        return EXIT_CONFIG
    sink = cfg.build_sink()
    dropped = drop_catalog(sink)  # first: a stale catalog must never outlive its head
    sink.reset_head()
    print(
        f"head of {cfg.query_name!r} on {sink.sink_name} reset ({dropped} catalog keys "
        "dropped); the data was kept"
    )
    return EXIT_OK
