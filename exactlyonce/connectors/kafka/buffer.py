"""A Kafka topic between Spark and a slow sink: the Spark side.

``Buffered(sink, KafkaBuffer(topic=..., bootstrap_servers=...))`` is a ``foreachBatch``
callable. Each micro-batch goes, exactly once, into the buffer topic through the
:class:`~exactlyonce.connectors.kafka.KafkaSink` machinery (one Kafka transaction per shard,
headers with query, epoch, shard, attempt and record ID, commit confirmations and a head with
the topic's frontier on the control topic) and the batch returns. It never waits for the real
sink: a slow or stopped PostgreSQL, Redis or Elasticsearch does not slow or fail the query.
A :class:`~exactlyonce.buffer.drain.drainer.Drainer` moves the records on, through the sink's
drain target (:mod:`exactlyonce.connectors.base.drain`); :func:`check_target` says which sinks,
in which modes.

Why a wrapper and not a ``buffer=`` argument on every sink: the wrapper IS a KafkaSink (its
head, its reports, ``reset_head``, the CLI's ``run``/``check`` work unchanged), and the sinks
stay free of buffer code. The real sink is used for its names, its preflight (with the
stream's schema: PostgreSQL creates the table, every sink checks its columns) and its
connection only.

The buffer's records are the stream's rows as JSON objects (every column), with the record ID
of the real sink's ``id_columns`` (or, with ``id_from="content"``, of the whole row, computed
by Spark before the buffer) and the epoch in headers; the drainer adds them back as the
sink's ID and epoch (columns, fields, ``_id``). They travel in FRAMES: one message holds up
to ``frame_records`` records (one JSON value per line, their IDs in the ``eo-record-ids``
header), so the drainer handles a message per thousand records instead of one per record
(per-message work in Python was the drain's bottleneck: 0.67x direct writes with one record
per message).

Example::

    sink = PostgresSink(dsn, "events", ["event_id"], "clicks-to-pg")
    buffered = Buffered(sink, KafkaBuffer(topic="clicks-buffer", bootstrap_servers="k:9092"))
    start_stream(df, buffered, checkpoint)            # Spark -> buffer topic
    Drainer(sink, buffered.buffer).run()               # buffer topic -> PostgreSQL
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

from exactlyonce.connectors import registry
from exactlyonce.connectors.base import ExactlyOnceSink
from exactlyonce.connectors.base.guarantee import Guarantee, GuaranteeReport
from exactlyonce.connectors.base.rewind import Refused, Rewind
from exactlyonce.connectors.kafka import KafkaSink
from exactlyonce.connectors.kafka.buffer_config import KafkaBuffer
from exactlyonce.dedup.catalog import DedupConfig
from exactlyonce.errors import ConfigError, SinkUnavailableError

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

log = logging.getLogger("exactlyonce.buffer")


def check_target(sink: object) -> ExactlyOnceSink:
    """The sinks a drainer can write to, in the modes it keeps exactly-once: ConfigError
    (field ``buffer``) for any other."""
    if getattr(getattr(sink, "config", None), "mode", None) == "upsert":
        # The drain targets write records as they are; the epoch guard is the sinks' own.
        raise ConfigError(
            "buffer",
            "a buffer cannot sit in front of a sink in mode='upsert' yet (the drainer does not "
            "apply the epoch guard); write upserts directly",
        )
    kind = registry.kind_of(sink) if isinstance(sink, ExactlyOnceSink) else None
    target = None if kind is None else kind.drain_target()
    if target is None:
        drained = ", ".join(k.name for k in registry.kinds() if k.drain is not None)
        raise ConfigError(
            "buffer", f"a buffer drains into a {drained} sink; {type(sink).__name__} has no drainer"
        )
    target.check(sink)
    assert isinstance(sink, ExactlyOnceSink)
    return sink


class Buffered(KafkaSink):
    """``sink`` behind a Kafka buffer: a KafkaSink into ``buffer.topic`` that names ``sink``.

    The stream's query name and record identity (``id_columns`` or ``id_from``) are the real
    sink's. Dedup (the Redis
    catalog) follows the real sink's setting unless ``dedup`` is given.
    """

    kind = "buffer"

    def __init__(
        self,
        sink: ExactlyOnceSink,
        buffer: KafkaBuffer,
        *,
        dedup: bool | DedupConfig | None = None,
        check: bool = True,
    ) -> None:
        self.target = check_target(sink)
        self.buffer = buffer
        if dedup is None:
            dedup = sink.dedup_config if sink.dedup_config is not None else False
        if dedup is False and not sink.unique_sink:
            raise ConfigError(
                "dedup",
                f"{sink.sink_name} appends (a second copy of an ID is a second entry): the "
                "buffer needs the catalog to keep duplicates of the input out",
            )
        super().__init__(
            buffer.bootstrap_servers,
            buffer.topic,
            list(sink.ids.columns) or None,
            sink.query_name,
            id_from=sink.ids.id_from,
            value="json",
            control_topic=buffer.control_topic,
            dead_letter_topic=buffer.sink_dead_letter_topic,
            create_topic=buffer.create_topic,
            partitions=buffer.partitions,
            producer_config=dict(buffer.client_config) or None,
            transaction_timeout_ms=buffer.transaction_timeout_ms,
            shards=buffer.shards if buffer.shards is not None else sink.shards,
            dedup=dedup,
            check=check,
        )
        self.frame_records = buffer.frame_records
        self.frame_bytes = buffer.frame_bytes
        self._target_ready = False

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as what builds it (see :meth:`ExactlyOnceSink.__reduce__`): the real sink,
        the buffer's settings and the dedup setting, no preflight again."""
        dedup = self.dedup_config if self.dedup_config is not None else False
        return (functools.partial(Buffered, dedup=dedup, check=False), (self.target, self.buffer))

    def rewinder(self) -> Rewind:
        return Refused(
            f"the query's head is the Kafka buffer's: the records of epochs above N are "
            f"committed to buffer topic {self.buffer.topic!r}, whose records cannot be removed, "
            f"and the drainer may have moved them into {self.target.sink_name} already. To "
            "redo those epochs, start over with a new query_name, a new buffer topic and a new "
            "checkpoint"
        )

    def preflight(self, schema: StructType | None = None) -> None:
        """The buffer's preflight, then the real sink's with the stream's schema (PostgreSQL
        creates the table from it; every sink checks the columns it needs). A sink that is down
        now is not an error: batches go on into the buffer, and the next batch tries again;
        the drainer waits for the sink."""
        super().preflight(schema)
        if schema is not None:
            self._check_columns(schema)
            self._prepare_target(schema)

    def _check_columns(self, schema: StructType) -> None:
        from pyspark.sql import types as T

        binary = [f.name for f in schema.fields if isinstance(f.dataType, T.BinaryType)]
        if binary:
            raise ConfigError(
                "buffer",
                f"binary column(s) {binary} cannot travel through the buffer's JSON values; "
                "cast them to base64 or hex strings first",
            )

    def _prepare_target(self, schema: StructType) -> None:
        if self._target_ready:
            return
        try:
            self.target.preflight(schema)
        except SinkUnavailableError as exc:
            log.warning(
                "%s: the sink is not reachable (%s); batches go on into the buffer, the drainer "
                "waits for the sink",
                self,
                exc,
            )
            return
        self._target_ready = True

    def guarantee(self) -> Guarantee:
        kafka = super().guarantee()
        return Guarantee(f"EXACTLY ONCE into the buffer topic {self.topic}", kafka.mechanism)

    def report_parts(self) -> list[GuaranteeReport]:
        """After the buffer topic's report (a KafkaSink's): the drain into the real sink and
        the drain's dead letters (:mod:`exactlyonce.connectors.kafka.buffer_check`)."""
        from exactlyonce.connectors.kafka.buffer_check import drain_parts

        return drain_parts(self)

    def output_secrets(self) -> list[str]:
        return [*super().output_secrets(), *self.target.output_secrets()]

    def prepare_batch(self, schema: StructType) -> None:
        """A sink that was down at the start is prepared before a later batch."""
        if not self._target_ready:
            self._check_columns(schema)
            self._prepare_target(schema)

    def __repr__(self) -> str:
        return (
            f"Buffered(query_name={self.query_name!r}, buffer={self.topic!r}, "
            f"sink={self.target.sink_name!r})"
        )
