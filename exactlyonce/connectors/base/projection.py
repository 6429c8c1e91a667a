"""The columns every sink adds to a batch in the driver: record ID, epoch, and for records
without a key the dead-letter reason and payload. Spark computes them in the executors."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from exactlyonce.connectors.base.columns import ERROR_COLUMN, PAYLOAD_COLUMN
from exactlyonce.dedup.ids import RecordIdSpec

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import StructType

T = TypeVar("T")


def id_expressions(
    ids: RecordIdSpec, schema: StructType, id_column: str
) -> tuple[list[Column], list[Column]]:
    """The columns before and after the epoch: the user's columns and the record ID, then
    the dead-letter reason and payload (set only where the key is null; content IDs are
    never null, so theirs are null literals and the ID's window is evaluated once)."""
    from pyspark.sql import functions as F

    names: Sequence[str] = schema.names
    rid = ids.column(schema)
    user_columns = [F.col(c) for c in names]
    if not ids.may_be_null:
        none = F.lit(None).cast("string")
        return [*user_columns, rid.alias(id_column)], [
            none.alias(ERROR_COLUMN),
            none.alias(PAYLOAD_COLUMN),
        ]
    payload = F.to_json(F.struct(*user_columns), {"ignoreNullFields": "false"})
    return [*user_columns, rid.alias(id_column)], [
        F.when(rid.isNull(), ids.null_key_reason()).alias(ERROR_COLUMN),
        F.when(rid.isNull(), payload).alias(PAYLOAD_COLUMN),
    ]


class ExpressionMemo:
    """``build()``, kept per ``key`` (a schema): Spark column expressions are unresolved, so
    the next epoch's DataFrame of the same schema reuses them. Building them anew cost about
    250 py4j round trips (0.1-0.2 s) per epoch in the driver."""

    LIMIT = 16  # a schema that keeps changing: do not grow without bound

    def __init__(self) -> None:
        self._built: dict[Hashable, Any] = {}

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        if key not in self._built:
            if len(self._built) >= self.LIMIT:
                self._built.clear()
            self._built[key] = build()
        return cast("T", self._built[key])


# Python's json writes a control character's escape in lower-case hex, Spark's (Jackson) in
# upper case; an escaped backslash before "u00" is text, not an escape.
_LOWER_HEX_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u00([0-9a-f]{2})")


def json_like_spark(record: Mapping[str, Any]) -> str:
    """``record`` as Spark's ``to_json(struct(...), {"ignoreNullFields": "false"})`` writes it,
    byte for byte for flat strings, integers, booleans and nulls (the types the Spark data
    source path converts in Python); any other value is written as its ``str``."""
    text = json.dumps(record, default=str, ensure_ascii=False, separators=(",", ":"))
    return _LOWER_HEX_ESCAPE.sub(lambda m: m.group(1) + "\\u00" + m.group(2).upper(), text)
