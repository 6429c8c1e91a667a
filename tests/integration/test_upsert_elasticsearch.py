"""ElasticsearchSink(mode="upsert") through real Spark (local[2]).

Runs against a real cluster when ELASTICSEARCH_URL is set, else against lab/es_stand_in/,
whose external versioning is checked against OpenSearch (tests/integration/test_es_stand_in.py).
``sink(df, epoch)`` runs the whole protocol; ``sink._write_epoch(df, epoch, shards)`` runs an
epoch's executor tasks again after the head passed it (a crashed driver's late tasks; the
epoch's shard-commit documents went with the head). Each document's ``_version`` is the
epoch that wrote it (``version_type=external_gte``); the test server also counts every
applied write per ``_id``.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from exactlyonce.connectors.elasticsearch import ElasticsearchSink, RetryPolicy
from exactlyonce.dedup.ids import record_id
from exactlyonce.errors import ConfigError
from tests.support.es_fixtures import EsHandle

pytestmark = pytest.mark.integration

FAST = RetryPolicy(max_retries=5, initial_backoff=0.05, max_backoff=0.5)
SCHEMA = "k STRING, n BIGINT, total BIGINT"
TOMB_SCHEMA = "k STRING, n BIGINT, total BIGINT, gone BOOLEAN"
SHARDS = 3


@pytest.fixture
def index(unique_name: str) -> str:
    return unique_name.replace("_", "-")


def frame(spark: SparkSession, rows: list[tuple[Any, ...]], schema: str = SCHEMA) -> DataFrame:
    return spark.createDataFrame(rows, schema)


def new_sink(es: EsHandle, index: str, **kw: Any) -> ElasticsearchSink:
    return ElasticsearchSink(
        es.url, index, ["k"], index, mode="upsert", shards=SHARDS, retry_policy=FAST, **kw
    )


def stored(es: EsHandle, index: str, keys: list[str]) -> dict[str, tuple[int, int, int]]:
    """key -> (n, total, _version) of the documents found (realtime mget)."""
    with es.client() as client:
        docs = client.mget(index=index, ids=[record_id([k]) for k in keys], realtime=True)["docs"]
    out = {}
    for key, doc in zip(keys, docs, strict=True):
        if doc.get("found"):
            src = doc["_source"]
            assert src["epoch"] == doc["_version"], "the epoch field is the external version"
            out[key] = (int(src["n"]), int(src["total"]), int(doc["_version"]))
    return out


def writes(es: EsHandle, index: str, key: str) -> int | None:
    """Applied writes of ``key``'s document (the test server counts them; None on a real
    cluster, where an external version does not count writes)."""
    return es.server.write_count(index, record_id([key])) if es.server is not None else None


def test_an_older_epoch_rerun_never_rolls_a_value_back(
    spark: SparkSession, es: EsHandle, index: str
) -> None:
    older = frame(spark, [(f"k{i}", 1, i) for i in range(40)])
    newer = frame(spark, [(f"k{i}", 2, 100 + i) for i in range(0, 40, 2)])
    sink = new_sink(es, index, bulk_max_actions=7)
    sink(older, 0)
    sink(newer, 1)
    assert sink.last_report is not None and sink.last_report.written == 20
    rerun = sink._write_epoch(older, 0, SHARDS)  # a 409 each for the 20 newer documents
    assert sum(t.stale for t in rerun) == 20 and sum(t.written for t in rerun) == 20
    assert sum(t.dead_letters for t in rerun) == 0
    sink.reset_head()  # and a query restarted from an older checkpoint
    restarted = new_sink(es, index)
    restarted(older, 0)
    assert restarted.last_report is not None and restarted.last_report.stale == 20
    keys = [f"k{i}" for i in range(40)]
    expected = {f"k{i}": (2, 100 + i, 1) if i % 2 == 0 else (1, i, 0) for i in range(40)}
    assert stored(es, index, keys) == expected
    if es.server is not None:
        assert writes(es, index, "k0") == 2, "epoch 0 then epoch 1; the re-runs: 409s"
        assert writes(es, index, "k1") == 3, "epoch 0, rewritten twice with the same value"


def test_a_replay_of_the_same_epoch_rewrites_the_same_values(
    spark: SparkSession, es: EsHandle, index: str
) -> None:
    df = frame(spark, [(f"k{i}", 1, i) for i in range(30)])
    sink = new_sink(es, index)
    sink(df, 0)
    keys = [f"k{i}" for i in range(30)]
    before = stored(es, index, keys)
    tasks = sink._write_epoch(df, 0, SHARDS)
    assert sum(t.written for t in tasks) == 30 and sum(t.stale for t in tasks) == 0
    assert stored(es, index, keys) == before  # same value, same _version (the epoch)
    if es.server is not None:
        assert {writes(es, index, k) for k in keys} == {2}


def test_tombstones_delete_under_the_same_guard(
    spark: SparkSession, es: EsHandle, index: str
) -> None:
    first = frame(spark, [("a", 1, 1, False), ("b", 1, 2, False), ("c", 1, 3, None)], TOMB_SCHEMA)
    second = frame(spark, [("b", 0, 0, True), ("c", 2, 30, False), ("x", 0, 0, True)], TOMB_SCHEMA)
    sink = new_sink(es, index, tombstone_column="gone")
    sink(first, 0)
    sink(second, 1)
    report = sink.last_report
    assert report is not None and (report.written, report.deleted) == (1, 2)
    keys = ["a", "b", "c", "x"]
    assert stored(es, index, keys) == {"a": (1, 1, 0), "c": (2, 30, 1)}
    # Epoch 0 again, within index.gc_deletes: b and x stay deleted, c stays at epoch 1.
    again = first.union(frame(spark, [("x", 9, 9, False)], TOMB_SCHEMA))
    rerun = sink._write_epoch(again, 0, SHARDS)
    assert sum(t.stale for t in rerun) == 3 and sum(t.written for t in rerun) == 1
    assert stored(es, index, keys) == {"a": (1, 1, 0), "c": (2, 30, 1)}
    sink(frame(spark, [("b", 3, 33, False)], TOMB_SCHEMA), 2)  # a newer epoch brings b back
    got = stored(es, index, keys)
    assert got["b"] == (3, 33, 2)
    with es.client() as client:
        source = client.get(index=index, id=record_id(["b"]))["_source"]
    assert "gone" not in source


def test_within_an_epoch_one_row_per_key_whatever_the_partition_order(
    spark: SparkSession, es: EsHandle, index: str
) -> None:
    rows = [("k1", 1, 10), ("k1", 2, 5), ("k1", 1, 7), ("k2", 4, 4), ("k2", 4, 4), ("k3", 1, 1)]
    sink = new_sink(es, index)
    results = []
    for n, order in enumerate([rows, rows[::-1], rows[2:] + rows[:2]]):
        sink(frame(spark, order).repartition(3 - n % 2), n)
        assert sink.last_report is not None and sink.last_report.duplicates == 3
        results.append({k: v[:2] for k, v in stored(es, index, ["k1", "k2", "k3"]).items()})
    assert results[0] == results[1] == results[2] == {"k1": (2, 5), "k2": (4, 4), "k3": (1, 1)}


def test_upsert_refusals_name_the_field(es: EsHandle) -> None:
    with pytest.raises(ConfigError) as op_type:
        ElasticsearchSink(es.url, "x", ["k"], "q", mode="upsert", op_type="index", check=False)
    assert op_type.value.field == "op_type"
    with pytest.raises(ConfigError) as dedup:
        ElasticsearchSink(es.url, "x", ["k"], "q", mode="upsert", dedup=True, check=False)
    assert dedup.value.field == "dedup"


def test_order_by_picks_the_row_of_a_key_within_an_epoch(
    spark: SparkSession, es: EsHandle, index: str
) -> None:
    rows = [("k1", 9, 100), ("k1", 10, 1), ("k2", 3, 6)]
    sink = new_sink(es, index, order_by="n")
    sink(frame(spark, rows[::-1]).repartition(2), 0)
    got = {k: v[:2] for k, v in stored(es, index, ["k1", "k2"]).items()}
    assert got == {"k1": (10, 1), "k2": (3, 6)}
