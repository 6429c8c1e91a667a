"""A delta filter sent as its set bits persists the same bytes as the whole delta (real Redis
and the scripts' Python twin)."""

from __future__ import annotations

import numpy as np
import pytest

from exactlyonce.dedup.catalog import RedisCatalog, redis_bit_offsets
from exactlyonce.dedup.config import DedupConfig
from exactlyonce.dedup.layout import Layout
from exactlyonce.errors import CatalogLostError
from tests.support.catalogs import CATALOG_BACKENDS, random_ids, small_catalog_config

pytestmark = pytest.mark.integration


@pytest.fixture(params=CATALOG_BACKENDS)
def config(request: pytest.FixtureRequest, services: dict[str, str]) -> DedupConfig:
    return small_catalog_config(request.param, services)


def test_redis_offsets_name_the_same_bits() -> None:
    bits = np.array([0, 1, 7, 8, 15, 8], dtype=np.uint64)
    assert redis_bit_offsets(bits).tolist() == [7, 6, 0, 15, 8]


def test_bits_and_whole_deltas_persist_the_same_filter_version_and_counters(
    config: DedupConfig, unique_name: str
) -> None:
    layout = Layout.plan(config, 2)
    spec = layout.bloom
    dense = RedisCatalog(config, unique_name + "-dense", "test-sink")
    sparse = RedisCatalog(config, unique_name + "-sparse", "test-sink")
    instances = dense.create(layout), sparse.create(layout)
    for batch in (random_ids(50), random_ids(300), random_ids(1)):  # the first: a new key
        delta = spec.empty()
        delta.add(batch)
        at = spec.bit_numbers(batch)
        v1 = dense.merge_bloom(instances[0], 1, 2, delta)
        v2 = sparse.merge_bloom_bits(instances[1], 1, 2, at.indexes, spec)
        assert v1 == v2
        assert dense.redis.get(dense.keys.bloom(1, 2)) == sparse.redis.get(sparse.keys.bloom(1, 2))
    assert len(sparse.redis.get(sparse.keys.bloom(1, 2))) == spec.bits // 8
    assert dense.stats(2) == sparse.stats(2)
    loaded = sparse.load_blooms(instances[1], layout, 1, [2], {})[2][1]
    assert loaded.contains(batch).all()


def test_a_missing_filter_fails_a_merge_of_bits(config: DedupConfig, unique_name: str) -> None:
    layout = Layout.plan(config, 2)
    catalog = RedisCatalog(config, unique_name, "test-sink")
    instance = catalog.create(layout)
    ids = random_ids(10)
    at = layout.bloom.bit_numbers(ids)
    assert at is not None
    catalog.merge_bloom_bits(instance, 1, 2, at.indexes, layout.bloom)
    catalog.redis.delete(catalog.keys.bloom(1, 2))
    with pytest.raises(CatalogLostError):
        catalog.merge_bloom_bits(instance, 1, 2, at.indexes, layout.bloom)
    assert catalog.markers(2)[1] is None


def test_a_task_sends_few_new_ids_as_bits_and_the_workers_cache_stays_complete(
    services: dict[str, str], unique_name: str
) -> None:
    from exactlyonce.dedup import shard as shard_module
    from exactlyonce.dedup.shard import DedupPlan, TaskDedup

    config = DedupConfig(services["EXACTLYONCE_REDIS_URL"], expected_ids=2_000_000)
    layout = Layout.plan(config, 1)
    catalog = RedisCatalog(config, unique_name, "test-sink")
    instance = catalog.create(layout)
    plan = DedupPlan(config, unique_name, "test-sink", instance, layout)
    zeros = np.zeros(5000, dtype=np.int64)
    first = TaskDedup(plan, 3)
    big = random_ids(5000)  # past the unfiltered budget: the filters are loaded and cached
    assert first.keep(zeros, big).all()
    first.after_commit()
    first.close()
    cached = shard_module._FILTER_CACHE[(catalog.prefix, instance, 0)]
    persisted = catalog.load_blooms(instance, layout, 0, layout.live(3), {})
    assert cached[layout.gen(3)][0] == persisted[layout.gen(3)][0], "cache kept current"
    assert cached[layout.gen(3)][1].to_bytes() == persisted[layout.gen(3)][1].to_bytes()
    again = TaskDedup(plan, 4)
    replay = np.concatenate((big[:2000], random_ids(3000)))
    assert again.keep(zeros, replay).tolist() == [False] * 2000 + [True] * 3000
    assert again.stats.bloom_negatives > 0 and again.stats.catalog_duplicates == 2000
    again.close()


@pytest.mark.parametrize("expected_ids", [50_000, 5_000_000], ids=["whole-delta", "bits"])
def test_a_task_of_many_batches_persists_the_filter_of_all_its_ids(
    services: dict[str, str], unique_name: str, expected_ids: int
) -> None:
    """Batch by batch (a part per ``keep``, some re-marked without positions), whether sent as
    a whole delta or as bits: the persisted filter is the one of all the task's IDs."""
    from exactlyonce.dedup.shard import DedupPlan, TaskDedup

    config = DedupConfig(services["EXACTLYONCE_REDIS_URL"], expected_ids=expected_ids)
    layout = Layout.plan(config, 1)
    catalog = RedisCatalog(config, unique_name, "test-sink")
    instance = catalog.create(layout)
    plan = DedupPlan(config, unique_name, "test-sink", instance, layout)
    task = TaskDedup(plan, 3)
    batches = [random_ids(n) for n in (3000, 1, 2500)]
    for ids in batches:
        assert task.keep(np.zeros(len(ids), dtype=np.int64), ids).all()
    again = random_ids(40)  # an earlier attempt's, re-marked: no positions
    task.remember_committed(np.zeros(len(again), dtype=np.int64), again)
    task.after_commit()
    task.close()
    whole = layout.bloom.empty()
    whole.add(np.concatenate([*batches, again]))
    persisted = catalog.load_blooms(instance, layout, 0, layout.live(3), {})
    assert persisted[layout.gen(3)][1].to_bytes() == whole.to_bytes()
