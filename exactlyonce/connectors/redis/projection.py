"""What Spark hands the Redis tasks: each epoch's rows as the text Redis stores.

Stored columns take their Spark string form (binary as base64, nested types as JSON); string
mode adds the whole record as JSON; a null key-template column makes the row a bad record
(dead-lettered by the task, with the record as its payload).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from exactlyonce.connectors.base import ERROR_COLUMN, PAYLOAD_COLUMN
from exactlyonce.connectors.base.columns import DELETE_COLUMN, ORDER_COLUMN
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
