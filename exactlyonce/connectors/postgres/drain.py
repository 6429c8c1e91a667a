"""The drainer's PostgreSQL target: rows and consumed offsets in ONE transaction (ATOMIC).

For a :class:`PostgresSink` in ``mode="insert"`` (a unique record-ID index) or
``mode="append"`` (none; see :class:`PgDrainTarget` for why each record is still written
once).

Kafka Connect's ``SinkTaskContext.offset()`` pattern: the sink, not the consumer group, holds
where the drainer is. The table ``exactlyonce_drain_offsets`` (next to the target table, in
its schema) has one row per (query_name, sink, topic, partition) with ``next_offset``, the
first offset not yet written. Every drain transaction:

1. locks the offset rows of its writer's own partitions (writers never wait on each other)
   and checks they are still what the drainer read (another drainer, or a commit whose reply
   was lost, moved them: the drainer then re-reads them and starts over from there, it never
   writes over them);
2. writes the rows: fast (:mod:`.fast_path`: Arrow columns, CSV, ``COPY`` inside a
   savepoint: the record IDs are new in all but rare cases, so almost every chunk takes it),
   or, when there is no fast path for the table, Arrow cannot read a value, or COPY refuses
   the chunk (a value of the wrong type or against a constraint; in mode insert, a record ID
   already present), exact (:mod:`.exact_path`: ``INSERT``, bisected; in mode insert with
   ``ON CONFLICT DO NOTHING``, a present ID is a no-op);
3. sets ``next_offset`` to the end of what it read, and commits.

A crash before the commit leaves neither rows nor offsets; after it, both. Rows the database
refuses (a value of the wrong type) are found by bisecting the batch inside savepoints and
handed back to the drainer, which dead-letters them before the commit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
import pyarrow.json as pajson
from psycopg import errors as pgerrors
from psycopg import sql

from exactlyonce.connectors.base.drain import (
    Counts,
    DrainRow,
    Letter,
    Ownership,
    Share,
    TargetClassDefaults,
)
from exactlyonce.connectors.base.guarantee import Guarantee
from exactlyonce.connectors.postgres import PostgresSink
from exactlyonce.connectors.postgres.drain_exact import (
    InsertResult,
    document,
    insert_bisecting,
    insert_statement,
    is_bad_row_error,
    json_key,
)
from exactlyonce.connectors.postgres.drain_fast import copy_csv, json_options
from exactlyonce.connectors.postgres.schema import TableName, has_unique_index_on, regclass
from exactlyonce.errors import ConfigError, OffsetsMovedError, SinkUnavailableError
from exactlyonce.faults import crash_point
from exactlyonce.secrets import dsn_password, scrub

OFFSETS = "exactlyonce_drain_offsets"


def offsets_ddl(table: sql.Identifier) -> sql.Composed:
    return sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (query_name text NOT NULL, sink text NOT NULL, "
        "topic text NOT NULL, partition integer NOT NULL, next_offset bigint NOT NULL, "
        "updated_at timestamptz NOT NULL DEFAULT now(), "
        "PRIMARY KEY (query_name, sink, topic, partition))"
    ).format(table)


class PgDrainTarget(TargetClassDefaults):
    """Writes drained rows into a :class:`PostgresSink`'s table (mode ``insert`` or
    ``append``): a :class:`~exactlyonce.connectors.base.drain.DrainTarget`.

    Guarantee: ATOMIC, in both modes. A share's rows and its offsets commit in one PostgreSQL
    transaction; the offset rows are locked and compared with ``held`` first (the
    compare-and-set), so a committed share is never read again and an uncommitted one left no
    row. Rows the database refuses are dead-lettered (drain dead-letter topic) before the
    commit.

    - ``mode="insert"``: each record ID once. The table must have a unique index on the ID
      column: a record ID already in the table (read again after :meth:`reset_offsets`, or
      held twice by a buffer without the catalog) is a no-op (``ON CONFLICT DO NOTHING``; a
      ``COPY`` that holds one falls back to that), counted as a duplicate.
    - ``mode="append"``: each record of the buffer once, with no unique index: a plain
      ``COPY``, or a plain ``INSERT``. Nothing in the table dedups, so it rests on the two
      things above: the buffer holds each record once (the buffered ``KafkaSink``: the
      catalog, which an append sink requires, drops the input's duplicates; a re-run batch is
      skipped at the head; the drainer reads confirmed attempts only) and the atomic offsets
      (a crash, a lost commit reply, a second drainer of the same partitions: the
      compare-and-set). The one way left to read a record again, forgetting the offsets, is
      refused: :meth:`reset_offsets` raises.

    One connection, one transaction at a time. With ``writers`` > 1, target ``writer`` owns
    the partitions ``p // members % writers == writer`` (of its member's ``p % members ==
    member``): their rows and their offsets, so several targets, and several drainer
    processes, write in parallel, each atomically for its own partitions.
    """

    @staticmethod
    def check(sink: PostgresSink) -> None:
        """insert: the unique record-ID index; append: the buffer holds each record once (the
        catalog, which append requires) and the offsets commit with the rows."""

    @staticmethod
    def guarantee(sink: PostgresSink) -> Guarantee:
        single = "the unique record-ID index" if sink.mode != "append" else "the dedup catalog"
        return Guarantee(
            "EXACTLY ONCE, ATOMIC",
            "one transaction writes a share's rows and its offsets in exactlyonce_drain_offsets "
            f"(rows locked and compared first); {single} keeps a re-read record single.",
        )

    @staticmethod
    def offsets_stored(sink: PostgresSink) -> bool:
        """Whether the offsets table exists (the drainer creates it at its start)."""
        with sink.connect() as conn:
            return regclass(conn, TableName(sink.table.schema, OFFSETS)) is not None

    def __init__(
        self,
        sink: PostgresSink,
        topic: str,
        application_name: str = "",
        writer: int = 0,
        writers: int = 1,
        member: tuple[int, int] = (0, 1),
    ) -> None:
        if sink.mode not in ("insert", "append"):
            raise ConfigError(
                "buffer", "the drainer writes PostgreSQL in mode='insert' or 'append' only"
            )
        self.sink = sink
        self.appends = sink.mode == "append"  # no unique index: no ON CONFLICT
        self.topic = topic
        self.query_name = sink.query_name
        self.sink_name = sink.sink_name
        self.application_name = (application_name or "exactlyonce-drainer")[:63]
        self._offsets = sink.table.sibling(OFFSETS)
        self._conn: psycopg.Connection[Any] | None = None
        self._insert: sql.Composed | None = None
        self._copy: sql.Composed | None = None
        self._columns: list[str] = []
        self._json_options: pajson.ParseOptions | None = None  # None: no fast path
        self._suffix_keys: tuple[bytes, bytes] = (
            json_key(sink.id_column),
            json_key(sink.epoch_column),
        )
        self.writer = writer
        self.writers = writers
        self.member, self.members = member
        self._ownership = Ownership(writer, writers, *member)
        self.held: dict[int, int] = {}

    def owns(self, partition: int) -> bool:
        """Member ``i`` of ``n`` drainers owns ``p % n == i``; its writer ``w`` of ``k``, of
        those, ``p // n % k == w``."""
        return self._ownership.owns(partition)

    def _own(self, offsets: Mapping[int, int]) -> dict[int, int]:
        return {p: o for p, o in offsets.items() if self.owns(p)}

    @property
    def where(self) -> str:
        return f"{self.sink.table} ({self.sink_name})"

    # -- connection ----------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        dsn = self.sink.dsn.reveal()
        try:
            self._conn = psycopg.connect(
                dsn,
                autocommit=False,
                connect_timeout=self.sink.connect_timeout,
                application_name=self.application_name,
            )
        except psycopg.OperationalError as exc:
            reason = scrub(str(exc).strip(), dsn_password(dsn))
            raise SinkUnavailableError(
                f"cannot connect to PostgreSQL at {self.sink.where}: {reason}"
            ) from None
        return self._conn

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            # Rolls back an open transaction; a dead connection has nothing left to show.
            with contextlib.suppress(Exception):
                conn.close()

    # -- preparation ---------------------------------------------------------------------

    def ensure(self) -> None:
        """Create the offsets table; check the target table (the Spark side creates it from
        the stream's schema: until it exists, the sink is "not ready", a retriable state)."""
        conn = self._connect()
        with conn.transaction():
            conn.execute(offsets_ddl(self._offsets))
        try:
            oid = self._check_table(conn)
            types = self._column_types(conn, oid)
        finally:
            conn.rollback()
        columns = list(types)
        for needed in (self.sink.id_column, self.sink.epoch_column):
            if needed not in columns:
                raise ConfigError("table", f"{self.sink.table} has no column {needed!r}")
        table = self.sink.table.ident()
        self._insert = insert_statement(
            table, columns, self.sink.id_column, on_conflict=not self.appends
        )
        names = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        self._copy = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(table, names)
        self._columns = columns
        self._json_options = json_options(
            types, (self.sink.id_column, self.sink.epoch_column), self.where
        )

    def _check_table(self, conn: psycopg.Connection[Any]) -> int:
        """The table's oid: it exists and, in mode insert, has the unique record-ID index."""
        oid = regclass(conn, self.sink.table)
        if oid is None:
            raise SinkUnavailableError(
                f"{self.sink.table} does not exist yet; the buffered query creates it from the "
                "stream's schema when it starts"
            )
        if not self.appends and not has_unique_index_on(conn, oid, self.sink.id_column):
            raise ConfigError(
                "table",
                f"{self.sink.table} has no unique index on {self.sink.id_column!r}: the drainer "
                "needs it to make a re-read record a no-op",
            )
        return oid

    def _column_types(self, conn: psycopg.Connection[Any], oid: int) -> dict[str, str]:
        """Column -> type of the columns the drainer writes: those without a default,
        identity or generated value, and always the ID and epoch."""
        rows = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod), atthasdef, attidentity, "
            "attgenerated FROM pg_attribute "
            "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            [oid],
        ).fetchall()
        return {
            str(name): str(type_name)
            for name, type_name, has_default, identity, generated in rows
            if not has_default
            and not identity
            and not generated
            or name in (self.sink.id_column, self.sink.epoch_column)
        }

    def read_offsets(self) -> dict[int, int]:
        """partition -> next offset to drain, as the sink holds it (the truth on restart);
        every partition's, though this target keeps (``held``) only its own. None stored
        (nothing) while the offsets table does not exist yet (before :meth:`ensure`)."""
        conn = self._connect()
        try:
            rows = conn.execute(
                sql.SQL(
                    "SELECT partition, next_offset FROM {} WHERE query_name = %s AND sink = %s "
                    "AND topic = %s"
                ).format(self._offsets),
                [self.query_name, self.sink_name, self.topic],
            ).fetchall()
        except pgerrors.UndefinedTable:
            rows = []
        finally:
            conn.rollback()
        stored = {int(p): int(o) for p, o in rows}
        self.held = self._own(stored)
        return stored

    def reset_offsets(self) -> int:
        """Forget where the drainer is (not the data): it then starts at the topic's start.
        Refused in mode append (ConfigError), where that appends every record again."""
        if self.appends:
            raise ConfigError("reset_offsets", self._reset_refusal())
        conn = self._connect()
        with conn.transaction():
            cur = conn.execute(
                sql.SQL("DELETE FROM {} WHERE query_name = %s AND sink = %s AND topic = %s").format(
                    self._offsets
                ),
                [self.query_name, self.sink_name, self.topic],
            )
        self.held = {}
        return cur.rowcount

    def _reset_refusal(self) -> str:
        where = sql.SQL("query_name = {} AND sink = {} AND topic = {}").format(
            sql.Literal(self.query_name), sql.Literal(self.sink_name), sql.Literal(self.topic)
        )
        return (
            f"{self.sink.table} is an append table: forgetting the offsets makes the drainer "
            "read the buffer from its start and append every record it drained already a "
            "second time (no unique index makes a re-read record a no-op). Refused. To move a "
            "partition on past expired records, "
            f"or if the table holds none of this buffer's records, change its rows of "
            f"{self._offsets.as_string()} yourself (WHERE {where.as_string()})"
        )

    # -- one drain transaction ---------------------------------------------------------

    def write_share(self, share: Share) -> Counts:
        """The share's rows, its dead letters (sent before the commit) and its offsets, in one
        transaction; rolled back on any failure (nothing of the share is then in the sink)."""
        try:
            self.begin()
            written, duplicates, letters = self._write_rows(share)
            crash_point("drain_mid_write", share.n)
            letters = share.bad + letters
            if letters:
                share.dead_letter(letters)
            self.commit(share.offsets)
        except BaseException:
            self.rollback()
            raise
        return written, duplicates, len(letters)

    def _write_rows(self, share: Share) -> tuple[int, int, list[Letter]]:
        """Write the share's records: COPY when the fast path holds, else the exact path.
        Returns (written, duplicates, dead letters)."""
        chunk, where = share.chunk, share.where
        if not where:
            return 0, 0, []
        # In the writer's thread: Arrow works without the GIL, and the reader is the busier.
        counts = [chunk.counts[i] for i in where]
        data = self.csv(
            [chunk.ids[i] for i in where],
            [chunk.epochs[i] for i in where],
            [chunk.values[i] for i in where],
            counts,
        )
        if data is not None and self.copy(data):
            return sum(counts), 0, []
        rows, letters = chunk.rows_of(where)
        result = self.insert(rows)
        letters += [(r.source, f"refused by the sink: {why}") for r, why in result.refused]
        return result.written, result.duplicates, letters

    def begin(self) -> None:
        """Open the transaction and check the stored offsets are those this drainer holds."""
        conn = self._connect()
        # Only this writer's partitions: the rows of the other writers stay unlocked, so the
        # writers' transactions run side by side instead of queueing on one another.
        rows = conn.execute(
            sql.SQL(
                "SELECT partition, next_offset FROM {} WHERE query_name = %s AND sink = %s "
                "AND topic = %s AND mod(partition, %s) = %s AND mod(partition / %s, %s) = %s "
                "FOR UPDATE"
            ).format(self._offsets),
            [
                self.query_name,
                self.sink_name,
                self.topic,
                self.members,
                self.member,
                self.members,
                self.writers,
                self.writer,
            ],
        ).fetchall()
        now = self._own({int(p): int(o) for p, o in rows})
        if now != self.held:
            conn.rollback()
            raise OffsetsMovedError(
                f"{self.where}: stored offsets {now} differ from the drainer's {self.held}"
            )

    def insert(self, rows: Sequence[DrainRow]) -> InsertResult:
        """Insert rows through the exact path (inside the open transaction); refused rows are
        returned, not raised."""
        assert self._insert is not None, "ensure() runs first"
        result = InsertResult()
        if rows:
            id_key, epoch_key = self._suffix_keys
            conn = self._connect()
            insert_bisecting(conn, self._insert, list(rows), id_key, epoch_key, result)
        return result

    def csv(
        self,
        ids: Sequence[bytes],
        epochs: Sequence[int],
        values: Sequence[bytes],
        counts: Sequence[int] | None = None,
    ) -> bytes | None:
        """The rows as CSV for :meth:`copy`, or None when they must take the exact path (no
        fast path for this table, or a value Arrow cannot read as a row of it).

        Message i holds ``counts[i]`` records (1 each without ``counts``; more in a frame):
        ``values[i]`` their JSON values one per line, ``ids[i]`` their IDs, 32 bytes each,
        ``epochs[i]`` their epoch."""
        options = self._json_options
        if options is None or not values:
            return None
        names = (self._columns, self.sink.id_column, self.sink.epoch_column)
        return copy_csv(options, *names, ids, epochs, values, counts)

    def copy(self, data: bytes) -> bool:
        """COPY the CSV rows into the table inside the open transaction (a savepoint). False,
        with nothing written, when PostgreSQL refuses them: a record ID already present, or a
        value its column cannot hold; the caller then takes the exact path."""
        assert self._copy is not None, "ensure() runs first"
        conn = self._connect()
        try:
            with conn.transaction(), conn.cursor() as cur, cur.copy(self._copy) as copy:
                copy.write(data)
        except psycopg.Error as exc:
            if is_bad_row_error(exc):
                return False
            raise
        return True

    def document(self, rows: Sequence[DrainRow]) -> str:
        """One JSON array of the rows, each with the ID and epoch keys appended (last, so
        they win over a same-named key in a value). Values are checked "{...}" already."""
        return document(rows, *self._suffix_keys)

    def commit(self, positions: Mapping[int, int]) -> None:
        """Store the new offsets and commit, rows and offsets together."""
        conn = self._connect()
        positions = self._own(positions)
        for partition, offset in sorted(positions.items()):
            if self.held.get(partition) == offset:
                continue
            if partition in self.held:
                cur = conn.execute(
                    sql.SQL(
                        "UPDATE {} SET next_offset = %s, updated_at = now() WHERE query_name = %s "
                        "AND sink = %s AND topic = %s AND partition = %s AND next_offset = %s"
                    ).format(self._offsets),
                    [
                        offset,
                        self.query_name,
                        self.sink_name,
                        self.topic,
                        partition,
                        self.held[partition],
                    ],
                )
                if cur.rowcount != 1:
                    conn.rollback()
                    raise OffsetsMovedError(f"{self.where}: partition {partition} moved")
            else:
                try:
                    conn.execute(
                        sql.SQL(
                            "INSERT INTO {} (query_name, sink, topic, partition, next_offset) "
                            "VALUES (%s, %s, %s, %s, %s)"
                        ).format(self._offsets),
                        [self.query_name, self.sink_name, self.topic, partition, offset],
                    )
                except pgerrors.UniqueViolation:
                    conn.rollback()
                    raise OffsetsMovedError(
                        f"{self.where}: partition {partition} written by another drainer"
                    ) from None
        conn.commit()
        self.held.update(positions)

    def rollback(self) -> None:
        if self._conn is not None and not self._conn.closed:
            try:
                self._conn.rollback()
            except psycopg.Error:
                self.close()
