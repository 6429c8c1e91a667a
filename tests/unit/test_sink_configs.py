"""Each sink has ONE config model: the Python constructor and the pipeline file build the same
object from the same values, so a rule or a default cannot differ between the two doors."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from exactlyonce.buffer import KafkaBuffer
from exactlyonce.connectors import ElasticsearchSink, KafkaSink, PostgresSink, RedisSink
from exactlyonce.connectors.base.config import SinkConfig
from exactlyonce.errors import ConfigError
from exactlyonce.integration.config import load_config

PASSWORD = "s3cr3t-Pa55"
CATALOG = f"redis://:{PASSWORD}@catalog.example:6379/0"

PIPELINE = """\
query_name: q-{kind}
checkpoint: .exactlyonce/x/checkpoint
source:
  type: rate
sink:
{sink}
"""

# kind -> (the sink section of a pipeline file, the Python constructor call's arguments)
SINKS: dict[str, tuple[str, Any]] = {
    "postgres": (
        f"""\
  type: postgres
  dsn: postgresql://app:{PASSWORD}@db.example/app
  table: events
  id_columns: [value]
  mode: append
  shards: 3
  epoch_column: ep
  redis_url: {CATALOG}
  dedup: {{retention_epochs: 50, on_catalog_loss: fail}}
""",
        lambda: PostgresSink(
            f"postgresql://app:{PASSWORD}@db.example/app",
            "events",
            ["value"],
            "q-postgres",
            mode="append",
            shards=3,
            epoch_column="ep",
            redis_url=CATALOG,
            dedup={"retention_epochs": 50, "on_catalog_loss": "fail"},
            check=False,
        ),
    ),
    "redis": (
        f"""\
  type: redis
  url: redis://:{PASSWORD}@cache.example:6379/0
  key_template: "event:{{value}}"
  write: string
  ttl_seconds: 60
  id_columns: [value]
  redis_url: {CATALOG}
""",
        lambda: RedisSink(
            f"redis://:{PASSWORD}@cache.example:6379/0",
            "event:{value}",
            ["value"],
            "q-redis",
            write="string",
            ttl_seconds=60,
            redis_url=CATALOG,
            check=False,
        ),
    ),
    "elasticsearch": (
        f"""\
  type: elasticsearch
  hosts: https://es.example:9200
  index: events
  username: app
  password: {PASSWORD}
  op_type: index
  id_columns: [value]
  dedup: false
""",
        lambda: ElasticsearchSink(
            "https://es.example:9200",
            "events",
            ["value"],
            "q-elasticsearch",
            basic_auth=("app", PASSWORD),
            op_type="index",
            dedup=False,
            check=False,
        ),
    ),
    "kafka": (
        f"""\
  type: kafka
  bootstrap_servers: broker:9092
  topic: events-out
  id_columns: [value]
  key_column: value
  partitions: 4
  redis_url: {CATALOG}
  producer_config: {{sasl.password: {PASSWORD}, transaction.timeout.ms: 120000}}
