"""Kafka Connect's JSON envelope, the KafkaSink's ``value="json-with-schema"``.

Every message value is ``{"schema": ..., "payload": ...}``, what Kafka Connect's
``JsonConverter`` reads with ``schemas.enable=true``, so a Connect sink connector (JDBC, S3,
...) can consume the topic with typed fields:

- the schema is Connect's JSON form of the stream's Spark schema, built once on the driver
  (:func:`connect_schema`); a Spark type Connect cannot hold is refused before the stream
  starts, naming the column;
- the payload is Spark's ``to_json`` of the row, run in the executors, with the values Connect's
  logical types expect: dates as days since 1970-01-01 (``Date``), timestamps as epoch
  milliseconds (``Timestamp``; digits below the millisecond are dropped), decimals as JSON
  numbers (``Decimal``: ``JsonConverter`` reads a number whatever its ``decimal.format``,
  since Kafka 2.4, KIP-481) and binary as base64 (``bytes``);
- a NaN or infinite float is not a JSON number (``JsonConverter`` would read Spark's
  ``"NaN"`` as 0.0), so a record holding one in a top-level float column is a dead letter.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    CharType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
    VarcharType,
)

from exactlyonce.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column

JSON_WITH_SCHEMA = "json-with-schema"
DECIMAL = "org.apache.kafka.connect.data.Decimal"
DATE = "org.apache.kafka.connect.data.Date"
TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"

_PRIMITIVES: tuple[tuple[type[DataType], str], ...] = (
    (ByteType, "int8"),
    (ShortType, "int16"),
    (IntegerType, "int32"),
    (LongType, "int64"),
    (FloatType, "float"),
    (DoubleType, "double"),
    (BooleanType, "boolean"),
    (StringType, "string"),
    (VarcharType, "string"),
    (CharType, "string"),
    (BinaryType, "bytes"),
)
_TEXT = (StringType, VarcharType, CharType)
_TIMES = (DateType, TimestampType, TimestampNTZType)


def connect_schema(schema: StructType, name: str | None = None) -> dict[str, Any]:
    """Connect's JSON schema of a row of ``schema`` (a required struct, optionally named)."""
    document = _schema(schema, optional=False, path="")
    if name:
        document["name"] = name
    return document


def envelope_prefix(schema: StructType, name: str | None = None) -> str:
    """The value's text before the payload; the value is this, the payload, then ``}``."""
    text = json.dumps(connect_schema(schema, name), separators=(",", ":"))
    return '{"schema":' + text + ',"payload":'


def envelope(schema: StructType, name: str | None = None) -> Column:
    """The message value of each row, as a Spark column (computed in the executors)."""
    from pyspark.sql import functions as F

    fields = [_payload(F.col(f.name), f.dataType).alias(f.name) for f in schema.fields]
    payload = F.to_json(F.struct(*fields), {"ignoreNullFields": "false"})
    return F.concat(F.lit(envelope_prefix(schema, name)), payload, F.lit("}"))


def float_columns(schema: StructType) -> list[str]:
    """Top-level columns that can hold NaN or an infinity."""
    return [f.name for f in schema.fields if isinstance(f.dataType, (FloatType, DoubleType))]


def not_a_number_reason(schema: StructType) -> Column | None:
    """Per row, why it cannot be written (a NaN or infinite float, naming the column), or
    null; None when the schema has no float column."""
    from pyspark.sql import functions as F

    reasons = [
        F.when(
            F.isnan(F.col(name)) | (F.abs(F.col(name)) == float("inf")),
            F.lit(f"column {name!r} is NaN or infinite: JSON has no such number"),
        )
        for name in float_columns(schema)
    ]
    return F.coalesce(*reasons) if reasons else None


def _schema(kind: DataType, optional: bool, path: str) -> dict[str, Any]:
    document: dict[str, Any]
    if isinstance(kind, StructType):
        fields = [
            {**_schema(f.dataType, f.nullable, _join(path, f.name)), "field": f.name}
            for f in kind.fields
        ]
        document = {"type": "struct", "fields": fields}
    elif isinstance(kind, ArrayType):
        items = _schema(kind.elementType, kind.containsNull, f"{path}[]")
        document = {"type": "array", "items": items}
    elif isinstance(kind, MapType):
        if not isinstance(kind.keyType, _TEXT):
            raise _refused(path, kind, "a map's keys must be strings (a JSON object's keys)")
        values = _schema(kind.valueType, kind.valueContainsNull, f"{path}{{}}")
        document = {"type": "map", "keys": {"type": "string", "optional": False}, "values": values}
    elif isinstance(kind, DecimalType):
        parameters = {"scale": str(kind.scale), "connect.decimal.precision": str(kind.precision)}
        document = {"type": "bytes", "name": DECIMAL, "version": 1, "parameters": parameters}
    elif isinstance(kind, DateType):
        document = {"type": "int32", "name": DATE, "version": 1}
    elif isinstance(kind, (TimestampType, TimestampNTZType)):
        document = {"type": "int64", "name": TIMESTAMP, "version": 1}
    else:
        primitive = next((t for cls, t in _PRIMITIVES if isinstance(kind, cls)), None)
        if primitive is None:
            raise _refused(path, kind, "Kafka Connect has no such type; cast it (to string?)")
        document = {"type": primitive}
    document["optional"] = optional
    return document


def _payload(column: Column, kind: DataType) -> Column:
    """``column`` with its dates and timestamps as Connect's numbers (others as they are)."""
    from pyspark.sql import functions as F

    if not _holds_times(kind):
        return column
    if isinstance(kind, DateType):
        return F.unix_date(column)
    if isinstance(kind, TimestampType):
        return F.unix_millis(column)
    if isinstance(kind, TimestampNTZType):  # a wall-clock time, read as UTC
        epoch = F.lit("1970-01-01 00:00:00").cast("timestamp_ntz")
        return F.timestamp_diff("MILLISECOND", epoch, column)
    if isinstance(kind, ArrayType):
        return F.transform(column, lambda item: _payload(item, kind.elementType))
    if isinstance(kind, MapType):
        return F.transform_values(column, lambda _key, value: _payload(value, kind.valueType))
    assert isinstance(kind, StructType)
    fields = [_payload(column.getField(f.name), f.dataType).alias(f.name) for f in kind.fields]
    return F.when(column.isNotNull(), F.struct(*fields))


def _holds_times(kind: DataType) -> bool:
    if isinstance(kind, _TIMES):
        return True
    if isinstance(kind, ArrayType):
        return _holds_times(kind.elementType)
    if isinstance(kind, MapType):
        return _holds_times(kind.valueType)
    if isinstance(kind, StructType):
        return any(_holds_times(f.dataType) for f in kind.fields)
    return False


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _refused(path: str, kind: DataType, why: str) -> ConfigError:
    return ConfigError(
        "value", f"{JSON_WITH_SCHEMA}: column {path!r} is {kind.simpleString()}: {why}"
    )
