"""The stream writer: tasks write Arrow batches, the driver advances the head per epoch.

Who calls what (pyspark 4.1+, ``DataSourceStreamArrowWriter``):

- ``DataSource.streamWriter()`` runs in a Python process on the driver once per query run;
  Spark pickles the writer it returns, once, to ship it to the tasks. :meth:`__getstate__`
  therefore does what the first epoch of a ``foreachBatch`` run does
  (:meth:`~exactlyonce.connectors.base.ExactlyOnceSink.start`: preflight, head read once,
  checkpoint check, catalog opened) and the tasks get its outcome.
- :meth:`write` runs in each task. Its epoch and Spark query id are the task's local
  properties (``streaming.sql.batchId``, ``sql.streaming.queryId``). It refuses a head
  another checkpoint wrote (invariant 9), or one with committed epochs when it sees no query
  id (invariant 13; the start, whose driver sees the id only in a local checkpoint's
  ``metadata``, leaves that check to the tasks), skips an epoch at or below the head read at start,
  else adds the protocol's columns, shapes the rows as the sink's projection does
  (its registry entry's ``datasource``), and writes through the sink's own task writer with
  no shard marker (:meth:`~exactlyonce.connectors.base.ShardWriter.write_unaligned`; Kafka's
  writes one transaction per Spark partition, with its own marker and ID claims:
  :mod:`exactlyonce.connectors.kafka.datasource`).
- :meth:`commit` (every task succeeded) and :meth:`abort` run in a new Python process on the
  driver per epoch, on a writer Spark builds anew (never pickled): commit advances the head,
  abort leaves it alone.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from exactlyonce.connectors import registry
from exactlyonce.connectors.base.head import Head
from exactlyonce.connectors.base.report import BatchReport, TaskResult
from exactlyonce.connectors.base.sink import refuse_another_checkpoint
from exactlyonce.connectors.base.task import ShardWriter
from exactlyonce.dedup.keeper import CatalogKeeper
from exactlyonce.dedup.shard import DedupPlan
from exactlyonce.faults import crash_point
from exactlyonce.integration.datasource.options import checkpoint_location, sink_config
from exactlyonce.integration.datasource.records import ProtocolColumns
from exactlyonce.integration.datasource.support import check_stream, check_supported

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from exactlyonce.connectors.base import ExactlyOnceSink
    from exactlyonce.connectors.base.config import SinkConfig

log = logging.getLogger("exactlyonce.datasource")

# The catalog's shard count when ``shards`` is not given: the driver that starts the query
# runs outside Spark's context here, so Spark's default parallelism is not known.
DEFAULT_SHARDS = 8


@dataclass
class EpochMessage(WriterCommitMessage):
    """What a task tells the driver's commit: its result, or that the epoch was skipped."""

    spark_query_id: str | None
    skipped: bool
    result: dict[str, Any] = field(default_factory=dict)
    partition: int = -1
    # The catalog instance the task used (None: no row, or no catalog): Kafka's commit check
    catalog_instance: str | None = None


@dataclass(frozen=True)
class Started:
    """The outcome of the driver's start, pickled to every task."""

    head: Head
    writer: ShardWriter[Any]
    columns: ProtocolColumns


def build_sink(config: SinkConfig) -> ExactlyOnceSink:
    """The sink ``config`` describes, as its constructor builds it (its checks ran when the
    query started). Found in the registry by the config's type alone: every commit runs in
    a new Python process, which should not import every sink's package and client library
    (as the pipeline files' config module does) to write one of them."""
    return registry.kind_of(config).sink_class().from_config(config, check=False)


