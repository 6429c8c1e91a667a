"""The Kafka sink in Spark Real-time Mode: a source partition's rows and its frontier in ONE
Kafka transaction (the writer: :mod:`exactlyonce.connectors.base.realtime`). Apache Kafka
only: a broker that hides aborted records from ``read_committed`` consumers.

Per source partition ``(topic, partition)`` one transactional producer, whose
``transactional.id`` (:func:`realtime_transactional_id`) is stable across epochs, task
attempts and restarts of the query:

1. ``read``: ``init_transactions()`` fences every older producer of that source partition and
   has the broker end its open transaction (committed or aborted); only then is the frontier
   read: the last committed record under :func:`frontier_key` in the sink's control
   partition (``read_committed``, read back from its end). From here on no other writer can
   move it: one that tries is fenced by the broker, not trusted to check. A producer kept
   from the previous epoch skips the read: its frontier is the one it committed, unless a newer
   producer fenced it, which its next commit finds out: then a new producer reads, and the
   writer drops the rows that frontier covers (``StaleFrontier``);
2. ``commit``: per source partition of the chunk, one transaction: its rows into the topic,
   each with the ``eo`` header (its record ID; :mod:`.protocol`), and its new frontier into the
   control partition, then ``commit_transaction()``. A chunk of two source partitions is two
   transactions, each atomic for the frontier it moves, so a crash between them leaves each
   frontier true to what its partition wrote;
3. a producer fenced by a newer one (another task took the source partition: a re-run, or a
   query that splits one source partition over two tasks) writes nothing:
   :class:`~exactlyonce.errors.FrontierMovedError`. An abortable error aborts; a commit whose
   outcome is unknown is raised as it is (AmbiguousCommitError): the retried task's
   ``init_transactions()`` settles it, and its read sees the outcome (DESIGN invariant 6).

A record written here is one record of the topic, visible to a plain ``read_committed``
consumer once its transaction committed; nothing else is needed to read it exactly once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from exactlyonce.connectors.base.frontier import Chunk, SourceKey
from exactlyonce.connectors.base.realtime import (
    FrontierStore,
    FrontierTarget,
    StaleFrontier,
    TaskInfo,
)
from exactlyonce.connectors.kafka.clients import client_log, init_transactions, produce_waiting
from exactlyonce.connectors.kafka.consume import (
    START,
    consumer,
    drain,
    exact_end_offsets,
    latest_of_key,
    offset_of,
)
from exactlyonce.connectors.kafka.protocol import (
    H_COMPACT,
    compact_prefix,
    control_prefix,
    shared_config,
)
from exactlyonce.errors import (
    AmbiguousCommitError,
    ConfigError,
    FrontierMovedError,
    SinkUnavailableError,
)
from exactlyonce.secrets import Secret, scrub, secret_values

RTM = "rtm"
_PLAIN = (str, int, float, bool)


def frontier_prefix(query_name: str, sink_name: str) -> str:
    """What the control-topic keys of a (query, sink)'s frontiers begin with."""
    return f"{control_prefix(query_name, sink_name)}{RTM}|"


def frontier_key(query_name: str, sink_name: str, topic: str, partition: int) -> str:
    """The control-topic key of one source partition's frontier (Kafka topic names hold no
    ``|``)."""
    return f"{frontier_prefix(query_name, sink_name)}{topic}|{partition}"


def barrier_key(query_name: str, sink_name: str, topic: str, partition: int) -> str:
    """The control-topic key of a source partition's writer barriers: not under
    :func:`frontier_prefix`, and three fields, which no reader of the micro-batch keys takes."""
    return f"{control_prefix(query_name, sink_name)}{RTM}-barrier|{topic}|{partition}"


