"""Audit a KafkaSink's output with kafka-python: a client independent of librdkafka.

The consumption recipe of :mod:`exactlyonce.connectors.kafka.reader` is implemented here a
second time, from its documentation, so the tests do not check the sink with its own code:
read the control topic (heads and confirmations), read the data topic, count per record ID
the records of confirmed attempts. The naive count (every record of the query that a plain
consumer sees) is kept next to it, to show what a reader without the recipe gets on this
broker.

Which isolation level the data topic is read with: ``read_committed`` where the broker hides
aborted records (Apache Kafka; the issue asks that a plain read_committed consumer be
exactly-once there), ``read_uncommitted`` elsewhere (Tansu). On Tansu the two deliver the
same records, but Tansu never times out an abandoned transaction, and a transaction that
touched a partition holding one leaves every partition it wrote held back from
read_committed readers (measured; see README "Kafka brokers without transaction timeouts").
"""

from __future__ import annotations

import json
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

with warnings.catch_warnings():
    # kafka-python 3.0 loads its protocol schemas with importlib.resources.read_text, which
    # Python 3.11 deprecates; the tests turn warnings into errors.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, TopicPartition

from confluent_kafka import Consumer, KafkaError
from confluent_kafka import TopicPartition as ConfluentPartition

CONTROL_TOPIC = "exactlyonce-control"


def named_headers(raw: Any) -> dict[str, bytes]:
    """A record's headers by name, with the sink's one ``eo`` header (wire format 1) split
    into the five names of wire format 0 (``eo-query``, ``eo-epoch``, ``eo-shard``,
    ``eo-attempt``, ``eo-record-id``). Written here from the recipe's text in
    :mod:`exactlyonce.connectors.kafka.reader`, not with the package's parser."""
    headers = {k: v.encode() if isinstance(v, str) else v for k, v in raw or []}
    compact = headers.pop("eo", None)
    if compact is not None:
        assert compact[:2] == b"1|", f"a wire format the audit does not know: {compact!r}"
        assert compact[-33:-32] == b"|", f"no record ID at the end: {compact!r}"
        _, epoch, shard, attempt, query = compact[:-33].split(b"|", 4)
        headers.update(
            {
                "eo-query": query,
                "eo-epoch": epoch,
                "eo-shard": shard,
                "eo-attempt": attempt,
                "eo-record-id": compact[-32:],
            }
        )
    return headers


def _escape(name: str) -> str:
    return name.replace("%", "%25").replace("|", "%7C")


