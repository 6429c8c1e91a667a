"""``mode="upsert"`` on PostgreSQL: one Arrow batch of a task, under the epoch guard.

Per batch, inside the task's transaction (the one that also inserts its shard-commit rows):

1. ``COPY`` the rows, with their ``_eo_delete`` flag, into a temporary staging table;
2. upserts: ``INSERT INTO t SELECT ... FROM staging ON CONFLICT (record_id) DO UPDATE SET
   <every column> = EXCLUDED.<column> WHERE t.epoch <= EXCLUDED.epoch``, skipping keys with
   a tombstone newer than the row; then the tombstones the applied rows replace go;
3. deletes (with a ``tombstone_column``): the tombstone ``(target, record_id, epoch)`` is
   recorded in ``exactlyonce_tombstones`` (kept at the greater epoch) unless a newer row is
   stored, and the row goes if its epoch is at most the delete's.

A row whose epoch is below the stored one (a row's or a tombstone's) changes nothing: it is
counted ``stale``. The staging keeps the COPY fast (one ``INSERT ... SELECT`` per batch, not a
statement per row). The task holds one row per key (:class:`~exactlyonce.connectors.base.
upsert.OnePerKey`), so no statement touches a row twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from exactlyonce.connectors.base.columns import DELETE_COLUMN
from exactlyonce.connectors.postgres.schema import TOMBSTONES, TableName

UPSERT_STAGING = sql.Identifier("_eo_upsert_staging")
_DELETE = sql.Identifier(DELETE_COLUMN)


@dataclass(frozen=True)
class Applied:
    """What one batch did: rows upserted, keys deleted, rows refused by the epoch guard."""

    written: int
    deleted: int
    stale: int


@dataclass(frozen=True)
class UpsertStatements:
    """The SQL of one target table's upserts; every name quoted by ``psycopg.sql``."""

    table: TableName
    columns: tuple[str, ...]
    id_column: str
    epoch_column: str
    tombstones: bool

    @property
    def target(self) -> str:
        """The table's key in ``exactlyonce_tombstones``."""
        return str(self.table)

    def _names(self) -> tuple[sql.Composable, sql.Composable, sql.Composable]:
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in self.columns)
        return cols, sql.Identifier(self.id_column), sql.Identifier(self.epoch_column)

    def create_staging(self) -> sql.Composed:
        return sql.SQL(
            "CREATE TEMP TABLE {} (LIKE {} INCLUDING DEFAULTS) ON COMMIT DROP; "
            "ALTER TABLE {} ADD COLUMN {} boolean NOT NULL DEFAULT false"
        ).format(UPSERT_STAGING, self.table.ident(), UPSERT_STAGING, _DELETE)

    def upsert(self) -> sql.Composed:
        cols, rid, epoch = self._names()
        settings = sql.SQL(", ").join(
            sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
            for c in self.columns
            if c != self.id_column
        )
        newer_tombstone: sql.Composable = sql.SQL("")
        if self.tombstones:
            newer_tombstone = sql.SQL(
                " AND NOT EXISTS (SELECT 1 FROM {} d WHERE d.target = %(target)s "
                "AND d.record_id = s.{} AND d.epoch > s.{})"
            ).format(self.table.sibling(TOMBSTONES), rid, epoch)
        return sql.SQL(
            "INSERT INTO {} AS t ({}) SELECT {} FROM {} s WHERE NOT s.{}{} "
            "ON CONFLICT ({}) DO UPDATE SET {} WHERE t.{} <= EXCLUDED.{}"
        ).format(
            self.table.ident(),
            cols,
            cols,
            UPSERT_STAGING,
            _DELETE,
            newer_tombstone,
            rid,
            settings,
            epoch,
            epoch,
        )

    def drop_replaced_tombstones(self) -> sql.Composed:
        _, rid, epoch = self._names()
        return sql.SQL(
            "DELETE FROM {} d USING {} s WHERE d.target = %(target)s AND d.record_id = s.{} "
            "AND NOT s.{} AND d.epoch <= s.{}"
        ).format(self.table.sibling(TOMBSTONES), UPSERT_STAGING, rid, _DELETE, epoch)

    def record_tombstones(self) -> sql.Composed:
        _, rid, epoch = self._names()
        return sql.SQL(
            "INSERT INTO {} AS d (target, record_id, epoch) "
            "SELECT %(target)s, s.{}, s.{} FROM {} s WHERE s.{} "
            "AND NOT EXISTS (SELECT 1 FROM {} t WHERE t.{} = s.{} AND t.{} > s.{}) "
            "ON CONFLICT (target, record_id) DO UPDATE SET epoch = EXCLUDED.epoch, "
            "deleted_at = now() WHERE d.epoch <= EXCLUDED.epoch"
        ).format(
            self.table.sibling(TOMBSTONES),
            rid,
            epoch,
            UPSERT_STAGING,
            _DELETE,
            self.table.ident(),
            rid,
            rid,
            epoch,
            epoch,
        )

    def delete_rows(self) -> sql.Composed:
        _, rid, epoch = self._names()
        return sql.SQL(
            "DELETE FROM {} t USING {} s WHERE s.{} AND t.{} = s.{} AND t.{} <= s.{}"
        ).format(self.table.ident(), UPSERT_STAGING, _DELETE, rid, rid, epoch, epoch)

    def apply(self, conn: psycopg.Connection[Any], rows: pa.RecordBatch) -> Applied:
        """Apply the batch already COPYed into the staging table (``rows``: the same rows)."""
        deletes = int(pc.sum(rows.column(DELETE_COLUMN)).as_py() or 0)
        params = {"target": self.target}
        written = conn.execute(self.upsert(), params).rowcount
        deleted = 0
        if self.tombstones:
            conn.execute(self.drop_replaced_tombstones(), params)
            if deletes:
                deleted = conn.execute(self.record_tombstones(), params).rowcount
                conn.execute(self.delete_rows())
        return Applied(written, deleted, rows.num_rows - written - deleted)
