"""Reading a KafkaSink's topic exactly once: the consumption recipe, as code.

Why a recipe: on Apache Kafka, a plain ``isolation.level=read_committed`` consumer already
sees every record of a :class:`~exactlyonce.connectors.kafka.KafkaSink` exactly once. Some
Kafka-protocol brokers (Tansu, librdkafka's mock cluster) still deliver the records of ABORTED
transactions to such a consumer, so a task that crashed mid-write leaves visible debris there.
The sink therefore records, next to the data, which write attempts really committed; a reader
that follows these steps sees each record exactly once on every broker.

What the sink writes
--------------------
Every data record carries these headers (values are UTF-8 text):

``eo-query``      the query name
``eo-epoch``      the epoch (Spark's batch id), decimal
``eo-shard``      the shard, decimal
``eo-record-id``  the record's ID, 32 hex digits
``eo-attempt``    a nonce naming the task attempt that wrote it, unique per attempt

A buffer topic (:mod:`exactlyonce.buffer`) packs records into FRAMES instead: one message
holds up to ``frame_records`` records, their JSON values one per line (JSON text has no raw
line break), and instead of ``eo-record-id`` the header ``eo-record-ids`` holds their IDs,
32 bytes each, in the same order. The other headers are those above, and the recipe is the
same, frame by frame. A frame's ``count`` in the confirmation counts records, not messages.

The control topic (default ``exactlyonce-control``, compacted) holds small JSON records. In
every key, the query and sink names have ``%`` written as ``%25`` and ``|`` as ``%7C``:

``<query>|<sink>|head``                              the head: ``{"epoch", "frontier", ...}``
``<query>|<sink>|<epoch>|<shard>|confirmed|<attempt>`` attempt ``<attempt>`` of that shard
                                                      committed: ``{"attempt", "count", ...}``
``<query>|<sink>|<epoch>|<shard>``                    the in-transaction commit marker (a
                                                      reader does not need it)

The sink name is ``kafka:<topic>`` unless the user named it. A confirmation is written only
after the attempt's transaction committed, and the sink writes the head, with a ``frontier``
(per topic, per partition, the offset where the committed data ended), only after every shard
of the epoch was confirmed.

The recipe
----------
1. Read every partition of the control topic from its beginning to its end (assign the
   partitions at offset 0, with ``auto.offset.reset=earliest``: not ``OFFSET_BEGINNING``,
   which some brokers answer above the first record; no consumer group needed; any
   isolation level). For your query and
   sink keep (a) the LAST head record (a record with an empty value deletes it) and (b) every
   confirmation key: the set of confirmed ``(epoch, shard, attempt)``. Ignore other keys.
2. Read each partition of the data topic from where you stopped last time (the beginning the
   first time) up to, not including, the head's ``frontier`` offset of that partition, with
   ``read_uncommitted``. The confirmations of step 3 decide what counts, so nothing an
   aborted transaction wrote gets through; and an open transaction (a crashed writer's, on
   a broker that never times it out, such as Tansu) cannot hold the read back, as it can a
   ``read_committed`` read.
3. Deliver a record when its ``eo-query`` is your query and its ``(eo-epoch, eo-shard,
   eo-attempt)`` is confirmed. Skip every other record: it belongs to an aborted, fenced or
   superseded attempt, or to another writer.
4. Remember the frontier as where to resume. Records past it belong to epochs not committed
   yet; the next head's frontier will cover them.

Everything before the frontier is decided: the head is written only after every shard of its
epoch committed and was confirmed, and a new attempt fences older ones before it writes. The
dead-letter topic (``<topic>.dead-letters``) is read the same way: its frontier is in the same
head, under its own topic name.

:func:`read_exactly_once` is this recipe with confluent-kafka; :func:`load_commits` is step 1.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from exactlyonce.errors import SinkUnavailableError

DEFAULT_CONTROL_TOPIC = "exactlyonce-control"

H_QUERY = "eo-query"
H_EPOCH = "eo-epoch"
H_SHARD = "eo-shard"
H_RECORD_ID = "eo-record-id"
H_RECORD_IDS = "eo-record-ids"  # frames (a buffer's messages): every record's ID, 32 bytes each
RECORD_ID_BYTES = 32
H_ATTEMPT = "eo-attempt"
H_ERROR = "eo-error"  # dead letters only

HEAD = "head"
CONFIRMED = "confirmed"
SYNC = "sync"
PROBE_KEY = "__exactlyonce_probe__"

# Only connection and security settings are shared between the sink's producers, consumers
# and admin clients; producer tuning would be noise (and a warning) in a consumer.
SHARED_CONFIG_PREFIXES = (
    "security.",
    "sasl.",
    "ssl.",
    "socket.",
    "broker.",
    "client.",
    "reconnect.",
    "metadata.",
    "api.version",
    "connections.",
    "enable.ssl",
    "topic.metadata.",
)


def default_sink_name(topic: str) -> str:
    return f"kafka:{topic}"


def dead_letter_topic_for(topic: str) -> str:
    return f"{topic}.dead-letters"


def _part(name: str) -> str:
    return name.replace("%", "%25").replace("|", "%7C")


def control_prefix(query_name: str, sink_name: str) -> str:
    return f"{_part(query_name)}|{_part(sink_name)}|"


def head_key(query_name: str, sink_name: str) -> str:
    return control_prefix(query_name, sink_name) + HEAD


def marker_key(query_name: str, sink_name: str, epoch: int, shard: int) -> str:
    return f"{control_prefix(query_name, sink_name)}{epoch}|{shard}"


def confirmation_key(query_name: str, sink_name: str, epoch: int, shard: int, attempt: str) -> str:
    return f"{control_prefix(query_name, sink_name)}{epoch}|{shard}|{CONFIRMED}|{attempt}"


def sync_key(query_name: str, sink_name: str, shard: int) -> str:
    return f"{control_prefix(query_name, sink_name)}{SYNC}|{shard}"


def shared_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The connection and security part of a client configuration."""
    return {k: v for k, v in config.items() if k.startswith(SHARED_CONFIG_PREFIXES)}


