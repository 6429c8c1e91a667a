"""The mapping from a sink's batch reports, a drainer's steps and Spark's progress to the
Prometheus metrics (a fresh registry per test), the report-listener hook every sink calls, the
HTTP endpoint, and the ``metrics_port`` setting. The same numbers read over HTTP during a real
streaming run: tests/integration/test_metrics.py."""

from __future__ import annotations

import urllib.request
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from exactlyonce.buffer.drain import DrainReport, Lag
from exactlyonce.connectors.base import BatchReport, add_report_listener, remove_report_listener
from exactlyonce.errors import ConfigError
from exactlyonce.integration import metrics
from exactlyonce.integration.config import parse_config
from exactlyonce.testing import MemoryRedis, MemorySink, MemoryStore, run_in_process

LABELS = {"query_name": "q", "sink": "postgres:events"}


def fresh() -> tuple[metrics.Metrics, Any]:
    m = metrics.Metrics(CollectorRegistry())
    return m, lambda name, labels=LABELS: m.registry.get_sample_value(name, labels)


def report(epoch: int, **counts: Any) -> BatchReport:
    return BatchReport("q", "postgres:events", epoch, skipped=False, **counts)


def test_each_report_field_lands_in_its_counter_or_gauge() -> None:
    m, value = fresh()
    m.observe_batch(
        report(4, rows=100, written=90, duplicates=8, dead_letters=2, seconds=2.0,
               bloom_negatives=90, bloom_false_positives=10, catalog_lookups=10,
               catalog_ids=1000, catalog_bytes=32_000)
    )  # fmt: skip
    m.observe_batch(report(5, rows=50, written=50, seconds=0.5, bloom_negatives=50))
    m.observe_batch(BatchReport("q", "postgres:events", 5, skipped=True))
    assert value("exactlyonce_rows_total") == 150
    assert value("exactlyonce_written_total") == 140
    assert value("exactlyonce_duplicates_dropped_total") == 8
    assert value("exactlyonce_dead_letters_total") == 2
    assert value("exactlyonce_bloom_negatives_total") == 140
    assert value("exactlyonce_catalog_lookups_total") == 10
    assert value("exactlyonce_batches_total") == 2
    assert value("exactlyonce_batches_skipped_total") == 1
    assert value("exactlyonce_batch_seconds_total") == 2.5
    assert value("exactlyonce_head_epoch") == 5, "a skipped batch leaves the head alone"
    assert value("exactlyonce_last_batch_rows_per_second") == 100
    # Over the process's batches, not the last one's (which had no false positive).
    assert value("exactlyonce_bloom_observed_fp_rate") == pytest.approx(10 / 150)
    # A batch without catalog usage (Redis did not answer) keeps the last known values.
    assert value("exactlyonce_catalog_ids") == 1000
    assert value("exactlyonce_catalog_bytes_per_id") == 32
    other = {"query_name": "q2", "sink": "postgres:events"}
    assert value("exactlyonce_rows_total", other) is None, "labels keep queries apart"


def test_drain_steps_and_spark_progress() -> None:
    m, value = fresh()
    m.observe_drain("q", "postgres:events", DrainReport(written=7, duplicates=3), Lag(40, 1.5))
    m.observe_drain("q", "postgres:events", DrainReport(written=5, retries=1), Lag(0, 0.0))
    assert value("exactlyonce_drain_written_total") == 12
    assert value("exactlyonce_drain_duplicates_dropped_total") == 3
    assert value("exactlyonce_drain_retries_total") == 1
    assert value("exactlyonce_drain_lag_records") == 0
    progress = SimpleNamespace(
        name="q", id="x", batchId=9, numInputRows=300, inputRowsPerSecond=150.0,
        processedRowsPerSecond=None, durationMs={"triggerExecution": 1250},
    )  # fmt: skip
    m.observe_progress(progress)
    spark = {"query_name": "q"}
    assert value("exactlyonce_spark_batch_id", spark) == 9
    assert value("exactlyonce_spark_input_rows_total", spark) == 300
    assert value("exactlyonce_spark_input_rows_per_second", spark) == 150
    assert value("exactlyonce_spark_processed_rows_per_second", spark) == 0
    assert value("exactlyonce_spark_trigger_seconds", spark) == 1.25


def test_a_sink_hands_every_report_to_the_listeners_and_survives_a_failing_one() -> None:
    m, value = fresh()

    def broken(_: BatchReport) -> None:
        raise RuntimeError("listener bug")

    config = MemoryRedis().dedup_config(expected_ids=1000, retention_epochs=8)
    sink = MemorySink(MemoryStore(), "events", ["k"], "q", shards=2, dedup=config)
    add_report_listener(broken)
    add_report_listener(m.observe_batch)
    try:
        run_in_process(sink, 0, [{"k": "a"}, {"k": "b"}])
        run_in_process(sink, 1, [{"k": "a"}, {"k": "c"}, {"k": "d"}])  # "a" is a replay
        run_in_process(sink, 1, [{"k": "a"}])  # a re-run of a committed epoch: skipped
    finally:
        remove_report_listener(broken)
        remove_report_listener(m.observe_batch)
    labels = {"query_name": "q", "sink": sink.sink_name}
    assert value("exactlyonce_written_total", labels) == 4
    assert value("exactlyonce_duplicates_dropped_total", labels) == 1
    assert value("exactlyonce_head_epoch", labels) == 1
    assert value("exactlyonce_batches_skipped_total", labels) == 1
    written = sum(r.written for r in sink.reports)
    assert value("exactlyonce_written_total", labels) == written


def test_serve_answers_over_http_with_the_process_metrics() -> None:
    port = metrics.serve(0, "127.0.0.1")
    metrics.metrics().observe_batch(BatchReport("served-q", "s", 3, skipped=False, rows=11))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    assert 'exactlyonce_rows_total{query_name="served-q",sink="s"} 11.0' in text
    assert 'exactlyonce_head_epoch{query_name="served-q",sink="s"} 3.0' in text
    with pytest.raises(ConfigError) as busy:
        metrics.serve(port, "0.0.0.0")  # the port is taken on 127.0.0.1
    assert busy.value.field == "metrics_port"


PIPELINE = {
    "query_name": "q",
    "checkpoint": "/tmp/ck",
    "source": {"type": "rate"},
    "sink": {
        "type": "postgres",
        "dsn": "postgresql://u@h/db",
        "table": "t",
        "id_columns": ["value"],
    },
}


@pytest.mark.parametrize("port", [0, 70000, "http", True])
def test_metrics_port_is_checked_and_named(port: object) -> None:
    with pytest.raises(ConfigError) as bad:
        parse_config({**PIPELINE, "metrics_port": port})
    assert "metrics_port" in str(bad.value)


def test_metrics_port_from_the_file_and_the_command_line() -> None:
    from exactlyonce.integration.cli.common import metrics_port

    cfg = parse_config({**PIPELINE, "metrics_port": 9108})
    assert metrics_port(SimpleNamespace(metrics_port=None), cfg) == 9108
    assert metrics_port(SimpleNamespace(metrics_port=9200), cfg) == 9200
    with pytest.raises(ConfigError) as bad:
        metrics_port(SimpleNamespace(metrics_port=0), cfg)
    assert bad.value.field == "--metrics-port"
