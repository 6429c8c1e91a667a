"""The exactly-once audit of the Kafka sink's output, as any downstream consumer would read it:
a PLAIN ``isolation.level=read_committed`` consumer (confluent-kafka; no recipe, no control
topic, no filtering by attempt) that reads every partition of the output topic and of its
dead-letter topic from offset 0 to the end, and counts every record per record ID (its
``eo-record-id`` header). Read-only."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, TopicPartition

from exactlyonce.connectors.kafka.clients import client_log
from exactlyonce.connectors.kafka.consume import headers_of
from exactlyonce.connectors.kafka.protocol import H_QUERY, H_RECORD_ID
from exactlyonce.progress import Progress

READ_TIMEOUT_S = 60.0
NO_ID = "<no eo-record-id>"


@dataclass
class TopicAudit:
    """What a read_committed consumer sees in the topics against what it should see."""

    query_name: str
    topic: str
    expected_ids: int
    records: Counter[str]  # record ID -> records seen
    missing: int
    unexpected: int
    dead_letters: int
    expected_dead_letters: int
    head_epoch: int | None = None
    kills: int | None = None

    @property
    def read(self) -> int:
        return sum(self.records.values())

    @property
    def duplicates(self) -> int:
        return self.read - len(self.records)

    @property
    def ok(self) -> bool:
        """Exactly once: every expected ID seen once, nothing else, dead letters as expected."""
        return (
            self.duplicates == 0
            and self.missing == 0
            and self.unexpected == 0
            and self.dead_letters == self.expected_dead_letters
        )


def read_topic_audit(
    bootstrap: str,
    topic: str,
    dead_letter_topic: str,
    query_name: str,
    expected: set[str],
    expected_dead_letters: int,
) -> TopicAudit:
    """Count the output topic's records per ID and the query's dead letters, as committed."""
    seen: Counter[str] = Counter()
    for headers in read_headers(bootstrap, topic, expected=len(expected)):
        seen[headers.get(H_RECORD_ID, NO_ID.encode()).decode()] += 1
    dead = sum(
        1
        for headers in read_headers(bootstrap, dead_letter_topic)
        if headers.get(H_QUERY, b"").decode() == query_name
    )
    found = set(seen)
    return TopicAudit(
        query_name=query_name,
        topic=topic,
        expected_ids=len(expected),
        records=seen,
        missing=len(expected - found),
        unexpected=len(found - expected),
        dead_letters=dead,
        expected_dead_letters=expected_dead_letters,
    )


def read_headers(bootstrap: str, topic: str, expected: int | None = None) -> list[dict[str, bytes]]:
    """Every committed record's headers, every partition from offset 0 to its end (the last
    stable offset: read_committed), read with assign() and no consumer group. With
    ``expected`` (records), the reading shows progress against it
    (:class:`~exactlyonce.progress.Progress`: a bar on a terminal, plain lines elsewhere)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "exactlyonce-demo-audit",  # required by librdkafka; nothing committed
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "logger": client_log,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=READ_TIMEOUT_S).topics[topic]
        if meta.error is not None:
            raise SystemExit(f"cannot read topic {topic}: {meta.error}")
        consumer.assign([TopicPartition(topic, p, 0) for p in sorted(meta.partitions)])
        if expected is None:
            return _consume(consumer, topic, len(meta.partitions))
        with Progress(f"audit kafka:{topic}", total=expected, unit="records") as progress:
            return _consume(consumer, topic, len(meta.partitions), progress)
    finally:
        consumer.close()


def _consume(
    consumer: Consumer, topic: str, partitions: int, progress: Progress | None = None
) -> list[dict[str, bytes]]:
    out: list[dict[str, bytes]] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + READ_TIMEOUT_S
    while len(at_end) < partitions:
        if time.monotonic() > deadline:
            raise SystemExit(f"reading {topic} timed out")
        if progress is not None:
            progress.update(len(out) - progress.done)
        for msg in consumer.consume(num_messages=10_000, timeout=0.5):
            err, partition = msg.error(), msg.partition()
            if err is not None and err.code() == KafkaError._PARTITION_EOF:
                at_end.add(-1 if partition is None else partition)
            elif err is not None:
                raise SystemExit(f"reading {topic} failed: {err}")
            else:
                at_end.discard(-1 if partition is None else partition)
                out.append(headers_of(msg))
    if progress is not None:
        progress.update(len(out) - progress.done)
    return out


def print_topic_audit(a: TopicAudit) -> None:
    """The audit as a table (no verdict line: the demo prints one for all its audits)."""

    def line(label: str, value: object, note: str = "") -> None:
        shown = "-" if value is None else value
        print(f"  {label:<22}{shown:>10}  {note}".rstrip())

    print(f"AUDIT {a.query_name} -> kafka:{a.topic} (plain read_committed consumer)")
    line("distinct IDs expected", a.expected_ids)
    line("records read", a.read)
    line("distinct record_ids", len(a.records))
    line("duplicates", a.duplicates, "must be 0")
    line("missing", a.missing, "must be 0")
    line("unexpected IDs", a.unexpected, "must be 0")
    line("dead letters", a.dead_letters, f"must be {a.expected_dead_letters}")
    if a.kills is not None:
        line("kills (SIGKILL)", a.kills)
    epochs = None if a.head_epoch is None else a.head_epoch + 1
    line("epochs committed", epochs, "" if epochs is None else f"head epoch {a.head_epoch}")
