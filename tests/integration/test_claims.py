"""The claim and registry scripts of the Spark data source path (exactlyonce.dedup.claims)
on the services' Redis and on a real 3-master Redis Cluster: they follow the claim rule,
refuse a lost catalog, and are forgotten with their epoch."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest

from exactlyonce.dedup import claims
from exactlyonce.dedup.catalog import RedisCatalog
from exactlyonce.dedup.config import DedupConfig
from exactlyonce.dedup.layout import Layout
from exactlyonce.errors import CatalogLostError
from tests.support.redis_cluster import RedisClusterNodes

# The services fixture puts the catalog's Redis in the environment these tests read.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("services")]

SHARDS = 4


@pytest.fixture(params=["standalone", "cluster"])
def catalog(
    request: pytest.FixtureRequest, services: dict[str, str], unique_name: str
) -> Iterator[RedisCatalog]:
    if request.param == "cluster":
        nodes: RedisClusterNodes = request.getfixturevalue("redis_cluster")
        url = nodes.url
    else:
        url = os.environ["EXACTLYONCE_REDIS_URL"]
    catalog = RedisCatalog(DedupConfig(url, expected_ids=10_000), unique_name, "kafka:t")
    yield catalog
    catalog.drop()
    catalog.close()


def ids(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 16), dtype=np.uint8)


def test_claims_follow_the_rule(catalog: RedisCatalog) -> None:
    instance = catalog.create(Layout.plan(catalog.config, SHARDS))
    first = claims.PartitionClaims(catalog, instance, 3, 0)
    second = claims.PartitionClaims(catalog, instance, 3, 1)
    shared, own = ids(50, 1), ids(30, 2)
    assert first.claim(2, shared).all(), "unclaimed: the first partition's"
    both = np.concatenate([shared, own])
    got = second.claim(2, both)
    holders = [b"0"] * len(shared) + [None] * len(own)
    assert got.tolist() == claims.claim_decisions(holders, b"1", True)
    assert first.claim(2, both, take=False).tolist() == [True] * 50 + [False] * 30
    assert second.claim(2, both, take=False).tolist() == [False] * 50 + [True] * 30
    assert claims.PartitionClaims(catalog, instance, 4, 1).claim(2, shared).all(), "per epoch"


def test_registry_keeps_the_first_fingerprint(catalog: RedisCatalog) -> None:
    instance = catalog.create(Layout.plan(catalog.config, SHARDS))
    assert claims.PartitionClaims(catalog, instance, 3, 0).register("f0") == "f0"
    assert claims.PartitionClaims(catalog, instance, 3, 0).register("other") == "f0"
    assert claims.PartitionClaims(catalog, instance, 3, 2).register("f2") == "f2"
    assert claims.registered(catalog, instance, 3) == {0: "f0", 2: "f2"}
    assert claims.registered(catalog, instance, 4) == {}


def test_a_lost_catalog_takes_no_claim(catalog: RedisCatalog) -> None:
    instance = catalog.create(Layout.plan(catalog.config, SHARDS))
    catalog.drop()
    with pytest.raises(CatalogLostError):
        claims.PartitionClaims(catalog, instance, 3, 0).claim(1, ids(5, 3))
    with pytest.raises(CatalogLostError):
        claims.PartitionClaims(catalog, instance, 3, 0).register("f")
    with pytest.raises(CatalogLostError):
        claims.registered(catalog, instance, 3)


def test_claims_are_forgotten_with_their_epoch(catalog: RedisCatalog) -> None:
    instance = catalog.create(Layout.plan(catalog.config, SHARDS))
    for epoch in (3, 4, 5):
        for shard in range(SHARDS):
            claims.PartitionClaims(catalog, instance, epoch, 0).claim(shard, ids(5, epoch))
        claims.PartitionClaims(catalog, instance, epoch, 0).register("f")
    claims.forget(catalog, SHARDS, 3)
    assert claims.registered(catalog, instance, 3) == {}
    assert claims.forget_through(catalog, 4) == SHARDS + 1, "epoch 4's claims and registry"
    late = claims.PartitionClaims(catalog, instance, 5, 1)
    assert not late.claim(0, ids(5, 5)).any(), "epoch 5's claims stay"
    assert claims.registered(catalog, instance, 5) == {0: "f"}
