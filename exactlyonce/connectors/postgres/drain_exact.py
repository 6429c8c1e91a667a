"""The drain's exact path: ``INSERT`` from one JSON document, row by row where it must.

The rows go through ``INSERT ... SELECT FROM json_populate_recordset(...)``, converted to the
columns' types by PostgreSQL (``json``, not ``jsonb``: parsed once, lazily, 1.6x faster
here). Into a table with a unique record-ID index (``mode="insert"``) the statement ends in
``ON CONFLICT (record_id) DO NOTHING``: a record ID already present is a no-op. Into an append
table (``mode="append"``) it is a plain ``INSERT``: every row is a new row (the drain target
says why none comes twice). Rows the database refuses (a value of the wrong type, a
constraint) are found by bisecting the batch inside savepoints and handed back, not raised,
so the drainer dead-letters them and goes on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from exactlyonce.connectors.base.drain import DrainRow

_NO_COMMA = (b"{", b" ", b"\t", b"\n", b"\r")


@dataclass
class InsertResult:
    written: int = 0
    duplicates: int = 0
    refused: list[tuple[DrainRow, str]] = field(default_factory=list)


def is_bad_row_error(exc: BaseException) -> bool:
    """Errors caused by a row's content: SQLSTATE classes 22 (data) and 23 (constraints)."""
    if not isinstance(exc, psycopg.Error):
        return False
    state = exc.sqlstate or ""
    return state.startswith(("22", "23"))


def describe(exc: psycopg.Error) -> str:
    primary = exc.diag.message_primary or type(exc).__name__
    return f"{exc.sqlstate}: {primary}"


def json_key(name: str) -> bytes:
    return json.dumps(name).encode()


def document(rows: Sequence[DrainRow], id_key: bytes, epoch_key: bytes) -> str:
    """One JSON array of the rows, each with the ID and epoch keys (JSON-encoded names)
    appended (last, so they win over a same-named key in a value). Values are checked
    "{...}" already."""
    fast = b',%s:"%%s",%s:%%d}' % (id_key, epoch_key)
    parts = []
    for row in rows:
        value = row.value
        if value[-1:] == b"}" and value[-2:-1] not in _NO_COMMA:
            parts.append(value[:-1] + fast % (row.record_id, row.epoch))
            continue
        body = value.rstrip()[:-1].rstrip()  # whitespace, or an empty object
        sep = b"" if body.endswith(b"{") else b","
        parts.append(
            b'%s%s%s:"%s",%s:%d}' % (body, sep, id_key, row.record_id, epoch_key, row.epoch)
        )
    return (b"[" + b",".join(parts) + b"]").decode("utf-8")


def insert_statement(
    table: sql.Composable, columns: Sequence[str], id_column: str, *, on_conflict: bool
) -> sql.Composed:
    """``INSERT`` of ``columns`` from the rows' JSON document (the one parameter); with
    ``on_conflict``, a row whose ``id_column`` is present already is skipped (the column
    needs a unique index)."""
    names = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    statement = sql.SQL(
        "INSERT INTO {table} ({names}) SELECT {names} FROM "
        "json_populate_recordset(NULL::{table}, %s::json)"
    ).format(table=table, names=names)
    if not on_conflict:
        return statement
    return statement + sql.SQL(" ON CONFLICT ({}) DO NOTHING").format(sql.Identifier(id_column))


def insert_bisecting(
    conn: psycopg.Connection[Any],
    statement: sql.Composed,
    rows: list[DrainRow],
    id_key: bytes,
    epoch_key: bytes,
    result: InsertResult,
) -> None:
    """Run ``statement`` with the rows' document inside a savepoint; when PostgreSQL refuses
    it for a row's content, halve and try again, down to the single rows it refuses (added
    to ``result.refused``). Any other error is raised (the caller's transaction is then
    rolled back whole)."""
    try:
        with conn.transaction():  # a savepoint: a refused part takes only itself back
            cur = conn.execute(statement, [document(rows, id_key, epoch_key)])
        result.written += cur.rowcount
        result.duplicates += len(rows) - cur.rowcount
    except psycopg.Error as exc:
        if not is_bad_row_error(exc):
            raise
        if len(rows) == 1:
            result.refused.append((rows[0], describe(exc)))
            return
        half = len(rows) // 2
        insert_bisecting(conn, statement, rows[:half], id_key, epoch_key, result)
        insert_bisecting(conn, statement, rows[half:], id_key, epoch_key, result)
