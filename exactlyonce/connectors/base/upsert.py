"""Upserts (DESIGN.md, "upsert", invariant 12): the rules every sink's ``mode="upsert"`` shares.

For update and changelog streams (an aggregation in ``update`` output mode), ``id_columns``
name a row that changes over time. Its record ID is the hash of those columns, so a key
always lands in the same shard. Every written row carries its epoch, and each sink applies a
write only if its epoch is at least the one stored for the key. A re-run of an older epoch
then changes nothing, and a replay of the same epoch writes the same value again. The dedup
catalog is not used: the key plus the epoch guard is the idempotence.

What this module holds, shared by the three sinks that upsert:

- the config rules (:func:`upsert_defaults`, :func:`check_upsert`): dedup is off by default
  and refused when asked for; a ``tombstone_column`` needs upsert and is no key column;
- the columns Spark adds (:func:`upsert_expressions`): ``_eo_delete`` (the tombstone flag;
  a null tombstone value is ``false``) and ``_eo_order``, the row's canonical encoding;
- the within-epoch rule (:class:`OnePerKey`): Spark sorts each shard by (record ID,
  ``_eo_order`` descending), and the task keeps the first row of each ID. ``_eo_order`` is
  the row's ``order_by`` columns (none by default), then its canonical encoding (Spark's
  ``to_json`` of all its columns, null fields included). So when one epoch holds several
  rows of a key, the row with the greatest ``order_by`` values wins (a null is the lowest),
  and among equal ones the row whose canonical encoding sorts last, whatever the partition
  order. Spark's ``update`` output mode emits one row per key and epoch, so the rule only
  matters for changelog input that does not; there, name the column that orders the changes
  (a Kafka offset, a log sequence number, an update time) as ``order_by``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from exactlyonce.connectors.base.columns import DELETE_COLUMN, ORDER_COLUMN
from exactlyonce.errors import ConfigError, TaskStateError


def field_error(field: str, reason: str) -> ValueError:
    """:func:`exactlyonce.connectors.base.config.field_error`, imported when a rule fails:
    the task side imports this module and must not build the sinks' config models."""
    from exactlyonce.connectors.base.config import field_error as build

    return build(field, reason)


if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import StructType


@dataclass(frozen=True)
class UpsertSpec:
    """A sink in ``mode="upsert"``: ``tombstone_column`` (boolean, true deletes the key; None
    when the stream never deletes) and ``order_by`` (the within-epoch rule's first columns)."""

    tombstone_column: str | None = None
    order_by: tuple[str, ...] = ()

    def stored_names(self, names: Sequence[str]) -> list[str]:
        """The stream's columns the sink stores: all but the tombstone flag."""
        return [n for n in names if n != self.tombstone_column]

    def stored_schema(self, schema: StructType) -> StructType:
        """``schema`` without the tombstone column, which must be there and boolean; the
        ``order_by`` columns must be there too (ConfigError naming the field)."""
        from pyspark.sql import types as T

        kinds = {f.name: f.dataType for f in schema.fields}
        missing = [c for c in self.order_by if c not in kinds]
        if missing:
            raise ConfigError("order_by", f"{missing} not in the stream's columns {schema.names}")
        column = self.tombstone_column
        if column is None:
            return schema
        if column not in kinds:
            raise ConfigError(
                "tombstone_column", f"{column!r} is not in the stream's columns {schema.names}"
            )
        if not isinstance(kinds[column], T.BooleanType):
            raise ConfigError(
                "tombstone_column",
                f"{column!r} must be boolean (true deletes the key), not {kinds[column]}",
            )
        return T.StructType([f for f in schema.fields if f.name != column])


# -- config ------------------------------------------------------------------------------


