"""Spark Connect, first-class: a client of ``SparkSession.builder.remote(...)`` writes
through ``foreachBatch(sink)`` (the sink pickles as its configuration and runs on the
server) and through ``format("exactlyonce")``, against real PostgreSQL and Redis; a restart
from the same checkpoint writes each event once, and a deleted checkpoint is refused: the
reset guard establishes Spark's query id on the server (the query's own name) and fails
closed without it. Audited in ``mode: append`` (a second write is a second row; the format
path's insert mode through the committed-attempts trigger)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.audit import install_audit, write_counts
from tests.support.connect_port import local_connect_server
from tests.support.secrets_scan import assert_no_secrets, url_passwords

pytestmark = pytest.mark.integration

JOB = Path(__file__).with_name("connect_job.py")
EVENTS = 30


def stage_input(work: Path) -> list[str]:
    """Three files to start with (``part-0*``), three for the restart (``part-1*``)."""
    (work / "input").mkdir(parents=True)
    (work / "staged").mkdir()
    for k in range(6):
        events = [{"event_id": f"e{i}", "n": i} for i in range(k, EVENTS, 6)]
        path = work / "staged" / f"part-{k // 3}{k % 3}.json"
        path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return [f"e{i}" for i in range(EVENTS)]


def test_spark_connect_writes_once_restarts_and_refuses_a_deleted_checkpoint(
    tmp_path: Path, services: dict[str, str], pg: psycopg.Connection[Any], unique_name: str
) -> None:
    """Both APIs in one Spark Connect session (one local server: its port is fixed)."""
    from exactlyonce.connectors import PostgresSink

    expected = {api: stage_input(tmp_path / api) for api in APIS}
    tables = {api: f"{unique_name}_{api.lower()}" for api in APIS}
    # format's insert mode: the audit trigger counts every committed attempt per ID
    dsn = services["EXACTLYONCE_PG_DSN"]
    PostgresSink(dsn, tables["format"], ["event_id"], "q", dedup=False).preflight(_schema())
    install_audit(pg, tables["format"])
    with local_connect_server():
        done = subprocess.run(
            [sys.executable, str(JOB), "--work", str(tmp_path), "--table", unique_name],
            env={**os.environ, **services, "PYTHONPATH": str(JOB.parents[2])},
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, done.stderr[-4000:]
    runs = {(r["api"], r["query"]): r for r in map(json.loads, done.stdout.splitlines())}

    for api in APIS:
        assert runs[api, "first"]["ok"] and runs[api, "restart"]["ok"], runs
        refused = runs[api, "reset"]
        assert not refused["ok"], f"{api}: a run from a deleted checkpoint was not refused"
        assert "CheckpointResetError" in refused["error"], refused["error"]
        table = tables[api]
        rows = pg.execute(f'SELECT event_id, count(*) FROM "{table}" GROUP BY 1').fetchall()
        assert dict(rows) == dict.fromkeys(expected[api], 1), api
    assert set(write_counts(pg, tables["format"]).values()) == {1}
    # Connect logs every plan as text (options too) in the event log: nothing may show there
    assert_no_secrets(
        [tmp_path],
        url_passwords(dsn),
        texts={"stdout": done.stdout, "stderr": done.stderr},
        expect=["events_*"],
    )


APIS = ("foreachBatch", "format")


def _schema() -> Any:
    """The stream's schema, for the format path's table created up front (its audit)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    return StructType([StructField("event_id", StringType()), StructField("n", LongType())])
