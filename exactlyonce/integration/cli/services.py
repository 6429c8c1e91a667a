"""``exactlyonce services up|status|down|env``: the local services, as
``python -m exactlyonce.integration.lab.services`` runs them (the lab's, reached by name on
use: :mod:`exactlyonce.integration.cli.lab`)."""

from __future__ import annotations

import argparse

from exactlyonce.integration.cli.common import EXIT_FAILED, err
from exactlyonce.integration.cli.lab import lab_command


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    services = sub.add_parser("services", help="local PostgreSQL, Redis and Apache Kafka")
    services.add_argument("action", choices=["up", "status", "down", "env"])
    services.add_argument("--only", help="comma-separated subset of pg,redis,kafka,tansu,kafka3")
    services.set_defaults(func=cmd_services)


def cmd_services(args: argparse.Namespace) -> int:
    try:
        services = lab_command("services")
    except ImportError as exc:
        err(f"the services module is not available: {exc}")
        return EXIT_FAILED
    argv = [args.action] + (["--only", args.only] if args.only else [])
    return int(services(argv))
