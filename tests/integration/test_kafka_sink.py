"""KafkaSink against the local Kafka-protocol broker and real Spark (local[2]), batch by batch.

Output is checked with kafka-python (tests/support/kafka_audit.py), which implements the consumption
recipe independently of the sink's own reader. Where the preflight probe measured that the
broker hides aborted records (Apache Kafka), a plain read_committed read must be exactly-once
too; on a broker that does not (Tansu), only the recipe is.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

import pyarrow as pa
import pytest
import redis
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from exactlyonce.connectors import ConfigError, SinkUnavailableError
from exactlyonce.connectors.base import (
    ERROR_COLUMN,
    PAYLOAD_COLUMN,
    SHARD_COLUMN,
    TaskResult,
)
from exactlyonce.connectors.kafka import (
    ID_COLUMN,
    VALUE_COLUMN,
    KafkaShardTask,
    KafkaSink,
    KafkaTarget,
    transactional_id,
)
from exactlyonce.connectors.kafka.reader import headers_of, read_exactly_once
from exactlyonce.dedup.catalog import namespace
from exactlyonce.dedup.ids import record_id
from exactlyonce.errors import AmbiguousCommitError
from exactlyonce.secrets import Secret
from tests.support.events import BATCH_QUERY_ID, events, ids
from tests.support.kafka_audit import KafkaAudit, audit

pytestmark = pytest.mark.integration


def new_sink(bootstrap: str, name: str, **kw: Any) -> KafkaSink:
    kw.setdefault("create_topic", True)
    kw.setdefault("partitions", 3)
    return KafkaSink(bootstrap, name, ["event_id"], query_name=name, **kw)


def checked(bootstrap: str, sink: KafkaSink, expected: set[str]) -> KafkaAudit:
    result = audit(bootstrap, sink.topic, sink.query_name, read_committed=bool(sink.hides_aborted))
    result.assert_exactly_once(expected)
    if sink.hides_aborted:
        assert result.naive_extra == 0 and set(result.naive) == expected
    return result


def test_epoch_writes_every_row_once_and_replay_is_skipped(
    spark: SparkSession, bootstrap: str, unique_name: str
) -> None:
    df = events(spark, 0, 500)
    sink = new_sink(bootstrap, unique_name)
    sink(df, 0)
    assert sink.last_report is not None and sink.last_report.written == 500
    sink(df, 0)  # Spark re-runs a batch after a crash before its commit log
    assert sink.last_report.skipped
    restarted = new_sink(bootstrap, unique_name)  # a new driver reads the head back
    restarted(df, 0)
    assert restarted.last_report is not None and restarted.last_report.skipped
    checked(bootstrap, sink, ids(0, 500))
    head = restarted.head()
    assert head is not None and head.epoch == 0
    # the library's own reader (confluent-kafka) agrees with the independent audit
    read = read_exactly_once(bootstrap, unique_name, unique_name)
    got = [headers_of(m)["eo-record-id"].decode() for m in read]
    assert sorted(got) == sorted(ids(0, 500))
    assert sum(read.positions.values()) >= 500


def test_duplicates_within_and_across_epochs_are_produced_once(
    spark: SparkSession, bootstrap: str, unique_name: str
) -> None:
    first = events(spark, 0, 300)
    first = first.union(first.limit(60))  # 60 repeated inside the batch
    sink = new_sink(bootstrap, unique_name)
    sink(first, 0)
    sink(events(spark, 250, 400), 1)  # 50 IDs seen in epoch 0
    assert sink.reports[0].duplicates == 60 and sink.reports[0].written == 300
    assert sink.reports[1].duplicates == 50 and sink.reports[1].written == 100
    checked(bootstrap, sink, ids(0, 400))


def test_headers_key_and_value(spark: SparkSession, bootstrap: str, unique_name: str) -> None:
    df = events(spark, 0, 20)
    sink = new_sink(bootstrap, unique_name, key_column="event_id")
    sink(df, 0)
    by_id = {}
    for msg in read_exactly_once(bootstrap, unique_name, unique_name):
        by_id[headers_of(msg)["eo-record-id"].decode()] = msg
    assert set(by_id) == ids(0, 20)
    msg = by_id[record_id(["e7"])]
    headers = headers_of(msg)
    assert headers["eo-query"] == unique_name.encode()
    assert headers["eo-epoch"] == b"0"
    assert int(headers["eo-shard"]) in range(sink.head().num_shards)  # type: ignore[union-attr]
    assert len(headers["eo-attempt"]) == 16
    assert msg.key() == b"e7"
    assert json.loads(msg.value() or b"") == {"event_id": "e7", "amount": 70, "action": "click"}
    # a value column instead of JSON
    other = f"{unique_name}_v"
    raw = new_sink(bootstrap, other, value="action")
    raw(df, 0)
    values = {m.value() for m in read_exactly_once(bootstrap, other, other)}
    assert values == {b"click"}


ABANDON = """
import sys, time
from confluent_kafka import Producer
bootstrap, topic, tid = sys.argv[1:4]
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
producer.init_transactions(30)
producer.begin_transaction()
producer.produce(topic, b"never decided", b"abandoned")
producer.flush(30)
print("open", flush=True)
time.sleep(600)
"""


def _abandon_transaction(bootstrap: str, topic: str, tid: str) -> None:
    """A writer SIGKILLed inside a transaction, whose transactional.id nobody reuses."""
    proc = subprocess.Popen(
        [sys.executable, "-c", ABANDON, bootstrap, topic, tid], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "open"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)


def test_an_abandoned_transaction_on_the_control_topic_holds_no_reader_back(
    spark: SparkSession, tansu_bootstrap: str, unique_name: str
) -> None:
    """Tansu never times an open transaction out, and a transaction that touched a partition
    holding one leaves every partition it wrote held back from read_committed readers. Every
    shard transaction writes its commit marker to the control topic, so one abandoned
    transaction there would hold back the data of every later epoch. The recipe reads
    read_uncommitted and lets the confirmations decide; it must deliver everything. On Tansu:
    Apache Kafka aborts the abandoned transaction itself (test_kafka_genuine.py)."""
    bootstrap = tansu_bootstrap
    control = f"{unique_name}-control"
    sink = new_sink(bootstrap, unique_name, control_topic=control)
    sink(events(spark, 0, 100), 0)  # creates the control topic
    tid = f"{unique_name}-abandoned"
    _abandon_transaction(bootstrap, control, tid)
    try:
        sink(events(spark, 100, 300), 1)
        sink(events(spark, 100, 300), 1)  # a replay is still skipped
        assert sink.last_report is not None and sink.last_report.skipped
        got = [
            headers_of(m)["eo-record-id"].decode()
            for m in read_exactly_once(
                bootstrap, unique_name, unique_name, control_topic=control, timeout_s=20
            )
        ]
        assert sorted(got) == sorted(ids(0, 300))
        result = audit(
            bootstrap,
            sink.topic,
            sink.query_name,
            control_topic=control,
            read_committed=bool(sink.hides_aborted),
        )
        result.assert_exactly_once(ids(0, 300))
    finally:
        fence = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
        fence.init_transactions(30)  # aborts it: leave no open transaction behind


def test_an_abandoned_transaction_on_the_control_topic_leaves_the_broker_probe_conclusive(
    tansu_bootstrap: str, unique_name: str, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """The preflight probe (does a read_committed consumer skip aborted records?) reads
    read_committed. On the control topic, an abandoned transaction (Tansu never times one
    out) held it back: every query start waited 30 s, then fell back to "inconclusive",
    which on a real Kafka also gives up what a plain read_committed consumer is promised.
    The probe has a topic of its own, where only probes write. On Tansu."""
    bootstrap = tansu_bootstrap
    import logging

    import exactlyonce.connectors.kafka.preflight as kafka_module

    control = f"{unique_name}-control"
    new_sink(bootstrap, unique_name, control_topic=control)  # creates the control topic
    tid = f"{unique_name}-abandoned"
    _abandon_transaction(bootstrap, control, tid)
    monkeypatch.setattr(kafka_module, "_PROBES", {})  # probe again, not the cached answer
    try:
        with caplog.at_level(logging.INFO, "exactlyonce.kafka"):
            sink = new_sink(bootstrap, f"{unique_name}-2", control_topic=control)
        assert "inconclusive" not in caplog.text
        assert "aborted records from read_committed consumers" in caplog.text
        assert sink.hides_aborted is not None
    finally:
        fence = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
        fence.init_transactions(30)


def test_committed_shards_are_skipped_when_the_head_did_not_advance(
    spark: SparkSession, bootstrap: str, unique_name: str
) -> None:
    sink = new_sink(bootstrap, unique_name)
    sink(events(spark, 0, 400), 0)
    # The driver dies after the tasks of epoch 1 committed, before the head advanced.
    head = sink.head()
    assert head is not None
    sink._write_epoch(events(spark, 400, 800), 1, head.num_shards)
    assert new_sink(bootstrap, unique_name).head().epoch == 0  # type: ignore[union-attr]
    rerun = new_sink(bootstrap, unique_name)
    rerun(events(spark, 400, 800), 1)
    report = rerun.last_report
    # Every shard of the epoch holds some of its 400 records, and every one committed.
    assert report is not None and report.shards_skipped == head.num_shards
    assert report.written == 0
    checked(bootstrap, sink, ids(0, 800))


def test_null_keys_and_too_large_records_go_to_dead_letters(
    spark: SparkSession, bootstrap: str, unique_name: str
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(unique_name, 2, -1, config={"max.message.bytes": "2000"})
    admin.create_topics([topic])[unique_name].result()
    df = events(spark, 0, 100).select(
        F.when(F.col("amount") == 70, None).otherwise(F.col("event_id")).alias("event_id"),
        "amount",
        F.when(F.col("amount") == 150, F.lit("x" * 5000))
        .otherwise(F.col("action"))
        .alias("action"),
    )
    sink = KafkaSink(bootstrap, unique_name, ["event_id"], unique_name)  # the topic exists
    assert sink.max_message_bytes == 2000
    sink(df, 0)
    report = sink.last_report
    assert report is not None and report.dead_letters == 2 and report.written == 98
    checked(bootstrap, sink, ids(0, 100) - {record_id(["e7"]), record_id(["e15"])})
    letters = [
        headers_of(m) | {"value": m.value() or b""}
        for m in read_exactly_once(
            bootstrap, sink.dead_letter_topic, unique_name, sink_name=sink.sink_name
        )
    ]
    assert len(letters) == 2
    by_error = {bytes(x["eo-error"]).split(b":")[0]: x for x in letters}
    null_key = by_error[b"null key column(s)"]
    assert b"event_id" in null_key["eo-error"] and null_key["eo-epoch"] == b"0"
    assert json.loads(null_key["value"])["amount"] == 70
    too_large = by_error[b"record too large"]
    assert too_large["eo-record-id"] == record_id(["e15"]).encode()
    assert b"2000" in too_large["eo-error"]
    assert 0 < len(too_large["value"]) <= 2000


def _batch(shard: int, start: int, end: int) -> pa.RecordBatch:
    rids = [record_id([f"z{i}"]) for i in range(start, end)]
    n = len(rids)
    return pa.RecordBatch.from_pydict(
        {
            ID_COLUMN: pa.array(rids, pa.string()),
            VALUE_COLUMN: pa.array([f'{{"i":{i}}}'.encode() for i in range(start, end)]),
            "_eo_epoch": pa.array([1] * n, pa.int64()),
            SHARD_COLUMN: pa.array([shard] * n, pa.int32()),
            ERROR_COLUMN: pa.array([None] * n, pa.string()),
            PAYLOAD_COLUMN: pa.array([None] * n, pa.string()),
        }
    )


def test_a_zombie_attempt_is_fenced_and_never_counted(
    spark: SparkSession, bootstrap: str, unique_name: str
) -> None:
    """Two attempts of one shard: the newer one's init_transactions fences the older one."""
    sink = new_sink(bootstrap, unique_name, shards=1, dedup=False)
    sink(events(spark, 0, 10), 0)
    zombie_error: list[BaseException] = []

    def write(epoch: int, shards: int) -> list[TaskResult]:
        writer = sink._task_writer(epoch, [ID_COLUMN, VALUE_COLUMN])
        target: KafkaTarget = writer.target  # type: ignore[attr-defined]
        zombie = KafkaShardTask(target, epoch)
        zombie.write(_batch(0, 0, 50))  # opened, producing, transaction open
        assert zombie.producer is not None
        zombie.producer.flush()
        newer = KafkaShardTask(target, epoch)  # Spark's retry of the same shard
        result = newer.run(iter([_batch(0, 0, 50)]))
        try:
            zombie.commit()
        except (SinkUnavailableError, AmbiguousCommitError) as exc:
            zombie_error.append(exc)
        finally:
            zombie.close()
        return [result]

    report = sink.run_epoch(1, BATCH_QUERY_ID, events(spark, 0, 1).schema, lambda: 1, write)
    assert report.written == 50
    assert zombie_error, "the fenced zombie's commit must fail"
    assert "fence" in str(zombie_error[0]).lower() or "FENCED" in str(zombie_error[0])
    result = audit(bootstrap, unique_name, unique_name, read_committed=bool(sink.hides_aborted))
    result.assert_exactly_once(ids(0, 10) | {record_id([f"z{i}"]) for i in range(50)})
    assert len({a for a in result.confirmed if a[0] == 1}) == 1, "one confirmed attempt"
    # The same with two bare producers: the older one cannot commit after the newer init.
    tid = transactional_id(unique_name, "bare", 0)
    old = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    old.init_transactions(30)
    old.begin_transaction()
    old.produce(unique_name, b"zombie")
    old.flush()
    Producer({"bootstrap.servers": bootstrap, "transactional.id": tid}).init_transactions(30)
    with pytest.raises(KafkaException) as err:
        old.commit_transaction(3)
    # Apache Kafka answers PRODUCER_FENCED; Tansu drops the fenced producer's connection,
    # so its commit times out. Either way the older producer cannot commit.
    assert err.value.args[0].name() in ("PRODUCER_FENCED", "_FENCED", "_TIMED_OUT")