def upsert_defaults(data: Any, refused: Mapping[str, str] | None = None) -> Any:
    """A sink config's input (a ``mode="before"`` model validator): with ``mode="upsert"``,
    dedup defaults to off, and asking for it (or for a setting in ``refused``: field ->
    why) is an error naming the field."""
    if not isinstance(data, Mapping) or data.get("mode") != "upsert":
        return data
    dedup = data.get("dedup", False)
    if dedup is not False and dedup is not None:
        raise field_error(
            "dedup",
            "mode 'upsert' does not use the dedup catalog (the key and the epoch guard are "
            "the idempotence): leave dedup out or set it to false",
        )
    for field, why in (refused or {}).items():
        if field in data:
            raise field_error(field, why)
    return {**data, "dedup": False}


def check_upsert(
    mode: str,
    tombstone_column: str | None,
    id_columns: Sequence[str] | None,
    order_by: Sequence[str] = (),
    id_from: str = "columns",
) -> None:
    """The cross-field rules of ``mode="upsert"``, ``tombstone_column`` and ``order_by`` (a
    ``mode="after"`` model validator)."""
    if mode == "upsert" and (id_from != "columns" or not id_columns):
        raise field_error(
            "id_from", "mode 'upsert' replaces a key's row: name the key with id_columns"
        )
    id_columns = id_columns or ()
    if order_by and mode != "upsert":
        raise field_error("order_by", "orders the rows of a key within an epoch: mode 'upsert'")
    keys = [c for c in order_by if c in id_columns]
    if keys:
        raise field_error("order_by", f"{keys}: id columns are equal in every row of a key")
    if tombstone_column is None:
        return
    if mode != "upsert":
        raise field_error("tombstone_column", "deletes by tombstone need mode 'upsert'")
    if not tombstone_column:
        raise field_error("tombstone_column", "a column name, or leave it out")
    if tombstone_column in id_columns:
        raise field_error(
            "tombstone_column", f"{tombstone_column!r} is an id column; name a boolean flag"
        )


# -- Spark side --------------------------------------------------------------------------


def upsert_expressions(spec: UpsertSpec, names: Sequence[str]) -> list[Column]:
    """``_eo_delete`` and ``_eo_order`` of each row (``names``: all the stream's columns)."""
    from pyspark.sql import functions as F

    delete = F.lit(False)
    if spec.tombstone_column is not None:
        delete = F.coalesce(F.col(spec.tombstone_column), F.lit(False))
    every_column = F.struct(*[F.col(n) for n in names])
    canonical = F.to_json(every_column, {"ignoreNullFields": "false"})
    ranks = [F.col(c).alias(f"by{i}") for i, c in enumerate(spec.order_by)]
    order = F.struct(*ranks, canonical.alias("row"))  # compared field by field
    return [delete.alias(DELETE_COLUMN), order.alias(ORDER_COLUMN)]


def shard_order(id_column: str) -> list[Column]:
    """How Spark sorts each shard for :class:`OnePerKey`: by ID, the winning row first."""
    from pyspark.sql import functions as F

    return [F.col(id_column).asc_nulls_first(), F.col(ORDER_COLUMN).desc()]


# -- task side ---------------------------------------------------------------------------


class OnePerKey:
    """Keeps the first row of each record ID of a shard sorted by :func:`shard_order`, across
    the task's Arrow batches. Refuses unsorted input: the winner would then depend on the
    partition order."""

    def __init__(self, id_column: str) -> None:
        self.id_column = id_column
        self.last: str | None = None

    def keep(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, int]:
        """The batch with one row per ID (no null IDs here), and how many rows it dropped."""
        if batch.num_rows == 0:
            return batch, 0
        ids = batch.column(self.id_column)
        previous = pa.concat_arrays([pa.array([self.last], ids.type), ids.slice(0, len(ids) - 1)])
        if pc.any(pc.less(ids, previous)).as_py():
            raise TaskStateError(
                "upsert rows must reach the task sorted by record ID (shard_order); the "
                "within-epoch rule cannot be applied to unsorted input"
            )
        first = pc.fill_null(pc.not_equal(ids, previous), True)
        self.last = ids[len(ids) - 1].as_py()
        kept = batch.filter(first)
        return kept, batch.num_rows - kept.num_rows
