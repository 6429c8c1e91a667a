"""What ``exactlyonce check`` reports for a PostgresSink: its guarantee in each mode, and its
preconditions read from the database's catalog, creating nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from exactlyonce.connectors.base.guarantee import (
    FAILING,
    OK,
    Check,
    Guarantee,
    absent,
    checked,
)
from exactlyonce.connectors.postgres.schema import (
    DEAD_LETTERS,
    HEADS,
    SHARD_COMMITS,
    TOMBSTONES,
    TableName,
    has_unique_index_on,
    regclass,
    schema_exists,
    table_columns,
)

if TYPE_CHECKING:
    import psycopg

    from exactlyonce.connectors.postgres.parts import PostgresParts

_SHARD_STEP = (
    "one transaction per shard writes its rows (COPY) with a shard-commit row, and the head "
    "row in exactlyonce_heads makes a restart skip committed epochs"
)


def guarantee(sink: PostgresParts) -> Guarantee:
    if sink.mode == "upsert":
        return Guarantee(
            "EXACTLY ONCE per key and epoch (upsert: the latest epoch's value, never rolled back)",
            f"{_SHARD_STEP}; INSERT ... ON CONFLICT ({sink.id_column}) DO UPDATE ... WHERE "
            "stored epoch <= new epoch applies each key's newest epoch only.",
        )
    if sink.mode == "append":
        return Guarantee(
            "EXACTLY ONCE",
            f"{_SHARD_STEP}; the table has no unique index, so the Redis dedup catalog keeps "
            "duplicates of the input out (rebuilt from the table's record IDs if lost).",
        )
    return Guarantee(
        "EXACTLY ONCE",
        f"{_SHARD_STEP}; the unique index on {sink.id_column} makes a re-written record a "
        "no-op (ON CONFLICT DO NOTHING).",
    )


def preconditions(sink: PostgresParts) -> list[Check]:
    def run() -> list[Check]:
        with sink.connect() as conn:
            checks = [Check("PostgreSQL", OK, f"reachable at {sink.where}")]
            if not schema_exists(conn, sink.table.schema):
                return [
                    *checks,
                    Check(
                        "schema",
                        FAILING,
                        f"schema {sink.table.schema!r} does not exist",
                        f"CREATE SCHEMA {sink.table.schema}",
                    ),
                ]
            checks.append(_control_tables(sink, conn))
            checks.extend(_target_table(sink, conn))
            return checks

    return checked("PostgreSQL", run)


def _control_tables(sink: PostgresParts, conn: psycopg.Connection[Any]) -> Check:
    names = [HEADS, SHARD_COMMITS, DEAD_LETTERS]
    if sink.upsert is not None and sink.upsert.tombstone_column is not None:
        names.append(TOMBSTONES)
    missing = [n for n in names if regclass(conn, TableName(sink.table.schema, n)) is None]
    what = f"head and control tables ({', '.join(names)})"
    if missing:
        return absent(what, f"{', '.join(missing)} created by the sink at every start")
    return Check(what, OK, f"present in schema {sink.table.schema}")


def _target_table(sink: PostgresParts, conn: psycopg.Connection[Any]) -> list[Check]:
    name = f"table {sink.table}"
    oid = regclass(conn, sink.table)
    if oid is None:
        if sink.create_table:
            created_by = "the sink creates it from the stream's schema at the first batch"
            return [absent(name, created_by, create_now=False)]
        return [
            Check(
                name,
                FAILING,
                "does not exist and create_table is off: the start would refuse",
                "create it (with the stream's columns, record_id uuid, epoch bigint), or set "
                "create_table: true",
            )
        ]
    columns = table_columns(conn, oid)
    missing = [c for c in (sink.id_column, sink.epoch_column) if c not in columns]
    checks = [
        Check(name, OK, "present")
        if not missing
        else Check(
            name,
            FAILING,
            f"lacks the column(s) {missing} the sink writes",
            f"ALTER TABLE {sink.table} ADD COLUMN ... for {missing}",
        )
    ]
    checks.append(_unique_index(sink, conn, oid))
    return checks


def _unique_index(sink: PostgresParts, conn: psycopg.Connection[Any], oid: int) -> Check:
    name = f"unique index on {sink.id_column}"
    if sink.mode == "append":
        return Check(name, OK, "not needed in mode append (the dedup catalog keeps duplicates out)")
    if has_unique_index_on(conn, oid, sink.id_column):
        return Check(name, OK, f"present: a re-written {sink.id_column} is a no-op")
    return Check(
        name,
        FAILING,
        f"missing: a re-written record would be stored twice (mode {sink.mode} needs it); "
        "the start would refuse",
        f"CREATE UNIQUE INDEX ON {sink.table} ({sink.id_column})",
    )
