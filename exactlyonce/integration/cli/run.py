"""``exactlyonce run pipeline.yaml``: run a pipeline file's streaming query, printing each
batch's report, until it fails, is interrupted, goes idle or ran ``--max-batches``."""

from __future__ import annotations

import argparse
import logging
import re
import time
from typing import TYPE_CHECKING, Protocol

from exactlyonce.connectors.base.observers import publish
from exactlyonce.connectors.base.report import batch_line
from exactlyonce.integration.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    add_metrics_port,
    err,
    metrics_port,
)
from exactlyonce.integration.config import load_config, sink_field_errors
from exactlyonce.integration.resume import resumed_source
from exactlyonce.secrets import scrub

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from exactlyonce.connectors.base import BatchReport, ExactlyOnceSink

POLL_SECONDS = 0.5
log = logging.getLogger("exactlyonce.cli")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    run.add_argument(
        "--remote",
        metavar="URL",
        help="run the query on a Spark Connect server (sc://host:15002, or local[N] for one "
        "started here); the pipeline file's spark.remote otherwise",
    )
    add_metrics_port(run)
    run.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)  # before Spark starts: a bad file costs no JVM
    secrets = cfg.sink.secrets()
    sink = cfg.build_sink()  # connects and checks the database, still before Spark
    port = metrics_port(args, cfg)
    if port is not None:
        from exactlyonce.integration import metrics  # prometheus-client, only when asked

        metrics.serve(port)
    from exactlyonce.integration.spark import realtime_writer, session, start_stream

    real_time = cfg.trigger is not None and cfg.trigger.real_time is not None
    if real_time:
        realtime_writer(sink)  # a sink without a Real-time Mode writer: refused before Spark
    foreach = real_time and cfg.trigger_kwargs().get("transport") == "foreach"
    remote = args.remote or cfg.spark.remote
    spark = session(
        app_name=cfg.spark.app_name or cfg.query_name,
        master=None if remote else cfg.spark.master,
        extra={**_session_defaults(foreach), **cfg.spark.conf},
        data_source=False,  # a pipeline writes through foreachBatch(sink): a faster start
        connectors=cfg.needs_spark_connectors(),  # only when its source or sink uses them
        remote=remote,
    )
    try:
        if port is not None:
            from exactlyonce.integration import metrics

            metrics.watch(spark)
        source = cfg.source
        if cfg.resume == "from_sink":
            source, where = resumed_source(cfg, sink)
            print(where, flush=True)
        df = source.build(spark)
        with sink_field_errors():
            query = start_stream(df, sink, cfg.checkpoint, **cfg.trigger_kwargs())
        print(f"started {cfg.query_name}: {cfg.source.type} -> {sink.sink_name}", flush=True)
        batches: _Batches
        if real_time:
            batches = _EpochBatches(query)
        elif remote:
            batches = _ProgressBatches(query, sink, spark)
        else:
            batches = _SinkBatches(sink)
        try:
            _watch(query, batches, args.until_idle, args.max_batches)
        except KeyboardInterrupt:
            query.stop()
            raise
        failure = query.exception()
        if failure is not None:
            err(f"query failed: {scrub(_summarize(str(failure)), *secrets)}")
            return EXIT_FAILED
        done = batches.count()
        print(f"stopped {cfg.query_name} after {done} batch(es)", flush=True)
        return EXIT_OK
    finally:
        spark.stop()


def _session_defaults(foreach: bool) -> dict[str, str]:
    """Spark settings the file may override. In Real-time Mode by the ``foreach`` transport,
    rows reach the writer through a buffer of ``spark.buffer.size`` bytes (64 KiB by
    default): 1 passes them on as they come (docs/guides/real-time-mode.md#transport)."""
    defaults = {"spark.ui.showConsoleProgress": "false"}
    if foreach:
        defaults["spark.buffer.size"] = "1"
    return defaults


class _Batches(Protocol):
    def lines(self, shown: int) -> list[str]: ...

    def count(self) -> int: ...


class _EpochBatches:
    """Real-time Mode: the writer commits by frontier inside each epoch; an epoch's line is
    the query's progress (its input rows) when Spark checkpoints it."""

    def __init__(self, query: StreamingQuery) -> None:
        self.query = query
        self.rows: dict[int, int] = {}

    def lines(self, shown: int) -> list[str]:
        for progress in self.query.recentProgress:
            self.rows.setdefault(int(progress.batchId), int(progress.numInputRows))
        return [
            f"epoch {epoch}: {self.rows[epoch]} input rows (Real-time Mode: written by frontier)"
            for epoch in sorted(self.rows)[shown:]
        ]

    def count(self) -> int:
        self.lines(0)
        return len(self.rows)


class _SinkBatches:
    """A classic session: the sink runs in this process; its reports are the batches."""

    def __init__(self, sink: ExactlyOnceSink) -> None:
        self.sink = sink

    def lines(self, shown: int) -> list[str]:
        return [_progress(report) for report in self.sink.reports[shown:]]

    def count(self) -> int:
        return len(self.sink.reports)


class _ProgressBatches:
    """A Spark Connect session: the sink runs on the server. A batch is the query's progress
    as the server reports it, shown with the sink's own report when the sink shared it in the
    session (:func:`~exactlyonce.integration.spark.last_report`: only the last batch's is
    kept there, so a batch that the next one overtook before it was read shows its input rows
    only). A report read here is also handed to this process's report listeners (metrics)."""

    def __init__(self, query: StreamingQuery, sink: ExactlyOnceSink, spark: SparkSession) -> None:
        self.query = query
        self.sink = sink
        self.spark = spark
        self.rows: dict[int, int] = {}  # batch id -> its input rows
        self.reports: dict[int, BatchReport] = {}  # epoch -> the sink's report

    def lines(self, shown: int) -> list[str]:
        from exactlyonce.integration.spark import last_report

        for progress in self.query.recentProgress:
            self.rows.setdefault(int(progress.batchId), int(progress.numInputRows))
        # Read after the progress: a batch in it shared its report before it ended.
        report = last_report(self.spark, self.sink.query_name, self.sink.sink_name)
        if report is not None and report.epoch not in self.reports:
            self.reports[report.epoch] = report
            publish(report)
        return [self._line(batch) for batch in sorted(self.rows)[shown:]]

    def _line(self, batch: int) -> str:
        report = self.reports.get(batch)
        if report is not None:
            return _progress(report)
        return f"batch {batch}: {self.rows[batch]} input rows (written on the Spark Connect server)"

    def count(self) -> int:
        self.lines(0)
        return len(self.rows)


def _watch(
    query: StreamingQuery,
    batches: _Batches,
    until_idle: float | None,
    max_batches: int | None,
) -> None:
    """Print each batch's line until the query ends, goes idle, or ran ``max_batches``."""
    shown = 0
    last_activity = time.monotonic()
    while query.isActive:
        for line in batches.lines(shown):
            print(line, flush=True)
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
    for line in batches.lines(shown):
        print(line, flush=True)


def _progress(report: BatchReport) -> str:
    """The batch's line (:func:`batch_line`), and for a written batch its dedup counters."""
    if report.skipped:
        return batch_line(report)
    return (
        f"{batch_line(report)} | dedup: {report.ids_checked} checked, "
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
