"""The PostgreSQL sink, driver side; its guarantee and mechanism: :class:`PostgresSink`."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from exactlyonce.connectors.base import ExactlyOnceSink, TaskWriter
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
from exactlyonce.connectors.postgres import check as _check
from exactlyonce.connectors.postgres import rewind
from exactlyonce.connectors.postgres.config import Mode, PostgresSinkConfig
from exactlyonce.connectors.postgres.drift import required_columns, silent_loss
from exactlyonce.connectors.postgres.head import PostgresHeadStore
from exactlyonce.connectors.postgres.realtime import PgFrontierTarget, read_frontiers
from exactlyonce.connectors.postgres.schema import (
    CONTROL_DDL_LOCK,
    TableName,
    control_tables_ddl,
    create_table_ddl,
    frontiers_ddl,
    has_unique_index_on,
    pg_type,
    regclass,
    schema_exists,
    table_columns,
)
from exactlyonce.connectors.postgres.writer import PgTarget, PostgresShardWriter
from exactlyonce.dedup.config import DedupConfig
from exactlyonce.dedup.keeper import RebuildSource
from exactlyonce.errors import ConfigError, SinkUnavailableError
from exactlyonce.secrets import Secret, dsn_password, redact_dsn, scrub

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger("exactlyonce.postgres")


class PostgresSink(ExactlyOnceSink):
    """Writes a stream into a PostgreSQL table exactly once (``mode="insert"``/``"append"``),
    or keeps one row per key at its latest epoch (``mode="upsert"``).

    Guarantee: every record of the stream is in the target table exactly once, through driver
    crashes, executor loss, re-run micro-batches and duplicate input, provided the source replays
    (Spark's file, Kafka and rate sources do) and nothing else deletes from the table.

    Mechanism:

    - each record gets a deterministic ID (``record_id``, a uuid) and its epoch (``epoch``);
    - ``mode="insert"`` (default) keeps a unique index on ``record_id``: a re-written ID is a
      no-op (``ON CONFLICT DO NOTHING``), so the first version of a record wins;
    - ``mode="append"`` has no unique index (a second write would be a second row): the
      head, the shard-commit rows and the dedup catalog (required in this mode) keep each
      record single;
    - executor tasks COPY their shard straight into the table and commit it together with a
      shard-commit row, in one transaction (see :mod:`exactlyonce.connectors.postgres.writer`);
    - ``mode="insert"`` with IDs that are never null (content IDs, or key columns Spark knows
      are not nullable) skips the shuffle by ID: each task COPYs its Spark partition as it is,
      in one transaction, with no shard-commit row; a re-run of a partly committed epoch writes
      every partition again, and the unique index turns each record already written into a
      no-op (the batch falls back to ``ON CONFLICT DO NOTHING``). The catalog still keeps each
      ID under its shard, ``pmod(hash(id), shards)``;
    - the driver advances the head row in ``exactlyonce_heads`` after every task committed, and
      skips whole epochs at or below it after a restart.

    ``mode="upsert"``, for update and changelog streams (an aggregation in ``update`` output
    mode): ``id_columns`` name a row that changes over time. Guarantee: per key, the table holds
    the value of the latest epoch that wrote it (no row if that epoch deleted it), through the
    same crashes and re-runs; a re-run of an older epoch never rolls a row back nor brings a
    deleted key back (DESIGN invariant 12). Mechanism
    (:mod:`exactlyonce.connectors.postgres.upsert`): each task COPYs its rows into a
    temporary staging table and applies each batch with one ``INSERT ... SELECT ... ON
    CONFLICT (record_id) DO UPDATE ... WHERE t.epoch <= EXCLUDED.epoch``, in the shard's
    transaction with its shard-commit row; a ``tombstone_column`` deletes under the same guard
    and keeps (table, record ID, epoch) in ``exactlyonce_tombstones``, which every upsert
    consults. One row per key and epoch (``connectors/base/upsert.py``: the row whose JSON form
    sorts last wins). No dedup catalog: the key and the epoch guard are the idempotence.

    Spark Real-time Mode (``df.writeStream.foreach(sink.realtime(schema=df.schema))
    .trigger(realTime="5 seconds")``, ``mode="insert"`` or ``"append"``, a Kafka source whose
    ``topic``, ``partition`` and ``offset`` columns reach the sink, no shuffle in between).
    Guarantee: every source record's rows are in the table exactly once, visible within about
    ``commit_interval`` (default 0.02 s) of their arrival rather than at the epoch's end, through
    task retries, driver crashes, restarts from the checkpoint and a deleted checkpoint
    (restarted at earlier offsets). Mechanism (:mod:`exactlyonce.connectors.postgres.realtime`):
    each task commits small chunks, cut at source-offset boundaries, each in ONE transaction
    with its source partitions' frontiers (the next offset to write, in
    ``exactlyonce_frontiers``), checked ``FOR UPDATE`` to be what the writer read; a re-run
    skips rows below the frontier. The frontier is per source offset, not per epoch, so a
    checkpoint reset cannot make it skip new data (invariant 9 does not arise). No dedup
    catalog on this path: duplicates already in the source are written as they are
    (``mode="insert"`` with ``id_columns`` drops a record ID the table holds). Guide:
    ``docs/guides/real-time-mode.md``.

    Example::

        sink = PostgresSink(dsn="postgresql://app@db/app", table="events",
                            id_columns=["event_id"], query_name="clicks-to-pg")
        df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).start()
    """

    kind = "postgres"
    config: PostgresSinkConfig
    mode = Setting[Mode]()
    create_table = Setting[bool]()
    id_column = Setting[str]()
    epoch_column = Setting[str]()
    connect_timeout = Setting[int]()
    sort_within_shard = True

    def __init__(
        self,
        dsn: str,
        table: str,
        id_columns: Sequence[str] | str | None,
        query_name: str,
        *,
        id_from: IdFrom | Unset = UNSET,
        mode: Mode | Unset = UNSET,
        create_table: bool | Unset = UNSET,
        id_column: str | Unset = UNSET,
        epoch_column: str | Unset = UNSET,
        connect_timeout: int | Unset = UNSET,
        tombstone_column: str | None | Unset = UNSET,
        order_by: Sequence[str] | str | Unset = UNSET,
        shards: int | None | Unset = UNSET,
        sink_name: str | None | Unset = UNSET,
        dedup: bool | DedupSettings | DedupConfig | Mapping[str, Any] | Unset = UNSET,
        redis_url: str | None | Unset = UNSET,
        write_retries: int | Unset = UNSET,
        allow_unknown_query_id: bool | Unset = UNSET,
        check: bool = True,
    ) -> None:
        """Settings and their defaults: :class:`PostgresSinkConfig`. ``check`` preflights the
        database now."""
        self._set_up(PostgresSinkConfig(**given(locals())), check)

    def _configure(self, config: PostgresSinkConfig) -> None:
        dsn = config.dsn.get_secret_value()
        self.dsn = Secret(dsn)
        self.where = redact_dsn(dsn)
        self.table = TableName.parse(config.table)
        self._checked_schema: StructType | None = None
        self._table_ready = False
        self._table_types: dict[str, str] = {}  # the table's columns, as preflight read them

    @property
    def upsert(self) -> UpsertSpec | None:
        if self.mode != "upsert":
            return None
        return UpsertSpec(self.config.tombstone_column, self.config.order_by)

    def _stored(self, schema: StructType) -> StructType:
        """The stream's columns the table holds (upsert: all but the tombstone flag)."""
        upsert = self.upsert
        return schema if upsert is None else upsert.stored_schema(schema)

    # -- connections -------------------------------------------------------------------

    def _create_control_tables(self, conn: psycopg.Connection[Any], tombstones: bool) -> None:
        """Create (or upgrade) the control tables in one transaction under an advisory lock:
        two queries starting at once on a fresh schema would otherwise race in
        ``CREATE TABLE IF NOT EXISTS`` (a unique violation in ``pg_type``)."""
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [CONTROL_DDL_LOCK])
            for statement in control_tables_ddl(self.table, tombstones=tombstones):
                conn.execute(statement)

    def connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(
                self.dsn.reveal(), autocommit=True, connect_timeout=self.connect_timeout
            )
        except psycopg.ProgrammingError:
            raise ConfigError(
                "dsn", "not a valid PostgreSQL connection string (libpq could not parse it)"
            ) from None
        except psycopg.OperationalError as exc:
            reason = scrub(str(exc).strip(), dsn_password(self.dsn.reveal()))
            raise SinkUnavailableError(
                f"cannot connect to PostgreSQL at {self.where}: {reason}"
            ) from None

    # -- preflight ---------------------------------------------------------------------

    def preflight(self, schema: StructType | None = None) -> None:
        """Check the server, the control tables and the target table before any write.

        With ``schema`` (the stream's), also check that every stream column exists in the
        table, and create the table when it is missing and ``create_table`` is on.
        """
        if self._table_ready and (schema is None or schema == self._checked_schema):
            return
        stored = None if schema is None else self._stored(schema)
        with self.connect() as conn:
            if not schema_exists(conn, self.table.schema):
                raise ConfigError("table", f"schema {self.table.schema!r} does not exist")
            tombstones = self.upsert is not None and self.upsert.tombstone_column is not None
            self._create_control_tables(conn, tombstones)
            oid = regclass(conn, self.table)
            if oid is None:
                if stored is None:
                    if not self.create_table:
                        raise ConfigError(
                            "table", f"{self.table} does not exist and create_table is off"
                        )
                    return  # created from the stream's schema at the first batch
                self._create(conn, stored)
                oid = regclass(conn, self.table)
                assert oid is not None
            self._check_table(conn, oid, stored)
        self._table_ready = True
        self._checked_schema = schema

    def _create(self, conn: psycopg.Connection[Any], schema: StructType) -> None:
        if not self.create_table:
            raise ConfigError("table", f"{self.table} does not exist and create_table is off")
        self._check_stream_columns(schema)
        for statement in create_table_ddl(
            self.table, schema, self.id_column, self.epoch_column, unique=self.mode != "append"
        ):
            conn.execute(statement)
        log.info("created table %s", self.table)

    def _check_stream_columns(self, schema: StructType) -> None:
        self._refuse_reserved_columns(
            schema.names,
            [(self.id_column, "id_column"), (self.epoch_column, "epoch_column")],
            "; choose another name",
        )
        self._check_id_columns(schema.names)

    def _check_table(
        self, conn: psycopg.Connection[Any], oid: int, schema: StructType | None
    ) -> None:
        columns = table_columns(conn, oid)
        self._table_types = columns
        if self.mode != "append" and not has_unique_index_on(conn, oid, self.id_column):
            raise ConfigError(
                "table",
                f"{self.table} has no unique index on {self.id_column!r}, so a re-written record "
                f"would be stored twice (mode {self.mode!r} needs one). Add one: CREATE UNIQUE "
                f"INDEX ON {self.table} ({self.id_column})",
            )
        if schema is None:
            return
        self._check_stream_columns(schema)
        wanted = [*schema.names, self.id_column, self.epoch_column]
        missing = [c for c in wanted if c not in columns]
        if missing:
            raise ConfigError(
                "table",
                f"{self.table} lacks column(s) {missing} that the stream writes: add them "
                f"(ALTER TABLE {self.table} ADD COLUMN ...) or drop them from the query",
            )
        self._check_drift(conn, oid, schema, columns, wanted)

    def _check_drift(
        self,
        conn: psycopg.Connection[Any],
        oid: int,
        schema: StructType,
        columns: Mapping[str, str],
        written: Sequence[str],
    ) -> None:
        """Refuse a stream column the table would store with a silent loss, and a NOT NULL
        column the stream no longer writes (:mod:`.drift`)."""
        for field in schema.fields:
            loss = silent_loss(field.dataType, columns[field.name])
            if loss is not None:
                raise ConfigError(
                    "table",
                    f"column {field.name!r} of {self.table} is {columns[field.name]} but the "
                    f"stream's is {field.dataType.simpleString()}: each value would be {loss}. "
                    f"Change the column (ALTER TABLE {self.table} ALTER COLUMN {field.name} "
                    f"TYPE {pg_type(field.dataType)}) or cast it in the query",
                )
        unwritten = [c for c in required_columns(conn, oid) if c not in written]
        if unwritten:
            raise ConfigError(
                "table",
                f"column(s) {unwritten} of {self.table} are NOT NULL without a default but the "
                f"stream does not write them: add them to the query, or give them a default "
                f"or drop NOT NULL",
            )

    # -- what `exactlyonce check` reports (.check) --------------------------------------

    def check(self) -> CheckOf[Any]:
        """The guarantee and its preconditions, read live: :mod:`.check`."""
        return CheckOf(self, _check.guarantee, _check.preconditions)

    # -- the head ----------------------------------------------------------------------

    def head_store(self) -> PostgresHeadStore:
        return PostgresHeadStore(self.connect, self.table, self.query_name, self.sink_name)

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
        RealtimeOptions`). With ``schema`` (the stream's), the source columns are checked and
        the table is checked or created now, in the driver; without it the table must exist.
        Creates the frontier table."""
        if self.mode == "upsert":
            raise ConfigError("mode", "'upsert' is not available in Real-time Mode yet")
        options = realtime_options(
            schema, commit_interval, max_pending_rows, rows_per_source_record, source_columns
        )
        self.preflight(schema)
        with self.connect() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [CONTROL_DDL_LOCK])
            conn.execute(frontiers_ddl(self.table))
        target = PgFrontierTarget(
            dsn=self.dsn,
            table=self.table,
            query_name=self.query_name,
            sink_name=self.sink_name,
            id_column=self.id_column,
            epoch_column=self.epoch_column,
            unique=self.mode != "append",
            connect_timeout=self.connect_timeout,
        )
        return writer_for(self, target, options, self.ids.content)

    def source_frontiers(self) -> dict[SourceKey, int]:
        """The source frontiers the Real-time Mode writer committed for this query (the next
        Kafka offset to write per (topic, partition)), read-only; empty when it never ran."""
        with self.connect() as conn:
            return read_frontiers(conn, self.table, self.query_name, self.sink_name)

    # -- the write ---------------------------------------------------------------------

    def _project(self, df: DataFrame, epoch: int) -> DataFrame:
        """Cast columns to what COPY's CSV input reads: bytea as hex, nested types as JSON."""
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        nested = (T.ArrayType, T.MapType, T.StructType)
        kinds = {f.name: f.dataType for f in df.schema.fields}
        with_ids = self._with_ids(df, self.epoch_column, epoch)
        columns = []
        for name in with_ids.columns:
            c, kind = F.col(name), kinds.get(name)
            if isinstance(kind, T.BinaryType):
                c = F.concat(F.lit("\\x"), F.lower(F.hex(c)))
            elif isinstance(kind, nested):
                c = F.to_json(c)
            columns.append(c.alias(name))
        return with_ids.select(*columns)

    def _task_writer(self, epoch: int, columns: Sequence[str]) -> TaskWriter:
        target = PgTarget(
            dsn=self.dsn,
            table=self.table,
            columns=tuple(columns),
            id_column=self.id_column,
            query_name=self.query_name,
            sink_name=self.sink_name,
            connect_timeout=self.connect_timeout,
            dedup=self.dedup_plan,
            upsert=self.upsert,
            epoch_column=self.epoch_column,
            column_types=tuple(
                (c, self._table_types[c]) for c in columns if c in self._table_types
            ),
        )
        return PostgresShardWriter(target, epoch)

    @property
    def unique_sink(self) -> bool:
        return self.mode != "append"

    @property
    def writes_unaligned(self) -> bool:
        """``mode="insert"``: the unique index on the record ID makes a second write a no-op
        (see :attr:`ExactlyOnceSink.writes_unaligned`)."""
        return self.mode == "insert"

    def _rebuild_source(self) -> RebuildSource | None:
        """In append mode, the table's own IDs from an epoch on rebuild a lost catalog."""
        if self.mode != "append":
            return None

        def read(from_epoch: int) -> Iterator[tuple[Any, Any]]:
            import numpy as np

            query = sql.SQL("SELECT replace({}::text, '-', ''), {} FROM {} WHERE {} >= %s").format(
                sql.Identifier(self.id_column),
                sql.Identifier(self.epoch_column),
                self.table.ident(),
                sql.Identifier(self.epoch_column),
            )
            with self.connect() as conn, conn.transaction(), conn.cursor(name="eo_rebuild") as cur:
                cur.execute(query, [from_epoch])
                while rows := cur.fetchmany(50_000):
                    yield (
                        np.array([r[0] for r in rows], dtype="S32"),
                        np.array([r[1] for r in rows], dtype=np.int64),
                    )

        return read
