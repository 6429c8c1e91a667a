"""The demo's Kafka parts against the real broker: topics recreated empty, the at-least-once
producer's records all acknowledged (duplicates kept), and the topic audit counting every
record a plain read_committed consumer gets, so that a duplicate, a loss or a missing dead
letter fails it, and records of an aborted transaction do not count."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from exactlyonce.connectors.kafka.protocol import H_QUERY, H_RECORD_ID
from exactlyonce.integration.lab.demo import (
    produce,
    read_headers,
    read_topic_audit,
    recreate_topics,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def topics(services: dict[str, str], unique_name: str) -> Iterator[tuple[str, str, str]]:
    bootstrap = services["KAFKA_BOOTSTRAP_SERVERS"]
    out, dead = unique_name, f"{unique_name}.dl"
    recreate_topics(bootstrap, [], {out: 3, dead: 1})
    yield bootstrap, out, dead
    recreate_topics(bootstrap, [out, dead], {})


def _send(bootstrap: str, topic: str, rids: list[str], *, abort: bool = False) -> None:
    if abort:
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-tx"})
        p.init_transactions(30)
        p.begin_transaction()
    else:
        p = Producer({"bootstrap.servers": bootstrap})
    for rid in rids:
        p.produce(topic, value=b"{}", key=rid.encode(), headers=[(H_RECORD_ID, rid.encode())])
    if abort:
        p.flush(30)
        p.abort_transaction(30)
    assert p.flush(30) == 0


def test_the_audit_counts_what_a_read_committed_consumer_reads(
    topics: tuple[str, str, str],
) -> None:
    bootstrap, out, dead = topics
    _send(bootstrap, out, ["a", "b", "a"])
    _send(bootstrap, out, ["c", "d"], abort=True)  # hidden from read_committed
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(dead, value=b"x", headers=[(H_QUERY, b"q")])
    p.produce(dead, value=b"x", headers=[(H_QUERY, b"another-query")])
    assert p.flush(30) == 0

    audit = read_topic_audit(bootstrap, out, dead, "q", {"a", "b", "e"}, 1)

    assert (audit.read, audit.duplicates, audit.missing, audit.unexpected) == (3, 1, 1, 0)
    assert audit.dead_letters == 1
    assert not audit.ok


def test_an_exact_topic_passes_the_audit(topics: tuple[str, str, str]) -> None:
    bootstrap, out, dead = topics
    _send(bootstrap, out, ["a", "b"])
    assert read_topic_audit(bootstrap, out, dead, "q", {"a", "b"}, 0).ok
    assert not read_topic_audit(bootstrap, out, dead, "q", {"a", "b"}, 1).ok


def test_the_producer_sends_every_record_duplicates_included(
    topics: tuple[str, str, str],
) -> None:
    bootstrap, out, _ = topics
    records = [{"event_id": "e1"}, {"event_id": "e1"}, {"event_id": None}]
    produce(bootstrap, out, records)
    assert len(read_headers(bootstrap, out)) == 3
    recreate_topics(bootstrap, [], {out: 3})  # deleted and created again: empty
    assert read_headers(bootstrap, out) == []
