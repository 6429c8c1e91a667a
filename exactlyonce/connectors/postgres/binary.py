"""COPY in PostgreSQL's binary format, where every column's value travels as the column
type's own wire form, so the server parses no text.

What it saves the server is measured in ``bench/results/postgres_stages.json`` and
``bench/results/postgres.json``. A batch goes in binary only when every column's Arrow type
has exactly the table column's wire form (:data:`WIRE_TYPES`; the record ID, 32 hex digits,
as a ``uuid`` of 16 bytes); otherwise, or without the ``pgpq`` encoder, it goes as CSV,
which PostgreSQL parses with each column's input function as before. Nothing is cast here:
a value either keeps its exact form or the batch is not sent in binary.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

# Arrow type name -> the PostgreSQL column type (``format_type``) whose binary receive
# function reads exactly the bytes the encoder writes for it.
WIRE_TYPES: Mapping[str, str] = {
    "string": "text",
    "large_string": "text",
    "int64": "bigint",
    "int32": "integer",
    "int16": "smallint",
    "double": "double precision",
    "float": "real",
    "bool": "boolean",
}
UUID_HEX_DIGITS = 32

_NIBBLE = np.full(256, 255, np.uint8)  # hex digit (either case) -> its value; 255: not one
for _digits in (b"0123456789abcdef", b"0123456789ABCDEF"):
    _NIBBLE[np.frombuffer(_digits, np.uint8)] = np.arange(16, dtype=np.uint8)


def encoder_available() -> bool:
    """True when the ``pgpq`` encoder can be imported (it is a dependency; a build without
    it falls back to CSV)."""
    try:
        import pgpq  # noqa: F401
    except ImportError:
        return False
    return True


def uuid_bytes(ids: pa.Array) -> pa.Array | None:
    """The record IDs (strings of 32 hex digits) as 16-byte values, ``uuid``'s binary form;
    None when any ID is null or is not 32 hex digits (the batch then goes as CSV)."""
    import pyarrow as pa

    if ids.null_count or not pa.types.is_string(ids.type):
        return None
    offsets = np.frombuffer(ids.buffers()[1], np.int32)[ids.offset : ids.offset + len(ids) + 1]
    if not (np.diff(offsets) == UUID_HEX_DIGITS).all():
        return None
    start = int(offsets[0])
    data = np.frombuffer(ids.buffers()[2], np.uint8)[start : start + UUID_HEX_DIGITS * len(ids)]
    nibbles = _NIBBLE[data.reshape(-1, UUID_HEX_DIGITS)]
    if (nibbles == 255).any():
        return None
    packed = (nibbles[:, 0::2] << 4) | nibbles[:, 1::2]
    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(16), len(ids), [None, pa.py_buffer(packed.tobytes())]
    )


def binary_copy(
    batch: pa.RecordBatch, table_types: Mapping[str, str], id_column: str
) -> bytes | None:
    """The whole COPY stream (header, rows, trailer) of ``batch`` in binary, or None when a
    column's form is not exactly its table column's (the caller sends CSV)."""
    import pyarrow as pa
    from pgpq import ArrowToPostgresBinaryEncoder

    columns: list[pa.Array] = []
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        wanted = table_types.get(name)
        if name == id_column and wanted == "uuid":
            packed = uuid_bytes(column)
            if packed is None:
                return None
            columns.append(packed)
        elif wanted is not None and WIRE_TYPES.get(str(column.type)) == wanted:
            columns.append(column)
        else:
            return None
    encodable = pa.RecordBatch.from_arrays(columns, names=batch.schema.names)
    encoder = ArrowToPostgresBinaryEncoder(encodable.schema)
    return encoder.write_header() + encoder.write_batch(encodable) + encoder.finish()
