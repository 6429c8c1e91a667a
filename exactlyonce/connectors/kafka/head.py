"""The Kafka sink's head, kept on the compacted control topic.

:class:`ControlTopicHeads` implements :class:`~exactlyonce.connectors.base.HeadStore` for
one (query, sink): the head is the latest record under ``<query>|<sink>|head`` in one
partition of the control topic (chosen by a hash of the key prefix), a JSON value with the
epoch, the Spark query id, the shard count, where tasks start scanning for earlier attempts
(``scan_from``) and the ``frontier``: per data and dead-letter partition, where the committed
data ends. Readers trust the data below the frontier (see :mod:`.reader`). The ``origin``,
written when the head is created and carried along, says where those partitions ended then:
nothing of the (query, sink) lies below it.

Driver only; the head is written by the driver's idempotent producer, never by a task.
"""

from __future__ import annotations

import json
import logging
import time
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import Consumer, KafkaError

from exactlyonce.connectors.base import Head
from exactlyonce.connectors.kafka.clients import KafkaClients, init_transactions, produce_waiting
from exactlyonce.connectors.kafka.consume import (
    drain,
    exact_end_offsets,
    latest_of_key,
    offset_of,
    partitions_of,
)
from exactlyonce.connectors.kafka.protocol import (
    HeadRecord,
    control_prefix,
    head_key,
    marker_key,
    partition_sync_key,
    partition_transactional_id,
    transactional_id,
)
from exactlyonce.errors import SinkUnavailableError

log = logging.getLogger("exactlyonce.kafka")


