"""Which sinks and modes the data source path serves, and why the others are refused.

The data source API hands each task the upstream plan's partition as it is: the path cannot
repartition by record ID, so a task's rows are not one shard's, and a re-run of an epoch may
split them differently (SPARK-28650). Shard-commit markers, which let the ``foreachBatch`` path
skip a shard an earlier attempt committed, would then skip rows that attempt never wrote. This
path trusts no marker: it is exactly-once only where the destination itself makes a record's
second write a no-op (see the package docstring for each sink and mode).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exactlyonce.connectors.base.config import SinkConfig
from exactlyonce.connectors.postgres.config import PostgresSinkConfig
from exactlyonce.errors import ConfigError
from exactlyonce.integration.datasource.records import check_key_columns

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

_NOT_COPIED = ("binary", "array", "map", "struct")


def check_supported(config: SinkConfig) -> None:
    """Refuse, before the stream starts, what this path cannot write exactly once."""
    if config.id_from == "content":
        raise ConfigError(
            "id_from",
            "content IDs number identical rows across the whole epoch, which a task of the "
            "data source path cannot see: name id_columns, or use foreachBatch",
        )
    if isinstance(config, PostgresSinkConfig):
        if config.mode != "insert":
            raise ConfigError(
                "mode",
                f"mode {config.mode!r} is not exactly-once through format('exactlyonce'): "
                "without a unique index (append) or with a key written by several tasks of "
                "one epoch (upsert) it needs shard-aligned tasks; use mode 'insert', or "
                "foreachBatch",
            )
        return
    raise ConfigError(
        "sink",
        f"sink {config.type!r} is not served by format('exactlyonce') yet (its records are "  # type: ignore[attr-defined]
        "not idempotent by ID without shard-aligned tasks): use foreachBatch",
    )


def check_stream(config: SinkConfig, schema: StructType) -> None:
    """Refuse a stream column this path cannot hand the sink's task writer as it is."""
    check_key_columns(schema, config.id_columns or ())
    for field in schema.fields:
        kind = field.dataType.typeName()
        if kind in _NOT_COPIED:
            raise ConfigError(
                "sink",
                f"column {field.name!r} is {kind}: format('exactlyonce') writes flat columns "
                "only (to_json() it first, or use foreachBatch)",
            )
