"""A transaction's commit reply lost between a plain librdkafka producer and genuine brokers.

On the session's 3-node cluster (tests/support/kafka_cluster.py), every connection of the
producer goes through a fault proxy per broker (tests/support: ``start_proxies``), which loses
the reply to the producer's ``EndTxn`` (the commit), after the coordinator got it:

- once: librdkafka sends ``EndTxn`` again by itself, the coordinator answers with the commit it
  already made, ``commit_transaction`` returns; the record is there once;
- for good: ``commit_transaction`` gives up with a retriable timeout, yet the transaction IS
  committed. A writer that takes that error for a failure and writes the records again (the
  negative control) duplicates them, as a plain ``read_committed`` consumer sees; KafkaSink
  never does (DESIGN invariant 6: tests/crash/test_kafka_failover.py runs it through the same
  fault).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from exactlyonce.integration.lab.fault_proxy import END_TXN, KafkaFaultProxy
from tests.support.kafka_audit import read_topic
from tests.support.kafka_cluster import ClusterUnderTest

pytestmark = pytest.mark.integration


@pytest.fixture
def proxies(kafka_cluster: ClusterUnderTest) -> Iterator[dict[int, KafkaFaultProxy]]:
    kafka_cluster.heal()
    yield kafka_cluster.start_proxies()
    kafka_cluster.stop_proxies()


def _producer(cluster: ClusterUnderTest, tid: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": cluster.cluster.proxied_bootstrap,
            "transactional.id": tid,
            "logger": logging.getLogger("tests.kafka.client"),  # captured, not on stderr
        }
    )
    producer.init_transactions(60)
    return producer


def _committed(cluster: ClusterUnderTest, topic: str) -> Counter[bytes]:
    """Values a plain read_committed consumer (kafka-python) reads, straight from the
    brokers."""
    return Counter(r.value for r in read_topic(cluster.bootstrap, topic, "read_committed"))


def test_a_lost_commit_reply_is_resent_and_a_naive_rewrite_duplicates(
    kafka_cluster: ClusterUnderTest, proxies: dict[int, KafkaFaultProxy], unique_name: str
) -> None:
    cluster = kafka_cluster
    cluster.create_topic(unique_name, partitions=1, leader=1)
    tid = f"{unique_name}-txn"
    producer = _producer(cluster, tid)
    coordinator = cluster.transaction(tid)[0]
    proxy = proxies[coordinator]

    # Once: librdkafka resends EndTxn; the coordinator answers the commit it made.
    producer.begin_transaction()
    producer.produce(unique_name, b"lost-once")
    producer.flush(30)
    sent = proxy.requests[END_TXN]
    proxy.drop_kafka_reply(END_TXN, tid.encode())
    began = time.monotonic()
    producer.commit_transaction(30)
    resent = proxy.requests[END_TXN] - sent
    print(f"one lost EndTxn reply: {resent} EndTxn requests, {time.monotonic() - began:.2f}s")
    assert [d.api_key for d in proxy.dropped] == [END_TXN]
    assert resent >= 2, "librdkafka sent the commit again"

    # For good: the commit call gives up, but the coordinator committed.
    producer.begin_transaction()
    producer.produce(unique_name, b"lost-for-good")
    producer.flush(30)
    proxy.drop_kafka_reply(END_TXN, tid.encode(), times=1_000_000)
    with pytest.raises(KafkaException) as raised:
        producer.commit_transaction(5)
    err = raised.value.args[0]
    print(f"EndTxn replies lost for good: {err.name()} retriable={err.retriable()} "
          f"abortable={err.txn_requires_abort()} fatal={err.fatal()}")  # fmt: skip
    assert err.code() == KafkaError._TIMED_OUT and err.retriable() and not err.fatal()
    proxy.drop_kafka_reply(END_TXN, times=0)
    lost = len(proxy.dropped) - 1
    assert lost >= 1

    # The negative control: a writer that takes the error for a failure starts over (a new
    # producer of its id fences the old one) and writes the record again.
    naive = _producer(cluster, tid)
    naive.begin_transaction()
    naive.produce(unique_name, b"lost-for-good")
    naive.commit_transaction(30)
    seen = _committed(cluster, unique_name)
    print(f"read_committed after {lost} lost replies and a rewrite: {dict(seen)}")
    assert seen[b"lost-once"] == 1
    assert seen[b"lost-for-good"] == 2, "the 'failed' commit was applied: the rewrite doubled it"