""",
        lambda: KafkaSink(
            "broker:9092",
            "events-out",
            "value",
            "q-kafka",
            key_column="value",
            partitions=4,
            redis_url=CATALOG,
            producer_config={"sasl.password": PASSWORD, "transaction.timeout.ms": 120000},
            check=False,
        ),
    ),
}


def from_file(tmp_path: Path, kind: str) -> Any:
    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE.format(kind=kind, sink=SINKS[kind][0].rstrip()))
    return load_config(path).build_sink(check=False)


@pytest.mark.parametrize("kind", sorted(SINKS))
def test_both_doors_build_the_same_config(tmp_path: Path, kind: str) -> None:
    from_yaml, from_python = from_file(tmp_path, kind), SINKS[kind][1]()
    assert isinstance(from_python.config, SinkConfig)
    assert type(from_yaml.config) is type(from_python.config)
    assert from_yaml.config == from_python.config
    assert from_yaml.config.model_dump() == from_python.config.model_dump()
    assert from_yaml.dedup_config == from_python.dedup_config
    assert PASSWORD not in repr(from_python.config) and PASSWORD not in repr(from_yaml)
    assert PASSWORD in from_python.config.secrets()


def test_configs_are_frozen() -> None:
    sink = SINKS["postgres"][1]()
    with pytest.raises(Exception, match="frozen"):
        sink.config.table = "other"


def test_one_rule_in_both_doors(tmp_path: Path) -> None:
    """The same bad value is refused by the same rule, named by its field in each door."""
    with pytest.raises(ConfigError) as python_error:
        PostgresSink("postgresql://db/app", "t", ["value"], "q", shards=0, check=False)
    path = tmp_path / "pipeline.yaml"
    sink = SINKS["postgres"][0].replace("shards: 3", "shards: 0").rstrip()
    path.write_text(PIPELINE.format(kind="postgres", sink=sink))
    with pytest.raises(ConfigError) as yaml_error:
        load_config(path)
    assert python_error.value.field == "shards" and yaml_error.value.field == "sink.shards"
    assert python_error.value.reason == yaml_error.value.reason
    with pytest.raises(ConfigError) as no_catalog:
        PostgresSink("postgresql://db/app", "t", ["v"], "q", mode="append", dedup=False)
    assert no_catalog.value.field == "dedup"


BUFFERED = """\
  type: postgres
  dsn: postgresql://app@db.example/app
  table: events
  id_columns: [value]
  dedup: false
  buffer:
    topic: events-buffer
    bootstrap_servers: broker:9092
    frame_records: {frames}
    client_config: {{sasl.password: {password}}}
    drain_dead_letter_topic: events-dlq
"""


def test_a_buffer_is_the_same_object_from_both_doors(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        PIPELINE.format(kind="b", sink=BUFFERED.format(frames=50, password=PASSWORD).rstrip())
    )
    settings = load_config(path).sink.buffer
    assert settings is not None
    from_python = KafkaBuffer(
        topic="events-buffer",
        bootstrap_servers="broker:9092",
        frame_records=50,
        client_config={"sasl.password": PASSWORD},
        drain_dead_letter_topic_name="events-dlq",
    )
    assert settings.build() == from_python and PASSWORD not in repr(from_python)
    path.write_text(
        PIPELINE.format(kind="b", sink=BUFFERED.format(frames=0, password=PASSWORD).rstrip())
    )
    with pytest.raises(ConfigError) as yaml_error:
        load_config(path)
    with pytest.raises(ConfigError) as python_error:
        KafkaBuffer(topic="t", bootstrap_servers="b:9092", frame_records=0)
    assert yaml_error.value.field == "sink.buffer.frame_records"
    assert python_error.value.field == "frame_records"
    assert yaml_error.value.reason == python_error.value.reason
    with pytest.raises(ConfigError) as timeout:
        KafkaBuffer(topic="t", bootstrap_servers="b:9092", transaction_timeout_ms=1000)
    assert timeout.value.field == "transaction_timeout_ms" and "10000" in timeout.value.reason


def test_the_kafka_timeout_rule_is_one_rule() -> None:
    """It was >= 1,000 ms in the pipeline model and >= 10,000 in KafkaSink; now one rule."""
    for where in (
        {"transaction_timeout_ms": 5000},
        {"producer_config": {"transaction.timeout.ms": 5000}},
    ):
        with pytest.raises(ConfigError) as err:
            KafkaSink("b:9092", "t", ["v"], "q", dedup=False, check=False, **where)
        assert "below 10000" in err.value.reason


@pytest.mark.parametrize(
    ("sink", "only_in_signature", "only_in_config"),
    [
        (PostgresSink, set(), set()),
        (KafkaSink, set(), set()),
        (RedisSink, set(), set()),
        (ElasticsearchSink, {"basic_auth"}, {"username", "password"}),
    ],
)
def test_constructors_take_exactly_their_config_fields(
    sink: Any, only_in_signature: set[str], only_in_config: set[str]
) -> None:
    """A typed, discoverable signature whose defaults are the config model's (UNSET)."""
    config = type(SINKS[sink.kind][1]().config)
    parameters = inspect.signature(sink.__init__).parameters
    keywords = set(parameters) - {"self", "check"} - only_in_signature
    assert keywords == set(config.model_fields) - {"type"} - only_in_config
    options = [p for p in parameters.values() if p.kind is p.KEYWORD_ONLY and p.name != "check"]
    assert {repr(p.default) for p in options if p.name in config.model_fields} == {"UNSET"}
