"""Write auditing for upsert targets in PostgreSQL: every applied write, with its epochs.

An AFTER INSERT OR UPDATE OR DELETE trigger appends ``(record_id, op, old epoch, new epoch)``
for every row the sink changes, in the same transaction: a replay that rewrites a value shows
as one more UPDATE, an older epoch that got through as an UPDATE whose new epoch is below the
old one, a rolled-back attempt as nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql


@dataclass(frozen=True)
class Write:
    record_id: str
    op: str  # INSERT, UPDATE or DELETE
    old_epoch: int | None
    new_epoch: int | None


def install_upsert_audit(
    conn: psycopg.Connection[Any], table: str, id_column: str = "record_id", epoch: str = "epoch"
) -> None:
    audit, fn = sql.Identifier(f"{table}_uaudit"), sql.Identifier(f"{table}_uaudit_fn")
    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (n bigserial PRIMARY KEY, record_id text NOT NULL, "
            "op text NOT NULL, old_epoch bigint, new_epoch bigint)"
        ).format(audit)
    )
    conn.execute(
        sql.SQL(
            "CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF TG_OP = 'INSERT' THEN INSERT INTO {audit} (record_id, op, new_epoch) "
            "VALUES (NEW.{col}::text, TG_OP, NEW.{ep}); "
            "ELSIF TG_OP = 'UPDATE' THEN INSERT INTO {audit} (record_id, op, old_epoch, "
            "new_epoch) VALUES (NEW.{col}::text, TG_OP, OLD.{ep}, NEW.{ep}); "
            "ELSE INSERT INTO {audit} (record_id, op, old_epoch) "
            "VALUES (OLD.{col}::text, TG_OP, OLD.{ep}); END IF; RETURN NULL; END $$"
        ).format(fn=fn, audit=audit, col=sql.Identifier(id_column), ep=sql.Identifier(epoch))
    )
    conn.execute(
        sql.SQL(
            "CREATE TRIGGER {} AFTER INSERT OR UPDATE OR DELETE ON {} FOR EACH ROW "
            "EXECUTE FUNCTION {}()"
        ).format(sql.Identifier(f"{table}_uaudit_trg"), sql.Identifier(table), fn)
    )


def upsert_writes(conn: psycopg.Connection[Any], table: str) -> list[Write]:
    """Every audited write, in the order they were applied."""
    rows = conn.execute(
        sql.SQL("SELECT record_id, op, old_epoch, new_epoch FROM {} ORDER BY n").format(
            sql.Identifier(f"{table}_uaudit")
        )
    ).fetchall()
    return [Write(str(r[0]).replace("-", ""), str(r[1]), r[2], r[3]) for r in rows]


def backwards(writes: list[Write]) -> list[Write]:
    """Updates that moved a key to an older epoch (invariant 12 says: none)."""
    return [
        w
        for w in writes
        if w.op == "UPDATE" and w.old_epoch is not None and w.new_epoch is not None
        if w.new_epoch < w.old_epoch
    ]