def realtime_transactional_id(query_name: str, sink_name: str, topic: str, partition: int) -> str:
    """The ``transactional.id`` of the producer that writes one source partition: stable,
    so the next task of that source partition fences the older one."""
    sink = hashlib.sha1(sink_name.encode()).hexdigest()[:8]
    source = hashlib.sha1(topic.encode()).hexdigest()[:8]
    return f"eo-{query_name}-{sink}-{RTM}-{source}-{partition}"


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, _PLAIN):
        return value
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if hasattr(value, "asDict"):
        return {k: _json_value(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    return str(value)


def _as_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return str(value).encode("utf-8")


@dataclass(frozen=True)
class KafkaFrontierTarget(FrontierTarget):
    """Everything a task needs; picklable, holds no connection, prints no secret."""

    bootstrap_servers: str
    config: Secret  # the user's producer_config, as JSON
    topic: str
    control_topic: str
    control_partition: int
    query_name: str
    sink_name: str
    key_column: str | None
    value: str  # "json", or a string or binary column
    source_columns: tuple[str, str, str]
    transaction_timeout_ms: int
    timeout_s: float = 60.0

    def open_store(self, task: TaskInfo) -> KafkaFrontierStore:
        return KafkaFrontierStore(self, task)

    def user_config(self) -> dict[str, Any]:
        return dict(json.loads(self.config.reveal()))

    def scrubbed(self, text: str) -> str:
        return scrub(text, *secret_values(self.user_config()))


class KafkaFrontierStore(FrontierStore):
    """One task's producers (one per source partition) and its reads of the frontiers."""

    def __init__(self, target: KafkaFrontierTarget, task: TaskInfo) -> None:
        self.t = target
        self.task = task
        self.producers: dict[SourceKey, Producer] = {}
        self.open: set[SourceKey] = set()  # a transaction begun, not ended for sure
        # per source partition, the frontier its producer last read or committed: true while
        # no newer producer of its transactional.id started (see read)
        self.known: dict[SourceKey, int | None] = {}
        # the source partitions whose frontier read() returned from `known`, unread, and no
        # commit of this producer has proved since (see read)
        self.unverified: set[SourceKey] = set()
        self.last_epoch: dict[SourceKey, int] = {}  # the epoch its producer last wrote or read
        self.consumer: Consumer | None = None  # reads the frontiers; see _reader
        self.names: tuple[str, ...] = ()
        self.positions: tuple[int, int, int | None, int] = (0, 0, None, 0)

    # -- FrontierStore -------------------------------------------------------------------

    def prepare(self, columns: Sequence[str]) -> None:
        names = list(columns)
        topic, partition, _ = self.t.source_columns
        key_at = None
        if self.t.key_column is not None:
            if self.t.key_column not in names:
                raise ConfigError("key_column", f"{self.t.key_column!r} not in {names}")
            key_at = names.index(self.t.key_column)
        if self.t.value != "json" and self.t.value not in names:
            raise ConfigError("value", f"{self.t.value!r} is not a column of {names}")
        value_at = names.index(self.t.value) if self.t.value != "json" else -1
        self.names = tuple(names)
        self.positions = (names.index(topic), names.index(partition), key_at, value_at)

    def read(self, key: SourceKey) -> int | None:
        """The frontier, read after this writer fenced older ones and committed a barrier
        record: every frontier an older writer committed is below the barrier, and is read
        once the last stable offset passes it (another producer's open transaction on the
        control partition would otherwise hide it from a read_committed reader).

        A producer kept from an earlier epoch (:meth:`renew`) returns the frontier it last
        read or committed, unread: only a newer producer of its ``transactional.id`` could
        have moved it, and that one fenced this one. Its next commit proves it (it commits)
        or fails, and then :meth:`_verify` reads the frontier with a new producer as above.
        Only a producer that wrote the source partition's previous epoch is trusted: one that
        sat out an epoch was most likely fenced meanwhile (Spark ran that epoch's task in
        another worker), so it reads at once, while the first rows wait for the interval,
        instead of failing its first commit after it."""
        kept = key in self.producers and key in self.known
        if kept and self.last_epoch.get(key) == self.task.epoch - 1:
            self.unverified.add(key)
            return self.known[key]
        return self._read_fenced(key)

    def _read_fenced(self, key: SourceKey) -> int | None:
        """The frontier, with every older producer of ``key`` fenced (a new producer, unless
        one is kept without a frontier it knows), read below a barrier of this writer."""
        reused = key in self.producers
        try:
            barrier = self._barrier(self._producer(key), key)
        except Exception:  # a fenced producer fails in produce, flush or commit
            if not reused:
                raise
            self._discard(key)
            barrier = self._barrier(self._producer(key), key)
        self.unverified.discard(key)
        self.last_epoch[key] = self.task.epoch
        stored = self._stored_frontier(key, end=barrier + 1)
        if stored is None:
            self.known[key] = None
            return None
        if self._claimed_by_another_task(stored):
            raise ConfigError(
                "source_columns",
                f"source partition {key[0]}[{key[1]}] is written by two Spark tasks of epoch "
                f"{self.task.epoch} (partitions {stored.get('spark_partition')} and "
                f"{self.task.partition_id}): the query splits or shuffles the source's "
                "partitions before the sink",
            )
        self.known[key] = int(stored["next_offset"])
        return int(stored["next_offset"])

    def commit(self, chunk: Chunk) -> None:
        t, p, _, _ = self.positions
        by_key: dict[SourceKey, list[tuple[Any, ...]]] = {k: [] for k in chunk.next_offsets}
        for row in chunk.rows:
            by_key[(str(row[t]), int(row[p]))].append(row)
        committed: dict[SourceKey, int | None] = {}
        for key, next_offset in chunk.next_offsets.items():
            try:
                self._commit_partition(key, by_key[key], next_offset, chunk.expected[key])
            except StaleFrontier as stale:
                raise StaleFrontier({**committed, **stale.frontiers}) from None
            committed[key] = next_offset

    def renew(self, task: TaskInfo) -> bool:
        """Keep the producers for the next epoch's task when no transaction is open; the
        frontier each knows is trusted until its next commit says otherwise (:meth:`read`)."""
        if self.open:
            return False
        self.task = task
        return True

    def _discard(self, key: SourceKey) -> None:
        producer = self.producers.pop(key, None)
        self.open.discard(key)
        self.known.pop(key, None)
        self.unverified.discard(key)
        self.last_epoch.pop(key, None)
        if producer is not None:
            with contextlib.suppress(Exception):
                producer.flush(0)

    def _close_reader(self) -> None:
        reader, self.consumer = self.consumer, None
        if reader is not None:
            with contextlib.suppress(Exception):
                reader.close()

    def close(self) -> None:
        self._close_reader()
        self.known.clear()
        self.unverified.clear()
        self.last_epoch.clear()
        producers, self.producers = self.producers, {}
        for key, producer in producers.items():
            if key in self.open:
                with contextlib.suppress(Exception):
                    producer.abort_transaction(10)
            with contextlib.suppress(Exception):
                producer.flush(0)
        self.open.clear()

    # -- the steps -----------------------------------------------------------------------

    def _producer(self, key: SourceKey) -> Producer:
        """The source partition's producer, initialised (fencing older ones) on first use."""
        found = self.producers.get(key)
        if found is not None:
            return found
        t = self.t
        producer = Producer(
            {
                "linger.ms": 5,
                "reconnect.backoff.ms": 10,
                **t.user_config(),
                "bootstrap.servers": t.bootstrap_servers,
                "transactional.id": realtime_transactional_id(
                    t.query_name, t.sink_name, key[0], key[1]
                ),
                "enable.idempotence": True,
                "acks": "all",
                "transaction.timeout.ms": t.transaction_timeout_ms,
                "logger": client_log,
            }
        )
        try:
            init_transactions(producer, t.topic, t.timeout_s)
        except KafkaException as exc:
            raise SinkUnavailableError(
                f"{t.query_name}: the producer of source partition {key[0]}[{key[1]}] could "
                f"not start its transactions: {t.scrubbed(exc.args[0].str())}"
            ) from None
        self.producers[key] = producer
        return producer

    def _barrier(self, producer: Producer, key: SourceKey) -> int:
        """Commit a record of this writer to the control partition; return its offset."""
        t = self.t
        offsets: list[int] = []
        try:
            producer.begin_transaction()
            self.open.add(key)
            producer.produce(
                t.control_topic,
                key=barrier_key(t.query_name, t.sink_name, *key),
                value=self.task.writer.encode(),
                partition=t.control_partition,
                on_delivery=lambda err, msg: offsets.append(-1 if err else offset_of(msg)),
            )
            producer.flush(t.timeout_s)
            self._end_transaction(producer, key)
        except KafkaException as exc:
            self._failed(producer, key, exc.args[0])
        if not offsets or offsets[0] < 0:
            raise SinkUnavailableError(
                f"{t.query_name}: source partition {key[0]}[{key[1]}]: the control-topic barrier "
                "was not written"
            )
        return offsets[0]

    def _reader(self) -> Consumer:
        """The store's read_committed consumer, kept warm for every read (a fresh one's start
        sometimes took 0.7 s under load, at an epoch's start: bench realtime)."""
        if self.consumer is None:
            self.consumer = consumer(self.t.bootstrap_servers, shared_config(self.t.user_config()))
        return self.consumer

    def _stored_frontier(self, key: SourceKey, end: int) -> dict[str, Any] | None:
        t = self.t
        try:
            latest = latest_of_key(
                self._reader(),
                t.control_topic,
                t.control_partition,
                frontier_key(t.query_name, t.sink_name, *key).encode(),
                # an abandoned transaction holds the stable offset until it times out
                t.timeout_s + t.transaction_timeout_ms / 1000,
                end=end,
            )
        except BaseException:
            self._close_reader()  # a read cut short may leave it assigned
            raise
        if latest is None or not latest[1]:
            return None
        stored: dict[str, Any] = json.loads(latest[1])
        return stored

    def _claimed_by_another_task(self, stored: dict[str, Any]) -> bool:
        same_run = self.task.query_id is not None and stored.get("spark_query_id") == (
            self.task.query_id
        )
        return (
            same_run
            and stored.get("epoch") == self.task.epoch
            and stored.get("spark_partition") != self.task.partition_id
        )

    def _commit_partition(
        self, key: SourceKey, rows: list[tuple[Any, ...]], next_offset: int, expected: int | None
    ) -> None:
        if key in self.unverified:
            try:
                self._transaction(key, rows, next_offset)
                self.unverified.discard(key)
                return
            except KafkaException:
                self._verify(key, expected)  # raises StaleFrontier unless it was right
        try:
            self._transaction(key, rows, next_offset)
        except KafkaException as exc:
            self.known.pop(key, None)
            self._failed(self.producers[key], key, exc.args[0])

    def _verify(self, key: SourceKey, trusted: int | None) -> None:
        """A kept producer's commit failed (fenced, most likely: another worker took the
        source partition, then maybe gave it back). A new producer reads the frontier below
        its barrier, which also settles the failed transaction; the trusted frontier is
        confirmed, or :class:`StaleFrontier` tells the writer the sink's."""
        self._discard(key)  # the new producer's start aborts or completes its transaction
        frontier = self._read_fenced(key)
        if frontier != trusted:
            raise StaleFrontier({key: frontier})

    def _transaction(self, key: SourceKey, rows: list[tuple[Any, ...]], next_offset: int) -> None:
        """Rows and the new frontier in one transaction of the source partition's producer."""
        producer = self._producer(key)
        t, task = self.t, self.task
        prefix = compact_prefix(t.query_name, task.epoch, key[1], task.writer.replace("|", ":"))
        producer.begin_transaction()
        self.open.add(key)
        for row in rows:
            produce_waiting(
                producer,
                t.topic,
                self._value(row),
                self._key(row),
                headers=[(H_COMPACT, prefix + str(row[-2]).encode())],
            )
            producer.poll(0)
        produce_waiting(  # the queue may be full of rows
            producer,
            t.control_topic,
            key=frontier_key(t.query_name, t.sink_name, *key),
            value=json.dumps(
                {
                    "next_offset": next_offset,
                    "epoch": task.epoch,
                    "spark_query_id": task.query_id,
                    "spark_partition": task.partition_id,
                    "writer": task.writer,
                }
            ),
            partition=t.control_partition,
        )
        self._end_transaction(producer, key)
        self.known[key] = next_offset
        self.last_epoch[key] = task.epoch

    def _end_transaction(self, producer: Producer, key: SourceKey) -> None:
        deadline = time.monotonic() + self.t.timeout_s
        while True:
            try:
                producer.commit_transaction(max(1.0, deadline - time.monotonic()))
                self.open.discard(key)
                return
            except KafkaException as exc:
                err = exc.args[0]
                if not err.retriable() or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _failed(self, producer: Producer, key: SourceKey, err: KafkaError) -> None:
        t = self.t
        where = f"{t.query_name}: source partition {key[0]}[{key[1]}]"
        reason = f"{err.name()}: {t.scrubbed(err.str())}"
        if err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED) or (
            err.fatal() and "fenced" in err.str().lower()
        ):
            self.open.discard(key)
            raise FrontierMovedError(
                f"{where}: a newer writer of this source partition fenced this one ({reason}); "
                "nothing of its open transaction is visible; the retried task reads the frontier"
            ) from None
        if err.txn_requires_abort():
            with contextlib.suppress(KafkaException):
                producer.abort_transaction(t.timeout_s)
                self.open.discard(key)
            raise SinkUnavailableError(
                f"{where}: transaction aborted ({reason}); the retried task writes it again"
            ) from None
        raise AmbiguousCommitError(
            f"{where}: commit outcome unknown ({reason}); the retried task's producer settles "
            "it and reads the frontier"
        ) from None

    def _key(self, row: tuple[Any, ...]) -> bytes | None:
        at = self.positions[2]
        return None if at is None else _as_bytes(row[at])

    def _value(self, row: tuple[Any, ...]) -> bytes | None:
        at = self.positions[3]
        if at >= 0:
            return _as_bytes(row[at])
        values = {name: _json_value(v) for name, v in zip(self.names, row, strict=False)}
        return json.dumps(values, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def read_frontiers(
    bootstrap_servers: str,
    config: dict[str, Any],
    control_topic: str,
    control_partition: int,
    query_name: str,
    sink_name: str,
    timeout_s: float,
) -> dict[SourceKey, int]:
    """Every source frontier the sink holds for ``(query_name, sink_name)``: the last
    committed record of each frontier key in its control partition, read whole."""
    prefix = frontier_prefix(query_name, sink_name).encode()
    reader = consumer(bootstrap_servers, shared_config(config))
    found: dict[SourceKey, int] = {}
    try:
        end = exact_end_offsets(reader, control_topic, [control_partition], timeout_s)
        ranges = {(control_topic, control_partition): (START, end[control_partition])}
        for msg in drain(reader, ranges, timeout_s, "the control topic"):
            key = msg.key()
            if key is None or not key.startswith(prefix):
                continue
            topic, _, partition = key[len(prefix) :].decode().rpartition("|")
            value = msg.value()
            if value:
                found[(topic, int(partition))] = int(json.loads(value)["next_offset"])
            else:
                found.pop((topic, int(partition)), None)
    finally:
        reader.close()
    return found
