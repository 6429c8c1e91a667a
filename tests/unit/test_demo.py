"""The demo's pure parts: the seeded input plan (retries, replays, null keys, the expected set),
the producer's at-least-once settings, and which pipeline files the demo accepts (its own
examples/demo files among them). The demo itself runs against real services: `make demo`."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import pytest

from exactlyonce.dedup.ids import record_id
from exactlyonce.errors import ConfigError
from exactlyonce.integration.config import PipelineConfig, load_config
from exactlyonce.integration.lab.demo import (
    NULL_KEYS,
    Expected,
    generate,
    producer_config,
)
from exactlyonce.integration.lab.demo.pipeline import demo_pipelines

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "demo"


def test_the_plan_is_deterministic_from_the_seed() -> None:
    one = generate(random.Random(11), 800)
    assert generate(random.Random(11), 800) == one
    assert generate(random.Random(12), 800).records != one.records


def test_the_plan_holds_every_event_with_retries_replays_and_null_keys() -> None:
    plan = generate(random.Random(3), 2000)
    expected = Expected.of(plan)
    events = {f"evt-{n:07d}" for n in range(2000)}
    assert expected.ids == {record_id([e]) for e in events}
    assert expected.null_keys == NULL_KEYS
    assert plan.retries > 0 and plan.replayed > 0
    assert expected.duplicates == plan.retries + plan.replayed
    assert expected.records == 2000 + plan.retries + plan.replayed + NULL_KEYS


def test_a_duplicate_is_a_whole_earlier_record_sent_later() -> None:
    plan = generate(random.Random(5), 1500)
    positions: dict[str, list[int]] = defaultdict(list)
    for at, record in enumerate(plan.records):
        if record["event_id"] is not None:
            positions[record["event_id"]].append(at)
    repeated = {k: at for k, at in positions.items() if len(at) > 1}
    assert repeated
    for at in repeated.values():
        copies = [plan.records[i] for i in at]
        assert all(c == copies[0] for c in copies)
    # fresh events go out in order; a duplicate never precedes its first send
    firsts = sorted(positions, key=lambda k: positions[k][0])
    assert firsts == sorted(positions)


def test_the_producer_is_at_least_once() -> None:
    config = producer_config("broker:9092")
    assert config["enable.idempotence"] is False
    assert config["acks"] == "all"


@pytest.fixture
def demo_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "broker:9092")
    monkeypatch.setenv("EXACTLYONCE_PG_DSN", "postgresql://u:p@db:5432/d")
    monkeypatch.setenv("EXACTLYONCE_REDIS_URL", "redis://cache:6379/0")


def examples() -> tuple[PipelineConfig, PipelineConfig]:
    return (
        load_config(EXAMPLES / "kafka_to_pg.yaml"),
        load_config(EXAMPLES / "kafka_to_kafka.yaml"),
    )


@pytest.mark.usefixtures("demo_env")
def test_the_demo_accepts_its_example_pipelines() -> None:
    source, pg, out = demo_pipelines(*examples())
    assert source.topic == "demo-events-in"
    assert source.bootstrap_servers == "broker:9092"
    assert pg.table == "demo_kafka_events"
    assert out.topic == "demo-events-out"


@pytest.mark.usefixtures("demo_env")
@pytest.mark.parametrize(
    ("which", "change", "field"),
    [
        ("kafka", {"sink": {"control_topic": "exactlyonce-control"}}, "sink.control_topic"),
        ("kafka", {"source": {"topic": "other-topic"}}, "source.topic"),
        ("kafka", {"sink": {"id_columns": ("user_id",)}}, "sink.id_columns"),
        ("pg", {"source": {"ddl": "event_id STRING, user_id BIGINT"}}, "source.schema"),
        ("kafka", {"query_name": "demo-kafka-to-pg"}, "query_name"),
    ],
)
def test_the_demo_refuses_pipelines_that_do_not_fit(
    which: str, change: dict[str, object], field: str
) -> None:
    pg, kafka = examples()
    if which == "pg":
        pg = _changed(pg, change)
    else:
        kafka = _changed(kafka, change)
    with pytest.raises(ConfigError) as info:
        demo_pipelines(pg, kafka)
    assert info.value.field == field


@pytest.mark.usefixtures("demo_env")
def test_the_demo_refuses_the_pipelines_swapped() -> None:
    pg, kafka = examples()
    with pytest.raises(ConfigError) as info:
        demo_pipelines(kafka, pg)
    assert info.value.field == "sink.type"


def _changed(cfg: PipelineConfig, change: dict[str, object]) -> PipelineConfig:
    updates: dict[str, object] = {}
    for key, value in change.items():
        if isinstance(value, dict):
            updates[key] = getattr(cfg, key).model_copy(update=value)
        else:
            updates[key] = value
    return cfg.model_copy(update=updates)


def test_the_demos_stream_progress_counts_each_batchs_rows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import io
    import subprocess
    from typing import cast

    from exactlyonce.integration.lab.echo import echo
    from exactlyonce.progress import Progress

    lines = [
        "started q: kafka -> postgres:public.t\n",
        "PostgresSink(q) epoch 0: 120 rows, 100 written, 20 duplicates, 0 dead letters, "
        "1.00 s, 120 rows/s | dedup: 120 checked, 100 bloom negatives, 20 catalog lookups, "
        "20 catalog duplicates, 0 false positives\n",
        "PostgresSink(q) epoch 1: already committed (at or below the head), skipped\n",
        "PostgresSink(q) epoch 2: 80 rows, 80 written, 0 duplicates, 0 dead letters, "
        "1.00 s, 80 rows/s\n",
    ]

    class Run:
        stdout = io.StringIO("".join(lines))

    progress_out = io.StringIO()
    with Progress("pg stream", total=400, unit="rows", stream=progress_out) as progress:
        echo(cast(subprocess.Popen[str], Run()), "pg run 1", progress)
        assert progress.done == 200
    out = capsys.readouterr().out
    assert "[pg run 1] PostgresSink(q) epoch 0: 120 rows" in out and "| dedup" not in out
    assert "pg stream: 200/400 rows (50%)" in progress_out.getvalue()


def test_the_topic_audit_shows_its_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from exactlyonce.integration.lab.demo import topic_audit

    class Message:
        def __init__(self, partition: int, eof: bool = False) -> None:
            self._partition, self._eof = partition, eof

        def error(self) -> object:
            if not self._eof:
                return None

            class Eof:
                def code(self) -> int:
                    return topic_audit.KafkaError._PARTITION_EOF

            return Eof()

        def partition(self) -> int:
            return self._partition

    batches = [[Message(0), Message(0), Message(1)], [Message(0, eof=True), Message(1, True)]]

    class Consumer:
        def consume(self, num_messages: int, timeout: float) -> list[Message]:
            return batches.pop(0)

    monkeypatch.setattr(topic_audit, "headers_of", lambda msg: {})
    stream = io.StringIO()
    with topic_audit.Progress("audit", total=3, unit="records", stream=stream) as progress:
        out = topic_audit._consume(Consumer(), "t", 2, progress)  # type: ignore[arg-type]
    assert len(out) == 3 and progress.done == 3
    assert "audit: 3/3 records (100%)" in stream.getvalue()