def read_topic(
    bootstrap: str, topic: str, isolation: str = "read_committed", timeout_s: float = 60
) -> list[Any]:
    """Every record of every partition, from offset 0 to the end, with assign()."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return _read_topic(bootstrap, topic, isolation, timeout_s)


def field_counts(bootstrap: str, topic: str, field: str = "event_id") -> Counter[str]:
    """Records per value of one field of their JSON value, every record of the topic read
    with a plain ``read_committed`` consumer (:func:`read_topic`)."""
    return Counter(str(json.loads(r.value)[field]) for r in read_topic(bootstrap, topic))


def _read_topic(bootstrap: str, topic: str, isolation: str, timeout_s: float) -> list[Any]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        enable_auto_commit=False,
        group_id=None,
        auto_offset_reset="earliest",  # a log that starts past 0 (retention) reads from its start
    )
    try:
        partitions = consumer.partitions_for_topic(topic)
        assert partitions, f"topic {topic} has no partitions"
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        for tp in tps:  # 0, not seek_to_beginning: see tests/integration/test_kafka_offsets.py
            consumer.seek(tp, 0)
        ends = consumer.end_offsets(tps)
        records: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while True:
            batch = consumer.poll(timeout_ms=300, max_records=10_000)
            for rs in batch.values():
                records.extend(rs)
            if not batch and all(consumer.position(tp) >= ends[tp] for tp in tps):
                return records
            assert time.monotonic() < deadline, f"reading {topic} timed out"
    finally:
        consumer.close()


@dataclass
class KafkaAudit:
    query: str
    head: dict[str, Any] | None
    confirmed: dict[tuple[int, int, str], dict[str, Any]]
    accepted: Counter[str] = field(default_factory=Counter)
    naive: Counter[str] = field(default_factory=Counter)
    per_attempt: Counter[tuple[int, int, str]] = field(default_factory=Counter)
    beyond_frontier: int = 0
    count_field: str = "count"
    naive_epochs: Counter[int] = field(default_factory=Counter)
    accepted_epochs: Counter[int] = field(default_factory=Counter)

    def assert_exactly_once(self, expected: set[str]) -> None:
        twice = {i: n for i, n in self.accepted.items() if n > 1}
        assert not twice, f"{len(twice)} IDs delivered more than once: {list(twice.items())[:5]}"
        missing = expected - set(self.accepted)
        extra = set(self.accepted) - expected
        assert not missing, f"{len(missing)} expected IDs missing: {sorted(missing)[:5]}"
        assert not extra, f"{len(extra)} unexpected IDs: {sorted(extra)[:5]}"
        for attempt, info in self.confirmed.items():
            claimed = int(info.get(self.count_field, 0))
            assert self.per_attempt[attempt] == claimed, (
                f"attempt {attempt} confirmed {claimed} records, the topic holds "
                f"{self.per_attempt[attempt]}"
            )
        assert self.beyond_frontier == 0, "records of confirmed attempts past the frontier"

    @property
    def naive_extra(self) -> int:
        """Records a plain read_committed consumer sees beyond one per ID."""
        return sum(self.naive.values()) - len(self.naive)

    def naive_extra_in(self, epoch: int) -> int:
        """Records of ``epoch`` a plain read_committed consumer sees that the recipe skips."""
        return self.naive_epochs[epoch] - self.accepted_epochs[epoch]


def audit(
    bootstrap: str,
    topic: str,
    query: str,
    sink: str | None = None,
    control_topic: str = CONTROL_TOPIC,
    count_field: str = "count",
    *,
    read_committed: bool = False,
) -> KafkaAudit:
    """Count, per record ID, the records of confirmed attempts (the recipe) and all records
    of the query (naive). For a dead-letter topic pass ``sink`` and
    ``count_field="dead_letters"``. ``read_committed``: read the data as a plain
    read_committed consumer does (pass the sink's ``hides_aborted``)."""
    sink = sink or f"kafka:{topic}"
    prefix = f"{_escape(query)}|{_escape(sink)}|"
    head: dict[str, Any] | None = None
    confirmed: dict[tuple[int, int, str], dict[str, Any]] = {}
    for record in read_topic(bootstrap, control_topic, "read_uncommitted"):
        key = (record.key or b"").decode()
        if not key.startswith(prefix):
            continue
        rest = key[len(prefix) :].split("|")
        if rest == ["head"]:
            head = json.loads(record.value) if record.value else None
        elif len(rest) == 4 and rest[2] == "confirmed" and record.value:
            confirmed[(int(rest[0]), int(rest[1]), rest[3])] = json.loads(record.value)
    result = KafkaAudit(query, head, confirmed, count_field=count_field)
    frontier = (head or {}).get("frontier", {}).get(topic, {})
    isolation = "read_committed" if read_committed else "read_uncommitted"
    for record in read_topic(bootstrap, topic, isolation):
        headers = named_headers(record.headers)
        if headers.get("eo-query", b"").decode() != query:
            continue
        rid = headers["eo-record-id"].decode() if "eo-record-id" in headers else "<none>"
        result.naive[rid] += 1
        result.naive_epochs[int(headers["eo-epoch"])] += 1
        attempt = (
            int(headers["eo-epoch"]),
            int(headers["eo-shard"]),
            headers["eo-attempt"].decode(),
        )
        if attempt in confirmed:
            result.accepted[rid] += 1
            result.accepted_epochs[attempt[0]] += 1
            result.per_attempt[attempt] += 1
            if record.offset >= int(frontier.get(str(record.partition), 0)):
                result.beyond_frontier += 1
    return result


# The two Kafka clients a plain consumer may be built on: the Java client's protocol
# reimplemented in Python (kafka-python) and librdkafka (confluent-kafka).
PLAIN_CLIENTS = ("kafka-python", "confluent-kafka")


def read_topic_confluent(
    bootstrap: str, topic: str, isolation: str = "read_committed", timeout_s: float = 60
) -> list[tuple[int, int, list[Any], bytes | None]]:
    """Every record of every partition as (partition, offset, headers, value), from offset 0 until
    librdkafka reports the end of each partition (for read_committed: the last stable
    offset), with a plain confluent-kafka consumer (assign, no group offsets)."""
    client = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"audit-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        partitions = client.list_topics(topic, timeout=10).topics[topic].partitions
        assert partitions, f"topic {topic} has no partitions"
        client.assign([ConfluentPartition(topic, p, 0) for p in sorted(partitions)])
        records: list[tuple[int, int, list[Any], bytes | None]] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(at_end) < len(partitions):
            assert time.monotonic() < deadline, f"reading {topic} timed out (confluent-kafka)"
            for msg in client.consume(num_messages=10_000, timeout=0.3):
                error, partition, offset = msg.error(), msg.partition(), msg.offset()
                assert partition is not None
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(partition)
                    continue
                assert error is None and offset is not None, f"reading {topic}: {error}"
                at_end.discard(partition)
                headers: list[Any] = list(msg.headers() or [])
                records.append((partition, offset, headers, msg.value()))
        return records
    finally:
        client.close()


def plain_counts(bootstrap: str, topic: str, query: str, client: str) -> Counter[str]:
    """What a plain ``isolation.level=read_committed`` consumer built on ``client`` (one of
    :data:`PLAIN_CLIENTS`) reads of ``query`` in ``topic``: records per ``eo-record-id``
    (``<none>`` for records without one, such as dead letters of null keys). No recipe."""
    if client == "kafka-python":
        rows = [(r.headers or []) for r in read_topic(bootstrap, topic, "read_committed")]
    else:
        assert client == "confluent-kafka", client
        rows = [h for _, _, h, _ in read_topic_confluent(bootstrap, topic, "read_committed")]
    counts: Counter[str] = Counter()
    for raw in rows:
        headers = named_headers(raw)
        if (headers.get("eo-query") or b"").decode() != query:
            continue
        rid = headers.get("eo-record-id")
        counts[rid.decode() if rid else "<none>"] += 1
    return counts


def assert_plain_exactly_once(
    bootstrap: str, topic: str, query: str, expected: set[str]
) -> dict[str, Counter[str]]:
    """Both plain read_committed consumers see each expected record ID exactly once: no
    duplicate, none missing, none unexpected. Returns the counts per client."""
    seen: dict[str, Counter[str]] = {}
    for client in PLAIN_CLIENTS:
        counts = plain_counts(bootstrap, topic, query, client)
        twice = {i: n for i, n in counts.items() if n > 1}
        missing = expected - set(counts)
        extra = set(counts) - expected
        print(
            f"plain read_committed ({client}) on {topic}: {sum(counts.values())} records, "
            f"{len(counts)} IDs, {len(twice)} duplicated, {len(missing)} missing"
        )
        assert not twice, f"{client}: {len(twice)} IDs read twice: {list(twice.items())[:5]}"
        assert not missing, f"{client}: {len(missing)} IDs missing: {sorted(missing)[:5]}"
        assert not extra, f"{client}: {len(extra)} unexpected IDs: {sorted(extra)[:5]}"
        seen[client] = counts
    return seen
