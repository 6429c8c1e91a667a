"""The obligations of :mod:`exactlyonce.testing`'s fakes: the head store's, the shard commit's,
and the real catalog code running on :class:`MemoryRedis` (the real-Redis catalog tests, run
here on the fake)."""

from __future__ import annotations

import pickle
import textwrap

import pytest

import exactlyonce.testing
from exactlyonce.connectors.base import Head
from exactlyonce.dedup.catalog import RedisCatalog
from exactlyonce.dedup.ids import record_id
from exactlyonce.testing import (
    MemoryHeadStore,
    MemoryRedis,
    MemorySink,
    MemoryStore,
    ShardCommittedError,
    run_in_process,
)
from tests.integration import test_catalog as catalog_tests


@pytest.fixture
def heads() -> MemoryHeadStore:
    return MemoryHeadStore(MemoryStore(), "q", "memory:t")


def test_the_head_never_moves_backwards(heads: MemoryHeadStore) -> None:
    heads.create_head(Head(-1, "spark-1", 2))
    heads.advance_head(5, "spark-1")
    heads.advance_head(3, "spark-1")  # an older driver, late
    heads.advance_head(5, None)  # again: idempotent
    assert heads.read_head() == Head(5, "spark-1", 2)


def test_create_head_does_not_overwrite(heads: MemoryHeadStore) -> None:
    heads.create_head(Head(-1, "spark-1", 2))
    heads.advance_head(4, "spark-1")
    heads.create_head(Head(-1, "spark-2", 8))  # a racing start
    assert heads.read_head() == Head(4, "spark-1", 2)


def test_bind_query_id_never_replaces_one(heads: MemoryHeadStore) -> None:
    heads.create_head(Head(-1, None, 2))
    heads.bind_query_id("spark-1")
    heads.bind_query_id("spark-2")
    assert heads.read_head() == Head(-1, "spark-1", 2)


def test_advance_drops_shard_commits_at_or_below_the_head_only(heads: MemoryHeadStore) -> None:
    store, key = heads.store, heads.key
    store.create_table("t", None)
    heads.create_head(Head(-1, None, 2))
    for epoch in (3, 4, 5):
        store.commit(key, epoch, "t", [], [], [0])
    heads.advance_head(4, None)
    assert [store.committed_shards(key, e) for e in (3, 4, 5)] == [set(), set(), {0}]
    heads.reset_head()
    assert heads.read_head() is None and store.committed_shards(key, 5) == set()


def test_a_second_commit_of_a_committed_shard_is_refused_whole() -> None:
    store = MemoryStore()
    store.create_table("t", None)
    key = ("q", "memory:t")
    assert store.commit(key, 0, "t", [{"record_id": "a"}], [], [0, 1]) == 1
    with pytest.raises(ShardCommittedError):
        store.commit(key, 0, "t", [{"record_id": "b"}], [], [1, 2])
    assert store.rows("t") == [{"record_id": "a"}], "nothing of the refused commit is visible"
    assert store.committed_shards(key, 0) == {0, 1}


def test_a_unique_index_skips_rewritten_ids_and_the_counter_still_sees_them() -> None:
    store = MemoryStore()
    sink = MemorySink(store, "t", ["k"], "q", shards=2, dedup=False)
    run_in_process(sink, 0, [{"k": "a"}, {"k": "b"}])
    sink.reset_head()  # a fresh start re-writes epoch 0
    report = run_in_process(sink, 0, [{"k": "a"}, {"k": "c"}])
    assert sorted(r["k"] for r in store.rows("t")) == ["a", "b", "c"]
    assert (report.written, report.duplicates) == (1, 1)
    assert store.write_attempts[record_id(["a"])] == 2


def test_a_null_key_is_a_dead_letter() -> None:
    store = MemoryStore()
    sink = MemorySink(store, "t", ["k"], "q", shards=2, dedup=False)
    report = run_in_process(sink, 0, [{"k": "a"}, {"k": None}])
    assert report.dead_letters == 1 and [r["k"] for r in store.rows("t")] == ["a"]
    assert store.dead_letters["t"][0].error == "null key column(s): k"


def test_the_fakes_refuse_to_leave_the_process() -> None:
    for fake in (MemoryStore(), MemoryRedis()):
        with pytest.raises(TypeError, match="in-process"):
            pickle.dumps(fake)


def test_the_module_example_runs() -> None:
    doc = exactlyonce.testing.__doc__ or ""
    code = doc.split("::\n", 1)[1].split("\nA :class:`MemoryStore` and", 1)[0]
    exec(textwrap.dedent(code), {})


# -- the catalog's own tests, on the fake ----------------------------------------------


@pytest.fixture
def catalog(unique_name: str) -> RedisCatalog:
    config = MemoryRedis().dedup_config(expected_ids=200_000, retention_epochs=8)
    return RedisCatalog(config, unique_name, "test-sink")


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