class ExactlyOnceStreamWriter(DataSourceStreamArrowWriter):
    """Writes each epoch of a stream exactly once through a sink whose record writes are
    idempotent by ID (see :mod:`exactlyonce.integration.datasource`)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = dict(options)
        self.schema_json = schema.json()
        self.config = sink_config(self.options)
        check_supported(self.config)
        check_stream(self.config, schema)
        self.started: Started | None = None

    # -- the driver, once per query run --------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        if self.started is None:
            self.started = self._start()
        return self.__dict__

    def _start(self) -> Started:
        from pyspark.sql.types import StructType

        schema = StructType.fromJson(json.loads(self.schema_json))
        sink = build_sink(self.config)
        shards = self.config.shards or DEFAULT_SHARDS
        query_id = checkpoint_query_id(self.options)
        head = sink.start(schema, query_id, lambda: shards, checked_by_tasks=True)
        traits = registry.kind_of(sink).datasource_traits()
        shape = traits.shape(sink, schema)
        columns = ProtocolColumns(
            tuple(self.config.id_columns or ()),
            sink.id_column,
            shape.epoch_column,
            head.num_shards,
            shape.convert,
        )
        writer = sink.task_writer(head.epoch, shape.columns)
        assert isinstance(writer, ShardWriter)
        traits.start(sink)
        log.info("%s: started through format('exactlyonce'), head %s", sink, head)
        return Started(head, writer, columns)

    # -- each task -------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> EpochMessage:
        from pyspark import TaskContext

        started = self.started
        assert started is not None, "the writer reaches a task only pickled, hence started"
        context = TaskContext.get()
        assert context is not None
        epoch = int(context.getLocalProperty("streaming.sql.batchId") or "-1")
        query_id = context.getLocalProperty("sql.streaming.queryId")
        head = started.head
        self._refuse_another_checkpoint(head, query_id)
        if head.covers(epoch):
            return EpochMessage(query_id, skipped=True)
        crash_point("before_write", epoch)
        batches = (started.columns.add(b, epoch) for b in iterator if b.num_rows)
        partition = context.partitionId()
        result = started.writer.for_epoch(epoch).write_unaligned(batches, partition)
        dedup = getattr(started.writer.target, "dedup", None) if result.rows else None
        instance = dedup.instance if isinstance(dedup, DedupPlan) else None
        return EpochMessage(query_id, False, result.__dict__, partition, instance)

    # -- the driver, per epoch ---------------------------------------------------------------

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        sent = [m for m in messages if isinstance(m, EpochMessage)]
        if sent and all(m.skipped for m in sent):
            log.info("epoch %d <= the head: already committed, skipped", batchId)
            return
        query_id = next((m.spark_query_id for m in sent if m.spark_query_id), None)
        sink = build_sink(self.config)
        head = sink.head()
        if head is not None:
            self._refuse_another_checkpoint(head, query_id)
        traits = registry.kind_of(sink).datasource_traits()
        traits.before_head(sink, batchId, *claimed(sent), len(messages))
        crash_point("before_head", batchId)
        sink.commit_epoch(batchId, query_id)
        traits.after_head(sink, batchId)
        tasks = [TaskResult(**m.result) for m in sent if not m.skipped]
        report = BatchReport.from_tasks(sink.query_name, sink.sink_name, batchId, tasks)
        log.info("%s epoch %d committed: %s", sink, batchId, report)
        forget_journals(sink, batchId)

    def _refuse_another_checkpoint(self, head: Head, query_id: str | None) -> None:
        """Invariants 9 and 13 where the data source path sees the Spark query id: in every
        task, before it writes or skips anything, and in every commit. An id no task could
        establish is refused over committed epochs (the config's opt-out aside)."""
        config = self.config
        trust = config.allow_unknown_query_id
        refuse_another_checkpoint(config.head_name, config.query_name, head, query_id, trust=trust)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        log.warning(
            "query %r epoch %d aborted by Spark: the head stays; the re-run writes the epoch "
            "again, record by record idempotently",
            self.config.query_name,
            batchId,
        )


def claimed(sent: list[EpochMessage]) -> tuple[str | None, list[int]]:
    """The catalog instance the tasks claimed in, and the partitions whose task had rows."""
    ran = [m for m in sent if not m.skipped and m.result.get("rows")]
    instance = next((m.catalog_instance for m in ran if m.catalog_instance), None)
    return instance, [m.partition for m in ran]


def checkpoint_query_id(options: Mapping[str, str]) -> str | None:
    """The Spark query id in a local checkpoint's ``metadata`` file (Spark writes it before
    planning the query); None where the checkpoint is not a local path: the tasks, which see
    the id, check it then."""
    location = checkpoint_location(options)
    if not location:
        return None
    path = Path(location.removeprefix("file:")) / "metadata"
    try:
        value = json.loads(path.read_text().splitlines()[0]).get("id")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return str(value) if value else None


def forget_journals(sink: ExactlyOnceSink, epoch: int) -> None:
    """The catalog's housekeeping after the head moved (best effort: the catalog is a cache)."""
    dedup = sink.dedup_config
    if dedup is None:
        return
    keeper = CatalogKeeper(dedup, sink.query_name, sink.sink_name, sink.unique_sink, None)
    try:
        if keeper.attach():
            keeper.after_head(epoch)
    except Exception as exc:
        log.warning("catalog housekeeping after epoch %d skipped: %s", epoch, type(exc).__name__)
    finally:
        keeper.catalog.close()
