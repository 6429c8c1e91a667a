"""Exactly-once Kafka sink.

Guarantee: every record of the stream is in the topic exactly once for a reader that follows
the recipe of :mod:`exactlyonce.connectors.kafka_reader`, through driver crashes, executor
loss, re-run micro-batches and duplicate input, provided the source replays and the catalog
(Redis) keeps IDs for ``retention_epochs``. On a broker that hides aborted records from
``read_committed`` consumers (Apache Kafka), a plain ``read_committed`` consumer sees each
record exactly once too.

Mechanism, per epoch:

- each record gets a deterministic ID (hashed ``id_columns``) and a shard (ID hash);
- each executor task writes its shard in ONE Kafka transaction, from an idempotent producer
  whose ``transactional.id`` is ``eo-<query>-<sha1(sink)[:8]>-<shard>``: stable across
  re-runs, so a new attempt's ``init_transactions()`` fences the zombie of an older one and
  aborts its open transaction;
- every data record carries the headers ``eo-query``, ``eo-epoch``, ``eo-shard``,
  ``eo-record-id`` and ``eo-attempt`` (a nonce per task attempt);
- inside the same transaction, a commit marker goes to the compacted control topic; after
  ``commit_transaction()`` succeeded, a second small transaction writes a CONFIRMATION of the
  attempt. On a broker that delivers aborted records (Tansu), the marker may belong to an
  aborted transaction, so only the confirmation says "this attempt committed". A crash
  between commit and confirmation makes the next attempt write the shard again, under a new
  nonce; readers count only confirmed attempts. On Apache Kafka, the marker is trusted
  (read_committed hides aborted ones): the next attempt confirms the committed attempt
  instead of writing again, so plain consumers see no duplicate;
- the driver writes the head (epoch, Spark query id, and the topic's end offsets: the
  "frontier") to the control topic after every shard was confirmed, and skips epochs at or
  below it after a restart.

Which of the two kinds of broker it talks to, the sink measures once at preflight: it aborts
a transaction and checks whether a ``read_committed`` consumer still sees its record.

Example::

    sink = KafkaSink("broker:9092", "events-out", ["event_id"], "clicks-to-kafka")
    df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).start()
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import threading
import time
import uuid
import zlib
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from exactlyonce.connectors.base import (
    ERROR_COLUMN,
    PAYLOAD_COLUMN,
    SHARD_COLUMN,
    DeadLetter,
    ExactlyOnceSink,
    Head,
    ShardTask,
    ShardWriter,
    TaskWriter,
    require_text,
)
from exactlyonce.connectors.connect_json import (
    JSON_WITH_SCHEMA,
    connect_schema,
    envelope,
    not_a_number_reason,
)
from exactlyonce.connectors.kafka_reader import (
    DEFAULT_CONTROL_TOPIC,
    H_ATTEMPT,
    H_EPOCH,
    H_ERROR,
    H_QUERY,
    H_RECORD_ID,
    H_RECORD_IDS,
    H_SHARD,
    PROBE_KEY,
    RECORD_ID_BYTES,
    Commits,
    HeadRecord,
    confirmation_key,
    confirmed_ids,
    consumer,
    control_prefix,
    dead_letter_topic_for,
    default_sink_name,
    drain,
    exact_end_offsets,
    head_key,
    load_commits,
    log_start_offset,
    marker_key,
    offset_of,
    partitions_of,
    shared_config,
    sync_key,
)
from exactlyonce.dedup.catalog import DedupConfig
from exactlyonce.dedup.keeper import RebuildSource
from exactlyonce.dedup.shard import DedupPlan
from exactlyonce.errors import (
    AmbiguousCommitError,
    ConfigError,
    SinkUnavailableError,
)
from exactlyonce.faults import crash_point
from exactlyonce.secrets import Secret, scrub

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger("exactlyonce.kafka")
client_log = logging.getLogger("exactlyonce.kafka.client")

ID_COLUMN = "eo_record_id"
KEY_COLUMN = "eo_key"
VALUE_COLUMN = "eo_value"
EPOCH_COLUMN = "_eo_epoch"
RESERVED_COLUMNS = (ID_COLUMN, KEY_COLUMN, VALUE_COLUMN)

MIN_TRANSACTION_TIMEOUT_MS = 10_000  # a task's whole write runs inside one transaction
KAFKA_DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000  # broker transaction.max.timeout.ms
DEAD_LETTER_PAYLOAD_LIMIT = 64 * 1024
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
# Settings the protocol depends on; a user's producer_config may not change them.
_RESERVED_CONFIG = {
    "bootstrap.servers": "pass bootstrap_servers=... instead",
    "transactional.id": "the sink derives it per (query, sink, shard) so re-runs fence zombies",
    "isolation.level": "the sink chooses it per read",
}
_REQUIRED_CONFIG = {"enable.idempotence": (True, "true"), "acks": ("all", "-1", -1)}
_PRODUCER_DEFAULTS: dict[str, Any] = {
    "linger.ms": 5,
    # Every shard task makes a producer: librdkafka waits reconnect.backoff.ms / 2 before
    # connecting to the transaction coordinator, so init_transactions took 54 ms with the
    # default 100 and 15 ms with 10 (median of 24, Tansu). Backoff still grows to its max.
    "reconnect.backoff.ms": 10,
    "batch.num.messages": 10_000,
    "queue.buffering.max.messages": 500_000,
}

_TOO_LARGE = (KafkaError.MSG_SIZE_TOO_LARGE,)  # librdkafka refuses it in produce()
_PROBES: dict[str, bool] = {}
PROBE_RETENTION_MS = 3_600_000  # the probe topic holds two small records per query start
PROBE_WAIT_S = 10.0  # a probe read that makes no progress this long is inconclusive
_PROBES_LOCK = threading.Lock()


def transactional_id(query_name: str, sink_name: str, shard: int) -> str:
    return f"eo-{query_name}-{hashlib.sha1(sink_name.encode()).hexdigest()[:8]}-{shard}"


def init_transactions(producer: Producer, topic: str, timeout_s: float) -> None:
    """``producer.init_transactions()`` without librdkafka's 500 ms coordinator stall.

    librdkafka (2.16) answers the first metadata request on its bootstrap connection, then
    drops that connection for the broker's advertised one. An ``init_transactions()`` in that
    gap finds no broker up, and waits for its coordinator query timer (500 ms) to try again:
    15 of 40 fresh producers here (Tansu). A second metadata request cannot be served by the
    dropped bootstrap connection, so it returns only once a real broker is up: 0 of 40 stalls,
    17 ms for create + metadata + init on average (was 201 ms).
    """
    wait = min(10.0, timeout_s)
    for _ in range(2):
        with contextlib.suppress(KafkaException):
            producer.list_topics(topic, timeout=wait)
    producer.init_transactions(timeout_s)  # fences older producers of its transactional.id


def frame_bounds(values: Sequence[bytes], records: int, budget: int) -> list[tuple[int, int]]:
    """Consecutive ``[start, end)`` frames of at most ``records`` records whose values and
    IDs (a line break and 32 bytes each) stay within ``budget`` bytes; a record larger than
    the budget is a frame of its own."""
    bounds: list[tuple[int, int]] = []
    start, size = 0, 0
    for i, value in enumerate(values):
        length = len(value) + 1 + RECORD_ID_BYTES
        if i > start and (i - start >= records or size + length > budget):
            bounds.append((start, i))
            start, size = i, 0
        size += length
    if start < len(values):
        bounds.append((start, len(values)))
    return bounds


def _check_topic_name(field: str, name: object) -> str:
    if not isinstance(name, str) or not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise ConfigError(
            field, f"not a valid Kafka topic name: {name!r} (1-249 of [A-Za-z0-9._-])"
        )
    return name


def _secrets_of(config: Mapping[str, Any]) -> list[str]:
    """Values that must never be printed: anything under a password/secret-like key."""
    return [
        str(v)
        for k, v in config.items()
        if v and any(word in k for word in ("password", "secret", "sasl.jaas", "key.pem"))
    ]


@dataclass(frozen=True)
class KafkaTarget:
    """Everything a task needs to write; picklable, holds no connection, prints no secret."""

    bootstrap_servers: str
    config: Secret  # the user's producer_config, as JSON
    topic: str
    dead_letter_topic: str
    control_topic: str
    control_partition: int
    query_name: str
    sink_name: str
    columns: tuple[str, ...]
    has_key: bool
    transaction_timeout_ms: int
    hides_aborted: bool
    scan_from: int
    max_message_bytes: int = 1_000_000
    timeout_s: float = 60.0
    dedup: DedupPlan | None = None
    frame_records: int = 1  # records per message; > 1: frames (see _write_frames)
    frame_bytes: int = 0
    topic_partitions: int = 0  # frames go round-robin over them (0: the client picks)

    def user_config(self) -> dict[str, Any]:
        return dict(json.loads(self.config.reveal()))

    def producer_config(self, shard: int) -> dict[str, Any]:
        return {
            **_PRODUCER_DEFAULTS,
            **self.user_config(),
            "bootstrap.servers": self.bootstrap_servers,
            "transactional.id": transactional_id(self.query_name, self.sink_name, shard),
            "enable.idempotence": True,
            "acks": "all",
            "transaction.timeout.ms": self.transaction_timeout_ms,
            "message.max.bytes": self.max_message_bytes,
            "logger": client_log,
        }


class KafkaSink(ExactlyOnceSink):
    """Writes a stream into a Kafka topic exactly once. See the module docstring."""

    kind = "kafka"

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        id_columns: Sequence[str] | str,
        query_name: str,
        *,
        key_column: str | None = None,
        value: str = "json",
        control_topic: str = DEFAULT_CONTROL_TOPIC,
        dead_letter_topic: str | None = None,
        create_topic: bool = False,
        partitions: int | None = None,
        producer_config: Mapping[str, Any] | None = None,
        transaction_timeout_ms: int = 60_000,
        shards: int | None = None,
        sink_name: str | None = None,
        connect_timeout: float = 10.0,
        dedup: bool | DedupConfig = True,
        redis_url: str | None = None,
        check: bool = True,
    ) -> None:
        super().__init__(
            query_name=query_name,
            id_columns=id_columns,
            shards=shards,
            sink_name=sink_name,
            dedup=dedup,
            redis_url=redis_url,
        )
        require_text(
            "bootstrap_servers", bootstrap_servers, "a comma-separated host:port list is required"
        )
        self.bootstrap_servers = bootstrap_servers.strip()
        self.topic = _check_topic_name("topic", topic)
        self.control_topic = _check_topic_name("control_topic", control_topic)
        # Only the preflight probes write here: its read_committed read cannot be held back
        # by the open transactions of crashed shard tasks, as it was on the control topic.
        self.probe_topic = f"{self.control_topic}.probe"
        self.dead_letter_topic = _check_topic_name(
            "dead_letter_topic", dead_letter_topic or dead_letter_topic_for(topic)
        )
        if len({self.topic, self.control_topic, self.dead_letter_topic}) != 3:
            raise ConfigError("control_topic", "topic, control and dead-letter topics must differ")
        if key_column is not None and (not isinstance(key_column, str) or not key_column):
            raise ConfigError("key_column", f"a column name or None, got {key_column!r}")
        if not isinstance(value, str) or not value:
            raise ConfigError(
                "value", f"'json', {JSON_WITH_SCHEMA!r} or a column name, got {value!r}"
            )
        if partitions is not None and (not isinstance(partitions, int) or partitions < 1):
            raise ConfigError("partitions", f"a positive integer or None, got {partitions!r}")
        config = dict(producer_config or {})
        for name, why in _RESERVED_CONFIG.items():
            if name in config:
                raise ConfigError("producer_config", f"{name!r} cannot be set: {why}")
        for name, allowed in _REQUIRED_CONFIG.items():
            if name in config and config[name] not in allowed:
                raise ConfigError(
                    "producer_config", f"{name!r} must stay {allowed[0]!r} for exactly-once"
                )
        if "transaction.timeout.ms" in config:
            self._timeout_field = "producer_config['transaction.timeout.ms']"
            timeout_ms = config.pop("transaction.timeout.ms")
        else:
            self._timeout_field = "transaction_timeout_ms"
            timeout_ms = transaction_timeout_ms
        if isinstance(timeout_ms, str) and timeout_ms.isdigit():
            timeout_ms = int(timeout_ms)
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int):
            raise ConfigError(
                self._timeout_field,
                f"transaction.timeout.ms must be an integer, got {timeout_ms!r}",
            )
        if timeout_ms < MIN_TRANSACTION_TIMEOUT_MS:
            raise ConfigError(
                self._timeout_field,
                f"transaction.timeout.ms={timeout_ms} is below {MIN_TRANSACTION_TIMEOUT_MS}: "
                "each task writes its whole shard inside one transaction, and the broker "
                "aborts transactions older than this",
            )
        self.transaction_timeout_ms = timeout_ms
        try:
            config_json = json.dumps(config)
        except TypeError:
            raise ConfigError(
                "producer_config", "values must be strings, numbers or booleans"
            ) from None
        self._config = Secret(config_json)
        self._secrets = _secrets_of(config)
        self.key_column = key_column
        self.value = value
        self.create_topic = create_topic
        self.partitions = partitions
        self.connect_timeout = connect_timeout
        self._ready = False
        self.hides_aborted: bool | None = None
        self._control_partitions: list[int] = []
        self._topic_partitions = 0
        self._control_partition = 0
        self._scan_from = 0
        self._head_record: HeadRecord | None = None
        self._driver_producer: Producer | None = None
        self._reader: Any = None
        self.max_message_bytes = int(config.get("message.max.bytes", 1_000_000))
        # One record per message (the layout of the recipe); the buffer packs frames.
        self.frame_records = 1
        self.frame_bytes = 0
        if check:
            self.preflight()

    @property
    def sink_name(self) -> str:
        return self._sink_name or default_sink_name(self.topic)

    @property
    def id_column(self) -> str:
        return ID_COLUMN

    @property
    def unique_sink(self) -> bool:
        return False  # Kafka appends: a second write of an ID is a second record

    @property
    def where(self) -> str:
        return f"Kafka at {self.bootstrap_servers}"

    # -- clients -----------------------------------------------------------------------

    def _user_config(self) -> dict[str, Any]:
        return dict(json.loads(self._config.reveal()))

    def _scrub(self, text: str) -> str:
        return scrub(text, *self._secrets)

    def _admin(self, errors: list[str]) -> AdminClient:
        def on_error(err: KafkaError) -> None:
            errors.append(err.str())

        config: dict[str, Any] = {
            **shared_config(self._user_config()),
            "bootstrap.servers": self.bootstrap_servers,
            "error_cb": on_error,
            "logger": client_log,
            "log_level": 2,  # connection failures arrive through error_cb, once, in our error
        }
        return AdminClient(config)

    def _consumer(self, isolation: str = "read_uncommitted") -> Any:
        return consumer(self.bootstrap_servers, self._user_config(), isolation=isolation)

    def _driver_consumer(self) -> Any:
        """The driver's read_uncommitted consumer, kept across epochs (reads leave it
        unassigned)."""
        if self._reader is None:
            self._reader = self._consumer()
        return self._reader

    def _producer(self) -> Producer:
        """The driver's idempotent (not transactional) producer for head records."""
        if self._driver_producer is None:
            config = {
                **self._user_config(),
                "bootstrap.servers": self.bootstrap_servers,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 0,
                "logger": client_log,
            }
            self._driver_producer = Producer(config)
        return self._driver_producer

    # -- preflight ---------------------------------------------------------------------

    def check_trigger(self, interval_s: float | None) -> None:
        """A shard's transaction must be able to stay open as long as a batch may take.

        Spark starts the next batch one trigger interval after the last; a batch that runs
        that long is normal, so a transaction timeout below the interval would make the broker
        abort (and fence) healthy writers mid-batch.
        """
        if interval_s is not None and self.transaction_timeout_ms < interval_s * 1000:
            raise ConfigError(
                "transaction_timeout_ms",
                f"{self.transaction_timeout_ms} ms is shorter than the trigger interval "
                f"({interval_s:g} s): raise it to at least {int(interval_s * 1000)}, or trigger "
                "more often",
            )

    def preflight(self, schema: StructType | None = None) -> None:
        """Check the broker, the topics and the transaction timeout before any write.

        Creates the compacted control topic and the dead-letter topic when missing, and the
        data topic when ``create_topic`` is on. With ``schema``, also checks the columns.
        """
        if schema is not None:
            self._check_schema(schema)
        if self._ready:
            return
        errors: list[str] = []
        admin = self._admin(errors)
        try:
            meta = admin.list_topics(timeout=self.connect_timeout)
        except KafkaException as exc:
            admin.poll(0.2)  # serves error_cb: the transport error says more than "timed out"
            reason = "; ".join(dict.fromkeys(errors[-3:])) or exc.args[0].str()
            raise SinkUnavailableError(
                f"cannot reach {self.where} within {self.connect_timeout:g}s: {self._scrub(reason)}"
            ) from None
        existing = {name for name, t in meta.topics.items() if t.error is None}
        if self.topic not in existing:
            if not self.create_topic:
                raise ConfigError(
                    "topic",
                    f"topic {self.topic!r} does not exist on {self.where} and create_topic is "
                    "off: create it, or pass create_topic=True",
                )
            self._create(admin, self.topic, self.partitions or -1, {})
        self._fit_message_size(admin)
        if self.control_topic not in existing:
            self._create(admin, self.control_topic, 1, {"cleanup.policy": "compact"})
        else:
            self._check_compacted(admin)
        if self.dead_letter_topic not in existing:
            self._create(admin, self.dead_letter_topic, 1, {})
        if self.probe_topic not in existing:
            self._create(admin, self.probe_topic, 1, {"retention.ms": str(PROBE_RETENTION_MS)})
        self._check_timeout(admin, meta)
        self._control_partitions = partitions_of(admin, self.control_topic, self.connect_timeout)
        self._topic_partitions = len(partitions_of(admin, self.topic, self.connect_timeout))
        self._control_partition = zlib.crc32(
            control_prefix(self.query_name, self.sink_name).encode()
        ) % len(self._control_partitions)
        self.hides_aborted = self._probe()
        self._ready = True

    def _check_schema(self, schema: StructType) -> None:
        names = list(schema.names)
        for reserved in RESERVED_COLUMNS:
            if reserved in names:
                raise ConfigError(
                    "id_columns", f"the stream has a column named {reserved!r}; the sink uses it"
                )
        self._check_id_columns(names)
        if self.key_column is not None and self.key_column not in names:
            raise ConfigError("key_column", f"{self.key_column!r} not in the stream's columns")
        if self.value == JSON_WITH_SCHEMA:
            connect_schema(schema)  # refuses, naming the column, what Connect cannot hold
        elif self.value != "json":
            if self.value not in names:
                raise ConfigError(
                    "value", f"'json' or a column of the stream; {self.value!r} is neither"
                )
            kind = schema[self.value].dataType.typeName()
            if kind not in ("string", "binary"):
                raise ConfigError(
                    "value",
                    f"column {self.value!r} is {kind}; a value column must be string "
                    f"or binary (or use value='json' or {JSON_WITH_SCHEMA!r})",
                )

    def _create(
        self, admin: AdminClient, name: str, partitions: int, config: dict[str, str]
    ) -> None:
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=-1, config=config)],
            request_timeout=self.connect_timeout,
        )
        try:
            futures[name].result()
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            field = {
                self.topic: "topic",
                self.control_topic: "control_topic",
                self.probe_topic: "control_topic",
            }.get(name, "dead_letter_topic")
            raise ConfigError(
                field, f"cannot create topic {name!r} on {self.where}: {self._scrub(err.str())}"
            ) from None
        log.info("created topic %s %s", name, config or "")

    def _topic_setting(self, admin: AdminClient, topic: str, name: str) -> str | None:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        try:
            configs = admin.describe_configs([resource])[resource].result(
                timeout=self.connect_timeout
            )
        except Exception as exc:  # not every broker answers DescribeConfigs
            log.warning("could not read %s of topic %s: %s", name, topic, exc)
            return None
        entry = configs.get(name)
        return str(entry.value) if entry is not None and entry.value is not None else None

    def _fit_message_size(self, admin: AdminClient) -> None:
        """A record the topic would refuse must fail at produce() (it becomes a dead
        letter), not at commit (which would abort the whole shard, every retry)."""
        limit = self._topic_setting(admin, self.topic, "max.message.bytes")
        if limit and limit.isdigit() and int(limit) < self.max_message_bytes:
            self.max_message_bytes = max(1000, int(limit))
            log.info("%s: records above %d bytes go to dead letters", self, self.max_message_bytes)

    def _check_compacted(self, admin: AdminClient) -> None:
        policy = self._topic_setting(admin, self.control_topic, "cleanup.policy")
        if policy and "compact" not in policy:
            raise ConfigError(
                "control_topic",
                f"{self.control_topic!r} has cleanup.policy={policy}: heads would expire with "
                "retention. Use a compacted topic (cleanup.policy=compact)",
            )

    def _check_timeout(self, admin: AdminClient, meta: Any) -> None:
        limit, source = KAFKA_DEFAULT_MAX_TRANSACTION_TIMEOUT_MS, "Kafka's default"
        broker = next(iter(meta.brokers), None)
        if broker is not None:
            resource = ConfigResource(ResourceType.BROKER, str(broker))
            try:
                configs = admin.describe_configs([resource])[resource].result(
                    timeout=self.connect_timeout
                )
                entry = configs.get("transaction.max.timeout.ms")
                if entry is not None and entry.value:
                    limit, source = int(entry.value), f"broker {broker}'s setting"
            except Exception as exc:
                log.debug("broker %s config not readable: %s", broker, exc)
        if self.transaction_timeout_ms > limit:
            raise ConfigError(
                self._timeout_field,
                f"transaction.timeout.ms={self.transaction_timeout_ms} exceeds the broker's "
                f"transaction.max.timeout.ms={limit} ({source}); the broker would refuse "
                "init_transactions",
            )

    def _probe(self) -> bool:
        """Does a read_committed consumer of this broker skip an aborted transaction?"""
        with _PROBES_LOCK:
            known = _PROBES.get(self.bootstrap_servers)
        if known is not None:
            return known
        producer = Producer(
            {
                **self._user_config(),
                "bootstrap.servers": self.bootstrap_servers,
                # Stable per (query, sink): a driver killed inside the probe leaves its
                # transaction open, and brokers without transaction timeouts (Tansu) never
                # end it; the next start's probe fences it (init_transactions aborts it).
                "transactional.id": transactional_id(self.query_name, self.sink_name, -1),
                "enable.idempotence": True,
                "acks": "all",
                "transaction.timeout.ms": self.transaction_timeout_ms,
                "logger": client_log,
            }
        )
        try:
            init_transactions(producer, self.probe_topic, self.connect_timeout)
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() == KafkaError.INVALID_TRANSACTION_TIMEOUT:
                raise ConfigError(
                    self._timeout_field,
                    f"the broker refuses transaction.timeout.ms={self.transaction_timeout_ms} "
                    "(above its transaction.max.timeout.ms)",
                ) from None
            raise SinkUnavailableError(
                f"{self.where}: transactions unavailable: {self._scrub(err.str())}"
            ) from None
        offsets: list[int] = []

        def delivered(err: KafkaError | None, msg: Any) -> None:
            offsets.append(-1 if err else offset_of(msg))

        topic, partition = self.probe_topic, 0
        producer.begin_transaction()
        producer.produce(topic, "aborted", PROBE_KEY, partition, on_delivery=delivered)
        producer.flush(self.connect_timeout)
        producer.abort_transaction(self.connect_timeout)
        after = self._producer()  # not transactional: visible to every reader
        after.produce(topic, "after", PROBE_KEY, partition, on_delivery=delivered)
        after.flush(self.connect_timeout)
        if len(offsets) != 2 or min(offsets) < 0:
            raise SinkUnavailableError(f"{self.where}: the broker probe could not be written")
        probe, end = offsets
        # Read from the aborted record to the plain one after it: whichever comes first.
        seen: bool | None = None
        client = self._consumer("read_committed")
        try:
            ranges = {(topic, partition): (probe, end + 1)}
            for msg in drain(client, ranges, max(PROBE_WAIT_S, self.connect_timeout), "the probe"):
                if seen is None and offset_of(msg) in (probe, end):
                    seen = offset_of(msg) == probe
        except SinkUnavailableError:
            # Held back by an open transaction (a probe killed inside its own, on a broker
            # that never times one out): assume the broker shows aborted records. Safe for
            # the recipe; only plain consumers may then see a re-write.
            log.warning("%s: broker probe inconclusive; trusting confirmations only", self)
            return False
        finally:
            client.close()
        hides = not seen
        with _PROBES_LOCK:
            _PROBES[self.bootstrap_servers] = hides
        log.info(
            "%s %s aborted records from read_committed consumers",
            self.where,
            "hides" if hides else "still DELIVERS",
        )
        return hides

    # -- the head ----------------------------------------------------------------------

    def _find_head(self) -> HeadRecord | None:
        """The latest head record, scanning the control partition backwards from its end."""
        key = head_key(self.query_name, self.sink_name).encode()
        client = self._driver_consumer()
        others = [p for p in self._control_partitions if p != self._control_partition]
        for partition in [self._control_partition, *others]:
            found, record = self._scan_back(client, partition, key)
            if found:
                if record is not None:
                    self._control_partition = partition
                return record
        return None

    def _scan_back(self, client: Any, partition: int, key: bytes) -> tuple[bool, HeadRecord | None]:
        # Not the low watermark: some brokers put it above the first record (kafka_reader.START).
        low = log_start_offset(client, self.control_topic, partition, self.connect_timeout)
        end = exact_end_offsets(client, self.control_topic, [partition], self.connect_timeout)[
            partition
        ]
        window = 2_000
        while end > low:
            start = max(low, end - window)
            latest: tuple[int, bytes | None] | None = None
            ranges = {(self.control_topic, partition): (start, end)}
            for msg in drain(client, ranges, self.connect_timeout * 6, "the control topic"):
                if msg.key() == key:
                    latest = (offset_of(msg), msg.value())
            if latest is not None:
                offset, value = latest
                if not value:
                    return True, None  # deleted by reset_head
                return True, HeadRecord.parse(value, partition, offset)
            end, window = start, window * 4
        return False, None

    def _read_head(self) -> Head | None:
        record = self._find_head()
        self._head_record = record
        if record is None:
            return None
        self._scan_from = record.scan_from
        self._fence(record.num_shards)
        return Head(record.epoch, record.spark_query_id, record.num_shards)

    def _fence(self, shards: int) -> None:
        """At a (re)start: fence every shard's older producer, aborting open transactions.

        A crashed attempt's open transaction would otherwise hold back read_committed reads
        of the control topic until the broker times it out.
        """

        def init(shard: int) -> None:
            config = {
                **self._user_config(),
                "bootstrap.servers": self.bootstrap_servers,
                "transactional.id": transactional_id(self.query_name, self.sink_name, shard),
                "enable.idempotence": True,
                "acks": "all",
                "transaction.timeout.ms": self.transaction_timeout_ms,
                "logger": client_log,
            }
            timeout_s = self.transaction_timeout_ms / 1000 + 30
            init_transactions(Producer(config), self.control_topic, timeout_s)

        began = time.monotonic()
        with ThreadPoolExecutor(max_workers=min(8, max(1, shards))) as pool:
            list(pool.map(init, range(shards)))
        log.info("%s: fenced %d shard producers (%.2fs)", self, shards, time.monotonic() - began)

    def _write_head(self, value: dict[str, Any], tombstones: Sequence[str] = ()) -> int:
        producer = self._producer()
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
            partition=self._control_partition,
            on_delivery=delivered,
        )
        for key in tombstones:
            producer.produce(
                self.control_topic, key=key, value=None, partition=self._control_partition
            )
        left = producer.flush(self.transaction_timeout_ms / 1000)
        if failures or left or not offsets:
            reason = failures[0] if failures else "not acknowledged in time"
            raise SinkUnavailableError(
                f"{self}: the head could not be written to {self.control_topic!r}: "
                f"{self._scrub(reason)}"
            )
        return offsets[0]

    def _head_value(
        self, epoch: int, query_id: str | None, shards: int, scan_from: int | None
    ) -> dict[str, Any]:
        record = self._head_record
        return {
            "epoch": epoch,
            "spark_query_id": query_id,
            "num_shards": shards,
            "scan_from": scan_from,
            "frontier": {
                t: {str(p): o for p, o in parts.items()}
                for t, parts in (record.frontier if record else {}).items()
            },
            "written_at": time.time(),
        }

    def _create_head(self, head: Head) -> None:
        value = self._head_value(head.epoch, head.spark_query_id, head.num_shards, None)
        offset = self._write_head(value)
        self._remember(value, offset)

    def _bind_query_id(self, spark_query_id: str) -> None:
        record = self._head_record
        assert record is not None
        value = self._head_value(record.epoch, spark_query_id, record.num_shards, self._scan_from)
        offset = self._write_head(value)
        self._remember(value, offset)

    def _advance_head(self, epoch: int, spark_query_id: str | None) -> None:
        """After every shard of ``epoch`` was confirmed: head, frontier, marker tombstones."""
        record = self._head_record
        assert record is not None
        if epoch <= record.epoch:
            return
        value = self._head_value(
            epoch, spark_query_id or record.spark_query_id, record.num_shards, None
        )
        value["frontier"] = self._frontier()
        markers = [
            marker_key(self.query_name, self.sink_name, epoch, s) for s in range(record.num_shards)
        ]
        offset = self._write_head(value, tombstones=markers)
        self._remember(value, offset)

    def _frontier(self) -> dict[str, dict[str, int]]:
        """Where each partition of the data and dead-letter topics ends now: all of it is
        committed and confirmed, nothing of the next epoch is there yet."""
        client = self._driver_consumer()
        out = {}
        for topic in (self.topic, self.dead_letter_topic):
            parts = partitions_of(self._producer(), topic, self.connect_timeout)
            ends = exact_end_offsets(client, topic, parts, self.connect_timeout)
            out[topic] = {str(p): o for p, o in sorted(ends.items())}
        return out

    def _remember(self, value: dict[str, Any], offset: int) -> None:
        scan_from = value["scan_from"]
        record = HeadRecord.parse(json.dumps(value).encode(), self._control_partition, offset)
        self._head_record = record
        self._scan_from = offset if scan_from is None else int(scan_from)

    def head(self) -> Head | None:
        """The committed head as the control topic has it now."""
        self.preflight()
        record = self._find_head()
        return (
            None if record is None else Head(record.epoch, record.spark_query_id, record.num_shards)
        )

    def reset_head(self) -> None:
        """Forget what this query committed (not the data): for a deliberate fresh start."""
        self.preflight()
        producer = self._producer()
        producer.produce(
            self.control_topic,
            key=head_key(self.query_name, self.sink_name),
            value=None,
            partition=self._control_partition,
        )
        if producer.flush(self.transaction_timeout_ms / 1000):
            raise SinkUnavailableError(f"{self}: the head reset was not acknowledged")
        self._head = None
        self._head_record = None
        log.warning("%s: head reset", self)

    def commits(self) -> Commits:
        """Step 1 of the consumption recipe for this sink: head and confirmed attempts."""
        return load_commits(
            self.bootstrap_servers,
            self.query_name,
            sink_name=self.sink_name,
            control_topic=self.control_topic,
            consumer_config=self._user_config(),
            timeout_s=max(60.0, self.connect_timeout),
        )

    # -- the write ---------------------------------------------------------------------

    def _project(self, df: DataFrame, epoch: int) -> DataFrame:
        """Record ID, key and value (bytes), plus the protocol's internal columns."""
        schema = df.schema
        columns = self._memo(("project", schema.json()), lambda: self._projection(schema))
        return self._with_ids(df, EPOCH_COLUMN, epoch).select(*columns)

    def _projection(self, schema: StructType) -> list[Column]:
        from pyspark.sql import functions as F

        self._check_schema(schema)
        row_json = F.to_json(F.struct(*map(F.col, schema.names)), {"ignoreNullFields": "false"})
        error, payload = F.col(ERROR_COLUMN), F.col(PAYLOAD_COLUMN)
        if self.value == "json":
            value = row_json
        elif self.value == JSON_WITH_SCHEMA:
            value = envelope(schema)
            reason = not_a_number_reason(schema)
            if reason is not None:  # a dead letter, not a value Connect would misread
                error = F.coalesce(error, reason)
                payload = F.coalesce(payload, F.when(reason.isNotNull(), row_json))
        else:
            value = F.col(self.value)
        columns = [F.col(ID_COLUMN)]
        if self.key_column is not None:
            key = F.col(self.key_column)
            if schema[self.key_column].dataType.typeName() != "binary":
                key = key.cast("string")
            columns.append(key.cast("binary").alias(KEY_COLUMN))
        columns.append(value.cast("binary").alias(VALUE_COLUMN))
        columns += [error.alias(ERROR_COLUMN), payload.alias(PAYLOAD_COLUMN)]
        return columns  # the epoch rides in headers

    def _task_writer(self, epoch: int, columns: Sequence[str]) -> TaskWriter:
        assert self.hides_aborted is not None, "preflight runs before the first epoch"
        target = KafkaTarget(
            bootstrap_servers=self.bootstrap_servers,
            config=self._config,
            topic=self.topic,
            dead_letter_topic=self.dead_letter_topic,
            control_topic=self.control_topic,
            control_partition=self._control_partition,
            query_name=self.query_name,
            sink_name=self.sink_name,
            columns=tuple(columns),
            has_key=self.key_column is not None,
            transaction_timeout_ms=self.transaction_timeout_ms,
            hides_aborted=self.hides_aborted,
            scan_from=self._scan_from,
            max_message_bytes=self.max_message_bytes,
            timeout_s=max(60.0, self.transaction_timeout_ms / 1000 + 30),
            dedup=self.dedup_plan,
            frame_records=self.frame_records,
            frame_bytes=min(self.frame_bytes, self.max_message_bytes // 2),
            topic_partitions=self._topic_partitions,
        )
        return KafkaShardWriter(target, epoch)

    def _rebuild_source(self) -> RebuildSource | None:
        """Kafka appends, so a lost catalog is rebuilt from the topic itself: the record-ID
        headers of confirmed attempts, over what the topic still retains."""

        def read(from_epoch: int) -> Iterator[tuple[Any, Any]]:
            import numpy as np

            commits = self.commits()
            for ids, epochs in confirmed_ids(
                self.bootstrap_servers,
                self.topic,
                commits,
                from_epoch,
                consumer_config=self._user_config(),
            ):
                yield np.array(ids, dtype="S32"), np.array(epochs, dtype=np.int64)

        return read

    def __repr__(self) -> str:
        return f"KafkaSink(query_name={self.query_name!r}, topic={self.topic!r})"


class KafkaShardWriter(ShardWriter[KafkaTarget]):
    """The ``mapInArrow`` function of one epoch. Spark pickles it to every task."""

    def _task(self) -> KafkaShardTask:
        return KafkaShardTask(self.target, self.epoch)


def _crash_armed(point: str) -> bool:
    return os.environ.get("EXACTLYONCE_CRASH_AT", "").partition("@")[0] == point


class KafkaShardTask(ShardTask):
    """One task's Kafka transaction for its shard.

    ``_open`` fences older attempts (``init_transactions``), then reads the control topic up
    to a barrier record of its own to learn whether an earlier attempt committed the shard;
    ``_commit`` commits the data with its marker, then confirms the attempt.
    """

    def __init__(self, target: KafkaTarget, epoch: int) -> None:
        super().__init__(epoch, ID_COLUMN, target.columns, target.dedup)
        self.t = target
        self.attempt = uuid.uuid4().hex[:16]
        self.shard: int | None = None
        self.producer: Producer | None = None
        self.in_transaction = False
        self.produced = 0
        self.frames = 0  # frames produced by this attempt (where the next one goes)
        self.dead = 0
        self.chunks = 0
        self.headers: list[tuple[str, str | bytes | None]] = []

    @property
    def where(self) -> str:
        return f"{self.t.query_name} epoch {self.epoch} shard {self.shard}"

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            bounds = pc.min_max(batch.column(SHARD_COLUMN)).as_py()
            low, high = int(bounds["min"]), int(bounds["max"])
            if self.shard is None:
                self.shard = low
            if low != self.shard or high != self.shard:
                raise AssertionError(
                    f"{self.where}: a task holds one shard (one transactional.id); got "
                    f"shards {low}..{high}"
                )
        super().write(batch)

    # -- ShardTask ---------------------------------------------------------------------

    def _open(self) -> set[int]:
        assert self.shard is not None
        self.headers = [
            (H_QUERY, self.t.query_name.encode()),
            (H_EPOCH, str(self.epoch).encode()),
            (H_SHARD, str(self.shard).encode()),
            (H_ATTEMPT, self.attempt.encode()),
        ]
        self.producer = Producer(self.t.producer_config(self.shard))
        init_transactions(self.producer, self.t.control_topic, self.t.timeout_s)
        confirmed, marker = self._earlier_attempts()
        if confirmed is not None:
            return {self.shard}
        if marker is not None and self.t.hides_aborted:
            # Committed (this broker hides aborted markers) but not confirmed: confirm it.
            self._confirm(str(marker["attempt"]), marker)
            return {self.shard}
        self.producer.begin_transaction()
        self.in_transaction = True
        return set()

    def _write_rows(self, rows: pa.RecordBatch) -> None:
        assert self.producer is not None
        ids = pc.cast(rows.column(ID_COLUMN), pa.binary()).to_pylist()
        values = rows.column(VALUE_COLUMN).to_pylist()
        if self.t.frame_records > 1:
            too_large = self._write_frames(ids, values)
        else:
            keys = rows.column(KEY_COLUMN).to_pylist() if self.t.has_key else [None] * len(ids)
            too_large = self._write_records(ids, values, keys)
        self.producer.poll(0)
        written = rows.num_rows - len(too_large)
        self.produced += written
        self.result.written += written
        if too_large:
            self._dead_letter_too_large(rows, too_large, ids, values)
        self.chunks += 1
        if self.chunks == 1 and _crash_armed("mid_produce"):
            self.producer.flush()  # so the first chunk really is on the broker
            crash_point("mid_produce", self.epoch)

    def _write_records(self, ids: list[Any], values: list[Any], keys: list[Any]) -> list[int]:
        """One message per record, its ID in ``eo-record-id``. Returns the rows too large
        for a message."""
        base = self.headers
        too_large: list[int] = []
        for i, (value, key, rid) in enumerate(zip(values, keys, ids, strict=True)):
            if not self._produce(value, key, [*base, (H_RECORD_ID, rid)]):
                too_large.append(i)
        return too_large

    def _write_frames(self, ids: list[Any], values: list[Any]) -> list[int]:
        """Frames (see :func:`frame_bounds`): the values one per line, the IDs (32 bytes
        each, in the same order) in ``eo-record-ids``. A record too large for a frame of its
        own is returned."""
        base = self.headers
        too_large: list[int] = []
        for start, end in frame_bounds(values, self.t.frame_records, self.t.frame_bytes):
            frame = b"\n".join(values[start:end])
            headers = [*base, (H_RECORD_IDS, b"".join(ids[start:end]))]
            if self._produce(frame, None, headers, self._next_frame_partition()):
                continue
            if end - start == 1:
                too_large.append(start)
            else:  # cannot happen within the budget (half of message.max.bytes); if it does:
                singles = self._write_frames_of_one(ids[start:end], values[start:end])
                too_large += [start + j for j in singles]
        return too_large

    def _write_frames_of_one(self, ids: list[Any], values: list[Any]) -> list[int]:
        base = self.headers
        return [
            i
            for i, (value, rid) in enumerate(zip(values, ids, strict=True))
            if not self._produce(value, None, [*base, (H_RECORD_IDS, rid)])
        ]

    def _next_frame_partition(self) -> int:
        """Frames go round-robin over the topic's partitions, from one that depends on the
        shard: a keyless message's partition is the client's sticky choice, which put a
        task's frames all in one partition, and the drainer's writers (and processes) each
        own some of the partitions."""
        n = self.t.topic_partitions
        if n <= 0:
            return -1  # the client picks
        assert self.shard is not None
        self.frames += 1
        return (self.shard + self.frames) % n

    def _produce(
        self, value: bytes, key: bytes | None, headers: list[Any], partition: int = -1
    ) -> bool:
        """Produce one message (``partition`` -1: the partitioner's choice); False when it
        is too large to be one."""
        assert self.producer is not None
        while True:
            try:
                self.producer.produce(self.t.topic, value, key, partition, headers=headers)
                return True
            except BufferError:
                self.producer.poll(0.05)  # local queue full: let deliveries drain
            except KafkaException as exc:
                if exc.args[0].code() not in _TOO_LARGE:
                    raise
                return False

    def _dead_letter_too_large(
        self, rows: pa.RecordBatch, rows_at: list[int], ids: list[Any], values: list[Any]
    ) -> None:
        letters = []
        for i in rows_at:
            payload = bytes(values[i] or b"")
            room = min(DEAD_LETTER_PAYLOAD_LIMIT, max(256, self.t.max_message_bytes // 2))
            text = payload[:room].decode("utf-8", errors="replace")
            letters.append(
                DeadLetter(
                    self.epoch,
                    self.shard,
                    bytes(ids[i]).decode(),
                    f"record too large: {len(payload)} bytes of value, the limit is "
                    f"{self.t.max_message_bytes} (message.max.bytes / the topic's "
                    "max.message.bytes); payload truncated",
                    text,
                )
            )
        self._write_dead_letters(letters)
        self.result.dead_letters += len(letters)

    def _write_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        assert self.producer is not None
        for d in letters:
            headers = [*self.headers, (H_ERROR, d.error.encode())]
            if d.record_id:
                headers.append((H_RECORD_ID, d.record_id.encode()))
            while True:
                try:
                    self.producer.produce(
                        self.t.dead_letter_topic,
                        (d.payload or "").encode(),
                        None,
                        headers=headers,
                    )
                    break
                except BufferError:
                    self.producer.poll(0.05)
        self.dead += len(letters)

    def _commit(self, new_shards: Sequence[int]) -> None:
        if not self.in_transaction:
            return  # the shard was committed by an earlier attempt
        assert self.producer is not None and self.shard is not None
        info = {
            "attempt": self.attempt,
            "count": self.produced,
            "dead_letters": self.dead,
            "topic": self.t.topic,
            "writer": self.result.writer,
        }
        self.producer.produce(
            self.t.control_topic,
            key=marker_key(self.t.query_name, self.t.sink_name, self.epoch, self.shard),
            value=json.dumps(info),
            partition=self.t.control_partition,
        )
        self._end_transaction("data")
        crash_point("before_confirm", self.epoch)
        self._confirm(self.attempt, info)

    def _close(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None and self.in_transaction:
            with contextlib.suppress(Exception):  # nothing of it may become visible as confirmed
                producer.abort_transaction(10)
            self.in_transaction = False

    # -- the protocol's Kafka steps ----------------------------------------------------

    def _earlier_attempts(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(confirmation, commit marker) of this shard's epoch from earlier attempts.

        Reads the control partition from the head's ``scan_from`` up to a barrier record
        written now: after ``init_transactions``, anything an older attempt wrote is below
        it. read_committed only where the broker hides aborted records; elsewhere markers
        are not trusted at all, and the read never waits on open transactions.
        """
        assert self.shard is not None
        barrier = self._barrier()
        marker_k = marker_key(self.t.query_name, self.t.sink_name, self.epoch, self.shard).encode()
        prefix = confirmation_key(
            self.t.query_name, self.t.sink_name, self.epoch, self.shard, ""
        ).encode()
        confirmed: dict[str, Any] | None = None
        marker: dict[str, Any] | None = None
        isolation = "read_committed" if self.t.hides_aborted else "read_uncommitted"
        client = consumer(self.t.bootstrap_servers, self.t.user_config(), isolation=isolation)
        try:
            ranges = {
                (self.t.control_topic, self.t.control_partition): (self.t.scan_from, barrier + 1)
            }
            for msg in drain(client, ranges, self.t.timeout_s, "the control topic"):
                key, value = msg.key(), msg.value()
                if key == marker_k:
                    marker = json.loads(value) if value else None
                elif key is not None and key.startswith(prefix) and value:
                    confirmed = json.loads(value)
        finally:
            client.close()
        return confirmed, marker

    def _barrier(self) -> int:
        """Commit a small record to the control partition; return its offset."""
        assert self.producer is not None and self.shard is not None
        offsets: list[int] = []
        self.producer.begin_transaction()
        self.in_transaction = True
        self.producer.produce(
            self.t.control_topic,
            key=sync_key(self.t.query_name, self.t.sink_name, self.shard),
            value=self.attempt,
            partition=self.t.control_partition,
            on_delivery=lambda err, msg: offsets.append(-1 if err else offset_of(msg)),
        )
        self.producer.flush(self.t.timeout_s)
        self._end_transaction("barrier")
        if not offsets or offsets[0] < 0:
            raise SinkUnavailableError(f"{self.where}: the control-topic barrier was not written")
        return offsets[0]

    def _confirm(self, attempt: str, info: Mapping[str, Any]) -> None:
        """Record that ``attempt`` committed. Transactional, so a fenced zombie cannot."""
        assert self.producer is not None and self.shard is not None
        self.producer.begin_transaction()
        self.in_transaction = True
        self.producer.produce(
            self.t.control_topic,
            key=confirmation_key(
                self.t.query_name, self.t.sink_name, self.epoch, self.shard, attempt
            ),
            value=json.dumps({**info, "attempt": attempt, "confirmed_by": self.attempt}),
            partition=self.t.control_partition,
        )
        self._end_transaction("confirmation")

    def _end_transaction(self, what: str) -> None:
        """Commit; a retriable error retries the commit, an abortable one aborts and fails
        the task, anything else is ambiguous and left for the next attempt to verify."""
        assert self.producer is not None
        deadline = time.monotonic() + self.t.timeout_s
        while True:
            try:
                self.producer.commit_transaction(max(1.0, deadline - time.monotonic()))
                self.in_transaction = False
                return
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if err.retriable() and time.monotonic() < deadline:
                    log.warning("%s: %s commit retried: %s", self.where, what, err.str())
                    time.sleep(0.2)
                    continue
                if err.txn_requires_abort():
                    with contextlib.suppress(KafkaException):
                        self.producer.abort_transaction(self.t.timeout_s)
                        self.in_transaction = False
                    raise SinkUnavailableError(
                        f"{self.where}: {what} transaction aborted ({err.name()}: "
                        f"{_scrubbed(err.str(), self.t)}); a re-run writes the shard again"
                    ) from None
                raise AmbiguousCommitError(
                    f"{self.where}: {what} commit outcome unknown ({err.name()}: "
                    f"{_scrubbed(err.str(), self.t)}); the next attempt verifies it in the "
                    "control topic"
                ) from None


def _scrubbed(text: str, target: KafkaTarget) -> str:
    return scrub(text, *_secrets_of(target.user_config()))
