"""The ``exactlyonce`` command: :func:`main` and its parser; one module per subcommand.

::

    exactlyonce run pipeline.yaml [--until-idle SECONDS] [--max-batches N]
    exactlyonce check pipeline.yaml [--create] [--json]
    exactlyonce reset-head pipeline.yaml --yes
    exactlyonce heads pipeline.yaml|SINK-URL [--query-name Q] [--catalog REDIS-URL] [--json]
    exactlyonce rewind pipeline.yaml --to-epoch N [--yes]
    exactlyonce audit pipeline.yaml --expected-ids FILE [--expected-dead-letters N] [--json]
    exactlyonce drain pipeline.yaml [--until-idle SECONDS] [--batch-size N] [--reset-offsets --yes]
                                    [--processes N | --member I/N]
    exactlyonce chaos pipeline.yaml [--kills N] [--seed S] [--duration T]
                                    [--expected-ids FILE | --events N] [--json REPORT]
    exactlyonce services up|status|down [--only pg,redis,kafka]

``${VAR}`` references in the pipeline file are filled from the environment; variables of the
local services (``make services``) that are not set there come from ``.exactlyonce/services.env``.

Exit codes: 0 success; 1 the query (or the audit) failed; 2 bad configuration, or the sink
refused to start (checked before any Spark work); 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from exactlyonce.connectors.base.logs import BATCH_LOGGER
from exactlyonce.errors import ConfigError, SinkUnavailableError
from exactlyonce.integration.cli import (
    audit,
    chaos,
    check,
    drain,
    heads,
    reset_head,
    rewind,
    run,
    services,
)
from exactlyonce.integration.cli.audit import cmd_audit
from exactlyonce.integration.cli.chaos import cmd_chaos
from exactlyonce.integration.cli.check import cmd_check
from exactlyonce.integration.cli.common import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    err,
)
from exactlyonce.integration.cli.drain import (
    cmd_drain,
    drain_command,
    drain_processes,
    parse_member,
)
from exactlyonce.integration.cli.heads import cmd_heads
from exactlyonce.integration.cli.reset_head import cmd_reset_head
from exactlyonce.integration.cli.rewind import cmd_rewind
from exactlyonce.integration.cli.run import cmd_run
from exactlyonce.integration.cli.services import cmd_services
from exactlyonce.integration.maintenance import drop_catalog

__all__ = [
    "EXIT_CONFIG",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "cmd_audit",
    "cmd_chaos",
    "cmd_check",
    "cmd_drain",
    "cmd_heads",
    "cmd_reset_head",
    "cmd_rewind",
    "cmd_run",
    "cmd_services",
    "drain_command",
    "drain_processes",
    "drop_catalog",
    "main",
    "parse_member",
]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand and return its exit code (configuration errors and refused sinks
    are 2, printed without a trace; an interrupt is 130)."""
    args = _parser().parse_args(argv)
    _configure_logging()
    _load_service_env()
    try:
        return int(args.func(args))
    except ConfigError as exc:
        err(f"config error: {exc}")
        return EXIT_CONFIG
    except SinkUnavailableError as exc:
        err(f"sink unavailable: {exc}")
        return EXIT_CONFIG
    except KeyboardInterrupt:
        err("interrupted")
        return EXIT_INTERRUPTED


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="exactlyonce", description="Exactly-once sinks for PySpark Structured Streaming."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (run, check, reset_head, heads, rewind, audit, chaos, drain, services):
        command.add_parser(sub)
    return parser


def _configure_logging() -> None:
    """The package's log on stderr, without the per-batch lines: ``run`` prints each batch's
    report on stdout itself (one line per batch, not two)."""
    logger = logging.getLogger("exactlyonce")
    if not any(getattr(h, "_exactlyonce_cli", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.addFilter(_not_a_batch_line)
        handler._exactlyonce_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def _not_a_batch_line(record: logging.LogRecord) -> bool:
    return not (record.name == BATCH_LOGGER and record.levelno <= logging.INFO)


def _load_service_env() -> None:
    """Fill unset ``${EXACTLYONCE_PG_DSN}`` & co. from ``.exactlyonce/services.env``, if any.

    Variables already in the environment win; without local services nothing changes.
    """
    try:
        from exactlyonce.integration.envfile import service_env

        values = service_env()
    except (ImportError, RuntimeError):
        return
    for key, value in values.items():
        os.environ.setdefault(key, value)
