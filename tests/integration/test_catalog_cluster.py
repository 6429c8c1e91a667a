"""The catalog on a real 3-master Redis Cluster, and the upgrade of layout-1 catalogs.

Each shard's keys share one slot and the shards spread over the masters; marks, lookups,
rollback, expiry, usage and drop run unchanged through redis-py's cluster client (picked by
autodetection from a plain ``redis://`` URL); a master that restarts on its AOF keeps its
shards, one that restarts empty is detected as a loss and rebuilt from the sink (DESIGN
invariants 3 and 4). A layout-1 catalog is moved on a standalone Redis and read whole; on a
cluster it is dropped and recovered, never read as an empty, complete catalog.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest
from redis.cluster import RedisCluster

from exactlyonce.dedup.bloom import BloomFilter, Ids
from exactlyonce.dedup.catalog import RedisCatalog
from exactlyonce.dedup.config import DedupConfig
from exactlyonce.dedup.keeper import CatalogKeeper
from exactlyonce.dedup.layout import Layout, buckets
from exactlyonce.errors import CatalogLostError
from tests.integration import test_catalog as catalog_tests
from tests.integration.test_catalog import random_ids
from tests.support.catalog_usage import catalog_keys, held
from tests.support.redis_cluster import RedisClusterNodes

pytestmark = pytest.mark.integration


@pytest.fixture
def catalog(redis_cluster: RedisClusterNodes, unique_name: str) -> Iterator[RedisCatalog]:  # noqa: F811
    config = DedupConfig(redis_cluster.url, expected_ids=200_000, retention_epochs=8)
    catalog = RedisCatalog(config, unique_name, "test-sink")
    yield catalog
    catalog.close()


# The standalone tests, on the cluster.
test_marked_ids_are_found_and_others_are_not = (
    catalog_tests.test_marked_ids_are_found_and_others_are_not
)
test_rollback_drops_only_epochs_above_the_head = (
    catalog_tests.test_rollback_drops_only_epochs_above_the_head
)
test_generations_expire_after_the_retention_window = (
    catalog_tests.test_generations_expire_after_the_retention_window
)
test_a_catalog_that_lost_its_data_says_so = catalog_tests.test_a_catalog_that_lost_its_data_says_so
test_redis_memory_per_live_id_is_at_most_64_bytes = (
    catalog_tests.test_redis_memory_per_live_id_is_at_most_64_bytes
)


def marked_everywhere(catalog: RedisCatalog, layout: Layout, n: int) -> tuple[str, list[Ids]]:
    """A new catalog with ``n`` IDs marked (filter first) in every shard at epoch 1."""
    instance = catalog.create(layout)
    marked = []
    for shard in range(layout.shards):
        ids = random_ids(n)
        delta = layout.bloom.empty()
        delta.add(ids)
        catalog.merge_bloom(instance, shard, layout.gen(1), delta)
        catalog.mark(instance, layout, shard, 1, ids)
        marked.append(ids)
    return instance, marked


def test_the_url_of_one_node_gets_the_cluster_client(catalog: RedisCatalog) -> None:
    assert isinstance(catalog.redis, RedisCluster)


def test_a_shards_keys_share_a_slot_and_the_shards_spread_over_the_masters(
    catalog: RedisCatalog,
    redis_cluster: RedisClusterNodes,  # noqa: F811
) -> None:
    layout = Layout.plan(catalog.config, 32)
    marked_everywhere(catalog, layout, 200)
    slot_of = catalog.redis.keyslot
    slots: dict[int, set[int]] = {}
    for key in catalog_keys(catalog):
        if key != catalog.keys.meta:
            shard = int(key.rpartition("}")[0].rpartition(":")[2])
            slots.setdefault(shard, set()).add(slot_of(key))
    assert sorted(slots) == list(range(32)), "every shard has keys"
    assert all(len(s) == 1 for s in slots.values()), f"one slot per shard: {slots}"
    masters = {redis_cluster.port_of(catalog.keys.marker(s)) for s in range(32)}
    assert masters == set(redis_cluster.ports), "32 shards spread over all 3 masters"
    assert len({min(s) for s in slots.values()}) > 1


def test_usage_and_drop_cover_every_master(catalog: RedisCatalog) -> None:
    layout = Layout.plan(catalog.config, 8)
    marked_everywhere(catalog, layout, 500)
    usage, counted = catalog.usage(layout, 1), held(catalog, layout, 1)
    assert usage.ids == counted.ids == 8 * 500
    assert usage.memory_bytes == counted.memory_bytes
    sink_key = f"{catalog.prefix}:sink:head"  # the Redis sink's key beside the catalog
    catalog.redis.set(sink_key, b"x")
    assert catalog.drop() == counted.keys
    assert catalog_keys(catalog) == []
    assert catalog.redis.get(sink_key) == b"x", "drop never touches the sink's keys"


def rebuild_from(held_ids: dict[int, list[Ids]]):  # type: ignore[no-untyped-def]
    """A rebuild source answering every ID marked (at epoch 1), as the sink would."""

    def source(from_epoch: int):  # type: ignore[no-untyped-def]
        rows = [row for parts in held_ids.values() for ids in parts for row in ids]
        hex_ids = np.array([row.tobytes().hex().encode() for row in rows], dtype="S32")
        yield hex_ids, np.ones(len(hex_ids), dtype=np.int64)

    return source


def test_a_master_restart_keeps_its_shards_and_an_empty_one_is_rebuilt(
    redis_cluster: RedisClusterNodes,  # noqa: F811
    unique_name: str,
) -> None:
    config = DedupConfig(redis_cluster.url, expected_ids=20_000, retention_epochs=8)
    written: dict[int, list[Ids]] = {}
    keeper = CatalogKeeper(config, unique_name, "s", False, rebuild_from(written))
    keeper.open(-1, 6)
    catalog, layout = keeper.catalog, keeper.plan.layout
    instance = keeper.plan.instance
    from exactlyonce.dedup.murmur3 import spark_shard

    ids = random_ids(3_000)
    shards = spark_shard(np.array([i.tobytes().hex().encode() for i in ids], dtype="S32"), 6)
    for shard in range(6):
        mine = ids[shards == shard]
        written[shard] = [mine]
        catalog.mark(instance, layout, shard, 1, mine)
    keeper.after_head(1)
    victim = redis_cluster.port_of(catalog.keys.marker(0))
    redis_cluster.restart(victim)  # SIGKILL, back on its AOF
    assert not keeper.lost(), "a master that restarts on its data keeps its shards"
    assert all(catalog.lookup(instance, layout, s, 2, written[s][0]).all() for s in range(6))

    redis_cluster.restart(victim, empty=True)
    assert keeper.lost(), "the lost master's shard markers are gone: the keeper sees it"
    with pytest.raises(CatalogLostError):
        catalog.lookup(instance, layout, 0, 2, written[0][0])
    keeper.ensure(1)
    assert keeper.rebuilds == 1 and keeper.instance != instance
    plan = keeper.plan
    for shard in range(6):
        assert catalog.lookup(plan.instance, layout, shard, 2, written[shard][0]).all()
        blooms = catalog.load_blooms(plan.instance, layout, shard, [0], {})
        assert blooms[0][1].contains(written[shard][0]).all(), "a complete filter again"
    assert catalog.usage(layout, 2).ids == 3_000, "rebuilt once, from an empty catalog"
    keeper.catalog.close()


def write_layout_1(catalog: RedisCatalog, layout: Layout, ids: Ids, shard: int) -> None:
    """A catalog as the earlier version left it: every key under the query's prefix."""
    p, r = catalog.prefix, catalog.redis
    meta = {"instance": "old-instance", **layout.to_meta()}
    r.hset(f"{p}:meta", mapping=meta)
    numbers = buckets(ids, layout.bucket_bits)
    for b in np.unique(numbers):
        r.append(f"{p}:c:{shard}:0:{b:x}", np.ascontiguousarray(ids[numbers == b]).tobytes())
    bloom = layout.bloom.empty()
    bloom.add(ids)
    r.set(f"{p}:b:{shard}:0", bloom.to_bytes())
    r.set(f"{p}:bv:{shard}:0", 1)
    r.hset(f"{p}:stats", mapping={"ids:0": len(ids), "bytes:0": 1234})
    r.append(f"{p}:j:{shard}:5", np.ascontiguousarray(ids[:10]).tobytes())


