"""Resume a new checkpoint from what the sink holds: ``exactlyonce heads PIPELINE
--starting-offsets`` prints Spark's ``startingOffsets`` JSON from the sink's source frontiers
(the next Kafka offset to write per (topic, partition), committed by a Real-time Mode writer in
the same transaction as its rows: :mod:`exactlyonce.connectors.base.frontier`).

A checkpoint that was deleted, corrupted, or must be replaced after an incompatible change of
the query can then start where the sink stopped instead of at ``earliest`` or at offsets picked
by hand. Read-only. Fails closed (ConfigError naming the field): a pipeline without a Kafka
source, a sink that keeps no frontiers, a query that never committed by frontier, a frontier of
a partition the brokers no longer list.
"""

from __future__ import annotations

import json
import re
from typing import Any

from exactlyonce.connectors.base.frontier import starting_offsets
from exactlyonce.errors import ConfigError
from exactlyonce.integration.config import PipelineConfig
from exactlyonce.integration.config.sources import KafkaSourceConfig

METADATA_TIMEOUT_S = 10.0
# Spark's Kafka options a librdkafka admin client takes as they are (without "kafka.").
CLIENT_OPTIONS = ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password")


def resume_offsets(cfg: PipelineConfig, sink: Any) -> dict[str, dict[str, int]]:
    """Spark's ``startingOffsets`` for ``cfg``'s Kafka source from ``sink``'s frontiers."""
    source = kafka_source(cfg)
    return starting_offsets(sink_frontiers(cfg, sink), source_partitions(source))


def resumed_source(cfg: PipelineConfig, sink: Any) -> tuple[KafkaSourceConfig, str]:
    """``resume: from_sink``: the Kafka source starting at the sink's frontiers (Spark uses
    ``startingOffsets`` for a new checkpoint only), and a line saying where it starts. A sink
    that holds no frontier for the query yet (its first run) starts where the file says."""
    source = kafka_source(cfg)
    frontiers = sink_frontiers(cfg, sink)
    if not frontiers:
        return source, "resume from_sink: no frontier yet, a new checkpoint starts at " + (
            source.starting_offsets
        )
    offsets = json.dumps(starting_offsets(frontiers, source_partitions(source)))
    resumed = source.model_copy(update={"starting_offsets": offsets})
    return resumed, f"resume from_sink: a new checkpoint starts at the sink's frontiers {offsets}"


def kafka_source(cfg: PipelineConfig) -> KafkaSourceConfig:
    if not isinstance(cfg.source, KafkaSourceConfig):
        raise ConfigError("source.type", "resuming from the sink needs a Kafka source")
    return cfg.source


def sink_frontiers(cfg: PipelineConfig, sink: Any) -> dict[tuple[str, int], int]:
    """The sink's source frontiers for the query; ConfigError for a sink that keeps none."""
    read = getattr(sink, "source_frontiers", None)
    if read is None:
        raise ConfigError(
            "sink.type",
            f"the {cfg.sink.type} sink keeps no source frontiers: only a sink's Real-time "
            "Mode writer does",
        )
    found: dict[tuple[str, int], int] = read()
    return found


def source_partitions(source: KafkaSourceConfig) -> dict[str, list[int]]:
    """Every partition of each topic the source subscribes to, as the brokers list them."""
    from confluent_kafka.admin import AdminClient

    settings: dict[str, str | int | float | bool] = {"bootstrap.servers": source.bootstrap_servers}
    settings |= {
        key: value
        for key, value in ((k.removeprefix("kafka."), v) for k, v in source.options.items())
        if key in CLIENT_OPTIONS
    }
    try:
        metadata = AdminClient(settings).list_topics(timeout=METADATA_TIMEOUT_S)
    except Exception as exc:  # KafkaException: the brokers did not answer in time
        raise ConfigError(
            "source.bootstrap_servers",
            f"the brokers did not list their topics within {METADATA_TIMEOUT_S:.0f} s: {exc}",
        ) from exc
    topics = {
        name: sorted(meta.partitions)
        for name, meta in metadata.topics.items()
        if _subscribed(source, name) and meta.error is None
    }
    if not topics:
        raise ConfigError(
            "source.topic", f"the brokers list no topic the source subscribes to ({_what(source)})"
        )
    return topics


def _subscribed(source: KafkaSourceConfig, topic: str) -> bool:
    if source.topic is not None:
        return topic in {t.strip() for t in source.topic.split(",")}
    return re.fullmatch(str(source.subscribe_pattern), topic) is not None


def _what(source: KafkaSourceConfig) -> str:
    return source.topic or f"pattern {source.subscribe_pattern}"
