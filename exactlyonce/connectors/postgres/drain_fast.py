"""The drain's fast path: JSON values -> Arrow columns -> CSV for ``COPY``.

The values become columns in Arrow (``pyarrow.json`` with the table's own column types, so
nothing is guessed), then CSV (as PostgresSink's tasks write their COPY). A table with a
column type that has no exact Arrow equivalent (``jsonb``, arrays, ``bytea``...) has no fast
path; a chunk Arrow cannot read takes the exact path (:mod:`.exact_path`), which says why.
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from exactlyonce.connectors.base.frames import RECORD_ID_BYTES
from exactlyonce.connectors.postgres.writer import to_csv

log = logging.getLogger("exactlyonce.buffer")


# PostgreSQL column types whose text input reads exactly what Arrow writes to CSV from the
# JSON value: integers and floats as numbers, booleans, and types whose JSON form is a string.
_ARROW_TYPES: dict[str, pa.DataType] = {
    "bigint": pa.int64(),
    "integer": pa.int64(),
    "smallint": pa.int64(),
    "double precision": pa.float64(),
    "real": pa.float64(),
    "boolean": pa.bool_(),
    **{
        name: pa.string()
        for name in (
            "text",
            "character varying",
            "character",
            "uuid",
            "date",
            "timestamp with time zone",
            "timestamp without time zone",
            "time without time zone",
            "time with time zone",
            "interval",
        )
    },
}
_TYPE_MODIFIER = re.compile(r"\(\d+\)")


def arrow_type(pg_type: str) -> pa.DataType | None:
    """The Arrow type that reads a JSON value of a ``pg_type`` column exactly, or None.

    ``numeric(p,s)`` reads as ``decimal128(p, s)`` (Arrow refuses to round: a value with more
    digits fails the fast path instead); ``jsonb``, arrays, ``bytea`` and the rest have none.
    """
    if pg_type.startswith("numeric(") and pg_type.endswith(")"):
        precision, _, scale = pg_type[len("numeric(") : -1].partition(",")
        if precision.isdigit() and scale.isdigit() and 0 < int(precision) <= 38:
            return pa.decimal128(int(precision), int(scale))
        return None
    return _ARROW_TYPES.get(_TYPE_MODIFIER.sub("", pg_type))  # varchar(40), timestamp(3) ...


def json_options(
    types: Mapping[str, str], header_columns: Sequence[str], where: str
) -> pajson.ParseOptions | None:
    """How Arrow reads the values of a table with these column ``types``, or None when a
    column has no exact Arrow type (the rows then always take the exact path).
    ``header_columns`` (the ID and epoch) come from the headers, not the value."""
    fields = []
    for name, pg_type in types.items():
        if name in header_columns:
            continue
        kind = arrow_type(pg_type)
        if kind is None:
            log.info("%s: column %s is %s: drained rows take the exact path", where, name, pg_type)
            return None
        fields.append(pa.field(name, kind))
    schema = pa.schema(fields)
    return pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")


def copy_csv(
    options: pajson.ParseOptions,
    columns: Sequence[str],
    id_column: str,
    epoch_column: str,
    ids: Sequence[bytes],
    epochs: Sequence[int],
    values: Sequence[bytes],
    counts: Sequence[int] | None = None,
) -> bytes | None:
    """The rows as CSV in ``columns`` order, sorted by record ID, or None when a value is not
    a row Arrow reads exactly (see :meth:`PgDrainTarget.csv`)."""
    n = sum(counts) if counts is not None else len(values)
    blob = b"".join(ids)
    if len(blob) != n * RECORD_ID_BYTES:
        return None
    try:
        table = pajson.read_json(io.BytesIO(b"\n".join(values)), parse_options=options)
    except (pa.ArrowException, TypeError):
        return None  # not JSON objects of the table's types; the exact path says which
    if table.num_rows != n:
        return None  # a value held a line break: one record, several lines
    arrays = []
    for name in columns:
        if name == id_column:
            fixed = pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(RECORD_ID_BYTES), n, [None, pa.py_buffer(blob)]
            )
            arrays.append(pc.utf8_lower(fixed.cast(pa.binary()).cast(pa.string())))
        elif name == epoch_column:
            per_message = np.asarray(epochs, dtype=np.int64)
            repeat = per_message if counts is None else np.repeat(per_message, counts)
            arrays.append(pa.array(repeat, pa.int64()))
        else:
            arrays.append(table.column(name))
    rows = pa.table(arrays, names=list(columns)).sort_by(id_column)
    try:
        return to_csv(rows)  # as PostgresSink's tasks write their COPY
    except pa.ArrowException:
        return None
