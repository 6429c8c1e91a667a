"""What only a genuine Apache Kafka broker gives (the shared one of ``make services``).

- A zombie producer (an older attempt holding the same ``transactional.id``) is fenced: the
  broker answers PRODUCER_FENCED to its commit, and nothing it wrote reaches a plain
  read_committed consumer.
- An ABANDONED transaction (its writer SIGKILLed inside it, its ``transactional.id`` never
  used again) is aborted BY THE BROKER once it is older than its ``transaction.timeout.ms``
  (10,000 ms here, the sink's minimum; the broker's sweep runs every second, see
  exactlyonce/integration/lab/services/kafka.py). Until then it holds back read_committed
  readers of every partition it wrote, the sink's own read of its control partition
  included; after, they see what was written behind it and never the abandoned records.

Each plain consumer is built on both clients, kafka-python and confluent-kafka (librdkafka).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from pyspark.sql import SparkSession

from exactlyonce.connectors.base import TaskResult
from exactlyonce.connectors.kafka import (
    ID_COLUMN,
    MIN_TRANSACTION_TIMEOUT_MS,
    VALUE_COLUMN,
    KafkaShardTask,
    KafkaSink,
    KafkaTarget,
)
from exactlyonce.dedup.ids import record_id
from tests.integration.test_kafka_sink import _batch
from tests.support.events import BATCH_QUERY_ID, events, ids
from tests.support.kafka_audit import (
    PLAIN_CLIENTS,
    assert_plain_exactly_once,
    audit,
    named_headers,
    read_topic,
    read_topic_confluent,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, TopicPartition

pytestmark = pytest.mark.integration

TIMEOUT_MS = MIN_TRANSACTION_TIMEOUT_MS  # 10,000: the sink's minimum
SWEEP_S = 1.0  # transaction.abort.timed.out.transaction.cleanup.interval.ms of the broker

# Opens a transaction writing to every partition of the topics named, prints "open" once the
# records are on the broker, then waits to be SIGKILLed.
ABANDON = """
import sys, time
from confluent_kafka import Producer
bootstrap, tid, timeout_ms, query, *topics = sys.argv[1:]
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                     "transaction.timeout.ms": int(timeout_ms)})
producer.init_transactions(30)
producer.begin_transaction()
for topic in topics:
    for p in producer.list_topics(topic, timeout=10).topics[topic].partitions:
        headers = [("eo-query", query.encode()), ("eo-record-id", b"abandoned")]
        producer.produce(topic, b"never decided", b"abandoned", partition=p, headers=headers)
