"""A share's records as the Redis sink's apply code takes them (``records.lua`` chunks): the
exact path, record by record (:mod:`.redis_fast` is the column-wise fast path).

A buffer record is its row as a JSON object (Spark's ``to_json`` of every column, nulls kept).
The chunks are built by the RedisSink's own encoder
(:func:`~exactlyonce.connectors.redis.task.encode_records`, keys rendered by the sink's
:class:`~exactlyonce.connectors.redis.KeyTemplate`) from the rows' columns as text:

- ``string`` mode stores the JSON line itself: the very value the RedisSink ``SET``\\ s;
- ``hash`` and ``stream`` store each column as text, as the RedisSink does: strings as they
  are, numbers as the JSON text Spark wrote (what Spark's cast to string writes for integers,
  decimals and doubles), booleans ``true``/``false``, nested values as compact JSON, nulls left
  out. One difference remains: a timestamp is ISO 8601 in the buffer's JSON
  (``2026-01-02T03:04:05.000Z``) where the RedisSink's cast writes ``2026-01-02 03:04:05``.

A record whose value is not a JSON object, or whose key-template column is null, is a dead
letter (with why), as in the sink.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from exactlyonce.connectors.base.drain import Chunk, Letter
from exactlyonce.connectors.base.frames import value_problem
from exactlyonce.connectors.redis import VALUE_COLUMN, RedisSink
from exactlyonce.connectors.redis.task import MAX_INLINE_BYTES, encode_records


@dataclass
class EncodedShare:
    """The share's records as script chunks (ARGV), how many, the stored columns (the
    script's ``fields``; none in string mode), and its dead letters."""

    chunks: list[bytes] = field(default_factory=list)
    records: int = 0
    fields: list[str] = field(default_factory=list)
    letters: list[Letter] = field(default_factory=list)


@dataclass
class _Rows:
    """Decoded records, column-wise as they are gathered."""

    ids: list[str] = field(default_factory=list)
    epochs: list[str] = field(default_factory=list)
    docs: list[dict[str, Any]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def as_text(value: Any) -> str | None:
    """A JSON value (numbers decoded as their text) as Redis stores a column."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


_TEXTS = json.JSONDecoder(parse_float=str, parse_int=str)  # numbers as the text Spark wrote
_PLAIN = json.JSONDecoder()


def decode(value: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """The record's columns (top-level numbers as their JSON text), or why it has none.

    Nested values are decoded again without that (their numbers stay numbers). One decoder
    of each kind serves every call (``json.loads`` with hooks builds a decoder per call)."""
    problem = value_problem(value)
    if problem is not None:
        return None, problem
    text = value.decode()
    try:
        doc = _TEXTS.decode(text)
    except ValueError as exc:
        return None, f"undecodable value: not JSON ({exc})"
    if not isinstance(doc, dict):
        return None, "undecodable value: not a JSON object"
    maybe_nested = value.find(b"{", 1) >= 0 or b"[" in value
    if maybe_nested and any(isinstance(v, (dict, list)) for v in doc.values()):
        plain = _PLAIN.decode(text)
        doc = {k: plain[k] if isinstance(v, (dict, list)) else v for k, v in doc.items()}
    return doc, None


def exact_share(sink: RedisSink, chunk: Chunk, where: list[int]) -> EncodedShare:
    """The records of the messages at ``where`` of ``chunk`` as chunks for ``sink``'s apply
    code, decoded one by one (the exact path: every record looked at, the bad ones found),
    and the dead letters."""
    out = EncodedShare()
    rows = _Rows()
    template_fields = sink.template.fields
    for i, k, rid, value in chunk.records(where):
        doc, problem = decode(value)
        if doc is not None:
            null = [f for f in template_fields if doc.get(f) is None]
            if null:
                problem = f"null key template column(s): {', '.join(null)}"
        if problem is not None or doc is None:
            out.letters.append((chunk.source(i, k, rid, value), problem or "no value"))
            continue
        rows.ids.append(rid.decode().lower())
        rows.epochs.append(str(chunk.epochs[i]))
        rows.docs.append(doc)
        if sink.write == "string":
            rows.lines.append(value.decode())
    out.records = len(rows.ids)
    out.fields = stored_fields(sink, dict.fromkeys(name for doc in rows.docs for name in doc))
    out.chunks = to_chunks(sink, _batch(sink, rows, out.fields), out.fields, rows.epochs)
    return out


def stored_fields(sink: RedisSink, names: Iterable[str]) -> list[str]:
    """The columns hash and stream modes store: every column of the records, first seen
    first, but the sink's ID and epoch fields (none in string mode: the line is stored)."""
    if sink.write == "string":
        return []
    reserved = (sink.id_field, sink.epoch_field, VALUE_COLUMN)
    return [name for name in names if name not in reserved]


def to_chunks(
    sink: RedisSink, batch: pa.RecordBatch, fields: list[str], epochs: list[str]
) -> list[bytes]:
    """The records of ``batch`` (their columns as text) as the apply code's chunks: at most
    ``pipeline_size`` records, and halved while one is over 8 MiB."""
    size = sink.pipeline_size
    out: list[bytes] = []
    for start in range(0, batch.num_rows, size):
        out += _encoded(sink, batch, fields, epochs, start, min(batch.num_rows, start + size))
    return out


def _encoded(
    sink: RedisSink,
    batch: pa.RecordBatch,
    fields: list[str],
    epochs: list[str],
    start: int,
    end: int,
) -> list[bytes]:
    part = batch.slice(start, end - start)
    data = encode_records(part, sink.template, sink.write, fields, sink.id_field, epochs[start:end])
    if len(data) > MAX_INLINE_BYTES and end - start > 1:
        half = (start + end) // 2
        return _encoded(sink, batch, fields, epochs, start, half) + _encoded(
            sink, batch, fields, epochs, half, end
        )
    return [data]


def _batch(sink: RedisSink, rows: _Rows, fields: list[str]) -> pa.RecordBatch:
    """The records' columns as text: the key template's, the stored ``fields``, the ID, and
    in string mode the line."""
    columns = dict.fromkeys([*sink.template.fields, *fields])
    arrays = {name: _column([doc.get(name) for doc in rows.docs]) for name in columns}
    arrays[sink.id_field] = pa.array(rows.ids, pa.string())
    if sink.write == "string":
        arrays[VALUE_COLUMN] = pa.array(rows.lines, pa.string())
    return pa.RecordBatch.from_pydict(arrays)


def _column(values: Sequence[Any]) -> pa.Array:
    """Values as text; strings (numbers too, decoded as their text) as they are."""
    return pa.array(
        [v if v is None or v.__class__ is str else as_text(v) for v in values], pa.string()
    )


__all__ = ["EncodedShare", "as_text", "decode", "exact_share", "stored_fields", "to_chunks"]
