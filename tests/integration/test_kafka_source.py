"""``exactlyonce run`` of a pipeline file whose source is a Kafka topic (Spark's own Kafka
source) into PostgreSQL, against the genuine Apache Kafka broker: every event lands once;
``id_from: source`` collapses a re-read of the same offsets but keeps an event produced twice;
``id_columns: [event_id]`` collapses an event produced twice at different offsets."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from exactlyonce.dedup.ids import record_id

pytestmark = pytest.mark.integration

PARTITIONS = 2
RUN_TIMEOUT_S = 300

PIPELINE = """\
query_name: {name}
checkpoint: {checkpoint}
trigger: {{available_now: true}}
source:
  type: kafka
  bootstrap_servers: ${{KAFKA_BOOTSTRAP_SERVERS}}
  topic: {name}
  schema: "event_id STRING, n BIGINT"
sink:
  type: postgres
  dsn: ${{EXACTLYONCE_PG_DSN}}
  table: {name}
  shards: 2
{identity}
spark:
  master: local[2]
  conf: {{spark.sql.shuffle.partitions: "2"}}
"""

Coordinates = tuple[str, int, int]  # topic, partition, offset


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, -1)])[topic].result(timeout=30)


def produce(bootstrap: str, topic: str, events: list[tuple[str, int]]) -> list[Coordinates]:
    """Produce ``(event_id, n)`` events as JSON, round-robin over the partitions; returns
    each event's coordinates from the broker's delivery reports, in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    delivered: dict[int, Coordinates] = {}
    for i, (event_id, n) in enumerate(events):

        def report(error: Any, msg: Any, i: int = i) -> None:
            assert error is None, error
            delivered[i] = (msg.topic(), msg.partition(), msg.offset())

        value = json.dumps({"event_id": event_id, "n": n})
        producer.produce(topic, value=value, partition=i % PARTITIONS, on_delivery=report)
    assert producer.flush(30) == 0
    assert len(delivered) == len(events)
    return [delivered[i] for i in range(len(events))]


def write_pipeline(tmp_path: Path, name: str, identity: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    checkpoint = tmp_path / "checkpoint"
    path.write_text(PIPELINE.format(name=name, checkpoint=checkpoint, identity=identity))
    return path


def cli(*args: str, services: dict[str, str]) -> str:
    """``python -m exactlyonce.integration.cli ARGS`` in a subprocess; its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "exactlyonce.integration.cli", *args],
        env={**os.environ, **services},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done.stdout


def batch_totals(out: str) -> tuple[int, int]:
    """(rows read, rows written) summed over the batches ``run`` reported."""
    batches = re.findall(r"epoch \d+: (\d+) rows, (\d+) written", out)
    assert batches, out
    return sum(int(r) for r, _ in batches), sum(int(w) for _, w in batches)


def table_rows(pg: psycopg.Connection[Any], table: str) -> list[tuple[Any, ...]]:
    """(record_id, event_id, n, topic, partition, offset) of every row."""
    query = f'SELECT record_id::text, event_id, n, topic, "partition", "offset" FROM "{table}"'
    return pg.execute(query).fetchall()


def uuid_of(values: list[Any]) -> str:
    """The table's ``record_id`` (a uuid) of the ID :func:`record_id` computes."""
    return str(uuid.UUID(record_id(values)))


def test_run_reads_a_kafka_topic_into_postgres_every_event_once(
    tmp_path: Path,
    services: dict[str, str],
    bootstrap: str,
    pg: psycopg.Connection[Any],
    unique_name: str,
) -> None:
    create_topic(bootstrap, unique_name)
    events = [(f"e{i}", i) for i in range(10)]
    coordinates = produce(bootstrap, unique_name, events)
    path = write_pipeline(tmp_path, unique_name, "  id_columns: [event_id]")

    out = cli("run", str(path), services=services)

    assert batch_totals(out) == (10, 10)
    rows = table_rows(pg, unique_name)
    assert sorted((r[1], r[2]) for r in rows) == sorted(events)
    assert sorted(r[3:] for r in rows) == sorted(coordinates)  # the coordinates are kept
    assert sorted(r[0] for r in rows) == sorted(uuid_of([e]) for e, _ in events)


def test_id_from_source_collapses_a_reread_of_the_same_offsets_not_a_resent_event(
    tmp_path: Path,
    services: dict[str, str],
    bootstrap: str,
    pg: psycopg.Connection[Any],
    unique_name: str,
) -> None:
    create_topic(bootstrap, unique_name)
    # e0 is sent twice by the producer: two offsets, two records for id_from: source.
    events = [("e0", 0), ("e1", 1), ("e2", 2), ("e0", 0), ("e3", 3)]
    coordinates = produce(bootstrap, unique_name, events)
    path = write_pipeline(tmp_path, unique_name, "  id_from: source")

    first = cli("run", str(path), services=services)
    assert batch_totals(first) == (5, 5)

    # Re-read the same offsets: the checkpoint is deleted on purpose and the head reset (the
    # fix DESIGN invariant 9 names); the query starts again from the earliest offsets.
    shutil.rmtree(tmp_path / "checkpoint")
    cli("reset-head", str(path), "--yes", services=services)
    second = cli("run", str(path), services=services)
    assert batch_totals(second) == (5, 0)  # every offset read again, nothing written

    rows = table_rows(pg, unique_name)
    ids = [r[0] for r in rows]
    assert len(ids) == len(set(ids)) == 5  # one row per record ID
    assert sorted(ids) == sorted(uuid_of(list(c)) for c in coordinates)
    assert sorted(r[1] for r in rows) == ["e0", "e0", "e1", "e2", "e3"]


def test_id_columns_collapse_an_event_produced_twice_at_different_offsets(
    tmp_path: Path,
    services: dict[str, str],
    bootstrap: str,
    pg: psycopg.Connection[Any],
    unique_name: str,
) -> None:
    create_topic(bootstrap, unique_name)
    events = [("e0", 0), ("e1", 1), ("e0", 0), ("e2", 2), ("e1", 1), ("e0", 0)]
    coordinates = produce(bootstrap, unique_name, events)
    assert len(set(coordinates)) == len(events)  # every copy has its own offset
    path = write_pipeline(tmp_path, unique_name, "  id_columns: [event_id]")

    out = cli("run", str(path), services=services)

    assert batch_totals(out) == (6, 3)
    rows = table_rows(pg, unique_name)
    per_event = {e: sum(1 for r in rows if r[1] == e) for e in ("e0", "e1", "e2")}
    assert per_event == {"e0": 1, "e1": 1, "e2": 1}
    assert sorted(r[0] for r in rows) == sorted(uuid_of([e]) for e in ("e0", "e1", "e2"))
