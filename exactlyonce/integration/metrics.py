"""Prometheus metrics of the sinks, the drainer and Spark's streaming queries.

One set of counters and gauges, fed from three places:

- every sink's :class:`~exactlyonce.connectors.base.BatchReport` (through the report listeners
  of :mod:`exactlyonce.connectors.base.observers`; the sinks never import this module);
- a Spark ``StreamingQueryListener`` (:func:`watch`): input and processing rates per query;
- the drainer's steps and lag (:func:`observe_drain`, called by ``exactlyonce drain``).

Labels are ``query_name`` and ``sink`` (the sink's name: ``postgres:events``, never a DSN or a
password); Spark's rates carry ``query_name`` only. Python API, for ``foreachBatch(sink)``::

    from exactlyonce.integration import metrics

    metrics.serve(9108)   # http://host:9108/metrics; every sink's batches from now on
    metrics.watch(spark)  # and Spark's input/processing rates of every query

The CLI does the same with ``--metrics-port N`` or ``metrics_port: N`` in the pipeline file.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, start_http_server

from exactlyonce.connectors.base import BatchReport, add_report_listener
from exactlyonce.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from exactlyonce.buffer.drain import DrainReport, Lag

log = logging.getLogger("exactlyonce.metrics")

LABELS = ("query_name", "sink")
# Counter name (Prometheus adds _total) -> (BatchReport attribute, help).
BATCH_COUNTERS: Mapping[str, tuple[str, str]] = {
    "exactlyonce_rows": ("rows", "Rows the sink received (written batches)"),
    "exactlyonce_written": ("written", "Rows written to the destination"),
    "exactlyonce_duplicates_dropped": (
        "duplicates",
        "Rows dropped as duplicates (record ID already written)",
    ),
    "exactlyonce_dead_letters": ("dead_letters", "Rows sent to the dead-letter destination"),
    "exactlyonce_ids_checked": ("ids_checked", "Record IDs checked by the dedup layer"),
    "exactlyonce_bloom_negatives": (
        "bloom_negatives",
        "IDs the Bloom filter proved new (no catalog lookup)",
    ),
    "exactlyonce_catalog_lookups": ("catalog_lookups", "IDs looked up in the Redis catalog"),
    "exactlyonce_bloom_false_positives": (
        "bloom_false_positives",
        "Bloom 'maybe's the catalog denied",
    ),
    "exactlyonce_catalog_rebuilds": ("catalog_rebuilds", "Catalogs rebuilt or restarted"),
    "exactlyonce_upserts_stale": ("stale", "Upserts refused: a newer epoch is stored"),
    "exactlyonce_upserts_deleted": ("deleted", "Tombstones applied (upsert mode)"),
    "exactlyonce_batch_seconds": ("seconds", "Seconds spent in written batches"),
}
DRAIN_COUNTERS: Mapping[str, tuple[str, str]] = {
    "exactlyonce_drain_written": ("written", "Rows the drainer wrote to the sink"),
    "exactlyonce_drain_duplicates_dropped": (
        "duplicates",
        "Rows the drainer found in the sink already",
    ),
    "exactlyonce_drain_dead_letters": ("dead_letters", "Rows the drainer dead-lettered"),
    "exactlyonce_drain_skipped": ("skipped", "Buffer records of aborted or superseded attempts"),
    "exactlyonce_drain_retries": ("retries", "Drain steps retried after a failure"),
}


@dataclass
class _Totals:
    """Per (query, sink): the counts behind the observed false-positive rate."""

    bloom_negatives: int = 0
    bloom_false_positives: int = 0


@dataclass
class Metrics:
    """The counters and gauges, registered in ``registry``; ``observe_*`` feed them."""

    registry: CollectorRegistry
    counters: dict[str, Counter] = field(default_factory=dict)
    gauges: dict[str, Gauge] = field(default_factory=dict)
    _totals: dict[tuple[str, str], _Totals] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._counter("exactlyonce_batches", "Batches written (epochs committed)", LABELS)
        self._counter("exactlyonce_batches_skipped", "Batches skipped as committed", LABELS)
        for name, (_, about) in {**BATCH_COUNTERS, **DRAIN_COUNTERS}.items():
            self._counter(name, about, LABELS)
        self._gauge("exactlyonce_head_epoch", "The last epoch the sink committed", LABELS)
        self._gauge(
            "exactlyonce_bloom_observed_fp_rate",
            "Bloom false positives over the IDs new to the catalog, since this process started",
            LABELS,
        )
        self._gauge("exactlyonce_catalog_ids", "IDs the catalog can recognise", LABELS)
        self._gauge("exactlyonce_catalog_bytes", "Redis memory of the catalog", LABELS)
        self._gauge("exactlyonce_catalog_bytes_per_id", "Catalog bytes per ID", LABELS)
        self._gauge("exactlyonce_last_batch_seconds", "Duration of the last batch", LABELS)
        self._gauge("exactlyonce_last_batch_rows_per_second", "Rows/s of the last batch", LABELS)
        self._gauge("exactlyonce_last_batch_timestamp_seconds", "When the last batch ended", LABELS)
        self._gauge("exactlyonce_drain_lag_records", "Records in the buffer not drained", LABELS)
        self._gauge("exactlyonce_drain_lag_seconds", "Age of the oldest undrained epoch", LABELS)
        spark = ("query_name",)
        self._gauge("exactlyonce_spark_batch_id", "Spark's last batchId", spark)
        self._counter("exactlyonce_spark_input_rows", "Input rows Spark read", spark)
        self._gauge("exactlyonce_spark_input_rows_per_second", "Spark's input rate", spark)
        self._gauge("exactlyonce_spark_processed_rows_per_second", "Spark's processing rate", spark)
        self._gauge("exactlyonce_spark_trigger_seconds", "Spark's last trigger duration", spark)

    def _counter(self, name: str, about: str, labels: tuple[str, ...]) -> None:
        self.counters[name] = Counter(name, about, labels, registry=self.registry)

    def _gauge(self, name: str, about: str, labels: tuple[str, ...]) -> None:
        self.gauges[name] = Gauge(name, about, labels, registry=self.registry)

    def observe_batch(self, report: BatchReport) -> None:
        """One sink call's report (a report listener)."""
        labels = (report.query_name, report.sink)
        if report.skipped:
            self.counters["exactlyonce_batches_skipped"].labels(*labels).inc()
            return
        self.counters["exactlyonce_batches"].labels(*labels).inc()
        for name, (attribute, _) in BATCH_COUNTERS.items():
            self.counters[name].labels(*labels).inc(getattr(report, attribute))
        rate = report.rows / report.seconds if report.seconds > 0 else 0.0
        values: dict[str, float | None] = {
            "exactlyonce_head_epoch": report.epoch,
            "exactlyonce_last_batch_seconds": report.seconds,
            "exactlyonce_last_batch_rows_per_second": rate,
            "exactlyonce_last_batch_timestamp_seconds": time.time(),
            "exactlyonce_bloom_observed_fp_rate": self._fp_rate(labels, report),
            "exactlyonce_catalog_ids": report.catalog_ids,
            "exactlyonce_catalog_bytes": report.catalog_bytes,
            "exactlyonce_catalog_bytes_per_id": report.catalog_bytes_per_id,
        }
        for name, value in values.items():
            if value is not None:  # the catalog's, when Redis answered
                self.gauges[name].labels(*labels).set(value)

    def _fp_rate(self, labels: tuple[str, str], report: BatchReport) -> float:
        with self._lock:
            totals = self._totals.setdefault(labels, _Totals())
            totals.bloom_negatives += report.bloom_negatives
            totals.bloom_false_positives += report.bloom_false_positives
            new = totals.bloom_negatives + totals.bloom_false_positives
            return totals.bloom_false_positives / new if new else 0.0

    def observe_drain(self, query_name: str, sink: str, step: DrainReport, lag: Lag) -> None:
        """One drain step of a drainer and its lag after it."""
        labels = (query_name, sink)
        for name, (attribute, _) in DRAIN_COUNTERS.items():
            self.counters[name].labels(*labels).inc(getattr(step, attribute))
        self.gauges["exactlyonce_drain_lag_records"].labels(*labels).set(lag.records)
        self.gauges["exactlyonce_drain_lag_seconds"].labels(*labels).set(lag.seconds)

    def observe_progress(self, progress: Any) -> None:
        """A Spark ``StreamingQueryProgress`` (its ``name`` is the query name)."""
        name = str(progress.name or progress.id)
        self.gauges["exactlyonce_spark_batch_id"].labels(name).set(progress.batchId)
        self.counters["exactlyonce_spark_input_rows"].labels(name).inc(progress.numInputRows)
        rates = (
            ("exactlyonce_spark_input_rows_per_second", progress.inputRowsPerSecond),
            ("exactlyonce_spark_processed_rows_per_second", progress.processedRowsPerSecond),
        )
        for gauge, value in rates:
            self.gauges[gauge].labels(name).set(float(value or 0.0))
        trigger_ms = (progress.durationMs or {}).get("triggerExecution")
        if trigger_ms is not None:
            self.gauges["exactlyonce_spark_trigger_seconds"].labels(name).set(trigger_ms / 1000)


