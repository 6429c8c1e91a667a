"""The driver side of the Elasticsearch family's sinks: settings, preflight (cluster,
credentials, indices), the head document, and the projection that prepares each epoch's rows.
:class:`SearchSink` is the whole protocol; a concrete sink names its config model and its
:class:`~exactlyonce.connectors.search.engine.Engine` (the client library), nothing else."""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

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
from exactlyonce.connectors.base.rewind import Rewind, RewindOf
from exactlyonce.connectors.base.upsert import UpsertSpec
from exactlyonce.connectors.search import check as _check
from exactlyonce.connectors.search import rewind
from exactlyonce.connectors.search.config import Mode, OpType, SearchSinkConfig
from exactlyonce.connectors.search.connection import SearchConnection, call
from exactlyonce.connectors.search.engine import Client, Engine
from exactlyonce.connectors.search.head import SearchHeadStore
from exactlyonce.connectors.search.policy import default_policy
from exactlyonce.connectors.search.realtime import SearchFrontierTarget, read_frontiers
from exactlyonce.connectors.search.schema import (
    CONTROL_MAPPING,
    DEAD_LETTER_MAPPING,
    ID_COLUMN,
    RTM_FRONTIER_PROPERTIES,
    ensure_index,
    target_mapping,
)
from exactlyonce.connectors.search.task import SearchShardWriter, SearchTarget
from exactlyonce.dedup.config import DedupConfig
from exactlyonce.errors import ConfigError
from exactlyonce.retry import RetryPolicy
from exactlyonce.secrets import Secret

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger("exactlyonce.search")

T = TypeVar("T")


