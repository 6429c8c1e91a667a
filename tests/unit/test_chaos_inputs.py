"""``exactlyonce chaos --events`` for a Kafka source, without a broker: what it would produce
(the planned records as the source's rows, keyed by the id column), the expected IDs and the
records sent per key (the control's rule), and the sources it refuses."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from exactlyonce.dedup.ids import record_id
from exactlyonce.errors import ConfigError
from exactlyonce.integration.config import PipelineConfig
from exactlyonce.integration.config.sources import KafkaSourceConfig
from exactlyonce.integration.lab.chaos import inputs, topic_input
from exactlyonce.integration.lab.events import Record

SINK = {"type": "postgres", "dsn": "postgresql://u:pw@127.0.0.1:1/db", "table": "ev",
        "mode": "append", "redis_url": "redis://127.0.0.1:1/0"}  # fmt: skip


def _cfg(
    source: dict[str, Any], id_columns: list[str] | None = None, id_from: str = "columns"
) -> PipelineConfig:
    kafka = {"type": "kafka", "bootstrap_servers": "127.0.0.1:1", "topic": "in",
             "schema": "event_id STRING, user_id BIGINT"}  # fmt: skip
    ids: dict[str, Any] = {"id_columns": id_columns or ["event_id"]}
    return PipelineConfig.model_validate(
        {
            "query_name": "q",
            "checkpoint": "/tmp/ckpt",
            "source": {**kafka, **source},
            "sink": {**SINK, **(ids if id_from == "columns" else {"id_from": id_from})},
        }
    )


Produced = list[tuple[str, list[Record], str]]


@pytest.fixture
def produced(monkeypatch: pytest.MonkeyPatch) -> Produced:
    """What ``--events`` gives the producer (no broker here)."""
    calls: Produced = []

    def fake_produce(
        source: KafkaSourceConfig, rows: Sequence[Record], key: str
    ) -> tuple[str, list[tuple[str, int, int]]]:
        calls.append((str(source.topic), list(rows), key))
        return "topic in (4 partitions)", [("in", n % 4, n // 4) for n in range(len(rows))]

    monkeypatch.setattr(topic_input, "produce_input", fake_produce)
    return calls


def test_events_for_a_kafka_source_are_produced_keyed_and_counted(
    tmp_path: Path, produced: Produced
) -> None:
    out = tmp_path / "expected-ids.txt"
    got = inputs.write_events(_cfg({}), 300, 7, files=99, out=out)
    [(topic, rows, key)] = produced
    assert (topic, key) == ("in", "event_id")
    assert all(set(r) == {"event_id", "user_id"} for r in rows)  # only the schema's columns
    keys = [r["event_id"] for r in rows]
    distinct = {k for k in keys if k is not None}
    assert len(distinct) == 300 and len(keys) > 300 + keys.count(None)  # duplicates sent
    assert got.ids == {record_id([k]): [k] for k in distinct}
    assert got.dead_letters == keys.count(None) > 0
    assert got.sent == Counter((k,) for k in keys if k is not None)
    assert out.read_text().split() == sorted(distinct)
    assert not list(tmp_path.glob("chaos-part-*"))  # nothing written as files


@pytest.mark.parametrize(
    ("source", "id_columns", "why"),
    [
        ({"schema": None}, ["key"], "give the Kafka source a schema"),
        ({"schema": "event_id BIGINT"}, None, "is not STRING"),
        ({}, ["event_id", "user_id"], "keyed by one column"),
    ],
)
def test_events_refuse_a_kafka_source_they_cannot_key(
    tmp_path: Path, source: dict[str, Any], id_columns: list[str] | None, why: str
) -> None:
    with pytest.raises(ConfigError, match=why):
        inputs.write_events(_cfg(source, id_columns), 10, 1, files=1, out=tmp_path / "ids")


@pytest.mark.parametrize(
    "source", [{"topic": "a,b"}, {"topic": None, "subscribe_pattern": "in-.*"}]
)
def test_events_produce_into_one_named_topic(source: dict[str, Any]) -> None:
    cfg = _cfg(source)
    assert isinstance(cfg.source, KafkaSourceConfig)
    with pytest.raises(ConfigError, match="single topic"):
        topic_input.source_topic(cfg.source)


def test_a_kafka_source_without_events_names_them() -> None:
    assert not inputs.needs_fresh_input(_cfg({}))
    with pytest.raises(ConfigError, match="--events N for a Kafka source"):
        inputs.from_source(_cfg({}))


def test_events_for_a_files_source_are_the_same_records_in_files(
    tmp_path: Path, produced: Produced
) -> None:
    source = {"type": "files", "format": "json", "path": str(tmp_path / "in"), "topic": None,
              "bootstrap_servers": None, "schema": "event_id STRING, user_id BIGINT"}  # fmt: skip
    cfg = PipelineConfig.model_validate(
        {
            "query_name": "q",
            "checkpoint": "/tmp/ckpt",
            "source": {k: v for k, v in source.items() if v is not None},
            "sink": {**SINK, "id_columns": ["event_id"]},
        }
    )
    got = inputs.write_events(cfg, 300, 7, files=5, out=tmp_path / "ids")
    kafka = inputs.write_events(_cfg({}), 300, 7, files=1, out=tmp_path / "ids2")
    parts = sorted((tmp_path / "in").glob("chaos-part-*.json"))
    assert len(parts) == 5 and len(produced) == 1
    assert (got.ids, got.sent, got.dead_letters) == (kafka.ids, kafka.sent, kafka.dead_letters)


def test_with_id_from_source_every_produced_record_is_an_id_from_its_delivery_report(
    tmp_path: Path, produced: Produced
) -> None:
    """``id_from: source``: each record its own ID, (topic, partition, offset) as the
    producer was told (here: the fake's), never from the package's reader; the null keys are
    records like the others (no dead letter)."""
    out = tmp_path / "expected-ids.txt"
    got = inputs.write_events(_cfg({}, id_from="source"), 300, 7, files=1, out=out)
    [(_, rows, key)] = produced
    placed = [("in", n % 4, n // 4) for n in range(len(rows))]
    assert key == "event_id" and any(r["event_id"] is None for r in rows)
    assert got.ids == {record_id(list(c)): list(c) for c in placed}
    assert len(got.ids) == len(rows) and got.dead_letters == 0
    assert got.sent == Counter((t, str(p), str(o)) for t, p, o in placed)
    assert out.read_text().splitlines()[0] == '["in", 0, 0]'


@pytest.mark.parametrize("identity", ["source", "columns", "content"])
def test_the_report_names_where_the_ids_come_from(identity: str) -> None:
    """``source`` (a Kafka source's coordinates, which the file sets as id_columns),
    ``columns`` or ``content``, as the pipeline file says."""
    assert inputs.id_from(_cfg({}, id_from=identity)) == identity
