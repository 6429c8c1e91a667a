"""The Redis catalog against a real Redis: exact lookups, rollback, expiry, loss, memory."""

from __future__ import annotations

import os

import numpy as np
import pytest

from exactlyonce.dedup.catalog import RedisCatalog
from exactlyonce.dedup.config import DedupConfig
from exactlyonce.dedup.layout import MAX_PER_CALL, Layout
from exactlyonce.dedup.murmur3 import spark_hash, spark_shard
from exactlyonce.errors import CatalogLostError

pytestmark = pytest.mark.integration


def random_ids(n: int) -> np.ndarray:
    return np.frombuffer(os.urandom(16 * n), dtype=np.uint8).reshape(n, 16)


@pytest.fixture
def catalog(services: dict[str, str], unique_name: str) -> RedisCatalog:
    config = DedupConfig(
        services["EXACTLYONCE_REDIS_URL"], expected_ids=200_000, retention_epochs=8
    )
    return RedisCatalog(config, unique_name, "test-sink")


def test_marked_ids_are_found_and_others_are_not(catalog: RedisCatalog) -> None:
    layout = Layout.plan(catalog.config, 2)
    instance = catalog.create(layout)
    marked, fresh = random_ids(30_000), random_ids(30_000)
    catalog.mark(instance, layout, 1, 5, marked)
    assert catalog.lookup(instance, layout, 1, 5, marked).all()
    assert not catalog.lookup(instance, layout, 1, 5, fresh).any()
    assert not catalog.lookup(instance, layout, 0, 5, marked).any(), "shards are separate"


def test_a_bucket_of_more_ids_than_one_script_step_takes_is_marked_whole(
    services: dict[str, str], unique_name: str
) -> None:
    # expected_ids small enough for bucket_bits 0: every ID lands in ONE bucket, so the
    # marks and lookups split it into groups of MAX_PER_CALL (5,000 IDs: 3 groups).
    config = DedupConfig(services["EXACTLYONCE_REDIS_URL"], expected_ids=64, retention_epochs=1)
    catalog = RedisCatalog(config, unique_name, "test-sink")
    layout = Layout.plan(config, 1)
    assert layout.bucket_bits == 0
    instance = catalog.create(layout)
    marked, fresh = random_ids(2 * MAX_PER_CALL + 1000), random_ids(3000)
    catalog.mark(instance, layout, 0, 1, marked)
    assert catalog.lookup(instance, layout, 0, 1, marked).all()
    assert not catalog.lookup(instance, layout, 0, 1, fresh).any()
    both = np.concatenate((fresh[:500], marked[-500:], fresh[500:600]))
    assert (
        catalog.lookup(instance, layout, 0, 1, both).tolist()
        == [False] * 500 + [True] * 500 + [False] * 100
    )


def test_rollback_drops_only_epochs_above_the_head(catalog: RedisCatalog) -> None:
    layout = Layout.plan(catalog.config, 1)
    instance = catalog.create(layout)
    old, new = random_ids(1_000), random_ids(1_000)
    catalog.mark(instance, layout, 0, 3, old)
    catalog.mark(instance, layout, 0, 4, new)
    assert catalog.roll_back_above(layout, head_epoch=3) == 1_000
    assert catalog.lookup(instance, layout, 0, 4, old).all()
    assert not catalog.lookup(instance, layout, 0, 4, new).any()


def test_generations_expire_after_the_retention_window(catalog: RedisCatalog) -> None:
    layout = Layout.plan(catalog.config, 1)
    instance = catalog.create(layout)
    ids = random_ids(500)
    catalog.mark(instance, layout, 0, 0, ids)
    last_remembered = 0
    for epoch in range(1, 40):
        if catalog.lookup(instance, layout, 0, epoch, ids).all():
            last_remembered = epoch
        if epoch % layout.gen_epochs == 0:
            catalog.expire_before(layout, epoch)
    assert last_remembered >= catalog.config.retention_epochs, "kept for the whole window"
    assert not catalog.lookup(instance, layout, 0, 39, ids).any(), "then forgotten"
    assert not catalog.redis.keys(catalog.keys.bucket_prefix(0, 0) + "*"), "expired keys deleted"


def test_a_catalog_that_lost_its_data_says_so(catalog: RedisCatalog) -> None:
    layout = Layout.plan(catalog.config, 2)
    instance = catalog.create(layout)
    assert catalog.holds_instance(instance, layout.shards)
    # What a restart without persistence does to the shard's keys (on a cluster: the
    # master holding shard 1 alone); the other shard still answers.
    catalog.redis.delete(catalog.keys.marker(1))
    with pytest.raises(CatalogLostError):
        catalog.lookup(instance, layout, 1, 1, random_ids(10))
    with pytest.raises(CatalogLostError):
        catalog.mark(instance, layout, 1, 1, random_ids(10))
    with pytest.raises(CatalogLostError):
        catalog.merge_bloom(instance, 1, 0, layout.bloom.empty())
    with pytest.raises(CatalogLostError):
        catalog.load_blooms(instance, layout, 1, [0], {})
    assert not catalog.lookup(instance, layout, 0, 1, random_ids(10)).any()
    assert not catalog.holds_instance(instance, layout.shards), "the keeper sees the loss"


def test_redis_memory_per_live_id_is_at_most_64_bytes(catalog: RedisCatalog) -> None:
    layout = Layout.plan(catalog.config, 1)
    instance = catalog.create(layout)
    catalog.mark(instance, layout, 0, 1, random_ids(100_000))
    per_id = catalog.memory_per_id(layout, 1)
    assert per_id is not None and per_id <= 64, per_id


def test_shards_match_spark(spark: object) -> None:
    from pyspark.sql import functions as F

    ids = [f"{i:032x}" for i in range(0, 5_000_000, 997)]
    df = spark.createDataFrame([(i,) for i in ids], "id string")  # type: ignore[attr-defined]
    rows = df.select("id", F.hash("id").alias("h"), F.pmod(F.hash("id"), F.lit(5)).alias("s"))
    got = {r.id: (r.h, r.s) for r in rows.collect()}
    ours_hash, ours_shard = spark_hash(ids), spark_shard(ids, 5)
    assert all(
        got[i] == (int(h), int(s)) for i, h, s in zip(ids, ours_hash, ours_shard, strict=True)
    )