def consumer(
    bootstrap_servers: str,
    config: Mapping[str, Any] | None = None,
    *,
    isolation: str = "read_committed",
) -> Consumer:
    """A consumer for assign()-and-seek reads: no group membership, no offset commits."""
    return Consumer(
        {
            "reconnect.backoff.ms": 10,  # a short-lived client: connect without the 50 ms wait
            **shared_config(config or {}),
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"exactlyonce-reader-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
            # Reads here end at the partition's end: do not let the broker hold an empty
            # fetch for the default 500 ms before the end-of-partition event.
            "fetch.wait.max.ms": 10,
            # librdkafka stops fetching a partition for fetch.queue.backoff.ms (1000 by default)
            # once queued.min.messages are queued locally: a reader faster than Kafka then
            # sat idle for a second. 0.25 s -> 1.2-1.3 s for 200k records in 2 of 6 reads
            # here; 0 of 6 with 10 ms.
            "fetch.queue.backoff.ms": 10,
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


def log_start_offset(client: Consumer, topic: str, partition: int, timeout_s: float) -> int:
    """The first offset the partition still holds, exactly: the broker's low watermark when it
    is 0, else the first record that a read from offset 0 gets (the low watermark can lie
    above the first record; see :data:`START`). An empty partition starts at its end."""
    tp = TopicPartition(topic, partition)
    low, high = client.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
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
        for msg in client.consume(num_messages=1000, timeout=0.02):
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


class RangeReader:
    """Reads consecutive offset ranges of one topic's partitions with one consumer that stays
    assigned: records fetched past a range's end are held for the next range, not dropped
    and fetched again (as :func:`drain` does, unassigning after each call). Yields the
    records of each ``consume()`` call as one list, so the per-record work is a few C calls.

    A range that does not start where the last one ended (a retry after a failure, a
    partition joining or leaving) re-assigns the consumer at the new starts. One reader at a
    time: not thread-safe.
    """

    def __init__(self, client: Consumer, topic: str, timeout_s: float, what: str = "") -> None:
        self.client = client
        self.topic = topic
        self.timeout_s = timeout_s
        self.what = what or f"topic {topic!r}"
        self._next: dict[int, int] = {}  # partition -> where the next range must start
        self._held: dict[int, list[Any]] = {}  # records at or past that, consumed already
        # Where each partition's end-of-partition event said it ended: the event comes once
        # per assignment, after every record before it, so a later range ending at or below
        # it is complete once the held records are taken.
        self._eof: dict[int, int] = {}

    def read(self, ranges: Mapping[int, tuple[int, int]]) -> Iterator[list[Any]]:
        """Every record of ``partition -> [start, end)``, in offset order per partition."""
        expected, self._next = self._next, {}  # unknown until this read ends (or is dropped)
        starts = {p: start for p, (start, _) in ranges.items()}
        if starts != expected:
            self._assign(starts)
        todo = {p: r for p, r in ranges.items() if r[0] < r[1]}
        held = self._take_held(todo, starts)
        for p, (_, end) in list(todo.items()):
            if self._eof.get(p, -1) >= end:
                del todo[p]
        if held:
            yield held
        deadline = time.monotonic() + self.timeout_s
        while todo:
            if time.monotonic() > deadline:
                self.reset()
                left = ", ".join(f"{self.topic}[{p}]" for p in sorted(todo))
                raise SinkUnavailableError(
                    f"reading {self.what} made no progress towards the end of {left} for "
                    f"{self.timeout_s:.0f}s"
                )
            batch: list[Any] = self.client.consume(num_messages=2000, timeout=0.02)
            if batch:
                deadline = time.monotonic() + self.timeout_s  # a deadline for progress
            out = self._sort(batch, todo, starts)
            if out:
                yield out
        self._next = {p: end for p, (_, end) in ranges.items()}

    def _sort(
        self, batch: list[Any], todo: dict[int, tuple[int, int]], starts: Mapping[int, int]
    ) -> list[Any]:
        """The records of ``batch`` inside ``todo``'s ranges. Records past a range are held
        for the next one; a partition whose range is read leaves ``todo``."""
        out = []
        for msg in batch:
            err = msg.error()
            p = msg.partition()
            offset = msg.offset()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self._eof[p] = offset
                    bounds = todo.get(p)
                    if bounds is not None and offset >= bounds[1]:
                        del todo[p]
                    continue
                if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART or err.fatal():
                    self.reset()
                    raise SinkUnavailableError(f"reading {self.what}: {err.str()}")
                continue  # transient (transport, leader change): the client retries
            if p not in starts or offset < starts[p]:
                continue  # fetched for an earlier assignment
            bounds = todo.get(p)
            if bounds is None or offset >= bounds[1]:
                self._held.setdefault(p, []).append(msg)  # the next range's
                if bounds is not None:
                    del todo[p]
                continue
            out.append(msg)
            if offset >= bounds[1] - 1:
                del todo[p]
        return out

    def _take_held(self, todo: dict[int, tuple[int, int]], starts: Mapping[int, int]) -> list[Any]:
        """Held records inside ``todo``'s ranges; partitions they complete leave ``todo``."""
        out: list[Any] = []
        for p in list(todo):
            held = self._held.pop(p, None)
            if held:
                out.extend(self._sort(held, todo, starts))
        return out

    def _assign(self, starts: Mapping[int, int]) -> None:
        self.client.assign([TopicPartition(self.topic, p, o) for p, o in starts.items()])
        self._held, self._eof = {}, {}

    def reset(self) -> None:
        """Forget the assignment: the next range re-assigns."""
        with contextlib.suppress(Exception):
            self.client.unassign()
        self._next, self._held, self._eof = {}, {}, {}


def _done(
    client: Consumer, todo: dict[tuple[str, int], tuple[int, int | None]], tp: tuple[str, int]
) -> None:
    del todo[tp]
    client.pause([TopicPartition(tp[0], tp[1])])


def headers_of(msg: Message) -> dict[str, bytes]:
    """A record's headers by name (text values as UTF-8 bytes)."""
    out: dict[str, bytes] = {}
    raw = msg.headers() or []
    for name, value in raw.items() if isinstance(raw, dict) else raw:
        if value is not None:
            out[name] = value.encode() if isinstance(value, str) else bytes(value)
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


# -- step 1: the control topic ----------------------------------------------------------


@dataclass(frozen=True)
class HeadRecord:
    """The head as the control topic holds it, with where it was found."""

    epoch: int
    spark_query_id: str | None
    num_shards: int
    frontier: dict[str, dict[int, int]]
    scan_from: int
    partition: int
    offset: int

    @classmethod
    def parse(cls, value: bytes, partition: int, offset: int) -> HeadRecord:
        data = json.loads(value)
        frontier = {
            topic: {int(p): int(o) for p, o in parts.items()}
            for topic, parts in (data.get("frontier") or {}).items()
        }
        scan_from = data.get("scan_from")
        return cls(
            epoch=int(data["epoch"]),
            spark_query_id=data.get("spark_query_id"),
            num_shards=int(data["num_shards"]),
            frontier=frontier,
            scan_from=offset if scan_from is None else int(scan_from),
            partition=partition,
            offset=offset,
        )


@dataclass
class Commits:
    """Step 1 of the recipe: the head and every confirmed attempt of one (query, sink)."""

    query_name: str
    sink_name: str
    head: HeadRecord | None = None
    confirmed: set[tuple[int, int, str]] = field(default_factory=set)
    counts: dict[tuple[int, int, str], int] = field(default_factory=dict)
    records: int = 0  # the sum of ``counts``: records of every confirmed attempt

    @property
    def head_epoch(self) -> int:
        return self.head.epoch if self.head is not None else -1

    def frontier(self, topic: str) -> dict[int, int]:
        return dict(self.head.frontier.get(topic, {})) if self.head is not None else {}

    def accepts(self, headers: Mapping[str, bytes]) -> bool:
        """Step 3: is this record (its headers) part of a confirmed attempt of the query?"""
        try:
            if headers[H_QUERY].decode() != self.query_name:
                return False
            key = (
                int(headers[H_EPOCH]),
                int(headers[H_SHARD]),
                headers[H_ATTEMPT].decode(),
            )
        except (KeyError, ValueError, UnicodeDecodeError):
            return False
        return key in self.confirmed

    def add(self, msg: Message) -> None:
        """Fold one control-topic record in (records of other queries are ignored)."""
        raw = msg.key()
        if raw is None:
            return
        key = raw.decode(errors="replace")
        prefix = control_prefix(self.query_name, self.sink_name)
        if not key.startswith(prefix):
            return
        rest = key[len(prefix) :].split("|")
        value = msg.value()
        if rest == [HEAD]:
            if value:
                self.head = HeadRecord.parse(value, where_of(msg)[1], offset_of(msg))
            else:
                self.head = None  # deleted (reset_head)
        elif len(rest) == 4 and rest[2] == CONFIRMED and value:
            found = (int(rest[0]), int(rest[1]), rest[3])
            self.confirmed.add(found)
            count = int(json.loads(value).get("count", 0))
            self.records += count - self.counts.get(found, 0)
            self.counts[found] = count


def load_commits(
    bootstrap_servers: str,
    query_name: str,
    *,
    topic: str | None = None,
    sink_name: str | None = None,
    control_topic: str = DEFAULT_CONTROL_TOPIC,
    consumer_config: Mapping[str, Any] | None = None,
    timeout_s: float = 60.0,
) -> Commits:
    """Step 1: read the whole control topic; keep the head and confirmations of the query."""
    if sink_name is None:
        if topic is None:
            raise ValueError("pass the data topic or the sink name")
        sink_name = default_sink_name(topic)
    commits = Commits(query_name, sink_name)
    client = consumer(bootstrap_servers, consumer_config, isolation="read_uncommitted")
    try:
        parts = partitions_of(client, control_topic, timeout_s)
        ranges = {(control_topic, p): (START, None) for p in parts}
        for msg in drain(client, ranges, timeout_s, f"control topic {control_topic!r}"):
            commits.add(msg)
    finally:
        client.close()
    return commits


# -- steps 2-4: the data -----------------------------------------------------------------


class ExactlyOnceRead(Iterator[Message]):
    """Iterates the records of confirmed attempts up to the head's frontier, once each.

    After the iteration, :attr:`positions` says where to resume each partition next time.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        commits: Commits,
        start_offsets: Mapping[int, int] | None,
        consumer_config: Mapping[str, Any] | None,
        timeout_s: float,
    ) -> None:
        self.topic = topic
        self.commits = commits
        self.frontier = commits.frontier(topic)
        self.positions: dict[int, int] = dict(start_offsets or {})
        self.skipped = 0
        self._inner = self._read(bootstrap_servers, consumer_config, timeout_s)

    def _read(
        self, bootstrap_servers: str, consumer_config: Mapping[str, Any] | None, timeout_s: float
    ) -> Iterator[Message]:
        # read_uncommitted: confirmations decide (step 3); see the recipe, step 2.
        client = consumer(bootstrap_servers, consumer_config, isolation="read_uncommitted")
        try:
            ranges: dict[tuple[str, int], tuple[int, int | None]] = {}
            for p, end in sorted(self.frontier.items()):
                start = self.positions.get(p, START)
                ranges[(self.topic, p)] = (start, end)
            for msg in drain(client, ranges, timeout_s, f"topic {self.topic!r}"):
                if self.commits.accepts(headers_of(msg)):
                    yield msg
                else:
                    self.skipped += 1
            self.positions.update(self.frontier)
        finally:
            client.close()

    def __next__(self) -> Message:
        return next(self._inner)

    def __iter__(self) -> ExactlyOnceRead:
        return self


def read_exactly_once(
    bootstrap_servers: str,
    topic: str,
    query_name: str,
    *,
    sink_name: str | None = None,
    control_topic: str = DEFAULT_CONTROL_TOPIC,
    start_offsets: Mapping[int, int] | None = None,
    consumer_config: Mapping[str, Any] | None = None,
    commits: Commits | None = None,
    timeout_s: float = 60.0,
) -> ExactlyOnceRead:
    """The records a KafkaSink committed to ``topic`` for ``query_name``, each exactly once.

    ``start_offsets`` (partition -> offset) resumes a previous read: pass its ``positions``.
    For the dead-letter topic pass ``sink_name`` (``kafka:<data topic>`` by default).
    """
    if commits is None:
        commits = load_commits(
            bootstrap_servers,
            query_name,
            topic=topic,
            sink_name=sink_name,
            control_topic=control_topic,
            consumer_config=consumer_config,
            timeout_s=timeout_s,
        )
    return ExactlyOnceRead(
        bootstrap_servers, topic, commits, start_offsets, consumer_config, timeout_s
    )


def confirmed_ids(
    bootstrap_servers: str,
    topic: str,
    commits: Commits,
    from_epoch: int,
    consumer_config: Mapping[str, Any] | None = None,
    timeout_s: float = 600.0,
    chunk: int = 50_000,
) -> Iterator[tuple[list[bytes], list[int]]]:
    """Record IDs and epochs of confirmed attempts from ``from_epoch`` on, over the whole
    retained topic (to its current end, not only the frontier): what rebuilds a catalog."""
    client = consumer(bootstrap_servers, consumer_config, isolation="read_uncommitted")
    try:
        parts = partitions_of(client, topic, timeout_s)
        ranges = {(topic, p): (START, None) for p in parts}
        ids: list[bytes] = []
        epochs: list[int] = []
        for msg in drain(client, ranges, timeout_s, f"topic {topic!r}"):
            headers = headers_of(msg)
            if not commits.accepts(headers):
                continue
            epoch = int(headers[H_EPOCH])
            if epoch < from_epoch:
                continue
            found = record_ids_of(headers)
            ids += found
            epochs += [epoch] * len(found)
            if len(ids) >= chunk:
                yield ids, epochs
                ids, epochs = [], []
        if ids:
            yield ids, epochs
    finally:
        client.close()


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
        low, high = client.get_watermark_offsets(
            TopicPartition(topic, p), timeout=timeout_s, cached=False
        )
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
            for msg in client.consume(num_messages=1000, timeout=0.02):
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