def test_a_lost_catalog_is_rebuilt_from_the_topic(
    spark: SparkSession, bootstrap: str, unique_name: str, services: dict[str, str]
) -> None:
    sink = new_sink(bootstrap, unique_name)
    sink(events(spark, 0, 200), 0)
    client = redis.Redis.from_url(services["EXACTLYONCE_REDIS_URL"])
    keys = list(client.scan_iter(match=namespace(unique_name, sink.sink_name) + ":*"))
    assert keys
    client.delete(*keys)  # the catalog is gone; Kafka appends, so it must be rebuilt
    client.close()
    sink(events(spark, 150, 300), 1)  # 50 IDs written in epoch 0
    report = sink.last_report
    assert report is not None and report.catalog_rebuilds == 1
    assert report.duplicates == 50 and report.written == 100
    checked(bootstrap, sink, ids(0, 300))


def test_preflight_names_the_problem(spark: SparkSession, bootstrap: str, unique_name: str) -> None:
    missing = f"{unique_name}_missing"
    with pytest.raises(ConfigError) as err:
        KafkaSink(bootstrap, missing, ["event_id"], unique_name)
    assert err.value.field == "topic" and missing in str(err.value)
    assert "create_topic" in str(err.value)
    with pytest.raises(ConfigError) as err:
        new_sink(bootstrap, unique_name, transaction_timeout_ms=5_000_000)
    assert err.value.field == "transaction_timeout_ms"
    assert "transaction.max.timeout.ms" in str(err.value)
    with pytest.raises(ConfigError) as err:
        new_sink(bootstrap, unique_name, transaction_timeout_ms=500)
    assert err.value.field == "transaction_timeout_ms"
    with pytest.raises(ConfigError) as err:
        new_sink(bootstrap, unique_name, producer_config={"transaction.timeout.ms": 2_000_000})
    assert err.value.field == "producer_config['transaction.timeout.ms']"
    with pytest.raises(ConfigError, match="transactional.id") as err:
        new_sink(bootstrap, unique_name, producer_config={"transactional.id": "mine"})
    assert err.value.field == "producer_config"
    sink = new_sink(bootstrap, unique_name)
    with pytest.raises(ConfigError) as err:
        KafkaSink(bootstrap, unique_name, ["nope"], unique_name).preflight(
            events(spark, 0, 1).schema
        )
    assert err.value.field == "id_columns"
    with pytest.raises(ConfigError) as err:
        KafkaSink(bootstrap, unique_name, ["event_id"], unique_name, value="amount").preflight(
            events(spark, 0, 1).schema
        )
    assert err.value.field == "value"
    assert sink.hides_aborted is not None


