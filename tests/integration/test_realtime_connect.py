"""Spark Real-time Mode under Spark Connect: a client of ``remote("local[2]")`` starts
``start_stream(..., real_time=...)`` (PostgresSink.realtime() fed by the Arrow transport: the
writer pickles as its configuration and runs on the server, the session settings go through
the client's ``spark.conf``). Audited with psycopg in ``mode="append"``: every event once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.connect_port import local_connect_server
from tests.support.realtime import EventProducer, end_offsets, event_counts, frontiers, make_topic
from tests.support.secrets_scan import assert_no_secrets, url_passwords

pytestmark = pytest.mark.integration

JOB = Path(__file__).with_name("connect_realtime_job.py")
EVENTS = 600


def test_real_time_mode_runs_under_spark_connect_and_writes_each_event_once(
    tmp_path: Path,
    services: dict[str, str],
    pg: psycopg.Connection[Any],
    bootstrap: str,
    unique_name: str,
) -> None:
    make_topic(bootstrap, unique_name)
    producer = EventProducer(bootstrap, unique_name, EVENTS, rate=200).start()
    producer.join()
    with local_connect_server():
        done = subprocess.run(
            [sys.executable, str(JOB), "--topic", unique_name, "--table", unique_name,
             "--checkpoint", str(tmp_path / "checkpoint"), "--events", str(EVENTS)],
            env={**os.environ, **services, "PYTHONPATH": str(JOB.parents[2])},
            capture_output=True,
            text=True,
            timeout=600,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert "JOB DONE arrow" in done.stdout
    assert "allowlistCheck=false" in done.stdout  # the transport ran, and said so in the session
    assert "maxRecordsPerBatch=10000" in done.stdout  # Spark's default, given back
    counts = event_counts(pg, unique_name)
    assert set(counts) == producer.expected
    assert {e: n for e, n in counts.items() if n != 1} == {}, "events written twice"
    assert frontiers(pg, unique_name) == end_offsets(bootstrap, unique_name)
    texts = {"stdout": done.stdout, "stderr": done.stderr}
    assert_no_secrets([tmp_path], url_passwords(services["EXACTLYONCE_PG_DSN"]), texts=texts)
