"""Buffer records that expire before they are drained stop the drainer; they are never
skipped (DESIGN invariant 13), against the real Apache Kafka broker.

Retention is played by ``AdminClient.delete_records``: it moves a partition's start (its low
watermark) exactly where the test says, as retention deleting old segments does. The drain
target is a RedisSink (hash writes) on the sink's own redis-server: every record is a key,
and the drain offsets are a hash the test reads back.

What must happen, for a range ``a..b`` of partition ``p`` that is gone:

- never drained (no stored offset): ``a`` is where the buffer's data begins (the head's
  ``origin``, the partition's end when the query's head was created);
- drained before: ``a`` is the stored offset;
- expired while the drainer runs: its reader's fetch is out of range, and the check above
  runs again;

and the drain stops with an error naming the topic, the partition and ``a..b``, having
written nothing past ``a`` of that partition. ``reset_offsets`` then goes on knowingly from
the partition's current start.
"""

from __future__ import annotations

from collections import Counter

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from pyspark.sql import SparkSession

from exactlyonce.buffer import Buffered, Drainer, KafkaBuffer
from exactlyonce.connectors.kafka.reader import H_RECORD_ID, H_RECORD_IDS, load_commits
from exactlyonce.connectors.redis import RedisSink
from exactlyonce.errors import ConfigError, ExpiredRecordsError, SinkUnavailableError
from tests.support.events import events
from tests.support.kafka_audit import named_headers, read_topic
from tests.support.redis_fixtures import SinkRedis

pytestmark = pytest.mark.integration


def pipeline(server: SinkRedis, bootstrap: str, name: str) -> tuple[RedisSink, Buffered]:
    target = RedisSink(server.url, f"{name}:{{event_id}}", ["event_id"], name, dedup=False)
    buffer = KafkaBuffer(topic=name, bootstrap_servers=bootstrap, partitions=2, frame_records=5)
    return target, Buffered(target, buffer)


def records_by_offset(bootstrap: str, topic: str, partition: int) -> dict[int, int]:
    """offset -> records the message holds (a frame holds several), of one partition."""
    out = {}
    for msg in read_topic(bootstrap, topic, "read_uncommitted"):
        if msg.partition != partition:
            continue
        headers = named_headers(msg.headers)
        n = len(headers[H_RECORD_IDS]) // 32 if H_RECORD_IDS in headers else 1
        assert H_RECORD_IDS in headers or H_RECORD_ID in headers
        out[msg.offset] = n
    return out


