"""The PostgreSQL sink's audit: every row of its table counted per record ID (its
``id_column``, a uuid, compared as hex without dashes), read through a server-side cursor
in chunks; the query's rows in the dead-letter table. Read-only: a table not created yet
counts as empty."""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
from psycopg import sql

from exactlyonce.connectors.base.audit import SinkAudit
from exactlyonce.connectors.base.expected import Expected
from exactlyonce.connectors.postgres import PostgresSink
from exactlyonce.connectors.postgres.schema import DEAD_LETTERS, TableName, regclass
from exactlyonce.progress import Progress

AUDIT_CHUNK_ROWS = 50_000


def read_postgres(sink: PostgresSink, expected: Expected) -> SinkAudit:
    """Rows per record ID of the sink's table, its dead letters and head."""
    table = sink.table
    with sink.connect() as conn:  # a refused connection: SinkUnavailableError, scrubbed
        counts = Counter(sink_ids(conn, table, sink.id_column, len(expected)))
        dead = count_dead_letters(conn, table, sink.query_name, sink.sink_name)
    head = sink.peek_head() if dead is not None else None
    return SinkAudit(
        query_name=sink.query_name,
        sink=sink.sink_name,
        kind="postgres",
        read_with="",
        unit="rows in sink",
        expected=expected,
        counts=counts,
        head_epoch=head.epoch if head else None,
        dead_letters=dead or 0,
    )


def sink_ids(
    conn: psycopg.Connection[Any], table: TableName, id_column: str, expected: int
) -> list[str]:
    """Every row's record ID (hex, no dashes), duplicates kept; none if no table yet. Read
    through a server-side cursor in chunks, with the rows read against the ``expected`` count
    (:class:`~exactlyonce.progress.Progress`: a bar on a terminal, plain lines elsewhere)."""
    if regclass(conn, table) is None:
        return []
    query = sql.SQL("SELECT replace({}::text, '-', '') FROM {}").format(
        sql.Identifier(id_column), table.ident()
    )
    ids: list[str] = []
    with (
        Progress(f"audit {table}", total=expected, unit="rows") as progress,
        conn.transaction(),
        conn.cursor(name="exactlyonce_audit") as cursor,
    ):
        cursor.execute(query)
        while rows := cursor.fetchmany(AUDIT_CHUNK_ROWS):
            ids.extend(str(r[0]) for r in rows)
            progress.update(len(rows))
    return ids


def count_dead_letters(
    conn: psycopg.Connection[Any], table: TableName, query_name: str, sink_name: str
) -> int | None:
    """The query's rows in the dead-letter table next to ``table``; None: no such table."""
    if regclass(conn, TableName(table.schema, DEAD_LETTERS)) is None:
        return None
    row = conn.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE query_name = %s AND sink = %s").format(
            table.sibling(DEAD_LETTERS)
        ),
        [query_name, sink_name],
    ).fetchone()
    return int(row[0]) if row else 0
