"""The PostgreSQL write audit (tests/support/audit.py) can fail where ON CONFLICT hides a write.

Insert mode's unique index turns a second write of an ID into a no-op (``INSERT ... ON
CONFLICT DO NOTHING``). An AFTER INSERT trigger never fires for the row it skips, so an
audit built on it cannot see that second write; a BEFORE INSERT trigger fires for every row
proposed for insertion, and its log row commits or rolls back with the attempt.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support.audit import assert_exactly_once, insert_counts, install_audit, write_counts

pytestmark = pytest.mark.integration


def insert_skipping_conflicts(pg: psycopg.Connection[Any], table: str, *ids: str) -> int:
    cur = pg.execute(
        sql.SQL(
            "INSERT INTO {} (record_id) SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING"
        ).format(sql.Identifier(table)),
        [list(ids)],
    )
    return cur.rowcount


def test_a_second_attempt_skipped_by_on_conflict_is_counted(
    pg: psycopg.Connection[Any], unique_name: str
) -> None:
    pg.execute(sql.SQL("CREATE TABLE {} (record_id text PRIMARY KEY)").format(
        sql.Identifier(unique_name)
    ))  # fmt: skip
    install_audit(pg, unique_name)
    assert insert_skipping_conflicts(pg, unique_name, "a", "b") == 2
    assert_exactly_once(pg, unique_name, {"a", "b"})  # one attempt each: passes
    assert insert_skipping_conflicts(pg, unique_name, "a") == 0  # the unique key hides it

    assert sorted(r[0] for r in pg.execute(
        sql.SQL("SELECT record_id FROM {}").format(sql.Identifier(unique_name))
    ).fetchall()) == ["a", "b"]  # fmt: skip
    assert insert_counts(pg, unique_name) == {"a": 1, "b": 1}, "AFTER INSERT: blind to it"
    assert write_counts(pg, unique_name) == {"a": 2, "b": 1}, "BEFORE INSERT: counted"
    with pytest.raises(AssertionError, match=r"written more than once.*\('a', 2\)"):
        assert_exactly_once(pg, unique_name, {"a", "b"})
    assert_exactly_once(pg, unique_name, {"a", "b"}, reattempted={"a": 2})


def test_a_rolled_back_attempt_leaves_no_count(
    pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    """The attempt's log row lives in its transaction (and savepoint): nothing committed,
    nothing counted, as with the data."""
    pg.execute(sql.SQL("CREATE TABLE {} (record_id text PRIMARY KEY)").format(
        sql.Identifier(unique_name)
    ))  # fmt: skip
    install_audit(pg, unique_name)
    with psycopg.connect(pg_dsn) as conn:  # not autocommit: one transaction
        insert_skipping_conflicts(conn, unique_name, "a")
        with pytest.raises(psycopg.errors.UniqueViolation), conn.transaction():
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES ('b'), ('a')").format(sql.Identifier(unique_name))
            )  # the savepoint rolls back 'b' and its log rows
        conn.rollback()
    assert write_counts(pg, unique_name) == {} and insert_counts(pg, unique_name) == {}
    insert_skipping_conflicts(pg, unique_name, "a")
    assert write_counts(pg, unique_name) == {"a": 1}


def test_the_attempt_trigger_lets_the_row_in(pg: psycopg.Connection[Any], unique_name: str) -> None:
    """A BEFORE trigger returning null would cancel the insert and hide everything."""
    pg.execute(sql.SQL("CREATE TABLE {} (record_id uuid, n int)").format(
        sql.Identifier(unique_name)
    ))  # fmt: skip
    install_audit(pg, unique_name)
    pg.execute(
        sql.SQL("INSERT INTO {} VALUES ('6d7f2a0e-0000-4000-8000-000000000001', 7)").format(
            sql.Identifier(unique_name)
        )
    )
    row = pg.execute(sql.SQL("SELECT n FROM {}").format(sql.Identifier(unique_name))).fetchone()
    assert row == (7,)
    assert write_counts(pg, unique_name) == {"6d7f2a0e000040008000000000000001": 1}
