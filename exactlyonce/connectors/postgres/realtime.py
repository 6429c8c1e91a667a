"""The PostgreSQL sink in Spark Real-time Mode: each chunk and its source frontiers in ONE
transaction (the writer: :mod:`exactlyonce.connectors.base.realtime`).

``exactlyonce_frontiers`` (next to the target table) holds, per (query_name, sink, topic,
partition), ``next_offset``: the next source offset to write; with the epoch, Spark's query
id and partition, and the writer that last moved it. One commit:

1. ``SELECT ... FOR UPDATE`` the frontier rows of the chunk's partitions; each must still be
   what this writer read or committed, else another writer moved it: roll back and raise
   :class:`~exactlyonce.errors.FrontierMovedError` (Spark retries the task, which reads again);
   a row claimed in the same epoch of the same Spark query by another Spark partition means
   one source partition reaches two tasks: refused (ConfigError);
2. COPY the chunk's rows into the target table (``mode="insert"``: a record ID already in the
   table, from an at-least-once upstream, is skipped through ``ON CONFLICT DO NOTHING``);
3. store the new frontiers (``INSERT`` a first one: a concurrent first insert of the same
   partition fails on the primary key, and is the same FrontierMovedError; ``UPDATE`` the
   locked row otherwise);
4. COMMIT. A lost reply to COMMIT is raised as it is: the retried task reads the frontier,
   so the outcome is never guessed (DESIGN invariant 6).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql

from exactlyonce.connectors.base.frontier import Chunk, SourceKey
from exactlyonce.connectors.base.realtime import FrontierStore, FrontierTarget, TaskInfo
from exactlyonce.connectors.postgres.schema import FRONTIERS, TableName, regclass, table_columns
from exactlyonce.errors import ConfigError, FrontierMovedError, SinkUnavailableError
from exactlyonce.secrets import Secret, dsn_password, redact_dsn, scrub

log = logging.getLogger("exactlyonce.postgres")

_STAGING = sql.Identifier("_eo_rtm_staging")
_PLAIN = (str, int, float, bool, bytes, Decimal, datetime, date)


@dataclass(frozen=True)
class PgFrontierTarget(FrontierTarget):
    """Everything a task needs; picklable, holds no connection."""

    dsn: Secret
    table: TableName
    query_name: str
    sink_name: str
    id_column: str
    epoch_column: str
    unique: bool  # mode="insert": a unique index on the record ID
    connect_timeout: int = 10

    def open_store(self, task: TaskInfo) -> PgFrontierStore:
        return PgFrontierStore(self, task)


def _cell(value: Any) -> Any:
    """A value as COPY takes it: nested values (structs, arrays, maps) as JSON text."""
    if value is None or isinstance(value, _PLAIN):
        return value
    return json.dumps(_plain(value), default=str, ensure_ascii=False)


def _plain(value: Any) -> Any:
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class PgFrontierStore(FrontierStore):
    """One task's connection and its transactions."""

    def __init__(self, target: PgFrontierTarget, task: TaskInfo) -> None:
        self.t = target
        self.task = task
        self.frontiers = target.table.sibling(FRONTIERS)
        self.columns: tuple[str, ...] = ()
        try:
            self.conn: psycopg.Connection[Any] | None = psycopg.connect(
                target.dsn.reveal(),
                autocommit=True,
                connect_timeout=target.connect_timeout,
                application_name=f"exactlyonce-rtm:{task.writer}"[:63],
            )
        except psycopg.OperationalError as exc:
            reason = scrub(str(exc).strip(), dsn_password(target.dsn.reveal()))
            where = redact_dsn(target.dsn.reveal())
            raise SinkUnavailableError(
                f"cannot connect to PostgreSQL at {where}: {reason}"
            ) from None

    @property
    def _conn(self) -> psycopg.Connection[Any]:
        assert self.conn is not None, "store closed"
        return self.conn

    def prepare(self, columns: Sequence[str]) -> None:
        for reserved, option in (
            (self.t.id_column, "id_column"),
            (self.t.epoch_column, "epoch_column"),
        ):
            if reserved in columns:
                raise ConfigError(
                    option, f"the stream already has a column named {reserved!r}; choose another"
                )
        self.columns = (*columns, self.t.id_column, self.t.epoch_column)
        conn = self._conn
        oid = regclass(conn, self.t.table)
        if oid is None or regclass(conn, TableName(self.t.table.schema, FRONTIERS)) is None:
            raise ConfigError(
                "table",
                f"{self.t.table} or its {FRONTIERS} table does not exist: build the writer "
                "with sink.realtime(schema=df.schema) (creates both), or create the table",
            )
        missing = [c for c in self.columns if c not in table_columns(conn, oid)]
        if missing:
            raise ConfigError(
                "table", f"{self.t.table} lacks column(s) {missing} the stream writes"
            )

    def read(self, key: SourceKey) -> int | None:
        row = self._conn.execute(
            sql.SQL(
                "SELECT next_offset FROM {} WHERE query_name = %s AND sink = %s AND topic = %s "
                "AND partition = %s"
            ).format(self.frontiers),
            [self.t.query_name, self.t.sink_name, key[0], key[1]],
        ).fetchone()
        return None if row is None else int(row[0])

    def commit(self, chunk: Chunk) -> None:
        conn = self._conn
        try:
            with conn.transaction():
                self._check_frontiers(conn, chunk)
                self._write_rows(conn, chunk.rows)
                self._store_frontiers(conn, chunk)
        except pgerrors.UniqueViolation as exc:
            if exc.diag.table_name != FRONTIERS:
                raise
            raise FrontierMovedError(
                f"{self.t.query_name}: another writer stored the first frontier of "
                f"{sorted(k for k, v in chunk.expected.items() if v is None)} first; nothing "
                "written (the retried task reads it)"
            ) from None

    def _check_frontiers(self, conn: psycopg.Connection[Any], chunk: Chunk) -> None:
        topics = sorted({k[0] for k in chunk.expected})
        partitions = sorted({k[1] for k in chunk.expected})
        rows = conn.execute(
            sql.SQL(
                "SELECT topic, partition, next_offset, spark_query_id, epoch, spark_partition, "
                "writer FROM {} WHERE query_name = %s AND sink = %s AND topic = ANY(%s) "
                "AND partition = ANY(%s) FOR UPDATE"
            ).format(self.frontiers),
            [self.t.query_name, self.t.sink_name, topics, partitions],
        ).fetchall()
        stored = {(str(r[0]), int(r[1])): r for r in rows}
        for key, expected in chunk.expected.items():
            row = stored.get(key)
            found = None if row is None else int(row[2])
            if found != expected:
                raise FrontierMovedError(
                    f"{self.t.query_name}: the frontier of {key[0]}[{key[1]}] is {found} in "
                    f"{self.t.table.schema}.{FRONTIERS}, not {expected} as this writer "
                    f"({self.task.writer}) read it: writer {row[6] if row else None} moved it. "
                    "Nothing written; the retried task reads it again"
                )
            if row is not None and self._claimed_by_another_task(row):
                raise ConfigError(
                    "source_columns",
                    f"source partition {key[0]}[{key[1]}] is written by two Spark tasks of "
                    f"epoch {self.task.epoch} (partitions {row[5]} and {self.task.partition_id})"
                    ": the query splits or shuffles the source's partitions before the sink",
                )

    def _claimed_by_another_task(self, row: tuple[Any, ...]) -> bool:
        same_run = self.task.query_id is not None and row[3] == self.task.query_id
        return same_run and row[4] == self.task.epoch and row[5] != self.task.partition_id

    def _write_rows(self, conn: psycopg.Connection[Any], rows: list[tuple[Any, ...]]) -> None:
        if not self.t.unique:
            self._copy(conn, self.t.table.ident(), rows)
            return
        try:
            with conn.transaction():  # a savepoint: a known record ID takes the slow path
                self._copy(conn, self.t.table.ident(), rows)
        except pgerrors.UniqueViolation:
            self._insert_new(conn, rows)

    def _copy(
        self, conn: psycopg.Connection[Any], into: sql.Composable, rows: list[tuple[Any, ...]]
    ) -> None:
        names = sql.SQL(", ").join(sql.Identifier(c) for c in self.columns)
        statement = sql.SQL("COPY {} ({}) FROM STDIN").format(into, names)
        with conn.cursor() as cur, cur.copy(statement) as copy:
            for row in rows:
                copy.write_row([_cell(v) for v in row])

    def _insert_new(self, conn: psycopg.Connection[Any], rows: list[tuple[Any, ...]]) -> None:
        """``mode="insert"``: rows whose record ID the table holds are skipped."""
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE IF NOT EXISTS {} (LIKE {} INCLUDING DEFAULTS) "
                "ON COMMIT DELETE ROWS"
            ).format(_STAGING, self.t.table.ident())
        )
        conn.execute(sql.SQL("TRUNCATE {}").format(_STAGING))
        self._copy(conn, _STAGING, rows)
        names = sql.SQL(", ").join(sql.Identifier(c) for c in self.columns)
        conn.execute(
            sql.SQL(
                "INSERT INTO {} ({cols}) SELECT DISTINCT ON ({id}) {cols} FROM {} "
                "ON CONFLICT ({id}) DO NOTHING"
            ).format(
                self.t.table.ident(), _STAGING, cols=names, id=sql.Identifier(self.t.id_column)
            )
        )

    def _store_frontiers(self, conn: psycopg.Connection[Any], chunk: Chunk) -> None:
        task = self.task
        for key, next_offset in chunk.next_offsets.items():
            values = [next_offset, task.epoch, task.query_id, task.partition_id, task.writer]
            ident = [self.t.query_name, self.t.sink_name, key[0], key[1]]
            if chunk.expected[key] is None:
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {} (next_offset, epoch, spark_query_id, spark_partition, "
                        "writer, query_name, sink, topic, partition) "
                        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
                    ).format(self.frontiers),
                    values + ident,
                )
            else:
                conn.execute(
                    sql.SQL(
                        "UPDATE {} SET next_offset = %s, epoch = %s, spark_query_id = %s, "
                        "spark_partition = %s, writer = %s, updated_at = now() "
                        "WHERE query_name = %s AND sink = %s AND topic = %s AND partition = %s"
                    ).format(self.frontiers),
                    values + ident,
                )

    def renew(self, task: TaskInfo) -> bool:
        """Keep the connection for the next epoch's task when it is idle and answers."""
        conn = self.conn
        if conn is None or conn.closed or conn.broken:
            return False
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            return False
        try:
            conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        self.task = task
        return True

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def read_frontiers(
    conn: psycopg.Connection[Any], table: TableName, query_name: str, sink_name: str
) -> dict[SourceKey, int]:
    """Every source frontier the sink holds for ``(query_name, sink_name)``, read-only: none
    when the frontier table next to ``table`` does not exist."""
    if regclass(conn, TableName(table.schema, FRONTIERS)) is None:
        return {}
    rows = conn.execute(
        sql.SQL(
            "SELECT topic, partition, next_offset FROM {} WHERE query_name = %s AND sink = %s"
        ).format(table.sibling(FRONTIERS)),
        [query_name, sink_name],
    ).fetchall()
    return {(str(topic), int(partition)): int(offset) for topic, partition, offset in rows}
