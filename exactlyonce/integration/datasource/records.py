"""The protocol's columns, added in the task to the rows Spark's data source API hands it.

The ``foreachBatch`` path adds them with Spark expressions in the driver's plan
(:mod:`exactlyonce.connectors.base.projection`); a data source sees the stream's rows as they
are, so the task adds them itself, in Arrow: the record ID (the same MD5 as
:func:`exactlyonce.dedup.ids.record_id`, exact for string and integer key columns, the only
ones this path takes), the epoch, the ID's shard (``pmod(hash(id), shards)``, the same as
Spark's: :func:`exactlyonce.dedup.murmur3.spark_shard`), and for a record with a null key
the dead-letter reason and its payload.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from exactlyonce.connectors.base.columns import ERROR_COLUMN, PAYLOAD_COLUMN, SHARD_COLUMN
from exactlyonce.connectors.base.projection import json_like_spark
from exactlyonce.dedup.ids import record_id
from exactlyonce.dedup.murmur3 import spark_shard
from exactlyonce.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

# Key types whose text Python writes exactly as Spark's cast to string does.
_EXACT_KEYS = ("string", "tinyint", "smallint", "int", "bigint")
_NULL_HASH = 42  # Spark's Murmur3 hash() of a null: its seed


def check_key_columns(schema: StructType, key_columns: Sequence[str]) -> None:
    """Refuse, on the driver, a key column whose ID this path could not compute exactly."""
    kinds = {f.name: f.dataType.simpleString() for f in schema.fields}
    for name in key_columns:
        if kinds.get(name) not in _EXACT_KEYS:
            raise ConfigError(
                "id_columns",
                f"column {name!r} is {kinds.get(name)}; through format('exactlyonce') a key "
                f"column is one of {list(_EXACT_KEYS)} (cast it, or use foreachBatch)",
            )


@dataclass(frozen=True)
class ProtocolColumns:
    """Adds the protocol's columns to each Arrow batch of one task."""

    key_columns: tuple[str, ...]
    id_column: str
    epoch_column: str
    num_shards: int
    # The sink's own shaping of the rows (its ``datasource`` traits in the sink registry),
    # run last; None: the rows as they are.
    convert: Callable[[pa.RecordBatch], pa.RecordBatch] | None = None

    def add(self, batch: pa.RecordBatch, epoch: int) -> pa.RecordBatch:
        keys = [batch.column(c).to_pylist() for c in self.key_columns]
        ids: list[str | None] = []
        reasons: list[str | None] = []
        for values in zip(*keys, strict=True):
            missing = [c for c, v in zip(self.key_columns, values, strict=True) if v is None]
            ids.append(None if missing else record_id(values))
            reasons.append(f"null key column(s): {', '.join(missing)}" if missing else None)
        rows = batch.num_rows
        # A null ID's shard is Spark's too: hash(null) is the seed, 42.
        shards = np.full(rows, _NULL_HASH % self.num_shards, dtype=np.int32)
        present = np.array([i is not None for i in ids], dtype=bool)
        if present.any():
            hex_ids = np.array([i for i in ids if i is not None], dtype="S32")
            shards[present] = spark_shard(hex_ids, self.num_shards)
        payloads = _payloads(batch, reasons) if not present.all() else [None] * rows
        added = pa.RecordBatch.from_arrays(
            [
                *batch.columns,
                pa.array(ids, pa.string()),
                pa.array(np.full(rows, epoch, dtype=np.int64)),
                pa.array(reasons, pa.string()),
                pa.array(payloads, pa.string()),
                pa.array(shards),
            ],
            names=[
                *batch.schema.names,
                self.id_column,
                self.epoch_column,
                ERROR_COLUMN,
                PAYLOAD_COLUMN,
                SHARD_COLUMN,
            ],
        )
        return added if self.convert is None else self.convert(added)


def _payloads(batch: pa.RecordBatch, reasons: list[str | None]) -> list[str | None]:
    """The JSON of each bad record, as Spark's ``to_json`` writes it on the ``foreachBatch``
    path (only those: the others carry none)."""
    rows: list[dict[str, Any]] = batch.to_pylist()
    return [
        json_like_spark(row) if reason is not None else None
        for row, reason in zip(rows, reasons, strict=True)
    ]
