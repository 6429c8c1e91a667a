"""Kafka topics, read with kafka-python's ``read_committed`` consumer and written by a plain
(non-transactional) confluent-kafka producer.

- :func:`read`: every partition from offset 0 (never "earliest": DESIGN invariant 11) to its
  last stable offset, each record counted per key (the key columns of its JSON value);
  kafka-python is a client the sink does not use, and ``read_committed`` is how any
  downstream consumer reads the topic;
- :func:`last_epoch`: the highest epoch header among the last records of each partition;
- :class:`Watch`: a ``read_committed`` consumer at the end of every partition: the first
  record it gets is one whose transaction committed (for a plain producer: one written);
- :func:`prepare` and :func:`write_partition`: the control's topic, and a producer that
  sends each record (its key values as JSON, the epoch as a header) and flushes.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from exactlyonce.connectors.base.expected import spark_text
from exactlyonce.connectors.kafka.clients import produce_waiting
from exactlyonce.connectors.kafka.protocol import H_COMPACT, expand_compact
from exactlyonce.integration.lab.chaos.control.reading import Reading
from exactlyonce.integration.lab.chaos.control.target import Key, Target

READER = "kafka-python KafkaConsumer, isolation_level=read_committed, from offset 0"
READ_TIMEOUT_S = 60.0
COMMIT_REQUEST = None  # the control produces to the brokers directly, past any proxy
TAIL = 50  # records read back from each partition's end for its last epoch
# librdkafka names -> kafka-python names, for the security settings a target may carry
_KAFKA_PYTHON = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
}


def _consumer(t: Target) -> Any:
    from kafka import KafkaConsumer

    options = {_KAFKA_PYTHON[k]: v for k, v in t.options if k in _KAFKA_PYTHON}
    return KafkaConsumer(
        bootstrap_servers=t.address.split(","),
        isolation_level="read_committed",
        enable_auto_commit=False,
        group_id=None,
        **options,
    )


def _partitions(consumer: Any, topic: str) -> list[Any]:
    from kafka import TopicPartition

    deadline = time.monotonic() + READ_TIMEOUT_S
    while True:
        found = consumer.partitions_for_topic(topic)
        if found or time.monotonic() > deadline:
            return [TopicPartition(topic, p) for p in sorted(found or ())]
        time.sleep(0.2)


def _records(t: Target, start: Callable[[int], int]) -> list[Any]:
    """Every committed record of the topic from ``start(end)`` of each partition to its end."""
    consumer = _consumer(t)
    try:
        parts = _partitions(consumer, t.name)
        if not parts:
            return []
        consumer.assign(parts)
        ends = consumer.end_offsets(parts)
        for tp in parts:
            consumer.seek(tp, max(0, start(ends[tp])))
        records: list[Any] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            batch = consumer.poll(timeout_ms=500)
            for got in batch.values():
                records.extend(got)
            if batch:
                deadline = time.monotonic() + READ_TIMEOUT_S
            elif time.monotonic() > deadline:
                raise TimeoutError(f"no record of {t.name!r} for {READ_TIMEOUT_S:.0f} s")
        return records
    finally:
        consumer.close()


def read(t: Target) -> Reading:
    found: Counter[Key] = Counter()
    nulls = 0
    for record in _records(t, lambda end: 0):
        try:
            value = json.loads(record.value)
            key = tuple(spark_text(value[k]) for k in t.keys if value.get(k) is not None)
        except (ValueError, TypeError, AttributeError):
            key = ()
        if len(key) != len(t.keys):
            nulls += 1
        else:
            found[key] += 1
    return Reading(READER, t.describe(), found, nulls)


def last_epoch(t: Target) -> int | None:
    epochs = []
    for record in _records(t, lambda end: end - TAIL):
        headers = {name: value for name, value in record.headers or () if value is not None}
        if H_COMPACT in headers:  # our sink's records (wire format 1): the epoch is in it
            headers.update(expand_compact(headers.pop(H_COMPACT)))
        if t.epoch in headers:
            epochs.append(int(headers[t.epoch]))
    return max(epochs, default=None)


class Watch:
    """A committed record at the end of the topic, seen by a ``read_committed`` consumer."""

    def __init__(self, t: Target) -> None:
        from confluent_kafka import OFFSET_END, Consumer, TopicPartition

        self.consumer = Consumer(
            {
                "bootstrap.servers": t.address,
                "group.id": "eo-chaos-watch",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 5,
                **dict(t.options),
            }
        )
        meta = self.consumer.list_topics(t.name, timeout=10)
        parts = sorted(meta.topics[t.name].partitions) if t.name in meta.topics else []
        self.consumer.assign([TopicPartition(t.name, p, OFFSET_END) for p in parts])

    def seen(self, timeout: float, alive: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and alive():
            msg = self.consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                return True
        return False

    def close(self) -> None:
        self.consumer.close()


def prepare(t: Target, partitions: int = 2) -> None:
    """The control's topic (``partitions`` partitions, as many replicas as the brokers'
    default, like the sink's topics): with one replica, a broker failover on a cluster would
    be an outage for the control (its partition offline while its only node is down) where
    the sink's topic fails over, and the two sides would not meet the same faults."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": t.address, **dict(t.options)})
    done = admin.create_topics([NewTopic(t.name, partitions, replication_factor=-1)])
    for future in done.values():
        future.result(timeout=30)


def write_partition(
    t: Target, epoch: int, rows: Sequence[tuple[Any, ...]], mid: Callable[[], None]
) -> None:
    """Produce each record (key values as JSON, the epoch header), flushing each half."""
    from confluent_kafka import Producer

    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    producer = Producer(
        {"bootstrap.servers": t.address, "acks": "all", "linger.ms": 5, **dict(t.options)}
    )
    half = len(rows) // 2
    for n, part in enumerate((rows[:half], rows[half:])):
        if n:
            mid()
        for row in part:
            value = dict(zip(t.keys, row, strict=True))
            key = None if row[0] is None else str(row[0]).encode()
            produce_waiting(
                producer,
                t.name,
                json.dumps(value).encode(),
                key,
                headers=[(t.epoch, str(epoch).encode())],
                on_delivery=delivered,
            )
            producer.poll(0)
        if producer.flush(60) or errors:
            raise RuntimeError(f"the control's records were not all delivered: {errors[:1]}")
