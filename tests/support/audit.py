"""Write auditing for PostgreSQL targets: count durable inserts per record ID.

An AFTER INSERT trigger appends every inserted row's ID to an audit table, in the same
transaction. A double write is then visible even where a unique key would hide it, and a
rolled-back attempt leaves nothing, exactly like the data.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql


def install_audit(conn: psycopg.Connection[Any], table: str, id_column: str = "record_id") -> str:
    audit = f"{table}_audit"
    fn = f"{table}_audit_fn"
    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (record_id text NOT NULL, app text, "
            "at timestamptz DEFAULT clock_timestamp())"
        ).format(sql.Identifier(audit))
    )
    conn.execute(
        sql.SQL(
            "CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "INSERT INTO {audit} (record_id, app) VALUES (NEW.{col}::text, "
            "current_setting('application_name')); RETURN NULL; END $$"
        ).format(fn=sql.Identifier(fn), audit=sql.Identifier(audit), col=sql.Identifier(id_column))
    )
    conn.execute(
        sql.SQL("CREATE TRIGGER {} AFTER INSERT ON {} FOR EACH ROW EXECUTE FUNCTION {}()").format(
            sql.Identifier(f"{table}_audit_trg"), sql.Identifier(table), sql.Identifier(fn)
        )
    )
    return audit


def write_counts(conn: psycopg.Connection[Any], table: str) -> dict[str, int]:
    """Durable inserts per record ID (uuid text form, hyphens removed)."""
    rows = conn.execute(
        sql.SQL("SELECT record_id, count(*) FROM {} GROUP BY record_id").format(
            sql.Identifier(f"{table}_audit")
        )
    ).fetchall()
    return {str(rid).replace("-", ""): int(n) for rid, n in rows}


def sink_ids(conn: psycopg.Connection[Any], table: str, id_column: str = "record_id") -> list[str]:
    rows = conn.execute(
        sql.SQL("SELECT {}::text FROM {}").format(sql.Identifier(id_column), sql.Identifier(table))
    ).fetchall()
    return [str(r[0]).replace("-", "") for r in rows]


def assert_exactly_once(conn: psycopg.Connection[Any], table: str, expected: set[str]) -> None:
    ids = sink_ids(conn, table)
    counts = write_counts(conn, table)
    duplicates = {i: n for i, n in counts.items() if n > 1}
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} duplicate rows in {table}"
    assert not duplicates, (
        f"{len(duplicates)} IDs written more than once: {list(duplicates.items())[:5]}"
    )
    missing = expected - set(ids)
    unexpected = set(ids) - expected
    assert not missing, f"{len(missing)} expected IDs missing from {table}"
    assert not unexpected, f"{len(unexpected)} unexpected IDs in {table}"
    assert set(counts) == expected, "audit trail differs from the expected set"
