"""``exactlyonce run --remote``: a pipeline file's query on Spark Connect (a local server
started by the command: ``local[1]``), the sink pickled to the server as its config. A first
run and a restart from the same checkpoint with more files write each event once, audited in
``mode: append`` (a second write is a second row, counted by psycopg); the command prints a
line per batch from the server's progress; no password shows in its output or Spark's event
log (Spark Connect logs each plan as text)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.crash.harness import service_passwords
from tests.support.connect_port import local_connect_server
from tests.support.secrets_scan import assert_no_secrets, event_log_conf

pytestmark = pytest.mark.integration

PIPELINE = """
query_name: {name}
checkpoint: {work}/checkpoint
trigger: {{available_now: true}}
source:
  type: files
  format: json
  path: {work}/input
  schema: "event_id STRING, n BIGINT"
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
  conf: {conf}
"""


def _stage(work: Path, part: int) -> list[str]:
    (work / "input").mkdir(parents=True, exist_ok=True)
    ids = []
    for k in range(2):
        events = [{"event_id": f"p{part}f{k}e{i}", "n": i} for i in range(20)]
        path = work / "input" / f"part-{part}{k}.json"
        path.write_text("".join(json.dumps(e) + "\n" for e in events))
        ids += [e["event_id"] for e in events]
    return ids


def test_run_on_spark_connect_writes_once_across_a_restart(
    tmp_path: Path, services: dict[str, str], pg: psycopg.Connection[Any], unique_name: str
) -> None:
    conf = json.dumps({"spark.sql.shuffle.partitions": "2", **event_log_conf(tmp_path / "log")})
    config = tmp_path / "pipeline.yaml"
    config.write_text(PIPELINE.format(name=unique_name, work=tmp_path, conf=conf))
    env = {**os.environ, **services, "PYSPARK_PYTHON": sys.executable}
    expected: list[str] = []
    outputs = []
    with local_connect_server():
        for part in (0, 1):  # a first run, then a restart from its checkpoint with more files
            expected += _stage(tmp_path, part)
            done = subprocess.run(
                [sys.executable, "-m", "exactlyonce", "run", str(config), "--remote", "local[1]"],
                env=env,
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            outputs += [done.stdout, done.stderr]
            batches = [line for line in done.stdout.splitlines() if line.startswith("batch ")]
            assert len(batches) == 2, done.stdout  # one file per batch, two new files a run
            assert "input rows (written on the Spark Connect server)" in batches[0]
            assert "after 2 batch(es)" in done.stdout
    rows = pg.execute(f'SELECT event_id, count(*) FROM "{unique_name}" GROUP BY 1').fetchall()
    assert dict(rows) == dict.fromkeys(expected, 1)
    texts = {f"output {n}": text for n, text in enumerate(outputs)}
    assert_no_secrets([tmp_path], service_passwords(), texts=texts, expect=["events_*"])
