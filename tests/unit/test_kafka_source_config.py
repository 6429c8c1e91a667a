"""A pipeline file's Kafka ``source:`` and ``sink.id_from``: what the file may say, the
columns the stream gets, Spark's reader options, and errors that name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exactlyonce.dedup.ids import KAFKA_SOURCE_COLUMNS, RecordIdSpec
from exactlyonce.errors import ConfigError
from exactlyonce.integration.config import (
    KafkaSourceConfig,
    PipelineConfig,
    load_config,
    parse_config,
)

DSN = "postgresql://app:s3cr3t@db.example:5432/app"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCHEMA = "event_id STRING, user_id BIGINT, action STRING"


def pipeline(source: dict[str, Any] | None = None, **sink: Any) -> dict[str, Any]:
    """A Kafka -> PostgreSQL pipeline mapping; ``source``/``sink`` keys override."""
    kafka = {"type": "kafka", "bootstrap_servers": "broker:9092", "topic": "events"}
    entry = {"type": "postgres", "dsn": DSN, "table": "events", "id_columns": ["event_id"]}
    entry.update(sink)
    return {
        "query_name": "kafka-to-pg",
        "checkpoint": "/tmp/checkpoint",
        "source": {**kafka, "schema": SCHEMA, **(source or {})},
        "sink": {k: v for k, v in entry.items() if v is not None},
    }


def load(data: dict[str, Any]) -> PipelineConfig:
    return parse_config(data, environ={})


def error(data: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(data)
    assert "s3cr3t" not in str(info.value)
    return info.value


# -- the source ---------------------------------------------------------------------------


def test_a_kafka_source_parses_with_its_defaults() -> None:
    source = load(pipeline()).source
    assert isinstance(source, KafkaSourceConfig)
    assert (source.topic, source.subscribe_pattern) == ("events", None)
    assert source.starting_offsets == "earliest"
    assert source.max_offsets_per_trigger is None
    assert source.fail_on_data_loss is True


@pytest.mark.parametrize(
    ("subscription", "words"),
    [
        ({"topic": None}, "exactly one of topic or subscribe_pattern"),
        ({"subscribe_pattern": "events-.*"}, "exactly one of topic or subscribe_pattern"),
    ],
)
def test_exactly_one_of_topic_or_subscribe_pattern(
    subscription: dict[str, Any], words: str
) -> None:
    data = pipeline(subscription)
    data["source"] = {k: v for k, v in data["source"].items() if v is not None}
    err = error(data)
    assert err.field == "source"
    assert words in err.reason


def test_a_subscribe_pattern_alone_is_accepted() -> None:
    data = pipeline({"subscribe_pattern": "events-.*"})
    del data["source"]["topic"]
    source = load(data).source
    assert isinstance(source, KafkaSourceConfig)
    assert source.reader_options()["subscribePattern"] == "events-.*"
    assert "subscribe" not in source.reader_options()


def test_with_a_schema_the_columns_are_the_schemas_then_the_coordinates() -> None:
    source = load(pipeline()).source
    assert source.columns() == [
        "event_id",
        "user_id",
        "action",
        "topic",
        "partition",
        "offset",
        "timestamp",
    ]


def test_without_a_schema_the_columns_are_key_and_value_text_then_the_coordinates() -> None:
    data = pipeline(id_columns=["key"])
    del data["source"]["schema"]
    source = load(data).source
    assert source.columns() == ["key", "value", "topic", "partition", "offset", "timestamp"]


@pytest.mark.parametrize("column", ["topic", "partition", "offset", "timestamp"])
def test_a_schema_column_named_like_a_coordinate_is_refused(column: str) -> None:
    err = error(pipeline({"schema": f"event_id STRING, {column} BIGINT"}))
    assert err.field == "source.schema"
    assert column in err.reason and "clash" in err.reason


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"bootstrap_servers": ""}, "source.bootstrap_servers", "at least 1"),
        ({"max_offsets_per_trigger": 0}, "source.max_offsets_per_trigger", "greater than"),
        ({"schema": "event_id STRING, event_id BIGINT"}, "source.schema", "duplicate"),
        ({"startingOffsets": "latest"}, "source.startingOffsets", "unknown"),
    ],
)
def test_a_bad_source_setting_is_named(change: dict[str, Any], field: str, words: str) -> None:
    err = error(pipeline(change))
    assert err.field == field
    assert words in err.reason


def test_reader_options_map_the_settings_to_sparks_kafka_source() -> None:
    source = load(
        pipeline(
            {
                "topic": "a,b",
                "starting_offsets": "latest",
                "max_offsets_per_trigger": 500,
                "fail_on_data_loss": False,
                "options": {"kafka.security.protocol": "PLAINTEXT", "minPartitions": 4},
            }
        )
    ).source
    assert isinstance(source, KafkaSourceConfig)
    assert source.reader_options() == {
        "kafka.bootstrap.servers": "broker:9092",
        "subscribe": "a,b",
        "startingOffsets": "latest",
        "failOnDataLoss": "false",
        "maxOffsetsPerTrigger": "500",
        "kafka.security.protocol": "PLAINTEXT",
        "minPartitions": "4",
    }


def test_options_given_by_the_user_win_over_the_mapped_settings() -> None:
    source = load(pipeline({"options": {"startingOffsets": '{"events": {"0": 5}}'}})).source
    assert isinstance(source, KafkaSourceConfig)
    assert source.reader_options()["startingOffsets"] == '{"events": {"0": 5}}'


# -- sink.id_from --------------------------------------------------------------------------


def test_id_from_columns_is_the_default_and_keeps_id_columns() -> None:
    assert load(pipeline()).sink.id_columns == ("event_id",)
    assert load(pipeline(id_from="columns")).sink.id_columns == ("event_id",)


def test_id_from_source_makes_ids_from_topic_partition_and_offset() -> None:
    cfg = load(pipeline(id_from="source", id_columns=None))
    assert cfg.sink.id_columns == ("topic", "partition", "offset")
    assert cfg.sink.id_columns == RecordIdSpec.from_kafka_source().columns == KAFKA_SOURCE_COLUMNS
    assert cfg.sink.id_from == "columns"  # 'source' is the file's alias of these columns


def test_id_from_source_builds_the_same_sink_as_the_coordinates_named_by_hand() -> None:
    by_source = load(pipeline(id_from="source", id_columns=None)).sink
    by_hand = load(pipeline(id_columns=["topic", "partition", "offset"])).sink
    assert by_source == by_hand


def test_id_from_source_works_without_a_schema() -> None:
    data = pipeline(id_from="source", id_columns=None)
    del data["source"]["schema"]
    assert load(data).sink.id_columns == KAFKA_SOURCE_COLUMNS


def test_id_from_source_with_id_columns_is_refused_naming_id_from() -> None:
    err = error(pipeline(id_from="source"))
    assert err.field == "sink.id_from"
    assert "id_columns" in err.reason


def test_id_from_source_needs_a_kafka_source() -> None:
    data = pipeline(id_from="source", id_columns=None)
    data["source"] = {"type": "rate"}
    err = error(data)
    assert err.field == "sink.id_from"
    assert "kafka" in err.reason and "rate" in err.reason


def test_an_unknown_id_from_is_refused_naming_it() -> None:
    err = error(pipeline(id_from="offsets"))
    assert err.field == "sink.id_from"
    assert "columns" in err.reason and "source" in err.reason


def test_id_from_columns_without_id_columns_asks_for_them() -> None:
    err = error(pipeline(id_from="columns", id_columns=None))
    assert err.field == "sink.id_columns"
    assert "required" in err.reason.lower()


@pytest.mark.parametrize("sink_type", ["redis", "kafka", "elasticsearch"])
def test_id_from_source_works_for_every_sink(sink_type: str) -> None:
    sinks: dict[str, dict[str, Any]] = {
        "redis": {"url": "redis://localhost:6379/0", "key_template": "e:{offset}"},
        "kafka": {"bootstrap_servers": "broker:9092", "topic": "out"},
        "elasticsearch": {"hosts": ["http://localhost:9200"], "index": "events"},
    }
    data = pipeline()
    data["sink"] = {"type": sink_type, "id_from": "source", **sinks[sink_type]}
    assert load(data).sink.id_columns == KAFKA_SOURCE_COLUMNS


def test_the_kafka_pipeline_example_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXACTLYONCE_PG_DSN", DSN)
    monkeypatch.setenv("EXACTLYONCE_REDIS_URL", "redis://localhost:6379/0")
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    cfg = load_config(EXAMPLES / "kafka_pipeline.yaml")
    assert isinstance(cfg.source, KafkaSourceConfig)
    assert cfg.source.bootstrap_servers == "127.0.0.1:19092"
    assert cfg.sink.id_columns == ("event_id",)
    assert cfg.trigger_kwargs() == {"available_now": True}
