"""The Redis sink on the data source path: :func:`exactlyonce.connectors.redis.projection.
project_arrow`, the Arrow twin of the sink's Spark projection (stored columns as text, string
mode's record JSON, null key-template columns as bad records). ``write="stream"`` is refused:
a stream append is not idempotent by key, so it needs the shard-aligned tasks of
``foreachBatch``."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from exactlyonce.connectors.base.shape import DataSourceTraits, SinkShape
from exactlyonce.connectors.redis.projection import project_arrow
from exactlyonce.connectors.redis.task import VALUE_COLUMN
from exactlyonce.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from exactlyonce.connectors.redis.config import RedisSinkConfig
    from exactlyonce.connectors.redis.sink import RedisSink


def shape(sink: RedisSink, schema: StructType) -> SinkShape:
    user = tuple(schema.names)
    stored = sink.template.fields if sink.write == "string" else user
    value = (VALUE_COLUMN,) if sink.write == "string" else ()
    convert = functools.partial(
        project_arrow,
        user=user,
        template=sink.template,
        write=sink.write,
        id_field=sink.id_field,
        epoch_field=sink.epoch_field,
    )
    return SinkShape(sink.epoch_field, (*stored, sink.id_field, sink.epoch_field, *value), convert)


def refuse(config: RedisSinkConfig) -> None:
    if config.write == "stream":
        raise ConfigError(
            "write",
            "write 'stream' is not exactly-once through format('exactlyonce'): a stream "
            "append is not idempotent by key, so it needs shard-aligned tasks; use 'hash' "
            "or 'string', or foreachBatch",
        )


DATASOURCE = DataSourceTraits(shape=shape, refuse=refuse, text_values=True)
