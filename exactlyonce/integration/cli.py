"""The ``exactlyonce`` command.

::

    exactlyonce run pipeline.yaml [--until-idle SECONDS] [--max-batches N]
    exactlyonce check pipeline.yaml
    exactlyonce reset-head pipeline.yaml --yes
    exactlyonce audit pipeline.yaml --expected-ids FILE [--expected-dead-letters N]
    exactlyonce drain pipeline.yaml [--until-idle SECONDS] [--batch-size N] [--reset-offsets --yes]
                                    [--processes N | --member I/N]
    exactlyonce services up|status|down [--only pg,redis,kafka]

``${VAR}`` references in the pipeline file are filled from the environment; variables of the
local services (``make services``) that are not set there come from ``.exactlyonce/services.env``.

Exit codes: 0 success; 1 the query (or the audit) failed; 2 bad configuration, or the sink
refused to start (checked before any Spark work); 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from exactlyonce.errors import ConfigError, SinkUnavailableError
from exactlyonce.integration.config import load_config, sink_field_errors
from exactlyonce.secrets import scrub

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

    from exactlyonce.connectors.base import BatchReport, ExactlyOnceSink

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_INTERRUPTED = 0, 1, 2, 130
POLL_SECONDS = 0.5
log = logging.getLogger("exactlyonce.cli")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _configure_logging()
    _load_service_env()
    try:
        return int(args.func(args))
    except ConfigError as exc:
        _err(f"config error: {exc}")
        return EXIT_CONFIG
    except SinkUnavailableError as exc:
        _err(f"sink unavailable: {exc}")
        return EXIT_CONFIG
    except KeyboardInterrupt:
        _err("interrupted")
        return EXIT_INTERRUPTED


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="exactlyonce", description="Exactly-once sinks for PySpark Structured Streaming."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run a pipeline file's streaming query")
    run.add_argument("config", help="pipeline YAML file")
    run.add_argument(
        "--until-idle",
        type=float,
        metavar="SECONDS",
        help="stop after this long without a micro-batch",
    )
    run.add_argument(
        "--max-batches",
        type=int,
        metavar="N",
        help="stop after N micro-batches (re-runs skipped as committed count too)",
    )
    run.set_defaults(func=cmd_run)

    check = sub.add_parser("check", help="validate a pipeline file and preflight its sink")
    check.add_argument("config")
    check.set_defaults(func=cmd_check)

    reset = sub.add_parser(
        "reset-head", help="forget what the query committed to its sink (keeps the data)"
    )
    reset.add_argument("config")
    reset.add_argument("--yes", action="store_true", help="really reset")
    reset.set_defaults(func=cmd_reset_head)

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

    drain = sub.add_parser(
        "drain", help="move a buffered pipeline's records from its Kafka buffer into its sink"
    )
    drain.add_argument("config")
    drain.add_argument(
        "--until-idle",
        type=float,
        metavar="SECONDS",
        help="stop once everything committed is drained and nothing new came for this long",
    )
    drain.add_argument("--batch-size", type=int, metavar="N", help="rows per sink transaction")
    drain.add_argument(
        "--reset-offsets",
        action="store_true",
        help="forget the drain offsets stored in the sink first (needs --yes)",
    )
    drain.add_argument("--yes", action="store_true", help="really reset the offsets")
    drain.add_argument(
        "--processes",
        type=int,
        default=1,
        metavar="N",
        help="run N drainer processes, member i draining partitions p %% N == i (default 1)",
    )
    drain.add_argument(
        "--member",
        metavar="I/N",
        help="run only member I of N (what --processes starts; for running members yourself)",
    )
    drain.set_defaults(func=cmd_drain)

    services = sub.add_parser("services", help="local PostgreSQL, Redis and Kafka broker")
    services.add_argument("action", choices=["up", "status", "down", "env"])
    services.add_argument("--only", help="comma-separated subset of pg,redis,kafka")
    services.set_defaults(func=cmd_services)
    return parser


def _configure_logging() -> None:
    logger = logging.getLogger("exactlyonce")
    if not any(getattr(h, "_exactlyonce_cli", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler._exactlyonce_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def _load_service_env() -> None:
    """Fill unset ``${EXACTLYONCE_PG_DSN}`` & co. from ``.exactlyonce/services.env``, if any.

    Variables already in the environment win; without local services nothing changes.
    """
    import os

    try:
        from exactlyonce.integration.services import service_env

        values = service_env()
    except (ImportError, RuntimeError):
        return
    for key, value in values.items():
        os.environ.setdefault(key, value)


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- run


def cmd_run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)  # before Spark starts: a bad file costs no JVM
    secrets = cfg.sink.secrets()
    sink = cfg.build_sink()  # connects and checks the database, still before Spark
    from exactlyonce.integration.spark import session, start_stream

    spark = session(
        app_name=cfg.spark.app_name or cfg.query_name,
        master=cfg.spark.master,
        extra={"spark.ui.showConsoleProgress": "false", **cfg.spark.conf},
    )
    try:
        df = cfg.source.build(spark)
        with sink_field_errors():
            query = start_stream(df, sink, cfg.checkpoint, **cfg.trigger_kwargs())
        print(f"started {cfg.query_name}: {cfg.source.type} -> {sink.sink_name}", flush=True)
        try:
            _watch(query, sink, args.until_idle, args.max_batches)
        except KeyboardInterrupt:
            query.stop()
            raise
        failure = query.exception()
        if failure is not None:
            _err(f"query failed: {scrub(_summarize(str(failure)), *secrets)}")
            return EXIT_FAILED
        done = len(sink.reports)
        print(f"stopped {cfg.query_name} after {done} batch(es)", flush=True)
        return EXIT_OK
    finally:
        spark.stop()


def _watch(
    query: StreamingQuery,
    sink: ExactlyOnceSink,
    until_idle: float | None,
    max_batches: int | None,
) -> None:
    """Print each batch's report until the query ends, goes idle, or ran ``max_batches``."""
    shown = 0
    last_activity = time.monotonic()
    while query.isActive:
        while shown < len(sink.reports):
            print(_progress(sink.reports[shown]), flush=True)
            shown += 1
            last_activity = time.monotonic()
        if max_batches is not None and shown >= max_batches:
            log.info("ran %d batch(es), stopping", shown)
            query.stop()
            break
        status = query.status
        if status.get("isTriggerActive") and status.get("isDataAvailable"):
            last_activity = time.monotonic()  # a batch is in progress: not idle
        idle = time.monotonic() - last_activity
        if until_idle is not None and idle >= until_idle:
            log.info("no new batch for %.0f s, stopping", idle)
            query.stop()
            break
        time.sleep(POLL_SECONDS)
    for report in sink.reports[shown:]:
        print(_progress(report), flush=True)