def test_a_control_topic_that_is_not_compacted_is_refused_before_anything_is_created(
    bootstrap: str, unique_name: str
) -> None:
    """Heads would expire with retention: the start is refused naming ``control_topic``, and
    the topics the sink would create (data, dead letters) are left uncreated."""
    control = f"{unique_name}.control"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(control, 1, replication_factor=-1, config={"cleanup.policy": "delete"})
    admin.create_topics([topic])[control].result()
    with pytest.raises(ConfigError, match="cleanup.policy=delete") as err:
        new_sink(bootstrap, unique_name, control_topic=control)
    assert err.value.field == "control_topic"
    listed = admin.list_topics(timeout=10).topics
    assert unique_name not in listed and f"{unique_name}.dead-letters" not in listed


def test_unreachable_broker_fails_fast_without_credentials(unique_name: str) -> None:
    secret = f"s3cret-{uuid.uuid4().hex[:6]}"
    config = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "app",
        "sasl.password": secret,
    }
    began = time.monotonic()
    with pytest.raises(SinkUnavailableError, match="cannot reach Kafka at 127.0.0.1:1") as err:
        KafkaSink(
            "127.0.0.1:1",
            unique_name,
            ["event_id"],
            unique_name,
            producer_config=config,
            connect_timeout=3,
            dedup=False,
        )
    assert time.monotonic() - began < 15
    assert secret not in str(err.value) and secret not in repr(err.value)
    assert "Connection refused" in str(err.value)


