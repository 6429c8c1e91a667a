"""ElasticsearchSink through real Spark (local[2]), batch by batch.

Runs against a real cluster when ELASTICSEARCH_URL is set, else against lab/es_stand_in/
(the pytest summary says which). Write counts are per-``_id`` write counters (test server)
or ``_version`` (real cluster): a second write of an ``_id`` is seen even when it overwrote
the first. Fault injection (429s, lost replies) needs the test server; against a real
cluster those tests are skipped and say so.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from exactlyonce.connectors.elasticsearch import ElasticsearchSink, RetryPolicy
from exactlyonce.dedup.ids import record_id
from exactlyonce.errors import ConfigError, SinkUnavailableError
from exactlyonce.integration.lab.es_stand_in import EsTestServer
from tests.support.es_fixtures import EsHandle
from tests.support.events import events, ids

pytestmark = pytest.mark.integration

FAST = RetryPolicy(max_retries=5, initial_backoff=0.05, max_backoff=0.5)


@pytest.fixture
def index(unique_name: str) -> str:
    return unique_name.replace("_", "-")


def new_sink(es: EsHandle, index: str, **kw: Any) -> ElasticsearchSink:
    kw.setdefault("retry_policy", FAST)
    kw.setdefault("shards", 2)
    return ElasticsearchSink(es.url, index, ["event_id"], query_name=index, **kw)


def assert_exactly_once(es: EsHandle, index: str, expected: set[str]) -> None:
    writes = es.writes(index)
    doubled = {i: n for i, n in writes.items() if n > 1}
    assert not doubled, f"{len(doubled)} _ids written more than once: {list(doubled.items())[:5]}"
    missing, unexpected = expected - set(writes), set(writes) - expected
    assert not missing, f"{len(missing)} expected _ids missing from {index}"
    assert not unexpected, f"{len(unexpected)} unexpected _ids in {index}"


def test_epoch_writes_every_row_once_and_replay_is_skipped(
    spark: SparkSession, services: dict[str, str], es: EsHandle, index: str
) -> None:
    df = events(spark, 0, 500)
    sink = new_sink(es, index)
    sink(df, 0)
    assert sink.last_report is not None and sink.last_report.written == 500
    sink(df, 0)  # Spark re-runs a batch after a crash before its commit log
    assert sink.last_report.skipped
    restarted = new_sink(es, index)  # a new driver reads the head back (realtime GET)
    restarted(df, 0)
    assert restarted.last_report is not None and restarted.last_report.skipped
    assert_exactly_once(es, index, ids(0, 500))
    head = restarted.head()
    assert head is not None and head.epoch == 0 and head.num_shards == 2
    doc = es.docs(index)[record_id(["e7"])]
    assert doc == {"event_id": "e7", "amount": 70, "action": "click", "epoch": 0}


@pytest.mark.parametrize("dedup", [True, False], ids=["catalog", "no-catalog"])
def test_duplicates_within_and_across_epochs(
    spark: SparkSession, services: dict[str, str], es: EsHandle, index: str, dedup: bool
) -> None:
    first = events(spark, 0, 300)
    first = first.union(first.limit(60))  # 60 repeated inside the batch
    sink = new_sink(es, index, dedup=dedup)
    sink(first, 0)
    sink(events(spark, 250, 400), 1)  # 50 IDs seen in epoch 0
    # With the catalog, repeats never reach the cluster; without it, `create` answers 409.
    assert sink.reports[0].duplicates == 60 and sink.reports[0].written == 300
    assert sink.reports[1].duplicates == 50 and sink.reports[1].written == 100
    assert_exactly_once(es, index, ids(0, 400))


def test_committed_shards_are_skipped_when_the_head_did_not_advance(
    spark: SparkSession, services: dict[str, str], es: EsHandle, index: str
) -> None:
    sink = new_sink(es, index)
    sink(events(spark, 0, 400), 0)
    # The driver dies after the tasks of epoch 1 committed, before the head advanced.
    sink._write_epoch(events(spark, 400, 800), 1, 2)
    assert new_sink(es, index).head().epoch == 0  # type: ignore[union-attr]
    rerun = new_sink(es, index)
    rerun(events(spark, 400, 800), 1)
    report = rerun.last_report
    assert report is not None and report.shards_skipped == 2 and report.written == 0
    assert_exactly_once(es, index, ids(0, 800))


@pytest.mark.parametrize("op_type", ["create", "index"])
def test_create_keeps_the_first_version_index_overwrites(
    spark: SparkSession, services: dict[str, str], es: EsHandle, index: str, op_type: str
) -> None:
    sink = new_sink(es, index, op_type=op_type, dedup=False)
    sink(events(spark, 0, 100), 0)
    changed = events(spark, 0, 100).withColumn("amount", F.col("amount") + 1)
    sink(changed, 1)
    docs, writes = es.docs(index), es.writes(index)
    e5 = docs[record_id(["e5"])]
    if op_type == "create":
        assert sink.reports[1].duplicates == 100 and sink.reports[1].written == 0
        assert (e5["amount"], e5["epoch"]) == (50, 0)
        assert set(writes.values()) == {1}
    else:
        assert sink.reports[1].written == 100
        assert (e5["amount"], e5["epoch"]) == (51, 1)
        assert set(writes.values()) == {2}  # the counter sees the overwrite


def test_429_retries_only_the_rejected_items(
    spark: SparkSession, services: dict[str, str], es: EsHandle, index: str
) -> None:
    server = es.require_server("429 injection")
    sink = new_sink(es, index)
    server.reject_bulk_items(7)
    sink(events(spark, 0, 300), 0)
    assert sink.last_report is not None and sink.last_report.written == 300
    attempts = server.attempts(index)
    assert sum(attempts.values()) == 300 + 7, "only the 7 rejected items were sent again"
    assert sorted(attempts.values()).count(2) == 7
    assert_exactly_once(es, index, ids(0, 300))


def test_429s_past_max_retries_fail_the_task_and_a_rerun_completes(
    spark: SparkSession, services: dict[str, str], es: EsHandle, index: str
) -> None:
    server = es.require_server("429 injection")
    policy = RetryPolicy(max_retries=2, initial_backoff=0.05, max_backoff=0.1)
    sink = new_sink(es, index, retry_policy=policy)
    sink(events(spark, 0, 100), 0)
    server.reject_for(30)
    with pytest.raises(Exception, match="still failed"):
        sink(events(spark, 100, 300), 1)
    assert sink.head().epoch == 0  # type: ignore[union-attr]
    server.reset_faults()
    sink(events(spark, 100, 300), 1)  # Spark re-runs the failed batch after the restart
    assert_exactly_once(es, index, ids(0, 300))


def test_bad_records_go_to_the_dead_letter_index_and_the_rest_proceeds(
    spark: SparkSession, services: dict[str, str], es: EsHandle, index: str
) -> None:
    df = events(spark, 0, 200).select(
        F.when(F.col("amount") == 70, None).otherwise(F.col("event_id")).alias("event_id"),
        F.when(F.col("amount") == 1500, "lots")
        .otherwise(F.col("amount").cast("string"))
        .alias("amount"),
        "action",
    )
    sink = new_sink(es, index, mapping={"amount": "long", "action": "keyword"}, dedup=False)
    sink.preflight(df.schema)
    first = sink._write_epoch(df, 0, 2)
    assert sum(t.dead_letters for t in first) == 2 and sum(t.written for t in first) == 198
    # The driver died, and the shard commits were never written: the epoch runs again in full.
    with es.client() as client:
        for shard in (0, 1):
            client.delete(index="exactlyonce-control", id=f"{index}|{sink.sink_name}|0|{shard}")
    sink(df, 0)
    report = sink.last_report
    assert report is not None and report.dead_letters == 2
    assert report.duplicates == 198 and report.written == 0  # re-sent: 409, harmless
    letters = es.docs(f"{index}-dead-letters")
    assert len(letters) == 2 and set(es.writes(f"{index}-dead-letters").values()) == {1}
    by_error = sorted(letters.values(), key=lambda d: str(d["error"]))
    assert by_error[0]["error"].startswith("400: ")  # the cluster's own reason follows
    assert by_error[0]["record_id"] == record_id(["e150"])
    assert '"amount": "lots"' in by_error[0]["payload"]
    assert "null key column(s): event_id" in by_error[1]["error"]
    assert '"amount":"70"' in by_error[1]["payload"]
    assert all(d["epoch"] == 0 and d["query_name"] == index for d in letters.values())
    assert_exactly_once(es, index, ids(0, 200) - {record_id(["e7"]), record_id(["e150"])})


def test_a_lost_bulk_reply_is_retried_and_ends_exactly_once(
    spark: SparkSession, services: dict[str, str], es: EsHandle, index: str
) -> None:
    server = es.require_server("dropping a reply after applying the bulk")
    sink = new_sink(es, index, dedup=False)
    dropped = server.dropped_replies
    server.drop_after_apply(2)  # both tasks' first data bulk, or a data and a commit bulk
    sink(events(spark, 0, 400), 0)
    assert server.dropped_replies == dropped + 2
    report = sink.last_report
    assert report is not None and report.written == 400 and report.duplicates == 0
    assert_exactly_once(es, index, ids(0, 400))


def test_column_types_become_json(
    spark: SparkSession, services: dict[str, str], es: EsHandle, index: str
) -> None:
    df = spark.sql(
        "SELECT 'k1' AS event_id, CAST(NULL AS STRING) AS nothing, "
        "TIMESTAMP '2024-01-02 03:04:05.123456' AS ts, DATE '2024-01-02' AS d, true AS b, "
        "CAST(1.25 AS DECIMAL(10,2)) AS dec, CAST('hi' AS BINARY) AS bin, array(1, 2) AS arr, "
        "named_struct('x', 1) AS st, map('a', 1) AS m"
    )
    new_sink(es, index)(df, 0)
    doc = es.docs(index)[record_id(["k1"])]
    assert doc == {
        "event_id": "k1",
        "nothing": None,
        "ts": "2024-01-02T03:04:05.123456+00:00",
        "d": "2024-01-02",
        "b": True,
        "dec": 1.25,
        "bin": "aGk=",
        "arr": [1, 2],
        "st": {"x": 1},
        "m": {"a": 1},
        "epoch": 0,
    }


def test_preflight_names_the_problem_without_secrets(
    spark: SparkSession, services: dict[str, str], es: EsHandle, index: str
) -> None:
    secret = "s3cret-pw"
    with pytest.raises(SinkUnavailableError, match="cannot reach") as err:
        ElasticsearchSink(
            f"http://elastic:{secret}@127.0.0.1:1",
            index,
            ["event_id"],
            query_name=index,
            retry_policy=RetryPolicy(max_retries=1, initial_backoff=0.01),
        )
    assert secret not in str(err.value) and "***" in str(err.value)
    with EsTestServer(basic_auth=("elastic", "right-pw")) as locked:
        for auth in ({"basic_auth": ("elastic", secret)}, {"api_key": secret}):
            with pytest.raises(ConfigError, match="refused the credentials") as cfg:
                ElasticsearchSink(locked.url, index, ["event_id"], query_name=index, **auth)
            assert secret not in str(cfg.value) and secret not in repr(cfg.value.__dict__)
        ok = ElasticsearchSink(
            locked.url, index, ["event_id"], query_name=index, basic_auth="elastic:right-pw"
        )
        assert secret not in repr(ok.__dict__) and "right-pw" not in repr(ok.__dict__)
    with pytest.raises(ConfigError, match="index"):
        new_sink(es, "Not Valid")
    sink = new_sink(es, index)
    with pytest.raises(ConfigError, match="epoch"):
        sink.preflight(events(spark, 0, 1).withColumn("epoch", F.lit(1)).schema)
    with pytest.raises(ConfigError, match="id_columns"):
        sink.preflight(events(spark, 0, 1).drop("event_id").schema)


def test_counts_are_writes_not_documents(es: EsHandle, index: str) -> None:
    """The write counter sees a second write that the unique _id hides: the check can fail."""
    with es.client() as client:
        client.index(index=index, id="a", document={"n": 1})
        client.index(index=index, id="b", document={"n": 1})
        client.index(index=index, id="a", document={"n": 1})
    assert es.writes(index) == {"a": 2, "b": 1}
    with pytest.raises(AssertionError, match="written more than once"):
        assert_exactly_once(es, index, {"a", "b"})


def test_a_lost_reply_to_the_head_write_is_verified_by_reading_it(
    spark: SparkSession, services: dict[str, str], es: EsHandle, index: str
) -> None:
    server = es.require_server("dropping the reply to a document write")
    sink = new_sink(es, index)
    sink(events(spark, 0, 50), 0)
    dropped = server.dropped_replies
    server.drop_after_apply(1, what="doc")  # the head's update is applied, its reply lost
    sink(events(spark, 50, 100), 1)
    assert server.dropped_replies == dropped + 1
    restarted = new_sink(es, index)
    assert restarted.head().epoch == 1  # type: ignore[union-attr]
    restarted(events(spark, 50, 100), 1)
    assert restarted.last_report is not None and restarted.last_report.skipped
    assert_exactly_once(es, index, ids(0, 100))
