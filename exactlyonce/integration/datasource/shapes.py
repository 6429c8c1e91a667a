"""What each sink's task writer is handed on the Spark data source path.

On the ``foreachBatch`` path a sink's ``_project`` shapes each epoch's rows in Spark's plan
(the epoch column's name, Redis's text and JSON values, Elasticsearch's base64 binary). A data
source's tasks see the stream's rows as they are, so the same shaping runs in the task, on
Arrow, after :class:`~exactlyonce.integration.datasource.records.ProtocolColumns`:

- PostgreSQL, Elasticsearch: the user's columns as they are, then the ID and the epoch (named
  ``epoch_column`` / ``epoch_field``); binary columns, which Elasticsearch would base64, are
  refused on this path (:mod:`.support`).
- Redis: :func:`exactlyonce.connectors.redis.projection.project_arrow`, the Arrow twin of the
  sink's Spark projection (stored columns as text, string mode's record JSON, null
  key-template columns as bad records).
- Kafka: :func:`exactlyonce.connectors.kafka.projection.project_arrow`, the Arrow twin of
  its projection: the record ID, the key (if any) and the value as bytes (the row as Spark's
  ``to_json``, or a string column).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from exactlyonce.connectors.elasticsearch.sink import ElasticsearchSink
from exactlyonce.connectors.kafka import projection as kafka_projection
from exactlyonce.connectors.kafka import protocol as kafka_protocol
from exactlyonce.connectors.kafka.sink import KafkaSink
from exactlyonce.connectors.redis.projection import project_arrow
from exactlyonce.connectors.redis.sink import RedisSink
from exactlyonce.connectors.redis.task import VALUE_COLUMN

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from exactlyonce.connectors.base import ExactlyOnceSink

Convert = Callable[["pa.RecordBatch"], "pa.RecordBatch"]


@dataclass(frozen=True)
class SinkShape:
    """The epoch column's name, the columns the task writer writes, and the conversion (None:
    none) from the protocol's batch to what the task writer reads. Picklable."""

    epoch_column: str
    columns: tuple[str, ...]
    convert: Convert | None = None


def sink_shape(sink: ExactlyOnceSink, schema: StructType) -> SinkShape:
    user = tuple(schema.names)
    if isinstance(sink, RedisSink):
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
        return SinkShape(
            sink.epoch_field, (*stored, sink.id_field, sink.epoch_field, *value), convert
        )
    if isinstance(sink, KafkaSink):
        convert = functools.partial(
            kafka_projection.project_arrow,
            user=user,
            key_column=sink.key_column,
            value=sink.value,
        )
        key = (kafka_protocol.KEY_COLUMN,) if sink.key_column is not None else ()
        columns = (sink.id_column, *key, kafka_protocol.VALUE_COLUMN)
        return SinkShape(kafka_protocol.EPOCH_COLUMN, columns, convert)
    if isinstance(sink, ElasticsearchSink):
        return SinkShape(sink.epoch_field, (*user, sink.id_column, sink.epoch_field))
    epoch_column = str(getattr(sink, "epoch_column", "epoch"))
    return SinkShape(epoch_column, (*user, sink.id_column, epoch_column))
