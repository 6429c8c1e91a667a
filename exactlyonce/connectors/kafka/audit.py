"""The Kafka sink's audit: every record of its topic counted per record ID (its
``eo-record-id`` header), read from offset 0 of every partition (never "earliest": DESIGN
invariant 11) to the end.

On a broker the sink's preflight probe measured to hide aborted records (Apache Kafka), the
reader is a PLAIN ``read_committed`` consumer, as any downstream consumer reads the topic:
every record counts, and one without ``eo-record-id`` cannot be attributed and fails the
audit. On a broker that shows aborted records (Tansu) a plain consumer would count the debris
of aborted attempts, so the reading follows the consumption recipe
(:mod:`exactlyonce.connectors.kafka.reader`): confirmed attempts up to the head's frontier.
The query's dead letters are read the same way from the dead-letter topic. Read-only, apart
from what the sink's preflight creates (its control, dead-letter and probe topics)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

from confluent_kafka import Message

from exactlyonce.connectors.base.audit import SinkAudit
from exactlyonce.connectors.base.expected import Expected
from exactlyonce.connectors.kafka import KafkaSink
from exactlyonce.connectors.kafka.reader import (
    H_QUERY,
    H_RECORD_ID,
    START,
    consumer,
    drain,
    headers_of,
    load_commits,
    partitions_of,
    read_exactly_once,
)
from exactlyonce.progress import Progress

READ_TIMEOUT_S = 60.0  # a read that gets no record for this long fails


def read_kafka(sink: KafkaSink, expected: Expected) -> SinkAudit:
    """Records per record ID of the sink's topic, its dead letters and head."""
    sink.preflight()  # the broker probe: sink.hides_aborted
    if sink.hides_aborted:
        how = "plain read_committed consumer"
        records = _plain_read(sink, sink.topic)
        letters = _plain_read(sink, sink.dead_letter_topic)
    else:
        how = "consumption recipe: this broker shows aborted records"
        records, letters = _recipe_reads(sink)
    counts, unattributable = _count_ids(records, f"audit kafka:{sink.topic}", len(expected))
    dead = _of_query(letters, sink.query_name)
    head = sink.peek_head()
    return SinkAudit(
        query_name=sink.query_name,
        sink=sink.sink_name,
        kind="kafka",
        read_with=how,
        unit="records read",
        expected=expected,
        counts=counts,
        unattributable=unattributable,
        head_epoch=head.epoch if head else None,
        dead_letters=dead,
    )


def count_dead_letters(sink: KafkaSink) -> int:
    """The committed dead letters of ``sink``'s query in its dead-letter topic (a buffer's:
    the records Spark found without a key; the drainer never sees them)."""
    sink.preflight()
    if sink.hides_aborted:
        letters = _plain_read(sink, sink.dead_letter_topic)
    else:
        letters = _recipe_reads(sink)[1]
    return _of_query(letters, sink.query_name)


def _of_query(letters: Iterable[Message], query_name: str) -> int:
    return sum(1 for m in letters if headers_of(m).get(H_QUERY, b"").decode() == query_name)


def _count_ids(records: Iterable[Message], what: str, expected: int) -> tuple[Counter[str], int]:
    """Records per ``eo-record-id``, and how many had none."""
    counts: Counter[str] = Counter()
    unattributable = 0
    with Progress(what, total=expected, unit="records") as progress:
        for n, msg in enumerate(records, 1):
            rid = headers_of(msg).get(H_RECORD_ID)
            if rid is None:
                unattributable += 1
            else:
                counts[rid.decode(errors="replace")] += 1
            if n % 10_000 == 0:
                progress.update(10_000)
        progress.update(sum(counts.values()) + unattributable - progress.done)
    return counts, unattributable


def _plain_read(sink: KafkaSink, topic: str) -> Iterator[Message]:
    """Every committed record of ``topic``, every partition from offset 0 to its end."""
    client = consumer(
        sink.bootstrap_servers, sink.config.client_config(), isolation="read_committed"
    )
    try:
        parts = partitions_of(client, topic, READ_TIMEOUT_S)
        ranges = {(topic, p): (START, None) for p in parts}
        yield from drain(client, ranges, READ_TIMEOUT_S, f"topic {topic!r}")
    finally:
        client.close()


def _recipe_reads(sink: KafkaSink) -> tuple[Iterator[Message], Iterator[Message]]:
    """The topic's and the dead-letter topic's records of confirmed attempts (the recipe)."""
    config = sink.config.client_config()
    commits = load_commits(
        sink.bootstrap_servers,
        sink.query_name,
        sink_name=sink.sink_name,
        control_topic=sink.control_topic,
        consumer_config=config,
        timeout_s=READ_TIMEOUT_S,
    )

    def read(topic: str) -> Iterator[Message]:
        return read_exactly_once(
            sink.bootstrap_servers,
            topic,
            sink.query_name,
            consumer_config=config,
            commits=commits,
            timeout_s=READ_TIMEOUT_S,
        )

    return read(sink.topic), read(sink.dead_letter_topic)
