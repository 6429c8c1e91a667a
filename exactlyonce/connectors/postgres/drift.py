"""Schema drift between the stream and an existing table: the checks that keep a changed
stream schema (a column added, removed or retyped between two runs of a query) from losing
data without a word.

PostgreSQL parses every COPY value with the column type's input function. A value it cannot
parse is an error, which sends the record to the dead letters (never silent). Some values parse
*with loss*, silently: a double into ``real`` (rounded to 6 digits), a timestamp into ``date``
(the time of day dropped), a decimal into a ``numeric`` of smaller scale (rounded), a 64-bit
integer into ``double precision`` (rounded above 2**53). Those pairs are refused here, naming
the column, before anything is written. A table column the stream no longer writes is filled
with NULL (or its default); one declared ``NOT NULL`` without a default is refused, because
every record would otherwise fail.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql.types import DataType

_NUMERIC_SCALE = re.compile(r"numeric\((\d+),(\d+)\)")


def silent_loss(dtype: DataType, table_type: str) -> str | None:
    """What a value of Spark type ``dtype`` loses, without an error, when PostgreSQL stores
    it in a column of ``table_type`` (``format_type`` form); None when nothing is lost
    silently (a value that does not fit is refused by PostgreSQL: a dead letter)."""
    from pyspark.sql import types as T

    wide_integers = (T.IntegerType, T.LongType)
    if table_type == "real" and isinstance(dtype, (T.DoubleType, T.DecimalType, *wide_integers)):
        return "rounded to about 6 significant digits"
    beyond_double = isinstance(dtype, T.LongType) or (
        isinstance(dtype, T.DecimalType) and dtype.precision > 15
    )
    if table_type == "double precision" and beyond_double:
        return "rounded to about 15 significant digits"
    if table_type == "date" and isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
        return "cut to its date (the time of day dropped)"
    scale = _NUMERIC_SCALE.fullmatch(table_type)
    if scale is not None:
        kept = int(scale.group(2))
        if (isinstance(dtype, T.DecimalType) and dtype.scale > kept) or isinstance(
            dtype, (T.DoubleType, T.FloatType)
        ):
            return f"rounded to {kept} decimal places"
    return None


def required_columns(conn: psycopg.Connection[Any], oid: int) -> list[str]:
    """Columns declared NOT NULL with no default (nor identity, nor generated): a row must
    give them a value."""
    rows = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
        "AND NOT attisdropped AND attnotnull AND NOT atthasdef AND attidentity = '' "
        "AND attgenerated = '' ORDER BY attnum",
        [oid],
    ).fetchall()
    return [str(r[0]) for r in rows]
