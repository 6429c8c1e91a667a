"""``buffer:`` on every sink a drainer writes (postgres, redis, elasticsearch): one field shared
by the three sink sections of a pipeline file, never seen by the sink itself; refused on a
kafka sink, naming ``sink.buffer``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exactlyonce.buffer import Buffered, KafkaBuffer
from exactlyonce.connectors import ElasticsearchSink, PostgresSink, RedisSink
from exactlyonce.connectors.elasticsearch import ElasticsearchSinkConfig
from exactlyonce.connectors.postgres import PostgresSinkConfig
from exactlyonce.connectors.redis import RedisSinkConfig
from exactlyonce.errors import ConfigError
from exactlyonce.integration.config import BufferedSink, load_config

PASSWORD = "s3cr3t-Buff3r"
CATALOG = f"redis://:{PASSWORD}@catalog.example:6379/0"

PIPELINE = """\
query_name: q-{kind}
checkpoint: .exactlyonce/x/checkpoint
source:
  type: rate
sink:
{sink}
  buffer:
    topic: {kind}-buffer
    bootstrap_servers: broker:9092
    frame_records: {frames}
    batch_size: 500
    client_config: {{sasl.password: {password}}}
"""

SINKS: dict[str, tuple[str, type[Any], type[Any]]] = {
    "postgres": (
        f"""\
  type: postgres
  dsn: postgresql://app:{PASSWORD}@db.example/app
  table: events
  id_columns: [value]
  redis_url: {CATALOG}""",
        PostgresSink,
        PostgresSinkConfig,
    ),
    "redis": (
        f"""\
  type: redis
  url: redis://:{PASSWORD}@cache.example:6379/0
  key_template: "ev:{{value}}"
  id_columns: [value]
  write: stream
  redis_url: {CATALOG}""",
        RedisSink,
        RedisSinkConfig,
    ),
    "elasticsearch": (
        f"""\
  type: elasticsearch
  hosts: [https://es.example:9200]
  index: events
  id_columns: [value]
  password: {PASSWORD}
  username: app
  redis_url: {CATALOG}""",
        ElasticsearchSink,
        ElasticsearchSinkConfig,
    ),
}


def write(tmp_path: Path, kind: str, frames: int = 50, sink: str | None = None) -> Path:
    path = tmp_path / "pipeline.yaml"
    text = PIPELINE.format(kind=kind, sink=sink or SINKS[kind][0], frames=frames, password=PASSWORD)
    path.write_text(text)
    return path


@pytest.mark.parametrize("kind", sorted(SINKS))
def test_every_drained_sink_takes_one_buffer_field(tmp_path: Path, kind: str) -> None:
    cfg = load_config(write(tmp_path, kind))
    assert isinstance(cfg.sink, BufferedSink), "one shared field, not a copy per sink"
    assert cfg.sink.buffer is not None and cfg.sink.buffer.batch_size == 500
    assert cfg.sink.buffer.build() == KafkaBuffer(
        topic=f"{kind}-buffer",
        bootstrap_servers="broker:9092",
        frame_records=50,
        client_config={"sasl.password": PASSWORD},
    )
    own = cfg.sink.sink_config()
    assert type(own) is SINKS[kind][2], "the sink's own config: no buffer in it"
    assert "buffer" not in type(own).model_fields
    assert PASSWORD not in repr(cfg.sink) and PASSWORD in cfg.sink.secrets()


@pytest.mark.parametrize("kind", sorted(SINKS))
def test_run_writes_the_buffer_of_any_drained_sink(tmp_path: Path, kind: str) -> None:
    """``exactlyonce run`` builds the Buffered wrapper around the sink, built from its own
    config as its constructor builds it."""
    buffered = load_config(write(tmp_path, kind)).build_sink(check=False)
    assert isinstance(buffered, Buffered)
    assert isinstance(buffered.target, SINKS[kind][1])
    assert type(buffered.target.config) is SINKS[kind][2]
    assert buffered.topic == f"{kind}-buffer" and buffered.query_name == f"q-{kind}"


@pytest.mark.parametrize("kind", sorted(SINKS))
def test_a_buffer_problem_is_named_by_its_path(tmp_path: Path, kind: str) -> None:
    with pytest.raises(ConfigError) as problem:
        load_config(write(tmp_path, kind, frames=0))
    assert problem.value.field == "sink.buffer.frame_records"


def test_a_kafka_sink_takes_no_buffer(tmp_path: Path) -> None:
    kafka = """\
  type: kafka
  bootstrap_servers: broker:9092
  topic: events-out
  id_columns: [value]
  dedup: false"""
    with pytest.raises(ConfigError) as refused:
        load_config(write(tmp_path, "kafka", sink=kafka))
    assert refused.value.field == "sink.buffer"
    assert "kafka sink takes no buffer" in refused.value.reason
    assert PASSWORD not in str(refused.value)


def test_the_buffered_redis_example_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXACTLYONCE_REDIS_URL", CATALOG)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "broker:9092")
    example = Path(__file__).resolve().parents[2] / "examples" / "buffered_redis.yaml"
    cfg = load_config(example)
    assert cfg.sink.type == "redis"
    assert isinstance(cfg.sink, BufferedSink) and cfg.sink.buffer is not None
    buffered = cfg.build_sink(check=False)
    assert isinstance(buffered, Buffered) and isinstance(buffered.target, RedisSink)


@pytest.mark.parametrize(
    "kind, upsert",
    [
        ("redis", "  write: hash\n  mode: upsert"),
        ("elasticsearch", "  mode: upsert"),
        ("postgres", "  mode: upsert"),
    ],
)
def test_an_upsert_sink_takes_no_buffer(tmp_path: Path, kind: str, upsert: str) -> None:
    """The drain targets write records as they are, without the upsert's epoch guard: a
    buffer in front of an upsert sink would let an older epoch roll a value back."""
    lines = [
        line
        for line in SINKS[kind][0].splitlines()
        if not line.strip().startswith(("redis_url", "write"))
    ]
    sink = "\n".join([*lines, upsert])
    with pytest.raises(ConfigError) as refused:
        load_config(write(tmp_path, kind, sink=sink)).build_sink(check=False)
    assert refused.value.field.endswith("buffer")
    assert "upsert" in refused.value.reason
    assert PASSWORD not in str(refused.value)


def test_a_postgres_append_table_takes_a_buffer_and_needs_the_catalog(tmp_path: Path) -> None:
    """mode append is drained (the buffer holds each record once, the offsets commit with the
    rows); without a unique index, the catalog is what keeps the input's duplicates out."""
    sink = SINKS["postgres"][0] + "\n  mode: append"
    buffered = load_config(write(tmp_path, "postgres", sink=sink)).build_sink(check=False)
    assert isinstance(buffered, Buffered) and isinstance(buffered.target, PostgresSink)
    assert buffered.target.mode == "append" and buffered.dedup_config is not None
    with pytest.raises(ConfigError) as refused:
        load_config(write(tmp_path, "postgres", sink=sink + "\n  dedup: false"))
    assert refused.value.field.endswith("dedup") and "catalog" in refused.value.reason
