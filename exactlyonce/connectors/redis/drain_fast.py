"""The Redis drain's fast path: a share's records as columns, read by Arrow, never one by one.

The share's JSON lines are read at once by ``pyarrow.json`` (C++), and each column becomes
text in Arrow: strings as they are, integers and booleans cast (``123``, ``true``), exactly
the text the exact path (:mod:`.redis_records`) gives them. The record IDs come from the
frames' ID headers as one fixed-size binary array. A share takes the exact path instead when
Arrow cannot read it (a value that is not a JSON object), when a column is of another type
(a double, whose JSON text only the exact path keeps; a date or timestamp Arrow recognised;
nested values), or when a key-template column is null (a dead letter, which the exact path
finds and names).
"""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from exactlyonce.connectors.base.drain import Chunk
from exactlyonce.connectors.base.frames import RECORD_ID_BYTES
from exactlyonce.connectors.redis import VALUE_COLUMN, RedisSink
from exactlyonce.connectors.redis.drain_records import EncodedShare, stored_fields, to_chunks

_READ = pajson.ReadOptions(block_size=16 << 20)  # one block: one type inference for the share


def fast_share(sink: RedisSink, chunk: Chunk, where: list[int]) -> EncodedShare | None:
    """The share encoded column-wise, or None when it must take the exact path."""
    if not where:
        return EncodedShare()
    counts = [chunk.counts[i] for i in where]
    n = sum(counts)
    blob = b"\n".join(chunk.values[i] for i in where)
    try:
        table = pajson.read_json(io.BytesIO(blob), read_options=_READ)
    except (pa.ArrowException, ValueError):
        return None  # not all JSON objects: the exact path finds which
    if table.num_rows != n:
        return None  # a value held a line break: one record, several lines
    texts: dict[str, pa.Array] = {}
    for name in table.column_names:
        text = _as_text(table.column(name))
        if text is None:
            return None
        texts[name] = text
    if any(f not in texts or texts[f].null_count for f in sink.template.fields):
        return None  # a null key-template column: a dead letter, named by the exact path
    fields = stored_fields(sink, table.column_names)
    arrays = {name: texts[name] for name in dict.fromkeys([*sink.template.fields, *fields])}
    arrays[sink.id_field] = _ids(chunk, where, n)
    if sink.write == "string":
        arrays[VALUE_COLUMN] = pc.split_pattern(pa.array([blob.decode()]), "\n").flatten()
    batch = pa.RecordBatch.from_pydict(arrays)
    epochs = [e for i, c in zip(where, counts, strict=True) for e in [str(chunk.epochs[i])] * c]
    return EncodedShare(to_chunks(sink, batch, fields, epochs), n, fields, [])


def _as_text(column: pa.ChunkedArray) -> pa.Array | None:
    """A column's values as Redis stores them, or None for a type only the exact path
    writes exactly."""
    kind = column.type
    if pa.types.is_string(kind):
        return column.combine_chunks()
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_null(kind):
        return column.cast(pa.string()).combine_chunks()
    return None


def _ids(chunk: Chunk, where: list[int], n: int) -> pa.Array:
    """The records' IDs, lowercase hex, from the messages' ID headers (32 bytes each)."""
    blob = b"".join(chunk.ids[i] for i in where)
    fixed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(RECORD_ID_BYTES), n, [None, pa.py_buffer(blob)]
    )
    return pc.utf8_lower(fixed.cast(pa.binary()).cast(pa.string()))


__all__ = ["fast_share"]
