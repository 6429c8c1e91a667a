"""``python -m exactlyonce.integration.lab.services up|status|down|env [--only NAMES]``."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from exactlyonce.integration.envfile import ENV_FILE, home_dir, service_env
from exactlyonce.integration.lab.services import kafka_cluster, tansu
from exactlyonce.integration.lab.services.env import (
    KNOWN_SERVICES,
    SERVICES,
    describe,
    local_env,
    mask_dsn,
)
from exactlyonce.integration.lab.services.manager import down, service_pid, status, up


def _print_status(names: Sequence[str], home: Path) -> bool:
    states = status(names, home)
    addresses = {
        "pg": mask_dsn(local_env()["EXACTLYONCE_PG_DSN"]),
        "redis": local_env()["EXACTLYONCE_REDIS_URL"],
        "kafka": local_env()["KAFKA_BOOTSTRAP_SERVERS"],
        "tansu": tansu.bootstrap(),
        "kafka3": kafka_cluster.bootstrap(),
    }
    for name, ok in states.items():
        pid = service_pid(name, home)
        print(
            f"{name:<6} pid={pid if pid is not None else '-':<8} {addresses[name]:<62} "
            f"{'up' if ok else 'down'}"
        )
    return all(states.values())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m exactlyonce.integration.lab.services",
        description="Run real PostgreSQL, Redis and Apache Kafka locally (and, on request, "
        "Tansu and a 3-node Kafka cluster).",
    )
    parser.add_argument("command", choices=["up", "status", "down", "env"])
    parser.add_argument(
        "--only",
        default=None,
        help="comma-separated subset of pg,redis,kafka,tansu,kafka3 (default: pg,redis,kafka; "
        "`down` stops every service, Tansu and the 3-node Kafka cluster too)",
    )
    return parser


def _run(command: str, names: list[str], root: Path) -> int:
    if command == "up":
        started = time.monotonic()
        values = up(names, root)
        for line in describe(values):
            print(line)
        if "kafka3" in names:
            print(f"kafka3:   {kafka_cluster.bootstrap()} (3 nodes)")
        print(f"env file: {root / ENV_FILE} ({time.monotonic() - started:.1f} s)")
    elif command == "status":
        return 0 if _print_status(names, root) else 1
    elif command == "down":
        down(names, root)
        print(f"stopped: {', '.join(names)}")
    else:
        for line in describe(service_env(root)):
            print(line)
        print(f"# load with: set -a; . {shlex.quote(str(root / ENV_FILE))}; set +a")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; 0 on success, 1 on an error (printed) or a service that is down."""
    args = _parser().parse_args(argv)
    default = KNOWN_SERVICES if args.command == "down" else SERVICES
    only = args.only if args.only is not None else ",".join(default)
    names = [n.strip() for n in only.split(",") if n.strip()]
    try:
        return _run(args.command, names, home_dir())
    except (RuntimeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
