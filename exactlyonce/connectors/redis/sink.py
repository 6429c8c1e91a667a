"""The driver side of the Redis sink: settings, preflight, the head in the sink's Redis, and
the projection that prepares each epoch's rows for the executor tasks (:mod:`.task`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import redis

from exactlyonce.connectors.base import (
    ExactlyOnceSink,
    TaskWriter,
)
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
from exactlyonce.connectors.base.rewind import Rewind, RewindOf
from exactlyonce.connectors.base.upsert import UpsertSpec
from exactlyonce.connectors.redis import check as _check
from exactlyonce.connectors.redis import rewind
from exactlyonce.connectors.redis.config import Mode, RedisSinkConfig, Write
from exactlyonce.connectors.redis.connection import (
    BUSY_POLICY,
    connect,
    patient,
    reaching,
    require_standalone,
)
from exactlyonce.connectors.redis.head import RedisHeadStore, head_key
from exactlyonce.connectors.redis.projection import project
from exactlyonce.connectors.redis.realtime import RedisFrontierTarget, read_frontiers
from exactlyonce.connectors.redis.streams import stream_ids
from exactlyonce.connectors.redis.task import (
    VALUE_COLUMN,
    RedisShardWriter,
    RedisTarget,
    staged_rows,
)
from exactlyonce.dedup.config import DedupConfig
from exactlyonce.dedup.keeper import RebuildSource
from exactlyonce.errors import ConfigError
from exactlyonce.secrets import Secret, redact_dsn

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger("exactlyonce.redis")

T = TypeVar("T")


class RedisSink(ExactlyOnceSink):
    """Writes a stream into Redis exactly once, as hashes, strings or stream entries.

    Guarantee: every record is applied exactly once through crashes, re-runs, duplicate input
    and restarts of the sink's Redis, provided the source replays, that Redis persists what it
    acknowledged (AOF, ``appendfsync always``) and nothing else writes the keys.

    Mechanism: each task's shard is applied by ONE Lua script that checks the head and the
    shard markers, writes the markers, the records and the dead letters atomically (big shards
    staged first, chunk by chunk); the driver then advances the head ``<prefix>:head``.
    Re-runs are no-ops decided server-side; a lost reply finds its own marker. The whole story,
    with the key layout, is in :mod:`exactlyonce.connectors.redis`.

    ``mode="upsert"`` (hash and string writes; ``key_template`` names exactly the
    ``id_columns``): each key holds the value of the latest epoch that wrote it, and an older
    epoch never rolls it back. Mechanism: the same apply script compares each record's epoch
    with the key's stored one (a hash's ``epoch_field``; for strings the companion key
    ``<prefix>:epoch:<key>``) and skips it, counted ``stale``, when the stored one is newer;
    a write replaces the whole value. Deletes (``tombstone_column``) leave their epoch behind
    (``<prefix>:tomb:<key>`` for hashes, the companion key for strings), with the sink's TTL.

    Spark Real-time Mode (``df.writeStream.foreach(sink.realtime(schema=df.schema))
    .trigger(realTime="5 seconds")``, ``mode="insert"``, a Kafka source whose topic, partition
    and offset columns reach the writer): every source record is applied exactly once, visible
    within the commit interval (0.02 s by default), through task re-runs, driver crashes and a
    deleted checkpoint. Mechanism (:mod:`exactlyonce.connectors.redis.realtime`): each chunk of
    a task's rows is applied by ONE Lua script together with its source partitions' frontiers
    (the next offset to write, in ``<prefix>:rtm:frontiers``), which the script first checks
    are still what the writer read; a re-run skips rows below the frontier.

    Example::

        sink = RedisSink("redis://:pw@cache:6379/0", "user:{user_id}", id_columns=["event_id"],
                         query_name="clicks-to-redis", write="hash", ttl_seconds=86400)
        df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).start()
    """

    kind = "redis"
    config: RedisSinkConfig
    template = Setting[Any]()
    write = Setting[Write]()
    pipeline_size = Setting[int]()
    id_field = Setting[str]()
    id_column = Setting[str]("id_field")
    epoch_field = Setting[str]()
    socket_timeout = Setting[float]()
    connect_timeout = Setting[float]()
    retries = Setting[int]()

    def __init__(
        self,
        url: str,
        key_template: str,
        id_columns: Sequence[str] | str | None,
        query_name: str,
        *,
        id_from: IdFrom | Unset = UNSET,
        write: Write | Unset = UNSET,
        mode: Mode | Unset = UNSET,
        tombstone_column: str | None | Unset = UNSET,
        order_by: Sequence[str] | str | Unset = UNSET,
        ttl_seconds: float | None | Unset = UNSET,
        pipeline_size: int | Unset = UNSET,
        prefix: str | None | Unset = UNSET,
        id_field: str | Unset = UNSET,
        epoch_field: str | Unset = UNSET,
        socket_timeout: float | Unset = UNSET,
        connect_timeout: float | Unset = UNSET,
        retries: int | Unset = UNSET,
        shards: int | None | Unset = UNSET,
        sink_name: str | None | Unset = UNSET,
        dedup: bool | DedupSettings | DedupConfig | Mapping[str, Any] | Unset = UNSET,
        redis_url: str | None | Unset = UNSET,
        write_retries: int | Unset = UNSET,
        allow_unknown_query_id: bool | Unset = UNSET,
        check: bool = True,
    ) -> None:
        """Settings and their defaults: :class:`RedisSinkConfig`. ``check`` preflights the
        sink's Redis now."""
        self._set_up(RedisSinkConfig(**given(locals())), check)

    def _configure(self, config: RedisSinkConfig) -> None:
        url = config.url.get_secret_value()
        self.url = Secret(url)
        self.where = redact_dsn(url)
        self.busy = BUSY_POLICY
        self.prefix = config.key_prefix
        self._redis: Any = None
        self._ready = False

    @property
    def ttl_ms(self) -> int | None:
        """``ttl_seconds`` in milliseconds (what PEXPIRE takes); None: keys never expire."""
        ttl = self.config.ttl_seconds
        return None if ttl is None else int(round(ttl * 1000))

    @property
    def upsert(self) -> UpsertSpec | None:
        if self.config.mode != "upsert":
            return None
        return UpsertSpec(self.config.tombstone_column, self.config.order_by)

    @property
    def head_key(self) -> str:
        return head_key(self.prefix)

    @property
    def dead_letter_key(self) -> str:
        return f"{self.prefix}:dead-letters"

    @property
    def stream_registry_key(self) -> str:
        """A set of every stream key the sink appended to (``write="stream"``)."""
        return f"{self.prefix}:streams"

    # -- connections -------------------------------------------------------------------

    @property
    def client(self) -> Any:
        if self._redis is None:
            self._redis = connect(
                self.url,
                retries=self.retries,
                socket_timeout=self.socket_timeout,
                connect_timeout=self.connect_timeout,
            )
        return self._redis

    def reaching(self) -> AbstractContextManager[None]:
        """Connection failures as SinkUnavailableError; never with the password."""
        return reaching(self.url, self.where)

    def patient(self, call: Callable[[], T]) -> T:
        """``call``, waiting out BUSY as ``self.busy`` says."""
        return patient(call, self.busy)

    # -- preflight ---------------------------------------------------------------------

    def preflight(self, schema: StructType | None = None) -> None:
        """Check the server (reachable, not a cluster) and, with ``schema``, the columns."""
        if schema is not None:
            self._check_columns(list(self._stored(schema).names))
        if self._ready:
            return
        probe = connect(
            self.url,
            retries=0,
            socket_timeout=self.connect_timeout,
            connect_timeout=self.connect_timeout,
        )
        try:
            with self.reaching():
                require_standalone(probe, self.head_key)
                self._warn_without_persistence(probe)
        finally:
            probe.close()
        self._ready = True

    def _stored(self, schema: StructType) -> StructType:
        """The stream's columns the sink stores (upsert: all but the tombstone flag)."""
        upsert = self.upsert
        return schema if upsert is None else upsert.stored_schema(schema)

    def _check_columns(self, names: list[str]) -> None:
        self._check_id_columns(names)
        missing = [f for f in self.template.fields if f not in names]
        if missing:
            raise ConfigError(
                "key_template",
                f"{self.template.text!r} names column(s) {missing} that are not in the "
                f"stream's columns {names}",
            )
        reserved = [(self.id_field, "id_field"), (self.epoch_field, "epoch_field")]
        if self.write == "string":
            reserved.append((VALUE_COLUMN, "write"))
        self._refuse_reserved_columns(names, reserved, "; choose another")

    def _warn_without_persistence(self, client: Any) -> None:
        try:
            aof = client.config_get("appendonly").get("appendonly")
        except redis.RedisError:
            return  # CONFIG is often disabled on managed Redis
        if aof != "yes":
            log.warning(
                "%s: the sink's Redis at %s runs without AOF persistence; a restart would lose "
                "committed records and their head. Run it with appendonly yes (appendfsync "
                "always for every commit to be durable when acknowledged).",
                self,
                self.where,
            )

    # -- what `exactlyonce check` reports (.check) --------------------------------------

    def check(self) -> CheckOf[Any]:
        """The guarantee and its preconditions, read live: :mod:`.check`."""
        return CheckOf(self, _check.guarantee, _check.preconditions)

    # -- the head ----------------------------------------------------------------------

    def head_store(self) -> RedisHeadStore:
        return RedisHeadStore(self.prefix, lambda: self.client, self.reaching, self.patient)

    # -- inspection and rewind (see .rewind) ---------------------------------------------

    def rewinder(self) -> Rewind:
        """Its records by epoch (:mod:`.rewind`)."""
        return RewindOf(
            self, rewind.refusal, rewind.shard_commits, rewind.removals_above, rewind.rewind_to
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
        RealtimeOptions`). Preflights the sink's Redis now, in the driver; with ``schema``
        (the stream's), checks the source and key-template columns too."""
        if self.config.mode == "upsert":
            raise ConfigError("mode", "'upsert' is not available in Real-time Mode yet")
        options = realtime_options(
            schema, commit_interval, max_pending_rows, rows_per_source_record, source_columns
        )
        self.preflight(schema)
        target = RedisFrontierTarget(
            url=self.url,
            write=self.write,
            template=self.template,
            id_field=self.id_field,
            epoch_field=self.epoch_field,
            ttl_ms=self.ttl_ms,
            prefix=self.prefix,
            query_name=self.query_name,
            sink_name=self.sink_name,
            socket_timeout=self.socket_timeout,
            connect_timeout=self.connect_timeout,
            retries=self.retries,
            guarded=self.config.guarded_namespaces,
            busy=self.busy,
        )
        return writer_for(self, target, options, self.ids.content)

    def source_frontiers(self) -> dict[SourceKey, int]:
        """The source frontiers the Real-time Mode writer committed for this query (the next
        Kafka offset to write per (topic, partition)), read-only; empty when it never ran."""
        with self.reaching():
            return self.patient(lambda: read_frontiers(self.client, self.prefix))

    # -- the write ---------------------------------------------------------------------

    def _project(self, df: DataFrame, epoch: int) -> DataFrame:
        """Stored columns as their Spark string form; null template columns are bad records."""
        schema = self._stored(df.schema)
        self._check_columns(list(schema.names))
        with_ids = self._with_ids(df, self.epoch_field, epoch)
        return project(
            with_ids,
            schema,
            self.template,
            self.write,
            self.id_field,
            self.epoch_field,
            upsert=self.upsert is not None,
        )

    def _task_writer(self, epoch: int, columns: Sequence[str]) -> TaskWriter:
        assert self._head is not None
        target = RedisTarget(
            url=self.url,
            write=self.write,
            template=self.template,
            columns=tuple(columns),
            fields=tuple(c for c in columns if c not in (self.id_field, self.epoch_field))
            if self.write != "string"
            else (),
            id_field=self.id_field,
            epoch_field=self.epoch_field,
            ttl_ms=self.ttl_ms,
            pipeline_size=staged_rows(self.pipeline_size),
            prefix=self.prefix,
            guarded=self.config.guarded_namespaces,
            query_name=self.query_name,
            sink_name=self.sink_name,
            num_shards=self._head.num_shards,
            socket_timeout=self.socket_timeout,
            connect_timeout=self.connect_timeout,
            retries=self.retries,
            dedup=self.dedup_plan,
            busy=self.busy,
            upsert=self.upsert,
        )
        return RedisShardWriter(target, epoch)

    @property
    def unique_sink(self) -> bool:
        """Hash and string writes: the key is the identity. A stream append is not."""
        return self.write != "stream"

    def _rebuild_source(self) -> RebuildSource | None:
        """Stream mode: the record IDs and epochs of every stream the sink appended to.

        Exact while the streams are neither trimmed nor expired: with ``ttl_seconds``, keep
        the catalog's retention within the TTL, or a rebuild misses the expired entries.
        """
        if self.write != "stream":
            return None

        def read(from_epoch: int) -> Iterator[tuple[Any, Any]]:
            return stream_ids(
                self.client,
                self.stream_registry_key,
                self.id_field,
                self.epoch_field,
                from_epoch,
                self.reaching,
                self.patient,
            )

        return read
