"""The Kafka sink on the data source path: what the driver adds to the tasks' claims.

The tasks (:mod:`exactlyonce.connectors.kafka.partition_task`) write one Spark partition
each, claiming its IDs in the catalog (:mod:`exactlyonce.dedup.claims`); the driver:

- at the start, refuses a broker the sink did not measure to hide aborted records (a plain
  ``read_committed`` consumer must see each record once, and a task trusts the commit marker
  of an earlier attempt); marks in the catalog the IDs of every attempt that committed above
  the head (the topic says which: the head is the truth, the catalog a cache), then drops
  the claims of earlier runs: only this run's tasks make promises this run keeps;
- before it advances the head, checks that every Spark partition registered for the epoch
  in this run ran in this attempt with rows (each with the input it registered: the task
  refuses another). A claim is a promise that its partition writes the ID; a partition that
  claimed and is not in the final attempt would leave its claimed IDs unwritten, so the epoch
  is refused instead (:class:`~exactlyonce.errors.EpochSplitError`). Within one run Spark
  retries a task on the same partition, so this is a guard, not a path taken. The registry
  is read with the catalog's instance: a catalog lost since the tasks ran fails the commit
  (the restart rebuilds it);
- after the head moved, forgets the epoch's claims.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from exactlyonce.connectors.base.shape import DataSourceTraits, SinkShape
from exactlyonce.connectors.kafka import projection, protocol
from exactlyonce.connectors.kafka.avro import AVRO
from exactlyonce.connectors.kafka.config import KafkaSinkConfig
from exactlyonce.connectors.kafka.connect_json import JSON_WITH_SCHEMA
from exactlyonce.connectors.kafka.sink import KafkaSink
from exactlyonce.dedup import claims
from exactlyonce.dedup.keeper import CatalogKeeper
from exactlyonce.errors import ConfigError, EpochSplitError

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

log = logging.getLogger("exactlyonce.datasource")


def check_broker(sink: KafkaSink) -> None:
    """Refuse a broker that delivers aborted records to read_committed consumers."""
    if sink.hides_aborted is not True:
        raise ConfigError(
            "bootstrap_servers",
            f"{sink.where} delivers records of aborted transactions to read_committed "
            "consumers (measured by the sink's preflight; Tansu does): format('exactlyonce') "
            "writes Kafka only to a broker that hides them (Apache Kafka), for a task there "
            "trusts an earlier attempt's commit marker; use foreachBatch and the consumption "
            "recipe (exactlyonce.connectors.kafka.reader)",
        )


def keeper_of(sink: KafkaSink) -> CatalogKeeper:
    dedup = sink.dedup_config
    assert dedup is not None, "support.check_supported refuses Kafka without the catalog"
    return CatalogKeeper(dedup, sink.query_name, sink.sink_name, sink.unique_sink, None)


def start(sink: KafkaSink) -> None:
    """At the start, after the sink opened the catalog and fenced every older producer:
    mark the IDs of the attempts that committed above the head (read from the topic), then
    drop every claim and registry of an earlier run (see :mod:`exactlyonce.dedup.claims`).
    Tasks run only after both."""
    check_broker(sink)
    marked = sink.mark_committed_since_head()
    keeper = keeper_of(sink)
    try:
        dropped = claims.forget_through(keeper.catalog)
    finally:
        keeper.catalog.close()
    log.info(
        "%s: %d IDs committed above the head marked, %d claim keys dropped", sink, marked, dropped
    )


def check_partitions(sink: KafkaSink, epoch: int, instance: str | None, ran: Sequence[int]) -> None:
    """Every partition registered for ``epoch`` ran in this attempt (``ran``: the partitions
    whose task had rows); else raise EpochSplitError. ``instance``: the catalog the tasks
    used (None: no task had rows; the catalog's current one)."""
    keeper = keeper_of(sink)
    try:
        if instance is None:
            if not keeper.attach():
                return  # no catalog, hence no claims
            instance = keeper.instance
        assert instance is not None
        registry = claims.registered(keeper.catalog, instance, epoch)
    finally:
        keeper.catalog.close()
    missing = sorted(set(registry) - set(ran))
    if missing:
        raise EpochSplitError(
            f"{sink}: epoch {epoch}: Spark partitions {missing} of an earlier attempt claimed "
            f"records, and this attempt has no such partition with rows (it ran {sorted(ran)}): "
            "Spark split the re-run epoch differently (SPARK-28650). Their records may be "
            "unwritten, so the head stays and the query stops. A restart that splits the "
            "epoch as before continues; use foreachBatch for a source whose re-runs split "
            "differently"
        )


def forget_claims(sink: KafkaSink, epoch: int) -> None:
    """After the head passed ``epoch`` (best effort: the next start drops every claim)."""
    keeper = keeper_of(sink)
    try:
        if keeper.attach():
            assert keeper.layout is not None
            claims.forget(keeper.catalog, keeper.layout.shards, epoch)
    except Exception as exc:
        log.warning("%s: claims of epoch %d not dropped: %s", sink, epoch, type(exc).__name__)
    finally:
        keeper.catalog.close()


def shape(sink: KafkaSink, schema: StructType) -> SinkShape:
    """The record ID, the key (if any) and the value as bytes: the Arrow twin of the sink's
    projection (:func:`exactlyonce.connectors.kafka.projection.project_arrow`)."""
    convert = functools.partial(
        projection.project_arrow,
        user=tuple(schema.names),
        key_column=sink.key_column,
        value=sink.value,
    )
    key = (protocol.KEY_COLUMN,) if sink.key_column is not None else ()
    return SinkShape(protocol.EPOCH_COLUMN, (sink.id_column, *key, protocol.VALUE_COLUMN), convert)


def refuse(config: KafkaSinkConfig) -> None:
    """Kafka appends: this path needs the catalog (for its claims) and a value it can write
    byte for byte as the ``foreachBatch`` projection does. The broker is checked at the
    start (it must hide aborted records: :func:`check_broker`)."""
    if config.dedup is False:
        raise ConfigError(
            "dedup",
            "format('exactlyonce') writes Kafka only with the catalog: its tasks are Spark "
            "partitions, not shards, and claim each record ID in it so that two of them "
            "never append one record; turn dedup on (the default)",
        )
    if config.value in (JSON_WITH_SCHEMA, AVRO):
        raise ConfigError(
            "value",
            f"value {config.value!r} is not written by format('exactlyonce'): use 'json' or "
            "a string column, or foreachBatch",
        )


def before_head(
    sink: KafkaSink, epoch: int, instance: str | None, ran: Sequence[int], tasks: int
) -> None:
    check_partitions(sink, epoch, instance, ran)
    sink.marker_slots = tasks


DATASOURCE = DataSourceTraits(
    shape=shape,
    refuse=refuse,
    text_values=True,
    start=start,
    before_head=before_head,
    after_head=forget_claims,
)
