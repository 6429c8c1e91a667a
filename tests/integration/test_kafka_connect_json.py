"""KafkaSink(value="json-with-schema"): Kafka Connect JsonConverter envelopes, written by real
Spark to the local broker and read back by the consumption recipe.

Each value is decoded here the way JsonConverter (schemas.enable=true) decodes it: exactly the
two fields "schema" and "payload", each payload value checked against its schema type (an int32
Date must be an integer, a required field must not be null, bytes are base64, a Decimal is a
number or base64), so a value Connect would refuse or misread fails the test.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import SparkSession

from exactlyonce.connectors import ConfigError, KafkaSink
from exactlyonce.connectors.kafka.connect_json import DATE, DECIMAL, TIMESTAMP, connect_schema
from exactlyonce.connectors.kafka.reader import headers_of, read_exactly_once

pytestmark = pytest.mark.integration

ROWS = """
SELECT * FROM VALUES
  ('k1', 7, 2147483648, 1.5D, true, CAST(12.345 AS DECIMAL(10,3)), DATE'2024-02-03',
   TIMESTAMP'2024-02-03 04:05:06.789', TIMESTAMP_NTZ'2024-02-03 04:05:06.789',
   CAST('abc' AS BINARY), array('x', 'y'), map('a', TIMESTAMP'1970-01-01 00:00:01'),
   array(named_struct('n', 1, 'day', DATE'1970-01-02')), named_struct('deep', 3)),
  ('k2', NULL, -1, NULL, NULL, CAST(-0.5 AS DECIMAL(10,3)), NULL,
   NULL, NULL, NULL, NULL, NULL, NULL, NULL)
AS t(event_id, small, big, ratio, ok, amount, day, at, local, raw, tags, seen, points, inner)
"""


def connect_decode(schema: dict[str, Any], value: Any) -> Any:
    """What JsonConverter.toConnect makes of ``value`` under ``schema`` (or AssertionError)."""
    if value is None:
        assert schema["optional"], f"null in required {schema}"
        return None
    kind, name = schema["type"], schema.get("name")
    if name == DECIMAL:
        assert isinstance(value, Decimal), f"Decimal as a number, got {value!r}"
        return value
    if name == DATE:
        assert kind == "int32" and type(value) is int, f"Date as int32 days, got {value!r}"
        return dt.date(1970, 1, 1) + dt.timedelta(days=value)
    if name == TIMESTAMP:
        assert kind == "int64" and type(value) is int, f"Timestamp as int64 ms, got {value!r}"
        return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=value)
    if kind in ("int8", "int16", "int32", "int64"):
        assert type(value) is int
        return value
    if kind in ("float", "double"):
        assert isinstance(value, Decimal), f"a JSON number, got {value!r}"  # not "NaN"
        return float(value)
    if kind == "boolean":
        assert isinstance(value, bool)
        return value
    if kind == "string":
        assert isinstance(value, str)
        return value
    if kind == "bytes":
        return base64.b64decode(value, validate=True)
    if kind == "array":
        return [connect_decode(schema["items"], item) for item in value]
    if kind == "map":
        assert isinstance(value, dict), "a string-keyed map is a JSON object"
        return {k: connect_decode(schema["values"], v) for k, v in value.items()}
    assert kind == "struct" and isinstance(value, dict)
    return {f["field"]: connect_decode(f, value.get(f["field"])) for f in schema["fields"]}


def decode_value(raw: bytes) -> dict[str, Any]:
    document = json.loads(raw, parse_float=Decimal)
    assert set(document) == {"schema", "payload"}, "JsonConverter allows no other field"
    decoded = connect_decode(document["schema"], document["payload"])
    assert isinstance(decoded, dict)
    return decoded


def test_values_are_connect_envelopes_that_json_converter_reads_back_typed(
    spark: SparkSession, bootstrap: str, unique_name: str
) -> None:
    df = spark.sql(ROWS)
    sink = KafkaSink(
        bootstrap, unique_name, ["event_id"], unique_name, value="json-with-schema",
        key_column="event_id", create_topic=True,
    )  # fmt: skip
    sink(df, 0)
    assert sink.last_report is not None and sink.last_report.written == 2
    messages = {m.key(): m for m in read_exactly_once(bootstrap, unique_name, unique_name)}
    assert set(messages) == {b"k1", b"k2"}
    for message in messages.values():
        schema = json.loads(message.value() or b"")["schema"]
        assert schema == connect_schema(df.schema), "the stream's schema, as Connect JSON"
        assert set(headers_of(message)) >= {"eo-epoch", "eo-record-id"}

    full = decode_value(messages[b"k1"].value() or b"")
    assert full == {
        "event_id": "k1",
        "small": 7,
        "big": 2147483648,
        "ratio": 1.5,
        "ok": True,
        "amount": Decimal("12.345"),
        "day": dt.date(2024, 2, 3),
        "at": dt.datetime(2024, 2, 3, 4, 5, 6, 789000),  # session time zone UTC
        "local": dt.datetime(2024, 2, 3, 4, 5, 6, 789000),  # wall clock, read as UTC
        "raw": b"abc",
        "tags": ["x", "y"],
        "seen": {"a": dt.datetime(1970, 1, 1, 0, 0, 1)},
        "points": [{"n": 1, "day": dt.date(1970, 1, 2)}],
        "inner": {"deep": 3},
    }
    empty = decode_value(messages[b"k2"].value() or b"")
    assert empty["amount"] == Decimal("-0.500") and empty["big"] == -1
    assert {k for k, v in empty.items() if v is None} == set(full) - {"event_id", "big", "amount"}


def test_a_nan_is_a_dead_letter_not_a_zero(
    spark: SparkSession, bootstrap: str, unique_name: str
) -> None:
    df = spark.sql(
        "SELECT * FROM VALUES ('a', 1.0D), ('b', CAST('NaN' AS DOUBLE)), "
        "('c', CAST('-Infinity' AS DOUBLE)), ('d', NULL) AS t(event_id, ratio)"
    )
    sink = KafkaSink(
        bootstrap, unique_name, ["event_id"], unique_name, value="json-with-schema",
        key_column="event_id", create_topic=True,
    )  # fmt: skip
    sink(df, 0)
    report = sink.last_report
    assert report is not None and (report.written, report.dead_letters) == (2, 2)
    written = {m.key() for m in read_exactly_once(bootstrap, unique_name, unique_name)}
    assert written == {b"a", b"d"}
    letters = list(
        read_exactly_once(bootstrap, sink.dead_letter_topic, unique_name, sink_name=sink.sink_name)
    )
    assert sorted(json.loads(m.value() or b"")["event_id"] for m in letters) == ["b", "c"]
    for letter in letters:
        assert b"'ratio' is NaN or infinite" in headers_of(letter)["eo-error"]


def test_a_type_connect_cannot_hold_fails_preflight_naming_the_column(
    spark: SparkSession, bootstrap: str, unique_name: str
) -> None:
    df = spark.sql("SELECT 'a' AS event_id, map(1, 'x') AS by_number")
    sink = KafkaSink(
        bootstrap, unique_name, ["event_id"], unique_name, value="json-with-schema",
        create_topic=True,
    )  # fmt: skip
    with pytest.raises(ConfigError) as refused:
        sink.preflight(df.schema)
    assert refused.value.field == "value"
    assert "'by_number'" in refused.value.reason and "strings" in refused.value.reason
