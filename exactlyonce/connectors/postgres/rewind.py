"""``exactlyonce rewind`` on a PostgreSQL sink: the rows, dead letters and shard commits of
the epochs above N go, and the head moves back to N, in ONE transaction.

Every row the sink writes carries its epoch (``epoch_column``), and in ``mode="insert"`` and
``"append"`` a row is only ever inserted: deleting the rows above N leaves the table as it
was when the head was N (an ID first written at or below N keeps its row, because an insert
of an ID already present was a no-op). ``mode="upsert"`` is refused: a row written above N
replaced the version of an earlier epoch, which a delete cannot bring back.

Assumes what the sink's guarantee assumes: the table is this query's (nothing else writes
rows with these epochs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from exactlyonce.connectors.base.rewind import Removal
from exactlyonce.connectors.postgres.schema import (
    DEAD_LETTERS,
    HEADS,
    SHARD_COMMITS,
    regclass,
)

if TYPE_CHECKING:
    from exactlyonce.connectors.postgres.parts import PostgresParts

UPSERT_REFUSAL = (
    "mode='upsert' overwrites a key's row in place (and deletes keys, keeping tombstones): "
    "deleting the rows written above epoch N cannot bring back the versions of epochs at or "
    "below N that they replaced. Reset the head and rebuild the table from the source instead"
)


def refusal(sink: PostgresParts) -> str | None:
    return UPSERT_REFUSAL if sink.mode == "upsert" else None


def _queries(sink: PostgresParts) -> list[tuple[str, sql.Composed, bool]]:
    """(what, the FROM/WHERE part, whether it is the query's own control table)."""
    mine = sql.SQL("query_name = %s AND sink = %s AND epoch > %s")
    return [
        (
            f"rows of {sink.table}",
            sql.SQL("{} WHERE {} > %s").format(
                sink.table.ident(), sql.Identifier(sink.epoch_column)
            ),
            False,
        ),
        (
            "dead letters",
            sql.SQL("{} WHERE {}").format(sink.table.sibling(DEAD_LETTERS), mine),
            True,
        ),
        (
            "shard commits",
            sql.SQL("{} WHERE {}").format(sink.table.sibling(SHARD_COMMITS), mine),
            True,
        ),
    ]


def _params(sink: PostgresParts, control: bool, epoch: int) -> list[Any]:
    return [sink.query_name, sink.sink_name, epoch] if control else [epoch]


def removals_above(sink: PostgresParts, epoch: int) -> list[Removal]:
    """Per table, the rows above ``epoch`` (GROUP BY epoch); read-only, a missing table
    counts nothing."""
    out = []
    with sink.connect() as conn:
        for what, where, control in _queries(sink):
            epoch_col = sql.Identifier("epoch" if control else sink.epoch_column)
            query = sql.SQL("SELECT {e}, count(*) FROM {w} GROUP BY {e}").format(
                e=epoch_col, w=where
            )
            try:
                rows = conn.execute(query, _params(sink, control, epoch)).fetchall()
            except psycopg.errors.UndefinedTable:
                rows = []
            out.append(Removal(what, {int(e): int(n) for e, n in rows}))
    return out


def rewind_to(sink: PostgresParts, epoch: int) -> list[Removal]:
    """One transaction: lock the head row, delete everything above ``epoch`` (counted as it
    goes), move the head back to ``epoch`` (Spark query id cleared). Idempotent."""
    removed = []
    with sink.connect() as conn, conn.transaction():
        heads = sink.table.sibling(HEADS)
        key = [sink.query_name, sink.sink_name]
        conn.execute(
            sql.SQL("SELECT 1 FROM {} WHERE query_name = %s AND sink = %s FOR UPDATE").format(
                heads
            ),
            key,
        )
        for what, where, control in _queries(sink):
            if not control and regclass(conn, sink.table) is None:
                removed.append(Removal(what))
                continue
            epoch_col = sql.Identifier("epoch" if control else sink.epoch_column)
            query = sql.SQL(
                "WITH gone AS (DELETE FROM {w} RETURNING {e}) "
                "SELECT {e}, count(*) FROM gone GROUP BY {e}"
            ).format(w=where, e=epoch_col)
            rows = conn.execute(query, _params(sink, control, epoch)).fetchall()
            removed.append(Removal(what, {int(e): int(n) for e, n in rows}))
        conn.execute(
            sql.SQL(
                "UPDATE {} SET epoch = %s, spark_query_id = NULL, updated_at = now() "
                "WHERE query_name = %s AND sink = %s AND epoch > %s"
            ).format(heads),
            [epoch, *key, epoch],
        )
    return removed


def shard_commits(sink: PostgresParts) -> dict[int, list[int]]:
    """Epoch -> shards of the shard-commit rows still held (those above the head)."""
    query = sql.SQL(
        "SELECT epoch, shard FROM {} WHERE query_name = %s AND sink = %s ORDER BY epoch, shard"
    ).format(sink.table.sibling(SHARD_COMMITS))
    try:
        with sink.connect() as conn:
            rows = conn.execute(query, [sink.query_name, sink.sink_name]).fetchall()
    except psycopg.errors.UndefinedTable:
        return {}
    out: dict[int, list[int]] = {}
    for e, s in rows:
        out.setdefault(int(e), []).append(int(s))
    return out
