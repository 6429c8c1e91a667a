"""Write auditing for upsert targets in PostgreSQL: every applied write, with its epochs, and
every committed attempt.

An AFTER INSERT OR UPDATE OR DELETE trigger appends ``(record_id, op, old epoch, new epoch)``
for every row the sink changes, in the same transaction: a replay that rewrites a value shows
as one more UPDATE, an older epoch that got through as an UPDATE whose new epoch is below the
old one, a rolled-back attempt as nothing.

The epoch guard (``ON CONFLICT ... DO UPDATE ... WHERE t.epoch <= EXCLUDED.epoch``) turns a
re-run of an older epoch into no change at all, which no AFTER trigger sees. A BEFORE INSERT
trigger fires for every row proposed, guard or not, so ``<table>_uattempts`` holds one row per
committed attempt of (record ID, epoch): an upsert legitimately writes a key many times, but
each (key, epoch) once where shard markers skip what committed.
"""

from __future__ import annotations

from collections import Counter
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
    install_upsert_attempts(conn, table, id_column, epoch)


def install_upsert_attempts(
    conn: psycopg.Connection[Any], table: str, id_column: str = "record_id", epoch: str = "epoch"
) -> None:
    """The BEFORE INSERT attempts log of ``table`` (the rows the guard skips included)."""
    log, fn = sql.Identifier(f"{table}_uattempts"), sql.Identifier(f"{table}_uattempts_fn")
    conn.execute(
        sql.SQL("CREATE TABLE IF NOT EXISTS {} (record_id text NOT NULL, epoch bigint)").format(log)
    )
    conn.execute(
        sql.SQL(
            "CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "INSERT INTO {log} VALUES (NEW.{col}::text, NEW.{ep}); RETURN NEW; END $$"
        ).format(fn=fn, log=log, col=sql.Identifier(id_column), ep=sql.Identifier(epoch))
    )
    conn.execute(
        sql.SQL("CREATE TRIGGER {} BEFORE INSERT ON {} FOR EACH ROW EXECUTE FUNCTION {}()").format(
            sql.Identifier(f"{table}_uattempts_trg"), sql.Identifier(table), fn
        )
    )


def upsert_attempts(conn: psycopg.Connection[Any], table: str) -> Counter[tuple[str, int]]:
    """Committed attempts per (record ID, epoch), applied or skipped by the epoch guard."""
    rows = conn.execute(
        sql.SQL("SELECT record_id, epoch, count(*) FROM {} GROUP BY 1, 2").format(
            sql.Identifier(f"{table}_uattempts")
        )
    ).fetchall()
    return Counter({(str(r).replace("-", ""), int(e)): int(n) for r, e, n in rows})


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
