"""Partial catalog eviction (issue 16, F4 partial): Redis drops some of a catalog's keys
(Bloom filters, buckets, the presence hash; ``maxmemory`` with an ``allkeys-*`` policy does
this) while its meta key and shard markers survive. The sink must detect it and rebuild from
its own records (or refuse), never read the gaps as "never seen".

A PostgreSQL ``mode="append"`` table (no unique key: the catalog is its only dedup) is written
by real Spark, some keys of the real Redis catalog are deleted, and a restarted sink writes an
epoch that replays half of what was written: 0 duplicate writes, 0 missing (an audit trigger
counts inserts).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import psycopg
import pytest
from pyspark.sql import SparkSession

from exactlyonce.connectors import PostgresSink
from exactlyonce.dedup.catalog import RedisCatalog
from exactlyonce.dedup.config import DedupConfig
from exactlyonce.dedup.keeper import CatalogKeeper
from exactlyonce.dedup.layout import Layout
from exactlyonce.errors import CatalogLostError, ConfigError
from tests.support.audit import assert_exactly_once, install_audit
from tests.support.catalogs import CATALOG_BACKENDS, random_ids, small_catalog_config
from tests.support.events import events, ids

pytestmark = pytest.mark.integration

EVICTED = {  # which keys go: a glob under each chosen shard's prefix
    "buckets": ":c:*",
    "blooms": ":b:*",
    "presence": ":p",
}


def new_sink(dsn: str, table: str, **kw: Any) -> PostgresSink:
    dedup = {"expected_ids": 20_000, **kw.pop("dedup", {})}
    return PostgresSink(
        dsn, table, ["event_id"], query_name=table, mode="append", shards=4, dedup=dedup, **kw
    )


def evict(sink: PostgresSink, pattern: str, shards: list[int]) -> int:
    """Delete the keys of ``shards`` that match ``pattern``; meta and markers stay."""
    keeper = sink._keeper
    assert keeper is not None
    catalog: RedisCatalog = keeper.catalog
    deleted = 0
    for shard in shards:
        prefix = catalog.keys.shard_prefix(shard)
        escaped = prefix.replace("{", "\\{").replace("}", "\\}")
        for key in catalog.redis.scan_iter(match=escaped + pattern):
            deleted += int(catalog.redis.delete(key))
    assert catalog.redis.exists(catalog.keys.meta) == 1
    assert all(m is not None for m in catalog.markers(4))
    return deleted


@pytest.mark.parametrize("what", sorted(EVICTED))
def test_evicted_catalog_keys_are_detected_and_rebuilt(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str, what: str
) -> None:
    first = new_sink(pg_dsn, unique_name)
    first.preflight(events(spark, 0, 1).schema)
    install_audit(pg, unique_name)
    first(events(spark, 0, 400), 0)
    assert evict(first, EVICTED[what], [0, 2]) > 0, f"no {what} key to evict"
    restarted = new_sink(pg_dsn, unique_name)
    restarted(events(spark, 200, 600), 1)  # 200 replays of epoch 0
    # The attempt that found the gap failed; shards it committed were skipped by the retry
    # after the rebuild, so the report counts only the retry's writes: the audit counts all.
    report = restarted.last_report
    assert report is not None and report.catalog_rebuilds == 1, report
    assert_exactly_once(pg, unique_name, ids(0, 600))


def test_evicted_keys_with_on_catalog_loss_fail_refuse_naming_the_fix(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    first = new_sink(pg_dsn, unique_name, dedup={"on_catalog_loss": "fail"})
    first.preflight(events(spark, 0, 1).schema)
    install_audit(pg, unique_name)
    first(events(spark, 0, 400), 0)
    evict(first, EVICTED["buckets"], [0, 1, 2, 3])
    restarted = new_sink(pg_dsn, unique_name, dedup={"on_catalog_loss": "fail"})
    with pytest.raises(Exception) as err:
        restarted(events(spark, 200, 600), 1)
    assert "on_catalog_loss" in str(err.value) or isinstance(err.value, CatalogLostError)
    assert_exactly_once(pg, unique_name, ids(0, 400))


# -- the same detection, catalog by catalog, on real Redis and on the scripts' Python twins --


@pytest.fixture(params=CATALOG_BACKENDS)
def config(request: pytest.FixtureRequest, services: dict[str, str]) -> DedupConfig:
    return small_catalog_config(request.param, services)


def filled(config: DedupConfig, name: str) -> tuple[RedisCatalog, Layout, str, np.ndarray]:
    """A two-shard catalog holding 2,000 IDs in shard 1, epoch 5, journaled."""
    catalog = RedisCatalog(config, name, "test-sink")
    layout = Layout.plan(config, 2)
    instance = catalog.create(layout)
    ids = random_ids(2000)
    delta = layout.bloom.empty()
    delta.add(ids)
    catalog.merge_bloom(instance, 1, layout.gen(5), delta)
    catalog.mark(instance, layout, 1, 5, ids)
    return catalog, layout, instance, ids


def drop_keys(catalog: RedisCatalog, *keys: str) -> None:
    assert catalog.redis.delete(*keys) == len(keys)


def shard_lost(catalog: RedisCatalog) -> bool:
    markers = catalog.markers(2)
    return markers[0] is not None and markers[1] is None


def test_a_missing_bucket_fails_the_lookup_and_the_mark(
    config: DedupConfig, unique_name: str
) -> None:
    catalog, layout, instance, ids = filled(config, unique_name)
    assert catalog.lookup(instance, layout, 1, 5, ids).all()
    drop_keys(catalog, catalog.keys.bucket(1, layout.gen(5), 0))
    with pytest.raises(CatalogLostError):
        catalog.lookup(instance, layout, 1, 5, ids)
    assert shard_lost(catalog)
    catalog, layout, instance, ids = filled(config, unique_name + "m")
    drop_keys(catalog, catalog.keys.bucket(1, layout.gen(5), 1))
    with pytest.raises(CatalogLostError):
        catalog.mark(instance, layout, 1, 5, ids)
    assert shard_lost(catalog)


def test_a_missing_bloom_filter_fails_its_load_and_its_merge(
    config: DedupConfig, unique_name: str
) -> None:
    catalog, layout, instance, _ = filled(config, unique_name)
    gen = layout.gen(5)
    drop_keys(catalog, catalog.keys.bloom(1, gen), catalog.keys.bloom_version(1, gen))
    with pytest.raises(CatalogLostError, match="noeviction"):
        catalog.load_blooms(instance, layout, 1, [gen], {})
    assert shard_lost(catalog)
    catalog, layout, instance, _ = filled(config, unique_name + "m")
    drop_keys(catalog, catalog.keys.bloom(1, gen))
    with pytest.raises(CatalogLostError):
        catalog.merge_bloom(instance, 1, gen, layout.bloom.empty())
    assert shard_lost(catalog)


def test_a_missing_presence_record_fails_the_lookup(config: DedupConfig, unique_name: str) -> None:
    catalog, layout, instance, ids = filled(config, unique_name)
    drop_keys(catalog, catalog.keys.presence(1))
    with pytest.raises(CatalogLostError):
        catalog.lookup(instance, layout, 1, 5, ids)
    assert shard_lost(catalog)


def test_a_missing_journal_above_the_head_makes_the_keeper_rebuild(
    config: DedupConfig, unique_name: str
) -> None:
    catalog, _, instance, _ = filled(config, unique_name)
    drop_keys(catalog, catalog.keys.journal(1, 5))
    keeper = CatalogKeeper(config, unique_name, "test-sink", unique_sink=True, rebuild_source=None)
    keeper.open(head_epoch=3, shards=2)  # epoch 5 is above the head: its IDs must roll back
    assert keeper.rebuilds == 1 and keeper.instance != instance


def test_a_whole_catalog_keeps_working_and_expires_its_presence_fields(
    config: DedupConfig, unique_name: str
) -> None:
    catalog, layout, instance, ids = filled(config, unique_name)
    keeper = CatalogKeeper(config, unique_name, "test-sink", unique_sink=True, rebuild_source=None)
    keeper.open(head_epoch=5, shards=2)
    assert keeper.rebuilds == 0 and keeper.instance == instance
    assert catalog.lookup(instance, layout, 1, 6, ids).all()
    catalog.forget_journals(2, 5)
    catalog.expire_before(layout, 14)  # generations 1 and 2 go
    left = {f for f in catalog.redis.hkeys(catalog.keys.presence(1))}
    assert left == {b"i"}


def test_a_catalog_made_before_presence_records_is_read_unchecked(
    config: DedupConfig, unique_name: str
) -> None:
    catalog = RedisCatalog(config, unique_name, "test-sink")
    layout = dataclasses.replace(Layout.plan(config, 2), tracked=False)
    instance = catalog.create(layout)
    assert Layout.from_meta(catalog.meta()).tracked is False
    ids = random_ids(100)
    catalog.merge_bloom(instance, 0, 0, layout.bloom.empty(), tracked=False)
    catalog.mark(instance, layout, 0, 0, ids)
    assert catalog.lookup(instance, layout, 0, 0, ids).all()


def test_without_its_presence_record_the_rollback_still_finds_every_journal(
    config: DedupConfig, unique_name: str
) -> None:
    # The rollback finds a tracked catalog's journals through its presence record: without
    # that record it looks for them in the whole keyspace, and leaves no ID of an epoch above
    # the head marked; the loss itself is reported by the next script.
    catalog, layout, instance, ids = filled(config, unique_name)
    drop_keys(catalog, catalog.keys.presence(1))
    assert catalog.roll_back_above(layout, head_epoch=3) == len(ids)
    assert not [k for k in catalog.redis.scan_iter(match=catalog.keys.journals)]
    with pytest.raises(CatalogLostError):
        catalog.lookup(instance, layout, 1, 5, ids)


class Commands:
    """The commands a client sends (names only): a spy on the real client."""

    def __init__(self, client: Any) -> None:
        self.client, self.names = client, []

    def __getattr__(self, name: str) -> Any:
        self.names.append(name)
        return getattr(self.client, name)


def test_the_rollback_of_a_tracked_catalog_reads_neither_the_keyspace_nor_every_bucket(
    config: DedupConfig, unique_name: str
) -> None:
    # A restart's cost must not grow with the catalog: SCAN walks every key of the Redis (a
    # 10M-ID catalog has 330,000 bucket keys) and HKEYS returns one presence field per
    # bucket. The journals are found by a match on the presence record instead.
    catalog, layout, instance, ids = filled(config, unique_name)
    catalog.mark(instance, layout, 1, 2, random_ids(100))  # journaled at or below the head
    spy = Commands(catalog.redis)
    catalog._redis = spy
    assert catalog.roll_back_above(layout, head_epoch=3) == len(ids)
    assert not {"scan_iter", "scan", "hkeys", "keys"} & set(spy.names), spy.names
    catalog._redis = spy.client
    assert not catalog.lookup(instance, layout, 1, 5, ids).any(), "epoch 5 rolled back"
    assert not [k for k in catalog.redis.scan_iter(match=catalog.keys.journals)], "all deleted"
    assert [f for f in catalog.redis.hkeys(catalog.keys.presence(1)) if f.startswith(b"j:")] == []


# -- the journal index (layout 3): a restart finds the journals without walking the catalog --


def keeper_of(config: DedupConfig, name: str) -> CatalogKeeper:
    """The driver's keeper of :func:`filled`'s catalog, not opened yet."""
    return CatalogKeeper(config, name, "test-sink", unique_sink=True, rebuild_source=None)


def test_the_rollback_of_a_new_catalog_reads_its_journal_index_not_its_presence_record(
    config: DedupConfig, unique_name: str
) -> None:
    # The presence record has a field per bucket (131,000 per shard at 10M IDs): a match on
    # it is a walk that grows with the catalog. A catalog in layout 3 names its journals in a
    # small index of their own, written in the same step as each journal.
    catalog, layout, instance, ids = filled(config, unique_name)
    assert catalog.meta()["layout"] == "3" and layout.indexed
    catalog.mark(instance, layout, 1, 2, random_ids(100))  # journaled at or below the head
    spy = Commands(catalog.redis)
    catalog._redis = spy
    assert catalog.roll_back_above(layout, head_epoch=3) == len(ids)
    assert not {"scan_iter", "scan", "hkeys", "keys", "hscan", "hscan_iter"} & set(spy.names)
    catalog._redis = spy.client
    assert not catalog.lookup(instance, layout, 1, 5, ids).any(), "epoch 5 rolled back"
    assert not [k for k in catalog.redis.scan_iter(match=catalog.keys.journals)], "all deleted"
    assert catalog.redis.hgetall(catalog.keys.journal_index(1)) == {b"i": instance.encode()}


def test_forgotten_journals_leave_the_index(config: DedupConfig, unique_name: str) -> None:
    catalog, layout, instance, _ = filled(config, unique_name)
    catalog.mark(instance, layout, 0, 5, random_ids(10))
    catalog.forget_journals(2, 5)
    for shard in (0, 1):
        assert catalog.redis.hgetall(catalog.keys.journal_index(shard)) == {b"i": instance.encode()}


def test_a_catalog_in_layout_2_is_opened_as_it_is_and_rolled_back_by_its_presence_record(
    config: DedupConfig, unique_name: str
) -> None:
    catalog = RedisCatalog(config, unique_name, "test-sink")
    layout = dataclasses.replace(Layout.plan(config, 2), indexed=False)
    instance = catalog.create(layout)
    assert catalog.meta()["layout"] == "2"
    assert catalog.redis.exists(catalog.keys.journal_index(1)) == 0
    ids = random_ids(500)
    catalog.mark(instance, layout, 1, 5, ids)
    keeper = keeper_of(config, unique_name)
    keeper.open(head_epoch=3, shards=2)
    assert keeper.rebuilds == 0 and keeper.instance == instance
    assert keeper.layout is not None and not keeper.layout.indexed
    assert catalog.meta()["layout"] == "2", "not rewritten"
    assert not catalog.lookup(instance, layout, 1, 5, ids).any(), "epoch 5 rolled back"


def test_a_journal_an_older_version_wrote_into_a_new_catalog_is_rolled_back(
    config: DedupConfig, unique_name: str
) -> None:
    # An older exactlyonce (layout 2) opening a layout-3 catalog takes it for layout 1, moves
    # nothing and sets "layout" to 2; its journals then go unindexed. The next start of this
    # version must walk the presence record again, not trust the index.
    catalog, layout, instance, ids = filled(config, unique_name)
    catalog.redis.hset(catalog.keys.meta, mapping={"layout": "2"})
    older = random_ids(300)
    catalog.mark(instance, dataclasses.replace(layout, indexed=False), 0, 6, older)
    keeper = keeper_of(config, unique_name)
    keeper.open(head_epoch=4, shards=2)
    assert keeper.rebuilds == 0 and keeper.instance == instance
    assert not catalog.lookup(instance, layout, 1, 5, ids).any(), "epoch 5 rolled back"
    assert not catalog.lookup(instance, layout, 0, 6, older).any(), "epoch 6 rolled back"


def test_an_evicted_journal_index_makes_the_rollback_walk_the_presence_record(
    config: DedupConfig, unique_name: str
) -> None:
    catalog, layout, instance, ids = filled(config, unique_name)
    drop_keys(catalog, catalog.keys.journal_index(1))
    assert catalog.roll_back_above(layout, head_epoch=3) == len(ids)
    assert not catalog.lookup(instance, layout, 1, 5, ids).any(), "epoch 5 rolled back"


def test_a_catalog_in_a_layout_this_version_does_not_know_is_refused(
    config: DedupConfig, unique_name: str
) -> None:
    catalog, _, _, _ = filled(config, unique_name)
    catalog.redis.hset(catalog.keys.meta, mapping={"layout": "9"})
    keeper = keeper_of(config, unique_name)
    with pytest.raises(ConfigError, match="layout 9"):
        keeper.open(head_epoch=3, shards=2)
    assert catalog.meta()["layout"] == "9", "left as it was"
