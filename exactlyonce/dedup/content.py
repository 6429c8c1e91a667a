"""Record IDs for records without a key (``id_from="content"``): the whole row, hashed, plus
its occurrence number among identical rows of the epoch.

``ID = md5(C + "#" + n)``, 32 hex digits (128 bits), where ``C`` is the MD5 of the row's
canonical encoding and ``n`` = 1, 2, ... numbers the rows of the epoch that share ``C``
(Spark's ``row_number()`` over a window partitioned by ``C``). Identical rows cannot be told
apart, so any order of numbering gives the same SET of IDs: two identical log lines in one
batch are two records, and a re-run of the epoch (same rows) gives the same IDs. Spark's JVM
computes it in the executors; the driver never sees a row, and no partition id or epoch
goes in (SPARK-28650).

The canonical encoding is a compact JSON array (Jackson's escaping: ``\\uXXXX`` in upper
case) of one text per column, the columns in order of their NAMES (so reordering columns
keeps the IDs), ``null`` for a null value. The text of a value, by Spark type:

- string: the value itself;  byte, short, int, long: decimal digits;  boolean: true/false
- float, double: the exact double in Java's hexadecimal form (``Double.toHexString``:
  ``0x1.8p0``), ``NaN``, ``Infinity``, ``-Infinity``
- decimal: plain digits with the column's scale (``1.50``)
- date: ``yyyy-MM-dd``;  binary: upper-case hex
- timestamp: microseconds since 1970-01-01 UTC: the instant, whatever the session time zone
- timestamp_ntz: Spark's text ``yyyy-MM-dd HH:mm:ss[.fraction]`` (trailing zeros dropped)
- array, map, struct: Spark's ``to_json`` with null fields kept; other types: Spark's cast to
  string. :func:`content_record_ids` (the Python twin) does not reproduce these two.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType, StructType

OCCURRENCE_SEPARATOR = "#"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)

# -- Spark ------------------------------------------------------------------------------


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _spark_text(name: str, kind: DataType) -> Column:
    """The canonical text of one column (null stays null)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    c = F.col(_quoted(name))
    if isinstance(kind, T.StringType):
        text = c
    elif isinstance(kind, (T.FloatType, T.DoubleType)):
        text = F.format_string("%a", c.cast("double"))  # exact; format_string(null) is 'null'
    elif isinstance(kind, T.TimestampType):
        text = F.unix_micros(c).cast("string")
    elif isinstance(kind, T.BinaryType):
        text = F.hex(c)
    elif isinstance(kind, (T.ArrayType, T.MapType, T.StructType)):
        text = F.to_json(c, {"ignoreNullFields": "false"})
    else:  # integral, boolean, decimal, date, timestamp_ntz, and whatever else casts
        text = c.cast("string")
    return F.when(c.isNotNull(), text)


def content_hash_column(schema: StructType) -> Column:
    """``C``: the MD5 of the row's canonical encoding (see the module docstring)."""
    from pyspark.sql import functions as F

    fields = sorted(schema.fields, key=lambda f: f.name)
    return F.md5(F.to_json(F.array(*[_spark_text(f.name, f.dataType) for f in fields])))


def content_id_column(schema: StructType) -> Column:
    """The record ID of a keyless row: ``md5(C + "#" + n)``, never null."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    content = content_hash_column(schema)
    occurrence = F.row_number().over(Window.partitionBy(content).orderBy(content))
    return F.md5(F.concat(content, F.lit(OCCURRENCE_SEPARATOR), occurrence.cast("string")))


# -- the Python twin ------------------------------------------------------------------


def java_hex(value: float) -> str:
    """Java's ``Double.toHexString`` (what Spark's ``format_string('%a', d)`` gives)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    text = float.hex(value)  # [-]0x1.8000000000000p+0
    sign = "-" if text.startswith("-") else ""
    mantissa, exponent = text.lstrip("-")[2:].split("p")
    lead, fraction = mantissa.split(".")
    return f"{sign}0x{lead}.{fraction.rstrip('0') or '0'}p{int(exponent)}"


def _instant_micros(value: dt.datetime) -> int:
    """A timestamp's microseconds since the epoch; a naive one is local time, the way
    PySpark hands out ``TimestampType`` values."""
    return (value.astimezone(dt.timezone.utc) - _EPOCH) // dt.timedelta(microseconds=1)


def _wall_clock(value: dt.datetime) -> str:
    """Spark's text of a ``timestamp_ntz``: trailing zeros of the fraction dropped."""
    text = (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
        f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    )
    fraction = f"{value.microsecond:06d}".rstrip("0")
    return f"{text}.{fraction}" if fraction else text


def _text_of(value: Any, kind: str | None) -> str:
    """The canonical text of a non-null value; ``kind`` is its Spark type name, or None to
    go by the Python type (a naive datetime is then a ``timestamp``, as PySpark returns)."""
    if kind == "timestamp_ntz" and isinstance(value, dt.datetime):
        return _wall_clock(value)
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return java_hex(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime):
        return str(_instant_micros(value))
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex().upper()
    raise TypeError(
        f"the Python twin of content IDs does not encode {type(value).__name__} values "
        "(arrays, maps, structs and other types are encoded by Spark only)"
    )


_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r"}
_SHORT_ESCAPES["\t"] = "\\t"


def _json_string(text: str) -> str:
    """A JSON string as Spark's Jackson writes it: control characters as upper-case
    ``\\uXXXX``, everything else (non-ASCII included) as is."""
    out = []
    for ch in text:
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ch < " ":
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def canonical_encoding(row: Mapping[str, Any], kinds: Mapping[str, str] | None = None) -> str:
    """The row's canonical encoding (module docstring). ``kinds`` maps a column to its Spark
    type name (``StructField.dataType.typeName()``); needed for ``timestamp_ntz`` only."""
    kinds = kinds or {}
    texts = [
        "null" if row[name] is None else _json_string(_text_of(row[name], kinds.get(name)))
        for name in sorted(row)
    ]
    return "[" + ",".join(texts) + "]"


def _md5(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()


def content_record_id(
    row: Mapping[str, Any], occurrence: int, kinds: Mapping[str, str] | None = None
) -> str:
    """The ID Spark gives the ``occurrence``-th (1, 2, ...) copy of ``row`` in an epoch."""
    if occurrence < 1:
        raise ValueError("occurrences are numbered from 1")
    return _md5(_md5(canonical_encoding(row, kinds)) + OCCURRENCE_SEPARATOR + str(occurrence))


def content_record_ids(
    rows: Sequence[Mapping[str, Any]], kinds: Mapping[str, str] | None = None
) -> list[str]:
    """The IDs Spark gives an epoch's ``rows`` (each row's copies numbered in order)."""
    seen: dict[str, int] = {}
    out = []
    for row in rows:
        content = _md5(canonical_encoding(row, kinds))
        seen[content] = seen.get(content, 0) + 1
        out.append(_md5(content + OCCURRENCE_SEPARATOR + str(seen[content])))
    return out


def spark_kinds(schema: StructType) -> dict[str, str]:
    """``kinds`` for :func:`canonical_encoding` from a Spark schema."""
    return {f.name: f.dataType.typeName() for f in schema.fields}


__all__ = [
    "canonical_encoding",
    "content_hash_column",
    "content_id_column",
    "content_record_id",
    "content_record_ids",
    "java_hex",
    "spark_kinds",
]
