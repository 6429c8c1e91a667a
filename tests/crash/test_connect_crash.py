"""SIGKILL the Spark Connect server mid-write: ``exactlyonce run --remote local[2]`` (the
command starts a local Connect server in its own process; the sink is pickled to it and its
batches run there) is killed whole, server JVM and Python workers included, at each named
point of the foreachBatch write path on the server, then right after a Spark commit; a last
run from the same checkpoint ends the input. Audited in ``mode: append`` (no unique index: a
second write is a second row) by the committed-attempts trigger: every ID attempted and
inserted exactly once, dead letters once, the head at Spark's last commit
(:func:`tests.crash.test_postgres_crash.verify`)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from exactlyonce.connectors import PostgresSink
from tests.crash.harness import Job, make_input
from tests.crash.test_postgres_crash import NAMED_POINTS, verify
from tests.support.audit import install_audit
from tests.support.connect_port import local_connect_server
from tests.support.secrets_scan import event_log_conf

pytestmark = [pytest.mark.crash, pytest.mark.integration]

PIPELINE = """\
query_name: {name}
checkpoint: {work}/checkpoint
trigger: {{available_now: true}}
source:
  type: files
  format: json
  path: {work}/input
  schema: "event_id STRING, amount BIGINT, action STRING"
  max_files_per_trigger: 1
sink:
  type: postgres
  dsn: ${{EXACTLYONCE_PG_DSN}}
  table: {name}
  id_columns: [event_id]
  mode: append
  shards: 2
  redis_url: ${{EXACTLYONCE_REDIS_URL}}
spark:
  remote: local[2]
  conf: {conf}
"""


@dataclass
class ConnectJob(Job):
    """``exactlyonce run`` of a pipeline file whose query runs on a local Connect server."""

    def command(self) -> list[str]:
        return [sys.executable, "-m", "exactlyonce", "run", str(self.workdir / "pipeline.yaml")]

    def sink_env(self) -> dict[str, str]:
        return {
            "EXACTLYONCE_PG_DSN": self.dsn,
            "PYSPARK_PYTHON": sys.executable,
            # as the crash jobs (job_common.py): COPY in small chunks, so mid_copy has rows
            # of its task in the open transaction
            "EXACTLYONCE_CRASH_COPY_CHUNK_BYTES": "256",
        }


def test_the_connect_server_killed_at_each_point_ends_exactly_once(
    tmp_path: Path, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    data = make_input(tmp_path / "input", files=7, rows=150, seed=5)
    schema = StructType(
        [
            StructField("event_id", StringType()),
            StructField("amount", LongType()),
            StructField("action", StringType()),
        ]
    )
    PostgresSink(pg_dsn, unique_name, ["event_id"], unique_name, mode="append").preflight(schema)
    install_audit(pg, unique_name)
    conf = {"spark.sql.shuffle.partitions": "2", **event_log_conf(tmp_path / "eventlog")}
    (tmp_path / "pipeline.yaml").write_text(
        PIPELINE.format(name=unique_name, work=tmp_path, conf=json.dumps(conf))
    )
    job = ConnectJob(tmp_path, unique_name, pg_dsn, mode="append")
    with local_connect_server():
        try:
            job.kill_at_points(NAMED_POINTS)
            job.kill_after_commit(6)
            job.run_to_end()
        finally:
            job.stop_if_running()
    expected = [f"{point}@{epoch}" for point, epoch in NAMED_POINTS]
    assert job.kills == [*expected, "after Spark's commit of epoch 6"]
    verify(job, data, pg)
