"""The catalog's usage counters on :class:`~exactlyonce.testing.MemoryRedis` (the Lua scripts'
twins keep them as the scripts do), the batch report and log line that show them, and the
Bloom filters' sizing per generation. The same many-epoch run against a real Redis is
tests/integration/test_catalog_usage.py."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

from exactlyonce.connectors.base import BatchReport
from exactlyonce.connectors.base.report import catalog_summary
from exactlyonce.dedup.catalog import CatalogUsage, RedisCatalog
from exactlyonce.dedup.config import DedupConfig
from exactlyonce.dedup.keeper import CatalogKeeper
from exactlyonce.dedup.layout import Layout
from exactlyonce.testing import MemoryRedis, MemorySink, MemoryStore, run_in_process
from tests.integration import test_catalog_usage as many_epochs
from tests.support.catalog_usage import held


def random_ids(n: int) -> np.ndarray:
    return np.frombuffer(os.urandom(16 * n), dtype=np.uint8).reshape(n, 16)


def test_many_epochs_stay_bounded_and_reports_match_the_fake(unique_name: str) -> None:
    config = MemoryRedis().dedup_config(
        expected_ids=many_epochs.RETENTION * many_epochs.NEW,
        retention_epochs=many_epochs.RETENTION,
    )
    many_epochs.assert_bounded(many_epochs.run_many_epochs(config, unique_name))


def test_counters_follow_marks_merges_rollbacks_and_expiry(unique_name: str) -> None:
    config = MemoryRedis().dedup_config(expected_ids=4000, retention_epochs=8)
    catalog = RedisCatalog(config, unique_name, "test-sink")
    layout = Layout.plan(config, 2)
    instance = catalog.create(layout)

    def agrees(epoch: int) -> CatalogUsage:
        usage, now = catalog.usage(layout, epoch), held(catalog, layout, epoch)
        assert (usage.ids, usage.memory_bytes) == (now.ids, now.memory_bytes)
        return usage

    for epoch in range(4):
        for shard in (0, 1):
            ids = random_ids(300)
            delta = layout.bloom.empty()
            delta.add(ids)
            catalog.merge_bloom(instance, shard, layout.gen(epoch), delta)
            catalog.mark(instance, layout, shard, epoch, ids)
        agrees(epoch)
    assert agrees(3).ids == 4 * 2 * 300
    assert catalog.roll_back_above(layout, head_epoch=2) == 2 * 300
    assert agrees(3).ids == 3 * 2 * 300
    catalog.expire_before(layout, 14)  # generations 0 and 1 (epochs 0-3) are past the window
    assert agrees(14) == CatalogUsage(0, 0)
    assert catalog.stats(layout.shards) == {}, "expired counters are dropped"
    catalog.mark(instance, layout, 0, 5, random_ids(10))
    catalog.create(layout)  # a new catalog starts from zero
    assert catalog.usage(layout, 5) == CatalogUsage(0, 0)


def test_every_batch_reports_and_logs_the_catalog(caplog: pytest.LogCaptureFixture) -> None:
    config = MemoryRedis().dedup_config(expected_ids=1000, retention_epochs=8)
    sink = MemorySink(MemoryStore(), "t", ["k"], "q", mode="append", shards=2, dedup=config)
    with caplog.at_level(logging.INFO, logger="exactlyonce"):
        report = run_in_process(sink, 0, [{"k": "a"}, {"k": "b"}, {"k": "a"}])
    assert report.catalog_ids == 2 and report.catalog_bytes is not None
    assert report.catalog_bytes_per_id == report.catalog_bytes / 2
    line = next(r.getMessage() for r in caplog.records if "epoch 0:" in r.getMessage())
    assert f"catalog 2 IDs, {report.catalog_bytes / 1e6:.1f} MB (" in line, line
    plain = MemorySink(MemoryStore(), "t", ["k"], "q", shards=2, dedup=False)
    assert run_in_process(plain, 0, [{"k": "a"}]).catalog_ids is None


def test_the_summary_of_a_report() -> None:
    report = BatchReport("q", "s", 3, skipped=False, catalog_ids=12_345, catalog_bytes=1_234_567)
    assert catalog_summary(report) == "catalog 12,345 IDs, 1.2 MB (100 B/ID)"
    assert catalog_summary(BatchReport("q", "s", 3, skipped=False)) == "catalog -"
    assert BatchReport("q", "s", 3, skipped=False, catalog_ids=0).catalog_bytes_per_id is None


# -- Bloom sizing ---------------------------------------------------------------------------


def test_a_generation_holding_every_expected_id_keeps_its_false_positive_rate() -> None:
    """A burst puts the whole window's IDs into generation 0; its filter must hold them.
    (Sized for a generation's quarter, the same burst gave several % false positives.)"""
    config = DedupConfig("redis://x", expected_ids=40_000, fp_rate=0.01, retention_epochs=1000)
    layout = Layout.plan(config, shards=2)
    assert layout.bloom.capacity == 20_000
    bloom = layout.bloom.empty()
    bloom.add(random_ids(20_000))  # the shard's half of every expected ID, in one generation
    rate = bloom.contains(random_ids(200_000)).mean()
    assert rate <= 2 * config.fp_rate, rate
    # Buckets stay sized for a generation's share: 5,000 IDs per shard, 128 buckets.
    assert layout.bucket_bits == 7


def test_an_existing_catalog_keeps_the_bloom_size_it_was_created_with(unique_name: str) -> None:
    server = MemoryRedis()
    config = server.dedup_config(expected_ids=40_000, retention_epochs=1000)
    catalog = RedisCatalog(config, unique_name, "s")
    planned = Layout.plan(config, 2)
    old = Layout(
        2,
        planned.gen_epochs,
        planned.live_gens,
        planned.bucket_bits,
        type(planned.bloom)(5_000, planned.bloom.fp_rate, planned.bloom.backend),
    )
    catalog.create(old)  # as the earlier sizing (a generation's quarter) stored it
    keeper = CatalogKeeper(config, unique_name, "s", unique_sink=True, rebuild_source=None)
    keeper.open(head_epoch=7, shards=2)
    assert keeper.layout == old and keeper.layout.bloom.capacity == 5_000