def test_a_layout_1_catalog_on_a_standalone_redis_is_moved_and_read_whole(
    services: dict[str, str], unique_name: str
) -> None:
    config = DedupConfig(services["EXACTLYONCE_REDIS_URL"], expected_ids=20_000)
    layout = dataclasses.replace(Layout.plan(config, 2), tracked=False)  # no presence record
    old = RedisCatalog(config, unique_name, "s")
    ids = random_ids(2_000)
    write_layout_1(old, layout, ids, shard=1)
    keeper = CatalogKeeper(config, unique_name, "s", False, None)
    keeper.open(7, 2)  # head 7: the journal of epoch 5 is at or below it, kept as marked
    catalog, plan = keeper.catalog, keeper.plan
    assert plan.instance == "old-instance" and keeper.rebuilds == 0
    assert catalog.lookup(plan.instance, layout, 1, 7, ids).all(), "every ID still found"
    blooms: dict[int, tuple[int, BloomFilter]] = catalog.load_blooms(
        plan.instance, layout, 1, [0], {}
    )
    assert blooms[0][0] == 1 and blooms[0][1].contains(ids).all(), "the filter came along"
    assert catalog.usage(layout, 7).ids == 2_000, "the counters came along"
    assert not catalog.redis.keys(f"{catalog.prefix}:c:*"), "no layout-1 key is left"
    assert catalog.meta()["layout"] == "2"
    catalog.drop()
    catalog.close()


@pytest.mark.parametrize("unique_sink", [True, False])
def test_a_layout_1_catalog_on_a_cluster_is_dropped_and_never_read_as_complete(
    catalog: RedisCatalog, unique_name: str, unique_sink: bool
) -> None:
    layout = dataclasses.replace(Layout.plan(catalog.config, 1), tracked=False)
    ids = random_ids(500)
    p = catalog.prefix  # layout 1's keys all share the query's slot: writable on a cluster
    catalog.redis.hset(f"{p}:meta", mapping={"instance": "old", **layout.to_meta()})
    catalog.redis.append(f"{p}:c:0:0:0", np.ascontiguousarray(ids).tobytes())
    keeper = CatalogKeeper(catalog.config, unique_name, "test-sink", unique_sink, None)
    if not unique_sink:
        with pytest.raises(CatalogLostError, match="cannot rebuild"):
            keeper.open(3, 1)
        return
    keeper.open(3, 1)
    assert keeper.rebuilds == 1 and keeper.plan.instance != "old"
    new_keys = [catalog.keys.meta, catalog.keys.marker(0), catalog.keys.presence(0)]
    new_keys.append(catalog.keys.journal_index(0))
    assert catalog_keys(catalog) == sorted(new_keys)
