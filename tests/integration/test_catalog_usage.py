"""The catalog stays bounded, and every batch report says what it holds, against a real Redis.

Eighty epochs run through the real protocol (:meth:`ExactlyOnceSink.run_epoch`, via
``run_in_process`` on a :class:`~exactlyonce.testing.MemorySink`) with the real Redis
catalog and ``retention_epochs=8``, so generations expire through the head's advance, with
a driver crash and a restart (a rollback) half way. After every epoch the report's
``catalog_ids`` and ``catalog_bytes`` (from the counters the Lua scripts keep, one HGETALL)
are compared with what Redis holds, key by key: the IDs in the live buckets, and ``MEMORY
USAGE`` summed over the live bucket and filter keys.
"""

from __future__ import annotations

from typing import Any

import pytest

from exactlyonce.connectors.base import BatchReport, TaskResult
from exactlyonce.dedup.catalog import RedisCatalog
from exactlyonce.dedup.config import DedupConfig
from exactlyonce.dedup.layout import Layout
from exactlyonce.testing import MemorySink, MemoryStore, run_in_process
from exactlyonce.testing.epochs import in_process_write, schema_of
from tests.support.catalog_usage import Held, held

pytestmark = pytest.mark.integration

EPOCHS, NEW, REPLAYED, RETENTION, CRASH_AT = 80, 40, 5, 8, 37
# The reported bytes are exact for the live bucket and filter keys; they leave out the meta
# and stats hashes (and journals, gone once the head passes their epoch): every key of the
# catalog counted is at most this many bytes more.
ALL_KEYS_SLACK = 2048


def records(epoch: int) -> list[dict[str, Any]]:
    """``NEW`` fresh IDs, and ``REPLAYED`` of the previous epoch's again (duplicates)."""
    fresh = [{"event_id": f"e{epoch}-{n}"} for n in range(NEW)]
    return fresh + ([{"event_id": f"e{epoch - 1}-{n}"} for n in range(REPLAYED)] if epoch else [])


def crash_before_head(sink: MemorySink, epoch: int) -> None:
    """Every task of ``epoch`` commits and marks; the driver dies before the head."""
    tasks = in_process_write(sink, records(epoch))

    def write_then_die(at: int, shards: int) -> list[TaskResult]:
        tasks(at, shards)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sink.run_epoch(epoch, "in-process", schema_of(records(epoch)), lambda: 2, write_then_die)


def check(report: BatchReport, now: Held) -> None:
    assert report.catalog_ids == now.ids, (report.epoch, report.catalog_ids, now)
    assert report.catalog_bytes == now.memory_bytes, (report.epoch, report.catalog_bytes, now)
    slack = now.all_bytes - report.catalog_bytes
    assert 0 <= slack <= ALL_KEYS_SLACK, (report.epoch, report.catalog_bytes, now)


def run_many_epochs(config: DedupConfig, name: str) -> list[tuple[BatchReport, Held]]:
    """The protocol for ``EPOCHS`` epochs; each report with what the catalog held then."""
    store = MemoryStore()

    def new_sink() -> MemorySink:
        return MemorySink(store, name, ["event_id"], name, mode="append", shards=2, dedup=config)

    sink, catalog, history = new_sink(), RedisCatalog(config, name, f"memory:{name}"), []
    for epoch in range(EPOCHS):
        if epoch == CRASH_AT:
            crash_before_head(sink, epoch)
            sink = new_sink()  # the restart rolls the epoch's marks back, then re-runs it
        report = run_in_process(sink, epoch, records(epoch))
        if epoch == CRASH_AT:  # its shards committed before the crash: skipped, re-marked
            assert (report.written, report.shards_skipped) == (0, 2)
        else:
            assert (report.written, report.duplicates) == (NEW, REPLAYED if epoch else 0)
        layout = Layout.from_meta(catalog.meta())
        now = held(catalog, layout, epoch)
        check(report, now)
        history.append((report, now))
    return history


def assert_bounded(history: list[tuple[BatchReport, Held]]) -> None:
    """After the retention window, the catalog holds between ``retention_epochs`` and
    1.25x that many epochs of IDs, and neither its keys nor its bytes grow any more."""
    settled = history[2 * RETENTION :]
    ids = [r.catalog_ids or 0 for r, _ in settled]
    assert min(ids) >= RETENTION * NEW, "an ID is recognised for retention_epochs epochs"
    assert max(ids) <= (RETENTION + RETENTION // 4) * NEW, "and then forgotten"
    first, later = settled[: 2 * RETENTION], settled[2 * RETENTION :]
    assert max(h.keys for _, h in later) <= max(h.keys for _, h in first)
    # Bytes wobble with the allocator's size classes as buckets grow and go: within 5%.
    assert max(r.catalog_bytes or 0 for r, _ in later) <= 1.05 * max(
        r.catalog_bytes or 0 for r, _ in first
    )
    keys = [h.keys for _, h in settled]
    size = [r.catalog_bytes or 0 for r, _ in settled]
    per_id = [r.catalog_bytes_per_id or 0.0 for r, _ in settled]
    print(
        f"catalog after the window: IDs {min(ids)}-{max(ids)}, keys {min(keys)}-{max(keys)}, "
        f"bytes {min(size)}-{max(size)} ({min(per_id):.1f}-{max(per_id):.1f} B/ID)"
    )


def test_many_epochs_stay_bounded_and_reports_match_redis(
    services: dict[str, str], unique_name: str
) -> None:
    config = DedupConfig(
        services["EXACTLYONCE_REDIS_URL"], expected_ids=RETENTION * NEW, retention_epochs=RETENTION
    )
    assert_bounded(run_many_epochs(config, unique_name))
