"""A fresh worker's first small epoch asks the catalog, not its Bloom filters (real Redis).

Loading a shard's live filters costs in proportion to the catalog (45 MB per shard at 10M
IDs); a restart's first epoch of a few thousand IDs is cheaper to look up exactly. The
answers must be the same either way, and past the load's cost the filters are loaded.
"""

from __future__ import annotations

import numpy as np
import pytest

from exactlyonce.dedup import shard as shard_module
from exactlyonce.dedup.catalog import RedisCatalog
from exactlyonce.dedup.config import DedupConfig
from exactlyonce.dedup.layout import Layout
from exactlyonce.dedup.shard import LOOKUP_BYTES, DedupPlan, TaskDedup
from tests.support.catalogs import random_ids

pytestmark = pytest.mark.integration


@pytest.fixture
def filled(services: dict[str, str], unique_name: str) -> tuple[DedupPlan, np.ndarray]:
    """One shard, filters of 8 Mbit (1 MB: a budget of 1,024 unfiltered IDs), 3,000 IDs of
    epoch 5 marked and in the filter."""
    config = DedupConfig(
        services["EXACTLYONCE_REDIS_URL"], expected_ids=550_000, retention_epochs=8
    )
    layout = Layout.plan(config, 1)
    catalog = RedisCatalog(config, unique_name, "test-sink")
    instance = catalog.create(layout)
    marked = random_ids(3000)
    delta = layout.bloom.empty()
    delta.add(marked)
    catalog.merge_bloom(instance, 0, layout.gen(5), delta)
    catalog.mark(instance, layout, 0, 5, marked)
    catalog.close()
    return DedupPlan(config, unique_name, "test-sink", instance, layout), marked


def budget(plan: DedupPlan) -> int:
    return plan.layout.bloom.bits // 8 // LOOKUP_BYTES


def test_a_small_first_batch_is_looked_up_exactly_without_loading_a_filter(
    filled: tuple[DedupPlan, np.ndarray],
) -> None:
    plan, marked = filled
    assert 900 < budget(plan) < 1100
    ids = np.concatenate((marked[:200], random_ids(600)))
    task = TaskDedup(plan, 6)
    keep = task.keep(np.zeros(len(ids), dtype=np.int64), ids)
    assert keep.tolist() == [False] * 200 + [True] * 600, "marked IDs dropped, new ones kept"
    assert task._filters == {} and not any(
        k[1] == plan.instance for k in shard_module._FILTER_CACHE
    )
    stats = task.stats
    assert (stats.catalog_lookups, stats.catalog_duplicates) == (800, 200)
    assert (stats.bloom_negatives, stats.bloom_false_positives) == (0, 0)
    task.close()


def test_past_the_cost_of_a_load_the_filters_are_loaded_and_answers_stay_exact(
    filled: tuple[DedupPlan, np.ndarray],
) -> None:
    plan, marked = filled
    task = TaskDedup(plan, 6)
    shards = np.zeros(600, dtype=np.int64)
    first = np.concatenate((marked[:100], random_ids(500)))
    assert task.keep(shards, first).sum() == 500
    assert task._filters == {}, "600 IDs: within the budget"
    second = np.concatenate((marked[100:200], random_ids(500)))
    assert task.keep(shards, second).tolist() == [False] * 100 + [True] * 500
    assert 0 in task._filters, "1,200 IDs: the filters are loaded"
    assert task.stats.bloom_negatives > 0
    assert task.stats.catalog_duplicates == 200
    task.close()
    again = TaskDedup(plan, 6)  # the next task of this worker uses the cached filters
    third = np.concatenate((marked[200:210], random_ids(10)))
    assert again.keep(np.zeros(20, dtype=np.int64), third).tolist() == [False] * 10 + [True] * 10
    assert again.stats.bloom_negatives > 0
    again.close()
