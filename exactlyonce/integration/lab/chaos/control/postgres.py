"""PostgreSQL, read and written with plain psycopg SQL.

- :func:`read`: every row's key columns (``SELECT k::text FROM table``), counted per key;
- :func:`last_epoch`: ``SELECT max(epoch)``;
- :class:`Watch`: ``LISTEN`` on a channel a statement trigger on the table notifies after
  every ``INSERT``/``COPY``; PostgreSQL delivers the notification when the writing
  transaction commits, so it says "a commit became visible";
- :func:`prepare` and :func:`write_partition`: the control's append table (the key columns
  as text and the epoch; no unique index) and one ``COPY`` per task, committed.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import sql

from exactlyonce.integration.lab.chaos.control.reading import Reading
from exactlyonce.integration.lab.chaos.control.target import Key, Target

READER = "psycopg SQL (SELECT key::text of every row)"
COMMIT_REQUEST = b"COMMIT"  # the control's COPY transaction is applied at its COMMIT
TRIGGER = "eo_chaos_commit"
FUNCTION = "eo_chaos_notify"
LOCK_TIMEOUT = "10s"


def _table(t: Target) -> sql.Composable:
    schema, _, name = t.name.rpartition(".")
    return sql.Identifier(schema or "public", name)


def _exists(conn: psycopg.Connection[Any], t: Target) -> bool:
    schema, _, name = t.name.rpartition(".")
    row = conn.execute(
        "SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = %s",
        [schema or "public", name],
    ).fetchone()
    return row is not None


def read(t: Target) -> Reading:
    found: Counter[Key] = Counter()
    nulls = 0
    with psycopg.connect(t.address, autocommit=True) as conn:
        if _exists(conn, t):
            columns = sql.SQL(", ").join(
                sql.SQL("{}::text").format(sql.Identifier(k)) for k in t.keys
            )
            query = sql.SQL("SELECT {} FROM {}").format(columns, _table(t))
            for row in conn.cursor().stream(query):
                if any(v is None for v in row):
                    nulls += 1
                else:
                    found[tuple(row)] += 1
    return Reading(READER, t.describe(), found, nulls)


def last_epoch(t: Target) -> int | None:
    with psycopg.connect(t.address, autocommit=True, connect_timeout=5) as conn:
        if not _exists(conn, t):
            return None
        row = conn.execute(
            sql.SQL("SELECT max({}) FROM {}").format(sql.Identifier(t.epoch), _table(t))
        ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


class Watch:
    """A commit of rows into the table, seen through ``LISTEN``/``NOTIFY``."""

    def __init__(self, t: Target) -> None:
        self.channel = "eo_chaos_" + hashlib.sha256(t.name.encode()).hexdigest()[:16]
        self.conn = psycopg.connect(t.address, autocommit=True, connect_timeout=5)
        try:
            self._install(t)
            self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        except Exception:
            self.conn.close()
            raise

    def _install(self, t: Target) -> None:
        """The statement trigger (once per table): it notifies the channel after each
        INSERT or COPY; the notification goes out when that transaction commits."""
        conn = self.conn
        schema, _, name = t.name.rpartition(".")
        found = conn.execute(
            "SELECT 1 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s AND t.tgname = %s",
            [schema or "public", name, TRIGGER],
        ).fetchone()
        if found:
            return
        with conn.transaction():
            conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(LOCK_TIMEOUT)))
            conn.execute(
                sql.SQL(
                    "CREATE OR REPLACE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$ BEGIN PERFORM pg_notify(TG_ARGV[0], ''); RETURN NULL; END $$"
                ).format(sql.Identifier(FUNCTION))
            )
            conn.execute(
                sql.SQL(
                    "CREATE TRIGGER {} AFTER INSERT ON {} FOR EACH STATEMENT "
                    "EXECUTE FUNCTION {}({})"
                ).format(
                    sql.Identifier(TRIGGER),
                    _table(t),
                    sql.Identifier(FUNCTION),
                    sql.Literal(self.channel),
                )
            )

    def seen(self, timeout: float, alive: Callable[[], bool]) -> bool:
        """True once a commit was notified; False if ``alive()`` turned false or ``timeout``
        passed first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and alive():
            for _ in self.conn.notifies(timeout=0.1, stop_after=1):
                return True
        return False

    def close(self) -> None:
        self.conn.close()


def prepare(t: Target) -> None:
    """The control's table: the key columns as text and the epoch, no index at all."""
    columns = [sql.SQL("{} text").format(sql.Identifier(k)) for k in t.keys]
    columns.append(sql.SQL("{} bigint").format(sql.Identifier(t.epoch)))
    with psycopg.connect(t.address, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
                _table(t), sql.SQL(", ").join(columns)
            )
        )


def write_partition(
    t: Target, epoch: int, rows: Sequence[tuple[Any, ...]], mid: Callable[[], None]
) -> None:
    """COPY the rows (and the epoch) into the table in one transaction, and commit."""
    columns = sql.SQL(", ").join(sql.Identifier(c) for c in (*t.keys, t.epoch))
    half = len(rows) // 2
    with psycopg.connect(t.address) as conn:
        with (
            conn.cursor() as cur,
            cur.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(_table(t), columns)) as copy,
        ):
            for row in rows[:half]:
                copy.write_row((*row, epoch))
            mid()
            for row in rows[half:]:
                copy.write_row((*row, epoch))
        conn.commit()
