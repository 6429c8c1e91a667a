"""The executor side of the PostgreSQL sink: one transaction per task.

Runs inside Spark's Python workers through ``mapInArrow``. Per task, in ONE transaction:

1. read which shards of this epoch an earlier attempt already committed, and drop their rows;
2. send rows with a null key to the dead-letter table;
3. COPY each Arrow batch straight into the target inside a savepoint (the fast path);
4. if the COPY hits the unique index (the ID exists from another epoch, or twice in this
   task), roll back to the savepoint and write that batch through a staging table with
   ``INSERT ... ON CONFLICT (record_id) DO NOTHING`` (the slow path);
5. if a batch holds a record the table refuses (a data or constraint error), bisect the batch
   to find it, write the rest, and dead-letter that record with the error;
6. insert a "(query, epoch, shard) committed" row for every shard seen, and commit.

A crash anywhere before the commit leaves nothing of the task; after it, a re-run finds the
shard committed and skips it. Ambiguous commits (connection lost during COMMIT) surface as an
error; the re-run then reads the shard-commit row, so the outcome is verified, never guessed.
"""

from __future__ import annotations

import io
import json
import os
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from psycopg import errors as pgerrors
from psycopg import sql

from exactlyonce.connectors.base import ERROR_COLUMN, PAYLOAD_COLUMN, SHARD_COLUMN, TaskResult
from exactlyonce.connectors.postgres_schema import DEAD_LETTERS, SHARD_COMMITS, TableName
from exactlyonce.connectors.secrets import Secret
from exactlyonce.dedup.bloom import ids_from_hex
from exactlyonce.dedup.shard import DedupPlan, TaskDedup
from exactlyonce.integration.crashpoints import crash_point

COPY_CHUNK_BYTES = 1 << 20
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


def is_bad_record_error(exc: BaseException) -> bool:
    """Errors caused by a record's content (SQLSTATE classes 22 and 23), not by a duplicate ID."""
    if not isinstance(exc, psycopg.Error) or isinstance(exc, pgerrors.UniqueViolation):
        return False
    state = exc.sqlstate or ""
    return state.startswith("22") or state.startswith("23")


def to_csv(batch: pa.RecordBatch) -> bytes:
    out = io.BytesIO()
    pacsv.write_csv(batch, out, _CSV_OPTIONS)
    return out.getvalue()


class PostgresShardWriter:
    """The ``mapInArrow`` function of one epoch. Spark pickles it to every task."""

    def __init__(self, target: PgTarget, epoch: int) -> None:
        self.target = target
        self.epoch = epoch

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        task = _ShardTask(self.target, self.epoch)
        try:
            for batch in batches:
                task.write(batch)
            task.commit()
        finally:
            task.close()
        yield task.result.to_arrow()


