"""Run a sink's epochs in this process, without Spark: the tasks Spark would run, in a loop.

:func:`shard_batches` builds the Arrow batches Spark hands each task: the stream's columns,
the record ID (:func:`~exactlyonce.dedup.ids.record_id`, the same MD5 Spark computes), the
epoch, the shard (:func:`~exactlyonce.dedup.murmur3.spark_shard`, Spark's ``pmod(hash)``),
and for a null key the dead-letter reason and payload. :func:`in_process_write` runs one task
per shard on the sink's real task writer; :func:`run_in_process` runs the whole protocol
(:meth:`ExactlyOnceSink.run_epoch`) with it. Works for any sink whose task writer can reach
its destination from this process (a :class:`~exactlyonce.testing.MemorySink`, or a real
sink against real services).

For a sink in ``mode="upsert"`` the batches are built as Spark builds them: the tombstone
column becomes ``_eo_delete``, and each shard is sorted by record ID, then ``order_by`` and
canonical encoding, descending. The canonical encoding here is ``json.dumps`` of the
record, which need not sort like Spark's ``to_json``: when an epoch holds several rows of
one key with equal ``order_by`` values, the row that wins in-process may differ from the one
that wins in Spark (each is deterministic).

Limits: string and integer key values hash exactly as in Spark; other types follow Python's
``str``, which Spark's cast to string need not match. Content IDs (``id_from="content"``)
come from :func:`~exactlyonce.dedup.content.content_record_ids`, the twin of Spark's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from exactlyonce.connectors.base import (
    ERROR_COLUMN,
    PAYLOAD_COLUMN,
    SHARD_COLUMN,
    BatchReport,
    ExactlyOnceSink,
    TaskResult,
)
from exactlyonce.connectors.base.columns import DELETE_COLUMN, ORDER_COLUMN
from exactlyonce.dedup.content import content_record_ids
from exactlyonce.dedup.ids import RecordIdSpec, record_id
from exactlyonce.dedup.murmur3 import spark_shard

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

Record = Mapping[str, Any]
Write = Callable[[int, int], list[TaskResult]]


def _id_of(record: Record, id_columns: Sequence[str]) -> str | None:
    values = [record.get(c) for c in id_columns]
    return None if any(v is None for v in values) else record_id(values)


def record_ids(records: Sequence[Record], spec: RecordIdSpec) -> list[str | None]:
    """The IDs Spark gives an epoch's ``records`` under ``spec`` (None: a null key)."""
    if spec.content:
        columns = list(records[0]) if records else []
        return list(content_record_ids([{c: r.get(c) for c in columns} for r in records]))
    return [_id_of(r, spec.columns) for r in records]


def shard_batches(
    records: Sequence[Record],
    sink: ExactlyOnceSink,
    epoch: int,
    shards: int,
    epoch_column: str = "epoch",
) -> dict[int, pa.RecordBatch]:
    """One Arrow batch per shard, with the columns Spark gives ``sink``'s task writer."""
    columns = list(records[0]) if records else []
    upsert = sink.upsert
    if upsert is not None:  # one shard's rows by (ID, order_by and encoding descending)

        def rank(r: Record) -> tuple[Any, ...]:
            by = tuple((r.get(c) is not None, r.get(c)) for c in upsert.order_by)
            return (*by, json.dumps(dict(r), default=str))

        records = sorted(records, key=rank, reverse=True)
        records = sorted(records, key=lambda r: _id_of(r, sink.ids.columns) or "")
        columns = upsert.stored_names(columns)
    ids = record_ids(records, sink.ids)
    known = [i for i in ids if i is not None]
    owners = iter(spark_shard(known, shards).tolist() if known else [])
    # A null key has no ID; Spark's hash of a null is its seed (42), so pmod(42, shards).
    owner = [next(owners) if i is not None else 42 % shards for i in ids]
    out = {}
    for s in range(shards):
        rows = [n for n in range(len(records)) if owner[n] == s]
        data: dict[str, Any] = {c: [records[n].get(c) for n in rows] for c in columns}
        data[sink.id_column] = pa.array([ids[n] for n in rows], pa.string())
        data[epoch_column] = pa.array([epoch] * len(rows), pa.int64())
        data[SHARD_COLUMN] = pa.array([s] * len(rows), pa.int32())
        data[ERROR_COLUMN] = pa.array([_error(records[n], ids[n], sink) for n in rows], pa.string())
        data[PAYLOAD_COLUMN] = pa.array(
            [None if ids[n] else json.dumps(dict(records[n]), default=str) for n in rows],
            pa.string(),
        )
        if upsert is not None:
            tomb = upsert.tombstone_column
            data[DELETE_COLUMN] = pa.array(
                [bool(tomb and records[n].get(tomb)) for n in rows], pa.bool_()
            )
            data[ORDER_COLUMN] = pa.array(
                [json.dumps(dict(records[n]), default=str) for n in rows], pa.string()
            )
        out[s] = pa.RecordBatch.from_pydict(data)
    return out


def _error(record: Record, rid: str | None, sink: ExactlyOnceSink) -> str | None:
    if rid is not None:
        return None
    nulls = [c for c in sink.ids.columns if record.get(c) is None]
    return "null key column(s): " + ", ".join(nulls)


def in_process_write(
    sink: ExactlyOnceSink,
    records: Sequence[Record],
    *,
    epoch_column: str = "epoch",
    before_task: Callable[[int], None] | None = None,
) -> Write:
    """A ``write(epoch, shards)`` for :meth:`ExactlyOnceSink.run_epoch`: one task per shard,
    on the sink's task writer, in shard order. ``before_task(n)`` runs before the n-th task
    (a test raises there to stand for a crash between tasks)."""

    def write(epoch: int, shards: int) -> list[TaskResult]:
        batches = shard_batches(records, sink, epoch, shards, epoch_column)
        columns = [c for c in next(iter(batches.values())).schema.names if not c.startswith("_eo_")]
        results = []
        for n, batch in enumerate(batches.values()):
            if before_task is not None:
                before_task(n)
            writer = sink.task_writer(epoch, columns)
            out = list(writer(iter([batch])))
            results.append(TaskResult(**out[0].to_pylist()[0]))
        return results

    return write


def schema_of(records: Sequence[Record]) -> StructType:
    """A Spark schema for the records' columns: long, double, boolean or string."""
    from pyspark.sql import types as T

    kinds = {bool: T.BooleanType(), int: T.LongType(), float: T.DoubleType()}
    first = records[0] if records else {}
    return T.StructType(
        [T.StructField(c, kinds.get(type(v), T.StringType())) for c, v in first.items()]
    )


def run_in_process(
    sink: ExactlyOnceSink,
    epoch: int,
    records: Sequence[Record],
    *,
    query_id: str | None = "in-process",
    schema: StructType | None = None,
    shards: int = 2,
) -> BatchReport:
    """The whole protocol for one epoch of ``records``, its tasks run in this process.

    ``query_id`` stands for Spark's query id (the same across restarts of one checkpoint);
    ``shards`` is the default shard count when neither the sink nor its head has one.
    """
    write = in_process_write(sink, records, epoch_column=getattr(sink, "epoch_column", "epoch"))
    return sink.run_epoch(epoch, query_id, schema or schema_of(records), lambda: shards, write)
