"""PostgreSQL names, DDL and catalog queries used by the PostgreSQL sink.

Every identifier is quoted with ``psycopg.sql``; nothing from config is pasted into SQL text.

Tables the sink keeps next to the target table, in the same schema:

``exactlyonce_heads``
    one row per (query_name, sink): the last committed epoch, the Spark query id that wrote
    it (DESIGN invariant 9) and the shard count fixed at the query's first start.
``exactlyonce_shard_commits``
    one row per (query_name, sink, epoch, shard) committed by a task in the same transaction
    as the shard's rows; rows at or below the head are deleted when the head advances.
``exactlyonce_dead_letters``
    records that could not be written, with epoch, record ID, error and JSON payload; written
    in the shard's transaction, so a re-run never doubles them. On the ``format("exactlyonce")``
    path (no shard markers) each letter also has a ``letter_key`` (the Spark partition, a
    digest of the letter, and its count among identical letters of the task), unique per
    (query, sink, epoch), so a re-run of the same partition writes none of them again.
``exactlyonce_frontiers``
    Spark Real-time Mode only (:mod:`.realtime`): one row per (query_name, sink, source
    topic, source partition) with ``next_offset``, the next source offset to write, stored
    in the transaction of each chunk; with the epoch, Spark's query id and partition and the
    writer that last moved it.
``exactlyonce_tombstones``
    ``mode="upsert"`` with a ``tombstone_column`` only: one row per (target table, record ID)
    deleted, with the epoch of the delete, so a re-run of an older epoch cannot bring the key
    back. Kept until an upsert of a newer epoch replaces it (see :mod:`.upsert`).

A target table created by the sink has the stream's columns (types below), then
``record_id uuid NOT NULL`` and ``epoch bigint NOT NULL``; in ``mode="insert"`` and
``"upsert"`` a unique index on ``record_id``, in ``mode="append"`` an index on ``epoch`` (to
rebuild a lost catalog).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from psycopg import sql

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql.types import DataType, StructType

HEADS = "exactlyonce_heads"
SHARD_COMMITS = "exactlyonce_shard_commits"
DEAD_LETTERS = "exactlyonce_dead_letters"
DEAD_LETTER_KEYS = "exactlyonce_dead_letters_key"  # the unique index on letter_key
CONTROL_DDL_LOCK = 0x656F_6464  # pg_advisory_xact_lock key: one control-table DDL at a time
TOMBSTONES = "exactlyonce_tombstones"
FRONTIERS = "exactlyonce_frontiers"


@dataclass(frozen=True)
class TableName:
    schema: str
    name: str

    @classmethod
    def parse(cls, qualified: str) -> TableName:
        schema, dot, name = qualified.partition(".")
        return cls(schema, name) if dot else cls("public", qualified)

    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)

    def sibling(self, name: str) -> sql.Identifier:
        return sql.Identifier(self.schema, name)

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}"


def pg_type(dtype: DataType) -> str:
    """The PostgreSQL column type for a Spark type (complex types become jsonb)."""
    from pyspark.sql import types as T

    simple: dict[type[DataType], str] = {
        T.StringType: "text",
        T.LongType: "bigint",
        T.IntegerType: "integer",
        T.ShortType: "smallint",
        T.ByteType: "smallint",
        T.DoubleType: "double precision",
        T.FloatType: "real",
        T.BooleanType: "boolean",
        T.TimestampType: "timestamptz",
        T.TimestampNTZType: "timestamp",
        T.DateType: "date",
        T.BinaryType: "bytea",
    }
    if isinstance(dtype, T.DecimalType):
        return f"numeric({dtype.precision},{dtype.scale})"
    if isinstance(dtype, (T.ArrayType, T.MapType, T.StructType, T.VariantType)):
        return "jsonb"
    return simple.get(type(dtype), "text")


def control_tables_ddl(table: TableName, *, tombstones: bool = False) -> list[sql.Composed]:
    statements = [
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (query_name text NOT NULL, sink text NOT NULL, "
            "epoch bigint NOT NULL, spark_query_id text, num_shards integer NOT NULL, "
            "updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (query_name, sink))"
        ).format(table.sibling(HEADS)),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (query_name text NOT NULL, sink text NOT NULL, "
            "epoch bigint NOT NULL, shard integer NOT NULL, writer text, "
            "committed_at timestamptz NOT NULL DEFAULT now(), "
            "PRIMARY KEY (query_name, sink, epoch, shard))"
        ).format(table.sibling(SHARD_COMMITS)),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (id bigserial PRIMARY KEY, query_name text NOT NULL, "
            "sink text NOT NULL, epoch bigint NOT NULL, shard integer, record_id text, "
            "error text NOT NULL, payload text, created_at timestamptz NOT NULL DEFAULT now(), "
            "letter_key text)"
        ).format(table.sibling(DEAD_LETTERS)),
        # Tables made before letter_key existed get it here (NULL for every old letter).
        sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS letter_key text").format(
            table.sibling(DEAD_LETTERS)
        ),
        # NULLs are distinct: letters of the foreachBatch path (no key) never conflict.
        sql.SQL(
            "CREATE UNIQUE INDEX IF NOT EXISTS {} ON {} (query_name, sink, epoch, letter_key)"
        ).format(sql.Identifier(DEAD_LETTER_KEYS), table.sibling(DEAD_LETTERS)),
    ]
    if tombstones:
        statements.append(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (target text NOT NULL, record_id uuid NOT NULL, "
                "epoch bigint NOT NULL, deleted_at timestamptz NOT NULL DEFAULT now(), "
                "PRIMARY KEY (target, record_id))"
            ).format(table.sibling(TOMBSTONES))
        )
    return statements


def frontiers_ddl(table: TableName) -> sql.Composed:
    """The source frontiers of Real-time Mode writers (see :mod:`.realtime`)."""
    return sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (query_name text NOT NULL, sink text NOT NULL, "
        "topic text NOT NULL, partition integer NOT NULL, next_offset bigint NOT NULL, "
        "epoch bigint NOT NULL, spark_query_id text, spark_partition integer, writer text, "
        "updated_at timestamptz NOT NULL DEFAULT now(), "
        "PRIMARY KEY (query_name, sink, topic, partition))"
    ).format(table.sibling(FRONTIERS))


def create_table_ddl(
    table: TableName, schema: StructType, id_column: str, epoch_column: str, unique: bool
) -> list[sql.Composed]:
    columns = [
        sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(pg_type(f.dataType)))
        for f in schema.fields
    ]
    columns.append(sql.SQL("{} uuid NOT NULL").format(sql.Identifier(id_column)))
    columns.append(sql.SQL("{} bigint NOT NULL").format(sql.Identifier(epoch_column)))
    statements = [
        sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
            table.ident(), sql.SQL(", ").join(columns)
        )
    ]
    if not unique:  # append mode: the catalog is rebuilt from recent epochs
        statements.append(
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({})").format(
                sql.Identifier(f"{table.name}_{epoch_column}_idx"[:63]),
                table.ident(),
                sql.Identifier(epoch_column),
            )
        )
    if unique:
        statements.append(
            sql.SQL("CREATE UNIQUE INDEX IF NOT EXISTS {} ON {} ({})").format(
                sql.Identifier(f"{table.name}_{id_column}_key"[:63]),
                table.ident(),
                sql.Identifier(id_column),
            )
        )
    return statements


def regclass(conn: psycopg.Connection[tuple[object, ...]], table: TableName) -> int | None:
    """The table's oid, or None when it does not exist."""
    row = conn.execute("SELECT to_regclass(%s)::oid", [table.ident().as_string(conn)]).fetchone()
    return int(row[0]) if row and row[0] is not None else None  # type: ignore[call-overload]


def table_columns(conn: psycopg.Connection[tuple[object, ...]], oid: int) -> dict[str, str]:
    rows = conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        [oid],
    ).fetchall()
    return {str(name): str(kind) for name, kind in rows}


def has_unique_index_on(
    conn: psycopg.Connection[tuple[object, ...]], oid: int, column: str
) -> bool:
    """True when a non-partial unique index (or key) covers exactly ``column``."""
    row = conn.execute(
        "SELECT 1 FROM pg_index i JOIN pg_attribute a "
        "ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] "
        "WHERE i.indrelid = %s AND i.indisunique AND i.indnkeyatts = 1 "
        "AND i.indpred IS NULL AND a.attname = %s",
        [oid, column],
    ).fetchone()
    return row is not None


def schema_exists(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> bool:
    row = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema]).fetchone()
    return row is not None
