"""The audit reader of :class:`~exactlyonce.testing.sink.MemorySink`: per record ID, the
rows committed steps tried to write into its table (a unique index hides a second write from
the rows; the count of committed writes, as a PostgreSQL ``BEFORE INSERT`` trigger would
keep it, does not)."""

from __future__ import annotations

from collections import Counter

from exactlyonce.connectors.base.audit import SinkAudit
from exactlyonce.connectors.base.expected import Expected
from exactlyonce.testing.sink import MemorySink


def read_memory(sink: MemorySink, expected: Expected) -> SinkAudit:
    """What ``sink``'s store holds against ``expected``: committed writes per record ID,
    the dead letters and the head."""
    store = sink.store
    with store.lock:
        rows = store.rows(sink.table)
        writes = Counter({rid: n for rid, n in store.committed_writes.items() if n})
        letters = len(store.dead_letters.get(sink.table, []))
    in_table = {str(r[sink.id_column]) for r in rows}
    counts = Counter({rid: n for rid, n in writes.items() if rid in in_table})
    head = sink.head()
    return SinkAudit(
        sink.query_name,
        sink.sink_name,
        "memory",
        f"the store's committed writes ({sink.table})",
        "committed writes",
        expected,
        counts,
        None if head is None else head.epoch,
        letters,
    )


__all__ = ["read_memory"]