producer.flush(30)
print("open", flush=True)
time.sleep(600)
"""


def abandon_transaction(bootstrap: str, tid: str, query: str, topics: list[str]) -> float:
    """A writer SIGKILLed inside a transaction on ``topics``; returns the monotonic time it
    was started at (its transaction began later, so the broker aborts it no sooner than
    that plus the timeout)."""
    spawned = time.monotonic()
    args = [bootstrap, tid, str(TIMEOUT_MS), query, *topics]
    proc = subprocess.Popen(
        [sys.executable, "-c", ABANDON, *args], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "open"
    finally:
        proc.kill()
        proc.wait(30)
    return spawned


@dataclass
class Watcher:
    """A plain read_committed consumer polling ``topic`` from offset 0 in a thread, noting
    when each record of ``query`` arrived (monotonic time) per ``eo-record-id``."""

    client: str
    bootstrap: str
    topic: str
    query: str
    arrivals: dict[str, list[float]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    error: list[BaseException] = field(default_factory=list)

    def seen(self, wanted: set[str]) -> bool:
        return wanted <= set(self.arrivals)

    def note(self, headers: Any) -> None:
        h: dict[str, bytes] = named_headers(headers)
        if (h.get("eo-query") or b"").decode() == self.query:
            rid = (h.get("eo-record-id") or b"<none>").decode()
            self.arrivals.setdefault(rid, []).append(time.monotonic())

    def run(self) -> None:
        try:
            if self.client == "confluent-kafka":
                self._confluent()
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    self._kafka_python()
        except BaseException as exc:  # reported by the test thread
            self.error.append(exc)

    def _confluent(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"watch-{time.monotonic_ns()}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        parts = consumer.list_topics(self.topic, timeout=10).topics[self.topic].partitions
        consumer.assign([ConfluentPartition(self.topic, p, 0) for p in parts])
        try:
            while not self.stop.is_set():
                for msg in consumer.consume(num_messages=1000, timeout=0.1):
                    if msg.error() is None:
                        self.note(msg.headers())
        finally:
            consumer.close()

    def _kafka_python(self) -> None:
        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            group_id=None,
        )
        parts = consumer.partitions_for_topic(self.topic) or set()
        tps = [TopicPartition(self.topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        try:
            while not self.stop.is_set():
                for records in consumer.poll(timeout_ms=100).values():
                    for record in records:
                        self.note(record.headers)
        finally:
            consumer.close()


def test_an_abandoned_transaction_is_aborted_by_the_broker_after_its_timeout(
    spark: SparkSession, bootstrap: str, unique_name: str
) -> None:
    control = f"{unique_name}-control"  # its own: the shared one serves other tests
    sink = KafkaSink(
        bootstrap,
        unique_name,
        ["event_id"],
        unique_name,
        control_topic=control,
        create_topic=True,
        partitions=3,
        shards=2,
        transaction_timeout_ms=TIMEOUT_MS,
    )
    assert sink.hides_aborted is True, "genuine Apache Kafka hides aborted records"
    sink(events(spark, 0, 100), 0)  # before the abandoned transaction: always readable
    spawned = abandon_transaction(
        bootstrap, f"{unique_name}-gone", unique_name, [unique_name, control]
    )
    killed = time.monotonic()
    watchers = [Watcher(c, bootstrap, unique_name, unique_name) for c in PLAIN_CLIENTS]
    threads = [threading.Thread(target=w.run, daemon=True) for w in watchers]
    for thread in threads:
        thread.start()
    try:
        sink(events(spark, 100, 200), 1)  # behind the abandoned records on every partition
        epoch_1_done = time.monotonic()
        sink(events(spark, 200, 300), 2)
        sink(events(spark, 200, 300), 2)  # a replay is skipped
        assert sink.last_report is not None and sink.last_report.skipped
        deadline = time.monotonic() + 60
        while not all(w.seen(ids(0, 300)) for w in watchers) and time.monotonic() < deadline:
            assert not any(w.error for w in watchers), [w.error for w in watchers]
            time.sleep(0.1)
    finally:
        for w in watchers:
            w.stop.set()
        for thread in threads:
            thread.join(30)
    later = ids(100, 300)
    print(
        f"abandoned transaction (timeout {TIMEOUT_MS} ms): writer SIGKILLed "
        f"{killed - spawned:.1f}s after it started; the sink's epoch 1 ended "
        f"{epoch_1_done - spawned:.1f}s after"
    )
    for w in watchers:
        assert not w.error, f"{w.client}: {w.error}"
        assert "abandoned" not in w.arrivals, f"{w.client} read the abandoned records"
        twice = {rid: len(at) for rid, at in w.arrivals.items() if len(at) > 1}
        assert not twice, f"{w.client}: IDs read twice {list(twice.items())[:5]}"
        assert set(w.arrivals) == ids(0, 300), f"{w.client}: {len(w.arrivals)} IDs of 300"
        first_later = min(w.arrivals[rid][0] for rid in later) - spawned
        print(
            f"{w.client}: records behind it first read {first_later:.1f}s after the writer started"
        )
        # Held back until the broker aborted it: no sooner than the timeout after the
        # transaction began (which was after ``spawned``), and soon after it.
        assert first_later >= TIMEOUT_MS / 1000, f"{w.client}: not held back ({first_later:.1f}s)"
        assert first_later <= TIMEOUT_MS / 1000 + SWEEP_S + 15, f"{w.client}: {first_later:.1f}s"
    # The sink's own read_committed read of its control partition was held back too.
    assert epoch_1_done - spawned >= TIMEOUT_MS / 1000
    assert_plain_exactly_once(bootstrap, unique_name, unique_name, ids(0, 300))
    result = audit(bootstrap, unique_name, unique_name, control_topic=control, read_committed=True)
    result.assert_exactly_once(ids(0, 300))
    assert result.head is not None and result.head["epoch"] == 2


def test_a_zombie_producer_is_fenced_by_the_broker(bootstrap: str, unique_name: str) -> None:
    """Two producers with one transactional.id: the newer one's init_transactions fences the
    older one, whose commit the broker refuses with PRODUCER_FENCED (a fatal error); a
    read_committed consumer on either client reads the newer one's records only."""
    tid = f"{unique_name}-shard-0"
    old = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    old.init_transactions(30)
    old.begin_transaction()
    old.produce(unique_name, b"zombie", headers=[("eo-query", unique_name.encode())])
    old.flush(30)
    new = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    new.init_transactions(30)  # bumps the epoch: the older attempt is a zombie now
    with pytest.raises(KafkaException) as err:
        old.commit_transaction(10)
    assert err.value.args[0].code() == KafkaError._FENCED, err.value.args[0]
    assert "fenced" in str(err.value.args[0]).lower()
    assert err.value.args[0].fatal()
    new.begin_transaction()
    new.produce(unique_name, b"newer", headers=[("eo-query", unique_name.encode())])
    new.commit_transaction(30)
    for client in PLAIN_CLIENTS:
        values = _values(bootstrap, unique_name, client)
        assert values == Counter({b"newer": 1}), f"{client}: {values}"


