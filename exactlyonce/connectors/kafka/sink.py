"""The Kafka sink, driver side; its guarantee and mechanism: :class:`KafkaSink`."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from exactlyonce.connectors.base import ExactlyOnceSink, Head, TaskWriter
from exactlyonce.connectors.base.config import (
    UNSET,
    DedupSettings,
    IdFrom,
    Setting,
    Unset,
    given,
)
from exactlyonce.connectors.base.frontier import RowsPerRecord, SourceKey
from exactlyonce.connectors.base.guarantee import CheckOf
from exactlyonce.connectors.base.realtime import (
    COMMIT_INTERVAL_S,
    RealtimeWriter,
    realtime_options,
    writer_for,
)
from exactlyonce.connectors.base.rewind import Refused, Rewind
from exactlyonce.connectors.kafka import check as _check
from exactlyonce.connectors.kafka import preflight as _preflight
from exactlyonce.connectors.kafka.avro import AVRO
from exactlyonce.connectors.kafka.clients import KafkaClients
from exactlyonce.connectors.kafka.config import KafkaSinkConfig
from exactlyonce.connectors.kafka.connect_json import JSON_WITH_SCHEMA
from exactlyonce.connectors.kafka.head import ControlTopicHeads
from exactlyonce.connectors.kafka.projection import (
    check_key_and_value,
    check_reserved,
    projection,
)
from exactlyonce.connectors.kafka.protocol import (
    EPOCH_COLUMN,
    ID_COLUMN,
)
from exactlyonce.connectors.kafka.reader import Commits, confirmed_ids, load_commits
from exactlyonce.connectors.kafka.realtime import KafkaFrontierTarget, read_frontiers
from exactlyonce.connectors.kafka.target import KafkaTarget
from exactlyonce.connectors.kafka.writer import KafkaShardWriter
from exactlyonce.dedup.config import DedupConfig
from exactlyonce.dedup.keeper import RebuildSource
from exactlyonce.errors import ConfigError, SinkUnavailableError
from exactlyonce.secrets import Secret

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger("exactlyonce.kafka")


class KafkaSink(ExactlyOnceSink):
    """Writes a stream into a Kafka topic exactly once.

    Guarantee: every record of the stream is in the topic exactly once for a reader that follows
    the recipe of :mod:`exactlyonce.connectors.kafka.reader`, through driver crashes, executor
    loss, re-run micro-batches and duplicate input, provided the source replays and the catalog
    (Redis) keeps IDs for ``retention_epochs``. On a broker that hides aborted records from
    ``read_committed`` consumers (Apache Kafka), a plain ``read_committed`` consumer sees each
    record exactly once too.

    Mechanism, per epoch:

    - each record gets a deterministic ID (hashed ``id_columns``, or with ``id_from="content"``
      the row and its occurrence number in the epoch) and a shard (ID hash);
    - each executor task writes its shard in ONE Kafka transaction, from an idempotent producer
      whose ``transactional.id`` is ``eo-<query>-<sha1(sink)[:8]>-<shard>``: stable across
      re-runs, so a new attempt's ``init_transactions()`` fences the zombie of an older one and
      aborts its open transaction;
    - every data record carries one header, ``eo``: ``1|<epoch>|<shard>|<attempt>|<query>|``
      then its record ID (wire format 1; ``attempt`` is a nonce per task attempt). Readers of
      this version also read wire format 0, where the same fields were the five headers
      ``eo-query``, ``eo-epoch``, ``eo-shard``, ``eo-attempt`` and ``eo-record-id``, and
      dead letters and buffer frames still carry them;
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

    Spark Real-time Mode (``df.writeStream.foreach(sink.realtime(schema=df.schema))
    .trigger(realTime="5 seconds")``, Apache Kafka only, a Kafka source whose topic, partition
    and offset columns reach the writer, ``value="json"`` or a column): every source record is
    in the topic exactly once for a plain ``read_committed`` consumer, visible within the
    commit interval (0.02 s by default), through task re-runs, driver crashes and a deleted
    checkpoint. Mechanism (:mod:`exactlyonce.connectors.kafka.realtime`): per source partition
    one transactional producer, whose stable ``transactional.id`` fences the older writers of
    that partition before it reads the partition's frontier (the next source offset to write)
    from the control topic; each chunk of a source partition's rows goes in ONE transaction
    with its new frontier; a re-run skips rows below the frontier. Duplicates that an
    at-least-once upstream sent as distinct source records are written as such (the catalog is
    not used in this mode).

    Through Spark's format API (``df.writeStream.format("exactlyonce").option("sink", "kafka")``)
    tasks are Spark partitions, not shards: there the transactions are per partition, their
    markers carry the partition's input fingerprint, and IDs are claimed in the catalog before
    they are written (:mod:`exactlyonce.connectors.kafka.partition_task`; the guarantee and
    why it holds: :mod:`exactlyonce.integration.datasource`). Apache Kafka only.

    Example::

        sink = KafkaSink("broker:9092", "events-out", ["event_id"], "clicks-to-kafka")
        df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).start()
    """

    kind = "kafka"
    config: KafkaSinkConfig
    bootstrap_servers = Setting[str]()
    topic = Setting[str]()
    control_topic = Setting[str]()
    dead_letter_topic = Setting[str]("dead_letter_topic_name")
    timeout_field = Setting[str]()
    transaction_timeout_ms = Setting[int]("timeout_ms")
    key_column = Setting[str | None]()
    value = Setting[str]()
    create_topic = Setting[bool]()
    partitions = Setting[int | None]()
    connect_timeout = Setting[float]()
    id_column = ID_COLUMN

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        id_columns: Sequence[str] | str | None,
        query_name: str,
        *,
        id_from: IdFrom | Unset = UNSET,
        key_column: str | None | Unset = UNSET,
        value: str | Unset = UNSET,
        control_topic: str | Unset = UNSET,
        dead_letter_topic: str | None | Unset = UNSET,
        create_topic: bool | Unset = UNSET,
        partitions: int | None | Unset = UNSET,
        producer_config: Mapping[str, Any] | None | Unset = UNSET,
        transaction_timeout_ms: int | Unset = UNSET,
        connect_timeout: float | Unset = UNSET,
        shards: int | None | Unset = UNSET,
        sink_name: str | None | Unset = UNSET,
        dedup: bool | DedupSettings | DedupConfig | Mapping[str, Any] | Unset = UNSET,
        redis_url: str | None | Unset = UNSET,
        write_retries: int | Unset = UNSET,
        allow_unknown_query_id: bool | Unset = UNSET,
        check: bool = True,
    ) -> None:
        """Settings and their defaults: :class:`KafkaSinkConfig`. ``check`` preflights the
        broker and the topics now."""
        self._set_up(KafkaSinkConfig(**given(locals())), check)

    def _configure(self, config: KafkaSinkConfig) -> None:
        # Only the preflight probes write here: its read_committed read cannot be held back
        # by the open transactions of crashed shard tasks, as it was on the control topic.
        self.probe_topic = f"{self.control_topic}.probe"
        client_config = config.client_config()
        self._config = Secret(json.dumps(client_config))
        self._secrets = config.secrets()
        self._ready = False
        self.hides_aborted: bool | None = None
        self._topic_partitions = 0
        self.clients = KafkaClients(self.bootstrap_servers, self._config, self._secrets)
        self._heads = ControlTopicHeads(
            self.clients,
            control_topic=self.control_topic,
            query_name=self.query_name,
            sink_name=self.sink_name,
            frontier_topics=(self.topic, self.dead_letter_topic),
            connect_timeout=self.connect_timeout,
            transaction_timeout_ms=self.transaction_timeout_ms,
            owner=self,
        )
        self.max_message_bytes = int(client_config.get("message.max.bytes", 1_000_000))
        # One record per message (the layout of the recipe); the buffer packs frames.
        self.frame_records = 1
        self.frame_bytes = 0

    @property
    def unique_sink(self) -> bool:
        return False  # Kafka appends: a second write of an ID is a second record

    @property
    def where(self) -> str:
        return f"Kafka at {self.bootstrap_servers}"

    @property
    def _control_partition(self) -> int:
        """The control-topic partition of this (query, sink)."""
        return self._heads.partition

    @property
    def _scan_from(self) -> int:
        return self._heads.scan_from

    def _user_config(self) -> dict[str, Any]:
        return self.clients.user_config()

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
        """Check the broker, the topics and the transaction timeout before any write
        (:mod:`.preflight`), once per sink object.

        Creates the compacted control topic and the dead-letter topic when missing, and the
        data topic when ``create_topic`` is on. With ``schema``, also checks the columns.
        """
        if schema is not None:
            self._check_schema(schema)
        if self._ready:
            return
        layout = _preflight.run(self)
        self._topic_partitions = layout.topic_partitions
        self._heads.place(layout.control_partitions)
        self.hides_aborted = layout.hides_aborted
        self._ready = True

    def _check_schema(self, schema: StructType) -> None:
        names = list(schema.names)
        check_reserved(names)
        self._check_id_columns(names)
        check_key_and_value(schema, self.key_column, self.value)

    # -- what `exactlyonce check` reports (.check) --------------------------------------

    def check(self) -> CheckOf[Any]:
        """The guarantee and its preconditions, read live: :mod:`.check`."""
        return CheckOf(self, _check.guarantee, _check.preconditions)

    # -- the head (HeadStore, on the control topic: .head) -----------------------------

    def head_store(self) -> ControlTopicHeads:
        """The control topic's heads (:mod:`.head`); its ``advance_head`` tombstones the
        markers of the shards, or of ``marker_slots`` Spark partitions if more (the data
        source path's driver sets them before it commits an epoch)."""
        return self._heads

    def _fence_earlier_writers(self, head: Head) -> None:
        """After the start checked the head: fence the older producers of every shard and
        Spark partition (:meth:`.head.ControlTopicHeads.fence_writers`)."""
        self._heads.fence_writers()

    @property
    def marker_slots(self) -> int:
        return self._heads.marker_slots

    @marker_slots.setter
    def marker_slots(self, slots: int) -> None:
        self._heads.marker_slots = slots

    def head(self) -> Head | None:
        """The committed head as the control topic has it now."""
        self.preflight()
        record = self._heads.find()
        self._heads.record = record  # what advance_head moves on from (a commit-only driver)
        return (
            None if record is None else Head(record.epoch, record.spark_query_id, record.num_shards)
        )

    def peek_head(self) -> Head | None:
        """The head, read without preflight: no topic is created (a missing control topic
        means no head yet) and no producer is fenced."""
        try:  # all topics: asking for one by name makes some brokers create it
            meta = self._heads.clients.reader().list_topics(timeout=self._heads.connect_timeout)
        except Exception as exc:
            raise SinkUnavailableError(f"Kafka metadata unavailable: {exc}") from None
        found = meta.topics.get(self.control_topic)
        if found is None or found.error is not None or not found.partitions:
            return None
        self._heads.place(sorted(found.partitions))
        record = self._heads.find()
        if record is None:
            return None
        return Head(record.epoch, record.spark_query_id, record.num_shards, record.written_at)

    def rewinder(self) -> Rewind:
        return Refused(
            f"the records of epochs above N are committed to Kafka topic {self.topic!r}, and "
            "records in a topic cannot be removed (consumers may have read them already); a "
            "rewound head would write them a second time. To redo those epochs, write them to "
            "a new topic, or start over with a new query_name and a new checkpoint"
        )

    def reset_head(self) -> None:
        """Forget what this query committed (not the data): the control topic must exist."""
        self.preflight()
        super().reset_head()

    def commits(self, trust_markers: bool = False, since_offset: int = 0) -> Commits:
        """Step 1 of the consumption recipe for this sink: head and confirmed attempts
        (``trust_markers``, ``since_offset``: see :func:`.reader.load_commits`)."""
        return load_commits(
            self.bootstrap_servers,
            self.query_name,
            sink_name=self.sink_name,
            control_topic=self.control_topic,
            consumer_config=self._user_config(),
            timeout_s=max(60.0, self.connect_timeout),
            trust_markers=trust_markers,
            since_offset=since_offset,
        )

    # -- Spark Real-time Mode (see .realtime) -------------------------------------------

    def realtime(
        self,
        schema: StructType | None = None,
        *,
        commit_interval: float = COMMIT_INTERVAL_S,
        max_pending_rows: int = 10_000,
        rows_per_source_record: RowsPerRecord = "one",
        source_columns: Sequence[str] = ("topic", "partition", "offset"),
    ) -> RealtimeWriter:
        """A ``foreach`` writer for Spark Real-time Mode, exactly once by source frontiers
        (the class docstring; options: :class:`~exactlyonce.connectors.base.realtime.
        RealtimeOptions`). Preflights the broker and the topics now, in the driver; with
        ``schema`` (the stream's), checks the source, key and value columns too."""
        if self.value in (AVRO, JSON_WITH_SCHEMA):
            raise ConfigError(
                "value", f"{self.value!r} is not available in Real-time Mode yet: use 'json' or "
                "a string or binary column",
            )  # fmt: skip
        options = realtime_options(
            schema, commit_interval, max_pending_rows, rows_per_source_record, source_columns
        )
        if schema is not None:
            check_key_and_value(schema, self.key_column, self.value)
        self.preflight()
        if not self.hides_aborted:
            raise ConfigError(
                "bootstrap_servers",
                f"{self.bootstrap_servers} delivers aborted records to read_committed "
                "consumers: Real-time Mode needs a broker that hides them (Apache Kafka), "
                "since its readers are plain read_committed consumers",
            )
        target = KafkaFrontierTarget(
            bootstrap_servers=self.bootstrap_servers,
            config=self._config,
            topic=self.topic,
            control_topic=self.control_topic,
            control_partition=self._control_partition,
            query_name=self.query_name,
            sink_name=self.sink_name,
            key_column=self.key_column,
            value=self.value,
            source_columns=options.source_columns,
            transaction_timeout_ms=self.transaction_timeout_ms,
            timeout_s=max(60.0, self.connect_timeout),
        )
        return writer_for(self, target, options, self.ids.content)

    def source_frontiers(self) -> dict[SourceKey, int]:
        """The source frontiers the Real-time Mode writer committed for this query (the next
        Kafka offset to write per (topic, partition)), read from the control topic; empty
        when it never ran."""
        self.preflight()
        return read_frontiers(
            self.bootstrap_servers,
            self._user_config(),
            self.control_topic,
            self._control_partition,
            self.query_name,
            self.sink_name,
            max(60.0, self.connect_timeout),
        )

    # -- the write ---------------------------------------------------------------------

    def _project(self, df: DataFrame, epoch: int) -> DataFrame:
        """Record ID, key and value (bytes), plus the protocol's internal columns."""
        schema = df.schema
        columns = self._memo(("project", schema.json()), lambda: self._projection(schema))
        return self._with_ids(df, EPOCH_COLUMN, epoch).select(*columns)

    def _projection(self, schema: StructType) -> list[Column]:
        self._check_schema(schema)
        return projection(schema, self.key_column, self.value)

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
        headers of confirmed attempts, over what the topic still retains. On a broker that
        hides aborted records, also of attempts that committed and died before their
        confirmation: a Spark partition of the data source path that committed must have
        its IDs in the catalog before any other partition of the epoch runs again, for they
        may hold the same IDs (see :mod:`exactlyonce.integration.datasource`)."""

        def read(from_epoch: int) -> Iterator[tuple[Any, Any]]:
            import numpy as np

            commits = self.commits(trust_markers=self.hides_aborted is True)
            for ids, epochs in confirmed_ids(
                self.bootstrap_servers,
                self.topic,
                commits,
                from_epoch,
                consumer_config=self._user_config(),
            ):
                yield np.array(ids, dtype="S32"), np.array(epochs, dtype=np.int64)

        return read

    def mark_committed_since_head(self) -> int:
        """At a start, after the catalog was opened: mark what :meth:`committed_since_head`
        finds (a catalog dropped or rebuilt, or rolled back to the head, lacks it); the
        number of IDs marked."""
        record = self._heads.record
        if self._keeper is None or record is None:
            return 0
        return self._keeper.mark_written(self.committed_since_head(), record.epoch)

    def committed_since_head(self) -> Iterator[tuple[Any, Any]]:
        """IDs and epochs of the attempts that committed since the head was written (epochs
        above it; a broker that hides aborted records: committed markers count), read from
        the head's frontier on. The Spark data source path marks them in the catalog at a
        start, before any task runs again (see :mod:`exactlyonce.integration.datasource`)."""
        import numpy as np

        record = self._heads.record
        assert record is not None and self.hides_aborted, "started, on such a broker"
        commits = self.commits(trust_markers=True, since_offset=record.scan_from)
        above = {a for a in commits.confirmed if a[0] > record.epoch}
        if not above:
            return
        commits.confirmed = above
        for ids, epochs in confirmed_ids(
            self.bootstrap_servers,
            self.topic,
            commits,
            record.epoch + 1,
            consumer_config=self._user_config(),
            start_offsets=record.frontier.get(self.topic),
        ):
            yield np.array(ids, dtype="S32"), np.array(epochs, dtype=np.int64)

    def __repr__(self) -> str:
        return f"KafkaSink(query_name={self.query_name!r}, topic={self.topic!r})"
