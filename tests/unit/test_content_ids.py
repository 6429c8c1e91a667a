"""``id_from="content"``: the config rule (one model, both doors, every sink), the record-ID
spec, and the Python twin of Spark's content IDs (checked against real Spark in
tests/integration/test_content_ids.py), run through the protocol in process."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from exactlyonce.buffer import Buffered, KafkaBuffer
from exactlyonce.connectors import ElasticsearchSink, KafkaSink, PostgresSink, RedisSink
from exactlyonce.connectors.base import TaskResult
from exactlyonce.dedup.content import (
    canonical_encoding,
    content_record_id,
    content_record_ids,
    java_hex,
)
from exactlyonce.dedup.ids import RecordIdSpec
from exactlyonce.errors import ConfigError
from exactlyonce.integration.config import load_config, parse_config
from exactlyonce.testing import MemoryRedis, MemorySink, MemoryStore, run_in_process
from exactlyonce.testing.epochs import in_process_write, schema_of

DSN = "postgresql://app@db.example/app"

# kind -> a constructor taking (id_columns, **keywords), without preflight
CONSTRUCTORS: dict[str, Any] = {
    "postgres": lambda ids, **kw: PostgresSink(DSN, "logs", ids, "q", dedup=False, **kw),
    "kafka": lambda ids, **kw: KafkaSink("b:9092", "logs", ids, "q", dedup=False, **kw),
    "redis": lambda ids, **kw: RedisSink(
        "redis://cache:6379/0", "log:{line}", ids, "q", dedup=False, **kw
    ),
    "elasticsearch": lambda ids, **kw: ElasticsearchSink(
        "http://es:9200", "logs", ids, "q", dedup=False, **kw
    ),
}

SINK_SECTIONS = {
    "postgres": {"type": "postgres", "dsn": DSN, "table": "logs"},
    "kafka": {"type": "kafka", "bootstrap_servers": "b:9092", "topic": "logs"},
    "redis": {"type": "redis", "url": "redis://cache:6379/0", "key_template": "log:{line}"},
    "elasticsearch": {"type": "elasticsearch", "hosts": "http://es:9200", "index": "logs"},
}


def pipeline(kind: str, **sink: Any) -> dict[str, Any]:
    return {
        "query_name": "q",
        "checkpoint": "/tmp/checkpoint",
        "source": {"type": "files", "path": "/tmp/in", "format": "json", "schema": "line STRING"},
        "sink": {**SINK_SECTIONS[kind], "dedup": False, **sink},
    }


# -- the config rule ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(CONSTRUCTORS))
def test_content_ids_need_no_id_columns_in_either_door(kind: str) -> None:
    from_python = CONSTRUCTORS[kind](None, id_from="content", check=False)
    from_yaml = parse_config(pipeline(kind, id_from="content"), environ={}).build_sink(check=False)
    assert from_python.config == from_yaml.config
    assert from_python.config.id_from == "content" and from_python.config.id_columns is None
    assert from_python.ids == from_yaml.ids == RecordIdSpec.from_content()


@pytest.mark.parametrize("kind", sorted(CONSTRUCTORS))
def test_content_with_id_columns_is_one_rule_naming_id_from(kind: str) -> None:
    with pytest.raises(ConfigError) as python_error:
        CONSTRUCTORS[kind](["line"], id_from="content", check=False)
    with pytest.raises(ConfigError) as yaml_error:
        parse_config(pipeline(kind, id_from="content", id_columns=["line"]), environ={})
    assert python_error.value.field == "id_from" and yaml_error.value.field == "sink.id_from"
    assert python_error.value.reason == yaml_error.value.reason
    assert "id_columns" in python_error.value.reason


def test_columns_without_id_columns_asks_for_them_or_content() -> None:
    with pytest.raises(ConfigError) as err:
        PostgresSink(DSN, "logs", None, "q", dedup=False, check=False)
    assert err.value.field == "id_columns"
    assert "required" in err.value.reason and "content" in err.value.reason
    with pytest.raises(ConfigError) as yaml_error:
        parse_config(pipeline("postgres"), environ={})
    assert yaml_error.value.field == "sink.id_columns"


def test_an_unknown_id_from_names_every_choice() -> None:
    with pytest.raises(ConfigError) as yaml_error:
        parse_config(pipeline("postgres", id_from="row"), environ={})
    assert yaml_error.value.field == "sink.id_from"
    assert all(word in yaml_error.value.reason for word in ("columns", "content", "source"))
    with pytest.raises(ConfigError) as python_error:
        PostgresSink(DSN, "logs", None, "q", id_from="row", check=False)  # type: ignore[arg-type]
    assert python_error.value.field == "id_from"


def test_a_pipeline_file_with_id_from_content_loads(tmp_path: Path) -> None:
    path = tmp_path / "logs.yaml"
    path.write_text(
        "query_name: logs\ncheckpoint: /tmp/c\n"
        "source: {type: files, path: /tmp/in, format: json, schema: 'line STRING, n INT'}\n"
        f"sink: {{type: postgres, dsn: '{DSN}', table: logs, id_from: content, dedup: false}}\n"
    )
    sink = load_config(path).build_sink(check=False)
    assert sink.ids.content and sink.ids.columns == ()


def test_a_buffer_keeps_the_sinks_content_ids() -> None:
    sink = PostgresSink(DSN, "logs", None, "q", id_from="content", dedup=False, check=False)
    buffered = Buffered(
        sink, KafkaBuffer(topic="logs-buffer", bootstrap_servers="b:9092"), check=False
    )
    assert buffered.ids == RecordIdSpec.from_content()
    assert buffered.config.id_from == "content" and buffered.config.id_columns is None


def test_the_spec_refuses_columns_with_content() -> None:
    spec = RecordIdSpec.from_content()
    assert spec.content and spec.id_from == "content" and not spec.may_be_null
    assert spec.missing_from(["a"]) == []
    with pytest.raises(ConfigError) as err:
        RecordIdSpec(("line",), content=True)
    assert err.value.field == "id_from"
    assert RecordIdSpec.from_columns("k").id_from == "columns"


# -- the Python twin ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "java"),
    [  # what Spark 4.2 on OpenJDK 17 answered for format_string('%a', d)
        (1.5, "0x1.8p0"),
        (0.10000000149011612, "0x1.99999ap-4"),  # 0.1 as a float column
        (1e20, "0x1.5af1d78b58c4p66"),
        (-0.0, "-0x0.0p0"),
        (0.0, "0x0.0p0"),
        (float("nan"), "NaN"),
        (float("inf"), "Infinity"),
        (float("-inf"), "-Infinity"),
        (5e-324, "0x0.0000000000001p-1022"),
        (1e-310, "0x0.012688b70e62bp-1022"),
        (2.2250738585072014e-308, "0x1.0p-1022"),
    ],
)
def test_java_hex_matches_java(value: float, java: str) -> None:
    assert java_hex(value) == java


def test_the_encoding_orders_columns_by_name_and_keeps_nulls() -> None:
    row = {"b": 2, "a": 'x\u0001"', "c": None, "d": True, "e": 1.5}
    assert canonical_encoding(row) == '["x\\u0001\\"","2",null,"true","0x1.8p0"]'
    assert canonical_encoding(dict(reversed(list(row.items())))) == canonical_encoding(row)
    assert canonical_encoding({"a": None}) != canonical_encoding({"a": "null"})


def test_the_encoding_of_the_other_types() -> None:
    utc = dt.timezone.utc
    row = {
        "dec": Decimal("1E-18"),
        "day": dt.date(2024, 1, 2),
        "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=utc),
        "ntz": dt.datetime(2024, 1, 2, 3, 4, 5, 120000),
        "bin": b"\x00\xff",
    }
    kinds = {"ntz": "timestamp_ntz"}
    assert canonical_encoding(row, kinds) == (
        '["00FF","2024-01-02","0.000000000000000001","2024-01-02 03:04:05.12","1704164645123000"]'
    )
    with pytest.raises(TypeError, match="Spark only"):
        canonical_encoding({"tags": ["a"]})


def test_identical_rows_are_numbered_and_any_order_gives_the_same_ids() -> None:
    line = {"host": "web-1", "msg": "GET /"}
    other = {"host": "web-2", "msg": "GET /"}
    ids = content_record_ids([line, other, dict(line)])
    assert ids == [
        content_record_id(line, 1),
        content_record_id(other, 1),
        content_record_id(line, 2),
    ]
    assert len(set(ids)) == 3
    assert sorted(content_record_ids([line, line, other])) == sorted(ids)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    with pytest.raises(ValueError):
        content_record_id(line, 0)


# -- through the protocol, in process -------------------------------------------------------


def test_identical_lines_in_a_batch_are_records_a_rerun_adds_nothing_a_later_epoch_dedups() -> None:
    catalog, store = MemoryRedis(), MemoryStore()
    config = catalog.dedup_config(expected_ids=1000)

    def sink() -> MemorySink:
        return MemorySink(
            store, "logs", None, "logs", id_from="content", mode="append", shards=2, dedup=config
        )

    batch = [{"msg": "disk full"}, {"msg": "disk full"}, {"msg": "ok"}]
    crashing = sink()
    tasks = in_process_write(crashing, batch)

    def write_then_die(epoch: int, shards: int) -> list[TaskResult]:
        tasks(epoch, shards)  # every shard commits; the driver dies before the head
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        crashing.run_epoch(0, "in-process", schema_of(batch), lambda: 2, write_then_die)
    assert len(store.rows("logs")) == 3
    again = run_in_process(sink(), 0, list(reversed(batch)))  # the re-run, other order
    assert again.written == 0 and again.shards_skipped == 2
    # Occurrences are numbered within an epoch: a later epoch's first "disk full" has the ID
    # of epoch 0's first one, so it is taken for a replay and dropped (by design); only a
    # third copy in one epoch is new.
    later = run_in_process(sink(), 1, [{"msg": "disk full"}, {"msg": "ok"}])
    assert later.written == 0 and later.duplicates == 2
    third = run_in_process(sink(), 2, [{"msg": "disk full"}] * 3)
    assert third.written == 1 and third.duplicates == 2
    assert sorted(r["msg"] for r in store.rows("logs")) == ["disk full"] * 3 + ["ok"]
    assert all(n == 1 for n in store.write_attempts.values())
