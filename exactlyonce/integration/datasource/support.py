"""Which sinks and modes the data source path serves, and why the others are refused.

The data source API hands each task the upstream plan's partition as it is: the path cannot
repartition by record ID, so a task's rows are not one shard's, and a re-run of an epoch may
split them differently (SPARK-28650). Shard-commit markers, which let the ``foreachBatch`` path
skip a shard an earlier attempt committed, would then skip rows that attempt never wrote. This
path trusts no shard marker: it is exactly-once where the destination itself makes a record's
second write a no-op, and for Kafka, which appends, through per-partition transactions whose
markers carry the partition's input fingerprint and ID claims in the catalog (see the package
docstring for each sink and mode; Kafka needs the catalog, a broker that hides aborted
records, checked at the start, and a value this path writes byte for byte).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exactlyonce.connectors import registry
from exactlyonce.connectors.base.config import SinkConfig
from exactlyonce.errors import ConfigError
from exactlyonce.integration.datasource.records import check_key_columns

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

_NOT_COPIED = ("binary", "array", "map", "struct")
# Column types whose string and JSON text the task writes exactly as Spark's cast and to_json
# do (Redis stores every value as text; see connectors/redis/projection.py).
_AS_TEXT = ("string", "tinyint", "smallint", "int", "bigint", "boolean")


def check_supported(config: SinkConfig) -> None:
    """Refuse, before the stream starts, what this path cannot write exactly once."""
    if config.id_from == "content":
        raise ConfigError(
            "id_from",
            "content IDs number identical rows across the whole epoch, which a task of the "
            "data source path cannot see: name id_columns, or use foreachBatch",
        )
    registry.kind_of(config).datasource_traits().refuse(config)
    mode = getattr(config, "mode", "insert")
    if mode != "insert":
        raise ConfigError(
            "mode",
            f"mode {mode!r} is not exactly-once through format('exactlyonce'): without a "
            "unique index (append) or with a key written by several tasks of one epoch "
            "(upsert) it needs shard-aligned tasks; use mode 'insert', or foreachBatch",
        )


def check_stream(config: SinkConfig, schema: StructType) -> None:
    """Refuse a stream column this path cannot hand the sink's task writer as it is."""
    check_key_columns(schema, config.id_columns or ())
    as_text = registry.kind_of(config).datasource_traits().text_values
    for field in schema.fields:
        kind = field.dataType.typeName()
        if kind in _NOT_COPIED:
            raise ConfigError(
                "sink",
                f"column {field.name!r} is {kind}: format('exactlyonce') writes flat columns "
                "only (to_json() it first, or use foreachBatch)",
            )
        if as_text and field.dataType.simpleString() not in _AS_TEXT:
            raise ConfigError(
                "sink",
                f"column {field.name!r} is {field.dataType.simpleString()}: the sink stores "
                "text, "
                "and format('exactlyonce') writes Spark's text exactly only for "
                f"{list(_AS_TEXT)} (cast it to string, or use foreachBatch)",
            )