def test_a_transaction_open_longer_than_its_timeout_is_aborted_and_retried(
    spark: SparkSession, bootstrap: str, unique_name: str
) -> None:
    """A shard's whole write must fit inside ``transaction.timeout.ms``: an attempt that keeps
    its transaction open longer (here past 10 s) is aborted by the broker, its commit fails,
    and the retry of the shard (what Spark's task retry does) ends exactly once."""
    control = f"{unique_name}-control"
    sink = KafkaSink(
        bootstrap,
        unique_name,
        ["event_id"],
        unique_name,
        control_topic=control,
        create_topic=True,
        partitions=3,
        shards=1,
        dedup=False,
        transaction_timeout_ms=TIMEOUT_MS,
    )
    sink(events(spark, 0, 10), 0)
    failure: list[BaseException] = []

    def write(epoch: int, shards: int) -> list[TaskResult]:
        writer = sink._task_writer(epoch, [ID_COLUMN, VALUE_COLUMN])
        target: KafkaTarget = writer.target  # type: ignore[attr-defined]
        slow = KafkaShardTask(target, epoch)
        slow.write(_batch(0, 0, 50))  # the data transaction is open from here
        assert slow.producer is not None
        slow.producer.flush()
        time.sleep(TIMEOUT_MS / 1000 + SWEEP_S + 2)
        began = time.monotonic()
        try:
            slow.commit()
        except Exception as exc:  # what the commit raises is printed and checked below
            failure.append(exc)
        finally:
            slow.close()
        print(f"commit past the timeout failed after {time.monotonic() - began:.1f}s: {failure}")
        return [KafkaShardTask(target, epoch).run(iter([_batch(0, 0, 50)]))]

    report = sink.run_epoch(1, BATCH_QUERY_ID, events(spark, 0, 1).schema, lambda: 1, write)
    assert report.written == 50
    assert failure, "the broker did not abort a transaction older than its timeout"
    expected = ids(0, 10) | {record_id([f"z{i}"]) for i in range(50)}
    assert_plain_exactly_once(bootstrap, unique_name, unique_name, expected)
    result = audit(bootstrap, unique_name, unique_name, control_topic=control, read_committed=True)
    result.assert_exactly_once(expected)
    assert len({a for a in result.confirmed if a[0] == 1}) == 1, "one confirmed attempt"


def _values(bootstrap: str, topic: str, client: str) -> Counter[bytes | None]:
    """The values a plain read_committed consumer on ``client`` reads from ``topic``."""
    if client == "kafka-python":
        return Counter(r.value for r in read_topic(bootstrap, topic, "read_committed"))
    return Counter(v for _, _, _, v in read_topic_confluent(bootstrap, topic, "read_committed"))
