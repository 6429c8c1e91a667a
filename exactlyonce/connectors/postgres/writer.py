"""The executor side of the PostgreSQL sink: one transaction per task.

Runs inside Spark's Python workers through ``mapInArrow``. Per task, in ONE transaction:

1. read which shards of this epoch an earlier attempt already committed, and drop their rows;
2. send rows with a null key to the dead-letter table;
3. COPY each Arrow batch straight into the target inside a savepoint (the fast path), in
   PostgreSQL's binary format where every column allows it, else as CSV (:mod:`.binary`);
4. if the COPY hits the unique index (the ID exists from another epoch, or twice in this
   task), roll back to the savepoint and write that batch through a staging table with
   ``INSERT ... ON CONFLICT (record_id) DO NOTHING`` (the slow path);
5. if a batch holds a record the table refuses (a data or constraint error), bisect the batch
   to find it, write the rest, and dead-letter that record with the error;
6. insert a "(query, epoch, shard) committed" row for every shard seen, and commit.

In ``mode="upsert"`` steps 3-5 are replaced by :mod:`.upsert`: each batch is staged by COPY
and applied under the epoch guard with one ``INSERT ... ON CONFLICT DO UPDATE``; refused
records are bisected out the same way.

A crash anywhere before the commit leaves nothing of the task; after it, a re-run finds the
shard committed and skips it. Ambiguous commits (connection lost during COMMIT) surface as an
error; the re-run then reads the shard-commit row, so the outcome is verified, never guessed.
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv
from psycopg import errors as pgerrors
from psycopg import sql

from exactlyonce.connectors.base import DeadLetter, ShardTask, ShardWriter
from exactlyonce.connectors.base.columns import DELETE_COLUMN
from exactlyonce.connectors.base.upsert import UpsertSpec
from exactlyonce.connectors.postgres.binary import binary_copy, encoder_available
from exactlyonce.connectors.postgres.schema import DEAD_LETTERS, SHARD_COMMITS, TableName
from exactlyonce.connectors.postgres.upsert import UPSERT_STAGING, UpsertStatements
from exactlyonce.dedup.shard import DedupPlan
from exactlyonce.faults import crash_point
from exactlyonce.secrets import Secret

log = logging.getLogger("exactlyonce.postgres")

# COPY hands the server this many bytes at a time. Crash tests make it small so that
# ``mid_copy`` fires between two chunks of one COPY (data sent before it and after it).
COPY_CHUNK_BYTES = int(os.environ.get("EXACTLYONCE_CRASH_COPY_CHUNK_BYTES", 1 << 20))
_STAGING = sql.Identifier("_eo_staging")
_CSV_OPTIONS = pacsv.WriteOptions(include_header=False)


@dataclass(frozen=True)
class PgTarget:
    """Everything a task needs to write; picklable, holds no connection."""

    dsn: Secret
    table: TableName
    columns: tuple[str, ...]
    id_column: str
    query_name: str
    sink_name: str
    connect_timeout: int = 10
    dedup: DedupPlan | None = None
    upsert: UpsertSpec | None = None
    epoch_column: str = "epoch"
    # The table's column types (``format_type``) as preflight read them: the fast path sends
    # a batch in binary where every column's form is exactly its column's (:mod:`.binary`);
    # empty (or without the encoder): CSV.
    column_types: tuple[tuple[str, str], ...] = ()

    def upsert_statements(self) -> UpsertStatements:
        assert self.upsert is not None
        tombstones = self.upsert.tombstone_column is not None
        return UpsertStatements(
            self.table, self.columns, self.id_column, self.epoch_column, tombstones
        )


def is_bad_record_error(exc: BaseException, upsert: bool = False) -> bool:
    """Errors caused by a record's content (SQLSTATE classes 22 and 23), not by a duplicate
    ID (an upsert meets no duplicate ID: a unique violation is another index refusing it)."""
    if not isinstance(exc, psycopg.Error):
        return False
    if isinstance(exc, pgerrors.UniqueViolation) and not upsert:
        return False
    state = exc.sqlstate or ""
    return state.startswith("22") or state.startswith("23")


def to_csv(batch: pa.RecordBatch | pa.Table) -> bytes:
    out = io.BytesIO()
    pacsv.write_csv(batch, out, _CSV_OPTIONS)
    return out.getvalue()


class PgShardTask(ShardTask):
    """One task's transaction. Connects lazily: an empty partition never touches the sink."""

    def __init__(self, target: PgTarget, epoch: int) -> None:
        upsert = target.upsert is not None
        super().__init__(epoch, target.id_column, target.columns, target.dedup, upsert=upsert)
        self.t = target
        self.conn: psycopg.Connection[Any] | None = None
        self.staging_ready = False
        self.upserts = target.upsert_statements() if upsert else None
        self.column_list = sql.SQL(", ").join(sql.Identifier(c) for c in target.columns)
        self.column_types = dict(target.column_types) if encoder_available() else {}

    def _open(self) -> set[int]:
        self.conn = psycopg.connect(
            self.t.dsn.reveal(),
            autocommit=False,
            connect_timeout=self.t.connect_timeout,
            application_name=f"exactlyonce:{self.result.writer}"[:63],
        )
        rows = self.conn.execute(
            sql.SQL(
                "SELECT shard FROM {} WHERE query_name = %s AND sink = %s AND epoch = %s"
            ).format(self.t.table.sibling(SHARD_COMMITS)),
            [self.t.query_name, self.t.sink_name, self.epoch],
        ).fetchall()
        return {int(r[0]) for r in rows}

    def _commit(self, new_shards: Sequence[int]) -> None:
        assert self.conn is not None
        if new_shards:
            with self.conn.cursor() as cur:
                cur.executemany(
                    sql.SQL(
                        "INSERT INTO {} (query_name, sink, epoch, shard, writer) "
                        "VALUES (%s, %s, %s, %s, %s)"
                    ).format(self.t.table.sibling(SHARD_COMMITS)),
                    [
                        (self.t.query_name, self.t.sink_name, self.epoch, s, self.result.writer)
                        for s in new_shards
                    ],
                )
        try:
            self.conn.commit()
        except psycopg.OperationalError:
            # The connection broke during COMMIT: applied or not, nobody said (invariant 6).
            # This attempt's shard markers, read on a new connection, tell; without them (no
            # shard here, or they are absent) the task fails and its re-run reads the markers.
            if not new_shards or not self._committed_by_me(new_shards):
                raise
            log.warning(
                "%s epoch %d: the reply to COMMIT was lost; shard markers %s show it applied",
                self.t.query_name,
                self.epoch,
                list(new_shards),
            )

    def _committed_by_me(self, shards: Sequence[int]) -> bool:
        """True if every one of ``shards`` has a shard-commit row written by this attempt."""
        try:
            with psycopg.connect(
                self.t.dsn.reveal(), autocommit=True, connect_timeout=self.t.connect_timeout
            ) as conn:
                rows = conn.execute(
                    sql.SQL(
                        "SELECT shard FROM {} WHERE query_name = %s AND sink = %s AND epoch = %s "
                        "AND writer = %s"
                    ).format(self.t.table.sibling(SHARD_COMMITS)),
                    [self.t.query_name, self.t.sink_name, self.epoch, self.result.writer],
                ).fetchall()
        except psycopg.OperationalError:
            return False  # still unknown: fail, the re-run reads the markers
        return {int(r[0]) for r in rows} >= set(shards)

    def _close(self) -> None:
        if self.conn is not None:
            self.conn.close()  # rolls back an uncommitted transaction
            self.conn = None

    @property
    def _conn(self) -> psycopg.Connection[Any]:
        assert self.conn is not None
        return self.conn

    def _write_rows(self, rows: pa.RecordBatch) -> None:
        conn = self._conn
        if self.upserts is not None:
            self._upsert_salvaging(conn, rows, first=True)
            return
        try:
            with conn.transaction():
                self._copy(conn, self.t.table.ident(), rows, crash_ok=True, binary=True)
            self.result.written += rows.num_rows
        except pgerrors.UniqueViolation:
            self.result.slow_batches += 1
            self._insert_salvaging(conn, rows)
        except psycopg.Error as exc:
            if not is_bad_record_error(exc):
                raise
            self._insert_salvaging(conn, rows)

    def _copy(
        self,
        conn: psycopg.Connection[Any],
        into: sql.Composable,
        rows: pa.RecordBatch,
        crash_ok: bool = False,
        binary: bool = False,
    ) -> None:
        """COPY ``rows`` into ``into`` (``mid_copy`` may fire when ``crash_ok``); with
        ``binary`` (the target, whose column types preflight read) in PostgreSQL's binary
        format when :func:`.binary.binary_copy` can encode the batch, else as CSV."""
        encoded = None
        if binary and self.column_types:
            encoded = binary_copy(rows, self.column_types, self.t.id_column)
        data = memoryview(to_csv(rows) if encoded is None else encoded)
        names = sql.SQL(", ").join(sql.Identifier(c) for c in rows.schema.names)
        form = sql.SQL("csv" if encoded is None else "binary")
        statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT {})").format(into, names, form)
        with conn.cursor() as cur, cur.copy(statement) as copy:
            for start in range(0, len(data), COPY_CHUNK_BYTES):
                copy.write(data[start : start + COPY_CHUNK_BYTES])
                if crash_ok and start == 0 and len(data) > COPY_CHUNK_BYTES:
                    crash_point("mid_copy", self.epoch)  # a chunk sent, more to come

    # -- the slow path and bad records -------------------------------------------------

    def _insert_salvaging(self, conn: psycopg.Connection[Any], rows: pa.RecordBatch) -> None:
        """Insert through staging with ON CONFLICT DO NOTHING; bisect out refused records."""
        self._ensure_staging(conn)
        try:
            with conn.transaction():
                inserted = self._insert_via_staging(conn, rows)
            self.result.written += inserted
            self.result.duplicates += rows.num_rows - inserted
        except psycopg.Error as exc:
            if not is_bad_record_error(exc):
                raise
            if rows.num_rows == 1:
                self._dead_letter(conn, rows, _describe(exc))
                return
            half = rows.num_rows // 2
            self._insert_salvaging(conn, rows.slice(0, half))
            self._insert_salvaging(conn, rows.slice(half))

    def _upsert_salvaging(
        self, conn: psycopg.Connection[Any], rows: pa.RecordBatch, first: bool = False
    ) -> None:
        """Stage the batch and apply it under the epoch guard (:mod:`.upsert`), in a
        savepoint; bisect out records the table refuses, as the insert path does."""
        upserts = self.upserts
        assert upserts is not None
        if not self.staging_ready:
            conn.execute(upserts.create_staging())  # outside any savepoint: see _ensure_staging
            self.staging_ready = True
        try:
            with conn.transaction():
                conn.execute(sql.SQL("TRUNCATE {}").format(UPSERT_STAGING))
                self._copy(conn, UPSERT_STAGING, rows, crash_ok=first)
                applied = upserts.apply(conn, rows)
            self.result.written += applied.written
            self.result.deleted += applied.deleted
            self.result.stale += applied.stale
        except psycopg.Error as exc:
            if not is_bad_record_error(exc, upsert=True):
                raise
            if rows.num_rows == 1:
                self._dead_letter(conn, rows.drop_columns([DELETE_COLUMN]), _describe(exc))
                return
            half = rows.num_rows // 2
            self._upsert_salvaging(conn, rows.slice(0, half))
            self._upsert_salvaging(conn, rows.slice(half))

    def _ensure_staging(self, conn: psycopg.Connection[Any]) -> None:
        """Created outside any savepoint, so a rolled-back batch cannot take it along."""
        if not self.staging_ready:
            conn.execute(
                sql.SQL("CREATE TEMP TABLE {} (LIKE {} INCLUDING DEFAULTS) ON COMMIT DROP").format(
                    _STAGING, self.t.table.ident()
                )
            )
            self.staging_ready = True

    def _insert_via_staging(self, conn: psycopg.Connection[Any], rows: pa.RecordBatch) -> int:
        staging = _STAGING
        conn.execute(sql.SQL("TRUNCATE {}").format(staging))
        self._copy(conn, staging, rows)
        cur = conn.execute(
            sql.SQL(
                "INSERT INTO {} ({cols}) SELECT {cols} FROM {} ON CONFLICT ({}) DO NOTHING"
            ).format(
                self.t.table.ident(),
                staging,
                sql.Identifier(self.t.id_column),
                cols=self.column_list,
            )
        )
        return cur.rowcount

    def _dead_letter(self, conn: psycopg.Connection[Any], row: pa.RecordBatch, error: str) -> None:
        record = row.to_pylist()[0]
        payload = json.dumps(record, default=str, ensure_ascii=False)
        letter = DeadLetter(self.epoch, None, record.get(self.t.id_column), error, payload)
        self._send_dead_letters([letter])

    def _write_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        with self._conn.cursor() as cur:
            cur.executemany(
                sql.SQL(
                    "INSERT INTO {} (query_name, sink, epoch, shard, record_id, error, payload, "
                    "letter_key) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (query_name, sink, epoch, letter_key) DO NOTHING"
                ).format(self.t.table.sibling(DEAD_LETTERS)),
                [
                    (
                        self.t.query_name,
                        self.t.sink_name,
                        d.epoch,
                        d.shard,
                        d.record_id,
                        d.error,
                        d.payload,
                        d.key,
                    )
                    for d in letters
                ],
            )


class PostgresShardWriter(ShardWriter[PgTarget]):
    """The ``mapInArrow`` function of one epoch. Spark pickles it to every task."""

    task_class = PgShardTask


def _describe(exc: psycopg.Error) -> str:
    primary = exc.diag.message_primary or type(exc).__name__
    return f"{exc.sqlstate}: {primary}"
