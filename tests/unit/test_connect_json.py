"""Kafka Connect's JSON schema of a Spark schema (pure logic: no JVM, no broker)."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    CalendarIntervalType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    VarcharType,
)

from exactlyonce.connectors.kafka.connect_json import (
    DATE,
    DECIMAL,
    TIMESTAMP,
    connect_schema,
    envelope_prefix,
    float_columns,
)
from exactlyonce.errors import ConfigError


def field(name: str, kind: object, nullable: bool = True) -> StructField:
    return StructField(name, kind, nullable)  # type: ignore[arg-type]


def test_primitive_types_map_to_connect_types_and_nullability_to_optional() -> None:
    schema = StructType(
        [
            field("i8", ByteType()),
            field("i16", ShortType()),
            field("i32", IntegerType(), nullable=False),
            field("i64", LongType()),
            field("f32", FloatType()),
            field("f64", DoubleType()),
            field("ok", BooleanType()),
            field("s", StringType()),
            field("v", VarcharType(10)),
            field("raw", BinaryType()),
        ]
    )
    got = connect_schema(schema)
    assert got["type"] == "struct" and got["optional"] is False and "name" not in got
    assert [(f["field"], f["type"], f["optional"]) for f in got["fields"]] == [
        ("i8", "int8", True),
        ("i16", "int16", True),
        ("i32", "int32", False),
        ("i64", "int64", True),
        ("f32", "float", True),
        ("f64", "double", True),
        ("ok", "boolean", True),
        ("s", "string", True),
        ("v", "string", True),
        ("raw", "bytes", True),
    ]


def test_logical_types_carry_connect_names_versions_and_decimal_parameters() -> None:
    schema = StructType(
        [
            field("amount", DecimalType(12, 3)),
            field("day", DateType()),
            field("at", TimestampType()),
            field("local", TimestampNTZType()),
        ]
    )
    amount, day, at, local = connect_schema(schema, name="shop.Order")["fields"]
    assert amount == {
        "type": "bytes",
        "name": DECIMAL,
        "version": 1,
        "parameters": {"scale": "3", "connect.decimal.precision": "12"},
        "optional": True,
        "field": "amount",
    }
    assert (day["type"], day["name"], day["version"]) == ("int32", DATE, 1)
    assert (at["type"], at["name"], at["version"]) == ("int64", TIMESTAMP, 1)
    assert (local["type"], local["name"]) == ("int64", TIMESTAMP)
    assert connect_schema(schema, name="shop.Order")["name"] == "shop.Order"


def test_nested_arrays_maps_and_structs() -> None:
    inner = StructType([field("x", IntegerType()), field("when", DateType(), nullable=False)])
    schema = StructType(
        [
            field("tags", ArrayType(StringType(), containsNull=False)),
            field("scores", MapType(StringType(), DoubleType(), valueContainsNull=True)),
            field("points", ArrayType(inner)),
        ]
    )
    tags, scores, points = connect_schema(schema)["fields"]
    assert tags["type"] == "array" and tags["items"] == {"type": "string", "optional": False}
    assert scores["type"] == "map"
    assert scores["keys"] == {"type": "string", "optional": False}
    assert scores["values"] == {"type": "double", "optional": True}
    items = points["items"]
    assert items["type"] == "struct" and items["optional"] is True
    assert [f["field"] for f in items["fields"]] == ["x", "when"]
    assert items["fields"][1]["name"] == DATE and items["fields"][1]["optional"] is False


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        (CalendarIntervalType(), "bad"),
        (MapType(IntegerType(), StringType()), "bad"),
        (ArrayType(StructType([field("deep", CalendarIntervalType())])), "bad[].deep"),
    ],
)
def test_types_connect_cannot_hold_are_refused_naming_the_column(kind: object, path: str) -> None:
    schema = StructType([field("ok", StringType()), field("bad", kind)])
    with pytest.raises(ConfigError) as refused:
        connect_schema(schema)
    assert refused.value.field == "value"
    assert repr(path) in refused.value.reason


def test_the_envelope_prefix_is_json_up_to_the_payload() -> None:
    schema = StructType([field("id", StringType()), field("n", LongType())])
    prefix = envelope_prefix(schema, None)
    document = json.loads(prefix + '{"id": "a", "n": 1}}')
    assert set(document) == {"schema", "payload"}, "JsonConverter allows no other field"
    assert document["schema"] == connect_schema(schema)
    assert document["payload"] == {"id": "a", "n": 1}


def test_float_columns_are_the_top_level_ones_that_can_hold_nan() -> None:
    schema = StructType([field("a", DoubleType()), field("b", LongType()), field("c", FloatType())])
    assert float_columns(schema) == ["a", "c"]
