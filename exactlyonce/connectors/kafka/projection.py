"""The Kafka sink's Spark projection: a stream's rows as record ID, key and value bytes.

``value`` is ``"json"`` (the row as JSON), ``"json-with-schema"`` (Kafka Connect's envelope,
:mod:`.connect_json`), ``"avro"`` (an Avro datum, :mod:`.avro`) or the name of a string or
binary column; ``key_column`` is an optional
column, cast to its string form unless binary. Built once per schema on the driver; Spark
evaluates it in the executors. :func:`project_arrow` is its twin on Arrow, in the task, for
the Spark data source path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from exactlyonce.connectors.base import ERROR_COLUMN, PAYLOAD_COLUMN
from exactlyonce.connectors.base.columns import SHARD_COLUMN
from exactlyonce.connectors.base.projection import json_like_spark
from exactlyonce.connectors.kafka.avro import AVRO, avro_schema, avro_value
from exactlyonce.connectors.kafka.connect_json import (
    JSON_WITH_SCHEMA,
    connect_schema,
    envelope,
    not_a_number_reason,
)
from exactlyonce.connectors.kafka.protocol import (
    ID_COLUMN,
    KEY_COLUMN,
    RESERVED_COLUMNS,
    VALUE_COLUMN,
)
from exactlyonce.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column
    from pyspark.sql.types import StructType


def check_reserved(names: list[str]) -> None:
    """Refuse a stream with a column named like one the projection adds."""
    for reserved in RESERVED_COLUMNS:
        if reserved in names:
            raise ConfigError(
                "id_columns", f"the stream has a column named {reserved!r}; the sink uses it"
            )


def check_key_and_value(schema: StructType, key_column: str | None, value: str) -> None:
    """Refuse a key or value setting the stream's schema cannot serve, naming the column."""
    names = list(schema.names)
    if key_column is not None and key_column not in names:
        raise ConfigError("key_column", f"{key_column!r} not in the stream's columns")
    if value == JSON_WITH_SCHEMA:
        connect_schema(schema)  # refuses, naming the column, what Connect cannot hold
    elif value == AVRO:
        avro_schema(schema)  # refuses, naming the column, what Avro cannot hold
    elif value != "json":
        if value not in names:
            raise ConfigError(
                "value",
                f"'json', {JSON_WITH_SCHEMA!r}, {AVRO!r} or a column of the stream; "
                f"{value!r} is none of these",
            )
        kind = schema[value].dataType.typeName()
        if kind not in ("string", "binary"):
            raise ConfigError(
                "value",
                f"column {value!r} is {kind}; a value column must be string "
                f"or binary (or use value='json', {JSON_WITH_SCHEMA!r} or {AVRO!r})",
            )


def projection(schema: StructType, key_column: str | None, value: str) -> list[Column]:
    """Record ID, key (if any) and value as binary, then the dead-letter columns. A
    json-with-schema row holding NaN or an infinite float becomes a dead letter."""
    from pyspark.sql import functions as F

    row_json = F.to_json(F.struct(*map(F.col, schema.names)), {"ignoreNullFields": "false"})
    error, payload = F.col(ERROR_COLUMN), F.col(PAYLOAD_COLUMN)
    if value == "json":
        value_column = row_json
    elif value == JSON_WITH_SCHEMA:
        value_column = envelope(schema)
        reason = not_a_number_reason(schema)
        if reason is not None:  # a dead letter, not a value Connect would misread
            error = F.coalesce(error, reason)
            payload = F.coalesce(payload, F.when(reason.isNotNull(), row_json))
    elif value == AVRO:
        value_column = avro_value(schema)
    else:
        value_column = F.col(value)
    columns = [F.col(ID_COLUMN)]
    if key_column is not None:
        key = F.col(key_column)
        if schema[key_column].dataType.typeName() != "binary":
            key = key.cast("string")
        columns.append(key.cast("binary").alias(KEY_COLUMN))
    columns.append(value_column.cast("binary").alias(VALUE_COLUMN))
    columns += [error.alias(ERROR_COLUMN), payload.alias(PAYLOAD_COLUMN)]
    return columns  # the epoch rides in headers


def project_arrow(
    batch: pa.RecordBatch, user: Sequence[str], key_column: str | None, value: str
) -> pa.RecordBatch:
    """:func:`projection` on one Arrow batch, in the task (the Spark data source path, which
    has no plan to add columns to): the same bytes for the column types that path takes
    (strings, integers, booleans; ``value`` "json" or a string column). ``batch`` holds the
    ``user`` columns, the ID, epoch, error, payload and shard columns; the shard is kept."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if value == "json":
        rows = batch.select(list(user)).to_pylist()
        values = pa.array([json_like_spark(r).encode() for r in rows], pa.binary())
    else:
        values = pc.cast(batch.column(value), pa.binary())
    arrays = [batch.column(ID_COLUMN)]
    names = [ID_COLUMN]
    if key_column is not None:
        key = batch.column(key_column)
        if not pa.types.is_string(key.type):
            key = pc.cast(key, pa.string())
        arrays.append(pc.cast(key, pa.binary()))
        names.append(KEY_COLUMN)
    arrays += [values, batch.column(ERROR_COLUMN), batch.column(PAYLOAD_COLUMN)]
    names += [VALUE_COLUMN, ERROR_COLUMN, PAYLOAD_COLUMN]
    arrays.append(batch.column(SHARD_COLUMN))
    names.append(SHARD_COLUMN)
    return pa.RecordBatch.from_arrays(arrays, names=names)