_process: dict[str, Any] = {"metrics": None, "servers": {}, "watched": set()}
_process_lock = threading.Lock()


def metrics() -> Metrics:
    """This process's metrics, in prometheus-client's default registry (so an endpoint the
    application serves already shows them), subscribed to every sink's reports."""
    with _process_lock:
        if _process["metrics"] is None:
            created = Metrics(REGISTRY)
            add_report_listener(created.observe_batch)
            _process["metrics"] = created
        found: Metrics = _process["metrics"]
        return found


def serve(port: int, addr: str = "0.0.0.0") -> int:
    """Serve the metrics on ``http://addr:port/metrics`` from a daemon thread (once per port)
    and count every sink's batches from now on; the port bound (``port=0`` picks one)."""
    metrics()
    with _process_lock:
        servers: dict[tuple[str, int], int] = _process["servers"]
        if port and (addr, port) in servers:
            return servers[(addr, port)]
        try:
            server, _thread = start_http_server(port, addr, registry=REGISTRY)
        except OSError as exc:
            raise ConfigError("metrics_port", f"cannot serve on {addr}:{port}: {exc}") from None
        bound = int(server.server_port)
        servers[(addr, bound)] = bound
    log.info("metrics on http://%s:%d/metrics", addr, bound)
    return bound