class ControlTopicHeads:
    """The head of one (query, sink) on the control topic; a HeadStore.

    Obligations (those of :class:`~exactlyonce.connectors.base.HeadStore`):

    - durable before it returns: every write waits for the broker's acknowledgement
      (``acks=all``) and raises SinkUnavailableError when it does not come in time;
    - idempotent: a head record is a whole value, not a delta, so a write repeated after a
      lost reply leaves the same head; ``advance_head`` to an epoch reached changes nothing;
    - monotonic: ``advance_head`` never writes an epoch at or below the one it read;
    - shard commits go with the head: the head and the tombstones of the epoch's commit
      markers go out together from one idempotent producer, to one partition, in order.

    Not guaranteed: two drivers of one query writing at once (Spark runs one per query).
    """

    def __init__(
        self,
        clients: KafkaClients,
        *,
        control_topic: str,
        query_name: str,
        sink_name: str,
        frontier_topics: Sequence[str],
        connect_timeout: float,
        transaction_timeout_ms: int,
        owner: object,
    ) -> None:
        self.clients = clients
        self.control_topic = control_topic
        self.query_name = query_name
        self.sink_name = sink_name
        self.frontier_topics = tuple(frontier_topics)
        self.connect_timeout = connect_timeout
        self.transaction_timeout_ms = transaction_timeout_ms
        self.owner = owner  # names the sink in messages
        self.partitions: list[int] = []
        self.partition = 0  # where this (query, sink) writes its control records
        self.scan_from = 0  # where tasks look for earlier attempts
        self.record: HeadRecord | None = None
        # Spark partitions whose commit markers the next advance tombstones, when more than
        # the shards (the data source path's markers are per partition; its driver sets it).
        self.marker_slots = 0

    def place(self, partitions: list[int]) -> None:
        """The control topic's partitions (from preflight); picks this sink's partition."""
        self.partitions = partitions
        prefix = control_prefix(self.query_name, self.sink_name).encode()
        self.partition = zlib.crc32(prefix) % len(partitions)

    # -- reading -------------------------------------------------------------------------

    def find(self) -> HeadRecord | None:
        """The latest head record, scanning the control partition backwards from its end.
        Read from the broker every time, never from a cache."""
        key = head_key(self.query_name, self.sink_name).encode()
        client = self.clients.reader()
        others = [p for p in self.partitions if p != self.partition]
        for partition in [self.partition, *others]:
            found, record = self._scan_back(client, partition, key)
            if found:
                if record is not None:
                    self.partition = partition
                return record
        return None

    def _scan_back(
        self, client: Consumer, partition: int, key: bytes
    ) -> tuple[bool, HeadRecord | None]:
        latest = latest_of_key(client, self.control_topic, partition, key, self.connect_timeout)
        if latest is None:
            return False, None
        offset, value = latest
        if not value:
            return True, None  # deleted by reset_head
        return True, HeadRecord.parse(value, partition, offset)

    def read_head(self) -> Head | None:
        """The head (None before the first epoch); remembers it. Fences nothing: the start
        checks the head against its Spark query first (:meth:`fence_writers`)."""
        record = self.find()
        self.record = record
        if record is None:
            return None
        self.scan_from = record.scan_from
        return Head(record.epoch, record.spark_query_id, record.num_shards)

    def fence_writers(self) -> None:
        """At a (re)start, once the head read (or created) was checked against this run's
        Spark query, before any task runs: fence every shard's and Spark partition's older
        producer (:meth:`fence`, :meth:`fence_partitions`). Never before that check: under
        a live query_name's head these are the running query's producers, and
        ``init_transactions`` would abort its open transactions. Kafka's head is
        last-writer-wins, so that check is all that keeps a second query out."""
        record = self.record
        if record is None:
            return
        self.fence(record.num_shards)
        self.fence_partitions()

    def fence(self, shards: int) -> None:
        """At a (re)start: fence every shard's older producer, aborting open transactions.

        A crashed attempt's open transaction would otherwise hold back read_committed reads
        of the control topic until the broker times it out. Idempotent.
        """

        def init(shard: int) -> None:
            tid = transactional_id(self.query_name, self.sink_name, shard)
            producer = self.clients.transactional(tid, self.transaction_timeout_ms)
            init_transactions(producer, self.control_topic, self.transaction_timeout_ms / 1000 + 30)

        began = time.monotonic()
        with ThreadPoolExecutor(max_workers=min(8, max(1, shards))) as pool:
            list(pool.map(init, range(shards)))
        log.info(
            "%s: fenced %d shard producers (%.2fs)", self.owner, shards, time.monotonic() - began
        )

    def fence_partitions(self) -> None:
        """At a (re)start: fence the producers of the Spark partitions (the data source path,
        :mod:`.partition_task`) that wrote a barrier since the head, aborting their open
        transactions, which would otherwise hold back read_committed reads (of the control
        topic by the next tasks, of the topic by a catalog rebuild) until the broker timed
        them out. A task's barrier is committed before its data transaction begins, and the
        head moved before its epoch began, so every such producer is found. Idempotent."""
        prefix = partition_sync_key(self.query_name, self.sink_name, 0)[:-1].encode()
        client = self.clients.reader()
        end = exact_end_offsets(client, self.control_topic, [self.partition], self.connect_timeout)
        ranges = {(self.control_topic, self.partition): (self.scan_from, end[self.partition])}
        found: set[int] = set()
        for msg in drain(client, ranges, self.connect_timeout * 6, "the control topic"):
            key = msg.key()
            if key is not None and key.startswith(prefix) and key[len(prefix) :].isdigit():
                found.add(int(key[len(prefix) :]))
        for partition in sorted(found):
            tid = partition_transactional_id(self.query_name, self.sink_name, partition)
            producer = self.clients.transactional(tid, self.transaction_timeout_ms)
            init_transactions(producer, self.control_topic, self.transaction_timeout_ms / 1000 + 30)
        if found:
            log.info("%s: fenced %d Spark partition producers", self.owner, len(found))

    # -- writing -------------------------------------------------------------------------

    def create_head(self, head: Head) -> None:
        """The first head, with the ``origin``: where the data and dead-letter partitions end
        now, before any task of this (query, sink) writes (a reader of the buffer tells from it
        whether records of the query expired before it read them)."""
        value = self._value(head.epoch, head.spark_query_id, head.num_shards, None)
        value["origin"] = self.frontier(skip_missing=True)
        self._remember(value, self._write(value))

    def bind_query_id(self, spark_query_id: str) -> None:
        record = self.record
        assert record is not None
        value = self._value(record.epoch, spark_query_id, record.num_shards, self.scan_from)
        self._remember(value, self._write(value))

    def advance_head(self, epoch: int, spark_query_id: str | None) -> None:
        """After every shard of ``epoch`` was confirmed: head, frontier, marker tombstones
        (of the shards, or of ``marker_slots`` Spark partitions if more: the data source
        path's markers are per partition)."""
        record = self.record
        assert record is not None
        if epoch <= record.epoch:
            return
        value = self._value(epoch, spark_query_id or record.spark_query_id, record.num_shards, None)
        value["frontier"] = self.frontier()
        slots = max(record.num_shards, self.marker_slots)
        markers = [marker_key(self.query_name, self.sink_name, epoch, s) for s in range(slots)]
        self._remember(value, self._write(value, tombstones=markers))

    def reset_head(self) -> None:
        """Delete the head (a tombstone): the next start begins afresh. Not the data."""
        producer = self.clients.producer()
        producer.produce(
            self.control_topic,
            key=head_key(self.query_name, self.sink_name),
            value=None,
            partition=self.partition,
        )
        if producer.flush(self.transaction_timeout_ms / 1000):
            raise SinkUnavailableError(f"{self.owner}: the head reset was not acknowledged")
        self.record = None

    def frontier(self, skip_missing: bool = False) -> dict[str, dict[str, int]]:
        """Where each partition of the data and dead-letter topics ends now: all of it is
        committed and confirmed, nothing of the next epoch is there yet. ``skip_missing``:
        a topic that does not exist (yet) is left out, not an error."""
        client = self.clients.reader()
        out = {}
        for topic in self.frontier_topics:
            try:
                parts = partitions_of(self.clients.producer(), topic, self.connect_timeout)
            except SinkUnavailableError:
                if skip_missing:
                    continue
                raise
            ends = exact_end_offsets(client, topic, parts, self.connect_timeout)
            out[topic] = {str(p): o for p, o in sorted(ends.items())}
        return out

    def _write(self, value: dict[str, Any], tombstones: Sequence[str] = ()) -> int:
        """Write a head record (and tombstones after it); its offset once acknowledged."""
        producer = self.clients.producer()
        offsets: list[int] = []
        failures: list[str] = []

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                failures.append(err.str())
            else:
                offsets.append(offset_of(msg))

        producer.produce(
            self.control_topic,
            key=head_key(self.query_name, self.sink_name),
            value=json.dumps(value),
            partition=self.partition,
            on_delivery=delivered,
        )
        for key in tombstones:
            produce_waiting(producer, self.control_topic, None, key, partition=self.partition)
        left = producer.flush(self.transaction_timeout_ms / 1000)
        if failures or left or not offsets:
            reason = failures[0] if failures else "not acknowledged in time"
            raise SinkUnavailableError(
                f"{self.owner}: the head could not be written to {self.control_topic!r}: "
                f"{self.clients.scrub(reason)}"
            )
        return offsets[0]

    def _value(
        self, epoch: int, query_id: str | None, shards: int, scan_from: int | None
    ) -> dict[str, Any]:
        record = self.record
        return {
            "epoch": epoch,
            "spark_query_id": query_id,
            "num_shards": shards,
            "scan_from": scan_from,
            "frontier": _as_json(record.frontier if record else {}),
            "origin": _as_json(record.origin if record else {}),
            "written_at": time.time(),
        }

    def _remember(self, value: dict[str, Any], offset: int) -> None:
        scan_from = value["scan_from"]
        self.record = HeadRecord.parse(json.dumps(value).encode(), self.partition, offset)
        self.scan_from = offset if scan_from is None else int(scan_from)


def _as_json(offsets: dict[str, dict[int, int]]) -> dict[str, dict[str, int]]:
    """Offsets by topic and partition, as the head's JSON holds them."""
    return {t: {str(p): o for p, o in parts.items()} for t, parts in offsets.items()}
