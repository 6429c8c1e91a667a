"""What Spark hands the Redis tasks: each epoch's rows as the text Redis stores.

Stored columns take their Spark string form (binary as base64, nested types as JSON); string
mode adds the whole record as JSON; a null key-template column makes the row a bad record
(dead-lettered by the task, with the record as its payload).

:func:`project` does it in Spark's plan (``foreachBatch``); :func:`project_arrow` does the
same on an Arrow batch in the task, for the Spark data source path, which has no plan of its
own to add columns to. The two must give the same bytes (a test holds them to it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from exactlyonce.connectors.base import ERROR_COLUMN, PAYLOAD_COLUMN
from exactlyonce.connectors.base.columns import DELETE_COLUMN, ORDER_COLUMN, SHARD_COLUMN
from exactlyonce.connectors.base.projection import json_like_spark
from exactlyonce.connectors.redis.task import VALUE_COLUMN
from exactlyonce.connectors.redis.template import KeyTemplate

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType


def project(
    with_ids: DataFrame,
    schema: StructType,
    template: KeyTemplate,
    write: str,
    id_field: str,
    epoch_field: str,
    *,
    upsert: bool = False,
) -> DataFrame:
    """``with_ids`` (the user's columns, of ``schema``, plus the ID, epoch, error and payload
    columns, and in upsert mode the delete flag and order) as the task reads it."""
    from pyspark.sql import functions as F

    user = list(schema.names)
    kinds = {f.name: f.dataType for f in schema.fields}
    record_json = F.to_json(F.struct(*map(F.col, user)), {"ignoreNullFields": "false"})
    stored = list(template.fields) if write == "string" else user
    columns = [_as_text(name, kinds[name]).alias(name) for name in stored]
    columns += [F.col(id_field), F.col(epoch_field)]
    if write == "string":
        columns.append(record_json.alias(VALUE_COLUMN))
    error, payload = F.col(ERROR_COLUMN), F.col(PAYLOAD_COLUMN)
    if template.fields:
        null, reason = _null_key(template)
        error = F.coalesce(error, F.when(null, reason))
        payload = F.coalesce(payload, F.when(null, record_json))
    columns += [error.alias(ERROR_COLUMN), payload.alias(PAYLOAD_COLUMN)]
    if upsert:
        columns += [F.col(DELETE_COLUMN), F.col(ORDER_COLUMN)]
    return with_ids.select(*columns)


def _null_key(template: KeyTemplate) -> tuple[Column, Column]:
    """Whether a row's key-template column is null, and the error naming which."""
    from pyspark.sql import functions as F

    null = F.lit(False)
    for name in template.fields:
        null = null | F.col(name).isNull()
    reason = F.concat(
        F.lit("null key template column(s): "),
        F.concat_ws(", ", *[F.when(F.col(n).isNull(), F.lit(n)) for n in template.fields]),
    )
    return null, reason


def _as_text(name: str, kind: Any) -> Column:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    c = F.col(name)
    if isinstance(kind, T.StringType):
        return c
    if isinstance(kind, T.BinaryType):
        return F.base64(c)
    if isinstance(kind, (T.ArrayType, T.MapType, T.StructType)):
        return F.to_json(c)
    return c.cast("string")


def project_arrow(
    batch: pa.RecordBatch,
    user: Sequence[str],
    template: KeyTemplate,
    write: str,
    id_field: str,
    epoch_field: str,
) -> pa.RecordBatch:
    """:func:`project` on one Arrow batch, in the task (the Spark data source path, where no
    Spark plan projects the rows): the same text, byte for byte, for the columns that path
    takes (strings, integers, booleans). ``batch`` holds the ``user`` columns, the ID, epoch,
    error, payload and shard columns; the shard column is kept."""
    records: list[str] | None = None
    if write == "string" or template.fields:
        records = [json_like_spark(r) for r in batch.select(list(user)).to_pylist()]
    stored = list(template.fields) if write == "string" else list(user)
    arrays = [_arrow_text(batch.column(name)) for name in stored]
    names = [*stored, id_field, epoch_field]
    arrays += [batch.column(id_field), batch.column(epoch_field)]
    if write == "string":
        arrays.append(pa.array(records, pa.string()))
        names.append(VALUE_COLUMN)
    error, payload = batch.column(ERROR_COLUMN), batch.column(PAYLOAD_COLUMN)
    if template.fields:
        assert records is not None
        error, payload = _null_key_arrow(batch, template, error, payload, records)
    arrays += [error, payload, batch.column(SHARD_COLUMN)]
    names += [ERROR_COLUMN, PAYLOAD_COLUMN, SHARD_COLUMN]
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _null_key_arrow(
    batch: pa.RecordBatch,
    template: KeyTemplate,
    error: pa.Array,
    payload: pa.Array,
    records: list[str],
) -> tuple[pa.Array, pa.Array]:
    """:func:`_null_key` on Arrow: a row whose template column is null is a bad record."""
    nulls = {name: batch.column(name).is_null().to_pylist() for name in template.fields}
    errors, payloads = error.to_pylist(), payload.to_pylist()
    for row in range(batch.num_rows):
        missing = [name for name in template.fields if nulls[name][row]]
        if missing and errors[row] is None:
            errors[row] = "null key template column(s): " + ", ".join(missing)
        if missing and payloads[row] is None:
            payloads[row] = records[row]
    return pa.array(errors, pa.string()), pa.array(payloads, pa.string())


def _arrow_text(column: pa.Array) -> pa.Array:
    """A column as Spark's ``cast("string")`` writes it (integers, booleans: Arrow's cast
    writes the same text; strings stay)."""
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return column
    return pc.cast(column, pa.string())
