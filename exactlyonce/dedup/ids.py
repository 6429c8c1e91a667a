"""Deterministic record IDs.

A record ID is the 128-bit MD5 of a canonical encoding of the key columns: with one key
column, its value cast to a string; with several, the JSON array of the values cast to
strings (compact, no escaping of non-ASCII). The same logical record gets the same ID in
every re-run of an epoch, in every process and on every executor, because the hash is
computed by Spark's JVM from the values alone. IDs never come from partition IDs or epochs
(SPARK-28650: a re-run need not put the same rows in the same partition).

A record with a null key column has no ID. It is a bad record and goes to the dead-letter
destination; it never gets a random ID.

Records without a key (log lines, metrics) take their ID from their content instead
(:meth:`RecordIdSpec.from_content`, ``id_from="content"``): the whole row hashed, plus its
occurrence number among identical rows of the epoch (see :mod:`.content`). Such an ID is
never null.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from exactlyonce.dedup.content import content_id_column
from exactlyonce.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

KAFKA_SOURCE_COLUMNS = ("topic", "partition", "offset")

# Where a sink's record IDs come from: the key columns it names, or the whole row.
IdFrom = Literal["columns", "content"]
ID_FROM: tuple[IdFrom, ...] = get_args(IdFrom)


@dataclass(frozen=True)
class RecordIdSpec:
    """What makes a record's identity: the key ``columns``, or (``content``) the whole row
    and its occurrence number among identical rows of the epoch."""

    columns: tuple[str, ...] = ()
    content: bool = False

    def __post_init__(self) -> None:
        if self.content:
            if self.columns:
                raise ConfigError(
                    "id_from", "content IDs hash the whole row: name no id_columns with them"
                )
            return
        if not self.columns:
            raise ConfigError("id_columns", "name at least one column that identifies a record")
        for name in self.columns:
            if not isinstance(name, str) or not name:
                raise ConfigError(
                    "id_columns", f"column names must be non-empty strings, got {name!r}"
                )
        if len(set(self.columns)) != len(self.columns):
            raise ConfigError("id_columns", f"duplicate column in {list(self.columns)}")

    @classmethod
    def from_columns(cls, columns: Sequence[str] | str) -> RecordIdSpec:
        if isinstance(columns, str):
            columns = [columns]
        return cls(tuple(columns))

    @classmethod
    def from_kafka_source(cls) -> RecordIdSpec:
        """IDs from source coordinates: Kafka topic, partition and offset."""
        return cls(KAFKA_SOURCE_COLUMNS)

    @classmethod
    def from_content(cls) -> RecordIdSpec:
        """IDs from the whole row and its occurrence number (:mod:`.content`), for records
        without a key. Safe only when every re-run of an epoch holds the same rows."""
        return cls(content=True)

    @property
    def id_from(self) -> IdFrom:
        return "content" if self.content else "columns"

    def missing_from(self, available: Sequence[str]) -> list[str]:
        return [c for c in self.columns if c not in available]

    def column(self, schema: StructType | None = None) -> Column:
        """The Spark expression of the ID: 32 hex digits, or null when a key column is null.
        Content IDs (never null) hash every column of ``schema``, the stream's."""
        from pyspark.sql import functions as F

        if self.content:
            if schema is None:
                raise ValueError("content IDs hash every column: pass the stream's schema")
            return content_id_column(schema)
        as_text = [F.col(c).cast("string") for c in self.columns]
        any_null = F.lit(False)
        for c in self.columns:
            any_null = any_null | F.col(c).isNull()
        # One column: its text is already a canonical encoding (and hashing it directly is
        # about twice as cheap in the JVM as building JSON). Several: a JSON array of texts.
        encoded = as_text[0] if len(as_text) == 1 else F.to_json(F.array(*as_text))
        return F.when(any_null, F.lit(None)).otherwise(F.md5(encoded))

    @property
    def may_be_null(self) -> bool:
        """Whether a record can lack an ID (a null key column): content IDs never do."""
        return not self.content

    def null_key_reason(self) -> Column:
        """A Spark expression naming the null key columns of a bad record."""
        from pyspark.sql import functions as F

        parts = [F.when(F.col(c).isNull(), F.lit(c)) for c in self.columns]
        return F.concat(F.lit("null key column(s): "), F.concat_ws(", ", *parts))


def record_id(values: Sequence[Any]) -> str:
    """The same ID as :meth:`RecordIdSpec.column`, computed in Python.

    Exact for strings and integers; other types follow Spark's cast to string, which this does
    not reproduce. Tests and audits use it to compute expected IDs.
    """
    if any(v is None for v in values):
        raise ValueError("a record with a null key column has no ID")
    if len(values) == 1:
        encoded = str(values[0])
    else:
        encoded = json.dumps([str(v) for v in values], separators=(",", ":"), ensure_ascii=False)
    return hashlib.md5(encoded.encode("utf-8")).hexdigest()


def with_record_ids(df: DataFrame, spec: RecordIdSpec, id_column: str) -> DataFrame:
    return df.withColumn(id_column, spec.column(df.schema))