class SearchSink(ExactlyOnceSink):
    """The protocol of the Elasticsearch family, written once; the client is a parameter.

    A concrete sink (:class:`~exactlyonce.connectors.elasticsearch.ElasticsearchSink`,
    :class:`~exactlyonce.connectors.opensearch.OpenSearchSink`) sets ``kind``,
    ``config_model`` and ``engine`` and states its guarantee; everything else is here:
    deterministic ``_id``\\ s make every re-send a 409 (``create``) or an identical overwrite
    (``index``); a task writes its shard-commit document only after every item is
    acknowledged; the driver then advances the head document with optimistic concurrency.
    ``mode="upsert"`` writes with the epoch as external version (``external_gte``).

    Spark Real-time Mode (``df.writeStream.foreach(sink.realtime(schema=df.schema))
    .trigger(realTime="5 seconds")``, ``mode="insert"``, a Kafka source whose topic, partition
    and offset columns reach the writer): every source record is one document (its record ID
    as ``_id``), visible within the commit interval plus the index's refresh, through task
    re-runs, driver crashes and a deleted checkpoint. Mechanism
    (:mod:`exactlyonce.connectors.search.realtime`): per chunk, the source frontiers are read
    again, the documents bulked, then each frontier document moved only from the
    ``_seq_no``/``_primary_term`` the writer read; a re-run skips rows below the frontier,
    and a crash between the bulk and the frontier re-sends the same ``_id``\\ s (a 409 under
    ``create``).
    """

    config_model: ClassVar[type[SearchSinkConfig]]
    engine: ClassVar[Engine]
    config: SearchSinkConfig
    index = Setting[str]()
    control_index = Setting[str]()
    dead_letter_index = Setting[str]("dead_letter_index_name")
    op_type = Setting[OpType]()
    epoch_field = Setting[str]()
    mapping = Setting[dict[str, Any] | None]()
    bulk_max_actions = Setting[int]()
    bulk_max_bytes = Setting[int]()
    id_column = ID_COLUMN

    def __init__(
        self,
        hosts: str | Sequence[str],
        index: str,
        id_columns: Sequence[str] | str | None,
        query_name: str,
        *,
        id_from: IdFrom | Unset = UNSET,
        op_type: OpType | Unset = UNSET,
        mode: Mode | Unset = UNSET,
        tombstone_column: str | None | Unset = UNSET,
        order_by: Sequence[str] | str | Unset = UNSET,
        api_key: str | tuple[str, str] | None | Unset = UNSET,
        basic_auth: str | tuple[str, str] | None = None,
        ca_certs: str | None | Unset = UNSET,
        verify_certs: bool | Unset = UNSET,
        request_timeout: float | Unset = UNSET,
        dead_letter_index: str | None | Unset = UNSET,
        control_index: str | Unset = UNSET,
        epoch_field: str | Unset = UNSET,
        mapping: dict[str, Any] | None | Unset = UNSET,
        retries: int | Unset = UNSET,
        retry_policy: RetryPolicy | None | Unset = UNSET,
        bulk_max_actions: int | Unset = UNSET,
        bulk_max_bytes: int | Unset = UNSET,
        shards: int | None | Unset = UNSET,
        sink_name: str | None | Unset = UNSET,
        dedup: bool | DedupSettings | DedupConfig | Mapping[str, Any] | Unset = UNSET,
        redis_url: str | None | Unset = UNSET,
        write_retries: int | Unset = UNSET,
        allow_unknown_query_id: bool | Unset = UNSET,
        check: bool = True,
    ) -> None:
        """Settings and their defaults: the sink's ``config_model``. ``api_key`` may be
        the encoded key or an (id, key) pair; ``basic_auth`` a (user, password) pair or
        ``"user:password"``. ``check`` preflights the cluster now."""
        values = given(locals(), leave_out=("self", "check", "api_key", "basic_auth"))
        values.update(_credentials(None if api_key is UNSET else api_key, basic_auth))
        self._set_up(self.config_model(**values), check)

    def _configure(self, config: SearchSinkConfig) -> None:
        api_key, password = config.api_key, config.password
        self.conn = SearchConnection(
            self.engine,
            config.hosts,
            Secret(api_key.get_secret_value()) if api_key else None,
            config.username,
            Secret(password.get_secret_value()) if password is not None else None,
            config.ca_certs,
            config.verify_certs,
            config.request_timeout,
        )
        self.retry = config.retry_policy or default_policy(config.retries)
        self._es: Client | None = None
        self._ready = False
        self._checked_schema: StructType | None = None

    @property
    def upsert(self) -> UpsertSpec | None:
        if self.config.mode != "upsert":
            return None
        return UpsertSpec(self.config.tombstone_column, self.config.order_by)

    @property
    def client(self) -> Client:
        if self._es is None:
            self._es = self.conn.client()
        return self._es

    def call(self, what: str, fn: Callable[[Client], T]) -> T:
        return call(self.conn, self.client, self.retry, what, fn)

    # -- preflight ---------------------------------------------------------------------

    def preflight(self, schema: StructType | None = None) -> None:
        """Check the cluster, the credentials and the indices (creating missing ones)."""
        if schema is not None:
            self._check_stream_columns(schema)
        if self._ready and (schema is None or schema == self._checked_schema):
            return
        self.call("the cluster info", lambda c: c.info())
        for name, mappings in (
            (self.control_index, CONTROL_MAPPING),
            (self.dead_letter_index, DEAD_LETTER_MAPPING),
            (self.index, target_mapping(self.mapping, self.epoch_field)),
        ):
            ensure_index(self.conn, self.client, self.retry, name, mappings)
        self._ready, self._checked_schema = True, schema

    def _check_stream_columns(self, schema: StructType) -> None:
        if self.upsert is not None:
            schema = self.upsert.stored_schema(schema)
        self._refuse_reserved_columns(
            schema.names,
            [(self.epoch_field, "epoch_field"), (ID_COLUMN, "id_columns")],
            ", which the sink writes",
        )
        self._check_id_columns(schema.names)

    # -- what `exactlyonce check` reports (.check) --------------------------------------

    def check(self) -> CheckOf[Any]:
        """The guarantee and its preconditions, read live: :mod:`.check`."""
        return CheckOf(self, _check.guarantee, _check.preconditions)

    def peek_head(self) -> Head | None:
        """The head document, one request, no retries (a check reports an outage)."""
        patient, self.retry = self.retry, self.retry.replace(attempts=1)
        try:
            return self.head_store().read_head()
        finally:
            self.retry = patient

    # -- the head ----------------------------------------------------------------------

    def head_store(self) -> SearchHeadStore:
        index, query, name = self.control_index, self.query_name, self.sink_name
        return SearchHeadStore(self.call, index, query, name)

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
        RealtimeOptions`). Checks the cluster and the indices now, in the driver (adding the
        frontier fields to a control index made before them); with ``schema`` (the stream's),
        the columns too."""
        if self.upsert is not None:
            raise ConfigError("mode", "'upsert' is not available in Real-time Mode yet")
        options = realtime_options(
            schema, commit_interval, max_pending_rows, rows_per_source_record, source_columns
        )
        self.preflight(schema)
        properties = RTM_FRONTIER_PROPERTIES
        self.call(
            "the control index's mapping", lambda c: c.put_mapping(self.control_index, properties)
        )
        target = SearchFrontierTarget(
            conn=self.conn,
            index=self.index,
            control_index=self.control_index,
            dead_letter_index=self.dead_letter_index,
            query_name=self.query_name,
            sink_name=self.sink_name,
            epoch_field=self.epoch_field,
            op_type=self.op_type,
            retry=self.retry,
            bulk_max_actions=self.bulk_max_actions,
            bulk_max_bytes=self.bulk_max_bytes,
        )
        return writer_for(self, target, options, self.ids.content)

    def source_frontiers(self) -> dict[SourceKey, int]:
        """The source frontiers the Real-time Mode writer committed for this query (the next
        Kafka offset to write per (topic, partition)), read-only; empty when it never ran."""
        if not self.call("the control index", lambda c: c.index_exists(self.control_index)):
            return {}
        return read_frontiers(
            self.conn, self.client, self.retry, self.control_index, self.query_name,
            self.sink_name,
        )  # fmt: skip

    # -- the write ---------------------------------------------------------------------

    def _project(self, df: DataFrame, epoch: int) -> DataFrame:
        """Binary as base64 (the engine's ``binary``); the rest maps to JSON as is."""
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        kinds = {f.name: f.dataType for f in df.schema.fields}
        with_ids = self._with_ids(df, self.epoch_field, epoch)
        return with_ids.select(
            *[
                F.base64(F.col(n)).alias(n) if isinstance(kinds.get(n), T.BinaryType) else F.col(n)
                for n in with_ids.columns
            ]
        )

    def _task_writer(self, epoch: int, columns: Sequence[str]) -> TaskWriter:
        num_shards = self._head.num_shards if self._head is not None else (self.shards or 1)
        target = SearchTarget(
            conn=self.conn,
            index=self.index,
            control_index=self.control_index,
            dead_letter_index=self.dead_letter_index,
            columns=tuple(columns),
            query_name=self.query_name,
            sink_name=self.sink_name,
            op_type=self.op_type,
            num_shards=num_shards,
            retry=self.retry,
            bulk_max_actions=self.bulk_max_actions,
            bulk_max_bytes=self.bulk_max_bytes,
            dedup=self.dedup_plan,
            upsert=self.upsert is not None,
        )
        return SearchShardWriter(target, epoch)

    @property
    def unique_sink(self) -> bool:
        return True  # one document per _id: a lost catalog restarts empty, safely


def _credentials(
    api_key: str | tuple[str, str] | None, basic_auth: str | tuple[str, str] | None
) -> dict[str, Any]:
    """The constructor's convenience forms as config values: an (id, key) pair as the
    encoded key, ``"user:password"`` as username and password (the config refuses both)."""
    values: dict[str, Any] = {}
    if isinstance(api_key, tuple):
        api_key = base64.b64encode(f"{api_key[0]}:{api_key[1]}".encode()).decode()
    if api_key is not None:
        values["api_key"] = api_key
    if isinstance(basic_auth, str):
        user, sep, password = basic_auth.partition(":")
        if not sep:
            raise ConfigError("basic_auth", "a (user, password) pair or 'user:password'")
        basic_auth = (user, password)
    if basic_auth is not None:
        values["username"], values["password"] = basic_auth
    return values
