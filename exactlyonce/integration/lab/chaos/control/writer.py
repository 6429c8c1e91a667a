"""The negative control's writer: a plain at-least-once ``foreachBatch`` that writes each
micro-batch as it comes, with none of the protocol (no record IDs, no catalog, no head, no
skip of a batch already written). A batch that Spark runs again (its commit log did not
record it) is written again: that is what the control is for.

Each task writes its partition's records (the key columns, as text, and the epoch) with its
target's plain client (:func:`~.clients.client`'s ``write_partition``: one PostgreSQL
``COPY`` transaction, pipelined Redis ``XADD``, a plain Kafka producer, an Elasticsearch
``_bulk`` without ``_id``).

It passes the named crash points of the sink it stands in for, at the same places, so a
schedule's point kills strike it too: ``before_write`` (driver, before the tasks), the
sink's mid-write point (a task, half its records sent), the sink's after-commit point (a
task, its write committed: ``after_shard_commit``, Kafka's ``before_confirm``) and
``after_head`` (driver, every task done, before Spark writes its commit log).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from exactlyonce.faults import crash_point
from exactlyonce.integration.lab.chaos.control.clients import client
from exactlyonce.integration.lab.chaos.control.target import Target

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pyspark.sql import DataFrame


@dataclass
class ControlWriter:
    """``foreachBatch(ControlWriter(target))``; ``batches`` counts the batches written (the
    driver's own count, for the runner's idle check)."""

    target: Target
    batches: int = field(default=0, compare=False)

    def __call__(self, df: DataFrame, epoch: int) -> None:
        from pyspark.sql import functions as F

        crash_point("before_write", epoch)
        rows = df.sparkSession.sparkContext.accumulator(0)
        keys = [F.col(k).cast("string").alias(k) for k in self.target.keys]
        df.select(*keys).foreachPartition(_Task(self.target, epoch, rows))
        crash_point("after_head", epoch)
        self.batches += 1
        print(f"epoch {epoch}: {rows.value} rows (control: {self.target.describe()})", flush=True)


@dataclass(frozen=True)
class _Task:
    """One partition's write (pickled to the executors)."""

    target: Target
    epoch: int
    rows: Any  # a Spark accumulator

    def __call__(self, partition: Iterable[Any]) -> None:
        rows = [tuple(r) for r in partition]
        if not rows:
            return
        mid_point, committed_point = self.target.points

        def mid() -> None:
            if mid_point:
                crash_point(mid_point, self.epoch)

        client(self.target.kind).write_partition(self.target, self.epoch, rows, mid)
        crash_point(committed_point, self.epoch)
        self.rows.add(len(rows))