def _progress(report: BatchReport) -> str:
    if report.skipped:
        return f"epoch {report.epoch}: already committed (at or below the head), skipped"
    return (
        f"epoch {report.epoch}: {report.rows} rows, {report.written} written, "
        f"{report.duplicates} duplicates, {report.dead_letters} dead letters, "
        f"{report.seconds:.2f} s | dedup: {report.ids_checked} checked, "
        f"{report.bloom_negatives} bloom negatives, {report.catalog_lookups} catalog lookups, "
        f"{report.catalog_duplicates} catalog duplicates, "
        f"{report.bloom_false_positives} false positives"
    )


_ERROR_LINE = re.compile(r"^\s*((?:[\w.]+\.)?\w+(?:Error|Exception)): (.+)$")


def _summarize(text: str) -> str:
    """Spark's failure text is a JVM trace around a Python one; keep the Python error line."""
    lines = text.strip().splitlines()
    python_errors = [
        m.group(0).strip()
        for m in map(_ERROR_LINE.match, lines)
        if m and not m.group(1).startswith(("org.apache", "java.", "py4j", "scala."))
    ]
    if python_errors:
        return python_errors[-1]
    return lines[0] if lines else "unknown error"


# ---------------------------------------------------------------------- check, reset-head


def cmd_check(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    sink = cfg.build_sink()
    head = sink.head()
    where = "no head yet" if head is None else f"head epoch {head.epoch}, {head.num_shards} shards"
    print(f"OK {cfg.query_name}: {cfg.source.type} -> {sink.sink_name} ({where})")
    return EXIT_OK


def cmd_reset_head(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    if not args.yes:
        _err(
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


def drop_catalog(sink: ExactlyOnceSink) -> int:
    """Delete the query's Redis dedup catalog; returns the number of keys deleted.

    The catalog caches what the head committed. Without the head it is stale: a new run
    would take every ID it holds for a duplicate and drop the record.
    """
    if sink.dedup_config is None:
        return 0
    from exactlyonce.dedup.catalog import RedisCatalog

    catalog = RedisCatalog(sink.dedup_config, sink.query_name, sink.sink_name)
    try:
        return catalog.drop()
    finally:
        catalog.close()


# ---------------------------------------------------------------------- drain


def cmd_drain(args: argparse.Namespace) -> int:
    from exactlyonce.integration.drain_command import drain_command

    cfg = load_config(args.config)
    if args.reset_offsets and not args.yes:
        _err(
            "refusing to reset the drain offsets without --yes: the drainer then starts at the "
            "beginning of the buffer topic (record IDs already in the sink stay no-ops)"
        )
        return EXIT_CONFIG
    if args.processes != 1 and args.member:
        raise ConfigError("--member", "give --processes or --member, not both")
    if args.processes != 1:
        if args.reset_offsets:
            raise ConfigError("--reset-offsets", "reset the offsets in a run without --processes")
        return drain_processes(args.config, args.processes, args.until_idle, args.batch_size)
    return drain_command(
        cfg,
        until_idle_s=args.until_idle,
        batch_size=args.batch_size,
        reset_offsets=args.reset_offsets,
        member=parse_member(args.member) if args.member else (0, 1),
    )


def parse_member(text: str) -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)``, with 0 <= I < N."""
    try:
        index, members = (int(part) for part in text.split("/"))
    except ValueError:
        raise ConfigError("--member", f"I/N, for example 0/2, got {text!r}") from None
    if not 0 <= index < members:
        raise ConfigError("--member", f"I/N with 0 <= I < N, got {text!r}")
    return index, members


def drain_processes(
    config: str, processes: int, until_idle_s: float | None, batch_size: int | None
) -> int:
    """Run ``processes`` members of this command (``--member i/N``) and wait for them all;
    SIGINT/SIGTERM are passed on. The exit code is the worst of theirs."""
    import signal
    import subprocess

    if not 2 <= processes <= 256:
        raise ConfigError("--processes", f"an integer from 1 to 256, got {processes}")
    base = [sys.executable, "-m", "exactlyonce", "drain", config]
    if until_idle_s is not None:
        base += ["--until-idle", str(until_idle_s)]
    if batch_size is not None:
        base += ["--batch-size", str(batch_size)]
    children = [subprocess.Popen([*base, "--member", f"{i}/{processes}"]) for i in range(processes)]

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        codes = []
        for child in children:
            while True:
                try:
                    codes.append(child.wait())
                    break
                except KeyboardInterrupt:
                    forward(signal.SIGINT, None)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return max(codes)


# ---------------------------------------------------------------------- audit, services


def cmd_audit(args: argparse.Namespace) -> int:
    from exactlyonce.integration.demo import print_audit, read_audit, read_expected_ids

    cfg = load_config(args.config)
    expected = read_expected_ids(args.expected_ids)
    audit = read_audit(cfg, expected, expected_dead_letters=args.expected_dead_letters)
    print_audit(audit)
    return EXIT_OK if audit.ok else EXIT_FAILED


def cmd_services(args: argparse.Namespace) -> int:
    try:
        from exactlyonce.integration import services
    except ImportError as exc:
        _err(f"the services module is not available: {exc}")
        return EXIT_FAILED
    argv = [args.action] + (["--only", args.only] if args.only else [])
    return int(services.main(argv))


if __name__ == "__main__":
    sys.exit(main())
