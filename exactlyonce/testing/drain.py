"""The buffer's drain target for :class:`~exactlyonce.testing.sink.MemorySink`: drained rows
and the drain offsets go into the sink's :class:`~exactlyonce.testing.store.FileStore` in one
step (ATOMIC), as a PostgreSQL transaction holds both."""

from __future__ import annotations

import json
from typing import Any

from exactlyonce.connectors.base.drain import (
    Counts,
    Letter,
    Ownership,
    Share,
    TargetClassDefaults,
    owned,
)
from exactlyonce.connectors.base.guarantee import Guarantee
from exactlyonce.faults import crash_point
from exactlyonce.testing.sink import MemorySink


class MemoryDrainTarget(TargetClassDefaults):
    """Writes drained records into a :class:`MemorySink`'s table: a
    :class:`~exactlyonce.connectors.base.drain.DrainTarget`.

    Guarantee: ATOMIC. A share's rows and the offsets of the partitions this writer owns are
    stored by one :meth:`~exactlyonce.testing.store.MemoryStore.commit_drained` step, after a
    compare-and-set of the stored offsets; a crash leaves both or neither, and a table in
    ``mode="insert"`` skips a record ID it holds.
    """

    @staticmethod
    def guarantee(sink: MemorySink) -> Guarantee:
        return Guarantee(
            "EXACTLY ONCE, ATOMIC",
            "a share's rows and the drain offsets go into the store in one step, after a "
            "compare-and-set of the offsets.",
        )

    def __init__(
        self,
        sink: MemorySink,
        topic: str,
        application_name: str = "",
        writer: int = 0,
        writers: int = 1,
        member: tuple[int, int] = (0, 1),
    ) -> None:
        self.sink = sink
        self.key = (sink.query_name, sink.sink_name, topic)
        self._ownership = Ownership(writer, writers, *member)
        self.held: dict[int, int] = {}

    @property
    def where(self) -> str:
        return f"the memory store's table {self.sink.table} ({self.sink.sink_name})"

    def owns(self, partition: int) -> bool:
        return self._ownership.owns(partition)

    def ensure(self) -> None:
        self.sink.preflight()

    def read_offsets(self) -> dict[int, int]:
        stored = self.sink.store.stored_offsets(self.key)
        self.held = owned(self, stored)
        return stored

    def reset_offsets(self) -> int:
        self.held = {}
        return self.sink.store.forget_offsets(self.key)

    def write_share(self, share: Share) -> Counts:
        """Dead letters out first, then the rows and the offsets in one step."""
        rows, letters = self._rows(share)
        letters = share.bad + letters
        if letters:
            share.dead_letter(letters)
        new = owned(self, share.offsets)
        crash_point("drain_mid_write", share.n)
        store, table = self.sink.store, self.sink.table
        inserted = store.commit_drained(self.key, self.held, new, table, rows)
        self.held = new
        return inserted, len(rows) - inserted, len(letters)

    def _rows(self, share: Share) -> tuple[list[dict[str, Any]], list[Letter]]:
        """The share's records as table rows (their columns, record ID and epoch), and the
        records that are no JSON object (dead letters, with why)."""
        drained, letters = share.chunk.rows_of(share.where)
        rows = []
        for row in drained:
            record = json.loads(row.value)
            if not isinstance(record, dict):
                letters.append((row.source, "not a JSON object"))
                continue
            record[self.sink.id_column] = row.record_id.decode()
            record[self.sink.epoch_column] = row.epoch
            rows.append(record)
        return rows, letters

    def close(self) -> None:
        return None


__all__ = ["MemoryDrainTarget"]
