"""Low-level reads of Kafka partitions by offset: the consumer the sink's readers use, reading
``[start, end)`` ranges to their end, and exact start and end offsets.

These reads never trust a broker's EARLIEST answer (they start at offset 0, :data:`START`) nor
its ListOffsets end (:func:`exact_end_offsets` reads to the end-of-partition event).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Generator, Iterable, Iterator, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from exactlyonce.connectors.kafka.protocol import (
    H_COMPACT,
    H_RECORD_ID,
    H_RECORD_IDS,
    RECORD_ID_BYTES,
    expand_compact,
    shared_config,
)
from exactlyonce.errors import SinkUnavailableError
from exactlyonce.retry import RetryPolicy

# librdkafka's own lines (connections, retries) of every Kafka client of the sink: Python
# logging, never straight to stderr. Defined here, the lowest module; clients.py re-exports.
client_log = logging.getLogger("exactlyonce.kafka.client")
# Without logging set up, Python's last-resort handler would print these warnings (a
# coordinator still loading, a retried connection: librdkafka retries them itself, and what
# matters reaches the caller as an error). A configured logging still gets every record.
client_log.addHandler(logging.NullHandler())


def arrived(client: Consumer, wait_s: float, most: int = 1000) -> list[Message]:
    """The records (and events) ``client`` has fetched, at most ``most``, waiting at most
    ``wait_s`` for the first. ``consume(most, wait_s)`` alone returns only at ``most`` records
    or after the whole ``wait_s``: every read of a few records (a Real-time Mode frontier, a
    head, a reader at the end of a partition) paid the full wait (20 ms steps in bench
    realtime's Kafka latencies)."""
    first = client.poll(wait_s)
    if first is None:
        return []
    return [first, *client.consume(num_messages=most - 1, timeout=0)] if most > 1 else [first]


def consumer(
    bootstrap_servers: str,
    config: Mapping[str, Any] | None = None,
    *,
    isolation: str = "read_committed",
    offset_reset: str = "earliest",
) -> Consumer:
    """A consumer for assign()-and-seek reads: no group membership, no offset commits.

    ``offset_reset``: what a read below the partition's start does. ``earliest`` (reads from
    :data:`START`) starts at the broker's start; ``error`` reports it instead (the
    ``_AUTO_OFFSET_RESET`` event), for a reader that must not skip a range that expired."""
    return Consumer(
        {
            "reconnect.backoff.ms": 10,  # a short-lived client: connect without the 50 ms wait
            **shared_config(config or {}),
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"exactlyonce-reader-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": offset_reset,
            "isolation.level": isolation,
            # Reads here end at the partition's end: do not let the broker hold an empty
            # fetch for the default 500 ms before the end-of-partition event.
            "fetch.wait.max.ms": 10,
            # librdkafka stops fetching a partition for fetch.queue.backoff.ms (1000 by default)
            # once queued.min.messages are queued locally: a reader faster than Kafka then
            # sat idle for a second. 0.25 s -> 1.2-1.3 s for 200k records in 2 of 6 reads
            # here; 0 of 6 with 10 ms.
            "fetch.queue.backoff.ms": 10,
            "logger": client_log,
        }
    )


# Where a read "from the beginning" starts: offset 0, never OFFSET_BEGINNING. The latter asks
# the broker (ListOffsets EARLIEST), and Tansu 0.6 can answer above the first record: when
# transactional producers write a fresh partition at once (two shard tasks of an epoch), about
# one partition in 8 here, for good. Reading from it skipped that first batch: data records,
# and on the control topic, confirmations and heads (tests/integration/test_kafka_offsets.py).
# A log whose start really moved on (retention) answers offset 0 with OFFSET_OUT_OF_RANGE,
# and auto.offset.reset=earliest then starts the read at the broker's start.
START = 0


# A request sent to a broker that went away, or that no longer leads the partition: the same
# request succeeds once the cluster elected a new leader. Kafka elects one for a SIGKILLed
# broker's partitions only after fencing it (broker.session.timeout.ms, 9 s by default; later
# when the controller died too); meanwhile librdkafka fails the request: _DESTROY_BROKER once
# the broker left the cluster's metadata, or a timeout while its cache still names the dead
# leader (both seen on a 3-node cluster: tests/crash/test_kafka_failover.py).
_FAILOVER_CODES = frozenset(
    {
        KafkaError._DESTROY_BROKER,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
    }
)
# As long as a shard task's commit rides out a failover (KafkaTarget.timeout_s, 60 s at least).
FAILOVER_WAIT_S = 60.0
_ATTEMPT_S = 5.0  # one request's wait: a dead leader in the cache costs this, then a refresh


def failover_error(exc: BaseException) -> bool:
    """A Kafka error that a leader failover explains: worth asking again (not fatal)."""
    if not isinstance(exc, KafkaException) or not exc.args:
        return False
    err = exc.args[0]
    return (
        isinstance(err, KafkaError)
        and not err.fatal()
        and (err.retriable() or err.code() in _FAILOVER_CODES)
    )


def watermarks(client: Consumer, topic: str, partition: int, timeout_s: float) -> tuple[int, int]:
    """The partition's (low, high) watermarks from its leader (never cached), asked again
    through a leader failover (after a metadata refresh, so the next request goes to the
    leader the cluster names now): for ``timeout_s``, and at least :data:`FAILOVER_WAIT_S`."""
    policy = RetryPolicy(
        attempts=1_000_000,  # the deadline ends it
        initial_s=0.2,
        max_s=1.0,
        deadline_s=max(timeout_s, FAILOVER_WAIT_S),
        transient=failover_error,
    )
    tp = TopicPartition(topic, partition)
    attempt_s = min(timeout_s, _ATTEMPT_S)

    def ask() -> tuple[int, int]:
        low, high = client.get_watermark_offsets(tp, timeout=attempt_s, cached=False)
        return int(low), int(high)

    def again(exc: BaseException, retry: int, wait_s: float) -> None:
        client_log.info("%s[%d] watermarks asked again (%s)", topic, partition, exc)
        with contextlib.suppress(KafkaException):
            client.list_topics(timeout=attempt_s)  # all topics: see partitions_of

    return policy.call(ask, on_retry=again)


def log_start_offset(client: Consumer, topic: str, partition: int, timeout_s: float) -> int:
    """The first offset the partition still holds, exactly: the broker's low watermark when it
    is 0, else the first record that a read from offset 0 gets (the low watermark can lie
    above the first record; see :data:`START`). An empty partition starts at its end."""
    low, high = watermarks(client, topic, partition, timeout_s)
    if low <= 0 or high <= 0:
        return max(0, int(low))
    reader = drain(client, {(topic, partition): (START, high)}, timeout_s, f"topic {topic!r}")
    try:
        first = next(reader, None)  # only the first record matters
    finally:
        reader.close()
    return int(low) if first is None else min(int(low), offset_of(first))


def partitions_of(client: Any, topic: str, timeout_s: float) -> list[int]:
    """The topic's partitions. Lists ALL topics: asking for one by name makes some brokers
    (Tansu) create it."""
    try:
        meta = client.list_topics(timeout=timeout_s)
    except Exception as exc:
        raise SinkUnavailableError(f"Kafka metadata unavailable: {exc}") from None
    found = meta.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        raise SinkUnavailableError(f"topic {topic!r} does not exist")
    return sorted(found.partitions)


def drain(
    client: Consumer,
    ranges: Mapping[tuple[str, int], tuple[int, int | None]],
    timeout_s: float,
    what: str = "",
) -> Generator[Message, None, None]:
    """Yield every record of ``(topic, partition) -> [start, end)`` in offset order per
    partition; ``end=None`` reads to the end the broker reports (end-of-partition event).

    ``start`` is an offset (:data:`START` for the first record). Raises SinkUnavailableError
    when no record arrives for ``timeout_s`` before the range is read (for example a
    read_committed read held back by an open transaction); a long range that keeps arriving is
    read to its end.
    """
    todo = {tp: r for tp, r in ranges.items() if r[1] is None or r[0] < 0 or r[0] < r[1]}
    if not todo:
        return
    assigned = [TopicPartition(t, p, start) for (t, p), (start, _) in todo.items()]
    client.assign(assigned)
    try:
        yield from _drain_assigned(client, todo, timeout_s, what)
    finally:  # leave the consumer reusable: nothing assigned, nothing paused
        client.resume([TopicPartition(t.topic, t.partition) for t in assigned])
        client.unassign()


def _drain_assigned(
    client: Consumer,
    todo: dict[tuple[str, int], tuple[int, int | None]],
    timeout_s: float,
    what: str,
) -> Iterator[Message]:
    deadline = time.monotonic() + timeout_s
    while todo:
        if time.monotonic() > deadline:
            left = ", ".join(f"{t}[{p}]" for t, p in sorted(todo))
            raise SinkUnavailableError(
                f"reading {what or 'Kafka'} made no progress towards the end of {left} for "
                f"{timeout_s:.0f}s (an open transaction may hold back read_committed reads)"
            )
        for msg in arrived(client, 0.02):
            deadline = time.monotonic() + timeout_s  # a deadline for progress, not in total
            tp = where_of(msg)
            if tp not in todo:
                continue
            end = todo[tp][1]
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if end is None or offset_of(msg) >= end:
                        _done(client, todo, tp)
                    continue
                if (
                    err.code()
                    in (
                        KafkaError.UNKNOWN_TOPIC_OR_PART,
                        KafkaError.TOPIC_AUTHORIZATION_FAILED,
                    )
                    or err.fatal()
                ):
                    raise SinkUnavailableError(f"reading {what or 'Kafka'}: {err.str()}")
                continue  # transient (transport, leader change): the client retries
            offset = offset_of(msg)
            if end is not None and offset >= end:
                _done(client, todo, tp)
                continue
            yield msg
            if end is not None and offset >= end - 1:
                _done(client, todo, tp)


def _done(
    client: Consumer, todo: dict[tuple[str, int], tuple[int, int | None]], tp: tuple[str, int]
) -> None:
    del todo[tp]
    client.pause([TopicPartition(tp[0], tp[1])])


def headers_of(msg: Message) -> dict[str, bytes]:
    """A record's headers by name (text values as UTF-8 bytes), in wire format 0's names: a
    record of wire format 1 has its one ``eo`` header expanded into the five
    (:func:`~.protocol.expand_compact`, which refuses a format it does not know)."""
    out: dict[str, bytes] = {}
    raw = msg.headers() or []
    for name, value in raw.items() if isinstance(raw, dict) else raw:
        if value is not None:
            out[name] = value.encode() if isinstance(value, str) else bytes(value)
    compact = out.pop(H_COMPACT, None)
    if compact is not None:
        out.update(expand_compact(compact))
    return out


def record_ids_of(headers: Mapping[str, bytes]) -> list[bytes]:
    """The record IDs a message carries: one (``eo-record-id``), or a frame's
    (``eo-record-ids``); none when it has neither."""
    if H_RECORD_ID in headers:
        return [headers[H_RECORD_ID]]
    blob = headers.get(H_RECORD_IDS) or b""
    return [blob[i : i + RECORD_ID_BYTES] for i in range(0, len(blob), RECORD_ID_BYTES)]


def offset_of(msg: Message) -> int:
    offset = msg.offset()
    return -1 if offset is None else int(offset)


def where_of(msg: Message) -> tuple[str, int]:
    return str(msg.topic()), int(msg.partition() or 0)


def exact_end_offsets(
    client: Consumer, topic: str, partitions: Iterable[int], timeout_s: float
) -> dict[int, int]:
    """Each partition's end offset, exactly, from a read_uncommitted consumer.

    The end-of-partition event of a fetch is exact on every broker we met; the ListOffsets
    answer is not everywhere (Tansu reports the last batch's base offset + 1). So: ask
    ListOffsets for a lower bound, then read from just before it to the end event.
    """
    ends: dict[int, int] = {}
    ranges: dict[tuple[str, int], tuple[int, int | None]] = {}
    for p in partitions:
        low, high = watermarks(client, topic, p, timeout_s)
        if high <= low:
            ends[p] = high
        else:
            ranges[(topic, p)] = (high - 1, None)
            ends[p] = high
    if ranges:
        client.assign([TopicPartition(t, p, s) for (t, p), (s, _) in ranges.items()])
        deadline = time.monotonic() + timeout_s
        todo = set(ranges)
        while todo:
            if time.monotonic() > deadline:
                raise SinkUnavailableError(f"could not read the end offsets of {topic!r}")
            for msg in arrived(client, 0.02):
                tp = where_of(msg)
                if tp not in todo:
                    continue
                err = msg.error()
                if err is None:
                    ends[tp[1]] = max(ends[tp[1]], offset_of(msg) + 1)
                elif err.code() == KafkaError._PARTITION_EOF:
                    ends[tp[1]] = max(ends[tp[1]], offset_of(msg))
                    todo.discard(tp)
                elif err.fatal() or err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise SinkUnavailableError(f"reading the end of {topic!r}: {err.str()}")
        client.unassign()
    return ends


SCAN_WINDOW = 2_000  # records read back from the end first; quadrupled while not found


def latest_of_key(
    client: Consumer,
    topic: str,
    partition: int,
    key: bytes,
    timeout_s: float,
    end: int | None = None,
) -> tuple[int, bytes | None] | None:
    """The last record under ``key`` in the partition below ``end``, as ``(offset, value)``
    (value None: a tombstone), or None when no record has that key: read back from ``end``
    (default: the partition's exact end) in windows of :data:`SCAN_WINDOW` records,
    quadrupled while the key is not found (the client's isolation decides whether aborted
    records count). A read_committed client's "end" is the last stable offset: records
    committed above another producer's open transaction are not in it. Give ``end`` (one past
    a record this caller committed) to wait for them."""
    # Not the low watermark: some brokers put it above the first record (START).
    low = log_start_offset(client, topic, partition, timeout_s)
    if end is None:
        end = exact_end_offsets(client, topic, [partition], timeout_s)[partition]
    window = SCAN_WINDOW
    while end > low:
        start = max(low, end - window)
        latest: tuple[int, bytes | None] | None = None
        for msg in drain(client, {(topic, partition): (start, end)}, timeout_s * 6, topic):
            if msg.key() == key:
                latest = (offset_of(msg), msg.value())
        if latest is not None:
            return latest
        end, window = start, window * 4
    return None
