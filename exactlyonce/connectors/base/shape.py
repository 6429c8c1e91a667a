"""What a sink's task writer is handed on the Spark data source path, and how.

On the ``foreachBatch`` path a sink's projection shapes each epoch's rows in Spark's plan
(the epoch column's name, Redis's text and JSON values, Elasticsearch's base64 binary). A data
source's tasks see the stream's rows as they are, so the same shaping runs in the task, on
Arrow. Each sink says how in its ``datasource`` module (a :class:`DataSourceTraits`), named
by its registry entry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

Convert = Callable[["pa.RecordBatch"], "pa.RecordBatch"]


@dataclass(frozen=True)
class SinkShape:
    """The epoch column's name, the columns the task writer writes, and the conversion (None:
    none) from the protocol's batch to what the task writer reads. Picklable."""

    epoch_column: str
    columns: tuple[str, ...]
    convert: Convert | None = None


def table_shape(sink: Any, schema: StructType) -> SinkShape:
    """The user's columns as they are, then the ID and the epoch (``epoch_column``)."""
    epoch_column = str(getattr(sink, "epoch_column", "epoch"))
    return SinkShape(epoch_column, (*schema.names, sink.id_column, epoch_column))


def _nothing(*args: Any) -> None:
    return None


@dataclass(frozen=True)
class DataSourceTraits:
    """A sink on the ``format("exactlyonce")`` path (driver side, never pickled).

    - ``shape(sink, schema)``: the :class:`SinkShape` its tasks write;
    - ``refuse(config)``: raise ConfigError for what this path cannot write exactly once
      with this sink (before the stream starts);
    - ``text_values``: the sink stores every value as text, so a column must be of a type
      whose text Spark and the task agree on;
    - ``start(sink)``: once per query run, after the sink's start;
    - ``before_head(sink, epoch, catalog_instance, partitions_with_rows, tasks)``: in the
      driver's commit, before the head moves; raise to refuse the commit;
    - ``after_head(sink, epoch)``: after the head moved.
    """

    shape: Callable[[Any, StructType], SinkShape] = table_shape
    refuse: Callable[[Any], None] = _nothing
    text_values: bool = False
    start: Callable[[Any], None] = _nothing
    before_head: Callable[[Any, int, str | None, Sequence[int], int], None] = _nothing
    after_head: Callable[[Any, int], None] = _nothing