class _ShardTask:
    """One task's transaction. Connects lazily: an empty partition never touches the sink."""

    def __init__(self, target: PgTarget, epoch: int) -> None:
        self.t = target
        self.epoch = epoch
        self.conn: psycopg.Connection[Any] | None = None
        self.committed_before: set[int] = set()
        self.shards: set[int] = set()
        self.staging_ready = False
        self.result = TaskResult(writer=f"{socket.gethostname()}:{os.getpid()}")
        self.dedup = TaskDedup(target.dedup, epoch) if target.dedup is not None else None
        self.column_list = sql.SQL(", ").join(sql.Identifier(c) for c in target.columns)

    # -- lifecycle ---------------------------------------------------------------------

    def _open(self) -> psycopg.Connection[Any]:
        if self.conn is None:
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
            self.committed_before = {int(r[0]) for r in rows}
        return self.conn

    def commit(self) -> None:
        if self.conn is None:
            return
        self.result.shards = sorted(self.shards)
        new_shards = sorted(self.shards - self.committed_before)
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
        self.conn.commit()
        crash_point("after_shard_commit", self.epoch)
        if self.dedup is not None:
            self.dedup.after_commit()  # mark only what is durably in the sink
            self.result.add_dedup_stats(self.dedup.stats)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()  # rolls back an uncommitted transaction
            self.conn = None
        if self.dedup is not None:
            self.dedup.close()

    # -- one Arrow batch ---------------------------------------------------------------

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        conn = self._open()
        shard_values = pc.unique(batch.column(SHARD_COLUMN)).to_pylist()
        self.shards.update(int(s) for s in shard_values)
        batch = self._drop_committed_shards(batch)
        if batch.num_rows == 0:
            return
        self.result.rows += batch.num_rows
        bad_mask = pc.is_valid(batch.column(ERROR_COLUMN))
        if pc.any(bad_mask).as_py():
            self._dead_letter_null_keys(conn, batch.filter(bad_mask))
            batch = batch.filter(pc.invert(bad_mask))
        if batch.num_rows and self.dedup is not None:
            batch = self._drop_seen(batch)
        if batch.num_rows:
            self._write_rows(conn, batch.select(list(self.t.columns)))

    def _drop_seen(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        assert self.dedup is not None
        keep = self.dedup.keep(_shards(batch), ids_from_hex(batch.column(self.t.id_column)))
        self.result.duplicates += int(len(keep) - keep.sum())
        return batch.filter(pa.array(keep))

    def _drop_committed_shards(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if not self.committed_before:
            return batch
        shard = batch.column(SHARD_COLUMN)
        done = pc.is_in(shard, value_set=pa.array(sorted(self.committed_before), shard.type))
        for s in pc.unique(pc.filter(shard, done)).to_pylist():
            if int(s) not in self.result.skipped_shards:
                self.result.skipped_shards.append(int(s))
        if self.dedup is not None:
            committed = batch.filter(pc.and_(done, pc.is_valid(batch.column(self.t.id_column))))
            if committed.num_rows:
                ids = ids_from_hex(committed.column(self.t.id_column))
                self.dedup.remember_committed(_shards(committed), ids)
        return batch.filter(pc.invert(done))

    def _write_rows(self, conn: psycopg.Connection[Any], rows: pa.RecordBatch) -> None:
        try:
            with conn.transaction():
                self._copy(conn, self.t.table.ident(), rows, crash_ok=True)
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
    ) -> None:
        data = memoryview(to_csv(rows))
        statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(into, self.column_list)
        with conn.cursor() as cur, cur.copy(statement) as copy:
            for start in range(0, len(data), COPY_CHUNK_BYTES):
                copy.write(data[start : start + COPY_CHUNK_BYTES])
                if crash_ok and start == 0:
                    crash_point("mid_copy", self.epoch)

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

    def _dead_letter_null_keys(self, conn: psycopg.Connection[Any], bad: pa.RecordBatch) -> None:
        rows = [
            (self.t.query_name, self.t.sink_name, self.epoch, shard, None, error, payload)
            for shard, error, payload in zip(
                bad.column(SHARD_COLUMN).to_pylist(),
                bad.column(ERROR_COLUMN).to_pylist(),
                bad.column(PAYLOAD_COLUMN).to_pylist(),
                strict=False,
            )
        ]
        self._insert_dead_letters(conn, rows)

    def _dead_letter(self, conn: psycopg.Connection[Any], row: pa.RecordBatch, error: str) -> None:
        record = row.to_pylist()[0]
        payload = json.dumps(record, default=str, ensure_ascii=False)
        rid = record.get(self.t.id_column)
        self._insert_dead_letters(
            conn, [(self.t.query_name, self.t.sink_name, self.epoch, None, rid, error, payload)]
        )

    def _insert_dead_letters(
        self, conn: psycopg.Connection[Any], rows: Sequence[tuple[Any, ...]]
    ) -> None:
        with conn.cursor() as cur:
            cur.executemany(
                sql.SQL(
                    "INSERT INTO {} (query_name, sink, epoch, shard, record_id, error, payload) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s)"
                ).format(self.t.table.sibling(DEAD_LETTERS)),
                rows,
            )
        self.result.dead_letters += len(rows)


def _shards(batch: pa.RecordBatch) -> Any:
    return batch.column(SHARD_COLUMN).to_numpy(zero_copy_only=False).astype("int64")


def _describe(exc: psycopg.Error) -> str:
    primary = exc.diag.message_primary or type(exc).__name__
    return f"{exc.sqlstate}: {primary}"