def test_sasl_password_never_printed_by_the_sink(bootstrap: str, unique_name: str) -> None:
    """The broker here speaks no SASL: the handshake fails; the message must not leak."""
    secret = f"s3cret-{uuid.uuid4().hex[:6]}"
    config = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "app",
        "sasl.password": secret,
    }
    try:
        sink = KafkaSink(
            bootstrap,
            unique_name,
            ["event_id"],
            unique_name,
            producer_config=config,
            create_topic=True,
            connect_timeout=3,
        )
    except (SinkUnavailableError, ConfigError) as exc:
        assert secret not in str(exc) and secret not in repr(exc)
    else:  # a broker that accepted it: nothing it prints may hold the password either
        assert secret not in repr(sink)
        assert secret not in repr(sink._task_writer(0, [ID_COLUMN]).target)  # type: ignore[attr-defined]


class _Producer:
    """A producer whose commits fail as scripted: the classification, without a broker."""

    def __init__(self, errors: list[KafkaError]) -> None:
        self.errors = errors
        self.commits = 0
        self.aborts = 0

    def commit_transaction(self, timeout: float) -> None:
        self.commits += 1
        if self.errors:
            raise KafkaException(self.errors.pop(0))

    def abort_transaction(self, timeout: float) -> None:
        self.aborts += 1


