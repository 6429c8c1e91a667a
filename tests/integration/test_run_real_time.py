"""``exactlyonce run`` of a pipeline file with ``trigger: {real_time: ...}`` (Spark Real-time
Mode, Kafka -> PostgreSQL by source frontiers) and ``resume: from_sink``, through the real
command, against real Kafka and PostgreSQL: every event once (read with psycopg), and after
the checkpoint is deleted, the new checkpoint starts at the sink's frontiers, not at the
earliest offsets (its first epoch reads only the events sent since)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.crash.harness import ROOT
from tests.support.realtime import (
    EventProducer,
    end_offsets,
    event_counts,
    frontiers,
    make_topic,
)

pytestmark = pytest.mark.integration

PIPELINE = """\
query_name: {name}
checkpoint: {work}/checkpoint
trigger: {{real_time: "5 seconds"}}
resume: from_sink
source:
  type: kafka
  bootstrap_servers: {bootstrap}
  topic: {name}
  schema: "event_id STRING"
sink:
  type: postgres
  dsn: ${{EXACTLYONCE_PG_DSN}}
  table: {name}
  id_from: source
  mode: append
  redis_url: ${{EXACTLYONCE_REDIS_URL}}
spark:
  master: local[4]
  conf:
    spark.driver.extraJavaOptions: "-XX:TieredStopAtLevel=1"
"""


def _run(config: Path, epochs: int) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "exactlyonce", "run", str(config), "--max-batches", str(epochs)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


# Epochs per run: a run's first epoch also starts its Python worker, which on a busy machine
# takes most of the 5 s epoch (2 and 17 of 600 records read, measured), so a run reads what
# is waiting over a few epochs; what it read in all of them is the count that matters.
EPOCHS = 3


def _rows_read(out: str) -> int:
    """The input rows of every epoch the run printed, together."""
    found = re.findall(r"^epoch \d+: (\d+) input rows", out, re.MULTILINE)
    assert found, out
    return sum(int(rows) for rows in found)


def test_real_time_run_writes_each_event_once_and_resumes_a_new_checkpoint_from_the_sink(
    tmp_path: Path, pg: psycopg.Connection[Any], bootstrap: str, unique_name: str
) -> None:
    make_topic(bootstrap, unique_name)
    config = tmp_path / "pipeline.yaml"
    config.write_text(PIPELINE.format(name=unique_name, work=tmp_path, bootstrap=bootstrap))
    EventProducer(bootstrap, unique_name, 600, rate=10_000).start().join()

    first = _run(config, epochs=EPOCHS)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "no frontier yet, a new checkpoint starts at earliest" in first.stdout
    assert _rows_read(first.stdout) == 600
    assert frontiers(pg, unique_name) == end_offsets(bootstrap, unique_name)

    shutil.rmtree(tmp_path / "checkpoint")  # lost: the new one starts from the sink
    later = EventProducer(bootstrap, unique_name, 900, rate=10_000)
    later.start().join()  # e0..e899 again as new records: 900 more source records
    second = _run(config, epochs=EPOCHS)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "a new checkpoint starts at the sink's frontiers" in second.stdout
    assert _rows_read(second.stdout) == 900  # not 1,500: it did not start at earliest
    assert frontiers(pg, unique_name) == end_offsets(bootstrap, unique_name)
    counts = event_counts(pg, unique_name)
    # id_from: source: each source record once; events e0..e599 were sent twice (two records)
    assert sum(counts.values()) == 1_500
    assert {e: n for e, n in counts.items() if n != (2 if int(e[1:]) < 600 else 1)} == {}


KAFKA_SINK = """\
sink:
  type: kafka
  bootstrap_servers: {bootstrap}
  topic: {name}-out
  create_topic: true
  partitions: 2
  id_from: source
  redis_url: ${{EXACTLYONCE_REDIS_URL}}
"""


def test_a_kafka_sink_in_real_time_resumes_a_new_checkpoint_from_its_frontiers(
    tmp_path: Path, bootstrap: str, unique_name: str
) -> None:
    from exactlyonce.connectors import KafkaSink
    from tests.support.kafka_audit import field_counts

    make_topic(bootstrap, unique_name)
    config = tmp_path / "pipeline.yaml"
    head, _, _ = PIPELINE.partition("sink:\n")
    spark = "spark:" + PIPELINE.partition("\nspark:")[2]
    text = head + KAFKA_SINK + spark
    config.write_text(text.format(name=unique_name, work=tmp_path, bootstrap=bootstrap))
    out = f"{unique_name}-out"
    sink = KafkaSink(bootstrap, out, None, unique_name, id_from="content", create_topic=True)
    EventProducer(bootstrap, unique_name, 600, rate=10_000).start().join()

    first = _run(config, epochs=EPOCHS)
    assert first.returncode == 0, first.stderr[-3000:]
    assert _rows_read(first.stdout) == 600
    ends = end_offsets(bootstrap, unique_name)
    assert sink.source_frontiers() == {(unique_name, p): n for p, n in ends.items()}

    shutil.rmtree(tmp_path / "checkpoint")  # lost: the new one starts from the sink
    EventProducer(bootstrap, unique_name, 900, rate=10_000).start().join()
    second = _run(config, epochs=EPOCHS)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "a new checkpoint starts at the sink's frontiers" in second.stdout
    assert _rows_read(second.stdout) == 900  # not 1,500: it did not start at earliest
    ends = end_offsets(bootstrap, unique_name)
    assert sink.source_frontiers() == {(unique_name, p): n for p, n in ends.items()}
    counts = field_counts(bootstrap, f"{unique_name}-out")  # a plain read_committed consumer
    assert sum(counts.values()) == 1_500
    assert {e: n for e, n in counts.items() if n != (2 if int(e[1:]) < 600 else 1)} == {}
