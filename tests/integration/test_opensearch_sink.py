"""OpenSearchSink through real Spark (local[2]) against a GENUINE OpenSearch 2.19 node.

The node is the session's one (``opensearch`` fixture, tests/support/opensearch_node.py: the
server's own jars from Maven Central). Writes are counted per ``_id`` by the node itself
(``_version``), read over plain HTTP (tests/support/opensearch_http.py), never through the
sink's client: with ``op_type="index"`` a second write of a record is a second version.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from exactlyonce.buffer import Buffered, Drainer, KafkaBuffer
from exactlyonce.connectors.base.guarantee import FAILING, OK
from exactlyonce.connectors.opensearch import OpenSearchSink
from exactlyonce.connectors.registry import kind_named
from exactlyonce.dedup.ids import record_id
from exactlyonce.errors import ConfigError, SinkUnavailableError
from exactlyonce.integration import cli
from exactlyonce.retry import RetryPolicy
from tests.integration.test_audit_sinks import assert_fails, assert_passes, expected_file
from tests.integration.test_rewind import (
    ALL,
    FIRST,
    REWOUND,
    rewind_and_rerun,
    run_query,
    write_pipeline,
)
from tests.support import opensearch_http as http
from tests.support.events import events, ids
from tests.support.opensearch_node import OpenSearchNode

pytestmark = pytest.mark.integration

FAST = RetryPolicy(attempts=4, initial_s=0.05, max_s=0.5)
CONTROL = "exactlyonce-control"


@pytest.fixture
def index(unique_name: str) -> str:
    return unique_name.replace("_", "-")


def new_sink(node: OpenSearchNode, index: str, **kw: Any) -> OpenSearchSink:
    kw.setdefault("retry_policy", FAST)
    kw.setdefault("shards", 2)
    return OpenSearchSink(node.url, index, ["event_id"], query_name=index, **kw)


def assert_written_once(node: OpenSearchNode, index: str, expected: set[str]) -> None:
    """Every expected ``_id`` present at ``_version`` 1 (written once), nothing else."""
    versions = http.versions(node.url, index)
    doubled = {i: v for i, v in versions.items() if v != 1}
    assert not doubled, f"{len(doubled)} _ids written more than once: {list(doubled.items())[:5]}"
    assert set(versions) == expected, (
        f"{len(expected - set(versions))} missing, {len(set(versions) - expected)} unexpected"
    )


def test_create_writes_every_row_once_and_a_replay_is_skipped(
    spark: SparkSession, services: dict[str, str], opensearch: OpenSearchNode, index: str
) -> None:
    df = events(spark, 0, 500)
    sink = new_sink(opensearch, index)
    sink(df, 0)
    assert sink.last_report is not None and sink.last_report.written == 500
    sink(df, 0)  # Spark re-runs a batch after a crash before its commit log
    assert sink.last_report.skipped
    restarted = new_sink(opensearch, index)  # a new driver reads the head back (realtime GET)
    restarted(df, 0)
    assert restarted.last_report is not None and restarted.last_report.skipped
    assert_written_once(opensearch, index, ids(0, 500))
    head = http.get(opensearch.url, CONTROL, f"{index}|{sink.sink_name}")
    assert head is not None and head["_source"]["epoch"] == 0
    assert head["_source"]["num_shards"] == 2
    doc = http.docs(opensearch.url, index)[record_id(["e7"])]
    assert doc == {"event_id": "e7", "amount": 70, "action": "click", "epoch": 0}


def test_index_mode_skips_committed_shards_and_the_audit_sees_a_second_write(
    spark: SparkSession, services: dict[str, str], opensearch: OpenSearchNode, index: str
) -> None:
    """``op_type="index"``: a shard whose commit document exists is not re-sent, so every
    ``_version`` stays 1; the negative control (another query writing the same ``_id``\\ s)
    shows the count can fail: each of those is at version 2."""
    df = events(spark, 0, 300)
    sink = new_sink(opensearch, index, op_type="index", dedup=False)
    sink.preflight(df.schema)
    tasks = sink._write_epoch(df, 0, 2)  # the driver died before advancing the head
    assert sum(t.written for t in tasks) == 300
    sink(df, 0)  # the re-run finds both shards committed: nothing is re-sent
    assert sink.last_report is not None and sink.last_report.written == 0
    assert_written_once(opensearch, index, ids(0, 300))
    # One shard's commit lost: that shard alone is re-sent (identical overwrite, version 2).
    other = new_sink(opensearch, index, op_type="index", dedup=False, sink_name="second")
    other(events(spark, 0, 100), 0)
    versions = http.versions(opensearch.url, index)
    assert {versions[i] for i in ids(0, 100)} == {2} and {versions[i] for i in ids(100, 300)} == {1}


def test_duplicates_across_epochs_are_409s_never_second_writes(
    spark: SparkSession, services: dict[str, str], opensearch: OpenSearchNode, index: str
) -> None:
    sink = new_sink(opensearch, index, dedup=False)
    first = events(spark, 0, 300)
    sink(first.union(first.limit(40)), 0)  # 40 repeated inside the batch
    sink(events(spark, 250, 400), 1)  # 50 seen in epoch 0: create answers 409
    assert sink.reports[1].duplicates == 50 and sink.reports[1].written == 100
    assert_written_once(opensearch, index, ids(0, 400))


def test_upsert_never_rolls_back_and_tombstones_delete(
    spark: SparkSession, services: dict[str, str], opensearch: OpenSearchNode, index: str
) -> None:
    schema = "k STRING, n BIGINT, gone BOOLEAN"
    older = spark.createDataFrame([(f"k{i}", i, False) for i in range(20)], schema)
    newer = spark.createDataFrame(
        [(f"k{i}", 100 + i, i == 0) for i in range(0, 20, 2)], schema
    )  # k0 deleted at epoch 1
    sink = OpenSearchSink(
        opensearch.url, index, ["k"], index, mode="upsert", tombstone_column="gone",
        shards=2, retry_policy=FAST,
    )  # fmt: skip
    sink(older, 0)
    sink(newer, 1)
    rerun = sink._write_epoch(older, 0, 2)  # an older epoch re-run after a newer one
    assert sum(t.stale for t in rerun) == 10 and sum(t.written for t in rerun) == 10
    held = http.read_index(opensearch.url, index)
    by_key = {src["k"]: (src["n"], version, src["epoch"]) for version, src in held.values()}
    assert "k0" not in by_key, "the tombstone of epoch 1 held against epoch 0's re-run"
    for i in range(1, 20):
        n, version, epoch = by_key[f"k{i}"]
        assert (n, epoch) == ((100 + i, 1) if i % 2 == 0 else (i, 0))
        assert version == epoch, "the epoch is the external version"


def test_bad_records_go_to_the_dead_letter_index_and_the_rest_proceeds(
    spark: SparkSession, services: dict[str, str], opensearch: OpenSearchNode, index: str
) -> None:
    df = events(spark, 0, 200).select(
        F.when(F.col("amount") == 70, None).otherwise(F.col("event_id")).alias("event_id"),
        F.when(F.col("amount") == 1500, "lots")
        .otherwise(F.col("amount").cast("string"))
        .alias("amount"),
        "action",
    )
    sink = new_sink(opensearch, index, mapping={"amount": "long", "action": "keyword"})
    sink(df, 0)
    report = sink.last_report
    assert report is not None and report.dead_letters == 2 and report.written == 198
    letters = http.read_index(opensearch.url, f"{index}-dead-letters")
    assert len(letters) == 2 and {v for v, _ in letters.values()} == {1}
    by_error = sorted((src for _, src in letters.values()), key=lambda d: str(d["error"]))
    assert by_error[0]["error"].startswith("400: mapper_parsing_exception")  # the node's own
    assert by_error[0]["record_id"] == record_id(["e150"])
    assert "null key column(s): event_id" in by_error[1]["error"]
    assert_written_once(opensearch, index, ids(0, 200) - {record_id(["e7"]), record_id(["e150"])})


def test_check_reports_the_guarantee_and_the_indices(
    services: dict[str, str], opensearch: OpenSearchNode, index: str
) -> None:
    sink = new_sink(opensearch, index, check=False)
    before = sink.check()
    assert before.guarantee().name.startswith("EXACTLY ONCE")
    checks = {c.name: c for c in before.preconditions()}
    assert checks["OpenSearch"].status == OK and "version 2.19" in checks["OpenSearch"].detail
    assert checks[f"index {index}"].detail.startswith("absent"), "not created yet"
    sink.preflight()
    after = {c.name: c.status for c in sink.check().preconditions()}
    assert set(after.values()) == {OK}, after
    bad = new_sink(opensearch, f"{index}-bad", epoch_field="at", check=False)
    text = {"mappings": {"properties": {"at": {"type": "text"}}}}
    http.request(opensearch.url, "PUT", f"{index}-bad", text)
    failing = {c.name: c.status for c in bad.check().preconditions()}
    assert failing[f"index {index}-bad"] == FAILING


def test_rewind_removes_the_epochs_above_and_the_rerun_writes_them_again(
    spark: SparkSession, services: dict[str, str], opensearch: OpenSearchNode, index: str
) -> None:
    sink = new_sink(opensearch, index, dedup=False)  # the CLI's rewind forgets the catalog too
    batches = [events(spark, 100 * e, 100 * e + 100) for e in range(3)]
    for epoch, df in enumerate(batches):
        sink(df, epoch)
    rewinder = sink.rewinder()
    assert rewinder.refusal() is None
    planned = {r.what: r.total for r in rewinder.removals_above(0)}
    assert planned[f"documents of {index}"] == 200
    rewinder.rewind_to(0)
    assert set(http.docs(opensearch.url, index)) == ids(0, 100)
    again = new_sink(opensearch, index, dedup=False)
    assert again.head() is not None and again.head().epoch == 0  # type: ignore[union-attr]
    again(batches[1], 1)
    again(batches[2], 2)
    assert sum(r.written for r in again.reports) == 200
    assert set(http.docs(opensearch.url, index)) == ids(0, 300)


def test_the_buffer_drains_into_opensearch_once_then_the_offsets(
    spark: SparkSession, services: dict[str, str], opensearch: OpenSearchNode, index: str
) -> None:
    name = f"t_os_drain_{uuid.uuid4().hex[:8]}"
    sink = OpenSearchSink(opensearch.url, index, ["event_id"], name, retry_policy=FAST)
    buffer = KafkaBuffer(
        topic=name, bootstrap_servers=services["KAFKA_BOOTSTRAP_SERVERS"], partitions=2
    )
    buffered = Buffered(sink, buffer)
    first: DataFrame = events(spark, 0, 300)
    buffered(first.union(first.limit(30)), 0)
    buffered(events(spark, 250, 400), 1)
    with Drainer(sink, buffer, batch_size=100) as drainer:
        report = drainer.drain_available(timeout_s=120)
    assert (report.written, report.dead_letters) == (400, 0)
    with Drainer(sink, buffer) as again:  # restarted: its offsets are read back
        assert again.drain_available(timeout_s=60).written == 0
    assert_written_once(opensearch, index, ids(0, 400))
    assert http.docs(opensearch.url, index)[record_id(["e7"])]["epoch"] == 0


def test_registry_urls_and_refusals(opensearch: OpenSearchNode, unique_name: str) -> None:
    kind = kind_named("opensearch")
    assert kind.sink_class() is OpenSearchSink
    with pytest.raises(ConfigError, match="op_type"):
        OpenSearchSink(opensearch.url, "x", ["k"], "q", mode="upsert", op_type="index", check=False)
    nowhere = OpenSearchSink(
        "http://127.0.0.1:9", "x", ["k"], unique_name, retry_policy=FAST, check=False
    )
    with pytest.raises(SinkUnavailableError, match="OpenSearch at http://127.0.0.1:9"):
        nowhere.preflight()


# -- the product's commands on a pipeline file with `type: opensearch` ---------------------


def opensearch_pipeline(tmp_path: Path, node: OpenSearchNode, name: str) -> tuple[Path, str]:
    index = name.replace("_", "-")
    sink = (
        f"  type: opensearch\n  hosts: {node.url}\n  index: {index}\n"
        f"  control_index: {index}-control\n  id_columns: [event_id]\n  shards: 2\n"
    )
    return write_pipeline(tmp_path, name, sink), index


def test_pipeline_file_check_and_audit_through_the_cli(
    tmp_path: Path,
    spark: SparkSession,
    services: dict[str, str],
    opensearch: OpenSearchNode,
    unique_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``exactlyonce check`` (creating nothing), a query run from a ``type: opensearch``
    pipeline file, ``exactlyonce audit`` passing, then failing on a document rewritten and one
    deleted behind the sink's back (plain HTTP)."""
    config, index = opensearch_pipeline(tmp_path, opensearch, unique_name)
    capsys.readouterr()
    assert cli.main(["check", str(config), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {c["name"] for c in report["checks"]} >= {"OpenSearch", f"index {index}"}
    assert http.versions(opensearch.url, index) == {}, "check created the index"
    run_query(spark, config)
    ids = expected_file(tmp_path)
    assert assert_passes(config, ids, capsys)["rewritten"] == 0
    e3, e4 = record_id(["e3"]), record_id(["e4"])
    http.request(opensearch.url, "PUT", f"{index}/_doc/{e3}", {"event_id": "e3", "n": 0})
    http.delete(opensearch.url, index, e4)
    doc = assert_fails(config, ids, capsys, "e3", "e4")
    assert doc["rewritten"] == 1, doc


def test_the_cli_rewind_procedure(
    tmp_path: Path,
    spark: SparkSession,
    services: dict[str, str],
    opensearch: OpenSearchNode,
    unique_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The README's rewind procedure on a genuine node: the documents above epoch 0 are
    deleted and created again by the re-run. The node's ``_version`` counts that: 1 for what
    the rewind kept, 3 (create, delete, create) for what it removed and the re-run wrote."""
    config, index = opensearch_pipeline(tmp_path, opensearch, unique_name)
    run_query(spark, config)
    rewind_and_rerun(spark, config, capsys, lambda: http.docs(opensearch.url, index))
    versions = http.versions(opensearch.url, index)
    assert set(versions) == ALL
    assert {versions[i] for i in FIRST} == {1}
    assert {versions[i] for i in REWOUND} == {3}
