"""Reading a KafkaSink's topic exactly once: the consumption recipe, as code.

Why a recipe: on Apache Kafka, a plain ``isolation.level=read_committed`` consumer already
sees every record of a :class:`~exactlyonce.connectors.kafka.KafkaSink` exactly once. Some
Kafka-protocol brokers (Tansu, librdkafka's mock cluster) still deliver the records of ABORTED
transactions to such a consumer, so a task that crashed mid-write leaves visible debris there.
The sink therefore records, next to the data, which write attempts really committed; a reader
that follows these steps sees each record exactly once on every broker.

What the sink writes
--------------------
Every data record carries one header, ``eo`` (wire format 1), whose value is ASCII text::

    1|<epoch>|<shard>|<attempt>|<query>|<record id>

``epoch``      the epoch (Spark's batch id), decimal
``shard``      the shard, decimal
``attempt``    a nonce naming the task attempt that wrote it, unique per attempt (hex)
``query``      the query name (UTF-8; it may contain ``|``)
``record id``  the record's ID, 32 hex digits: always the value's last 32 bytes

Split it as: the record ID is the last 32 bytes; the rest, without its trailing ``|``, split
at the first four ``|``, gives the version (``1``), epoch, shard, attempt and query. A value
starting with any other version is a format this recipe does not know: stop, do not skip.
Writers before wire format 1 (and every dead letter and buffer frame) carry the same fields
as five headers instead, values UTF-8 text: ``eo-query``, ``eo-epoch``, ``eo-shard``,
``eo-record-id`` and ``eo-attempt``; the recipe below names the fields by these headers.
One header instead of five roughly doubled the producer's rate (each header costs
librdkafka an allocation per message). :func:`headers_of` reads both formats.

A buffer topic (:mod:`exactlyonce.buffer`) packs records into FRAMES instead: one message
holds up to ``frame_records`` records, their JSON values one per line (JSON text has no raw
line break), and instead of ``eo-record-id`` the header ``eo-record-ids`` holds their IDs,
32 bytes each, in the same order. The other headers are those above, and the recipe is the
same, frame by frame. A frame's ``count`` in the confirmation counts records, not messages.

The control topic (default ``exactlyonce-control``, compacted) holds small JSON records. In
every key, the query and sink names have ``%`` written as ``%25`` and ``|`` as ``%7C``:

``<query>|<sink>|head``                              the head: ``{"epoch", "frontier",
                                                      "origin", ...}``
``<query>|<sink>|<epoch>|<shard>|confirmed|<attempt>`` attempt ``<attempt>`` of that shard
                                                      committed: ``{"attempt", "count", ...}``
``<query>|<sink>|<epoch>|<shard>``                    the in-transaction commit marker (a
                                                      reader does not need it)

The sink name is ``kafka:<topic>`` unless the user named it. A confirmation is written only
after the attempt's transaction committed, and the sink writes the head, with a ``frontier``
(per topic, per partition, the offset where the committed data ended), only after every shard
of the epoch was confirmed. The head's ``origin`` (same shape; written when the head was
created, kept by every later head) is where the partitions ended before the query wrote: none
of its records lies below (absent in heads of older versions).

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
The names of the protocol (:mod:`.protocol`) and the low-level reads (:mod:`.consume`,
:mod:`.range_reader`) are re-exported here: this module is the reader's one import.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Message

from exactlyonce.connectors.kafka.consume import (
    START,
    consumer,
    drain,
    exact_end_offsets,
    headers_of,
    log_start_offset,
    offset_of,
    partitions_of,
    record_ids_of,
    where_of,
)
from exactlyonce.connectors.kafka.protocol import (
    CONFIRMED,
    DEFAULT_CONTROL_TOPIC,
    H_ATTEMPT,
    H_COMPACT,
    H_EPOCH,
    H_ERROR,
    H_QUERY,
    H_RECORD_ID,
    H_RECORD_IDS,
    H_SHARD,
    HEAD,
    PROBE_KEY,
    RECORD_ID_BYTES,
    SHARED_CONFIG_PREFIXES,
    SYNC,
    HeadRecord,
    compact_prefix,
    confirmation_key,
    control_prefix,
    dead_letter_topic_for,
    default_sink_name,
    expand_compact,
    head_key,
    marker_key,
    shared_config,
    sync_key,
)
from exactlyonce.connectors.kafka.range_reader import RangeReader

__all__ = [
    "CONFIRMED",
    "DEFAULT_CONTROL_TOPIC",
    "H_ATTEMPT",
    "H_COMPACT",
    "H_EPOCH",
    "H_ERROR",
    "H_QUERY",
    "H_RECORD_ID",
    "H_RECORD_IDS",
    "H_SHARD",
    "HEAD",
    "PROBE_KEY",
    "RECORD_ID_BYTES",
    "SHARED_CONFIG_PREFIXES",
    "START",
    "SYNC",
    "Commits",
    "ExactlyOnceRead",
    "HeadRecord",
    "RangeReader",
    "compact_prefix",
    "confirmation_key",
    "confirmed_ids",
    "consumer",
    "control_prefix",
    "dead_letter_topic_for",
    "default_sink_name",
    "drain",
    "exact_end_offsets",
    "expand_compact",
    "head_key",
    "headers_of",
    "load_commits",
    "log_start_offset",
    "marker_key",
    "offset_of",
    "partitions_of",
    "read_exactly_once",
    "record_ids_of",
    "shared_config",
    "sync_key",
    "where_of",
]
# -- step 1: the control topic ----------------------------------------------------------


@dataclass
class Commits:
    """Step 1 of the recipe: the head and every confirmed attempt of one (query, sink)."""

    query_name: str
    sink_name: str
    head: HeadRecord | None = None
    confirmed: set[tuple[int, int, str]] = field(default_factory=set)
    counts: dict[tuple[int, int, str], int] = field(default_factory=dict)
    records: int = 0  # the sum of ``counts``: records of every confirmed attempt
    # Read with read_committed from a broker that hides aborted records: a commit marker
    # then says its attempt committed, confirmed or not (the catalog rebuild's view).
    trust_markers: bool = False
    # Confirmations and markers below this control-topic offset are ignored (0: none): the
    # attempts since the head was written, whose offset the head's ``scan_from`` is.
    since_offset: int = 0

    @property
    def head_epoch(self) -> int:
        return self.head.epoch if self.head is not None else -1

    def frontier(self, topic: str) -> dict[int, int]:
        return dict(self.head.frontier.get(topic, {})) if self.head is not None else {}

    def origin(self, topic: str) -> dict[int, int] | None:
        """Where the query's records begin in each partition of ``topic``: the head's
        ``origin``, 0 for a partition it lacks (created later) and for every partition when
        the head keeps no origin (written before origins were kept: 0 is all that is known).
        None when there is no head: nothing of the query is in the topic yet."""
        if self.head is None:
            return None
        return dict(self.head.origin.get(topic, {}))

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
        elif offset_of(msg) < self.since_offset:
            return
        elif len(rest) == 4 and rest[2] == CONFIRMED and value:
            self._accept((int(rest[0]), int(rest[1]), rest[3]), value)
        elif self.trust_markers and value and len(rest) == 2 and all(p.isdigit() for p in rest):
            marker = json.loads(value)
            self._accept((int(rest[0]), int(rest[1]), str(marker["attempt"])), value)

    def _accept(self, found: tuple[int, int, str], value: bytes) -> None:
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
    trust_markers: bool = False,
    since_offset: int = 0,
) -> Commits:
    """Step 1: read the whole control topic; keep the head and confirmations of the query.

    ``trust_markers`` (only for a broker measured to hide aborted records): read it
    read_committed and count an attempt whose commit marker is there as confirmed too."""
    if sink_name is None:
        if topic is None:
            raise ValueError("pass the data topic or the sink name")
        sink_name = default_sink_name(topic)
    commits = Commits(query_name, sink_name, trust_markers=trust_markers, since_offset=since_offset)
    isolation = "read_committed" if trust_markers else "read_uncommitted"
    client = consumer(bootstrap_servers, consumer_config, isolation=isolation)
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
    start_offsets: Mapping[int, int] | None = None,
) -> Iterator[tuple[list[bytes], list[int]]]:
    """Record IDs and epochs of confirmed attempts from ``from_epoch`` on, over the whole
    retained topic (to its current end, not only the frontier): what rebuilds a catalog.
    ``start_offsets``: where to start reading each partition (a head's frontier)."""
    client = consumer(bootstrap_servers, consumer_config, isolation="read_uncommitted")
    try:
        parts = partitions_of(client, topic, timeout_s)
        starts = start_offsets or {}
        ranges = {(topic, p): (starts.get(p, START), None) for p in parts}
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