def delete_before(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    """Records of ``partition`` below ``offset`` are gone, as retention deletes them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, partition, offset)])
    for future in futures.values():
        assert future.result(30).low_watermark == offset


def drained_keys(server: SinkRedis, name: str) -> int:
    return sum(1 for _ in server.client().scan_iter(match=f"{name}:e*", count=1000))


def stored(server: SinkRedis, sink: RedisSink, topic: str) -> dict[int, int]:
    raw = server.client().hgetall(f"{sink.prefix}:drain-offsets:{topic}")
    return {int(p): int(o) for p, o in raw.items()}


def assert_names_the_range(error: ExpiredRecordsError, topic: str, first: int, last: int) -> None:
    assert isinstance(error, ConfigError), "a configuration-kind error: the drain stops"
    assert (error.topic, error.partition, error.first, error.last) == (topic, 0, first, last)
    assert f"{topic}[0]" in str(error) and f"{first}..{last}" in str(error), str(error)
    assert "reset-offsets" in str(error), "the error names the fix"


def test_records_expired_before_the_first_drain_stop_it_naming_the_range(
    spark: SparkSession, sink_redis: SinkRedis, bootstrap: str, unique_name: str
) -> None:
    target, buffered = pipeline(sink_redis, bootstrap, unique_name)
    buffered(events(spark, 0, 200), 0)
    buffered(events(spark, 200, 400), 1)
    sizes = records_by_offset(bootstrap, unique_name, 0)
    cut = sorted(sizes)[len(sizes) // 2]
    delete_before(bootstrap, unique_name, 0, cut)

    with Drainer(target, buffered.buffer) as drainer, pytest.raises(ExpiredRecordsError) as err:
        drainer.drain_available(timeout_s=60)
    assert_names_the_range(err.value, unique_name, 0, cut - 1)
    assert drained_keys(sink_redis, unique_name) == 0, "nothing written"
    assert stored(sink_redis, target, unique_name) == {}

    # Knowingly on: the reset starts each partition where it starts now.
    with Drainer(target, buffered.buffer) as drainer:
        drainer.reset_offsets()
        report = drainer.drain_available(timeout_s=60)
    lost = sum(n for offset, n in sizes.items() if offset < cut)
    assert report.written == 400 - lost and drained_keys(sink_redis, unique_name) == 400 - lost
    assert stored(sink_redis, target, unique_name) == load_commits(
        bootstrap, unique_name, topic=unique_name
    ).frontier(unique_name)


def test_records_expired_between_drains_stop_it_naming_the_range(
    spark: SparkSession, sink_redis: SinkRedis, bootstrap: str, unique_name: str
) -> None:
    target, buffered = pipeline(sink_redis, bootstrap, unique_name)
    buffered(events(spark, 0, 100), 0)
    with Drainer(target, buffered.buffer) as drainer:
        assert drainer.drain_available(timeout_s=60).written == 100
    before = stored(sink_redis, target, unique_name)
    buffered(events(spark, 100, 300), 1)
    sizes = records_by_offset(bootstrap, unique_name, 0)
    new = sorted(o for o in sizes if o >= before[0])
    cut = new[len(new) // 2]
    delete_before(bootstrap, unique_name, 0, cut)

    with Drainer(target, buffered.buffer) as drainer, pytest.raises(ExpiredRecordsError) as err:
        drainer.drain_available(timeout_s=60)
    assert_names_the_range(err.value, unique_name, before[0], cut - 1)
    assert drained_keys(sink_redis, unique_name) == 100, "nothing of epoch 1 written"
    assert stored(sink_redis, target, unique_name) == before


def test_records_expiring_under_a_running_drainer_are_not_read_past(
    spark: SparkSession, sink_redis: SinkRedis, bootstrap: str, unique_name: str
) -> None:
    """The drainer checked the positions at its start; then records expire below where it
    reads next. Its reader's fetch is out of range: the step fails (no chunk from the
    partition's new start is written), and the retry's check names the range."""
    target, buffered = pipeline(sink_redis, bootstrap, unique_name)
    buffered(events(spark, 0, 300), 0)
    drainer = Drainer(target, buffered.buffer, batch_size=20, writers=1)
    try:
        first = drainer.step()
        assert first.written > 0
        at = dict(drainer.positions or {})
        sizes = records_by_offset(bootstrap, unique_name, 0)
        later = sorted(o for o in sizes if o > at.get(0, 0) + 5)
        assert later, f"partition 0 has records past {at}"
        drainer.planner.cancel_prefetch()
        drainer._clients.reader().reset()  # the next read assigns at the positions again
        delete_before(bootstrap, unique_name, 0, later[0])
        written = drained_keys(sink_redis, unique_name)
        with pytest.raises(SinkUnavailableError, match="out of range"):
            for _ in range(50):  # partition 1's chunks may come first
                drainer.step()
        assert stored(sink_redis, target, unique_name).get(0, 0) == at.get(0, 0)
        assert drained_keys(sink_redis, unique_name) >= written
        with pytest.raises(ExpiredRecordsError) as err:
            drainer.drain_available(timeout_s=60)
    finally:
        drainer.close()
    assert_names_the_range(err.value, unique_name, at.get(0, 0), later[0] - 1)
    assert stored(sink_redis, target, unique_name).get(0, 0) == at.get(0, 0)


def test_a_topic_whose_older_records_expired_drains_from_where_the_query_began(
    spark: SparkSession, sink_redis: SinkRedis, bootstrap: str, unique_name: str
) -> None:
    """A buffer topic that held other records before this query (another query, an earlier
    life) which have expired: nothing of THIS query is lost, the drain goes on. The head's
    ``origin`` says where this query's records begin."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(unique_name, 2, -1)])[unique_name].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        producer.produce(unique_name, f"old {i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    for p in (0, 1):
        delete_before(bootstrap, unique_name, p, 10)
    target, buffered = pipeline(sink_redis, bootstrap, unique_name)
    buffered(events(spark, 0, 150), 0)
    head = load_commits(bootstrap, unique_name, topic=unique_name).head
    assert head is not None and head.origin.get(unique_name) == {0: 10, 1: 10}, head

    with Drainer(target, buffered.buffer) as drainer:
        report = drainer.drain_available(timeout_s=60)
    assert report.written == 150 and drained_keys(sink_redis, unique_name) == 150
    assert Counter(stored(sink_redis, target, unique_name)) == Counter(
        load_commits(bootstrap, unique_name, topic=unique_name).frontier(unique_name)
    )
