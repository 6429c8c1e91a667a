"""The metrics endpoint scraped over HTTP DURING a real streaming run (JSON files ->
PostgresSink in a subprocess, Spark local[2], the Python API ``serve``/``watch``), checked
against the sink's own audit: rows written = rows in PostgreSQL, duplicates dropped = the
replays injected, head epoch = the head in the sink; and the ``foreachBatch(sink)`` user's
default batch line on the job's stderr."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from exactlyonce.connectors import PostgresSink

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def scrape(port: int) -> dict[str, float]:
    """``name{labels}`` -> value, of every sample the endpoint serves."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            samples[key] = float(value)
    return samples


def wait_for(check: Callable[[], bool], job: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert job.poll() is None, f"the job ended while waiting for {what}"
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def write_file(folder: Path, n: int, keys: list[str]) -> None:
    lines = "".join(json.dumps({"event_id": k, "amount": i}) + "\n" for i, k in enumerate(keys))
    staged = folder.parent / f"part-{n}.json"
    staged.write_text(lines, encoding="utf-8")
    staged.rename(folder / staged.name)  # whole files only: Spark may list the folder any time


def test_metrics_scraped_during_a_run_match_the_sink(
    pg_dsn: str, unique_name: str, tmp_path: Path
) -> None:
    inputs, port_file = tmp_path / "input", tmp_path / "port"
    inputs.mkdir()
    write_file(inputs, 0, [f"a{i}" for i in range(20)])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = (tmp_path / "job.log").open("w+", encoding="utf-8")  # a pipe left unread would fill
    job = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.metrics_job", "--input", str(inputs),
         "--checkpoint", str(tmp_path / "ck"), "--query-name", unique_name,
         "--table", unique_name, "--port-file", str(port_file)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log, text=True,
    )  # fmt: skip
    sink = PostgresSink(pg_dsn, unique_name, ["event_id"], unique_name, check=False)
    labels = f'{{query_name="{unique_name}",sink="{sink.sink_name}"}}'

    try:
        wait_for(port_file.exists, job, "the metrics port")
        port = int(port_file.read_text())

        def head_at(epoch: int) -> Callable[[], bool]:
            return lambda: scrape(port).get(f"exactlyonce_head_epoch{labels}") == epoch

        wait_for(head_at(0), job, "epoch 0 in the metrics")
        first = scrape(port)
        assert first[f"exactlyonce_written_total{labels}"] == rows_in(pg_dsn, unique_name) == 20
        # Epoch 1: 10 new records and 5 replays of epoch 0's.
        write_file(inputs, 1, [f"b{i}" for i in range(10)] + [f"a{i}" for i in range(5)])
        wait_for(head_at(1), job, "epoch 1 in the metrics")
        during = scrape(port)
        assert job.poll() is None, "scraped during the run"
        head = sink.head()
        assert head is not None and during[f"exactlyonce_head_epoch{labels}"] == head.epoch == 1
        assert during[f"exactlyonce_written_total{labels}"] == rows_in(pg_dsn, unique_name) == 30
        assert during[f"exactlyonce_rows_total{labels}"] == 35
        assert during[f"exactlyonce_duplicates_dropped_total{labels}"] == 5
        assert during[f"exactlyonce_batches_total{labels}"] == 2
        checked = during[f"exactlyonce_ids_checked_total{labels}"]
        assert checked == 35
        assert during[f"exactlyonce_catalog_bytes_per_id{labels}"] > 0
        spark_rows = f'exactlyonce_spark_input_rows_total{{query_name="{unique_name}"}}'
        wait_for(lambda: scrape(port).get(spark_rows) == 35, job, "Spark's progress (listener)")
    finally:
        job.kill()
        job.wait(timeout=60)
        log.close()
    err = (tmp_path / "job.log").read_text(encoding="utf-8")
    batch_lines = [line for line in err.splitlines() if "exactlyonce.batches" in line]
    assert re.search(r"epoch 0: 20 rows, 20 written, 0 duplicates, 0 dead letters", err), err
    assert re.search(r"epoch 1: 15 rows, 10 written, 5 duplicates, 0 dead letters, .* rows/s", err)
    assert len(batch_lines) == 2, batch_lines


def rows_in(dsn: str, table: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()
    assert row is not None
    return int(row[0])
