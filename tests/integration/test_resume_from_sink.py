"""``exactlyonce heads PIPELINE --starting-offsets``: Spark's ``startingOffsets`` JSON from the
source frontiers a Real-time Mode writer committed in PostgreSQL, against a real PostgreSQL
and a real Kafka topic (its partitions listed by the brokers), through the real command.
Refused (exit 2, the field named) when the sink holds no frontier for the query."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from exactlyonce.integration.config import load_config
from tests.crash.harness import ROOT
from tests.support.realtime import make_topic

pytestmark = pytest.mark.integration

PIPELINE = """\
query_name: {name}
checkpoint: {work}/checkpoint
trigger: {{processing_time: "1 second"}}
source:
  type: kafka
  bootstrap_servers: {bootstrap}
  topic: {name}
  schema: "event_id STRING"
sink:
  type: postgres
  dsn: ${{EXACTLYONCE_PG_DSN}}
  table: {name}
  id_columns: [event_id]
  mode: append
  redis_url: ${{EXACTLYONCE_REDIS_URL}}
"""


def _heads(config: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "exactlyonce", "heads", str(config), "--starting-offsets"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


def test_a_new_checkpoint_resumes_each_partition_at_the_sinks_frontier(
    tmp_path: Path, pg: psycopg.Connection[Any], bootstrap: str, unique_name: str
) -> None:
    make_topic(bootstrap, unique_name, partitions=3)
    config = tmp_path / "pipeline.yaml"
    config.write_text(PIPELINE.format(name=unique_name, work=tmp_path, bootstrap=bootstrap))
    sink: Any = load_config(config).build_sink(check=False)

    refused = _heads(config)  # no frontier table yet: nothing to resume from
    assert refused.returncode == 2, refused.stderr
    assert "--starting-offsets" in refused.stderr and "no source frontiers" in refused.stderr

    sink.realtime()  # creates the frontier table, as a Real-time Mode query does
    for partition, next_offset in ((0, 120), (2, 7)):
        pg.execute(
            "INSERT INTO exactlyonce_frontiers (query_name, sink, topic, partition, next_offset,"
            " epoch) VALUES (%s, %s, %s, %s, %s, 3)",
            [unique_name, sink.sink_name, unique_name, partition, next_offset],
        )
    done = _heads(config)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {unique_name: {"0": 120, "1": -2, "2": 7}}
