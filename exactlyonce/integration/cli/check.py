"""``exactlyonce check pipeline.yaml [--create] [--json]``: the pipeline's guarantee report.

Validates the file, then prints what the sink guarantees, the mechanism it rests on, and
each precondition checked live against the services (ok / warning / failing, with the fix):
the sink's own (:meth:`ExactlyOnceSink.preconditions`), the dedup catalog's Redis, the
trigger interval, the head against the checkpoint's Spark query id, and behind a buffer the
drain and its dead letters. Nothing is created unless ``--create`` (then the sink's preflight
creates what a start would). Exit 1 when a precondition fails; warnings alone exit 0.
"""

from __future__ import annotations

import argparse
import json
import os
from urllib.parse import urlsplit

from exactlyonce.integration.cli.common import EXIT_FAILED, EXIT_OK
from exactlyonce.integration.config import load_config
from exactlyonce.integration.spark import interval_seconds


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = sub.add_parser(
        "check", help="report the pipeline's guarantee and check its preconditions live"
    )
    check.add_argument("config")
    check.add_argument(
        "--create",
        action="store_true",
        help="create what the sink needs (tables, indices, topics), as its start would",
    )
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    sink = cfg.build_sink(check=False)
    trigger = cfg.trigger.processing_time if cfg.trigger is not None else None
    report = sink.guarantee_report(
        create=bool(getattr(args, "create", False)),
        interval_s=interval_seconds(trigger) if trigger else None,
        checkpoint=checkpoint_query_id(cfg.checkpoint),
    )
    counts = report.counts()
    if getattr(args, "json", False):
        out = {"query_name": cfg.query_name, "source": cfg.source.type, **report.as_dict()}
        print(json.dumps({**out, "counts": counts, "failing": report.failing}, indent=2))
    else:
        print(f"{cfg.query_name}: {cfg.source.type} -> {sink.sink_name}")
        print("\n".join(report.lines()))
        verdict = "FAILING" if report.failing else "OK"
        print(
            f"{verdict}: {counts['ok']} ok, {counts['warning']} warning(s), "
            f"{counts['failing']} failing"
        )
    return EXIT_FAILED if report.failing else EXIT_OK


def checkpoint_query_id(location: str) -> tuple[bool, str | None]:
    """(readable, the Spark query id in the checkpoint's ``metadata`` file, or None when
    there is no checkpoint yet). Only local paths (and ``file:``) are read."""
    parts = urlsplit(location)
    if parts.scheme not in ("", "file") and len(parts.scheme) > 1:  # "C:" is a drive
        return False, None
    path = os.path.join(parts.path if parts.scheme == "file" else location, "metadata")
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline()
    except FileNotFoundError:
        return True, None
    except OSError:
        return False, None
    try:
        value = json.loads(first).get("id")
    except (ValueError, AttributeError):
        return False, None
    return True, str(value) if value else None