def watch(spark: SparkSession) -> None:
    """Feed Spark's progress of every streaming query of ``spark`` into the metrics (once
    per session), and count every sink's batches."""
    found = metrics()
    with _process_lock:
        watched: set[int] = _process["watched"]
        if id(spark) in watched:
            return
        watched.add(id(spark))
    spark.streams.addListener(_progress_listener(found))


def observe_drain(query_name: str, sink: str, step: DrainReport, lag: Lag) -> None:
    """One drainer step into this process's metrics."""
    metrics().observe_drain(query_name, sink, step, lag)


def _progress_listener(target: Metrics) -> Any:
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class ProgressToMetrics(StreamingQueryListener):
        """Spark's listener bus -> :meth:`Metrics.observe_progress` (never raises)."""

        def onQueryStarted(self, event: Any) -> None:
            return None

        def onQueryProgress(self, event: Any) -> None:
            try:
                target.observe_progress(event.progress)
            except Exception as exc:
                log.warning("streaming progress not counted: %s: %s", type(exc).__name__, exc)

        def onQueryIdle(self, event: Any) -> None:
            return None

        def onQueryTerminated(self, event: Any) -> None:
            return None

    return ProgressToMetrics()


__all__ = [
    "BATCH_COUNTERS",
    "DRAIN_COUNTERS",
    "Metrics",
    "metrics",
    "observe_drain",
    "serve",
    "watch",
]
