"""The Elasticsearch family's sinks on the data source path: the user's columns as they are,
then the record ID and the epoch (``epoch_field``); binary columns, which the ``foreachBatch``
projection would base64, are refused on this path."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exactlyonce.connectors.base.shape import DataSourceTraits, SinkShape

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from exactlyonce.connectors.search.sink import SearchSink


def shape(sink: SearchSink, schema: StructType) -> SinkShape:
    return SinkShape(sink.epoch_field, (*schema.names, sink.id_column, sink.epoch_field))


DATASOURCE = DataSourceTraits(shape=shape)