def _task_with(producer: _Producer) -> KafkaShardTask:
    target = KafkaTarget(
        bootstrap_servers="127.0.0.1:1",
        config=Secret("{}"),
        topic="t",
        dead_letter_topic="t.dead-letters",
        control_topic="c",
        control_partition=0,
        query_name="q",
        sink_name="kafka:t",
        columns=(ID_COLUMN, VALUE_COLUMN),
        has_key=False,
        transaction_timeout_ms=60_000,
        hides_aborted=False,
        scan_from=0,
        timeout_s=5,
    )
    task = KafkaShardTask(target, 3)
    task.shard = 0
    task.producer = producer  # type: ignore[assignment]
    task.in_transaction = True
    return task


def test_commit_errors_are_classified_not_guessed() -> None:
    timed_out = KafkaError(KafkaError._TIMED_OUT, "commit timed out", retriable=True)
    retried = _Producer([timed_out, timed_out])
    _task_with(retried)._end_transaction("data")
    assert retried.commits == 3 and retried.aborts == 0  # retriable: the commit is retried

    abortable = KafkaError(KafkaError.PRODUCER_FENCED, "fenced", txn_requires_abort=True)
    aborted = _Producer([abortable])
    with pytest.raises(SinkUnavailableError, match="aborted"):
        _task_with(aborted)._end_transaction("data")
    assert aborted.aborts == 1  # known not committed: aborted, the task fails, re-run writes

    fatal = KafkaError(KafkaError._FENCED, "fenced for good", fatal=True)
    unknown = _Producer([fatal])
    task = _task_with(unknown)
    with pytest.raises(AmbiguousCommitError, match="outcome unknown"):
        task._end_transaction("data")
    assert unknown.aborts == 0 and unknown.commits == 1  # never assumed failed, never rewritten
