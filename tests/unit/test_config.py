"""Pipeline config files: parsing, ${VAR} substitution, errors that name the field, no secrets."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from exactlyonce.connectors.postgres.config import PostgresSinkConfig
from exactlyonce.errors import ConfigError
from exactlyonce.integration.config import (
    FilesSourceConfig,
    PipelineConfig,
    ddl_column_names,
    load_config,
)

PASSWORD = "s3cr3t-Pa55"
DSN = f"postgresql://app:{PASSWORD}@db.example:5432/app"

VALID = """\
query_name: clicks-to-pg
checkpoint: .exactlyonce/demo/checkpoint
trigger: {processing_time: "1 second"}
source:
  type: files
  format: json
  path: .exactlyonce/demo/input
  schema: "event_id STRING, user_id BIGINT, action STRING, ts TIMESTAMP"
  max_files_per_trigger: 1
sink:
  type: postgres
  dsn: ${TEST_EO_DSN}
  table: demo_events
  id_columns: [event_id]
  mode: insert
  shards: 2
spark:
  master: local[2]
  conf: {spark.sql.shuffle.partitions: 4, spark.sql.ansi.enabled: true}
"""


@pytest.fixture(autouse=True)
def dsn_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_EO_DSN", DSN)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def with_line(old: str, new: str) -> str:
    assert old in VALID, old
    return VALID.replace(old, new)


def error_for(tmp_path: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    assert PASSWORD not in str(info.value)
    return info.value


def test_valid_config_parses_into_typed_objects(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, VALID))
    assert isinstance(cfg, PipelineConfig)
    assert cfg.query_name == "clicks-to-pg"
    assert cfg.trigger_kwargs() == {"processing_time": "1 second"}
    assert isinstance(cfg.source, FilesSourceConfig)
    assert cfg.source.columns() == ["event_id", "user_id", "action", "ts"]
    assert cfg.source.max_files_per_trigger == 1
    assert isinstance(cfg.sink, PostgresSinkConfig)
    assert cfg.sink.dsn.get_secret_value() == DSN
    assert cfg.sink.id_columns == ("event_id",)
    assert cfg.sink.shards == 2
    assert cfg.spark.conf == {"spark.sql.shuffle.partitions": "4", "spark.sql.ansi.enabled": "true"}


def test_config_is_frozen(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, VALID))
    with pytest.raises(ValueError):
        cfg.query_name = "other"


def test_available_now_trigger_and_defaults(tmp_path: Path) -> None:
    text = with_line('trigger: {processing_time: "1 second"}', "trigger: {available_now: true}")
    cfg = load_config(write(tmp_path, text.replace("  mode: insert\n  shards: 2\n", "")))
    assert cfg.trigger_kwargs() == {"available_now": True}
    assert cfg.sink.mode == "insert"
    assert cfg.sink.shards is None


def test_env_default_is_used_when_the_variable_is_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEST_EO_DSN")
    text = with_line("${TEST_EO_DSN}", "${TEST_EO_DSN:-postgresql://localhost/app}")
    cfg = load_config(write(tmp_path, text))
    assert cfg.sink.dsn.get_secret_value() == "postgresql://localhost/app"


@pytest.mark.parametrize(
    ("old", "new", "field", "words"),
    [
        ("query_name: clicks-to-pg\n", "", "query_name", "required"),
        ("query_name: clicks-to-pg", "query_name: 'clicks to pg'", "query_name", "letters"),
        ("query_name: clicks-to-pg", "query_name: ''", "query_name", "non-empty"),
        (
            'trigger: {processing_time: "1 second"}',
            'trigger: {processing_time: "1 second", available_now: true}',
            "trigger",
            "exactly one",
        ),
        ('trigger: {processing_time: "1 second"}', "trigger: {}", "trigger", "exactly one"),
        (
            'processing_time: "1 second"',
            'processing_time: "1 s"',
            "trigger.processing_time",
            "interval",
        ),
        ("type: postgres", "type: kafkaa", "sink.type", "kafkaa"),
        ("  type: postgres\n", "", "sink.type", "required"),
        ("id_columns: [event_id]", "id_columns: [order_id]", "sink.id_columns", "order_id"),
        ("id_columns: [event_id]", "id_columns: []", "sink.id_columns", "at least 1"),
        ("  table: demo_events\n", "", "sink.table", "required"),
        ("  table: demo_events\n", "  table: demo_events\n  tabel: x\n", "sink.tabel", "unknown"),
        ("query_name: clicks-to-pg", "query_name: q\ncolour: blue", "colour", "unknown"),
        (
            'schema: "event_id STRING, user_id BIGINT, action STRING, ts TIMESTAMP"',
            "schema: ''",
            "source.schema",
            "at least 1",
        ),
        (
            "max_files_per_trigger: 1",
            "max_files_per_trigger: 0",
            "source.max_files_per_trigger",
            "greater than",
        ),
        ("shards: 2", "shards: many", "sink.shards", "integer"),
        (
            "master: local[2]",
            "master: local[2]\n  remote: sc://h:15002",
            "spark.remote",
            "not both",
        ),
    ],
)
def test_bad_field_is_named(tmp_path: Path, old: str, new: str, field: str, words: str) -> None:
    err = error_for(tmp_path, with_line(old, new))
    assert err.field == field
    assert words in err.reason


def test_missing_env_var_names_field_and_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEST_EO_DSN")
    err = error_for(tmp_path, VALID)
    assert err.field == "sink.dsn"
    assert "TEST_EO_DSN" in err.reason


def test_several_errors_are_reported_together(tmp_path: Path) -> None:
    text = with_line("query_name: clicks-to-pg\n", "").replace("  table: demo_events\n", "")
    err = error_for(tmp_path, text)
    assert err.field == "query_name"
    assert "query_name: Field required" in err.reason
    assert "sink.table: Field required" in err.reason


def test_yaml_syntax_error(tmp_path: Path) -> None:
    path = write(tmp_path, VALID + f"broken: [unclosed, {PASSWORD}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.field == str(path)
    assert "YAML" in info.value.reason and "line" in info.value.reason
    assert PASSWORD not in str(info.value)


def test_missing_file_and_non_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(write(tmp_path, "- a\n- b\n"))
    with pytest.raises(ConfigError, match="empty"):
        load_config(write(tmp_path, ""))


def test_dsn_never_printed(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, VALID))
    for text in (repr(cfg), str(cfg), repr(cfg.sink), str(cfg.sink.dsn), cfg.model_dump_json()):
        assert PASSWORD not in text
    # an error elsewhere in a file whose DSN is set: no message echoes input values
    bad = with_line("shards: 2", "shards: 0").replace("mode: insert", "mode: upsert")
    err = error_for(tmp_path, bad)
    assert PASSWORD not in repr(err) and DSN not in str(err)
    # the DSN given where a string is not expected, and under an unknown key
    err = error_for(tmp_path, with_line("dsn: ${TEST_EO_DSN}", 'dsn: {url: "${TEST_EO_DSN}"}'))
    assert err.field == "sink.dsn"
    err = error_for(tmp_path, with_line("dsn: ${TEST_EO_DSN}", "dns: ${TEST_EO_DSN}"))
    assert PASSWORD not in repr(err)


def test_ddl_column_names() -> None:
    ddl = (
        "a INT, `b,c` STRING, m MAP<STRING, INT>, s STRUCT<x: INT, y: ARRAY<STRING>>, "
        "d DECIMAL(10, 2)"
    )
    assert ddl_column_names(ddl) == ["a", "b,c", "m", "s", "d"]
    for bad in ("", "a", "a INT,, b INT", "`a INT"):
        with pytest.raises(ValueError):
            ddl_column_names(bad)


def test_dedup_settings_and_redis_url_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_EO_REDIS", f"redis://:{PASSWORD}@cache:6379/0")
    text = with_line(
        "  shards: 2\n",
        "  shards: 2\n  redis_url: ${TEST_EO_REDIS}\n"
        "  dedup: {retention_epochs: 50, on_catalog_loss: fail}\n",
    )
    cfg = load_config(write(tmp_path, text))
    assert isinstance(cfg.sink.dedup, object) and not isinstance(cfg.sink.dedup, bool)
    assert cfg.sink.dedup.retention_epochs == 50
    assert PASSWORD not in repr(cfg)
    assert PASSWORD in cfg.sink.secrets()


def test_append_mode_without_dedup_is_refused(tmp_path: Path) -> None:
    text = with_line("mode: insert", "mode: append\n  dedup: false")
    err = error_for(tmp_path, text)
    assert err.field == "sink.dedup"
    err = error_for(tmp_path, with_line("mode: insert", "mode: merge"))
    assert err.field == "sink.mode"


OTHER_SINKS = {
    "redis": (
        "  type: redis\n  url: redis://:s3cr3t-Pa55@cache:6379/0\n"
        "  key_template: 'event:{event_id}'\n  write: hash\n  id_columns: [event_id]\n"
    ),
    "elasticsearch": (
        "  type: elasticsearch\n  hosts: https://es:9200\n  index: events\n"
        "  api_key: s3cr3t-Pa55\n  id_columns: [event_id]\n"
    ),
    "kafka": (
        "  type: kafka\n  bootstrap_servers: broker:9092\n  topic: events-out\n"
        "  id_columns: [event_id]\n  producer_config: {sasl.password: s3cr3t-Pa55}\n"
    ),
}


def _with_sink(body: str) -> str:
    head, _, rest = VALID.partition("sink:\n")
    return head + "sink:\n" + body + "spark:\n" + rest.partition("spark:\n")[2]


@pytest.mark.parametrize("kind", sorted(OTHER_SINKS))
def test_every_sink_type_parses_and_hides_its_secret(tmp_path: Path, kind: str) -> None:
    cfg = load_config(write(tmp_path, _with_sink(OTHER_SINKS[kind])))
    assert cfg.sink.type == kind
    assert PASSWORD in cfg.sink.secrets()
    assert PASSWORD not in repr(cfg)


@pytest.mark.parametrize("kind", sorted(OTHER_SINKS))
def test_every_sink_type_builds_its_sink_without_connecting(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXACTLYONCE_REDIS_URL", "redis://catalog.example:6379/0")
    cfg = load_config(write(tmp_path, _with_sink(OTHER_SINKS[kind])))
    sink = cfg.build_sink(check=False)
    assert sink.kind == kind and sink.query_name == "clicks-to-pg"
    assert PASSWORD not in repr(sink)


def test_a_redis_key_template_naming_a_missing_column_is_a_config_error(tmp_path: Path) -> None:
    body = OTHER_SINKS["redis"].replace("event:{event_id}", "event:{nope}")
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, _with_sink(body)))
    assert err.value.field == "sink.key_template" and "nope" in str(err.value)


def test_spark_interval_strings_become_seconds() -> None:
    from exactlyonce.integration.spark import interval_seconds

    assert interval_seconds("1 second") == 1.0
    assert interval_seconds("interval 1 minute 30 seconds") == 90.0
    assert interval_seconds("500 milliseconds") == 0.5


def test_a_kafka_transaction_timeout_below_the_trigger_interval_is_refused() -> None:
    from exactlyonce.connectors.kafka import KafkaSink

    sink = KafkaSink(
        "broker:9092",
        "out",
        ["event_id"],
        "q",
        transaction_timeout_ms=10_000,
        dedup=False,
        check=False,
    )
    sink.check_trigger(5.0)
    sink.check_trigger(None)
    with pytest.raises(ConfigError) as err:
        sink.check_trigger(30.0)
    assert err.value.field == "transaction_timeout_ms"


def test_a_kafka_sink_can_write_kafka_connect_envelopes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXACTLYONCE_REDIS_URL", "redis://catalog.example:6379/0")
    body = OTHER_SINKS["kafka"] + "  value: json-with-schema\n"
    sink = load_config(write(tmp_path, _with_sink(body))).build_sink(check=False)
    assert getattr(sink, "value", None) == "json-with-schema"


def test_a_kafka_sink_can_write_avro_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXACTLYONCE_REDIS_URL", "redis://catalog.example:6379/0")
    body = OTHER_SINKS["kafka"] + "  value: avro\n"
    sink = load_config(write(tmp_path, _with_sink(body))).build_sink(check=False)
    assert getattr(sink, "value", None) == "avro"


def test_an_empty_kafka_value_setting_is_refused_naming_it(tmp_path: Path) -> None:
    body = OTHER_SINKS["kafka"] + "  value: ''\n"
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, _with_sink(body)))
    assert err.value.field == "sink.value"
